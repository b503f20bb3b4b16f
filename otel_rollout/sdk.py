"""The pipeline's parts, for an OpenTelemetry SDK pipeline built by hand instead of with
:func:`otel_rollout.configure` (which assembles the same ones; docs/configure.md). Install
:class:`BreakdownProcessor` before the export processor.
"""

from __future__ import annotations

from otel_rollout._export.console import ConsoleTreeExporter
from otel_rollout._export.guarded import ExportStats, guarded_span_processor
from otel_rollout._processing.breakdown_processor import BreakdownProcessor
from otel_rollout._processing.genai_metrics import GenAIMetricsProcessor
from otel_rollout._processing.loopstall import configure_loop_stalls
from otel_rollout._processing.sampling import RecordingRatioSampler
from otel_rollout._processing.tailkeep import TailKeepProcessor
from otel_rollout._settings.table import Settings

__all__ = [
    "BreakdownProcessor", "ConsoleTreeExporter", "ExportStats", "GenAIMetricsProcessor",
    "RecordingRatioSampler", "Settings", "TailKeepProcessor", "configure_loop_stalls",
    "guarded_span_processor",
]  # fmt: skip
