"""The real backends for tests: the Collector, Jaeger v2 and Prometheus 3 binaries that
deploy/backends/build.sh builds (cached per machine outside the repository), started on
127.0.0.1 ephemeral ports with the repository's own config files, health-checked,
stopped, and their logs shown when a test fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
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

ROOT = Path(__file__).resolve().parents[2]
CFG = ROOT / "collector-config"
BACKENDS = ROOT / "deploy" / "backends"
JAEGER_CONFIG = ROOT / "deploy" / "jaeger.yaml"
PROMETHEUS_CONFIG = CFG / "prometheus.yml"


def versions() -> dict[str, str]:
    """deploy/backends/versions.env as a dict."""
    out = {}
    for line in (BACKENDS / "versions.env").read_text().splitlines():
        m = re.fullmatch(r"([A-Z_]+)=(\S+)", line.strip())
        if m:
            out[m.group(1)] = m.group(2)
    return out


def cache_dir() -> Path:
    """Where build.sh puts the binaries (the same rule as the script)."""
    if os.environ.get("OTEL_ROLLOUT_BACKENDS_DIR"):
        return Path(os.environ["OTEL_ROLLOUT_BACKENDS_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "otel-rollout-backends"


def binaries() -> dict[str, Path]:
    v = versions()
    d = cache_dir()
    return {
        "otelcol": d / f"otelcol-{v['OTELCOL_VERSION']}" / "otelcol",
        "jaeger": d / f"jaeger-{v['JAEGER_MODULE_VERSION']}" / "jaeger",
        "prometheus": d / f"prometheus-{v['PROMETHEUS_MODULE_VERSION']}" / "prometheus",
        "promtool": d / f"prometheus-{v['PROMETHEUS_MODULE_VERSION']}" / "promtool",
    }


def need(*names: str) -> dict[str, Path]:
    """The named binaries, or skip saying how to get them."""
    bins = binaries()
    missing = [n for n in names if not bins[n].is_file()]
    if missing:
        pytest.skip(
            f"{', '.join(missing)} not built in {cache_dir()}: run deploy/backends/build.sh "
            "(needs Go >= 1.26 and the Go module proxy; .ci/run runs it)"
        )
    return bins


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def get_text(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def wait_until(
    what: str, probe: Callable[[], Any], timeout_s: float = 60.0, every_s: float = 0.25
) -> Any:
    """Poll ``probe()`` until it returns something truthy; fails naming ``what``."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except (OSError, ValueError, KeyError) as exc:  # not up yet, or a partial answer
            last = exc
        else:
            if last:
                return last
        time.sleep(every_s)
    raise AssertionError(f"{what}: not after {timeout_s}s (last: {last!r})")


@dataclass
class Server:
    """One backend process; its output goes to ``log``."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    health_url: str
    ports: dict[str, int] = field(default_factory=dict)
    proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60.0) -> Server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env.update(self.env)
        with self.log.open("ab") as fh:
            self.proc = subprocess.Popen(
                self.argv, env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=self.log.parent
            )
        self.wait_healthy(timeout_s)
        return self

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        def probe() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(
                    f"{self.name} exited rc={self.proc.returncode}:\n{self.tail()}"
                )
            try:
                with urllib.request.urlopen(self.health_url, timeout=2) as r:
                    return r.status == 200
            except urllib.error.HTTPError:
                return False

        try:
            wait_until(f"{self.name} healthy at {self.health_url}", probe, timeout_s)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.tail()}") from None

    def kill(self) -> None:
        """SIGKILL: the process dies holding whatever it had in memory."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def tail(self, n: int = 60) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return f"--- {self.name}: no log"
        return f"--- {self.name} ({self.log}), last {n} lines:\n" + "\n".join(lines[-n:])


class Stack:
    """Servers started by one fixture; stops them all, prints their logs on failure."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.servers: list[Server] = []

    def add(self, server: Server, timeout_s: float = 60.0) -> Server:
        self.servers.append(server)
        return server.start(timeout_s)

    def stop(self) -> None:
        for s in reversed(self.servers):
            s.stop()

    @contextlib.contextmanager
    def logs_on_failure(self) -> Iterator[None]:
        """Print every server's log tail (captured, shown by pytest) when the body fails."""
        try:
            yield
        except BaseException:
            for s in self.servers:
                print(s.tail(), file=sys.stdout)
            raise

    def _dir(self, name: str) -> Path:
        d = self.workdir / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    # --- the three kinds of server ------------------------------------------------------
    def prometheus(self, name: str = "prometheus") -> Server:
        bins = need("prometheus")
        port = free_port()
        d = self._dir(name)
        argv = [
            str(bins["prometheus"]),
            # The shipped config, as compose mounts it.
            f"--config.file={PROMETHEUS_CONFIG}",
            f"--storage.tsdb.path={d / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            # compose.yaml's flags:
            "--web.enable-otlp-receiver",
            "--enable-feature=exemplar-storage",
            "--log.level=warn",
        ]
        url = f"http://127.0.0.1:{port}"
        return self.add(Server(name, argv, {}, d / "log.txt", f"{url}/-/ready", {"http": port}))

    def jaeger(self, name: str = "jaeger") -> Server:
        bins = need("jaeger")
        ports, env = listen_env(
            "JAEGER", "otlp_grpc", "otlp_http", "query_http", "query_grpc", "health", "metrics"
        )
        d = self._dir(name)
        argv = [str(bins["jaeger"]), f"--config={JAEGER_CONFIG}"]
        health = f"http://127.0.0.1:{ports['query_http']}/api/services"
        return self.add(Server(name, argv, env, d / "log.txt", health, ports))

    def collector(self, config: str, env: dict[str, str], name: str = "otelcol") -> Server:
        """The Collector on collector-config/``config``; ``env`` names its peers."""
        bins = need("otelcol")
        ports, full_env = listen_env("OTELCOL", "otlp_grpc", "otlp_http", "health", "metrics")
        full_env.update(env)
        d = self._dir(name)
        argv = [str(bins["otelcol"]), f"--config={CFG / config}"]
        health = f"http://127.0.0.1:{ports['health']}/"
        return self.add(Server(name, argv, full_env, d / "log.txt", health, ports))


def listen_env(prefix: str, *names: str) -> tuple[dict[str, int], dict[str, str]]:
    """A free port per name, and the variables the shipped configs read them from:
    ``<PREFIX>_LISTEN_HOST`` and ``<PREFIX>_<NAME>_PORT``."""
    ports = {name: free_port() for name in names}
    env = {f"{prefix}_LISTEN_HOST": "127.0.0.1"}
    env.update({f"{prefix}_{name.upper()}_PORT": str(port) for name, port in ports.items()})
    return ports, env


def collector_metric(server: Server, name: str, **labels: str) -> float:
    """Sum of the Collector's own metric ``name`` (Prometheus text) over matching series."""
    text = get_text(f"http://127.0.0.1:{server.ports['metrics']}/metrics")
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        m = re.fullmatch(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


def prom_query(server: Server, expr: str) -> list[dict[str, Any]]:
    qs = urllib.parse.urlencode({"query": expr})
    try:
        body = get_json(f"http://127.0.0.1:{server.ports['http']}/api/v1/query?{qs}")
    except urllib.error.HTTPError as e:
        raise AssertionError(f"PromQL error for {expr!r}: {e.read().decode()}") from None
    assert body["status"] == "success", body
    return body["data"]["result"]
