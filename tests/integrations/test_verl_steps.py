"""verl's step phases from verl's own ``marked_timer``, against the published verl 0.9.1.

The ``marked_timer`` that ``verl.trainer.ppo.ray_trainer`` (``RayPPOTrainer.fit``) calls,
once instrumented, makes each block a phase of the open step lasting what verl adds to
``timing_raw`` within 1 ms (by construction the same measurement). verl's own
``Tracking.log(data, step=n)`` ends step ``n`` inside an instrumented ``fit()``. Then
verl's ``RayPPOTrainer.fit()`` itself runs three steps with its GPU work stood in
(``_verl_trainer``): each step a trace whose phases last what verl logged.

Without verl (the main venv) these tests skip; ``.ci/steps/40-verl.sh`` runs them in a
venv of its own.
"""

from __future__ import annotations

import time

import pytest

from otel_rollout import attributes as A
from otel_rollout.testing import make_test_env

MOD = "verl.trainer.ppo.ray_trainer"
SKIP = (
    "verl 0.9.1 is not installed here (.ci/steps/40-verl.sh runs these tests in a venv "
    "of its own: pip install 'otel-rollout[verl]')"
)
TOLERANCE_S = 0.001


@pytest.fixture
def verl():
    trainer = pytest.importorskip(MOD, reason=SKIP)
    from otel_rollout.integrations.verl import VerlInstrumentor

    env = make_test_env()
    inst = VerlInstrumentor()
    inst.instrument(rollout_tracer=env.tracer)
    try:
        yield trainer, env
    finally:
        inst.uninstrument()
        env.shutdown()


def phase_seconds(env, step_span) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in env.children(step_span):
        out[s.name] = out.get(s.name, 0.0) + (s.end_time - s.start_time) * 1e-9
    return out


def test_each_marked_timer_block_lasts_what_verl_added_to_timing_raw(verl):
    ray_trainer, env = verl
    timing_raw: dict[str, float] = {}
    with env.tracer.step(1, trainer="verl"):
        with ray_trainer.marked_timer("gen", timing_raw, color="red"):
            time.sleep(0.03)
        with ray_trainer.marked_timer("old_log_prob", timing_raw, color="blue"):
            time.sleep(0.01)
        for _ in range(2):
            with ray_trainer.marked_timer("update_actor", timing_raw, color="red"):
                time.sleep(0.01)
    (step,) = env.spans(A.SPAN_STEP)
    ours = phase_seconds(env, step)
    assert set(ours) == set(timing_raw)
    for name, theirs in timing_raw.items():
        assert abs(ours[name] - theirs) <= TOLERANCE_S, (name, ours[name], theirs)


def test_a_block_inside_another_is_counted_in_it(verl):
    ray_trainer, env = verl
    timing_raw: dict[str, float] = {}
    step, timer = env.tracer.step(1), ray_trainer.marked_timer
    with step, timer("gen", timing_raw), timer("dump_rollout_generations", timing_raw):
        time.sleep(0.005)
    (span,) = env.spans(A.SPAN_STEP)
    assert [s.name for s in env.children(span)] == ["gen"]


def test_verls_step_timer_opens_the_step_and_its_log_ends_it_in_fit(verl):
    ray_trainer, env = verl
    from verl.utils.tracking import Tracking

    from otel_rollout.integrations._trainer_steps import run_wrapper

    logged: list[int] = []

    class Loop:
        """The part of ``RayPPOTrainer.fit`` that times and logs a step, verl's calls."""

        global_steps = 0

        def fit(self):
            logger = Tracking("otel-rollout-test", "steps", default_backend=[])
            for n in (1, 2):
                self.global_steps = n
                timing_raw: dict[str, float] = {}
                with ray_trainer.marked_timer("step", timing_raw):
                    with ray_trainer.marked_timer("gen", timing_raw):
                        time.sleep(0.02)
                    with ray_trainer.marked_timer("update_actor", timing_raw):
                        time.sleep(0.01)
                with ray_trainer.marked_timer("testing", timing_raw):
                    time.sleep(0.005)
                logger.log(data={"timing_s/step": timing_raw["step"]}, step=n)
                logged.append(n)

    loop = Loop()
    # the wrapper the instrumentor put on RayPPOTrainer.fit, around this loop's fit
    run_wrapper(env.tracer, "verl", "global_steps")(loop.fit, loop, (), {})
    steps = env.spans(A.SPAN_STEP)
    assert [s.attributes[A.STEP] for s in steps] == [1, 2] and logged == [1, 2]
    for span in steps:
        assert [s.name for s in env.children(span)] == ["gen", "update_actor", "testing"]


def test_uninstrument_restores_verls_trainer_loop():
    ray_trainer = pytest.importorskip(MOD, reason=SKIP)
    from verl.utils import tracking

    from otel_rollout.integrations.verl import VerlInstrumentor

    timer, fit = ray_trainer.marked_timer, ray_trainer.RayPPOTrainer.__dict__["fit"]
    log = tracking.Tracking.__dict__["log"]
    inst = VerlInstrumentor()
    inst.instrument(rollout_tracer=make_test_env().tracer)
    assert ray_trainer.marked_timer is not timer
    inst.uninstrument()
    assert ray_trainer.marked_timer is timer
    assert ray_trainer.RayPPOTrainer.__dict__["fit"] is fit
    assert tracking.Tracking.__dict__["log"] is log


def test_verls_fit_makes_a_trace_per_step_with_verls_phases(verl, monkeypatch, capsys):
    ray_trainer, env = verl
    pytest.importorskip("hydra", reason=SKIP)
    import _verl_trainer

    timings: list[dict[str, float]] = []
    real = ray_trainer.compute_timing_metrics

    def keep(batch, timing_raw):  # what verl logs as timing_s/*, step by step
        timings.append(dict(timing_raw))
        return real(batch=batch, timing_raw=timing_raw)

    monkeypatch.setattr(ray_trainer, "compute_timing_metrics", keep)
    trainer = _verl_trainer.fit_trainer(steps=3, test_freq=2)
    trainer.fit()
    steps = env.spans(A.SPAN_STEP)
    assert [s.attributes[A.STEP] for s in steps] == [1, 2, 3]
    assert len(timings) == 3
    for span, theirs in zip(steps, timings, strict=True):
        ours = phase_seconds(env, span)
        # start_profile runs before verl's step timer: before the step
        assert set(ours) == set(theirs) - {"step", "start_profile"}, (ours, theirs)
        gap = max(abs(value - theirs[name]) for name, value in ours.items())
        with capsys.disabled():
            print(
                f"\n[verl 0.9.1 fit, step {span.attributes[A.STEP]}] ours/timing_s (ms): "
                + ", ".join(f"{k} {1e3 * v:.3f}/{1e3 * theirs[k]:.3f}" for k, v in ours.items())
                + f"; worst gap {1e6 * gap:.3f} us"
            )
        for name, value in ours.items():
            assert abs(value - theirs[name]) <= TOLERANCE_S, (name, value, theirs[name])
        assert span.end_time - span.start_time >= round(theirs["step"] * 1e9) - 1_000_000
    assert "testing" in phase_seconds(env, steps[1]) and "testing" in phase_seconds(env, steps[2])
