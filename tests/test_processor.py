"""BreakdownProcessor: histograms, sampling, bounded state, concurrency, fault isolation."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import random
import threading

import pytest
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

from otel_rollout import BreakdownProcessor
from otel_rollout._attributes import ALL_BANDS, DURATION_BUCKETS
from otel_rollout._errors import set_raise_internal_errors
from otel_rollout.testing import make_test_env


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
            assert p.sum == pytest.approx(sum(getattr(b, band) for b in mine), rel=1e-9, abs=1e-12)
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
    assert rollout_env.processor.in_flight == 0 and not rollout_env.processor._open


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
