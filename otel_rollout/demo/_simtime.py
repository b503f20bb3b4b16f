"""The demo's own clock: an event loop whose time moves only by the simulated latencies.

:class:`SimLoop`'s time is a counter of integer nanoseconds that moves only when the loop
waits for its next timer (or :meth:`~SimLoop.spend` says the loop was busy), so the same
seed gives the same figures on every machine: the real work done meanwhile (skyrl-gym's
envs, a subprocess running generated code) takes no simulated time. ``pace=True`` also
waits in real time until the real clock has caught up, so ``otel-rollout top`` can
watch a run. :class:`SimPool` stands in for a thread pool.
"""

from __future__ import annotations

import asyncio
import collections
import math
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any

#: Seconds a :class:`SimPool` call submitted in this context takes (None: the pool's).
call_cost: ContextVar[float | None] = ContextVar("otel_rollout_demo_call_cost", default=None)


class _Selector:
    """The loop's selector, whose timed waits move the simulated clock instead."""

    def __init__(self, selector: Any, loop: SimLoop) -> None:
        self._selector = selector
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        return getattr(self._selector, name)

    def select(self, timeout: float | None = None) -> list:
        if timeout is None:  # nothing scheduled: only another thread or a signal wakes us
            return self._selector.select(None)
        events = self._selector.select(0)
        if events or timeout <= 0:
            return events
        loop = self._loop
        loop._now_ns += math.ceil(timeout * 1e9)
        if loop.pace:
            ahead = (loop._now_ns - (time.monotonic_ns() - loop._real0_ns)) / 1e9
            if ahead > 0:
                return self._selector.select(ahead)
        return events


class SimLoop(asyncio.SelectorEventLoop):
    """An event loop on simulated time (see the module doc)."""

    def __init__(self, *, pace: bool = True) -> None:
        super().__init__()
        self.pace = pace
        self._now_ns = 0
        self._real0_ns = time.monotonic_ns()
        self._epoch0_ns = time.time_ns()
        # asyncio sets _selector (undeclared in its stubs); ours wraps it
        self._selector: Any = _Selector(self._selector, self)

    def time(self) -> float:
        return self._now_ns / 1e9

    def spend(self, seconds: float) -> None:
        """The code running now kept the loop busy ``seconds`` (synchronous work)."""
        self._now_ns += round(seconds * 1e9)

    def clock_ns(self) -> int:
        """Epoch nanoseconds: the wall clock at the loop's start plus the simulated time."""
        return self._epoch0_ns + self._now_ns

    def monotonic_ns(self) -> int:
        """The simulated time in nanoseconds (a monotonic clock)."""
        return self._now_ns

    async def shutdown_default_executor(self, timeout: float | None = None) -> None:
        """Join the default executor's threads, however long they take in real time.

        ``asyncio.run`` gives this a timeout of 300 s (Python 3.12+); on this loop that
        would be simulated time, which passes at once while a thread is still finishing.
        """
        if sys.version_info >= (3, 12):
            await super().shutdown_default_executor(None)
        else:
            await super().shutdown_default_executor()


class SimPool(ThreadPoolExecutor):
    """``workers`` simulated threads, each call taking ``service_s`` (or
    :data:`call_cost`'s value) of simulated time: a call waits for a free worker, runs on
    the pool's one real thread while the loop waits for it, and its result comes back
    that much later. Use it only from its loop's thread."""

    def __init__(self, loop: SimLoop, workers: int, service_s: float) -> None:
        super().__init__(1, thread_name_prefix="demo-sim")
        self._loop = loop
        self._workers = workers
        self._service_s = service_s
        self._busy = 0
        self._waiting: collections.deque = collections.deque()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        cost = call_cost.get()
        self._waiting.append((future, self._service_s if cost is None else cost, fn, args, kwargs))
        self._start_waiting()
        return future

    def _start_waiting(self) -> None:
        while self._busy < self._workers and self._waiting:
            future, cost, fn, args, kwargs = self._waiting.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            self._busy += 1
            done = super().submit(fn, *args, **kwargs)
            done.exception()  # the loop waits for the call: it takes no simulated time
            self._loop.call_later(cost, self._finish, future, done)

    def _finish(self, future: Future, done: Future) -> None:
        self._busy -= 1
        exc = done.exception()
        future.set_exception(exc) if exc is not None else future.set_result(done.result())
        self._start_waiting()
