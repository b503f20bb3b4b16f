"""A handled signal the main thread missed: noticed, and sent to the main thread again.

CPython runs a Python signal handler in two steps: its C handler (on the thread the kernel
picks) marks the signal, then the main thread runs the Python handler when it next runs
Python, or at once when the blocking call it sleeps in fails with ``EINTR``. A signal
taken while the main thread is *about* to sleep interrupts nothing: after a
``multiprocessing`` semaphore's last check (or in glibc's ``sem_wait`` loop, woken by a
``sem_post`` whose token another process took), or taken by another thread that does
not block it. The main thread then sleeps on, the handler never run. A
``multiprocessing.Pool`` worker meets the first case: ``Pool.terminate()`` takes the task
queue's lock, on which the idle workers wait, and sends them ``SIGTERM``; about once in
a hundred terminations a worker then waited for ever (and the pool's ``join`` with it).

The C handler also writes the signal's number to the *wakeup fd*
(:func:`signal.set_wakeup_fd`). :func:`arm` sets one (a pipe; only where none is set) and
reads it on a thread of its own. A watched signal whose Python handler has not started
:data:`GRACE_S` after its byte came is sent again to the main thread
(``pthread_kill``), which interrupts its wait: the handler then runs. A user's wakeup fd
(asyncio sets one for ``loop.add_signal_handler``) is never replaced; one set later
replaces this one, and the watch then just sees nothing. A forked child gets a pipe and
thread of its own from the fork hook; a child forked by C code without Python's fork hooks
shares the pipe until it execs, and a watched signal it takes before then counts here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

_log = logging.getLogger("otel_rollout")

#: Seconds a watched signal's handler may take to start before the signal is sent again.
GRACE_S = 1.0

#: Sends per missed signal at most (the main thread may hold the GIL in C for long).
MAX_SENDS = 3


class _Watch:
    """One process's pipe, counts and reading thread."""

    def __init__(self, signals: Iterable[int], handler: Callable[..., Any]) -> None:
        self.pid = os.getpid()
        self.handler = handler
        self.seen = dict.fromkeys(signals, 0)  # bytes read: the C handler's runs
        self.runs = dict.fromkeys(self.seen, 0)  # the Python handler's starts
        self.echoes = dict.fromkeys(self.seen, 0)  # bytes still to come of signals sent here
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)  # set_wakeup_fd requires it
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        # the signals blocked before the start: the new thread never takes them
        old = signal.pthread_sigmask(signal.SIG_BLOCK, set(self.seen))
        try:
            self.thread = threading.Thread(target=self._serve, name="otel-rollout-signal-watch",
                                           daemon=True)  # fmt: skip
            self.thread.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def close(self) -> None:
        """Both ends closed (no thread reads the pipe: never started, or another process's)."""
        for fd in (self.write_fd, self.read_fd):
            with contextlib.suppress(OSError):
                os.close(fd)

    def owed(self, signum: int) -> int:
        """Signals taken whose Python handler has not started."""
        return self.seen[signum] - self.runs[signum]

    def _serve(self) -> None:
        try:
            self._watch()
        except Exception as exc:  # pragma: no cover - never a traceback into the run
            _log.debug("otel-rollout: signal watch stopped: %r", exc)

    def _wait(self, timeout: float | None) -> bytes | None:
        """What the pipe holds, waiting at most ``timeout`` s; None when nothing came."""
        if hasattr(select, "poll"):  # any fd number (select() stops at 1024)
            poller = select.poll()
            poller.register(self.read_fd, select.POLLIN)
            ready = poller.poll(None if timeout is None else int(timeout * 1000) + 1)
        else:  # pragma: no cover - POSIX without poll()
            ready, _, _ = select.select([self.read_fd], [], [], timeout)
        return os.read(self.read_fd, 512) if ready else None

    def _watch(self) -> None:
        deadline: float | None = None  # when the signals owed are sent again
        sends = 0
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            data = self._wait(wait)
            if data == b"":  # disarm() closed the write end: this thread owns the read end
                with contextlib.suppress(OSError):
                    os.close(self.read_fd)
                return
            if data:
                self._count(data)
            owing = [s for s in self.seen if self.owed(s) > 0]
            if not owing:
                deadline, sends = None, 0
            elif deadline is None:
                deadline = time.monotonic() + GRACE_S
            elif time.monotonic() >= deadline:
                sends += 1
                if sends > MAX_SENDS:  # the main thread holds on in C: no more sends
                    self._forgive(owing)
                    deadline, sends = None, 0
                    continue
                self._send_again(owing)
                deadline = time.monotonic() + GRACE_S * 2**sends

    def _count(self, data: bytes) -> None:
        for byte in data:
            if byte not in self.seen:
                continue
            if self.echoes[byte]:  # a signal sent here: the one it was sent for is counted
                self.echoes[byte] -= 1
            else:
                self.seen[byte] += 1

    def _forgive(self, signums: list[int]) -> None:
        for signum in signums:
            self.seen[signum] = self.runs[signum]

    def _send_again(self, owing: list[int]) -> None:
        main = threading.main_thread().ident
        for signum in owing:
            if signal.getsignal(signum) is not self.handler:  # no longer the one watched
                self._forgive([signum])
                continue
            self.echoes[signum] += 1
            with contextlib.suppress(OSError, ValueError):
                signal.pthread_kill(main, signum)
            _log.debug("otel-rollout: %s taken, its handler not started: sent to the main "
                       "thread again", signal.Signals(signum).name)  # fmt: skip


