"""The accounting of one trajectory (the rules: docs/accounting.md): the one pure function
the processor, the console exporter and the report share."""

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
from otel_rollout._bands import DEFAULT_BANDS, BandRegistry
from otel_rollout._base.semconv import bounded_status

#: Seconds are ``ns / 1e9``: the double nearest the exact value, which prints as its
#: nanoseconds do (``ns * 1e-9`` prints 180714361 ns as 0.18071436100000002).
_PER_S = 1e9
#: Not a band: the time of these phases is left out of the trajectory's accounted time.
_OUTSIDE = "_outside"
_ENV_CALLS = frozenset((A.PHASE_ENV, A.PHASE_ENV_SETUP, A.PHASE_ENV_TEARDOWN))
#: A breakdown's labels, in field order: trajectory id, trace id, status, env class, model,
#: attributes, batch id, policy version, score.
_Labels = tuple[str, str, str, Any, Any, Mapping[str, Any] | None, Any, Any, Any]


def _band_of(phase: str, bands: Mapping[str, str] | None) -> str:
    if bands:
        band = bands.get(phase)
        if band is not None:
            return band
    return _OUTSIDE if phase == A.PHASE_FINISH_SESSION else phase


def union(intervals: Iterable[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """Disjoint sorted intervals covering those given, clipped to ``[lo, hi]``."""
    out: list[tuple[int, int]] = []
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in intervals):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def _length(intervals: list[tuple[int, int]], lo: int, hi: int) -> int:
    return sum(e - s for s, e in union(intervals, lo, hi))


def _disjoint(outside: list[tuple[int, int]], kept: array) -> bool:
    """Whether no two intervals overlap (touching is not overlapping): outside ones and the
    flat (band, start, end) triples of ``kept``; the comparison runs in C."""
    every = list(zip(kept[1::3], kept[2::3], strict=True))
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
    """Status, env class, model and the low-cardinality labels of a trajectory root (the
    processor's and the report's alike). ``error``: the root's status code is ERROR; an
    explicit ``rollout.trajectory.status`` wins."""
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


def _root_labels(attrs: Mapping[str, Any], error: bool, trace_id: str) -> _Labels:
    status, env_class, model, labels = root_labels(attrs, error)
    trajectory_id = str(attrs.get(A.TRAJECTORY_ID, ""))
    return (trajectory_id, trace_id, status, env_class, model, labels, attrs.get(A.BATCH_ID),
            attrs.get(A.POLICY_VERSION), attrs.get(A.REWARD))  # fmt: skip


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
    score: float | None = None,
    registry: BandRegistry = DEFAULT_BANDS,
) -> Breakdown:
    """The breakdown of a trajectory from its root interval and outermost phases; ``bands``
    maps other phases to a band (``{"judge": "env"}``)."""
    labels = (trajectory_id, trace_id, status, env_class, model, attributes, batch_id,
              policy_version, score)  # fmt: skip
    return _compute(start_ns, end_ns, phases, bands, registry, labels)


def _compute(
    start_ns: int,
    end_ns: int,
    phases: Iterable[PhaseInterval | tuple[str, int, int]],
    bands: Mapping[str, str] | None,
    registry: BandRegistry,
    labels: _Labels,
) -> Breakdown:
    if end_ns < start_ns:
        end_ns = start_ns
    phases = list(phases)
    follows: dict[int, str] | None = None  # built at the first wait (most have none)
    phased = registry.phased
    sums = [0] * len(phased)
    lengths = [0] * len(phased)  # clipped lengths: the bands when no two intervals overlap
    kept = array("q")  # (band index, start, end) of each clipped interval
    outside: list[tuple[int, int]] = []
    queued: list[tuple[int, int]] = []
    queue_sum = 0
    turns = env_steps = 0
    llm, env, queue, finish = A.PHASE_LLM, A.PHASE_ENV, A.PHASE_ENV_QUEUE, A.PHASE_FINISH_SESSION
    band_index = registry.index
    band: str | None
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
    if _disjoint(outside, kept):  # a sequential agent loop: nothing to take apart
        outside_len = sum(ce - cs for cs, ce in outside)
        bands_ns = lengths
    else:  # each band in priority order takes what the bands before it left uncovered
        clipped: list[list[tuple[int, int]]] = [[] for _ in phased]
        for k in range(0, len(kept), 3):
            clipped[kept[k]].append((kept[k + 1], kept[k + 2]))
        covered: list[tuple[int, int]] = list(outside)
        outside_len = covered_len = _length(covered, start_ns, end_ns)
        bands_ns = [0] * len(phased)
        for idx, intervals in enumerate(clipped):
            if intervals:
                covered.extend(intervals)
                new_len = _length(covered, start_ns, end_ns)
                bands_ns[idx] = new_len - covered_len
                covered_len = new_len
    counts = (turns, env_steps, outside_len, _length(queued, start_ns, end_ns), queue_sum)
    return _assemble(start_ns, end_ns, bands_ns, sums, kept, counts, registry, labels)


