"""The step: its own trace, macro-phases, generated-by links, the account on the span,
and the current step found from code without the handle."""

from __future__ import annotations

import asyncio
import threading

import pytest

import otel_rollout
from otel_rollout import current_step

MS = 1_000_000


def _sync_step(env, n=4):
    clock, tracer = env.clock, env.tracer
    with tracer.step(n, trainer="ppo", policy_version=3) as step:
        clock.advance(ms=2)
        with tracer.batch() as batch:
            with tracer.trajectory("t0", env="e") as traj:
                traj.set_policy_version(3)
                with traj.generate():
                    clock.advance(ms=50)
            clock.advance(ms=8)
        with step.phase("run_training"):
            clock.advance(ms=30)
        with step.phase("sync_weights"):
            clock.advance(ms=6)
        clock.advance(ms=4)
    return step, batch


def test_a_step_is_the_root_of_its_own_trace_with_a_span_per_phase(manual_env):
    step, _ = _sync_step(manual_env)
    (span,) = manual_env.spans("step")
    assert span.parent is None
    assert span.attributes["rollout.step"] == 4
    assert span.attributes["rollout.step.trainer"] == "ppo"
    assert span.attributes["rollout.policy.version"] == 3
    phases = manual_env.children(span)
    assert [p.name for p in phases] == ["run_training", "sync_weights"]
    assert [p.end_time - p.start_time for p in phases] == [30 * MS, 6 * MS]
    for p in phases:
        assert p.context.trace_id == span.context.trace_id
        assert p.attributes["rollout.step.phase"] == p.name
    assert step.trace_id == format(span.context.trace_id, "032x")


def test_the_step_account_sums_to_the_wall_on_the_span_and_the_handle(manual_env):
    step, _ = _sync_step(manual_env)
    (span,) = manual_env.spans("step")
    assert span.end_time - span.start_time == step.account.wall_ns == 100 * MS
    assert dict(step.account.parts_ns) == {
        "run_training": 30 * MS,
        "sync_weights": 6 * MS,
        "generation": 58 * MS,  # the batch's wall: 2 ms in, to 60 ms
        "other": 6 * MS,
    }
    assert span.attributes["rollout.step.time.generation"] == 0.058
    assert span.attributes["rollout.step.wall"] == 0.1
    (dur,) = manual_env.histogram_points("rollout.step.duration")
    assert dur.sum == 0.1 and dur.exemplars[0].trace_id == span.context.trace_id
    parts = {
        p.attributes["rollout.step.phase"]: p.sum
        for p in manual_env.histogram_points("rollout.step.phase.duration")
    }
    assert parts == {
        "run_training": 0.03,
        "sync_weights": 0.006,
        "generation": 0.058,
        "other": 0.006,
    }


def test_a_batch_opened_in_a_step_links_to_it_and_takes_its_number(manual_env):
    _, batch = _sync_step(manual_env)
    (step_span,) = manual_env.spans("step")
    (batch_span,) = manual_env.spans("batch")
    assert batch_span.parent is None
    assert batch_span.context.trace_id != step_span.context.trace_id
    (link,) = batch_span.links
    assert link.context.span_id == step_span.context.span_id
    assert dict(link.attributes) == {"rollout.link.type": "generated_by", "rollout.step": 4}
    assert batch_span.attributes["rollout.step"] == 4 and batch.step == 4
    (root,) = manual_env.roots()
    assert root.attributes["rollout.step"] == 4


def test_record_phase_is_exactly_as_long_as_the_trainer_measured(manual_env):
    clock = manual_env.clock
    with manual_env.tracer.step(1) as step:
        t0 = clock.now_ns
        clock.advance(ms=10)
        step.record_phase("gen", t0 + 1, t0 + 7_654_321)
        handle = step.start_phase("update_actor", start_ns=t0 + 8 * MS)
        handle.end(t0 + 9 * MS + 17)
    gen, upd = manual_env.spans("gen")[0], manual_env.spans("update_actor")[0]
    assert gen.end_time - gen.start_time == 7_654_320
    assert upd.end_time - upd.start_time == 1 * MS + 17
    assert step.account.parts_ns["gen"] == 7_654_320
    assert step.account.phase_sum_ns["update_actor"] == 1 * MS + 17


def test_the_phase_gauge_is_one_while_the_phase_runs_and_zero_after(manual_env):
    def active():
        return {
            p.attributes["rollout.step.phase"]: p.value
            for p in manual_env.metric_points("rollout.step.phase.active")
        }

    with manual_env.tracer.step(1, trainer="skyrl") as step:
        with step.phase("run_training"):
            assert active() == {"run_training": 1}
        with step.phase("sync_weights"):
            assert active() == {"run_training": 0, "sync_weights": 1}
        (point,) = manual_env.metric_points(
            "rollout.step.phase.active", **{"rollout.step.phase": "sync_weights"}
        )
        assert point.attributes["rollout.step.trainer"] == "skyrl"
    assert active() == {"run_training": 0, "sync_weights": 0}


