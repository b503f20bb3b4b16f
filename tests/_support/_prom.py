"""A real Prometheus server for tests: the `prometheus` binary, a tmp TSDB, a 1 s scrape.

Shared by tests/cli/test_deploy.py (the dashboard's PromQL) and tests/system/test_prometheus.py.
The scraped target is a process the test starts (a demo or a script) exposing
``OTEL_METRICS_EXPORTER=prometheus`` on ``target_port``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

PROMETHEUS = shutil.which("prometheus")
SKIP_REASON = "the `prometheus` binary is absent (Debian package `prometheus`; .ci/run installs it)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Prometheus:
    url: str
    target_port: int
    proc: subprocess.Popen
    log: Path
    children: list[subprocess.Popen] = field(default_factory=list)

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query at now; returns the result list (raises on a PromQL error)."""
        qs = urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/query?{qs}", timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:  # 400/422: bad PromQL; say which expression
            raise AssertionError(f"PromQL error for {expr!r}: {e.read().decode()}") from None
        assert body["status"] == "success", f"{expr!r}: {body}"
        return body["data"]["result"]

    def scalar(self, expr: str) -> float:
        res = self.query(expr)
        assert len(res) == 1, f"{expr!r} returned {len(res)} series, expected 1: {res}"
        return float(res[0]["value"][1])

    def wait_for(self, expr: str, ok: Callable[[float], bool], timeout_s: float = 30.0) -> float:
        """Poll a one-series expression until ``ok(value)``; fails with the last value seen."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            for child in self.children:
                if child.poll() is not None:
                    out = child.stdout.read() if child.stdout else ""
                    raise AssertionError(f"scrape target exited rc={child.returncode}:\n{out}")
            res = self.query(expr)
            if len(res) == 1:
                last = float(res[0]["value"][1])
                if not math.isnan(last) and ok(last):
                    return last
            time.sleep(0.25)
        raise AssertionError(f"{expr!r} not satisfied after {timeout_s}s (last value {last})")

    def wait_scrapes(self, n: int = 2, timeout_s: float = 15.0) -> None:
        """Wait until ``n`` more successful scrapes of the target have happened."""
        expr = 'count_over_time(up{job="target"}[10m])'
        start = self.wait_for(expr, lambda v: v >= 1, timeout_s)
        self.wait_for(expr, lambda v: v >= start + n, timeout_s)
        assert self.scalar('up{job="target"}') == 1.0, "target is not up"

    def spawn(self, argv: list[str], cwd: Path, extra_env: dict[str, str] | None = None):
        """Start a scrape target exposing its metrics on ``target_port``; killed at teardown."""
        env = dict(os.environ)
        for k in list(env):
            if k.startswith(("OTEL_", "OTEL_ROLLOUT_")):
                del env[k]
        env.update(
            OTEL_METRICS_EXPORTER="prometheus",
            OTEL_EXPORTER_PROMETHEUS_HOST="127.0.0.1",
            OTEL_EXPORTER_PROMETHEUS_PORT=str(self.target_port),
            OTEL_TRACES_EXPORTER="none",
            PYTHONUNBUFFERED="1",
        )
        env.update(extra_env or {})
        child = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.children.append(child)
        return child


def _wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"prometheus exited rc={proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"prometheus not ready after {timeout_s}s:\n{log.read_text()}")


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Prometheus]:
    """A real Prometheus scraping ``127.0.0.1:<target_port>`` every second."""
    if PROMETHEUS is None:
        pytest.skip(SKIP_REASON)
    port, target_port = free_port(), free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: target\n    scrape_timeout: 900ms\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n"
    )
    log = tmp_path / "prometheus.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
                "--log.level=warn",
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    prom = Prometheus(f"http://127.0.0.1:{port}", target_port, proc, log)
    try:
        _wait_ready(prom.url, proc, log)
        # Prometheus hands the first targets to the scrape loop ~5 s after start (discovery
        # throttle). Wait for the first scrape (up == 0: nothing listens yet), so a short
        # target started next is scraped during its run, not only after it.
        prom.wait_for('count(up{job="target"})', lambda v: v >= 1, timeout_s=20)
        yield prom
    finally:
        for child in [*prom.children, proc]:
            if child.poll() is None:
                child.terminate()
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()


def python() -> str:
    return sys.executable
