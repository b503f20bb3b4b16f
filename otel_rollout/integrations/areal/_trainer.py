"""AReaL's trainer loop as steps (docs/areal.md): inside ``PPOTrainer.train`` the
``rollout`` timer opens step ``global_step`` (read from ``train``'s frame) at the engine's
weight version, and every ``stats_tracker.record_timing(key)`` block while a step is
current is a phase named by its key, as long as AReaL's ``timeperf/<key>`` figure (on the
default clock; on another it ends at that clock's reading)."""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any

from otel_rollout import RolloutTracer, current_step
from otel_rollout.instrumentation import caller_locals, internal_error, now_ns
from otel_rollout.integrations._trainer_steps import Around

#: The ``record_timing`` key that starts a step of ``PPOTrainer.train``.
STEP_START_KEY = "rollout"

#: The ``PPOTrainer.train`` call running here: the step it has open.
_LOOP: contextvars.ContextVar[_Loop | None] = contextvars.ContextVar(
    "otel_rollout_areal_loop", default=None
)


class _Loop:
    __slots__ = ("scope", "tracer", "trainer")

    def __init__(self, tracer: RolloutTracer, trainer: Any) -> None:
        self.tracer, self.trainer = tracer, trainer
        self.scope: Any = None

    def next_step(self) -> None:
        self.close(None)
        number = (caller_locals("train") or {}).get("global_step")
        number = number if isinstance(number, int) else None
        try:
            version: int | None = int(self.trainer.rollout.get_version())
        except Exception:  # no rollout engine with a version here: none on the step
            version = None
        self.scope = self.tracer.step(number, trainer="areal", policy_version=version)
        self.scope.__enter__()

    def close(self, exc: BaseException | None) -> None:
        scope, self.scope = self.scope, None
        if scope is not None:
            scope.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)


def train_wrapper(tracer: RolloutTracer) -> Any:
    """``PPOTrainer.train(...)``: its loop's steps."""

    def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if _LOOP.get() is not None:
            return wrapped(*args, **kwargs)
        loop = _Loop(tracer, instance)
        token = _LOOP.set(loop)
        try:
            return wrapped(*args, **kwargs)
        except BaseException as exc:
            loop.close(exc)
            raise
        finally:
            loop.close(None)  # no-op once closed
            _LOOP.reset(token)

    return wrapper


def record_timing_wrapper(tracker: Any) -> Any:
    """``stats_tracker.record_timing(key)`` (the module's, bound to ``tracker``) and
    ``DistributedStatsTracker.record_timing`` (``tracker`` None: the instance's)."""

    def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        inner = wrapped(*args, **kwargs)
        key = args[0] if args else kwargs.get("key")
        try:
            loop = _LOOP.get()
            if loop is not None and key == STEP_START_KEY:
                loop.next_step()
        except Exception as exc:
            internal_error("areal step", exc)
        step = current_step()
        if step is None or not isinstance(key, str):
            return inner
        stats: Any = getattr(tracker if tracker is not None else instance, "stats", None)

        def begin() -> tuple[int, Any]:
            t0 = step._clock()
            return t0, step.start_phase(key, start_ns=t0)

        def end(begun: tuple[int, Any], exc: BaseException | None) -> None:
            t0, handle = begun
            end_ns = None
            if step._clock is now_ns:  # AReaL's own measure of the block
                with contextlib.suppress(Exception):
                    end_ns = t0 + round(float(stats["timeperf/" + key][-1]) * 1e9)
            handle.end(end_ns)

        return Around(inner, begin, end)

    return wrapper
