"""A burst of failures (an inference server crash) reaches the exporter whole: kept traces
that do not fit the export queue wait whole and enter it as it drains (real OTLP exporter
and receiver)."""

from __future__ import annotations

import pytest
from _bursts import fail_together
from _otel_env import clean_otel_env

from otel_rollout import configure
from otel_rollout.testing.receiver import OTLPReceiver

N = 1000
SPANS_PER_TRAJECTORY = 3


@pytest.fixture
def env(monkeypatch):
    clean_otel_env(monkeypatch)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "10000")


def test_a_thousand_trajectories_failing_at_once_are_all_exported_whole(env):
    with OTLPReceiver() as rx:
        rollout = configure(local=True, endpoint=rx.http_endpoint, protocol="http/protobuf",
                            metrics_exporter="none", sample_ratio=0.0)  # fmt: skip
        rx.hold()  # the endpoint is slow to answer while the burst is released
        fail_together(rollout, N)
        stats = rollout.export_stats
        assert stats.dropped == 0  # nothing lost to a full queue
        rx.release()
        assert rollout.shutdown(timeout_s=60)
        stats = rollout.export_stats
        assert (stats.exported, stats.dropped, stats.pending) == (N * SPANS_PER_TRAJECTORY, 0, 0)
        roots = [s for s in rx.spans() if s.name == "trajectory"]
        assert sorted(s.attributes["rollout.trajectory.id"] for s in roots) == sorted(
            f"t{i}" for i in range(N)
        )
        assert {s.attributes["rollout.trajectory.status"] for s in roots} == {"error"}
        assert len(rx.spans()) == N * SPANS_PER_TRAJECTORY  # each one whole
