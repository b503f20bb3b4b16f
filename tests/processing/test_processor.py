"""BreakdownProcessor: histograms, sampling, bounded state, concurrency, fault isolation."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import random
import threading

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

from otel_rollout import RolloutTracer
from otel_rollout._base.errors import set_raise_internal_errors
from otel_rollout.attributes import ALL_BANDS, DURATION_BUCKETS
from otel_rollout.sdk import BreakdownProcessor
from otel_rollout.testing import ManualClock, make_test_env


def run_some(env, n, rng):
    for i in range(n):
        with env.tracer.trajectory(f"t{i}", env=rng.choice(["a", "b"]), model="m") as t:
            with t.env_setup():
                pass
            for _ in range(rng.randint(0, 3)):
                with t.generate():
                    pass
                with t.env_step():
                    pass


def expected_buckets(values):
    counts = [0] * (len(DURATION_BUCKETS) + 1)
    for v in values:
        idx = next((i for i, b in enumerate(DURATION_BUCKETS) if v <= b), len(DURATION_BUCKETS))
        counts[idx] += 1
    return counts


def test_histogram_counts_and_sums_match_the_breakdowns(rollout_env):
    run_some(rollout_env, 40, random.Random(1))
    bds = rollout_env.breakdowns
    assert len(bds) == 40
    for env_class in ("a", "b"):
        mine = [b for b in bds if b.env_class == env_class]
        (dur,) = rollout_env.histogram_points(
            "rollout.trajectory.duration", **{"rollout.env.class": env_class}
        )
        assert dur.count == len(mine)
        assert dur.sum == pytest.approx(sum(b.e2e for b in mine), rel=1e-9)
        assert list(dur.bucket_counts) == expected_buckets([b.e2e for b in mine])
        for band in ALL_BANDS:
            (p,) = rollout_env.histogram_points(
                "rollout.trajectory.phase.duration",
                **{"rollout.env.class": env_class, "rollout.phase": band},
            )
            assert p.count == len(mine)
            assert p.sum == pytest.approx(sum(b.band(band) for b in mine), rel=1e-9, abs=1e-12)
        (turns,) = rollout_env.histogram_points(
            "rollout.trajectory.turns", **{"rollout.env.class": env_class}
        )
        assert turns.sum == sum(b.turns for b in mine)


def test_metric_attributes_carry_no_ids_and_exemplars_point_at_the_trace(rollout_env):
    run_some(rollout_env, 5, random.Random(2))
    trace_ids = {int(b.trace_id, 16) for b in rollout_env.breakdowns}
    exemplars = [e for p in rollout_env.histogram_points("rollout.trajectory.duration")
                 for e in p.exemplars]  # fmt: skip
    assert exemplars and all(e.trace_id in trace_ids for e in exemplars)
    allowed = {"rollout.env.class", "gen_ai.request.model", "rollout.trajectory.status"}
    for name in ("rollout.trajectory.duration", "rollout.trajectory.phase.duration"):
        for p in rollout_env.histogram_points(name):
            assert set(p.attributes) <= allowed | {"rollout.phase"}


class RecordOnly(Sampler):
    def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None, *a):
        return SamplingResult(Decision.RECORD_ONLY, attributes)

    def get_description(self):
        return "RecordOnly"


def test_record_only_trajectories_are_accounted_but_not_exported():
    env = make_test_env(sampler=RecordOnly())
    run_some(env, 10, random.Random(3))
    assert env.spans() == []
    assert len(env.breakdowns) == 10
    assert sum(b.env_steps for b in env.breakdowns) > 0
    (dur,) = env.histogram_points("rollout.trajectory.duration", **{"rollout.env.class": "a"})
    assert dur.exemplars == []  # no exported trace to point to


def isolated(fn):
    """Run a test that leaves spans open in a context of its own, so nothing leaks."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return contextvars.copy_context().run(fn, *args, **kwargs)

    return wrapper


@isolated
def test_in_flight_cap_evicts_the_oldest_and_counts_it():
    env = make_test_env(max_in_flight=3)
    scopes = [env.tracer.trajectory(f"t{i}") for i in range(5)]
    for s in scopes:
        s.__enter__()
    assert env.processor.in_flight == 3 and env.processor.evicted == 2
    for s in reversed(scopes):
        s.__exit__(None, None, None)
    assert sorted(b.trajectory_id for b in env.breakdowns) == ["t2", "t3", "t4"]
    (evicted,) = env.metric_points("rollout.processor.evicted")
    assert evicted.value == 2 and evicted.attributes["rollout.eviction.reason"] == "max_in_flight"


