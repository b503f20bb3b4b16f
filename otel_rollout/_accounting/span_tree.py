"""Breakdowns from a span tree (a trace file, a backend, the console exporter's buffer):
:class:`SpanRecord`, the outermost phases below a root, and the breakdown rooted there."""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from otel_rollout import attributes as A
from otel_rollout._accounting.breakdown import Breakdown, PhaseInterval
from otel_rollout._accounting.compute import root_breakdown, sequential_breakdown

_NO_ATTRS: Mapping[str, Any] = MappingProxyType({})
#: A span's fields as :class:`SpanRecord` has them, in its order.
SpanTuple = tuple[int, int | None, int, int | None, str | None]
#: A band's index in A.BANDS.
_BAND_INDEX = MappingProxyType({band: i for i, band in enumerate(A.BANDS)})


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


def breakdown_from_tree(
    root: SpanTuple,
    spans: Sequence[SpanTuple],
    attributes: Mapping[str, Any],
    *,
    error: bool = False,
    trace_id: str = "",
    bands: Mapping[str, str] | None = None,
    engine: Sequence[int] | None = None,
) -> tuple[Breakdown, list[PhaseInterval]]:
    """The breakdown of the trajectory rooted at ``root`` from the spans of its trace
    (:class:`SpanRecord` s or tuples of their fields), and the outermost phases it was
    computed from. Phases still open are clipped at the root's end."""
    root_id, _, start, end, _ = root
    if end is None:
        end = start
    if not bands and end >= start:
        loop = sequential_children(root_id, start, end, spans)
        if loop is not None:  # the common case: the same figures, without the general rules
            phases, flat, sums = loop
            bd = sequential_breakdown(
                start, end, flat, sums, attributes, error=error, trace_id=trace_id,
                engine=engine,
            )  # fmt: skip
            return bd, phases
    phases = outermost_phases(root_id, spans, end_open_at=end)
    bd = root_breakdown(
        start, end, phases, attributes, error=error, trace_id=trace_id, bands=bands,
        engine=engine,
    )  # fmt: skip
    return bd, phases


def sequential_children(
    root_span_id: int, start_ns: int, end_ns: int, spans: Sequence[SpanTuple]
) -> tuple[list[PhaseInterval], array, list[int]] | None:
    """The outermost phases below a root and what :func:`sequential_breakdown` takes when
    they are a sequential loop of the root's own band-phase children, none empty or open
    and each after the one before it in ``spans``, inside ``[start_ns, end_ns]``; else None."""
    index = _BAND_INDEX
    sums = [0] * len(A.BANDS)
    flat: list[int] = []
    out: list[PhaseInterval] = []
    add = out.append
    new = tuple.__new__
    last = start_ns
    for span_id, parent_id, start, end, phase in spans:
        if phase is None or parent_id is None or span_id == root_span_id:
            continue
        if parent_id != root_span_id or end is None or start < last or end <= start:
            return None
        code = index.get(phase)
        if code is None:
            return None
        sums[code] += end - start
        flat += (code, start, end)
        last = end
        add(new(PhaseInterval, (phase, start, end)))
    if last > end_ns:
        return None
    return out, array("q", flat), sums


def outermost_phases(
    root_span_id: int, spans: Sequence[SpanTuple], *, end_open_at: int | None = None
) -> list[PhaseInterval]:
    """The outermost phase spans below a root (phases below a phase, and spans not reaching
    the root, left out); one never ended ends at ``end_open_at``, else is left out."""
    by_id: dict[int, SpanTuple] = {}
    # memo: span id -> (reaches root, has a phase ancestor strictly below the root)
    memo: dict[int, tuple[bool, bool]] = {root_span_id: (True, False)}

    def resolve(span_id: int) -> tuple[bool, bool]:
        if not by_id:
            by_id.update((s[0], s) for s in spans)
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
            cur = rec[1]
            if len(chain) > len(by_id):  # a cycle in malformed input
                result = (False, False)
                break
        reaches, under_phase = result
        for rec in reversed(chain):
            under_phase = under_phase or rec[4] is not None
            memo[rec[0]] = (reaches, under_phase)
        return memo.get(span_id, result)

    out: list[PhaseInterval] = []
    add = out.append
    new = tuple.__new__
    for span_id, parent_id, start, end, phase in spans:
        if phase is None or parent_id is None or span_id == root_span_id:
            continue
        if parent_id != root_span_id:  # a child of the root is outermost (the usual case)
            reaches, nested = resolve(parent_id)
            if not reaches or nested:
                continue
        if end is None:
            end = end_open_at
            if end is None:
                continue
        add(new(PhaseInterval, (phase, start, end)))
    return out
