"""Losses around shutdown are counted under their own reasons, and every span ends up in
exactly one count (exported, pending, or dropped for one reason), with the real OTLP
exporter and the real receiver."""

from __future__ import annotations

import logging

import pytest

from otel_rollout import configure
from otel_rollout.testing.receiver import OTLPReceiver

SPANS_PER_TRAJECTORY = 2


@pytest.fixture
def make(monkeypatch, tmp_path):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER",
                 "OTEL_ROLLOUT_SAMPLE_RATIO", "OTEL_TRACES_SAMPLER"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "300")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "8")

    def make(rx: OTLPReceiver):
        return configure(local=True, endpoint=rx.http_endpoint, protocol="http/protobuf",
                         metrics_exporter="none", output_dir=tmp_path)  # fmt: skip

    return make


def run(rollout, prefix: str, n: int) -> None:
    for i in range(n):
        with rollout.tracer.trajectory(f"{prefix}{i}") as traj, traj.generate():
            pass


def accounted(stats) -> int:
    return stats.exported + stats.pending + stats.in_flight + stats.dropped


def test_spans_ending_after_shutdown_are_counted_as_such_not_as_a_full_queue(make, caplog):
    with OTLPReceiver() as rx:
        rollout = make(rx)
        run(rollout, "before", 3)
        assert rollout.shutdown(timeout_s=10)
        with caplog.at_level(logging.WARNING, logger="otel_rollout"):
            run(rollout, "after", 40)  # more than a full queue's worth would not matter
        s = rollout.export_stats
        assert (s.exported, s.pending, s.dropped_after_shutdown) == (6, 0, 80)
        assert s.dropped_queue_full == 0 and s.dropped == 80
        assert len(rx.spans()) == 6
        messages = [r.getMessage() for r in caplog.records]
        assert sum("after shutdown()" in m for m in messages) == 1
        assert not any("queue" in m for m in messages)


def test_spans_a_timed_out_shutdown_leaves_behind_are_counted_then_exported_if_they_can(
    make, caplog
):
    with OTLPReceiver() as rx:
        rx.hold()  # the endpoint hangs: nothing is answered
        rollout = make(rx)
        n = 20 * SPANS_PER_TRAJECTORY
        run(rollout, "t", 20)
        with caplog.at_level(logging.WARNING, logger="otel_rollout"):
            assert rollout.shutdown(timeout_s=0.1) is False  # below the export timeout
        s = rollout.export_stats
        assert s.pending == s.in_flight == 0 and s.dropped_shutdown_timeout > 0
        assert accounted(s) == n  # none of them neither exported nor counted
        assert any("shutdown_timeout" in r.getMessage() for r in caplog.records)
        rx.release()  # the endpoint answers again while the exporter is still trying

        def settled(_):
            s = rollout.export_stats
            return s.dropped_shutdown_timeout == 0 and accounted(s) == n

        assert rx.wait_for(settled)  # what got through after all is exported, not lost
        s = rollout.export_stats
        # Batches the hung endpoint timed out went to the local trace file: exported late.
        assert (s.exported, s.dropped, s.pending, s.in_flight) == (n, 0, 0, 0)
