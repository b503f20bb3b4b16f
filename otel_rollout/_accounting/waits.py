"""Waits apart from work (docs/waits.md), never bands: the engine's split of ``llm``
(queue, prefill, decode, from vLLM's per-request timings; ``llm_client`` is the rest,
floored at 0) and the event-loop figures (``rollout.loop.*_ns`` on the root).

The split of one request whose ``n`` samples run side by side: every moment of the union
of their engine intervals counts once, as decode if any sample is decoding then, else
prefill if any is prefilling, else queue.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Any, TypeVar

from otel_rollout import attributes as A

T = TypeVar("T", int, float)
#: One sample's (start, end) of queue, prefill and decode, on one clock; None where the
#: sample never reached that stage (aborted while queued...).
Stages = Sequence[tuple[T, T] | None]
_QUEUE, _PREFILL, _DECODE = A.VLLM_TIME_IN_QUEUE, A.VLLM_TIME_IN_PREFILL, A.VLLM_TIME_IN_DECODE


def _ns(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return round(value * 1e9)


def engine_ns(attrs: Mapping[str, Any] | None) -> tuple[int, int, int] | None:
    """(queue, prefill, decode) in ns from one span's attributes; None when it has none.

    A part the engine did not reach (aborted while queued) counts 0.
    """
    if not attrs:
        return None
    get = attrs.get
    queue, prefill, decode = get(_QUEUE), get(_PREFILL), get(_DECODE)
    if queue is None and prefill is None and decode is None:  # the usual case: no engine
        return None
    parts = (_ns(queue), _ns(prefill), _ns(decode))
    if parts == (None, None, None):
        return None
    return (parts[0] or 0, parts[1] or 0, parts[2] or 0)


def engine_timings(metrics: Any) -> dict[str, float | int]:
    """Durations in seconds, keyed as vLLM's ``llm_request`` span attributes, from an
    engine's per-request timestamps (``RequestOutput.metrics``); 0.0: not reached."""
    out: dict[str, float | int] = {}

    def ts(name: str) -> float:
        value = getattr(metrics, name, None)
        return float(value) if isinstance(value, int | float) else 0.0

    queued, scheduled = ts("queued_ts"), ts("scheduled_ts")
    first, last = ts("first_token_ts"), ts("last_token_ts")
    for key, a, b in (
        (A.VLLM_TIME_IN_QUEUE, queued, scheduled),
        (A.VLLM_TIME_IN_PREFILL, scheduled, first),
        (A.VLLM_TIME_IN_DECODE, first, last),
        (A.VLLM_TIME_IN_INFERENCE, scheduled, last),
    ):
        if _stage(a, b) is not None:
            out[key] = b - a
    ttft = ts("first_token_latency")
    if ttft > 0.0:
        out[A.VLLM_TIME_TO_FIRST_TOKEN] = ttft
    preemptions = getattr(metrics, "num_preemptions", None)
    if isinstance(preemptions, int) and preemptions > 0:
        out[A.VLLM_NUM_PREEMPTIONS] = preemptions
    return out


def add_engine(total: list[int] | None, part: tuple[int, int, int]) -> list[int]:
    """``total`` (queue, prefill, decode, calls) plus one call's timings."""
    q, p, d, n = total or (0, 0, 0, 0)
    return [q + part[0], p + part[1], d + part[2], n + 1]


def loop_ns(attrs: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """(own, blocked, stall) in ns from a trajectory root's attributes; None when not
    measured."""
    own = attrs.get(A.LOOP_OWN_NS)
    blocked = attrs.get(A.LOOP_BLOCKED_NS)
    if not isinstance(own, int) or not isinstance(blocked, int):
        return None
    stall = attrs.get(A.LOOP_STALL_NS)
    return own, blocked, stall if isinstance(stall, int) else 0


def engine_from_tree(
    root_span_id: int,
    records: Iterable[Any],
    timings: Mapping[int, tuple[str, tuple[int, int, int]]],
) -> list[int] | None:
    """Engine timings summed over a trajectory's outermost ``generate`` spans (docs/waits.md),
    None when none reports any; ``timings``: span id -> (name, :func:`engine_ns`)."""
    if not timings:
        return None
    by_id = {r.span_id: r for r in records}

    def up(span_id: int) -> int | None:
        """The nearest ancestor of ``span_id`` that is the root or a phase span."""
        rec = by_id.get(span_id)
        cur = rec.parent_id if rec is not None else None
        for _ in range(len(by_id) + 1):  # a cycle in malformed input ends the walk
            if cur is None or cur == root_span_id:
                return cur
            parent = by_id.get(cur)
            if parent is None:
                return None
            if parent.phase is not None:
                return cur
            cur = parent.parent_id
        return None

    def outermost_llm(span_id: int) -> bool:
        rec = by_id.get(span_id)
        return rec is not None and rec.phase == A.PHASE_LLM and up(span_id) == root_span_id

    parts: dict[int, tuple[int, int, int]] = {}
    joined: dict[int, list[tuple[int | None, tuple[int, int, int]]]] = {}
    for span_id, (name, part) in timings.items():
        if name != A.VLLM_SPAN_LLM_REQUEST:
            if outermost_llm(span_id):
                parts[span_id] = part
            continue
        generate = up(span_id)  # the generate span it serves
        if generate is not None and outermost_llm(generate):
            end = by_id[span_id].end_ns if span_id in by_id else None
            joined.setdefault(generate, []).append((end, part))
    for span_id, samples in joined.items():
        if span_id not in parts:
            parts[span_id] = _samples_split(samples)
    total: list[int] | None = None
    for part in parts.values():
        total = add_engine(total, part)
    return total


def _samples_split(
    samples: Sequence[tuple[int | None, tuple[int, int, int]]],
) -> tuple[int, int, int]:
    """One call's split from its ``llm_request`` spans: the one span's own timings, or,
    for ``n > 1``, the union of the samples' stages laid back from each span's end."""
    if len(samples) == 1 or any(end is None for end, _ in samples):
        return samples[0][1]
    return union_split(stages_before_end(end, *part) for end, part in samples if end is not None)


def union_split(samples: Iterable[Stages[T]]) -> tuple[T, T, T]:
    """(queue, prefill, decode) of the union of the samples' stages (the rule: the module
    docstring), all on one clock; empty intervals are ignored."""
    intervals: list[tuple[T, T, int]] = []
    for stages in samples:
        for stage, interval in enumerate(stages):
            if interval is not None and interval[1] > interval[0]:
                intervals.append((interval[0], interval[1], stage))
    if not intervals:
        zero = 0
        return zero, zero, zero
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
    return [_stage(queued, scheduled), _stage(scheduled, first), _stage(first, last)]


def _stage(a: float, b: float) -> tuple[float, float] | None:
    return (a, b) if a > 0.0 and b > 0.0 and b >= a else None


def stages_before_end(end: int, queue: int, prefill: int, decode: int) -> list[tuple[int, int]]:
    """A sample's stages laid back from its span's end (ns), for a server's spans (durations,
    no timestamps): vLLM ends ``llm_request`` at the last token, so decode ends there."""
    first = end - decode
    scheduled = first - prefill
    return [(scheduled - queue, scheduled), (scheduled, first), (first, end)]
