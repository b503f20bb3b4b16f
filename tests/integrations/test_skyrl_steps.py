"""SkyRL's steps and phases from SkyRL's own timers, against the published skyrl 0.4.0.

SkyRL's ``Timer`` and ``TrainingPhaseGauge.timed_phase`` run as SkyRL calls them; each
phase must last what SkyRL added to its ``timing/<name>`` within 1 ms (by construction it
is the same measurement, so the gap is float rounding). Then SkyRL's fully async loop
itself (``FullyAsyncRayPPOTrainer.train()`` via SkyRL's ``FullyAsyncTrainerSim``: the
training step and the weight sync are sleeps, generation is real over HTTP to a stand-in
server) runs three steps: each is a trace of its own whose phases are SkyRL's, as long as
the ``timing/*`` SkyRL logged for that step.

Without skyrl (the main venv, Python 3.11) these tests skip; ``.ci/steps/20-skyrl.sh``
runs them in a venv of its own.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from otel_rollout import attributes as A
from otel_rollout.testing import make_test_env

SKIP = "skyrl cannot be imported here (the published skyrl 0.4.0 needs Python >= 3.12)"
TOLERANCE_S = 0.001
MACRO = ("wait_for_generation_buffer", "convert_to_training_input", "run_training", "sync_weights")


@pytest.fixture
def env():
    pytest.importorskip("skyrl.train.utils.utils", reason=SKIP)
    from otel_rollout.integrations.skyrl import SkyRLInstrumentor

    env = make_test_env()
    inst = SkyRLInstrumentor()
    inst.instrument(rollout_tracer=env.tracer)
    try:
        yield env
    finally:
        inst.uninstrument()
        env.shutdown()


def phase_seconds(env, step_span) -> dict[str, float]:
    """Seconds per phase name under ``step_span`` (instances of a name summed)."""
    out: dict[str, float] = {}
    for s in env.children(step_span):
        name = s.attributes[A.STEP_PHASE]
        out[name] = out.get(name, 0.0) + (s.end_time - s.start_time) * 1e-9
    return out


def phase_gauge():
    """SkyRL's ``TrainingPhaseGauge`` (a Ray gauge: needs ``ray.util.metrics``)."""
    pytest.importorskip("ray.util.metrics", reason="ray is not installed here")
    from skyrl.train.utils.metrics import TrainingPhaseGauge

    return TrainingPhaseGauge()


def test_each_phase_lasts_what_skyrls_own_timer_logged(env):
    from skyrl.train.utils.utils import Timer

    gauge = phase_gauge()
    timings: dict[str, float] = {}

    async def loop():
        with env.tracer.step(1, trainer="skyrl"):
            with gauge.timed_phase("wait_for_generation_buffer", timings):
                await asyncio.sleep(0.03)
            with Timer("convert_to_training_input", timings):
                time.sleep(0.02)
            for _ in range(2):  # one name twice: SkyRL adds both to timing/run_training
                async with Timer("run_training", timings):
                    await asyncio.sleep(0.015)
            with gauge.timed_phase("sync_weights", timings):
                await asyncio.to_thread(time.sleep, 0.01)

    asyncio.run(loop())
    (step,) = env.spans(A.SPAN_STEP)
    ours = phase_seconds(env, step)
    assert set(ours) == set(timings)
    for name, theirs in timings.items():
        assert abs(ours[name] - theirs) <= TOLERANCE_S, (name, ours[name], theirs)
    assert len([s for s in env.children(step) if s.name == "run_training"]) == 2


def test_a_timer_inside_a_phase_is_no_second_phase(env):
    from skyrl.train.utils.utils import Timer

    timings: dict[str, float] = {}
    step = env.tracer.step(1, trainer="skyrl")
    with step, Timer("run_training", timings), Timer("fwd_logprobs_values_reward", timings):
        time.sleep(0.01)
    (step,) = env.spans(A.SPAN_STEP)
    assert [s.name for s in env.children(step)] == ["run_training"]
    assert set(timings) == {"run_training", "fwd_logprobs_values_reward"}


