"""Flush on preemption: ``SIGTERM`` and ``SIGHUP`` first shut every setup down (flush,
loss count, summary), then do what they would have done; the threads otel-rollout starts
block both, so the main thread takes them (docs/reliability.md, "Flush on preemption, in
detail")."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_log = logging.getLogger("otel_rollout")

#: The signals handled, by name (those a platform lacks are skipped).
SIGNALS = ("SIGTERM", "SIGHUP")

#: signal number -> the handler this module's replaced
_previous: dict[int, Any] = {}
#: "shutdown" and "flush", each called with the timeout in seconds
_actions: dict[str, Callable[[], Any]] = {}


class _Deferral:
    """A shutdown under way on the main thread: a signal then waits for its end (ending
    the process in its middle would lose the summary and what it still flushes)."""

    depth = 0
    pending: int | None = None


_deferral = _Deferral()


@contextmanager
def deferred() -> Iterator[None]:
    """Around a shutdown: a signal arriving meanwhile on the main thread is acted on
    when the block ends."""
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
            _handler(signum, None)


def install(
    shutdown_all: Callable[[float], Any], flush_all: Callable[[float], Any], timeout_s: float
) -> list[str]:
    """Chain the handler in front of :data:`SIGNALS`' handlers; returns the names handled
    now. ``shutdown_all(timeout_s)`` / ``flush_all(timeout_s)``: shut down / flush every
    setup of the process, each bounded by ``timeout_s``. Only from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return []
    _actions["shutdown"] = lambda: shutdown_all(timeout_s)
    _actions["flush"] = lambda: flush_all(timeout_s)
    done = []
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
    return done


def uninstall() -> None:
    """Put back the handlers replaced, where this module's is still the one set (a
    handler set since is the user's: it stays). Only from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig, previous in list(_previous.items()):
        try:
            if signal.getsignal(sig) is _handler:
                signal.signal(sig, previous)
        except (ValueError, OSError):
            continue
        del _previous[sig]


def _run(action: str) -> None:
    fn = _actions.get(action)
    if fn is not None:
        try:
            fn()
        except Exception as exc:  # the signal still does what it would have
            _log.warning("otel-rollout: %s on a signal failed: %r", action, exc)


def _handler(signum: int, frame: Any) -> None:
    if _deferral.depth:  # a shutdown is under way right here: it flushes; then the signal
        _deferral.pending = signum
        return
    previous = _previous.get(signum, signal.SIG_DFL)
    if callable(previous):  # the user's handler: flush, then it decides
        _run("flush")
        previous(signum, frame)
        return
    _log.warning("otel-rollout: %s received: flushing traces before the process ends",
                 signal.Signals(signum).name)  # fmt: skip
    _run("shutdown")
    uninstall()  # a second signal meanwhile, or now, does what it always did
    if previous is signal.SIG_DFL:  # end as the signal would have
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)


# --- The threads otel-rollout starts leave both signals to the main thread ---------------------
# A process-directed signal goes to any thread not blocking it; taken by an export thread it
# only marks the handler due, and a main thread blocked in C may never run it before SIGKILL.


def _numbers() -> set[int]:
    return {getattr(signal, n) for n in SIGNALS if hasattr(signal, n)}


@contextmanager
def kept_off_new_threads() -> Iterator[None]:
    """Threads started in the block (the export threads, and the ones they start, gRPC's)
    never take SIGTERM or SIGHUP. From the main thread only; its own mask is put back at
    the end."""
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
    """The forking thread's mask, saved while a fork blocks SIGTERM and SIGHUP."""

    saved: Any = None
    #: the latest hook registered by :func:`keep_off_threads_forks_restart` (only it acts)
    generation = 0
    lock = threading.Lock()


_fork_mask = _ForkMask()


def _unblock_after_fork() -> None:
    saved, _fork_mask.saved = _fork_mask.saved, None
    if saved is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, saved)


def keep_off_threads_forks_restart() -> None:
    """Threads restarted in a forked child by the fork hooks registered so far (the SDK's
    export thread, the in-flight record's) never take SIGTERM or SIGHUP, as in the parent.

    While the handler is set (the child inherits it), a fork blocks both signals in the
    forking thread, whose mask the child's main thread and the threads the child's fork
    hooks start inherit; a hook registered now, after the pipeline's, puts the mask back
    once they have run. Call after building a pipeline."""
    if not hasattr(signal, "pthread_sigmask"):
        return
    with _fork_mask.lock:
        _fork_mask.generation += 1
        mine = _fork_mask.generation
    if mine == 1:

        def block() -> None:
            if _previous:
                _fork_mask.saved = signal.pthread_sigmask(signal.SIG_BLOCK, _numbers())

        os.register_at_fork(before=block, after_in_parent=_unblock_after_fork)

    def after_in_child() -> None:
        if mine == _fork_mask.generation:  # the latest: after every pipeline's hooks
            _unblock_after_fork()

    os.register_at_fork(after_in_child=after_in_child)
