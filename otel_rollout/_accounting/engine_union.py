"""The engine split of one request whose ``n`` samples run side by side.

vLLM runs each of a request's ``n`` samples as a request of its own inside the engine,
with its own queue, prefill and decode times (and one ``llm_request`` span each). The
samples overlap, so adding their times would count the same wall-clock moment up to ``n``
times and could exceed the call's own duration; taking one sample's times would hide
the others. The rule here: every moment of the union of the samples' engine intervals
counts once, as **decode** if any sample is decoding then, else **prefill** if any is
prefilling, else **queue**. The request's queue + prefill + decode is then the length of
that union (never more than the call), and with one sample it is that sample's own split.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import TypeVar

T = TypeVar("T", int, float)

#: One sample's (start, end) of queue, prefill and decode, on one clock; None where the
#: sample never reached that stage (aborted while queued...).
Stages = Sequence[tuple[T, T] | None]


def union_split(samples: Iterable[Stages]) -> tuple[T, T, T]:
    """(queue, prefill, decode) of the union of the samples' stages, by the rule above.

    Every sample's stages must be on the same clock (vLLM's engine-core monotonic clock,
    or span end times). Intervals of zero or negative length are ignored.
    """
    intervals: list[tuple[T, T, int]] = []
    for stages in samples:
        for stage, interval in enumerate(stages):
            if interval is not None and interval[1] > interval[0]:
                intervals.append((interval[0], interval[1], stage))
    if not intervals:
        zero = 0
        return zero, zero, zero  # type: ignore[return-value]
    points = sorted({p for a, b, _ in intervals for p in (a, b)})
    total: list = [points[0] - points[0]] * 3  # zeros of the clock's type
    for a, b in pairwise(points):
        best = -1
        for start, end, stage in intervals:
            if start <= a and end >= b and stage > best:
                best = stage
        if best >= 0:
            total[best] += b - a
    return total[0], total[1], total[2]


def stages_from_timestamps(
    queued: float, scheduled: float, first: float, last: float
) -> list[tuple[float, float] | None]:
    """A sample's stages from vLLM's ``RequestStateStats`` timestamps (engine-core
    monotonic clock); a timestamp still at 0.0 was not reached."""

    def span(a: float, b: float) -> tuple[float, float] | None:
        return (a, b) if a > 0.0 and b > 0.0 and b >= a else None

    return [span(queued, scheduled), span(scheduled, first), span(first, last)]


def stages_before_end(end: int, queue: int, prefill: int, decode: int) -> list[tuple[int, int]]:
    """A sample's stages laid back from its span's end (ns): vLLM ends ``llm_request`` as
    the last token is processed, so decode ends there, prefill before it, queue first.
    For samples traced by a server, whose spans carry durations but no engine
    timestamps."""
    first = end - decode
    scheduled = first - prefill
    return [(scheduled - queue, scheduled), (scheduled, first), (first, end)]
