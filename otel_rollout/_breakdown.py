"""The breakdown of one trajectory: the one pure function the processor and the report share.

Rules (DESIGN.md, "Accounting"):

* ``e2e`` is the root span's interval ``[s, e]``.
* Each band is the union of its phase spans' intervals clipped to ``[s, e]``, so
  overlapping calls of one band are not counted twice.
* Outermost phase wins: a phase span nested in another phase span is accounted to the
  outer one (resolved by :func:`outermost_phases` for span trees, or on span start by
  the processor).
* Where bands overlap in time, the time goes to the band listed first in
  :data:`~otel_rollout._attributes.BANDS` (``llm``, ``env``, ``env_setup``,
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

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import le
from types import MappingProxyType
from typing import Any, NamedTuple

from otel_rollout import _attributes as A
from otel_rollout._semconv import bounded_status
from otel_rollout._waits import loop_ns, wait_attributes, with_waits

_NS = 1e-9
_NO_ATTRS: Mapping[str, Any] = MappingProxyType({})
_BAND_INDEX = {band: i for i, band in enumerate(A.BANDS)}
#: Phase intervals a breakdown keeps for the batch analysis; beyond this, the latest.
MAX_INTERVALS = 4096
#: Not a band: the time of these phases is left out of the trajectory's accounted time.
_OUTSIDE = "_outside"
_ENV_CALLS = frozenset((A.PHASE_ENV, A.PHASE_ENV_SETUP, A.PHASE_ENV_TEARDOWN))


def _band_of(phase: str, bands: Mapping[str, str] | None) -> str:
    if bands:
        band = bands.get(phase)
        if band is not None:
            return band
    return _OUTSIDE if phase == A.PHASE_FINISH_SESSION else phase


class PhaseInterval(NamedTuple):
    """One outermost phase span: its phase name and its interval in nanoseconds."""

    phase: str
    start_ns: int
    end_ns: int


class SpanRecord(NamedTuple):
    """The little of a span the breakdown needs, from a live span or a trace file."""

    span_id: int
    parent_id: int | None
    start_ns: int
    end_ns: int | None
    phase: str | None

    @classmethod
    def from_span(cls, span: Any) -> SpanRecord:
        """The record of an SDK ``ReadableSpan``, or of a span read back from a trace
        (anything with ``span_id``, ``parent_id``, ``start_ns``, ``end_ns``, ``attributes``)."""
        attrs = span.attributes or _NO_ATTRS
        phase = attrs.get(A.PHASE)
        phase = str(phase) if phase is not None else None
        context = getattr(span, "context", None)
        if context is None:  # read back from a file or a backend
            return cls(span.span_id, span.parent_id, span.start_ns, span.end_ns, phase)
        parent = span.parent
        return cls(
            context.span_id,
            parent.span_id if parent is not None else None,
            span.start_time or 0,
            span.end_time,
            phase,
        )


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Where one trajectory's time went. Bands (seconds) are disjoint and sum to ``e2e``."""

    trajectory_id: str
    trace_id: str
    e2e: float
    llm: float
    env: float
    env_setup: float
    env_teardown: float
    other: float
    #: Plain sums of the phase spans of each band (what a hand-rolled timer reports);
    #: ``sum - band`` is the concurrency within the trajectory.
    llm_sum: float
    env_sum: float
    env_setup_sum: float
    env_teardown_sum: float
    turns: int
    env_steps: int
    status: str = A.STATUS_OK
    env_class: str | None = None
    model: str | None = None
    start_time_ns: int = 0
    end_time_ns: int = 0
    #: The bands in integer nanoseconds, keys of :data:`ALL_BANDS` plus ``"e2e"``,
    #: ``"env_queue"`` and ``"finish_session"``.
    nanos: Mapping[str, int] = field(default_factory=dict, hash=False, compare=True)
    #: Low-cardinality attributes of the root (env class, model, status, ...).
    attributes: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=True)
    #: The batch (training step) the trajectory belongs to, when it ran in one.
    batch_id: str | None = None
    #: The policy version that generated it (``Trajectory.set_policy_version``).
    policy_version: int | None = None
    #: The policy version and time at which a trainer consumed it (:meth:`consumed`).
    consumed_version: int | None = None
    consumed_time_ns: int | None = None
    #: Flat ``(band index in BANDS, start ns, end ns)`` triples: the outermost phase spans
    #: accounted to each band, clipped to the root, before the overlap priority; at most
    #: :data:`MAX_INTERVALS` (the latest ending). The batch analysis reads them.
    intervals: array = field(default_factory=lambda: array("q"), hash=False, repr=False)
    # Fields added later go last: a breakdown pickled by an older version still loads.
    #: Waiting for an executor thread before env calls (union; a sub-part of the bands).
    env_queue: float = 0.0
    env_queue_sum: float = 0.0
    #: Time in ``finish_session`` phases, outside ``e2e`` (the root's interval is both).
    finish_session: float = 0.0
    #: The trajectory's reward (``rollout.trajectory.reward``), when it was set.
    reward: float | None = None
    #: Sub-parts of ``llm`` from the engine's own timings (``None`` when it reported
    #: none): queue, prefill, decode, and the client remainder. Never bands.
    llm_queue: float | None = None
    llm_prefill: float | None = None
    llm_decode: float | None = None
    llm_client: float | None = None
    #: Event-loop time (``None`` when not measured): this trajectory's own callbacks, and
    #: an upper bound on how long others' slow callbacks delayed it. Overlap the bands.
    loop_own: float | None = None
    loop_blocked: float | None = None
    #: Its own time in slow callbacks: the stalls it caused others.
    loop_stall: float | None = None
    #: Those waits that are known, in integer nanoseconds (keys ``llm_queue``...,
    #: ``loop_own``, ``loop_blocked``); apart from ``nanos``, which holds the bands.
    waits_nanos: Mapping[str, int] = field(default_factory=dict, hash=False, compare=True)

    def __reduce__(self) -> tuple[Any, tuple]:
        # The read-only mapping views do not pickle: ship plain dicts (Ray, multiprocessing).
        values = [getattr(self, f) for f in self.__slots__]
        return _rebuild, ([dict(v) if isinstance(v, Mapping) else v for v in values],)

    @property
    def staleness(self) -> int | None:
        """Policy versions between generation and consumption, when both are known."""
        if self.policy_version is None or self.consumed_version is None:
            return None
        return self.consumed_version - self.policy_version

    @property
    def buffer_wait_ns(self) -> int | None:
        """Nanoseconds from the trajectory's end to its consumption, when known."""
        if self.consumed_time_ns is None:
            return None
        return max(0, self.consumed_time_ns - self.end_time_ns)

    def consumed(self, version: int | None, time_ns: int) -> Breakdown:
        """This breakdown, marked consumed by a training step on policy ``version``."""
        return replace(
            self,
            consumed_version=None if version is None else int(version),
            consumed_time_ns=int(time_ns),
        )

    def phase_intervals(self) -> list[PhaseInterval]:
        """:attr:`intervals` as ``(band, start ns, end ns)``."""
        iv = self.intervals
        return [PhaseInterval(A.BANDS[iv[i]], iv[i + 1], iv[i + 2]) for i in range(0, len(iv), 3)]

    def band(self, name: str) -> float:
        """The seconds of band ``name`` (one of ``llm, env, env_setup, env_teardown, other``)."""
        if name not in _ALL_BANDS_SET:
            raise ValueError(f"unknown band {name!r}; expected one of {', '.join(A.ALL_BANDS)}")
        return getattr(self, name)

    def as_attributes(self) -> dict[str, Any]:
        """The breakdown as root-span attributes (``rollout.breakdown.*``)."""
        out: dict[str, Any] = {A.BREAKDOWN_E2E: self.e2e}
        for band in A.ALL_BANDS:
            out[A.BREAKDOWN_PREFIX + band] = getattr(self, band)
        for band in A.BANDS:
            out[A.BREAKDOWN_PREFIX + band + "_sum"] = getattr(self, band + "_sum")
        out[A.BREAKDOWN_ENV_QUEUE] = self.env_queue
        out[A.BREAKDOWN_ENV_QUEUE + "_sum"] = self.env_queue_sum
        out[A.BREAKDOWN_FINISH_SESSION] = self.finish_session
        out[A.TURNS] = self.turns
        out[A.ENV_STEPS] = self.env_steps
        out.update(wait_attributes(self))
        return out


