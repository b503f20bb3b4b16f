"""A call that the caller waits for at most a timeout: the SDK's
``BatchSpanProcessor.force_flush(timeout)`` exports its whole queue in the caller's thread
whatever the timeout (a minute, with the endpoint down). :class:`BoundedCall` runs it on a
thread of its own; the next call waits for a run still going, so runs never pile up."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from otel_rollout._base.fork import reset_in_child


class _Run(threading.Thread):
    def __init__(self, fn: Callable[[float], Any], timeout_s: float, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._fn, self._timeout_s = fn, timeout_s
        self.ok = False

    def run(self) -> None:
        try:
            self.ok = bool(self._fn(self._timeout_s))
        except Exception:
            self.ok = False


class BoundedCall:
    """``call(timeout_s)`` runs ``fn(timeout_s)`` on a daemon thread and returns its result
    as a bool, or False once ``timeout_s`` has passed (``fn`` then goes on alone)."""

    def __init__(self, fn: Callable[[float], Any], name: str) -> None:
        self._fn, self._name = fn, name
        self._run: _Run | None = None
        self._reset()
        reset_in_child(self, BoundedCall._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()  # a child's copy may have been held by a parent thread

    def __call__(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            left = max(0.0, deadline - time.monotonic())
            with self._lock:
                run = self._run
                mine = run is None or not run.is_alive()
                if run is None or mine:
                    run = self._run = _Run(self._fn, left, self._name)
                    run.start()
            run.join(left)
            if run.is_alive():
                return False
            if mine:
                return run.ok
            # That was an earlier call's run, still going when this call came: what ended
            # since may not be in it, so this call makes a run of its own.


class _Done:
    """A finished run, for :func:`start`'s callers: ``join`` returns at once."""

    def join(self, timeout: float | None = None) -> None:
        return None

    def is_alive(self) -> bool:
        return False


def start(fn: Callable[[], Any], name: str) -> threading.Thread | _Done:
    """Run ``fn()`` on a daemon thread; returns something to ``join(timeout)``. Where the
    interpreter refuses a new thread (exit hooks on Python 3.12.0 and 3.12.1), ``fn`` runs
    before this returns, unbounded, rather than not at all."""
    try:
        thread = threading.Thread(target=fn, name=name, daemon=True)
        thread.start()
        return thread
    except RuntimeError:  # "can't create new thread at interpreter shutdown"
        fn()
        return _Done()
