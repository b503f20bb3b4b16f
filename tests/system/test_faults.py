"""Faults never reach the trainer: endpoint absent, killed and restarted, slow.

Every case uses configure() with the real OTLP gRPC exporters and the real receiver; traces
and metrics go to separate endpoints (the standard per-signal variables), so the loss
counter can be read from a live receiver while the trace endpoint is down. What the trace
endpoint fails goes to a local trace file (``otel_rollout._export.spill``).
"""

from __future__ import annotations

import json
import logging
import time

import pytest
from _otel_env import clean_otel_env

from otel_rollout import configure
from otel_rollout._export import spill
from otel_rollout.report import read_sources
from otel_rollout.testing.receiver import OTLPReceiver

SPANS_PER_TRAJECTORY = 3
QUEUE = 64


@pytest.fixture
def metrics_rx():
    with OTLPReceiver() as rx:
        yield rx


@pytest.fixture
def fault_env(monkeypatch, metrics_rx, tmp_path):
    clean_otel_env(monkeypatch)
    monkeypatch.setattr(spill, "RETRY_S", 0.2)  # a failed endpoint is tried again soon
    monkeypatch.setenv("OTEL_ROLLOUT_OUTPUT_DIR", str(tmp_path))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", metrics_rx.grpc_endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "300")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", str(QUEUE))
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "16")

    def make(traces_rx: OTLPReceiver):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces_rx.grpc_endpoint)
        return configure(local=True, metric_export_interval_ms=100_000)

    return make


def run(rollout, prefix: str, n: int) -> None:
    for i in range(n):
        with rollout.tracer.trajectory(f"{prefix}{i}", env="e") as traj:
            with traj.generate():
                pass
            with traj.env_step():
                pass


def received_roots(rx: OTLPReceiver) -> list[str]:
    return [s.attributes["rollout.trajectory.id"] for s in rx.spans() if s.name == "trajectory"]


def dropped_counter(rx: OTLPReceiver) -> dict[str, float]:
    latest: dict[str, float] = {}
    for p in rx.metric_points("rollout.export.dropped"):  # cumulative: the last one wins
        latest[p["attributes"]["rollout.export.reason"]] = p["value"]
    return latest


def spans_in(path) -> int:
    n = 0
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            n += sum(len(ss["spans"]) for ss in rs["scopeSpans"])
    return n


def export_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "otel_rollout.export"]


