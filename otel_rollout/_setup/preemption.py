"""Flush on preemption: a signal that ends the process first flushes what was traced.

Slurm (at preemption and at the time limit), Kubernetes, Docker, Ray (``ray stop``),
``multiprocessing.Pool.terminate()`` and torchrun send ``SIGTERM`` before ``SIGKILL``;
a closed terminal sends ``SIGHUP``. Their default action ends the process without
running exit hooks, so spans still queued would vanish uncounted. ``configure()`` (the
global one, from the main thread, unless ``OTEL_ROLLOUT_FLUSH_ON_SIGNALS=false``) puts a
handler on these two signals that:

* with no handler of the user's before it (the default action): shuts every setup
  down within :data:`~otel_rollout._setup.rollout.EXIT_TIMEOUT_S` (flush, the loss
  count, the summary), then ends the process by the same signal, as it would have;
* with the user's handler before it (a trainer checkpointing on ``SIGTERM``): flushes
  within that bound and calls it; what happens next is the user's handler's to decide
  (a ``sys.exit`` there runs the exit hook, which shuts down).

``SIGINT`` is left alone: it raises ``KeyboardInterrupt``, and the exit hook flushes.
A signal ignored (``SIG_IGN``, as ``nohup`` sets ``SIGHUP``) or handled outside Python
is left as it is. A handler the user sets later replaces this one and is never touched.
The flush runs on a thread of its own: the interrupted main thread may hold a lock it
needs, and then the bound still holds. A signal the main thread missed (it was just about
to sleep in C, as a ``Pool`` worker terminated while it waits for the task queue's lock)
is sent to it again by :mod:`otel_rollout._setup.signal_watch`.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from otel_rollout._base import standby
from otel_rollout._setup import signal_watch

_log = logging.getLogger("otel_rollout")

#: The signals handled, by name (those a platform lacks are skipped).
SIGNALS = ("SIGTERM", "SIGHUP")

#: signal number -> the handler this module's replaced
_previous: dict[int, Any] = {}
_lock = threading.Lock()
_actions: dict[str, Callable[[float], Any]] = {}
_timeout_s = 5.0


class _Deferral:
    """A shutdown in progress on the main thread: a signal waits for its end."""

    depth = 0
    pending: int | None = None


_deferral = _Deferral()


def install(
    shutdown_all: Callable[[float], Any], flush_all: Callable[[float], Any], timeout_s: float
) -> list[str]:
    """Handle :data:`SIGNALS` as the module says; returns the names handled now.

    ``shutdown_all(timeout_s)`` / ``flush_all(timeout_s)``: shut down / flush every setup
    of the process. Only from the main thread (elsewhere: nothing, an empty list).
    """
    global _timeout_s
    if threading.current_thread() is not threading.main_thread():
        return []
    standby.prepare(force=True)  # the handler hands its flush to this thread
    done = []
    with _lock:
        _actions["shutdown"], _actions["flush"] = shutdown_all, flush_all
        _timeout_s = timeout_s
        for name in SIGNALS:
            sig = getattr(signal, name, None)
            if sig is None or sig in _previous:
                continue
            try:
                previous = signal.getsignal(sig)
                if previous is signal.SIG_IGN or previous is None:
                    continue  # ignored on purpose, or handled outside Python
                signal.signal(sig, _handler)
            except (ValueError, OSError):  # not the main interpreter, or not allowed
                continue
            _previous[sig] = previous
            done.append(name)
        if _previous:  # a signal the main thread misses is sent to it again; its thread
            # leaves every one of SIGNALS to the main thread, also one ignored now (a
            # handler the user sets later is the main thread's too)
            with kept_off_new_threads():
                signal_watch.arm(set(_previous), _handler)
    return done


def uninstall() -> None:
    """Put back the handlers replaced, where this module's is still the one set (a
    handler set since is the user's: it stays). Only from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return
    with _lock:
        for sig, previous in list(_previous.items()):
            try:
                if signal.getsignal(sig) is _handler:
                    signal.signal(sig, previous)
            except (ValueError, OSError):
                continue
            del _previous[sig]
        if not _previous:
            signal_watch.disarm()


def installed() -> dict[int, Any]:
    """signal number -> the handler it replaced, for the signals handled now."""
    return dict(_previous)


