"""A dead or mistyped OTLP endpoint loses nothing it can keep: what it fails goes to a
local trace file (``report`` reads it), and the shutdown summary says so, naming the
endpoint and the file. Real OTLP exporters against a port nobody listens on."""

from __future__ import annotations

import io

import pytest
from _otel_env import clean_otel_env
from opentelemetry.sdk.trace.export import SpanExportResult

from otel_rollout import configure
from otel_rollout._export.spill import SpillExporter
from otel_rollout.report import read_sources
from otel_rollout.testing.receiver import OTLPReceiver


class _Exporter:
    def __init__(self, results):
        self.results = list(results)
        self.batches = []

    def export(self, spans):
        self.batches.append(list(spans))
        return self.results.pop(0) if self.results else SpanExportResult.SUCCESS

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


class _Clock:
    now = 0.0

    def __call__(self):
        return self.now


OK, FAIL = SpanExportResult.SUCCESS, SpanExportResult.FAILURE


def test_a_failed_batch_goes_to_the_local_file_and_the_next_ones_too_until_the_retry():
    primary, local, clock = _Exporter([FAIL, OK]), _Exporter([]), _Clock()
    spill = SpillExporter(primary, lambda: local, retry_s=30.0, clock=clock)
    assert spill.local is None  # no file until the endpoint fails
    assert spill.export(["a", "b"]) is OK
    clock.now = 29.0
    assert spill.export(["c"]) is OK  # still failing: straight to the file
    assert primary.batches == [["a", "b"]] and local.batches == [["a", "b"], ["c"]]
    clock.now = 30.0
    assert spill.export(["d"]) is OK  # tried again: it answers
    assert primary.batches[-1] == ["d"] and spill.spilled == 3


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_dead_endpoint_keeps_every_trajectory_in_a_local_file(monkeypatch, tmp_path, protocol):
    clean_otel_env(monkeypatch)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "500")
    dead = OTLPReceiver()  # never started: nobody listens on its port
    endpoint = dead.grpc_endpoint if protocol == "grpc" else dead.http_endpoint
    summary = io.StringIO()
    rollout = configure(local=True, endpoint=endpoint, protocol=protocol,
                        metrics_exporter="none", output_dir=tmp_path,
                        summary_stream=summary)  # fmt: skip
    for i in range(50):
        with rollout.tracer.trajectory(f"t{i}", env="e") as traj, traj.generate():
            pass
    assert rollout.shutdown(timeout_s=30)
    stats = rollout.export_stats
    assert (stats.exported, stats.dropped) == (100, 0)
    (path,) = tmp_path.glob("traces-*.jsonl")
    read = read_sources([str(path)])
    assert len(read.trajectories) == 50 and read.losses == {}
    text = summary.getvalue()
    assert "otel-rollout: 50 trajectories" in text
    assert f"traces: sent to {endpoint}" in text
    assert f"100 spans the endpoint failed went to {path}" in text


def test_an_endpoint_that_answers_leaves_no_local_file(monkeypatch, tmp_path):
    clean_otel_env(monkeypatch)
    with OTLPReceiver() as rx:
        rollout = configure(local=True, endpoint=rx.http_endpoint, protocol="http/protobuf",
                            metrics_exporter="none", output_dir=tmp_path,
                            summary_stream=io.StringIO())  # fmt: skip
        with rollout.tracer.trajectory("t0", env="e"):
            pass
        assert rollout.shutdown(timeout_s=30)
        assert len(rx.spans()) == 1
    assert list(tmp_path.iterdir()) == []
