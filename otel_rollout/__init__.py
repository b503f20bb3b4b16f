"""OpenTelemetry for the rollouts of LLM RL trainers: a trace per trajectory, an exact
time breakdown, histograms, and the per-batch dict trainers log (docs/api.md).

This module holds what an agent loop uses; the pipeline's parts are in
:mod:`otel_rollout.sdk`, the pure accounting in :mod:`otel_rollout.accounting`, the names
of attributes, spans and metrics in :mod:`otel_rollout.attributes`.
"""

from __future__ import annotations

from importlib import import_module
from types import MappingProxyType
from typing import TYPE_CHECKING

from otel_rollout._version import __version__

if TYPE_CHECKING:
    from otel_rollout._accounting.batch_analysis import analyze_batch
    from otel_rollout._accounting.breakdown import Breakdown
    from otel_rollout._accounting.summary import BreakdownCollector, summarize
    from otel_rollout._api.batch_span import Batch as BatchHandle
    from otel_rollout._api.batch_span import current_batch
    from otel_rollout._api.context import bind_context, run_in_executor
    from otel_rollout._api.phase_handles import Generation
    from otel_rollout._api.phase_handles import Phase as PhaseHandle
    from otel_rollout._api.step import Step as StepHandle
    from otel_rollout._api.step_context import current_step
    from otel_rollout._api.tracer import (
        RolloutTracer,
        batch,
        current_trajectory,
        phase,
        step,
        trajectory,
    )
    from otel_rollout._api.trajectory import Trajectory as TrajectoryHandle
    from otel_rollout._setup.config import ConfigError, Rollout, configure
    from otel_rollout._setup.rollout import get_rollout

#: Each module and the public names it defines (``public=its_own_name`` where they
#: differ), imported on first use (PEP 562): ``otel-rollout report`` and other light
#: users of a submodule do not pay for the SDK pipeline at start-up.
_WHERE = {
    "_accounting.batch_analysis": "analyze_batch",
    "_accounting.breakdown": "Breakdown",
    "_accounting.summary": "BreakdownCollector summarize",
    "_api.batch_span": "BatchHandle=Batch current_batch",
    "_api.context": "bind_context run_in_executor",
    "_api.phase_handles": "Generation PhaseHandle=Phase",
    "_api.step": "StepHandle=Step",
    "_api.step_context": "current_step",
    "_api.tracer": "RolloutTracer batch current_trajectory phase step trajectory",
    "_api.trajectory": "TrajectoryHandle=Trajectory",
    "_setup.config": "ConfigError Rollout configure",
    "_setup.rollout": "get_rollout",
}
_LAZY = MappingProxyType({
    public: (f"otel_rollout.{module}", own or public)
    for module, names in _WHERE.items()
    for public, _, own in (n.partition("=") for n in names.split())
})  # fmt: skip
del _WHERE


def __getattr__(name: str) -> object:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'otel_rollout' has no attribute {name!r}")
    value = getattr(import_module(where[0]), where[1])
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "BatchHandle", "Breakdown", "BreakdownCollector", "ConfigError", "Generation",
    "PhaseHandle", "Rollout", "RolloutTracer", "StepHandle", "TrajectoryHandle",
    "__version__", "analyze_batch", "batch", "bind_context", "configure", "current_batch",
    "current_step", "current_trajectory", "get_rollout", "phase", "run_in_executor", "step",
    "summarize", "trajectory",
]  # fmt: skip
