"""``VerlInstrumentor``: what is patched in verl 0.9, and undoing it; the Ray workers' hook."""

from __future__ import annotations

import importlib
from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from otel_rollout.instrumentation import Patches, internal_error, require, rollout_tracer
from otel_rollout.integrations.verl._calls import (
    traced_acquire,
    traced_generate,
    traced_request_id,
)
from otel_rollout.integrations.verl._samples import (
    manager_wrapper,
    metrics_dump_wrapper,
    metrics_wrapper,
    trace_attr_wrapper,
    trajectory_info_wrapper,
)
from otel_rollout.integrations.verl._timers import patch_steps, timer_wrapper
from otel_rollout.integrations.verl._tools import AsyncioProxy, traced_call_tool

#: The distribution instrumented and the versions supported (contrib's dependency check).
_instruments = ("verl >= 0.9.1",)

AGENT_LOOP_MODULE = "verl.experimental.agent_loop.agent_loop"
#: The modules whose ``simple_timer`` verl's per-sample timers are taken with.
TIMER_MODULES = (
    "verl.experimental.agent_loop.tool_agent_loop",
    "verl.experimental.agent_loop.single_turn_agent_loop",
    AGENT_LOOP_MODULE,
)
FUNCTION_TOOL_MODULE = "verl.tools.function_tool"


class VerlInstrumentor(BaseInstrumentor):
    """Instrument verl's agent loop; ``instrument()`` is idempotent. ``add_timing=False``
    leaves verl's ``meta_info["timing"]`` without the step's ``rollout/*`` keys;
    ``steps=False`` leaves ``fit()``'s ``marked_timer`` alone."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        agent_loop = require(AGENT_LOOP_MODULE, "verl")
        tracer = self._rollout_tracer = rollout_tracer(kwargs)
        patches = self._patches = Patches()
        manager = agent_loop.AgentLoopManager
        patches.wrap(agent_loop, "rollout_trace_attr", trace_attr_wrapper(tracer))
        patches.wrap(agent_loop, "get_trajectory_info", trajectory_info_wrapper)
        patches.wrap(agent_loop.AgentLoopMetrics, "model_dump", metrics_dump_wrapper)
        add_timing = bool(kwargs.get("add_timing", True))
        patches.wrap(manager, "generate_sequences", manager_wrapper(tracer, add_timing))
        patches.wrap(manager, "_performance_metrics", metrics_wrapper)
        for name in TIMER_MODULES:
            patches.wrap(importlib.import_module(name), "simple_timer", timer_wrapper)
        tool_loop = importlib.import_module(TIMER_MODULES[0])
        patches.wrap(tool_loop.ToolAgentLoop, "_call_tool", traced_call_tool)
        client = importlib.import_module("verl.workers.rollout.llm_server").LLMServerClient
        patches.wrap(client, "generate", traced_generate)
        patches.wrap(client, "_acquire_server", traced_acquire)
        patches.wrap(client, "_vllm_request_id", traced_request_id)
        self.steps_missing = patch_steps(patches, tracer) if kwargs.get("steps", True) else []
        self._function_tool = None
        try:
            function_tool: Any = importlib.import_module(FUNCTION_TOOL_MODULE)
            if not isinstance(function_tool.__dict__.get("asyncio"), AsyncioProxy):
                function_tool.asyncio = AsyncioProxy(function_tool.asyncio)
                self._function_tool = function_tool
        except Exception as exc:
            internal_error("verl function tools", exc)

    def _uninstrument(self, **kwargs: Any) -> None:
        self._patches.restore()
        module, self._function_tool = self._function_tool, None
        if module is not None and isinstance(module.__dict__.get("asyncio"), AsyncioProxy):
            module.asyncio = module.asyncio._real


def instrument_worker() -> None:
    """A Ray ``worker_process_setup_hook``, to chain after the Ray integration's: instruments
    verl in the worker once ``verl.experimental.agent_loop`` is imported (now, if it is),
    so workers that never run verl never import it."""
    import wrapt

    wrapt.register_post_import_hook(_instrument, "verl.experimental.agent_loop")


def _instrument(module: Any) -> None:
    instrumentor = VerlInstrumentor()
    if not instrumentor.is_instrumented_by_opentelemetry:
        # an agent-loop worker runs no trainer loop: its steps are the driver's
        instrumentor.instrument(steps=False)
