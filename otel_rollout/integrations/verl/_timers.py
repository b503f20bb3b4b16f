"""Phases timed where verl times them, as long as verl's timer measured (docs/verl.md):
``simple_timer``'s ``generate_sequences`` (a current ``generate`` phase), ``tool_calls``
(a :class:`~._state.ToolRound`) and ``compute_score`` (``reward``) in a sample; and the
trainer's steps, from ``marked_timer``, ``RayPPOTrainer.fit`` and ``Tracking.log``."""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from otel_rollout import attributes as A
from otel_rollout.instrumentation import Patches, now_ns
from otel_rollout.integrations._trainer_steps import (
    Around,
    TimedBlock,
    log_wrapper,
    measured_end,
    run_wrapper,
)
from otel_rollout.integrations.verl._state import STATE, State, ToolRound

GENERATE, TOOL_CALLS, COMPUTE_SCORE = "generate_sequences", "tool_calls", "compute_score"
#: The phase of verl's ``compute_score`` timer.
REWARD_PHASE = "reward"


def _begin(state: State, name: str, timing: Any) -> tuple[Any, ...]:
    traj = state.traj
    t0 = traj._clock()
    mine = timing if traj._clock is now_ns and isinstance(timing, dict) else None
    before = mine.get(name, 0.0) if mine is not None else None
    if name == TOOL_CALLS:
        state.round = ToolRound(traj, t0)
        return t0, before, mine, state.round, None
    if name == GENERATE:
        scope = traj.generate(operation=A.OP_TEXT_COMPLETION)
    else:
        scope = traj.phase(REWARD_PHASE)
    opened = scope.start(context=otel_context.get_current(), start_time=t0)
    if name == GENERATE:
        state.gen = opened
    return t0, before, mine, opened, otel_context.attach(trace.set_span_in_context(opened.span))


def _end(state: State, name: str, begun: tuple[Any, ...], exc: BaseException | None) -> None:
    t0, before, timing, opened, token = begun
    now = state.traj._clock()
    seconds = None
    if timing is not None and isinstance(before, int | float):
        after = timing.get(name)
        seconds = after - before if isinstance(after, int | float) else None
    if token is not None:
        with contextlib.suppress(Exception):
            otel_context.detach(token)
    if isinstance(opened, ToolRound):
        if state.round is opened:
            state.round = None
        opened.close(measured_end(t0, seconds, now, opened.t1), exc)
        return
    if state.gen is opened:
        state.gen = None
    if exc is not None:
        opened.record_error(exc)
    opened.end(measured_end(t0, seconds, now))


def timer_wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``simple_timer(name, timing_raw)``: ours around verl's for the three names."""
    inner = wrapped(*args, **kwargs)
    state = STATE.get()
    name = args[0] if args else kwargs.get("name")
    if state is None or name not in (GENERATE, TOOL_CALLS, COMPUTE_SCORE):
        return inner
    timing = args[1] if len(args) > 1 else kwargs.get("timing_raw")
    return Around(inner, lambda: _begin(state, name, timing), lambda b, e: _end(state, name, b, e))


TRAINER_MODULE = "verl.trainer.ppo.ray_trainer"
TRACKING_MODULE = "verl.utils.tracking"


def marked_timer_wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``marked_timer(name, timing_raw, ...)``: ours around verl's."""
    name = args[0] if args else kwargs.get("name")
    timing = args[1] if len(args) > 1 else kwargs.get("timing_raw")
    return Around(wrapped(*args, **kwargs), lambda: TimedBlock.begin(name, timing), TimedBlock.end)


def patch_steps(patches: Patches, tracer: Any) -> list[str]:
    """Wrap verl's trainer loop timers, ``fit`` and tracker; the modules missing here."""
    try:
        trainer = importlib.import_module(TRAINER_MODULE)
        tracking = importlib.import_module(TRACKING_MODULE)
    except Exception:
        return [TRAINER_MODULE]
    patches.wrap(trainer, "marked_timer", marked_timer_wrapper)
    patches.wrap(trainer.RayPPOTrainer, "fit", run_wrapper(tracer, "verl", "global_steps"))
    step_of = lambda a, k: k.get("step", a[1] if len(a) > 1 else None)  # noqa: E731
    patches.wrap(tracking.Tracking, "log", log_wrapper(step_of))
    return []
