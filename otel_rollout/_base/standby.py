"""Work on a thread of its own, also where the interpreter refuses to start one.

Python 3.12.0 and 3.12.1 refuse new threads once interpreter shutdown has begun (``can't
create new thread at interpreter shutdown``, fixed in 3.12.2), so an exit hook there can
neither flush within a bound nor flush at all if it needs a thread. On those versions a
*standby* thread is started while threads still can be (at ``configure()``); it sleeps on
a queue and runs what :func:`start` hands it. Elsewhere :func:`start` starts a thread as
usual; where neither works it runs the work in the caller's thread, so it still happens.

A signal handler must not start a thread either: it may have interrupted the main thread
inside ``Thread.start()``, holding the lock a new thread needs. :func:`submit` hands work
to the standby thread (prepared beforehand with ``prepare(force=True)``) through a
``queue.SimpleQueue``, whose ``put`` is safe there.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

#: Signals the standby thread never takes (the ones otel_rollout._setup.preemption handles).
_SIGNALS = frozenset(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))

#: Whether this interpreter refuses new threads in exit hooks (3.12.0 and 3.12.1).
REFUSES_THREADS_AT_EXIT = (3, 12, 0) <= sys.version_info[:3] < (3, 12, 2)


class Job:
    """What :func:`start` returns: ``join(timeout)`` and ``is_alive()``, like a thread."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn = fn
        self._done = threading.Event()

    def run(self) -> None:
        try:
            self._fn()
        except Exception:  # the work reports its own errors; the waiter only needs "done"
            pass
        finally:
            self._done.set()

    def join(self, timeout: float | None = None) -> None:
        self._done.wait(timeout)

    def is_alive(self) -> bool:
        return not self._done.is_set()


def leave_signals_to_main_thread() -> None:
    """Block SIGTERM and SIGHUP in the calling thread (one otel-rollout started), so the
    kernel gives them to the main thread, whose handler then runs at once: a signal taken
    by another thread waits until the main thread next runs Python, which one blocked in
    C (a lock, a semaphore) may never do."""
    if hasattr(signal, "pthread_sigmask"):
        with contextlib.suppress(ValueError, OSError):
            signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)


class _Standby:
    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self.pid = os.getpid()
        self.thread = threading.Thread(target=self._serve, name="otel-rollout-standby",
                                       daemon=True)  # fmt: skip
        self.thread.start()

    def _serve(self) -> None:
        leave_signals_to_main_thread()
        while True:
            self.jobs.get().run()

    @property
    def usable(self) -> bool:
        return self.pid == os.getpid() and self.thread.is_alive()


_standby: _Standby | None = None
_lock = threading.Lock()


def prepare(force: bool = False) -> None:
    """Start the standby thread now, where exit hooks will need it (or with ``force``:
    a signal handler will); a forked child starts its own."""
    global _standby
    if not (REFUSES_THREADS_AT_EXIT or force):
        return
    with _lock:
        if _standby is None or not _standby.usable:
            first = _standby is None
            _standby = _Standby()
            if first and hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=_restart_in_child)


def _restart_in_child() -> None:
    global _lock, _standby
    _lock = threading.Lock()  # a parent's thread may have held it at the fork
    if _standby is not None:
        try:
            _standby = _Standby()
        except RuntimeError:  # pragma: no cover - no threads here: start() falls back
            _standby = None


def submit(fn: Callable[[], Any], name: str) -> threading.Thread | Job:
    """Run ``fn()`` on the standby thread when there is one (never starting a thread:
    safe in a signal handler), else as :func:`start` does."""
    standby = _standby
    if standby is not None and standby.usable:
        job = Job(fn)
        standby.jobs.put(job)
        return job
    return start(fn, name)


def start(fn: Callable[[], Any], name: str) -> threading.Thread | Job:
    """Run ``fn()`` on a daemon thread; returns something to ``join(timeout)``.

    Where no thread can be started it goes to the standby thread, or, without one, runs
    before this returns (then ``join`` returns at once).
    """
    try:
        thread = threading.Thread(target=fn, name=name, daemon=True)
        thread.start()
        return thread
    except RuntimeError:  # interpreter shutdown on 3.12.0 / 3.12.1
        job = Job(fn)
        standby = _standby
        if standby is not None and standby.usable:
            standby.jobs.put(job)
        else:
            job.run()
        return job
