"""Tail-kept traces that do not fit the export queue wait, whole, in a bounded release
buffer and are exported as the queue drains; past the buffer's bound a kept trace is
dropped whole and counted (``kept_overflow``). Real OTLP exporter and receiver, which
stalls while the burst is released and then recovers."""

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


def test_a_failure_burst_waits_for_a_stalled_endpoint_and_arrives_whole(env):
    with OTLPReceiver() as rx:
        rollout = configure(local=True, endpoint=rx.http_endpoint, protocol="http/protobuf",
                            metrics_exporter="none", sample_ratio=0.01)  # fmt: skip
        rx.hold()  # the endpoint stalls: the first batch sent is not answered
        fail_together(rollout, N)
        assert rx.wait_for(lambda r: r.requests >= 1, timeout=60)
        stats = rollout.export_stats
        assert stats.dropped == 0
        # the queue keeps its bound; what does not fit waits whole in the release buffer
        assert stats.pending <= 2048
        assert stats.held > 0
        assert stats.pending + stats.in_flight + stats.held == N * SPANS_PER_TRAJECTORY
        rx.release()  # the endpoint recovers: the buffer drains without any flush
        assert rx.wait_for(lambda r: len(r.spans()) == N * SPANS_PER_TRAJECTORY, timeout=120)
        assert rollout.shutdown(timeout_s=60)
        stats = rollout.export_stats
        assert (stats.exported, stats.dropped, stats.pending, stats.held) == (
            N * SPANS_PER_TRAJECTORY, 0, 0, 0,
        )  # fmt: skip
        got = by_trajectory(rx)
        assert sorted(got) == sorted(f"t{i}" for i in range(N))
        assert all(len(spans) == SPANS_PER_TRAJECTORY for spans in got.values())  # whole
        roots = [s for spans in got.values() for s in spans if s.name == "trajectory"]
        assert {s.attributes["rollout.trajectory.status"] for s in roots} == {"error"}


def test_past_the_release_bound_kept_traces_are_dropped_whole_and_counted(env):
    env.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "600")
    env.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "100")
    env.setenv("OTEL_ROLLOUT_TAIL_KEEP_RELEASE_MAX_SPANS", "301")
    with OTLPReceiver() as rx:
        summary = io.StringIO()
        rollout = configure(local=True, endpoint=rx.http_endpoint, protocol="http/protobuf",
                            metrics_exporter="none", sample_ratio=0.0,
                            summary_stream=summary)  # fmt: skip
        rx.hold()
        fail_together(rollout, N)
        assert rx.wait_for(lambda r: r.requests >= 1, timeout=60)
        stats = rollout.export_stats
        assert 0 < stats.held <= 301  # the bound (spans move on to the queue one by one)
        lost = stats.dropped_kept_overflow
        assert lost > 0 and lost % SPANS_PER_TRAJECTORY == 0
        rx.release()
        assert rollout.shutdown(timeout_s=60)
        stats = rollout.export_stats
        assert {why: n for why, n in stats.losses().items() if n} == {"kept_overflow": lost}
        assert stats.exported + stats.dropped == N * SPANS_PER_TRAJECTORY
        assert (stats.pending, stats.in_flight, stats.held) == (0, 0, 0)
        got = by_trajectory(rx)
        # never a partial trace: each trajectory arrived whole or not at all
        assert all(len(spans) == SPANS_PER_TRAJECTORY for spans in got.values())
        assert len(got) * SPANS_PER_TRAJECTORY == stats.exported
        assert len(got) + lost // SPANS_PER_TRAJECTORY == N


def test_shutdown_drains_the_release_buffer(env):
    env.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "60")
    env.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "30")
    env.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")  # only a flush or shutdown exports
    with OTLPReceiver() as rx:
        rollout = configure(local=True, endpoint=rx.http_endpoint, protocol="http/protobuf",
                            metrics_exporter="none", sample_ratio=0.0)  # fmt: skip
        rx.hold()
        fail_together(rollout, 200)
        assert rx.wait_for(lambda r: r.requests >= 1, timeout=60)
        assert rollout.export_stats.held > 0
        rx.release()
        assert rollout.force_flush(timeout_s=60)
        stats = rollout.export_stats
        assert (stats.exported, stats.held, stats.pending, stats.dropped) == (600, 0, 0, 0)
        assert len(by_trajectory(rx)) == 200
        assert rollout.shutdown(timeout_s=60)


def test_a_shutdown_that_gives_up_counts_held_spans(env):
    env.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "60")
    env.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "30")
    with OTLPReceiver() as rx:
        rollout = configure(local=True, endpoint=rx.http_endpoint, protocol="http/protobuf",
                            metrics_exporter="none", sample_ratio=0.0)  # fmt: skip
        rx.hold()  # and never answers before shutdown gives up
        fail_together(rollout, 200)
        assert rx.wait_for(lambda r: r.requests >= 1, timeout=60)
        held = rollout.export_stats.held
        assert held > 0
        assert not rollout.shutdown(timeout_s=0.5)
        stats = rollout.export_stats
        assert stats.held == 0
        assert stats.dropped_shutdown_timeout == 600 - stats.exported
        assert stats.exported + stats.dropped == 600
        rx.release()
