#!/usr/bin/env python3
"""End-to-end check on a GPU machine: vLLM's llm_request spans nest under otel-rollout's
generate spans.

It starts an in-script OTLP receiver (otel_rollout.testing.receiver.OTLPReceiver), writes
a tiny Qwen2 config and a word-level tokenizer to a temporary folder (no download: vLLM
fills the weights with random values, --load-format dummy), and then, for each mode:

  inprocess  AsyncLLM(otlp_traces_endpoint=<receiver>) wrapped with wrap_generate(engine);
             the generate span's traceparent travels as AsyncLLM.generate(trace_headers=).
             Also expects otel-rollout's one-time warning about vLLM's global provider.
  http       `vllm serve <model> --otlp-traces-endpoint <receiver>` (as python -m
             vllm.entrypoints.cli.main serve ...); /v1/completions is posted with
             headers=trace_headers() from inside traj.generate().

Each mode runs --trajectories trajectories of two turns. Our spans stay in memory
(otel_rollout.testing.make_test_env); vLLM exports its spans to the receiver over gRPC. The
check asserts that every generate span has exactly one llm_request span whose parent is
that generate span (same trace id), and prints one line: PASS or FAIL with the reasons.
Exit status 0 on PASS, 1 on FAIL, 2 when it cannot run (no vLLM, no CUDA), 3 on timeout.

Needs: otel-rollout installed with the otlp extra, vllm (0.33 checked), transformers and
tokenizers (vLLM's own dependencies), one CUDA GPU. Not run in CI.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

NAME = "vllm_gpu_check"
MODEL_NAME = "tiny-qwen2"
PROMPT_TOKENS = 4
MAX_TOKENS = 8
_children: list[subprocess.Popen] = []


def result(ok: bool, message: str, code: int | None = None) -> None:
    print(f"{'PASS' if ok else 'FAIL'} {NAME}: {message}", flush=True)
    for proc in _children:
        stop(proc)
    sys.exit(0 if ok else (code or 1))


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except Exception:
        with contextlib.suppress(Exception):
            os.killpg(proc.pid, signal.SIGKILL)


def watchdog(timeout_s: float) -> None:
    def fire() -> None:
        print(f"FAIL {NAME}: timed out after {timeout_s:.0f} s", flush=True)
        for proc in _children:
            with contextlib.suppress(Exception):
                os.killpg(proc.pid, signal.SIGKILL)
        os._exit(3)

    timer = threading.Timer(timeout_s, fire)
    timer.daemon = True
    timer.start()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_tiny_model(folder: Path, tokenizer_folder: Path) -> None:
    """A 2-layer Qwen2 config and a word-level tokenizer ``w0 w1 ...``; no weights.

    The tokenizer has its own folder: next to a config.json, AutoTokenizer would pick
    the model type's tokenizer class (Qwen2's byte-level BPE) and ignore tokenizer.json.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config

    vocab_size = 1024
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"w{i}": i + 3 for i in range(vocab_size - 3)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # decodes words joined by spaces
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<unk>",
        model_max_length=256,
    )
    fast.save_pretrained(tokenizer_folder)
    Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,  # head_dim 64: supported by every attention backend
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        torch_dtype="float16",
    ).save_pretrained(folder)


def check_parentage(
    gens: list[Any], received: list[Any], expect_attrs: bool
) -> tuple[list[str], dict[str, Any]]:
    """Problems found, and one matched llm_request span's attributes (for the report)."""
    problems: list[str] = []
    requests = [s for s in received if s.name == "llm_request"]
    by_parent: dict[tuple[str, str], list[Any]] = {}
    for r in requests:
        by_parent.setdefault((r.trace_id, r.parent_span_id or ""), []).append(r)
    sample: dict[str, Any] = {}
    for g in gens:
        key = (format(g.context.trace_id, "032x"), format(g.context.span_id, "016x"))
        kids = by_parent.get(key, [])
        if len(kids) != 1:
            problems.append(f"generate {key[1]} has {len(kids)} llm_request children")
            continue
        sample = kids[0].attributes
        a = dict(g.attributes or {})
        if expect_attrs:
            if a.get("gen_ai.usage.input_tokens") != PROMPT_TOKENS:
                problems.append(f"input_tokens {a.get('gen_ai.usage.input_tokens')}")
            if a.get("gen_ai.usage.output_tokens") != MAX_TOKENS:
                problems.append(f"output_tokens {a.get('gen_ai.usage.output_tokens')}")
            if "gen_ai.latency.time_in_queue" not in a:
                problems.append("no engine timings on the generate span")
    if not gens:
        problems.append("no generate spans")
    stray = len(requests) - len(gens)
    if stray > 0:
        problems.append(f"{stray} llm_request spans not under a generate span")
    return problems, sample


