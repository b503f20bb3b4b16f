"""Reading traces back and recomputing breakdowns: ``otel-rollout report`` as a library.

Readers take an OTLP JSON lines file (what the trace file exporter writes), Jaeger's query
API and Tempo's search + trace APIs; every trajectory found is recomputed with the same
breakdown function the online processor uses. The rendering (tables, pictures, JSON) is
shared by ``otel-rollout demo`` and ``otel-rollout report``.
"""

from otel_rollout.report._aggregate import ReportData
from otel_rollout.report._assemble import TraceAssembler, breakdowns_from_spans, read_trace_file
from otel_rollout.report._documents import spans_from_document
from otel_rollout.report._files import iter_file_spans, read_spans_file
from otel_rollout.report._model import RawSpan, ReadResult, TraceReadError, TrajectoryTrace
from otel_rollout.report._sources import read_source, read_sources

__all__ = [
    "RawSpan",
    "ReadResult",
    "ReportData",
    "TraceAssembler",
    "TraceReadError",
    "TrajectoryTrace",
    "breakdowns_from_spans",
    "iter_file_spans",
    "read_source",
    "read_sources",
    "read_spans_file",
    "read_trace_file",
    "spans_from_document",
]
