"""A trainer's steps and phases from its own timers (SkyRL's ``all_timings``, verl's
``timing_raw``: dicts of seconds; docs/skyrl.md, docs/verl.md), and :class:`Around`, a
trainer's timer with ours around it. The ``step`` timer opens step ``n`` (the trainer's
counter), ended when the trainer logs it, another step opens, or ``train()``/``fit()``
returns; each outermost timed block inside is a phase as long as its timer measured."""

from __future__ import annotations

import contextlib
import contextvars
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import otel_rollout
from otel_rollout.instrumentation import internal_error, now_ns

#: The name trainers give the timer around a whole step (SkyRL and verl alike).
STEP_TIMER = "step"

_RUN: contextvars.ContextVar[TrainerRun | None] = contextvars.ContextVar(
    "otel_rollout_trainer_run", default=None
)
# the phase being timed in this context, so that a timer inside it is no second phase
_OPEN: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "otel_rollout_trainer_phase", default=None
)


class Around:
    """A trainer's timer context manager (sync or async): ``begin()`` just before it is
    entered, ``end(begun, exc)`` once it has exited (not when ``begin`` gave None).
    Neither reaches the training run when it raises."""

    __slots__ = ("_begin", "_begun", "_end", "_inner")

    def __init__(self, inner: Any, begin: Callable[[], Any], end: Callable[..., Any]) -> None:
        self._inner, self._begin, self._end, self._begun = inner, begin, end, None

    def _enter(self) -> None:
        try:
            self._begun = self._begin()
        except Exception as err:
            internal_error("timer start", err)

    def _exit(self, exc: BaseException | None) -> None:
        begun, self._begun = self._begun, None
        if begun is not None:
            try:
                self._end(begun, exc)
            except Exception as err:
                internal_error("timer end", err)

    def __enter__(self) -> Any:
        self._enter()
        return self._inner.__enter__()

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Any:
        try:
            return self._inner.__exit__(exc_type, exc, tb)
        finally:
            self._exit(exc)

    async def __aenter__(self) -> Any:
        self._enter()
        return await self._inner.__aenter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Any:
        try:
            return await self._inner.__aexit__(exc_type, exc, tb)
        finally:
            self._exit(exc)


def measured_end(start: int, seconds: Any, now: int, earliest: int | None = None) -> int:
    """``start`` plus a timer's ``seconds`` when that falls between ``earliest`` (default
    ``start``) and ``now``; ``now`` otherwise."""
    if not isinstance(seconds, int | float):
        return now
    end = start + round(seconds * 1e9)
    return end if (start if earliest is None else earliest) <= end <= now else now


class TrainerRun:
    """One ``train()``/``fit()`` call of ``trainer``, whose step counter is ``counter``."""

    __slots__ = ("_counter", "_scope", "n", "name", "step", "tracer", "trainer")

    def __init__(self, tracer: Any, name: str, trainer: Any, counter: str) -> None:
        self.tracer, self.name, self.trainer, self._counter = tracer, name, trainer, counter
        self.step: Any = None
        self.n: int | None = None
        self._scope: Any = None

    def open_step(self) -> None:
        n = getattr(self.trainer, self._counter, None)
        if not isinstance(n, int) or isinstance(n, bool) or (self.step is not None and n == self.n):
            return
        self.close_step()
        scope = self.tracer.step(n, trainer=self.name)
        self.step = scope.__enter__()
        self._scope, self.n = scope, n

    def close_step(self, n: Any = None) -> None:
        """End the open step (only if it is step ``n``, when given)."""
        scope = self._scope
        if scope is not None and (n is None or n == self.n):
            self._scope = self.step = self.n = None
            scope.__exit__(None, None, None)


def run_wrapper(tracer: Any, name: str, counter: str) -> Callable[..., Any]:
    """A ``wrapt`` wrapper for the trainer's ``train()`` / ``fit()`` (async or not)."""

    def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if _RUN.get() is not None:  # an override calling its base's train()
            return wrapped(*args, **kwargs)
        run = TrainerRun(tracer, name, instance, counter)
        if inspect.iscoroutinefunction(wrapped):
            return _run_async(wrapped, run, args, kwargs)
        with _running(run):
            return wrapped(*args, **kwargs)

    return wrapper


async def _run_async(wrapped: Any, run: TrainerRun, args: tuple, kwargs: dict) -> Any:
    with _running(run):
        return await wrapped(*args, **kwargs)


@contextlib.contextmanager
def _running(run: TrainerRun) -> Iterator[None]:
    token = _RUN.set(run)
    try:
        yield
    finally:
        try:
            run.close_step()
        except Exception as err:  # telemetry never stops the training run
            internal_error("trainer step end", err)
        finally:
            _RUN.reset(token)


def log_wrapper(closes: Callable[[tuple, dict], Any]) -> Callable[..., Any]:
    """A ``wrapt`` wrapper for the trainer's tracker ``log``: ``closes(args, kwargs)`` is
    the step a call logs as that step's last record (None: none); it ends first."""

    def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        run = _RUN.get()
        if run is not None and run.step is not None:
            try:
                n = closes(args, kwargs)
                if n is not None:
                    run.close_step(n)
            except Exception as err:
                internal_error("trainer step end", err)
        return wrapped(*args, **kwargs)

    return wrapper


class TimedBlock:
    """One timed block of the trainer's, a phase of the open step meanwhile: :meth:`begin`
    just before its timer starts, :meth:`end` once it has stopped."""

    __slots__ = ("_before", "_clock", "_handle", "_name", "_t0", "_timings", "_token")

    def __init__(self, name: str, timings: dict, step: Any) -> None:
        self._name, self._timings = name, timings
        self._clock: Callable[[], int] = getattr(step, "_clock", None) or now_ns
        self._before = timings.get(name, 0.0)
        self._t0 = t0 = self._clock()
        self._handle = step.start_phase(name, start_ns=t0)
        self._token = _OPEN.set(name)

    @classmethod
    def begin(cls, name: Any, timings: Any) -> TimedBlock | None:
        """The block about to start, if it is a phase of an open step (the ``step``
        timer opens the run's step instead). Never raises."""
        try:
            if not isinstance(name, str) or not isinstance(timings, dict):
                return None  # a timer that only logs: no ``timing/*`` figure to match
            run = _RUN.get()
            if name == STEP_TIMER:
                if run is not None:
                    run.open_step()
                return None
            step = run.step if run is not None else None
            if step is None:
                step = otel_rollout.current_step()
            if _OPEN.get() is not None or step is None:
                return None
            return cls(name, timings, step)
        except Exception as err:
            internal_error("trainer phase start", err)
            return None

    def end(self, exc: BaseException | None = None) -> None:
        """The trainer's timer has stopped: end the phase. Never raises."""
        try:
            try:
                _OPEN.reset(self._token)
            except ValueError:  # ended in another context than it began
                _OPEN.set(None)
            now = self._clock()
            after = self._timings.get(self._name)
            before = self._before
            seconds = None
            if self._clock is now_ns and isinstance(before, int | float) and after != before:
                seconds = after - before if isinstance(after, int | float) else None
            self._handle.end(measured_end(self._t0, seconds, now), error=exc)
        except Exception as err:
            internal_error("trainer phase end", err)
