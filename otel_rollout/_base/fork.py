"""Process state that a forked child must not inherit.

A child made by ``fork`` gets copies of the parent's counters, queues and buffers, but
not its threads: a parent's full export queue would make the child drop every span, and
a parent's buffered trajectories would be reported twice. Objects holding such state
register a reset that runs in the child (the parent's own state is untouched).
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable
from typing import Any


def reset_in_child(obj: Any, reset: Callable[[Any], None]) -> None:
    """Call ``reset(obj)`` in every child forked while ``obj`` is alive.

    Holds ``obj`` weakly, so registering does not keep it alive (``os.register_at_fork``
    hooks are never removed).
    """
    if not hasattr(os, "register_at_fork"):  # pragma: no cover - Windows
        return
    ref = weakref.ref(obj)

    def after_in_child() -> None:
        target = ref()
        if target is not None:
            with contextlib.suppress(Exception):  # never let a reset break the child
                reset(target)

    os.register_at_fork(after_in_child=after_in_child)
