"""Span times: the wall clock read once, at import, then moved by the monotonic clock, so
that a wall-clock step (NTP, ``date -s``) moves no duration (docs/reliability.md). Forked
children share the anchor."""

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