_ALL_BANDS_SET = frozenset(A.ALL_BANDS)


def _rebuild(values: list[Any]) -> Breakdown:
    fields = dict(zip(Breakdown.__slots__, values, strict=False))  # older: fewer fields
    fields["nanos"] = MappingProxyType(dict(fields["nanos"]))
    fields["attributes"] = MappingProxyType(dict(fields["attributes"]))
    if "waits_nanos" in fields:
        fields["waits_nanos"] = MappingProxyType(dict(fields["waits_nanos"]))
    return Breakdown(**fields)


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

    ``phases`` are the outermost phase spans (see :func:`outermost_phases`). A phase that
    is not a band name falls into ``other`` unless ``bands`` maps it to one (for example
    ``{"reward": "env"}``). ``turns`` counts ``llm`` phases, ``env_steps`` ``env`` phases.
    ``env_queue`` and ``finish_session`` phases are accounted as the module docstring says.
    """
    if end_ns < start_ns:
        end_ns = start_ns
    root = end_ns - start_ns
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
        covered_len = outside_len
        for idx, band in enumerate(A.BANDS):
            nanos[band] = lengths[idx]
            covered_len += lengths[idx]
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
    if len(kept) > 3 * MAX_INTERVALS:
        kept = _latest(kept)
    nanos[A.BAND_OTHER] = root - covered_len
    e2e = nanos["e2e"] = root - outside_len
    nanos[A.PHASE_ENV_QUEUE] = _union_length(queued)
    nanos[A.PHASE_FINISH_SESSION] = outside_len
    return Breakdown(
        trajectory_id=trajectory_id,
        trace_id=trace_id,
        e2e=e2e * _NS,
        llm=nanos[A.PHASE_LLM] * _NS,
        env=nanos[A.PHASE_ENV] * _NS,
        env_setup=nanos[A.PHASE_ENV_SETUP] * _NS,
        env_teardown=nanos[A.PHASE_ENV_TEARDOWN] * _NS,
        other=nanos[A.BAND_OTHER] * _NS,
        llm_sum=sums[0] * _NS,
        env_sum=sums[1] * _NS,
        env_setup_sum=sums[2] * _NS,
        env_teardown_sum=sums[3] * _NS,
        turns=turns,
        env_steps=env_steps,
        status=status,
        env_class=env_class,
        model=model,
        start_time_ns=start_ns,
        end_time_ns=end_ns,
        nanos=MappingProxyType(nanos),
        attributes=MappingProxyType(dict(attributes or {})),
        batch_id=None if batch_id is None else str(batch_id),
        policy_version=_int_or_none(policy_version),
        intervals=kept,
        env_queue=nanos[A.PHASE_ENV_QUEUE] * _NS,
        env_queue_sum=queue_sum * _NS,
        finish_session=outside_len * _NS,
        reward=_finite_or_none(reward),
    )


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


def breakdown_from_tree(
    root: SpanRecord,
    spans: Sequence[SpanRecord],
    attributes: Mapping[str, Any],
    *,
    error: bool = False,
    trace_id: str = "",
    bands: Mapping[str, str] | None = None,
    engine: Sequence[int] | None = None,
) -> tuple[Breakdown, list[PhaseInterval]]:
    """The breakdown of the trajectory rooted at ``root`` from the spans of its trace, and
    the outermost phases it was computed from (a span tree: a trace file, a backend, the
    console exporter's buffer). Phases still open are clipped at the root's end."""
    end = root.end_ns if root.end_ns is not None else root.start_ns
    phases = outermost_phases(root.span_id, spans, end_open_at=end)
    bd = root_breakdown(
        root.start_ns, end, phases, attributes, error=error, trace_id=trace_id, bands=bands,
        engine=engine,
    )  # fmt: skip
    return bd, phases


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


def outermost_phases(
    root_span_id: int, spans: Sequence[SpanRecord], *, end_open_at: int | None = None
) -> list[PhaseInterval]:
    """The outermost phase spans below a root, from a span tree (a trace file, a backend).

    A phase span is dropped when any ancestor between it and the root is a phase span
    (outermost phase wins). Spans whose parent chain does not reach the root are not part
    of the trajectory and are ignored. A span that never ended is clipped at
    ``end_open_at`` (the root's end) when given, else ignored.
    """
    by_id = {s.span_id: s for s in spans}
    # memo: span id -> (reaches root, has a phase ancestor strictly below the root)
    memo: dict[int, tuple[bool, bool]] = {root_span_id: (True, False)}

    def resolve(span_id: int) -> tuple[bool, bool]:
        chain = []
        cur: int | None = span_id
        result = (False, False)
        while cur is not None:
            if cur in memo:
                result = memo[cur]
                break
            rec = by_id.get(cur)
            if rec is None:
                result = (False, False)
                break
            chain.append(rec)
            cur = rec.parent_id
            if len(chain) > len(by_id):  # a cycle in malformed input
                result = (False, False)
                break
        reaches, under_phase = result
        for rec in reversed(chain):
            under_phase = under_phase or rec.phase is not None
            memo[rec.span_id] = (reaches, under_phase)
        return memo.get(span_id, result)

    out: list[PhaseInterval] = []
    for rec in spans:
        if rec.phase is None or rec.span_id == root_span_id or rec.parent_id is None:
            continue
        reaches, nested = resolve(rec.parent_id)
        if not reaches or nested:
            continue
        end = rec.end_ns if rec.end_ns is not None else end_open_at
        if end is None:
            continue
        out.append(PhaseInterval(rec.phase, rec.start_ns, end))
    return out