@isolated
def test_age_limit_evicts_trajectories_whose_root_never_ends():
    env = make_test_env(max_age_s=1e-9)
    stale = env.tracer.trajectory("stale")
    stale.__enter__()  # never ended
    with env.tracer.trajectory("fresh"):
        pass
    assert [b.trajectory_id for b in env.breakdowns] == ["fresh"]
    assert env.processor.evicted == 1 and env.processor.in_flight == 0


@isolated
def test_spans_that_never_end_are_clipped_at_the_root_end(rollout_env):
    with rollout_env.tracer.trajectory("open") as t:
        t.generate().__enter__()  # a generate span that never ends
    (b,) = rollout_env.breakdowns
    assert b.turns == 1 and b.nanos["llm"] > 0
    assert sum(b.nanos[band] for band in ALL_BANDS) == b.nanos["e2e"]
    assert rollout_env.processor.in_flight == 0 and rollout_env.processor.open_spans == 0


def test_a_failing_sink_never_reaches_the_caller(caplog):
    def broken(_):
        raise RuntimeError("sink down")

    old = set_raise_internal_errors(False)
    try:
        env = make_test_env()
        env.processor.add_sink(broken)
        with caplog.at_level(logging.WARNING, logger="otel_rollout"):
            for _ in range(3):
                with env.tracer.trajectory():
                    pass
    finally:
        set_raise_internal_errors(old)
    assert len(env.breakdowns) == 3
    assert sum("sink down" in r.getMessage() for r in caplog.records) == 1  # logged once


def test_bad_processor_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="max_in_flight"):
        BreakdownProcessor(max_in_flight=0)
    with pytest.raises(ValueError, match=r"'reward'.*expected one of"):
        BreakdownProcessor(bands={"reward": "judge"})


def test_thousand_trajectories_interleaved_on_one_event_loop(rollout_env):
    async def one(i):
        async with rollout_env.tracer.trajectory(f"a{i}", env="e") as t:
            async with t.env_setup():
                await asyncio.sleep(0)
            for _ in range(2):
                async with t.generate():
                    await asyncio.sleep(0)
                async with t.env_step():
                    await asyncio.sleep(0)

    async def main():
        await asyncio.gather(*(one(i) for i in range(1000)))

    asyncio.run(main())
    bds = rollout_env.breakdowns
    assert sorted(b.trajectory_id for b in bds) == sorted(f"a{i}" for i in range(1000))
    assert all((b.turns, b.env_steps) == (2, 2) for b in bds)
    assert len({b.trace_id for b in bds}) == 1000
    assert rollout_env.processor.in_flight == 0
    roots = {s.context.span_id for s in rollout_env.roots()}
    for s in rollout_env.spans():
        if s.name != "trajectory":
            assert s.parent.span_id in roots


def test_trajectories_from_four_threads_are_each_accounted_once(rollout_env):
    def worker(w):
        for i in range(250):
            with rollout_env.tracer.trajectory(f"w{w}-{i}") as t:
                with t.generate():
                    pass
                with t.env_step():
                    pass

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    bds = rollout_env.breakdowns
    assert len(bds) == 1000 and len({b.trajectory_id for b in bds}) == 1000
    assert all((b.turns, b.env_steps) == (1, 1) for b in bds)
    (dur,) = rollout_env.histogram_points("rollout.trajectory.duration")
    assert dur.count == 1000


class NoAttributes(Sampler):
    """A sampler that returns a bare decision: the SDK then records no attributes at all."""

    def __init__(self, decision):
        self.decision = decision

    def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None, *a):
        return SamplingResult(self.decision)

    def get_description(self):
        return "NoAttributes"


@pytest.mark.parametrize("decision", [Decision.RECORD_ONLY, Decision.RECORD_AND_SAMPLE])
def test_roots_and_phases_are_recognised_when_the_sampler_drops_every_attribute(decision):
    env = make_test_env(
        sampler=NoAttributes(decision), clock=ManualClock(), bands={"reward": "env"}
    )
    clock = env.clock
    for i in range(20):
        with env.tracer.trajectory(f"t{i}", env="e", model="m") as t:
            with t.env_setup():
                clock.advance(ms=1)
            for _ in range(2):
                with t.generate():
                    clock.advance(ms=3)
                with t.env_step():
                    clock.advance(ms=5)
            with t.phase("reward"):
                clock.advance(ms=2)
            clock.advance(ms=4)
    bds = env.breakdowns
    assert sorted(b.trajectory_id for b in bds) == sorted(f"t{i}" for i in range(20))
    ms = 1_000_000
    for b in bds:
        assert (b.env_class, b.model, b.status, b.turns, b.env_steps) == ("e", "m", "ok", 2, 2)
        assert dict(b.nanos) == {"llm": 6 * ms, "env": 12 * ms, "env_setup": ms,
                                 "env_teardown": 0, "other": 4 * ms, "e2e": 23 * ms,
                                 "env_queue": 0, "finish_session": 0}  # fmt: skip
    (dur,) = env.histogram_points("rollout.trajectory.duration", **{"rollout.env.class": "e"})
    assert dur.count == 20 and dur.sum == pytest.approx(20 * 0.023)
    (env_band,) = env.histogram_points("rollout.trajectory.phase.duration",
                                       **{"rollout.phase": "env"})  # fmt: skip
    assert env_band.count == 20
    if decision is Decision.RECORD_AND_SAMPLE:  # exported spans carry the attributes again
        roots = env.roots()
        assert len(roots) == 20 and roots[0].attributes["rollout.breakdown.e2e"] == bds[0].e2e
        phases = {s.attributes.get("rollout.phase") for s in env.spans() if s.name != "trajectory"}
        assert phases == {"env_setup", "llm", "env", "reward"}
    else:
        assert env.spans() == []


