"""Tail keep: failed, cancelled and slow trajectories are exported in full when unsampled."""

from __future__ import annotations

import contextvars

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_rollout import BreakdownCollector, RolloutTracer
from otel_rollout.sdk import BreakdownProcessor, RecordingRatioSampler, TailKeepProcessor
from otel_rollout.testing import ManualClock

clock = ManualClock()


def setup(**tail):
    exporter = InMemorySpanExporter()
    collector = BreakdownCollector()
    provider = TracerProvider(sampler=RecordingRatioSampler(0.0))
    processor = BreakdownProcessor(MeterProvider(), on_breakdown=collector)
    provider.add_span_processor(processor)
    keep = TailKeepProcessor(SimpleSpanProcessor(exporter), **tail)
    provider.add_span_processor(keep)
    return RolloutTracer(provider, processor=processor, clock=clock), exporter, collector, keep


def test_errored_and_slow_trajectories_are_exported_whole_and_nothing_else():
    tracer, exporter, collector, keep = setup(slower_than_s=0.03)
    for i in range(30):
        kind = "error" if i % 10 == 3 else "slow" if i % 10 == 7 else "ok"
        try:
            with tracer.trajectory(f"{kind}{i}") as traj:
                with traj.generate():
                    clock.advance(ms=40 if kind == "slow" else 29)
                with traj.env_step():
                    if kind == "error":
                        raise RuntimeError("tool failed")
        except RuntimeError:
            pass
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.name == "trajectory"]
    kept = sorted(s.attributes["rollout.trajectory.id"] for s in roots)
    assert kept == sorted(["error3", "error13", "error23", "slow7", "slow17", "slow27"])
    assert len(spans) == 3 * len(roots)  # each kept trajectory in full
    root_ids = {r.context.span_id for r in roots}
    assert all(s.parent.span_id in root_ids for s in spans if s.name != "trajectory")
    assert all(s.context.trace_flags.sampled for s in spans)
    assert len(collector.drain()) == 30 and keep.kept_trajectories == 6
    assert keep.buffered_spans == 0


def test_buffer_is_bounded_and_counts_what_it_dropped():
    tracer, _exporter, _, keep = setup(max_buffered_spans=10)

    def open_trajectory(i):  # the root stays open: its children wait in the buffer
        traj = tracer.trajectory(f"t{i}").__enter__()
        with traj.generate():
            pass
        with traj.env_step():
            pass

    for i in range(8):
        contextvars.copy_context().run(open_trajectory, i)
    # 16 spans ended; the oldest traces went whole to make room for the newest
    assert keep.buffered_spans == 10 and keep.dropped_spans == 6


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="slower_than_s"):
        TailKeepProcessor(SimpleSpanProcessor(InMemorySpanExporter()), slower_than_s=-1)


def test_running_percentile_keeps_the_slow_tail_without_a_threshold_in_seconds():
    tracer, exporter, collector, keep = setup(slower_than_percentile=95, percentile_warmup=20)
    # 100 trajectories of 1.000 to 1.099 ms, in a shuffled order; every twentieth after
    # warm-up takes 30 ms.
    slow = {i for i in range(100) if i % 20 == 19 and i >= 39}
    fast_us = [1000 + (i * 37) % 100 for i in range(100)]
    for i in range(100):
        with tracer.trajectory(f"t{i}") as traj, traj.env_step():
            clock.advance(us=30_000 if i in slow else fast_us[i])
    roots = [s for s in exporter.get_finished_spans() if s.name == "trajectory"]
    kept = {int(s.attributes["rollout.trajectory.id"][1:]) for s in roots}
    assert slow <= kept  # every slow one after warm-up is exported
    # The threshold sits near the top of the fast ones' durations: only the fast ones at
    # the top of the window seen so far pass, far from all 94 (same clock, same answer).
    assert sorted(kept - slow) == [27, 35, 54, 81]
    assert keep.percentile_threshold_s is not None and keep.percentile_threshold_s < 0.03
    assert len(collector.drain()) == 100


def test_percentile_arguments_are_checked():
    with pytest.raises(ValueError, match="slower_than_percentile"):
        TailKeepProcessor(SimpleSpanProcessor(InMemorySpanExporter()), slower_than_percentile=100)
    with pytest.raises(ValueError, match="percentile_warmup"):
        TailKeepProcessor(
            SimpleSpanProcessor(InMemorySpanExporter()),
            slower_than_percentile=99,
            percentile_warmup=0,
        )
