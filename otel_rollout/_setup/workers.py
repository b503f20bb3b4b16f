"""Flush at the end of a ``multiprocessing`` worker.

A worker started by ``fork`` or ``forkserver`` ends through ``os._exit``, which skips
exit hooks: what it traced would stay in its export queue, lost and uncounted.
``multiprocessing`` runs its own finalizers (``multiprocessing.util.Finalize``) just
before that ``os._exit``; this module registers one in each worker that shuts its
setups down within the exit bound (flush, loss count, summary):

* in a worker forked from a process that called ``configure()``, through
  ``multiprocessing.util.register_after_fork`` (it runs in every worker multiprocessing
  forks, ``fork`` and ``forkserver`` alike);
* in a worker that calls ``configure()`` itself, at that call.

``spawn`` workers end through ``sys.exit`` and the exit hook flushes them anyway. A
worker killed by ``SIGKILL``, or one whose code calls ``os._exit`` itself, cannot flush:
call ``otel_rollout.get_rollout().shutdown()`` (or ``rollout.shutdown()``) first.
``Pool.terminate()`` sends ``SIGTERM``, which :mod:`otel_rollout._setup.preemption`
handles.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.util as mp_util
import os
import threading
from collections.abc import Callable
from typing import Any

#: multiprocessing runs higher priorities first: this one before the user's (usually 0 to
#: 10), so a finalizer of theirs that hangs cannot hold the worker's spans back.
_PRIORITY = 100

_lock = threading.Lock()
_end: Callable[[], Any] | None = None
_registered_pid: int | None = None


class _Hook:
    """The object ``register_after_fork`` holds (weakly) for the life of the process."""


_HOOK = _Hook()


def watch(end_of_worker: Callable[[], Any]) -> None:
    """Call ``end_of_worker()`` at the end of every ``multiprocessing`` worker of this
    process (and of this process, when it is one). Idempotent."""
    global _end
    with _lock:
        first = _end is None
        _end = end_of_worker
    if first:
        mp_util.register_after_fork(_HOOK, _after_fork)
    if multiprocessing.parent_process() is not None:  # configure() in a worker
        _register()


def _after_fork(_: Any) -> None:
    # the worker's finalizers were just cleared: this one is registered anew
    global _registered_pid
    _registered_pid = None
    _register()


def _register() -> None:
    global _registered_pid
    pid = os.getpid()
    if _registered_pid == pid or _end is None:
        return
    _registered_pid = pid
    mp_util.Finalize(None, _run_end, exitpriority=_PRIORITY)


def _run_end() -> None:
    end = _end
    if end is not None:
        with contextlib.suppress(Exception):  # never into the worker's exit
            end()