def test_the_tracer_hands_each_root_to_the_processor_it_was_given():
    finished = []

    class Spy(BreakdownProcessor):
        def finish(self, root, end_ns, status=None):
            bd = super().finish(root, end_ns, status)
            finished.append(bd)
            return bd

    provider = TracerProvider()
    processor = Spy(MeterProvider())
    provider.add_span_processor(processor)
    tracer = RolloutTracer(provider, processor=processor, clock=ManualClock(step_ns=1000))
    with tracer.trajectory("a") as t:
        pass
    assert finished == [t.breakdown] and t.breakdown.nanos["e2e"] == 1000
    assert not t.span.is_recording()  # finish() ended the root


def test_without_a_processor_roots_still_end_with_their_status():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = RolloutTracer(provider)
    assert tracer.processor is None
    with tracer.trajectory("a"):
        pass
    (root,) = exporter.get_finished_spans()
    assert root.attributes["rollout.trajectory.status"] == "ok"
    assert "rollout.breakdown.e2e" not in root.attributes


def test_finish_ends_a_root_it_does_not_track_and_returns_none():
    provider = TracerProvider()
    span = provider.get_tracer("other").start_span("x")
    assert BreakdownProcessor(MeterProvider()).finish(span, span.start_time + 5) is None
    assert span.end_time == span.start_time + 5


def test_the_tracers_meter_provider_records_the_batch_histograms():
    reader = InMemoryMetricReader()
    provider = TracerProvider()
    processor = BreakdownProcessor(MeterProvider())
    provider.add_span_processor(processor)
    tracer = RolloutTracer(provider, MeterProvider(metric_readers=[reader]), processor=processor)
    with tracer.batch(step=1), tracer.trajectory("a"):
        pass
    names = {m.name for rm in reader.get_metrics_data().resource_metrics
             for sm in rm.scope_metrics for m in sm.metrics}  # fmt: skip
    assert "rollout.batch.duration" in names


LAYOUTS = {  # (phase, start, end) in ms after the root's start; the root lasts 100 ms
    "sequential": [("env_setup", 0, 5), ("llm", 5, 30), ("env", 30, 40), ("llm", 45, 60)],
    "touching, empty": [("llm", 10, 20), ("env", 20, 20), ("env", 20, 35)],
    "overlapping": [("llm", 10, 30), ("env", 20, 40), ("llm", 35, 50)],
    "ending out of order": [("env", 10, 50), ("llm", 20, 30)],
    "before the root": [("env_setup", -10, 5), ("llm", 5, 20)],
    "past the root": [("llm", 10, 20), ("env", 90, 120)],
    "custom phase": [("llm", 10, 20), ("reward", 20, 30), ("env", 30, 40)],
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_live_phases_are_accounted_as_the_rules_say(layout):
    from otel_rollout.accounting import compute_breakdown

    ms = 1_000_000
    clock = ManualClock()
    env = make_test_env(clock=clock)
    t0 = clock.now_ns
    with env.tracer.trajectory("t") as traj:
        open_ = [(p, t0 + s * ms, t0 + e * ms) for p, s, e in LAYOUTS[layout]]
        handles = [(traj.phase(p).start(start_time=s), e) for p, s, e in open_]
        for handle, end in sorted(handles, key=lambda h: h[1] if layout != "ending out of "
                                  "order" else -h[1]):  # fmt: skip
            if end <= t0 + 100 * ms:
                handle.end(end)
        clock.advance(100 * ms)
    (b,) = env.breakdowns
    clipped = [(p, s, min(e, t0 + 100 * ms)) for p, s, e in open_]
    assert b.nanos == compute_breakdown(t0, t0 + 100 * ms, clipped).nanos
    assert sum(b.nanos[band] for band in ALL_BANDS) == b.nanos["e2e"] == 100 * ms