def exporter_errors(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry.exporter")]


def test_endpoint_absent_keeps_every_span_in_a_local_file_and_logs_once(
    fault_env, metrics_rx, caplog, tmp_path
):
    caplog.set_level(logging.WARNING, logger="otel_rollout.export")
    dead = OTLPReceiver()  # never started: connections are refused
    rollout = fault_env(dead)
    run(rollout, "warm", 50)
    drained = len(rollout.collector.drain())
    for k in range(20):  # no exception reaches the loop
        run(rollout, f"t{k}-", 100)
        drained += len(rollout.collector.drain())  # as a trainer does once per step
    assert rollout.export_stats.pending <= QUEUE
    # What the process holds meanwhile stays flat: tests/system/test_memory.py, mode otlp-down.
    assert drained == 2050  # every breakdown, endpoint or not
    t0 = time.monotonic()
    assert rollout.shutdown(timeout_s=2)
    assert time.monotonic() - t0 < 4  # bounded by its timeout, not by the exporter's retries
    stats = rollout.export_stats
    assert stats.exported + stats.dropped == 2050 * SPANS_PER_TRAJECTORY
    assert stats.dropped_export_failed == 0  # each failed batch went to the file
    (path,) = tmp_path.glob("traces-*.jsonl")
    assert spans_in(path) == stats.exported  # the file holds what was counted exported
    read = read_sources([str(path)], warn=lambda m: None)
    assert len(read.trajectories) >= 2050 - stats.dropped_queue_full
    messages = export_warnings(caplog)
    # The outage is logged once, not once per span or batch. A queue-full warning can
    # only come first, if the queue filled while the first export was still trying.
    (failed,) = [m for m in messages if "failed" in m]
    assert dead.grpc_endpoint in failed and str(path) in failed
    assert len(messages) <= 2, messages
    assert len(exporter_errors(caplog)) <= 30  # the exporter's own, one per retry at most
    assert not [r for r in caplog.records if "Queue full" in r.getMessage()]


def test_receiver_killed_mid_run_and_restarted_resumes_and_the_gap_is_in_the_file(
    fault_env, metrics_rx, caplog, tmp_path
):
    caplog.set_level(logging.WARNING, logger="otel_rollout.export")
    rx = OTLPReceiver().start()
    rollout = fault_env(rx)
    try:
        run(rollout, "before", 20)
        rollout.force_flush(timeout_s=5)
        assert rx.wait_for(lambda r: len(received_roots(r)) == 20)
        rx.stop()
        run(rollout, "during", 200)
        rollout.force_flush(timeout_s=5)
        (path,) = tmp_path.glob("traces-*.jsonl")
        assert spans_in(path) > 0
        rx.start()
        # gRPC reconnects with backoff: keep the loop running until export resumes; the
        # deadline only bounds a failing test.
        deadline, sent = time.monotonic() + 60, 0
        while time.monotonic() < deadline:
            run(rollout, f"after{sent}-", 1)
            sent += 1
            rollout.force_flush(timeout_s=2)
            if any(i.startswith("after") for i in received_roots(rx)):
                break
        total = (20 + 200 + sent) * SPANS_PER_TRAJECTORY
        stats = rollout.export_stats
        # the receiver and the file hold exactly what was counted
        assert len(rx.spans()) + spans_in(path) == stats.exported
        assert stats.exported + stats.dropped + stats.pending == total
        assert stats.dropped_export_failed == 0
        assert all(i.startswith("before") for i in received_roots(rx)[:20])
        assert len(rollout.collector.drain()) == 220 + sent
        messages = [m for m in export_warnings(caplog) if "queue" not in m]
        assert len(messages) == 2, messages  # one when it failed, one when it resumed
        assert "failed" in messages[0] and "resumed" in messages[1]
        assert f"spans were written to {path}" in messages[1]
    finally:
        rollout.shutdown(timeout_s=2)
        rx.stop()


def test_slow_receiver_fills_the_queue_not_the_loop(fault_env, metrics_rx, caplog, monkeypatch):
    caplog.set_level(logging.WARNING, logger="otel_rollout.export")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "5000")  # slow, not failing
    rx = OTLPReceiver().start()
    rx.delay_s = 0.2  # each export request takes a fifth of a second
    rollout = fault_env(rx)
    try:
        most_pending = 0
        for k in range(20):
            run(rollout, f"b{k}-", 25)
            most_pending = max(most_pending, rollout.export_stats.pending)
        assert most_pending <= QUEUE
        stats = rollout.export_stats
        assert stats.dropped_queue_full > 0 and stats.dropped_export_failed == 0
        assert len(rollout.collector.drain()) == 500
        (full,) = export_warnings(caplog)  # once, however many spans it dropped
        assert "queue" in full and "full" in full
        rx.delay_s = 0.0
        rollout.force_flush(timeout_s=5)
        stats = rollout.export_stats
        assert rx.wait_for(lambda r: len(r.spans()) == stats.exported)
        assert stats.exported + stats.dropped_queue_full + stats.pending == 500 * 3
        assert stats.exported > 0
    finally:
        rollout.shutdown(timeout_s=2)
        rx.stop()


def test_force_flush_returns_within_its_timeout_while_the_receiver_stalls(
    fault_env, metrics_rx, monkeypatch
):
    # The SDK's batch processor exports its whole queue in the caller's thread, whatever
    # the timeout: four batches at 3 s each would hold a trainer's step for 12 s.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "5000")  # slow, not failing
    rx = OTLPReceiver().start()
    rx.delay_s = 3.0
    rollout = fault_env(rx)
    try:
        run(rollout, "slow", 20)  # 60 spans: four batches of 16
        t0 = time.monotonic()
        assert rollout.force_flush(timeout_s=0.5) is False  # ran out of time, and says so
        assert time.monotonic() - t0 < 2.5  # far below one stalled export
        rx.delay_s = 0.0
        # The next call waits for the export still running, then flushes what is left.
        assert rollout.force_flush(timeout_s=30) is True
        stats = rollout.export_stats
        assert stats.exported == 60 and stats.dropped == stats.pending == 0
        assert rx.wait_for(lambda r: len(received_roots(r)) == 20)
    finally:
        rx.delay_s = 0.0
        rollout.shutdown(timeout_s=2)
        rx.stop()
