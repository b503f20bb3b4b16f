"""``otel-rollout report`` as a library (docs/demo.md): read OTLP JSON files, Jaeger or
Tempo back and recompute each trajectory with the online processor's functions."""

from otel_rollout.report._aggregate import ReportData
from otel_rollout.report._assemble import TraceAssembler
from otel_rollout.report._files import read_spans_file
from otel_rollout.report._model import RawSpan, ReadResult, TraceReadError, TrajectoryTrace
from otel_rollout.report._sources import read_source, read_sources, read_trace_file

__all__ = [
    "RawSpan",
    "ReadResult",
    "ReportData",
    "TraceAssembler",
    "TraceReadError",
    "TrajectoryTrace",
    "read_source",
    "read_sources",
    "read_spans_file",
    "read_trace_file",
]
