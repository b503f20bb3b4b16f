"""The accounting of one trajectory: the one pure function the processor and the report
share, :func:`compute_breakdown`, and :func:`root_breakdown` (with a root's labels).

Rules (docs/design.md, "Accounting"):

* ``e2e`` is the root span's interval ``[s, e]``.
* Each band is the union of its phase spans' intervals clipped to ``[s, e]``, so
  overlapping calls of one band are not counted twice.
* Outermost phase wins: a phase span nested in another phase span is accounted to the
  outer one (resolved by :func:`~otel_rollout._accounting.span_tree.outermost_phases` for span
  trees, or on span start by the processor).
* Where bands overlap in time, the time goes to the band listed first in
  :data:`~otel_rollout.attributes.BANDS` (``llm``, ``env``, ``env_setup``,
  ``env_teardown``), so bands are disjoint.
* ``other = e2e - sum(bands)``: never negative, and the five bands sum to ``e2e`` exactly
  in integer nanoseconds.
* ``finish_session`` phases (releasing the engine's session once the result is final) are
  outside the accounted time: ``e2e`` is the root's interval less their union, as SkyRL's
  ``e2e_time`` leaves that call out; ``bands`` can map them to a band instead.
* ``env_queue`` phases (waiting for an executor thread) count in the band of the env call
  they wait for, the phase that starts where the wait ends (``env`` for a step,
  ``env_setup`` for an init), else in ``env``; ``bands`` can move them. Their own union and
  sum are the ``env_queue`` sub-part, which never changes the bands.
"""

from __future__ import annotations

import dataclasses
import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from operator import le
from types import MappingProxyType
from typing import Any

from otel_rollout import attributes as A
from otel_rollout._accounting.breakdown import (
    MAX_INTERVALS,
    Breakdown,
    PhaseInterval,
    new_breakdown,
)
from otel_rollout._accounting.waits import loop_ns
from otel_rollout._base.semconv import bounded_status

_NS = 1e-9
_BAND_INDEX = MappingProxyType({band: i for i, band in enumerate(A.BANDS)})
#: Not a band: the time of these phases is left out of the trajectory's accounted time.
_OUTSIDE = "_outside"
_ENV_CALLS = frozenset((A.PHASE_ENV, A.PHASE_ENV_SETUP, A.PHASE_ENV_TEARDOWN))


def _band_of(phase: str, bands: Mapping[str, str] | None) -> str:
    if bands:
        band = bands.get(phase)
        if band is not None:
            return band
    return _OUTSIDE if phase == A.PHASE_FINISH_SESSION else phase


def _union_length(intervals: list[tuple[int, int]]) -> int:
    """Length of the union of half-open intervals (sorted in place)."""
    intervals.sort()
    total = 0
    cur_s, cur_e = None, None
    for s, e in intervals:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def _disjoint(outside: list[tuple[int, int]], kept: array) -> bool:
    """Whether no two intervals overlap (touching is not overlapping): outside ones and
    the flat (band, start, end) triples of ``kept``. Sorted by start, it is enough that
    each ends before the next starts; the comparison runs in C."""
    every = list(zip(kept[1::3], kept[2::3], strict=True))
    if outside:
        every.extend(outside)
    if len(every) < 2:
        return True
    every.sort()
    starts, ends = zip(*every, strict=True)
    return all(map(le, ends, starts[1:]))


def _follows(phases: list[Any]) -> dict[int, str]:
    """The env call each wait precedes: the phase starting where the wait ends."""
    follows: dict[int, str] = {}
    for phase, s, _ in phases:
        if phase != A.PHASE_ENV_QUEUE and (s not in follows or phase in _ENV_CALLS):
            follows[s] = phase
    return follows


def root_labels(attrs: Mapping[str, Any], error: bool) -> tuple[str, Any, Any, dict[str, Any]]:
    """Status, env class, model and the low-cardinality labels of a trajectory root.

    ``error`` is whether the root span's status code is ERROR; an explicit
    ``rollout.trajectory.status`` attribute wins. Shared by the processor and the report
    so that online and offline breakdowns carry the same labels.
    """
    status = attrs.get(A.STATUS)
    if not isinstance(status, str) or not status:
        status = A.STATUS_ERROR if error else A.STATUS_OK
    else:  # a free-form status never becomes a metric label
        status = bounded_status(status)
    env_class = attrs.get(A.ENV_CLASS)
    model = attrs.get(A.GEN_AI_REQUEST_MODEL)
    labels: dict[str, Any] = {A.STATUS: status}
    if env_class is not None:
        labels[A.ENV_CLASS] = env_class
    if model is not None:
        labels[A.GEN_AI_REQUEST_MODEL] = model
    return status, env_class, model, labels


