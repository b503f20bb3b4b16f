"""A call that the caller waits for at most a timeout.

The SDK's ``BatchSpanProcessor.force_flush(timeout)`` exports its whole queue in the
caller's thread whatever the timeout, and with the endpoint down every batch waits out
the exporter's retries: a trainer's ``force_flush(5)`` at the end of a step could take a
minute. :class:`BoundedCall` runs such a call on a thread of its own and waits at most
the timeout for it. A call that runs out of time returns False and the work goes on in
the background; the next call waits for that run first, so runs never pile up.
"""

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
                if mine:
                    run = self._run = _Run(self._fn, left, self._name)
                    run.start()
            run.join(left)
            if run.is_alive():
                return False
            if mine:
                return run.ok
            # That was an earlier call's run, still going when this call came: what ended
            # since may not be in it, so this call makes a run of its own.