async def run_inprocess(model_dir: Path, receiver: Any, n: int, warnings_seen: list[str]) -> str:
    from opentelemetry import trace
    from vllm import AsyncEngineArgs, SamplingParams
    from vllm.v1.engine.async_llm import AsyncLLM

    from otel_rollout.integrations.vllm import wrap_generate
    from otel_rollout.testing import make_test_env

    env = make_test_env()
    args = AsyncEngineArgs(
        model=str(model_dir),
        tokenizer=str(model_dir.parent / "tokenizer"),
        served_model_name=[MODEL_NAME],
        load_format="dummy",
        dtype="float16",
        max_model_len=256,
        gpu_memory_utilization=0.2,
        enforce_eager=True,
        disable_log_stats=False,  # RequestOutput.metrics -> engine timings
        otlp_traces_endpoint=receiver.grpc_endpoint,
    )
    engine = wrap_generate(AsyncLLM.from_engine_args(args))
    sp = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, temperature=0.0)

    async def one(i: int) -> None:
        async with env.tracer.trajectory(env="gpu-check", instance_id=i, repetition_id=0) as tr:
            for turn in range(2):
                prompt = {"prompt_token_ids": [3 + i, 4 + turn, 5, 6][:PROMPT_TOKENS]}
                async for _ in engine.generate(prompt, sp, f"inproc-{i}-{turn}"):
                    pass
                async with tr.env_step():
                    await asyncio.sleep(0.01)

    try:
        await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        trace.get_tracer_provider().force_flush()  # vLLM's provider, global in-process
        engine.shutdown()
    gens = env.spans("generate")
    receiver.wait_for(
        lambda r: sum(s.name == "llm_request" for s in r.spans()) >= len(gens), timeout=30
    )
    problems, sample = check_parentage(gens, receiver.spans(), expect_attrs=True)
    if not any("vLLM's in-process tracing" in w for w in warnings_seen):
        problems.append("no warning about vLLM's global tracer provider")
    env.shutdown()
    if problems:
        raise AssertionError("; ".join(problems))
    keys = sorted(k for k in sample if k.startswith("gen_ai.latency."))
    return f"inprocess {len(gens)} generate spans each parent one llm_request ({', '.join(keys)})"


async def run_http(model_dir: Path, receiver: Any, n: int, log_path: Path) -> str:
    from otel_rollout.integrations.vllm import trace_headers
    from otel_rollout.testing import make_test_env

    port = free_port()
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model_dir),
        "--served-model-name", MODEL_NAME,
        "--tokenizer", str(model_dir.parent / "tokenizer"),
        "--load-format", "dummy", "--dtype", "float16", "--max-model-len", "256",
        "--gpu-memory-utilization", "0.2", "--enforce-eager",
        "--host", "127.0.0.1", "--port", str(port),
        "--otlp-traces-endpoint", receiver.grpc_endpoint,
    ]  # fmt: skip
    log = open(log_path, "wb")  # noqa: SIM115 - closed after the server stops
    # an in-process engine earlier in this script wrote its endpoint into os.environ
    child_env = {k: v for k, v in os.environ.items() if k != "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=child_env
    )
    _children.append(proc)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise AssertionError(f"server exited with {proc.returncode}: {tail}")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as resp:
                if resp.status == 200:
                    break
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError("server not healthy after 300 s")
        await asyncio.sleep(1)

    def post(body: dict, headers: dict) -> dict:
        req = urllib.request.Request(
            f"{base}/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", **headers},
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read())

    env = make_test_env()

    async def one(i: int) -> None:
        async with env.tracer.trajectory(env="gpu-check", model=MODEL_NAME, instance_id=i) as tr:
            for turn in range(2):
                body = {
                    "model": MODEL_NAME,
                    "prompt": " ".join(f"w{j}" for j in (i, turn, 5, 6)[:PROMPT_TOKENS]),
                    "max_tokens": MAX_TOKENS,
                    "ignore_eos": True,
                    "temperature": 0.0,
                }
                async with tr.generate() as gen:
                    out = await asyncio.to_thread(post, body, trace_headers())
                    usage = out.get("usage") or {}
                    gen.record(
                        input_tokens=usage.get("prompt_tokens"),
                        output_tokens=usage.get("completion_tokens"),
                        finish_reason=out["choices"][0].get("finish_reason"),
                    )
                async with tr.env_step():
                    await asyncio.sleep(0.01)

    try:
        await asyncio.gather(*(one(i) for i in range(n)))
        gens = env.spans("generate")
        # the server's batch exporter sends every 5 s
        receiver.wait_for(
            lambda r: sum(s.name == "llm_request" for s in r.spans()) >= len(gens), timeout=60
        )
    finally:
        stop(proc)
        log.close()
    problems, sample = check_parentage(gens, receiver.spans(), expect_attrs=False)
    env.shutdown()
    if problems:
        raise AssertionError("; ".join(problems))
    keys = sorted(k for k in sample if k.startswith("gen_ai.latency."))
    return f"http {len(gens)} generate spans each parent one llm_request ({', '.join(keys)})"


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mode", choices=("inprocess", "http", "both"), default="both")
    parser.add_argument("--trajectories", type=int, default=3)
    parser.add_argument(
        "--timeout", type=float, default=540, help="hard limit for the whole check, seconds"
    )
    opts = parser.parse_args()
    watchdog(opts.timeout)

    try:
        import torch
        import vllm

        from otel_rollout.testing.receiver import OTLPReceiver
    except ImportError as err:
        result(False, f"cannot run: {err}", code=2)
    if not torch.cuda.is_available():
        result(False, "cannot run: no CUDA device", code=2)

    capture = _Capture()
    logging.getLogger("otel_rollout").addHandler(capture)
    lines: list[str] = [f"vllm {vllm.__version__}"]
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="vllm-gpu-check-") as tmp:
        model_dir = Path(tmp) / "model"
        model_dir.mkdir()
        write_tiny_model(model_dir, Path(tmp) / "tokenizer")
        modes = ("inprocess", "http") if opts.mode == "both" else (opts.mode,)
        for mode in modes:
            receiver = OTLPReceiver().start()
            try:
                if mode == "inprocess":
                    run = run_inprocess(model_dir, receiver, opts.trajectories, capture.messages)
                else:
                    run = run_http(model_dir, receiver, opts.trajectories, Path(tmp) / "srv.log")
                lines.append(asyncio.run(run))
            except Exception as err:
                problems.append(f"{mode}: {type(err).__name__}: {err}")
            finally:
                receiver.stop()
    if problems:
        result(False, " | ".join(problems))
    result(True, " | ".join(lines))


if __name__ == "__main__":
    main()
