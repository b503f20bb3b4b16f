"""Spans read back, grouped by trace, into trajectories with their breakdowns."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from opentelemetry.trace import StatusCode

from otel_rollout import _attributes as A
from otel_rollout._breakdown import SpanRecord, breakdown_from_tree
from otel_rollout.report._documents import read_spans_file
from otel_rollout.report._model import RawSpan, ReadResult, TrajectoryTrace


def breakdowns_from_spans(
    spans: Iterable[RawSpan],
    *,
    bands: Mapping[str, str] | None = None,
    result: ReadResult | None = None,
) -> ReadResult:
    """Group spans by trace and recompute each trajectory's breakdown (same functions)."""
    result = result or ReadResult()
    by_trace: dict[str, list[RawSpan]] = {}
    for s in spans:
        by_trace.setdefault(s.trace_id, []).append(s)
    for trace_id, tspans in by_trace.items():
        roots = [s for s in tspans if A.TRAJECTORY_ID in s.attributes]
        if not roots:
            if any(A.PHASE in s.attributes for s in tspans):
                result.incomplete.append(trace_id)
            continue  # unrelated service's trace
        records = [SpanRecord.from_span(s) for s in tspans]
        for root in roots:
            if root.end_ns is None:
                result.incomplete.append(trace_id)
                continue
            bd, phases = breakdown_from_tree(
                SpanRecord.from_span(root),
                records,
                root.attributes,
                error=root.status_code is StatusCode.ERROR,
                trace_id=trace_id,
                bands=bands,
            )
            result.trajectories.append(TrajectoryTrace(bd, phases, root.service))
    return result


def read_trace_file(path: str | Path, *, bands: Mapping[str, str] | None = None) -> ReadResult:
    """Breakdowns of every trajectory in an OTLP JSON lines file."""
    result = ReadResult()
    spans = read_spans_file(path, result)
    return breakdowns_from_spans(spans, bands=bands, result=result)
