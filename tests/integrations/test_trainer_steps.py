"""A trainer's steps and phases from its own timers (the piece SkyRL's and verl's step
instrumentation share), on a stand-in trainer loop shaped like theirs: a ``step`` timer
around the step's body, phase timers adding seconds to a dict, the tracker's log of the
step, a step counter on the trainer. On the manual clock every figure is exact; on the
default clock a phase lasts what the trainer's timer measured, not what we saw.

The published trainers' own timers are tested in their CI venvs
(tests/integrations/test_skyrl_steps.py, test_verl_steps.py)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from otel_rollout import attributes as A
from otel_rollout.integrations._trainer_steps import log_wrapper, run_wrapper
from otel_rollout.integrations.verl._timers import marked_timer_wrapper
from otel_rollout.testing import DeterministicIds, ManualClock, make_test_env

MS = 1_000_000


@pytest.fixture
def env():
    env = make_test_env(clock=ManualClock(), id_generator=DeterministicIds())
    yield env
    env.shutdown()


class Trainer:
    """A trainer loop as verl's and SkyRL's are: ``timer(name, timing_raw)`` adds the
    seconds of its block on ``clock`` to ``timing_raw[name]``."""

    def __init__(self, clock, *, measured=None) -> None:
        self.clock = clock
        self.global_steps = 0
        self.logged: list[int] = []
        self.measured = measured  # seconds the timer reports, whatever the block took

    def timer(self, name, timing_raw):
        return marked_timer_wrapper(self._timer, None, (name, timing_raw), {})

    @contextlib.contextmanager
    def _timer(self, name, timing_raw):
        t0 = self.clock()
        yield
        took = (self.clock() - t0) * 1e-9 if self.measured is None else self.measured
        timing_raw[name] = timing_raw.get(name, 0.0) + took

    def log(self, data, step):
        return log_wrapper(lambda a, k: k.get("step"))(self._log, self, (data,), {"step": step})

    def _log(self, data, step):
        self.logged.append(step)

    def body(self, plan):
        """One step: ``plan`` = [(name or None, ms)] inside the step timer, then after it
        ``testing`` 5 ms and 1 ms of bookkeeping, then the log."""
        clock, timing = self.clock, {}
        with self.timer("step", timing):
            for name, ms in plan:
                if name is None:
                    clock.advance(ms=ms)
                    continue
                with self.timer(name, timing):
                    clock.advance(ms=ms)
        with self.timer("testing", timing):
            clock.advance(ms=5)
        clock.advance(ms=1)
        self.log(timing, step=self.global_steps)
        return timing

    def fit(self, plans):
        for n, plan in enumerate(plans, 1):
            self.global_steps = n
            self.body(plan)


def fit(env, trainer, plans):
    return run_wrapper(env.tracer, "toy", "global_steps")(trainer.fit, trainer, (plans,), {})


def phases(env, step_span):
    return [(s.name, s.end_time - s.start_time) for s in env.children(step_span)]


def test_each_step_runs_from_its_step_timer_to_its_log_with_the_timers_as_phases(env):
    trainer = Trainer(env.clock)
    fit(env, trainer, [[("gen", 30), (None, 2), ("update_actor", 20)], [("gen", 10)]])
    one, two = env.spans(A.SPAN_STEP)
    assert (one.attributes[A.STEP], two.attributes[A.STEP]) == (1, 2)
    assert one.attributes[A.STEP_TRAINER] == "toy"
    assert one.end_time - one.start_time == 58 * MS
    assert phases(env, one) == [("gen", 30 * MS), ("update_actor", 20 * MS), ("testing", 5 * MS)]
    assert one.attributes[A.STEP_TIME_PREFIX + A.STEP_PART_OTHER] == pytest.approx(3e-3)
    assert two.end_time - two.start_time == 16 * MS
    assert trainer.logged == [1, 2]


def test_each_step_is_the_root_of_its_own_trace(env):
    fit(env, Trainer(env.clock), [[("gen", 1)], [("gen", 1)]])
    one, two = env.spans(A.SPAN_STEP)
    assert one.parent is None and two.parent is None
    assert one.context.trace_id != two.context.trace_id


def test_a_timer_inside_a_phase_is_counted_in_it_not_again(env):
    trainer = Trainer(env.clock)

    def fit_nested(plans):
        trainer.global_steps = 1
        timing: dict = {}
        with trainer.timer("step", timing), trainer.timer("update_actor", timing):
            env.clock.advance(ms=4)
            with trainer.timer("update_critic", timing):
                env.clock.advance(ms=6)
        trainer.log(timing, step=1)

    run_wrapper(env.tracer, "toy", "global_steps")(fit_nested, trainer, ([],), {})
    (step,) = env.spans(A.SPAN_STEP)
    assert phases(env, step) == [("update_actor", 10 * MS)]


def test_the_step_timer_again_with_the_same_number_keeps_one_step(env):
    trainer = Trainer(env.clock)

    def fit_resampled(plans):  # SkyRL's dynamic sampling: the step timer twice, one step
        trainer.global_steps = 1
        timing: dict = {}
        for ms in (7, 8):
            with trainer.timer("step", timing), trainer.timer("generate", timing):
                env.clock.advance(ms=ms)
        trainer.log(timing, step=1)

    run_wrapper(env.tracer, "toy", "global_steps")(fit_resampled, trainer, ([],), {})
    (step,) = env.spans(A.SPAN_STEP)
    assert phases(env, step) == [("generate", 7 * MS), ("generate", 8 * MS)]
    assert step.attributes[A.STEP_TIME_PREFIX + "generate"] == pytest.approx(15e-3)


def test_a_step_never_logged_ends_when_the_loop_returns(env):
    trainer = Trainer(env.clock)

    def fit_unlogged(plans):
        trainer.global_steps = 4
        with trainer.timer("step", {}):
            env.clock.advance(ms=3)
        env.clock.advance(ms=2)

    run_wrapper(env.tracer, "toy", "global_steps")(fit_unlogged, trainer, ([],), {})
    (step,) = env.spans(A.SPAN_STEP)
    assert (step.attributes[A.STEP], step.end_time - step.start_time) == (4, 5 * MS)


def test_an_async_train_loop_is_followed_the_same_way(env):
    trainer = Trainer(env.clock)

    async def train(plans):
        for n, plan in enumerate(plans, 1):
            trainer.global_steps = n
            trainer.body(plan)
            await asyncio.sleep(0)

    coro = run_wrapper(env.tracer, "toy", "global_steps")(train, trainer, ([[("a", 2)]] * 2,), {})
    asyncio.run(coro)
    assert [s.attributes[A.STEP] for s in env.spans(A.SPAN_STEP)] == [1, 2]


def test_timers_outside_any_step_are_not_phases(env):
    trainer = Trainer(env.clock)
    with trainer.timer("testing", {}):  # validation before training: no step yet
        env.clock.advance(ms=1)
    assert env.spans() == []


def test_a_step_the_user_opened_gets_the_timers_phases_without_a_run(env):
    trainer = Trainer(env.clock)
    with env.tracer.step(9) as step, trainer.timer("reward", {}):
        env.clock.advance(ms=2)
    assert step.account.parts_ns["reward"] == 2 * MS


def test_on_the_default_clock_a_phase_lasts_what_the_trainers_timer_measured():
    real = make_test_env()
    try:
        # the timer reports 1 us; the block took longer than that (our own work in it)
        trainer = Trainer(ManualClock(), measured=1e-6)
        with real.tracer.step(1) as step, trainer.timer("gen", {}):
            pass
        (gen,) = real.spans("gen")
        assert gen.end_time - gen.start_time == 1_000
        assert step.account.phase_sum_ns["gen"] == 1_000
    finally:
        real.shutdown()


def test_a_failing_phase_records_the_error_and_reraises_it_unchanged(env):
    trainer = Trainer(env.clock)
    boom = RuntimeError("OOM in update_actor")
    step = env.tracer.step(1)
    with pytest.raises(RuntimeError) as caught, step, trainer.timer("update_actor", {}):
        env.clock.advance(ms=1)
        raise boom
    assert caught.value is boom
    (phase,) = env.spans("update_actor")
    assert phase.status.status_code.name == "ERROR"


def test_a_block_that_raised_before_its_timer_added_anything_ends_when_it_ended():
    real = make_test_env()
    try:
        trainer = Trainer(ManualClock(), measured=0.0)  # verl adds nothing when it raises
        step = real.tracer.step(1)
        with pytest.raises(KeyError), step, trainer.timer("gen", {}):
            raise KeyError("prompt")
        (gen,) = real.spans("gen")
        assert gen.end_time > gen.start_time
    finally:
        real.shutdown()