def test_timers_outside_a_step_or_without_timings_are_not_phases(env):
    from skyrl.train.utils.utils import Timer

    timings: dict[str, float] = {}
    with Timer("eval", timings):  # SkyRL's eval before training: no step yet
        pass
    with env.tracer.step(1, trainer="skyrl"), Timer("init_weight_sync_state"):
        pass  # a timer that only logs: no timing/* figure
    assert [s.name for s in env.spans()] == [A.SPAN_STEP]


def test_uninstrument_restores_skyrls_timer_trainers_and_tracker():
    mod = pytest.importorskip("skyrl.train.utils.utils", reason=SKIP)
    from skyrl.train.utils import tracking

    from otel_rollout.integrations.skyrl import SkyRLInstrumentor

    before = {n: mod.Timer.__dict__[n] for n in ("__enter__", "__exit__", "__aenter__")}
    log = tracking.Tracking.__dict__["log"]
    inst = SkyRLInstrumentor()
    inst.instrument(rollout_tracer=make_test_env().tracer)
    assert mod.Timer.__dict__["__enter__"] is not before["__enter__"]
    inst.uninstrument()
    assert {n: mod.Timer.__dict__[n] for n in before} == before
    assert tracking.Tracking.__dict__["log"] is log


@pytest.fixture
def sim():
    pytest.importorskip("skyrl.train.fully_async_trainer_sim", reason=SKIP)
    import _skyrl_trainer

    _skyrl_trainer.register_env(step_s=0.005)
    made = []

    def make(**kw):
        trainer, kept, handle = _skyrl_trainer.sim_trainer(**kw)
        made.append(handle)
        return trainer, kept

    try:
        yield make
    finally:
        for h in made:
            h.close()
        _skyrl_trainer.unregister_env()


def test_skyrls_fully_async_loop_makes_a_trace_per_step_with_skyrls_phases(env, sim, capsys):
    trainer, kept = sim(steps=3)
    asyncio.run(trainer.train())
    steps = sorted(env.spans(A.SPAN_STEP), key=lambda s: s.attributes[A.STEP])
    assert [s.attributes[A.STEP] for s in steps] == [1, 2, 3]
    assert {s.context.trace_id for s in steps}.__len__() == 3
    for span in steps:
        assert span.parent is None and span.attributes[A.STEP_TRAINER] == "skyrl"
        n = span.attributes[A.STEP]
        theirs = kept.timings(n)
        ours = phase_seconds(env, span)
        assert set(ours) == set(MACRO), (n, ours)
        gaps = {name: abs(ours[name] - theirs[name]) for name in MACRO}
        with capsys.disabled():
            print(
                f"\n[skyrl 0.4.0 fully async, step {n}] ours vs timing/* (ms): "
                + ", ".join(f"{k} {1e3 * ours[k]:.3f}/{1e3 * theirs[k]:.3f}" for k in MACRO)
                + f"; worst gap {1e6 * max(gaps.values()):.3f} us"
            )
        for name in MACRO:
            assert gaps[name] <= TOLERANCE_S, (n, name, ours, theirs)
        # the step runs from SkyRL's step timer to its committed log: at least timing/step
        wall_ns = span.end_time - span.start_time
        assert wall_ns >= round(theirs["step"] * 1e9) - 1_000_000
        parts = {
            k[len(A.STEP_TIME_PREFIX) :]: v
            for k, v in span.attributes.items()
            if k.startswith(A.STEP_TIME_PREFIX)
        }
        assert set(MACRO) <= set(parts)
        assert abs(sum(parts.values()) - span.attributes[A.STEP_WALL]) < 1e-6


def test_skyrls_trajectories_still_run_under_the_loop(env, sim):
    trainer, _ = sim(steps=2)
    asyncio.run(trainer.train())
    # two steps of two groups of two trained on, at least; those still generating when the
    # loop stopped were cancelled by SkyRL
    assert sum(b.status == "ok" for b in env.breakdowns) >= 2 * 2 * 2
