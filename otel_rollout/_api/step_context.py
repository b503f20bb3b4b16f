"""Which step is current, for code that holds no handle (a trainer's timer patched from
outside): the step of the caller's context, else the latest opened on its thread, else the
only one open in the process."""

from __future__ import annotations

import contextlib
import os
import threading
from contextvars import ContextVar
from typing import Any

_CURRENT: ContextVar[Any] = ContextVar("otel_rollout_step", default=None)
_lock = threading.Lock()
#: Open steps, oldest first, with the thread that opened each.
_open: list[tuple[Any, int]] = []


def _forget_in_child() -> None:
    """A forked child (a data loader's worker) is in none of its parent's steps."""
    global _lock
    _lock = threading.Lock()  # the parent may have held it at the fork
    _open.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def current_step() -> Any:
    """The step in progress for the caller (see the module), or ``None``; never an ended
    step, nor one of the parent of a forked child."""
    step = _CURRENT.get()
    if step is not None and not step._ended and step._pid == os.getpid():
        return step
    me = threading.get_ident()
    with _lock:
        for candidate, thread in reversed(_open):
            if thread == me:
                return candidate
        return _open[0][0] if len(_open) == 1 else None


def latest_open() -> Any:
    """The step opened last of those still open in the process, or ``None``."""
    with _lock:
        return _open[-1][0] if _open else None


def enter(step: Any) -> Any:
    """Make ``step`` current and open; returns the token for :func:`leave`."""
    with _lock:
        _open.append((step, threading.get_ident()))
    return _CURRENT.set(step)


def leave(step: Any, token: Any) -> None:
    with _lock:
        for i, (candidate, _) in enumerate(_open):
            if candidate is step:
                del _open[i]
                break
    if _CURRENT.get() is step:
        # exited in a copy of the entering context: nothing to undo
        with contextlib.suppress(ValueError):
            _CURRENT.reset(token)
