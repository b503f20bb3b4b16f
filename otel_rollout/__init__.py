"""OpenTelemetry for the rollouts of LLM RL trainers: a trace per trajectory, an exact
time breakdown (llm / env / env_setup / env_teardown / other), histograms, and the
per-batch dict trainers log."""

from __future__ import annotations

from importlib import import_module
from types import MappingProxyType
from typing import TYPE_CHECKING

from otel_rollout._version import __version__

if TYPE_CHECKING:
    from otel_rollout._accounting.batch_accumulator import (
        BatchAccumulator,
        group_by_batch,
        mark_consumed,
    )
    from otel_rollout._accounting.batch_analysis import analyze_batch
    from otel_rollout._accounting.batch_figures import BatchAnalysis, StepFunction
    from otel_rollout._accounting.breakdown import Breakdown, PhaseInterval
    from otel_rollout._accounting.compute import compute_breakdown
    from otel_rollout._accounting.span_tree import SpanRecord, outermost_phases
    from otel_rollout._accounting.summary import BreakdownCollector, group_by, summarize
    from otel_rollout._api.batch_span import Batch as BatchHandle
    from otel_rollout._api.batch_span import current_batch
    from otel_rollout._api.context import bind_context, run_in_executor
    from otel_rollout._api.phase_handles import Phase as PhaseHandle
    from otel_rollout._api.tracer import (
        Generation,
        RolloutTracer,
        batch,
        current_trajectory,
        phase,
        trajectory,
    )
    from otel_rollout._api.trajectory import Trajectory as TrajectoryHandle
    from otel_rollout._export.console import ConsoleTreeExporter
    from otel_rollout._export.guarded import ExportStats, guarded_batch_processor
    from otel_rollout._processing.breakdown_processor import BreakdownProcessor
    from otel_rollout._processing.genai_metrics import GenAIMetricsProcessor
    from otel_rollout._processing.loopstall import configure_loop_stalls
    from otel_rollout._processing.sampling import RecordingRatioSampler
    from otel_rollout._processing.tailkeep import TailKeepProcessor
    from otel_rollout._settings.table import Settings
    from otel_rollout._setup.config import ConfigError, Rollout, configure
    from otel_rollout._setup.rollout import get_rollout
    from otel_rollout.attributes import ALL_BANDS, BANDS

