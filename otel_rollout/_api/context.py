"""Carrying the trajectory's context into thread pools, and timing the wait for a thread."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace

from otel_rollout._api.phase_handles import Phase, phase_name
from otel_rollout._api.phase_scope import _PhaseScope
from otel_rollout._api.trajectory import Trajectory, current_trajectory
from otel_rollout._base.errors import internal_error

T = TypeVar("T")


def bind_context(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Callable[[], T]:
    """``fn(*args, **kwargs)`` as a no-argument callable that runs in the caller's context
    (``run_in_executor`` and ``Executor.submit`` do not copy contextvars)."""
    ctx = contextvars.copy_context()
    return functools.partial(ctx.run, fn, *args, **kwargs)


class QueuedCall:
    """One call handed to an executor from a trajectory: the wait and the work, as spans.

    Submitted at ``t0``, started on a thread at ``t1`` (:meth:`run`), its result back on
    the loop at ``t2`` (:meth:`finish`): ``[t0, t1]`` is an ``env_queue`` span and the
    work phase (``open_work``) runs ``[t1, t2]``, so wait plus work is what a timer around
    the ``await`` measures; on the loop's own thread there is no wait. A phase already
    open (``before``) ends at ``t0`` if the call waits, else is the work phase. ``end``,
    if given, ends the work phase instead of ``phase.end(t2)``.
    """

    __slots__ = (
        "_before", "_clock", "_done", "_end", "_failed", "_lock", "_loop_thread",
        "_open_work", "_started", "_t0", "_traj", "_work",
    )  # fmt: skip

    def __init__(
        self,
        traj: Trajectory,
        open_work: Callable[[], _PhaseScope] | None = None,
        *,
        before: Phase | None = None,
        end: Callable[[Phase, int], None] | None = None,
    ) -> None:
        self._t0 = traj._clock()
        self._traj = traj
        self._open_work = open_work
        self._before = before
        self._clock = traj._clock  # the tracer's clock, as every span's
        self._lock = threading.Lock()
        self._loop_thread = threading.get_ident()
        self._started = self._done = self._failed = False
        self._work: Phase | None = None
        self._end = end

    def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Call ``fn`` with the work phase current; the executor calls this."""
        t1 = self._clock()
        work = None
        try:
            with self._lock:
                if not self._done:  # else the caller stopped waiting: no spans
                    self._started = True
                    work = self._begin(t1, threading.get_ident() == self._loop_thread)
        except Exception as exc:  # telemetry never stops the env call
            internal_error("env_queue start", exc)
        if work is None:
            return fn(*args, **kwargs)
        token = otel_context.attach(trace.set_span_in_context(work.span))
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            self._failed = True
            work.record_error(exc)
            raise
        finally:
            otel_context.detach(token)

    def _begin(self, t1: int, inline: bool) -> Phase | None:
        t0, before = self._t0, self._before
        if inline:
            self._work = before if before is not None else self._start_work(t0)
            return self._work
        if before is not None:
            before.end(t0)
        self._traj.env_queue().start(start_time=t0).end(t1)
        self._work = self._start_work(t1)
        return self._work

    def _start_work(self, start: int) -> Phase | None:
        return None if self._open_work is None else self._open_work().start(start_time=start)

    def finish(self, exc: BaseException | None = None) -> None:
        """On the loop, once the call's result (or ``exc``) is back: end what is open."""
        t2 = self._clock()
        try:
            with self._lock:
                self._done = True
                started, work = self._started, self._work
            if not started:  # never ran (cancelled while waiting, or refused): all wait
                if self._before is not None:
                    self._before.end(self._t0)
                queue = self._traj.env_queue().start(start_time=self._t0)
                if exc is not None:
                    queue.record_error(exc)
                queue.end(t2)
            elif work is not None:
                if exc is not None and not self._failed:
                    work.record_error(exc)
                if self._end is not None:
                    self._end(work, t2)
                else:
                    work.end(t2)
        except Exception as err:
            internal_error("env_queue finish", err)


async def run_in_executor(
    executor: Executor | None,
    fn: Callable[..., T],
    /,
    *args: Any,
    phase: str | None = None,
) -> T:
    """``loop.run_in_executor(executor, fn, *args)`` keeping the trajectory's context; the
    wait for a thread is an ``env_queue`` span, and ``phase`` makes the call one
    (docs/agent-loop.md)."""
    loop = asyncio.get_running_loop()
    traj = current_trajectory()
    if traj is None:
        return await loop.run_in_executor(executor, bind_context(fn, *args))
    opener = None if phase is None else functools.partial(traj._open_phase, phase_name(phase))
    call = QueuedCall(traj, opener)
    try:
        result = await loop.run_in_executor(executor, bind_context(call.run, fn, *args))
    except BaseException as exc:
        call.finish(exc)
        raise
    call.finish()
    return result
