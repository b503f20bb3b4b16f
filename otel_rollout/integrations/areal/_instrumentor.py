"""``AReaLInstrumentor``: what is patched in AReaL 1.0, and undoing it."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from otel_rollout.instrumentation import Patches, require, rollout_tracer
from otel_rollout.integrations.areal._client import (
    traced_agenerate,
    traced_request,
    traced_session_phase,
)
from otel_rollout.integrations.areal._tasks import (
    Ledger,
    Submissions,
    batch_wrapper,
    register_session_wrapper,
    runner_submit_wrapper,
    session_event_wrapper,
    submit_wrapper,
    wait_results_wrapper,
)
from otel_rollout.integrations.areal._trainer import record_timing_wrapper, train_wrapper

#: The distribution instrumented and the versions supported (contrib's dependency check).
_instruments = ("areal >= 1.0.4",)

PERF_TRACER_MODULE = "areal.utils.perf_tracer"
#: The modules whose ``atrace_session_phase`` / ``trace_session_phase`` (imported by
#: name) AReaL's workflows time their phases with.
PHASE_MODULES = (PERF_TRACER_MODULE, "areal.workflow.rlvr", "areal.workflow.vision_rlvr")


def _modules(*names: str) -> list[Any]:
    """The modules of ``names`` that import here (a workflow's or the trainer's own
    dependencies may be missing: AReaL's stats loggers' packages)."""
    found = []
    for name in names:
        with contextlib.suppress(ImportError):
            found.append(importlib.import_module(name))
    return found


class AReaLInstrumentor(BaseInstrumentor):
    """Instrument AReaL's rollout path, before or after the inference engine's
    ``initialize()``; ``instrument()`` is idempotent."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        executor = require("areal.infra.workflow_executor", "areal")
        engine = importlib.import_module("areal.infra.remote_inf_engine")
        runner = importlib.import_module("areal.infra.async_task_runner")
        stats = importlib.import_module("areal.utils.stats_tracker")
        perf = importlib.import_module(PERF_TRACER_MODULE)
        trainer = _modules("areal.trainer.rl_trainer")
        # every module first, then the patches: one imported after ``perf_tracer`` is
        # patched would bind our wrapper, and be wrapped twice
        phase_modules = _modules(*PHASE_MODULES)
        tracer = self._rollout_tracer = rollout_tracer(kwargs)
        subs, ledger = self._submissions, self._ledger = Submissions(), Ledger()
        patches = self._patches = Patches()
        dispatcher, executor_cls = executor.BatchTaskDispatcher, executor.WorkflowExecutor
        patches.wrap(dispatcher, "submit_task_input", submit_wrapper(subs))
        patches.wrap(runner.AsyncTaskRunner, "submit", runner_submit_wrapper(tracer, subs, ledger))
        patches.wrap(dispatcher, "wait_results", wait_results_wrapper(ledger))
        for call in ("rollout_batch", "prepare_batch"):
            patches.wrap(executor_cls, call, batch_wrapper(tracer, call))
        patches.wrap(perf, "register_session", register_session_wrapper)
        for module in (perf, executor):
            patches.wrap(module, "trace_session_event", session_event_wrapper)
        for module in phase_modules:
            for function in ("atrace_session_phase", "trace_session_phase"):
                patches.wrap(module, function, traced_session_phase)
        patches.wrap(stats, "record_timing", record_timing_wrapper(stats.DEFAULT_TRACKER))
        patches.wrap(stats.DistributedStatsTracker, "record_timing", record_timing_wrapper(None))
        for module in trainer:
            patches.wrap(module.PPOTrainer, "train", train_wrapper(tracer))
        patches.wrap(engine.RemoteInfEngine, "agenerate", traced_agenerate)
        patches.wrap(engine, "arequest_with_retry", traced_request)

    def _uninstrument(self, **kwargs: Any) -> None:
        self._patches.restore()
        self._submissions.clear()
        self._ledger.clear()