def compute_breakdown(
    start_ns: int,
    end_ns: int,
    phases: Iterable[PhaseInterval | tuple[str, int, int]],
    *,
    trajectory_id: str = "",
    trace_id: str = "",
    status: str = A.STATUS_OK,
    env_class: str | None = None,
    model: str | None = None,
    bands: Mapping[str, str] | None = None,
    attributes: Mapping[str, Any] | None = None,
    batch_id: str | None = None,
    policy_version: int | None = None,
    reward: float | None = None,
) -> Breakdown:
    """Compute the breakdown of a trajectory from its root interval and outermost phases.

    ``phases`` are the outermost phase spans (see
    :func:`~otel_rollout._accounting.span_tree.outermost_phases`). A phase that
    is not a band name falls into ``other`` unless ``bands`` maps it to one (for example
    ``{"reward": "env"}``). ``turns`` counts ``llm`` phases, ``env_steps`` ``env`` phases.
    ``env_queue`` and ``finish_session`` phases are accounted as the module docstring says.
    """
    if end_ns < start_ns:
        end_ns = start_ns
    phases = list(phases)
    follows: dict[int, str] | None = None  # built at the first wait (most have none)
    sums = [0, 0, 0, 0]
    lengths = [0, 0, 0, 0]  # clipped lengths: the bands when no two intervals overlap
    kept = array("q")  # (band index, start, end) of each clipped interval
    outside: list[tuple[int, int]] = []
    queued: list[tuple[int, int]] = []
    queue_sum = 0
    turns = env_steps = 0
    llm, env, queue, finish = A.PHASE_LLM, A.PHASE_ENV, A.PHASE_ENV_QUEUE, A.PHASE_FINISH_SESSION
    band_index = _BAND_INDEX
    for phase, s, e in phases:
        if e < s:
            e = s
        cs = s if s > start_ns else start_ns
        ce = e if e < end_ns else end_ns
        if phase == llm:
            turns += 1
            band = llm if not bands else _band_of(phase, bands)
        elif phase == env:
            env_steps += 1
            band = env if not bands else _band_of(phase, bands)
        elif phase == queue:
            queue_sum += e - s
            if ce > cs:
                queued.append((cs, ce))
            band = bands.get(phase) if bands else None
            if band is None:
                if follows is None:
                    follows = _follows(phases)
                band = _band_of(follows.get(e, env), bands)
        elif bands or phase == finish:
            band = _band_of(phase, bands)
        else:
            band = phase
        idx = band_index.get(band)
        if idx is None:
            if band == _OUTSIDE and ce > cs:
                outside.append((cs, ce))
            continue
        sums[idx] += e - s
        if ce > cs:
            lengths[idx] += ce - cs
            kept.extend((idx, cs, ce))
    nanos: dict[str, int] = {}
    if _disjoint(outside, kept):  # a sequential agent loop: nothing to take apart
        outside_len = sum(ce - cs for cs, ce in outside) if outside else 0
        for idx, band in enumerate(A.BANDS):
            nanos[band] = lengths[idx]
    else:
        clipped: list[list[tuple[int, int]]] = [[], [], [], []]
        for k in range(0, len(kept), 3):
            clipped[kept[k]].append((kept[k + 1], kept[k + 2]))
        covered: list[tuple[int, int]] = list(outside)
        outside_len = covered_len = _union_length(covered)
        for idx, band in enumerate(A.BANDS):
            if clipped[idx]:
                covered.extend(clipped[idx])
                new_len = _union_length(covered)
                nanos[band] = new_len - covered_len
                covered_len = new_len
            else:
                nanos[band] = 0
    return _assemble(
        start_ns, end_ns, [nanos[band] for band in A.BANDS], sums, kept, turns, env_steps,
        nanos, outside_len, queued, queue_sum,
        trajectory_id=trajectory_id, trace_id=trace_id, status=status, env_class=env_class,
        model=model, attributes=attributes, batch_id=batch_id, policy_version=policy_version,
        reward=reward,
    )  # fmt: skip


def _assemble(
    start_ns: int,
    end_ns: int,
    bands_ns: list[int],
    sums: list[int],
    kept: array,
    turns: int,
    env_steps: int,
    nanos: dict[str, int],
    outside_len: int,
    queued: list[tuple[int, int]],
    queue_sum: int,
    *,
    trajectory_id: str,
    trace_id: str,
    status: str,
    env_class: str | None,
    model: str | None,
    attributes: Mapping[str, Any] | None,
    batch_id: str | None,
    policy_version: int | None,
    reward: float | None,
) -> Breakdown:
    """The breakdown from the bands' nanoseconds (``bands_ns``, in :data:`A.BANDS` order)
    and the rest of what :func:`compute_breakdown` gathered."""
    if len(kept) > 3 * MAX_INTERVALS:
        kept = _latest(kept)
    root = end_ns - start_ns
    for band, ns in zip(A.BANDS, bands_ns, strict=True):
        nanos[band] = ns
    nanos[A.BAND_OTHER] = root - outside_len - sum(bands_ns)
    e2e = nanos["e2e"] = root - outside_len
    queue = nanos[A.PHASE_ENV_QUEUE] = _union_length(queued) if queued else 0
    nanos[A.PHASE_FINISH_SESSION] = outside_len
    ns = _NS
    return new_breakdown(  # every field, in order
        trajectory_id, trace_id,
        e2e * ns, bands_ns[0] * ns, bands_ns[1] * ns, bands_ns[2] * ns, bands_ns[3] * ns,
        nanos[A.BAND_OTHER] * ns,
        sums[0] * ns, sums[1] * ns, sums[2] * ns, sums[3] * ns,
        turns, env_steps, status, env_class, model, start_ns, end_ns,
        MappingProxyType(nanos), MappingProxyType(dict(attributes or {})),
        None if batch_id is None else str(batch_id), _int_or_none(policy_version),
        None, None,  # consumed_version, consumed_time_ns
        kept, queue * ns, queue_sum * ns, outside_len * ns, _finite_or_none(reward),
        None, None, None, None,  # llm_queue, llm_prefill, llm_decode, llm_client
        None, None, None,  # loop_own, loop_blocked, loop_stall
        {},  # waits_nanos
    )  # fmt: skip