def _bounded(action: str) -> None:
    fn = _actions.get(action)
    if fn is None:
        return
    timeout = _timeout_s
    # never a new thread here: the interrupted main thread may hold the lock it needs
    worker = standby.submit(lambda: fn(timeout), f"otel-rollout-{action}-on-signal")
    worker.join(timeout + 1.0)


def _numbers() -> set[int]:
    return {getattr(signal, n) for n in SIGNALS if hasattr(signal, n)}


@contextmanager
def kept_off_new_threads() -> Iterator[None]:
    """Threads started in the block (the export threads, and the ones they start, gRPC's)
    never take SIGTERM or SIGHUP. The kernel gives a process-directed signal to any thread
    that does not block it; one taken by such a thread runs the handler only once the
    main thread next runs Python, which a main thread blocked in C may not do before
    SIGKILL. From the main thread only; its own mask is put back at the end."""
    if not hasattr(signal, "pthread_sigmask") or (
        threading.current_thread() is not threading.main_thread()
    ):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _numbers())
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class _ForkMask:
    """The forking thread's signal mask, saved while a fork blocks SIGTERM and SIGHUP."""

    saved: Any = None
    #: the latest hook registered by :func:`keep_off_threads_forks_restart` (only it acts)
    generation = 0


_fork_mask = _ForkMask()


def _block_for_fork() -> None:
    if _previous:  # this module's handler is set, and inherited by the child
        _fork_mask.saved = signal.pthread_sigmask(signal.SIG_BLOCK, _numbers())


def _unblock_after_fork() -> None:
    saved, _fork_mask.saved = _fork_mask.saved, None
    if saved is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, saved)


def keep_off_threads_forks_restart() -> None:
    """Threads restarted in a forked child by the fork hooks registered so far (the SDK's
    export threads, otel-rollout's) never take SIGTERM or SIGHUP, as in the parent.

    A fork blocks both signals in the forking thread, whose mask the child's main thread
    and every thread the child's fork hooks start inherit; a hook registered now, after
    the pipeline's, puts the main thread's mask back once they have run. Without it a
    ``multiprocessing`` worker killed by ``Pool.terminate()`` while its main thread waits
    on the pool's queue (a semaphore, which only a signal to that thread interrupts) could
    see the signal taken by an export thread and hang. Call after building a pipeline."""
    if not hasattr(os, "register_at_fork") or not hasattr(signal, "pthread_sigmask"):
        return
    with _lock:
        _fork_mask.generation += 1
        mine = _fork_mask.generation
    if mine == 1:
        os.register_at_fork(before=_block_for_fork, after_in_parent=_unblock_after_fork)

    def after_in_child() -> None:
        if mine == _fork_mask.generation:  # the latest: after every pipeline's hooks
            signal_watch.restart_in_child()  # before the signals can come
            _unblock_after_fork()

    os.register_at_fork(after_in_child=after_in_child)


@contextmanager
def deferred() -> Iterator[None]:
    """Around a shutdown: a signal arriving meanwhile on the main thread (which the
    shutdown may hold locks on) is acted on when the block ends, not in the middle."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _deferral.depth += 1
    try:
        yield
    finally:
        _deferral.depth -= 1
        if _deferral.depth == 0 and _deferral.pending is not None:
            signum, _deferral.pending = _deferral.pending, None
            _deliver(signum, None)


def _handler(signum: int, frame: Any) -> None:
    signal_watch.started(signum)
    if _deferral.depth:  # a shutdown is under way right here: it flushes; then the signal
        _deferral.pending = signum
        return
    previous = _previous.get(signum, signal.SIG_DFL)
    if callable(previous):  # the user's handler: flush, then it decides
        _bounded("flush")
    else:
        _log.warning("otel-rollout: %s received: flushing traces (at most %.0f s) before the "
                     "process ends", signal.Signals(signum).name, _timeout_s)  # fmt: skip
        _bounded("shutdown")
    _deliver(signum, frame)


def _deliver(signum: int, frame: Any) -> None:
    """What the signal would have done without this module (or, after a shutdown that
    put the earlier handler back, what it does now)."""
    handler = signal.getsignal(signum)
    if handler is _handler:
        handler = _previous.get(signum, signal.SIG_DFL)
    if handler is signal.SIG_IGN or handler is None:
        return
    if callable(handler):
        handler(signum, frame)
        return
    # end as the signal would have: the same signal, its default action
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)
