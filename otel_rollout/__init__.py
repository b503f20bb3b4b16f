"""OpenTelemetry for the rollouts of LLM RL trainers: a trace per trajectory, an exact
time breakdown (llm / env / env_setup / env_teardown / other), histograms, and the
per-batch dict trainers log."""

from types import MappingProxyType

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
from otel_rollout._version import __version__
from otel_rollout.attributes import ALL_BANDS, BANDS

#: Names that moved, and where to: still importable, with a DeprecationWarning.
_MOVED = MappingProxyType(
    {
        "Trajectory": ("TrajectoryHandle", TrajectoryHandle),
        "Batch": ("BatchHandle", BatchHandle),
        "Phase": ("PhaseHandle", PhaseHandle),
    }
)


def __getattr__(name: str) -> object:
    moved = _MOVED.get(name)
    if moved is None:
        raise AttributeError(f"module 'otel_rollout' has no attribute {name!r}")
    import warnings

    warnings.warn(
        f"otel_rollout.{name} is deprecated; use otel_rollout.{moved[0]} (the handle class; "
        f"otel_rollout.{name.lower()} is the function that makes one)",
        DeprecationWarning,
        stacklevel=2,
    )
    return moved[1]


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
