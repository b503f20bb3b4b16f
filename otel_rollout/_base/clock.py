"""Span times: the wall clock read once, then moved by the monotonic clock.

Span timestamps are epoch nanoseconds, but a duration taken as the difference of two
wall-clock readings is wrong whenever the wall clock steps (NTP stepping a drifted
clock, an operator's ``date -s``): 10 s back turns a trajectory into e2e 0, an hour
forward makes it an hour long. :func:`now_ns` reads the wall clock once, at import, and
from then on adds the monotonic clock's progress: a step moves no duration (this
process's timestamps keep their offset from that first reading instead). Forked
children share the anchor (the monotonic clock is the machine's).
"""

from __future__ import annotations

import time
from collections.abc import Callable


def anchored() -> Callable[[], int]:
    """A clock: epoch nanoseconds from the wall clock read now, moved by the monotonic
    clock since."""
    offset = time.time_ns() - time.monotonic_ns()
    monotonic_ns = time.monotonic_ns

    def now_ns() -> int:
        return offset + monotonic_ns()

    return now_ns


#: The process's clock for every span otel-rollout times itself.
now_ns = anchored()
