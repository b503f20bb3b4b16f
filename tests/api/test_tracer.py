"""The tracing API: span tree, attributes, real timings, decorator, context propagation."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import otel_rollout
from otel_rollout import current_trajectory, phase, run_in_executor


def test_span_tree_parents_every_phase_to_the_root(rollout_env):
    with rollout_env.tracer.trajectory("t1", env="gsm8k", model="m", repetition_id=2) as t:
        with t.env_setup():
            pass
        for _ in range(3):
            with t.generate(max_tokens=64) as g:
                g.record(input_tokens=10, output_tokens=5, finish_reason="stop")
            with t.env_step():
                pass
        with t.env_teardown():
            pass
    (root,) = rollout_env.roots()
    kids = rollout_env.children(root)
    assert [s.name for s in kids] == ["env_setup"] + ["generate", "env_step"] * 3 + ["env_teardown"]
    assert {s.context.trace_id for s in kids} == {root.context.trace_id}
    gen = rollout_env.spans("generate")[1]
    assert gen.attributes["gen_ai.request.model"] == "m"
    assert gen.attributes["gen_ai.request.max_tokens"] == 64
    assert gen.attributes["gen_ai.usage.input_tokens"] == 10
    assert gen.attributes["gen_ai.usage.output_tokens"] == 5
    assert tuple(gen.attributes["gen_ai.response.finish_reasons"]) == ("stop",)
    assert gen.attributes["rollout.turn"] == 1
    assert "gen_ai.input.messages" not in gen.attributes
    assert root.attributes["rollout.trajectory.repetition_id"] == 2
    # the breakdown is on the root as exported
    assert root.attributes["rollout.trajectory.turns"] == 3
    b = t.breakdown
    assert root.attributes["rollout.breakdown.llm"] == b.band("llm")
    assert root.attributes["rollout.breakdown.e2e"] == b.e2e
    assert b.trace_id == t.trace_id == format(root.context.trace_id, "032x")


def test_content_capture_is_opt_in_and_truncated(rollout_env, monkeypatch):
    with rollout_env.tracer.trajectory() as t, t.generate() as g:
        assert g.record_content(prompt="secret") is False
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    monkeypatch.setenv("OTEL_ROLLOUT_CAPTURE_MAX_CHARS", "4")
    with rollout_env.tracer.trajectory() as t, t.generate() as g:
        assert g.record_content(prompt="abcdefgh", completion="xyz") is True
    gen = rollout_env.spans("generate")[-1]
    assert gen.attributes["gen_ai.input.messages"] == "abcd"
    assert gen.attributes["gen_ai.output.messages"] == "xyz"


def test_bands_are_exact_nanoseconds_including_an_executor_thread(manual_env):
    clock = manual_env.clock
    pool = ThreadPoolExecutor(2)

    def env_step_blocking(traj):
        with traj.env_step():
            clock.advance(ms=50)

    async def main():
        async with manual_env.tracer.trajectory("timed") as traj:
            async with traj.env_setup():
                clock.advance(ms=30)
            for _ in range(2):
                async with traj.generate():
                    await asyncio.sleep(0)
                    clock.advance(ms=40)
                # a plain run_in_executor loses the context; the handle still parents
                await asyncio.get_running_loop().run_in_executor(pool, env_step_blocking, traj)
            async with traj.env_teardown():
                clock.advance(ms=20)
            clock.advance(ms=10)

    asyncio.run(main())
    pool.shutdown()
    (b,) = manual_env.breakdowns
    ms = 1_000_000
    assert dict(b.nanos) == {
        "llm": 80 * ms,
        "env": 100 * ms,
        "env_setup": 30 * ms,
        "env_teardown": 20 * ms,
        "other": 10 * ms,
        "e2e": 240 * ms,
        "env_queue": 0,
        "finish_session": 0,
    }
    assert (b.turns, b.env_steps) == (2, 2)
    (root,) = manual_env.roots()
    assert root.end_time - root.start_time == 240 * ms
    steps = manual_env.spans("env_step")
    assert all(s.parent.span_id == root.context.span_id for s in steps)


def test_real_clock_timings_are_at_least_the_sleeps(rollout_env):
    # Real time, wall-clock sleeps: only lower bounds and sums, which load cannot break.
    pool = ThreadPoolExecutor(1)

    def env_step_blocking(traj):
        with traj.env_step():
            time.sleep(0.02)

    async def main():
        async with rollout_env.tracer.trajectory("timed") as traj:
            async with traj.generate():
                await asyncio.sleep(0.02)
            await asyncio.get_running_loop().run_in_executor(pool, env_step_blocking, traj)

    asyncio.run(main())
    pool.shutdown()
    (b,) = rollout_env.breakdowns
    assert (
        b.band("llm") >= 0.02 and b.band("env") >= 0.02 and b.e2e >= b.band("llm") + b.band("env")
    )
    assert b.e2e < 30  # seconds: a sanity bound, not a timing assertion
    assert (
        sum(b.nanos[band] for band in ("llm", "env", "env_setup", "env_teardown", "other"))
        == (b.nanos["e2e"])
    )


def test_run_in_executor_helper_carries_the_trajectory_context(rollout_env):
    pool = ThreadPoolExecutor(1)
    seen = []

    @phase("env")
    def step():
        seen.append(current_trajectory())

    async def main():
        async with rollout_env.tracer.trajectory("x") as traj:
            await run_in_executor(pool, step)
            return traj

    traj = asyncio.run(main())
    pool.shutdown()
    assert seen == [traj]
    assert rollout_env.breakdowns[0].env_steps == 1


def test_phase_decorator_wraps_functions_and_coroutines(rollout_env):
    @phase("llm")
    async def gen():
        return "out"

    @phase("reward", kind="exact_match")
    def reward():
        return 1.0

    async def main():
        assert await gen() == "out"  # outside a trajectory: no span, still works
        async with rollout_env.tracer.trajectory("d") as traj:
            assert current_trajectory() is traj
            assert await gen() == "out"
            assert reward() == 1.0
        assert current_trajectory() is None

    asyncio.run(main())
    names = [s.name for s in rollout_env.spans()]
    assert names == ["generate", "reward", "trajectory"]
    assert rollout_env.spans("reward")[0].attributes["kind"] == "exact_match"
    assert rollout_env.breakdowns[0].turns == 1


def test_phase_context_manager_outside_a_trajectory_is_a_no_op(rollout_env):
    with phase("env") as p:
        assert p is None
    assert rollout_env.spans() == []


def test_bad_phase_name_is_a_clear_error(rollout_env):
    with pytest.raises(ValueError, match="phase name"):
        phase("")
    with rollout_env.tracer.trajectory() as t, pytest.raises(ValueError, match="phase name"):
        t.phase(None)


def test_module_level_shortcuts_use_the_global_provider():
    # Without a configured SDK the global provider is a no-op: nothing breaks.
    with otel_rollout.trajectory("g", env="e") as t:
        with t.generate():
            pass
        assert current_trajectory() is t
    assert t.breakdown is None


def test_trajectory_id_defaults_from_instance_and_repetition(rollout_env):
    with rollout_env.tracer.trajectory(instance_id="q7", repetition_id=3):
        pass
    with rollout_env.tracer.trajectory():
        pass
    ids = [b.trajectory_id for b in rollout_env.breakdowns]
    assert ids[0] == "q7_3" and len(ids[1]) == 16 and ids[0] != ids[1]


def test_final_status_is_on_every_root_and_can_be_overridden(rollout_env):
    from opentelemetry.trace import Status, StatusCode

    with rollout_env.tracer.trajectory("ok"):
        pass
    with rollout_env.tracer.trajectory("marked") as t:
        t.span.set_status(Status(StatusCode.ERROR, "bad reward parse"))
    with rollout_env.tracer.trajectory("custom") as t:
        t.set_status("truncated")
    statuses = [r.attributes["rollout.trajectory.status"] for r in rollout_env.roots()]
    assert statuses == ["ok", "error", "truncated"]
    assert [b.status for b in rollout_env.breakdowns] == statuses


def test_started_phase_ends_in_another_thread_and_counts(manual_env):
    from opentelemetry import trace

    clock = manual_env.clock
    with manual_env.tracer.trajectory("t1") as traj:
        setup = traj.env_setup().start()  # not current: nothing nests under it by accident
        assert trace.get_current_span() is traj.span
        gen = traj.generate().start()
        clock.advance(ms=5)
        with ThreadPoolExecutor(1) as pool:
            pool.submit(setup.end).result()
        gen.record(output_tokens=7)
        gen.record_error(TimeoutError("engine timed out"))
        clock.advance(ms=2)
        gen.end()
    (root,) = manual_env.roots()
    kids = {s.name: s for s in manual_env.children(root)}
    assert set(kids) == {"env_setup", "generate"}
    assert kids["generate"].attributes["gen_ai.usage.output_tokens"] == 7
    assert kids["generate"].attributes["error.type"] == "TimeoutError"
    (b,) = manual_env.breakdowns
    # llm wins the overlap: 7 ms of llm, and setup only where no generate ran (none)
    assert (b.turns, b.nanos["env_setup"]) == (1, 0)
    assert b.nanos["llm"] == b.nanos["e2e"] == 7_000_000
    assert b.band_sum("env_setup") == 0.005


def test_default_trajectory_ids_come_from_the_id_generator():
    from otel_rollout.testing import DeterministicIds, make_test_env

    ids = []
    for _ in range(2):
        env = make_test_env(id_generator=DeterministicIds(seed=7))
        with env.tracer.trajectory() as t:
            pass
        ids.append((t.trajectory_id, t.trace_id))
    assert ids[0] == ids[1] and len(ids[0][0]) == 16


def test_manual_clock_times_every_span_of_the_tracer(manual_env):
    clock = manual_env.clock
    t0 = clock.now_ns
    with manual_env.tracer.trajectory("t") as t:
        clock.advance(us=3)
        with t.phase("reward"):
            clock.advance(ns=7)
    spans = {s.name: s for s in manual_env.spans()}
    assert (spans["trajectory"].start_time, spans["trajectory"].end_time) == (t0, t0 + 3007)
    assert (spans["reward"].start_time, spans["reward"].end_time) == (t0 + 3000, t0 + 3007)
    with pytest.raises(ValueError, match="non-negative"):
        clock.advance(-1)