def root_breakdown(
    start_ns: int,
    end_ns: int,
    phases: Iterable[PhaseInterval | tuple[str, int, int]],
    attributes: Mapping[str, Any],
    *,
    error: bool = False,
    trace_id: str = "",
    bands: Mapping[str, str] | None = None,
    engine: Sequence[int] | None = None,
) -> Breakdown:
    """The breakdown of a trajectory root with its labels: what the processor, the console
    exporter and the report all compute when a root ends.

    ``attributes`` are the root span's; ``error`` is whether its status code is ERROR;
    ``engine`` the engine's (queue, prefill, decode) ns summed over the generate calls.
    """
    status, env_class, model, labels = root_labels(attributes, error)
    bd = compute_breakdown(
        start_ns,
        end_ns,
        phases,
        trajectory_id=str(attributes.get(A.TRAJECTORY_ID, "")),
        trace_id=trace_id,
        status=status,
        env_class=env_class,
        model=model,
        bands=bands,
        attributes=labels,
        batch_id=attributes.get(A.BATCH_ID),
        policy_version=attributes.get(A.POLICY_VERSION),
        reward=attributes.get(A.REWARD),
    )
    return with_waits(bd, engine, loop_ns(attributes))


def sequential_breakdown(
    start_ns: int,
    end_ns: int,
    flat: array,
    band_ns: Sequence[int],
    attributes: Mapping[str, Any],
    *,
    error: bool = False,
    trace_id: str = "",
    engine: Sequence[int] | None = None,
) -> Breakdown:
    """:func:`root_breakdown` of a sequential agent loop, no band mapping, from what the
    processor summed as its phases ended: ``flat`` (band index in
    :data:`~otel_rollout.attributes.BANDS`, start, end) triples of band phases, none empty,
    each starting at or after the previous one's end, all inside ``[start_ns, end_ns]``;
    ``band_ns`` their lengths summed per band. Nothing overlaps and nothing is clipped, so
    each band is its sum: the rules of :func:`compute_breakdown` give the same figures."""
    status, env_class, model, labels = root_labels(attributes, error)
    codes = flat[::3]
    bands = list(band_ns)
    bd = _assemble(
        start_ns, end_ns, bands, bands, flat, codes.count(0), codes.count(1), {}, 0, [], 0,
        trajectory_id=str(attributes.get(A.TRAJECTORY_ID, "")), trace_id=trace_id,
        status=status, env_class=env_class, model=model, attributes=labels,
        batch_id=attributes.get(A.BATCH_ID), policy_version=attributes.get(A.POLICY_VERSION),
        reward=attributes.get(A.REWARD),
    )  # fmt: skip
    return with_waits(bd, engine, loop_ns(attributes))


def _finite_or_none(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError):
        return None


def _latest(flat: array) -> array:
    triples = sorted(
        ((flat[i + 2], flat[i + 1], flat[i]) for i in range(0, len(flat), 3)), reverse=True
    )[:MAX_INTERVALS]
    out = array("q")
    for e, s, idx in sorted(triples, key=lambda t: (t[1], t[0])):
        out.extend((idx, s, e))
    return out


def with_waits(
    bd: Breakdown, engine: Sequence[int] | None, loop: tuple[int, int, int] | None
) -> Breakdown:
    """``bd`` with the engine split (``engine``: queue, prefill, decode ns) and the loop
    figures (``loop``: own, blocked, stall ns) filled in; ``bd`` itself when both are
    None."""
    if engine is None and loop is None:
        return bd
    nanos = dict(bd.waits_nanos)
    values: dict[str, Any] = {}
    if engine is not None:
        q, p, d = engine[0], engine[1], engine[2]
        client = max(0, bd.nanos.get(A.PHASE_LLM, 0) - q - p - d)
        for name, v in zip(A.LLM_SUBPARTS, (q, p, d, client), strict=True):
            nanos[name] = v
            values[name] = v * _NS
    if loop is not None:
        for name, v in zip(A.LOOP_PARTS, loop, strict=True):
            nanos[name] = v
            values[name] = v * _NS
    return dataclasses.replace(bd, waits_nanos=MappingProxyType(nanos), **values)
