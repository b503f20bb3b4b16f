"""Process state a forked child must not inherit (a parent's full export queue, its
buffered trajectories): objects holding such state register a reset run in the child."""

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
    ref = weakref.ref(obj)

    def after_in_child() -> None:
        target = ref()
        if target is not None:
            with contextlib.suppress(Exception):  # never let a reset break the child
                reset(target)

    os.register_at_fork(after_in_child=after_in_child)