def _assemble(
    start_ns: int,
    end_ns: int,
    bands_ns: list[int],
    sums: list[int],
    kept: array,
    counts: tuple[int, int, int, int, int],
    registry: BandRegistry,
    labels: _Labels,
) -> Breakdown:
    """The breakdown from the phased bands' ns (in ``registry.phased`` order), their sums,
    the kept intervals and ``counts``: turns, env steps, outside, env_queue union and sum."""
    turns, env_steps, outside_len, queue, queue_sum = counts
    trajectory_id, trace_id, status, env_class, model, attributes, batch_id, version, score = labels
    if len(kept) > 3 * MAX_INTERVALS:
        kept = _latest(kept)
    phased = registry.phased
    nanos = dict(zip(phased, bands_ns, strict=True))
    e2e = end_ns - start_ns - outside_len
    nanos[registry.remainder] = e2e - sum(bands_ns)
    nanos["e2e"] = e2e
    nanos[A.PHASE_ENV_QUEUE] = queue
    nanos[A.PHASE_FINISH_SESSION] = outside_len
    per_s = _PER_S
    return new_breakdown(  # every field, in order
        trajectory_id, trace_id, e2e / per_s, turns, env_steps, status, env_class, model,
        start_ns, end_ns,
        MappingProxyType(nanos), MappingProxyType(dict(zip(phased, sums, strict=True))),
        MappingProxyType(dict(attributes or {})),
        None if batch_id is None else str(batch_id), _int_or_none(version),
        None, None,  # consumed_version, consumed_time_ns
        kept, queue / per_s, queue_sum / per_s, outside_len / per_s, _finite_or_none(score),
        None, None, None, None,  # llm_queue, llm_prefill, llm_decode, llm_client
        None, None, None,  # loop_own, loop_blocked, loop_stall
        {},  # waits_nanos
        registry,
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
    registry: BandRegistry = DEFAULT_BANDS,
) -> Breakdown:
    """The breakdown of a trajectory root with its labels, as the processor, the console
    exporter and the report compute it: ``attributes`` are the root's, ``error`` whether
    its status code is ERROR, ``engine`` the (queue, prefill, decode) ns of its calls."""
    labels = _root_labels(attributes, error, trace_id)
    bd = _compute(start_ns, end_ns, phases, bands, registry, labels)
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
    """:func:`root_breakdown` of a sequential loop in the default bands (``flat``: the
    (band index, start, end) triples :func:`~.span_tree.sequential_children` checked,
    ``band_ns`` their lengths per band): nothing overlaps, so each band is its sum."""
    codes = flat[::3]
    bands = list(band_ns)
    counts = (codes.count(_LLM), codes.count(_ENV), 0, 0, 0)
    labels = _root_labels(attributes, error, trace_id)
    bd = _assemble(start_ns, end_ns, bands, bands, flat, counts, DEFAULT_BANDS, labels)
    return with_waits(bd, engine, loop_ns(attributes))


_LLM = DEFAULT_BANDS.index[A.PHASE_LLM]
_ENV = DEFAULT_BANDS.index[A.PHASE_ENV]


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
    """The :data:`MAX_INTERVALS` latest ending triples of ``flat``, by start."""
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
    figures (``loop``: own, blocked, stall ns); ``bd`` itself when both are None."""
    if engine is None and loop is None:
        return bd
    nanos = dict(bd.waits_nanos)
    if engine is not None:
        q, p, d = engine[0], engine[1], engine[2]
        client = max(0, bd.nanos.get(A.PHASE_LLM, 0) - q - p - d)
        nanos.update(zip(A.LLM_SUBPARTS, (q, p, d, client), strict=True))
    if loop is not None:
        nanos.update(zip(A.LOOP_PARTS, loop, strict=True))
    seconds: dict[str, Any] = {name: v / _PER_S for name, v in nanos.items()}
    return dataclasses.replace(bd, waits_nanos=MappingProxyType(nanos), **seconds)
