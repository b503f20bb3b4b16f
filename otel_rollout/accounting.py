"""The accounting as pure functions, the same online (in the
:class:`~otel_rollout.sdk.BreakdownProcessor`) and offline (``otel-rollout report``);
docs/accounting.md.
"""

from __future__ import annotations

from otel_rollout._accounting.batch_analysis import (
    BatchAccumulator,
    BatchAnalysis,
    StepFunction,
    group_by_batch,
    mark_consumed,
)
from otel_rollout._accounting.breakdown import PhaseInterval
from otel_rollout._accounting.compute import compute_breakdown
from otel_rollout._accounting.span_tree import SpanRecord, outermost_phases
from otel_rollout._accounting.step_account import StepAccount, step_account
from otel_rollout._accounting.summary import group_by
from otel_rollout._bands import DEFAULT_BANDS, Band, BandRegistry

__all__ = [
    "DEFAULT_BANDS", "Band", "BandRegistry", "BatchAccumulator", "BatchAnalysis",
    "PhaseInterval", "SpanRecord", "StepAccount", "StepFunction", "compute_breakdown",
    "group_by", "group_by_batch", "mark_consumed", "outermost_phases", "step_account",
]  # fmt: skip
