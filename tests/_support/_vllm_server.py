"""vLLM's OpenAI-compatible server in a process of its own, on the tiny local model, sending
its spans to an OTLP receiver (tests/system/test_vllm_real.py, test_areal_vllm.py)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@contextlib.contextmanager
def running_vllm_server(python: str, model: str, receiver: Any, log_dir: Path,
                env: dict[str, str]) -> Iterator[str]:  # fmt: skip
    """Start the server (``python -m vllm.entrypoints.openai.api_server``, float32, eager,
    served as ``tiny``), wait until it is healthy (at most 10 minutes; its log on failure)
    and yield its ``127.0.0.1:port``; stopped on exit."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log_path = log_dir / "server.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
             "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
             "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024",
             "--otlp-traces-endpoint", receiver.grpc_endpoint],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 600
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail("vLLM's server did not start:\n" + log_path.read_text()[-4000:])
                time.sleep(1)
            yield f"127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
