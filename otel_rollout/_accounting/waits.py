"""Waits apart from work: the sub-parts of ``llm`` and the event-loop figures of a breakdown.

Neither changes the five bands. ``llm_queue / llm_prefill / llm_decode`` are the sums over
a trajectory's ``generate`` calls of the engine's own per-request timings (vLLM's
``gen_ai.latency.time_in_queue / time_in_model_prefill / time_in_model_decode``, on our
generate span or on vLLM's ``llm_request`` span under it), and ``llm_client = llm -
(queue + prefill + decode)``: everything in ``llm`` the engine core did not time (the
client, the network, the engine's frontend between arrival and queueing, detokenizing).
The four add up to ``llm`` exactly when a trajectory's generate calls do not overlap in
time and all report timings; ``llm_client`` is floored at 0 otherwise.

``loop_own`` and ``loop_blocked`` come from the loop-stall monitor
(:mod:`otel_rollout._processing.loopstall`) through the root's ``rollout.loop.*_ns`` attributes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from otel_rollout import attributes as A
from otel_rollout._accounting.engine_union import stages_before_end, union_split

_NS = 1e-9
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
    """Durations from an engine's per-request timestamps, in seconds, as vLLM's own span
    attributes: ``RequestOutput.metrics`` (vLLM's ``RequestStateStats``), or anything with
    its fields (the demo's engine simulator).

    Only differences taken within one clock: ``queued_ts``, ``scheduled_ts``,
    ``first_token_ts`` and ``last_token_ts`` are the engine core's monotonic clock, while
    ``arrival_time`` is the frontend's wall clock and is never subtracted from them.
    A timestamp still at its default 0.0 (not reached, e.g. aborted while queued) yields
    nothing. ``first_token_latency`` is vLLM's own wall-clock difference from arrival.
    The keys are vLLM's own (those of its ``llm_request`` span); the breakdown's
    ``llm_queue / llm_prefill / llm_decode`` sub-parts are read from them.
    """
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
        if a > 0.0 and b > 0.0 and b >= a:
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
    if total is None:
        total = [0, 0, 0, 0]
    total[0] += part[0]
    total[1] += part[1]
    total[2] += part[2]
    total[3] += 1
    return total


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
    """Engine timings summed over a trajectory's outermost ``generate`` (llm phase) spans.

    ``records`` are the spans of its trace (``span_id``, ``parent_id``, ``phase``);
    ``timings`` maps the ids of the spans that carry engine timings to their name and
    :func:`engine_ns`. A generate span's own timings win; without them, those of the
    engine's ``llm_request`` span below it (vLLM's server, traced with our
    ``traceparent``) are joined to it; with ``n > 1`` (one ``llm_request`` per sample)
    the samples' union (:mod:`.engine_union`). An LLM judge inside ``env.step`` is env time: its
    engine timings are not counted. None when no call reports timings.
    """
    if not timings:
        return None
    by_id = {r.span_id: r for r in records}
    outermost: dict[int, bool] = {}

    def is_outermost_llm(span_id: int) -> bool:
        if span_id not in outermost:
            rec = by_id.get(span_id)
            outermost[span_id] = (
                rec is not None
                and rec.phase == A.PHASE_LLM
                and _under_root(rec, root_span_id, by_id)
            )
        return outermost[span_id]

    parts: dict[int, tuple[int, int, int]] = {}
    joined: dict[int, list[tuple[int | None, tuple[int, int, int]]]] = {}
    for span_id, (name, part) in timings.items():
        if name != A.VLLM_SPAN_LLM_REQUEST:
            if is_outermost_llm(span_id):
                parts[span_id] = part
            continue
        phase_ancestor = _phase_ancestor(span_id, by_id)  # the generate span it serves
        if phase_ancestor is not None and is_outermost_llm(phase_ancestor):
            end = by_id[span_id].end_ns if span_id in by_id else None
            joined.setdefault(phase_ancestor, []).append((end, part))
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
    for ``n > 1`` (one span per sample), the union of the samples' stages laid back from
    each span's end (:mod:`.engine_union`)."""
    if len(samples) == 1 or any(end is None for end, _ in samples):
        return samples[0][1]
    return union_split(stages_before_end(end, *part) for end, part in samples)  # type: ignore[arg-type]


def _under_root(rec: Any, root_id: int, by_id: Mapping[int, Any]) -> bool:
    """Whether ``rec`` hangs below the root with no phase span in between."""
    cur = rec.parent_id
    for _ in range(len(by_id) + 1):
        if cur is None:
            return False
        if cur == root_id:
            return True
        parent = by_id.get(cur)
        if parent is None or parent.phase is not None:
            return False
        cur = parent.parent_id
    return False


def _phase_ancestor(span_id: int, by_id: Mapping[int, Any]) -> int | None:
    rec = by_id.get(span_id)
    cur = rec.parent_id if rec is not None else None
    for _ in range(len(by_id) + 1):
        if cur is None:
            return None
        parent = by_id.get(cur)
        if parent is None:
            return None
        if parent.phase is not None:
            return cur
        cur = parent.parent_id
    return None