#: The public names and where each is defined. They are imported on first use (PEP 562):
#: ``otel-rollout report`` and other light users of a submodule do not pay for the SDK
#: pipeline at start-up.
_LAZY = MappingProxyType({
    "BatchAccumulator": ("otel_rollout._accounting.batch_accumulator", "BatchAccumulator"),
    "group_by_batch": ("otel_rollout._accounting.batch_accumulator", "group_by_batch"),
    "mark_consumed": ("otel_rollout._accounting.batch_accumulator", "mark_consumed"),
    "analyze_batch": ("otel_rollout._accounting.batch_analysis", "analyze_batch"),
    "BatchAnalysis": ("otel_rollout._accounting.batch_figures", "BatchAnalysis"),
    "StepFunction": ("otel_rollout._accounting.batch_figures", "StepFunction"),
    "Breakdown": ("otel_rollout._accounting.breakdown", "Breakdown"),
    "PhaseInterval": ("otel_rollout._accounting.breakdown", "PhaseInterval"),
    "compute_breakdown": ("otel_rollout._accounting.compute", "compute_breakdown"),
    "SpanRecord": ("otel_rollout._accounting.span_tree", "SpanRecord"),
    "outermost_phases": ("otel_rollout._accounting.span_tree", "outermost_phases"),
    "BreakdownCollector": ("otel_rollout._accounting.summary", "BreakdownCollector"),
    "group_by": ("otel_rollout._accounting.summary", "group_by"),
    "summarize": ("otel_rollout._accounting.summary", "summarize"),
    "BatchHandle": ("otel_rollout._api.batch_span", "Batch"),
    "current_batch": ("otel_rollout._api.batch_span", "current_batch"),
    "bind_context": ("otel_rollout._api.context", "bind_context"),
    "run_in_executor": ("otel_rollout._api.context", "run_in_executor"),
    "PhaseHandle": ("otel_rollout._api.phase_handles", "Phase"),
    "Generation": ("otel_rollout._api.tracer", "Generation"),
    "RolloutTracer": ("otel_rollout._api.tracer", "RolloutTracer"),
    "batch": ("otel_rollout._api.tracer", "batch"),
    "current_trajectory": ("otel_rollout._api.tracer", "current_trajectory"),
    "phase": ("otel_rollout._api.tracer", "phase"),
    "trajectory": ("otel_rollout._api.tracer", "trajectory"),
    "TrajectoryHandle": ("otel_rollout._api.trajectory", "Trajectory"),
    "ConsoleTreeExporter": ("otel_rollout._export.console", "ConsoleTreeExporter"),
    "ExportStats": ("otel_rollout._export.guarded", "ExportStats"),
    "guarded_batch_processor": ("otel_rollout._export.guarded", "guarded_batch_processor"),
    "BreakdownProcessor": ("otel_rollout._processing.breakdown_processor", "BreakdownProcessor"),
    "GenAIMetricsProcessor": ("otel_rollout._processing.genai_metrics", "GenAIMetricsProcessor"),
    "configure_loop_stalls": ("otel_rollout._processing.loopstall", "configure_loop_stalls"),
    "RecordingRatioSampler": ("otel_rollout._processing.sampling", "RecordingRatioSampler"),
    "TailKeepProcessor": ("otel_rollout._processing.tailkeep", "TailKeepProcessor"),
    "Settings": ("otel_rollout._settings.table", "Settings"),
    "ConfigError": ("otel_rollout._setup.config", "ConfigError"),
    "Rollout": ("otel_rollout._setup.config", "Rollout"),
    "configure": ("otel_rollout._setup.config", "configure"),
    "get_rollout": ("otel_rollout._setup.rollout", "get_rollout"),
    "ALL_BANDS": ("otel_rollout.attributes", "ALL_BANDS"),
    "BANDS": ("otel_rollout.attributes", "BANDS"),
})  # fmt: skip

#: Names that moved, and where to: still importable, with a DeprecationWarning.
_MOVED = MappingProxyType(
    {
        "Trajectory": "TrajectoryHandle",
        "Batch": "BatchHandle",
        "Phase": "PhaseHandle",
    }
)


def __getattr__(name: str) -> object:
    where = _LAZY.get(name)
    if where is not None:
        value = getattr(import_module(where[0]), where[1])
        globals()[name] = value  # the next lookup is a plain attribute
        return value
    moved = _MOVED.get(name)
    if moved is None:
        raise AttributeError(f"module 'otel_rollout' has no attribute {name!r}")
    import warnings

    warnings.warn(
        f"otel_rollout.{name} is deprecated; use otel_rollout.{moved} (the handle class; "
        f"otel_rollout.{name.lower()} is the function that makes one)",
        DeprecationWarning,
        stacklevel=2,
    )
    return __getattr__(moved)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "ALL_BANDS",
    "BANDS",
    "BatchHandle",
    "BatchAccumulator",
    "BatchAnalysis",
    "Breakdown",
    "BreakdownCollector",
    "BreakdownProcessor",
    "ConfigError",
    "ConsoleTreeExporter",
    "ExportStats",
    "GenAIMetricsProcessor",
    "Generation",
    "PhaseHandle",
    "PhaseInterval",
    "RecordingRatioSampler",
    "Rollout",
    "RolloutTracer",
    "Settings",
    "SpanRecord",
    "StepFunction",
    "TailKeepProcessor",
    "TrajectoryHandle",
    "__version__",
    "analyze_batch",
    "batch",
    "bind_context",
    "compute_breakdown",
    "configure",
    "configure_loop_stalls",
    "get_rollout",
    "guarded_batch_processor",
    "mark_consumed",
    "current_batch",
    "current_trajectory",
    "group_by",
    "group_by_batch",
    "outermost_phases",
    "phase",
    "run_in_executor",
    "summarize",
    "trajectory",
]
