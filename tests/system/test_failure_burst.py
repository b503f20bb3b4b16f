"""A burst of failures (an inference server crash) below 100% sampling: each kept trace
reaches the exporter whole, or is dropped whole and counted (``kept_overflow``), never
in part; the agent loop never waits for room (real OTLP exporter and receiver, which
stalls while the burst is released and then recovers)."""

from __future__ import annotations

import io
from collections import defaultdict

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
    # a stalled request waits for the receiver instead of timing out
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "120000")
    return monkeypatch


def by_trajectory(rx: OTLPReceiver) -> dict[str, list]:
    traces = defaultdict(list)
    for s in rx.spans():
        traces[s.trace_id].append(s)
    out = {}
    for spans in traces.values():
        roots = [s for s in spans if s.name == "trajectory"]
        key = roots[0].attributes["rollout.trajectory.id"] if roots else f"no root {spans}"
        out[key] = spans
    return out


@pytest.mark.parametrize("queue", [None, "8192"], ids=["default queue", "queue holds it"])
def test_a_failure_burst_arrives_whole_or_is_counted_whole(env, queue):
    if queue:
        env.setenv("OTEL_BSP_MAX_QUEUE_SIZE", queue)
    with OTLPReceiver() as rx:
        summary = io.StringIO()
        rollout = configure(local=True, endpoint=rx.http_endpoint, protocol="http/protobuf",
                            metrics_exporter="none", sample_ratio=0.0,
                            summary_stream=summary)  # fmt: skip
        rx.hold()  # the endpoint stalls: the first batch sent is not answered
        fail_together(rollout, N)
        assert rx.wait_for(lambda r: r.requests >= 1, timeout=60)
        rx.release()
        assert rollout.shutdown(timeout_s=60)
        stats = rollout.export_stats
        lost = stats.dropped_kept_overflow
        assert {why: n for why, n in stats.losses().items() if n} == (
            {"kept_overflow": lost} if lost else {}
        )
        assert lost % SPANS_PER_TRAJECTORY == 0 and (lost > 0) == (queue is None)
        assert stats.exported + lost == N * SPANS_PER_TRAJECTORY
        assert (stats.pending, stats.in_flight) == (0, 0)
        got = by_trajectory(rx)
        assert all(len(spans) == SPANS_PER_TRAJECTORY for spans in got.values())  # whole
        assert len(got) + lost // SPANS_PER_TRAJECTORY == N
        roots = [s for spans in got.values() for s in spans if s.name == "trajectory"]
        assert {s.attributes["rollout.trajectory.status"] for s in roots} == {"error"}
        if lost:
            assert f"{lost} kept_overflow" in summary.getvalue()
