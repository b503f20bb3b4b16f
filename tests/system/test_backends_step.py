"""The phase gauge in a real Prometheus 3 (OTLP receiver, the shipped config): 1 while a
phase runs, 0 after, and docs/step.md's "GPU utilisation by phase" queries joining it to
GPU gauges: NVML's ``hw.gpu.utilization`` pushed beside it over OTLP, and a stand-in for
NVIDIA's DCGM exporter that Prometheus scrapes (its series names are upper case, which
an OpenTelemetry instrument name cannot keep)."""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from _backends import PROMETHEUS_CONFIG, ROOT, Server, Stack, free_port, need, prom_query
from _backends import wait_until as _wait_until

import otel_rollout

pytestmark = pytest.mark.system


def wait_until(what, probe):
    return _wait_until(what, probe, timeout_s=30)


def _doc_queries() -> list[str]:
    text = (ROOT / "docs" / "step.md").read_text(encoding="utf-8")
    return re.findall(r"```promql\n(.*?)```", text, re.S)


def _by_phase(server, expr: str) -> dict[str, float]:
    return {
        r["metric"].get("rollout_step_phase", ""): round(float(r["value"][1]), 6)
        for r in prom_query(server, expr)
    }


class _Dcgm:
    """A scrape target shaped like the DCGM exporter: ``DCGM_FI_DEV_GPU_UTIL`` (percent)
    labelled with the node's ``Hostname``."""

    def __init__(self) -> None:
        self.value = 0
        me = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                body = (f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="node-a"}} {me.value}\n'
                        ).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def backends(tmp_path):
    bins = need("prometheus")
    dcgm = _Dcgm()
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())  # the shipped one, plus DCGM
    config["scrape_configs"].append({
        "job_name": "dcgm", "scrape_interval": "1s",
        "static_configs": [{"targets": [f"127.0.0.1:{dcgm.port}"]}],
    })  # fmt: skip
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    argv = [str(bins["prometheus"]), f"--config.file={path}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-otlp-receiver", "--enable-feature=exemplar-storage",
            "--log.level=warn"]  # fmt: skip
    stack = Stack(tmp_path)
    try:
        server = stack.add(Server("prometheus", argv, {}, tmp_path / "log.txt",
                                  f"http://127.0.0.1:{port}/-/ready", {"http": port}))  # fmt: skip
        with stack.logs_on_failure():
            yield server, dcgm
    finally:
        stack.stop()
        dcgm.stop()


def test_gpu_utilisation_by_phase_is_one_query(backends):
    from opentelemetry.metrics import Observation

    prometheus, dcgm = backends
    nvml_query, dcgm_query = _doc_queries()
    port = prometheus.ports["http"]
    rollout = otel_rollout.configure(
        local=True, service_name="trainer", run_id="run-a",
        endpoint=f"http://127.0.0.1:{port}/api/v1/otlp", protocol="http/protobuf",
        metric_export_interval_ms=3_600_000, traces_exporter="none", summary_stream=None,
        resource_attributes={"host.name": "node-a"},
    )  # fmt: skip
    util = {"value": 0.0}
    lock = threading.Lock()

    def gpu(_options):  # two GPUs, as NVML's gauge reports them
        with lock:
            v = util["value"]
        return [Observation(v, {"hw.id": "GPU-0"}), Observation(v / 2, {"hw.id": "GPU-1"})]

    rollout.meter_provider.get_meter("gpu-stand-in").create_observable_gauge(
        "hw.gpu.utilization", [gpu], unit="1"
    )

    def during(active: str, value: float) -> None:
        with lock:
            util["value"] = value
        dcgm.value = round(100 * value)
        assert rollout.force_flush(10)
        expr = f'rollout_step_phase_active{{rollout_step_phase="{active}"}} == 1'
        wait_until(f"{active} active in Prometheus", lambda: prom_query(prometheus, expr))
        wait_until("the DCGM stand-in scraped", lambda: prom_query(
            prometheus, f"DCGM_FI_DEV_GPU_UTIL == {dcgm.value}"))  # fmt: skip

    try:
        with rollout.tracer.step(1, trainer="skyrl") as step:
            with step.phase("run_training"):
                during("run_training", 0.8)
                assert _by_phase(prometheus, nvml_query) == {"run_training": 0.6}
                assert _by_phase(prometheus, dcgm_query) == {"run_training": 80.0}
            with step.phase("sync_weights"):
                during("sync_weights", 0.1)
                assert _by_phase(prometheus, nvml_query) == {"sync_weights": 0.075}
                assert _by_phase(prometheus, dcgm_query) == {"sync_weights": 10.0}
        assert rollout.force_flush(10)
        wait_until(
            "every phase back to 0",
            lambda: (
                _by_phase(prometheus, "rollout_step_phase_active")
                == {"run_training": 0.0, "sync_weights": 0.0}
            ),
        )
        assert _by_phase(prometheus, nvml_query) == {}  # no phase active: nothing joins
        assert _by_phase(prometheus, dcgm_query) == {}
        labels = prom_query(prometheus, "rollout_step_phase_active")[0]["metric"]
        assert labels["rollout_run_id"] == "run-a" and labels["rollout_step_trainer"] == "skyrl"
        walls = prom_query(prometheus, "rollout_step_duration_seconds_sum")
        assert [float(r["value"][1]) for r in walls] == [step.account.wall_ns / 1e9]
    finally:
        rollout.shutdown()