def test_a_phase_left_open_ends_with_its_step(manual_env):
    with manual_env.tracer.step(1) as step:
        step.start_phase("eval")
        manual_env.clock.advance(ms=3)
    (span,) = manual_env.spans("eval")
    assert span.end_time == manual_env.spans("step")[0].end_time
    assert span.attributes["rollout.step.phase.ended_by_step"] is True
    assert step.account.parts_ns["eval"] == 3 * MS


def test_current_step_inside_the_block_in_tasks_and_threads(manual_env):
    assert current_step() is None

    async def main():
        async with manual_env.tracer.step(2) as step:
            assert current_step() is step
            assert await asyncio.create_task(_current()) is step
            assert await asyncio.to_thread(current_step) is step
        return step

    async def _current():
        return current_step()

    step = asyncio.run(main())
    assert current_step() is None and step.account is not None


def test_a_timer_outside_the_step_s_context_finds_the_step_of_its_thread(manual_env):
    found = []

    async def timer_task(ready, go):  # created before the step began: its context lacks it
        ready.set()
        await go.wait()
        found.append(current_step())

    async def main():
        ready, go = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(timer_task(ready, go))
        await ready.wait()
        with manual_env.tracer.step(5) as step:
            go.set()
            await task
        return step

    step = asyncio.run(main())
    assert found == [step]


def test_the_only_open_step_is_found_from_another_thread(manual_env):
    found = []
    with manual_env.tracer.step(6) as step:
        t = threading.Thread(target=lambda: found.append(current_step()))
        t.start()
        t.join()
    assert found == [step]


def test_async_phases(manual_env):
    async def main():
        async with manual_env.tracer.step(1) as step, step.phase("run_training") as phase:
            manual_env.clock.advance(ms=4)
            assert step.current_phase == ("run_training", phase.start_ns)
        return step

    step = asyncio.run(main())
    assert step.account.parts_ns["run_training"] == 4 * MS and step.current_phase is None


def test_an_error_in_a_phase_is_recorded_and_re_raised(manual_env):
    with pytest.raises(KeyError), manual_env.tracer.step(1) as step, step.phase("run_training"):
        raise KeyError("boom")
    (span,) = manual_env.spans("run_training")
    assert span.status.status_code.name == "ERROR"
    assert manual_env.spans("step")[0].status.status_code.name == "ERROR"


def test_bad_input_is_refused_with_what_is_accepted(manual_env):
    with pytest.raises(ValueError, match="step must be an int"):
        manual_env.tracer.step("3")
    with manual_env.tracer.step(1) as step:
        with pytest.raises(ValueError, match="reserved"):
            step.phase("other")
        with pytest.raises(ValueError, match="non-empty string"):
            step.phase("")
        with pytest.raises(ValueError, match="ends before it starts"):
            step.record_phase("x", 10, 5)


def test_the_module_level_step_uses_the_default_tracer(manual_env):
    from otel_rollout._api.tracer import set_default_tracer

    set_default_tracer(manual_env.tracer)  # what configure() does
    try:
        with otel_rollout.step(3, trainer="t") as step:
            assert isinstance(step, otel_rollout.StepHandle)
    finally:
        set_default_tracer(None)
    (span,) = manual_env.spans("step")
    assert span.attributes["rollout.step"] == 3


def test_the_rl_conventions_name_under_the_genai_opt_in(manual_env, monkeypatch):
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    with manual_env.tracer.step(1):
        pass
    assert [s.name for s in manual_env.spans()] == ["rl.loop"]


def test_a_forked_child_is_in_none_of_its_parent_s_steps(manual_env):
    import os

    with manual_env.tracer.step(1):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: a data loader's worker, say
            os.write(write, b"none" if current_step() is None else b"step")
            os._exit(0)
        os.waitpid(pid, 0)
        assert os.read(read, 4) == b"none"
        assert current_step() is not None


def test_batches_of_another_tracer_on_the_same_processor_are_the_step_s_generation(
    manual_env,
):
    from otel_rollout import RolloutTracer

    env = manual_env  # an integration's own tracer on the same pipeline
    other = RolloutTracer(env.tracer_provider, env.meter_provider, processor=env.processor,
                          clock=env.clock)  # fmt: skip
    with env.tracer.step(1) as step:
        with other.batch():
            env.clock.advance(ms=7)
        env.clock.advance(ms=3)
    assert step.account.parts_ns["generation"] == 7 * MS
    assert step.account.parts_ns["other"] == 3 * MS