_watch: _Watch | None = None


def arm(signals: Iterable[int], handler: Callable[..., Any]) -> bool:
    """Watch ``signals`` (handled by ``handler``, which calls :func:`started`) from now.
    From the main thread only; False where nothing is watched (no ``pthread_kill``, a
    wakeup fd already set, not the main thread)."""
    global _watch
    if _watch is not None and _watch.pid == os.getpid():
        return True
    if not hasattr(signal, "pthread_kill") or (
        threading.current_thread() is not threading.main_thread()
    ):
        return False
    watch = _Watch(signals, handler)
    if not _take_wakeup_fd(watch, expected=(-1,)):
        watch.close()
        return False
    _watch = watch
    watch.start()
    return True


def _take_wakeup_fd(watch: _Watch, expected: tuple[int, ...]) -> bool:
    try:
        previous = signal.set_wakeup_fd(watch.write_fd, warn_on_full_buffer=False)
    except (ValueError, OSError):
        return False
    if previous not in expected:  # someone else's: put back (Python cannot read its
        # warn_on_full_buffer: the default it gets back is asyncio's)
        signal.set_wakeup_fd(previous)
        return False
    return True


def disarm() -> None:
    """Stop watching: the wakeup fd unset where it is still this module's. From the main
    thread only."""
    global _watch
    watch = _watch
    if watch is None or watch.pid != os.getpid():
        return
    if threading.current_thread() is not threading.main_thread():
        return
    _watch = None
    with contextlib.suppress(ValueError, OSError):
        previous = signal.set_wakeup_fd(-1)
        if previous != watch.write_fd:  # set since by someone else: theirs stays
            signal.set_wakeup_fd(previous)
    with contextlib.suppress(OSError):
        os.close(watch.write_fd)  # the thread reads the end of the pipe, and closes its end


def started(signum: int) -> None:
    """The Python handler of ``signum`` started (its first line calls this)."""
    watch = _watch
    if watch is not None and signum in watch.runs:
        watch.runs[signum] += 1


def restart_in_child() -> None:
    """In a forked child, from a fork hook, while the watched signals are still blocked:
    a pipe and thread of the child's own (the inherited pipe is the parent's, whose thread
    would take the child's signals for its own)."""
    global _watch
    inherited = _watch
    if inherited is None or inherited.pid == os.getpid():
        return
    _watch = None
    watch = _Watch(inherited.seen, inherited.handler)
    # the parent's, or none: asyncio's fork hook (3.12+) unsets it in every child
    taken = _take_wakeup_fd(watch, expected=(inherited.write_fd, -1))
    inherited.close()
    if not taken:
        watch.close()
        return
    _watch = watch
    watch.start()
