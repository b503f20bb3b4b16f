"""``VerlInstrumentor``: what is patched in verl 0.9, and undoing it."""

from __future__ import annotations

import importlib
from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from otel_rollout import RolloutTracer
from otel_rollout.instrumentation import internal_error
from otel_rollout.integrations import require
from otel_rollout.integrations.skyrl._patches import Patches
from otel_rollout.integrations.verl._client import (
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
from otel_rollout.integrations.verl._timers import timer_wrapper
from otel_rollout.integrations.verl._tools import AsyncioProxy, traced_call_tool

AGENT_LOOP_MODULE = "verl.experimental.agent_loop.agent_loop"
#: The modules whose ``simple_timer`` verl's per-sample timers are taken with.
TIMER_MODULES = (
    "verl.experimental.agent_loop.tool_agent_loop",
    "verl.experimental.agent_loop.single_turn_agent_loop",
    AGENT_LOOP_MODULE,
)
TOOL_LOOP_MODULE = TIMER_MODULES[0]
CLIENT_MODULE = "verl.workers.rollout.llm_server"
FUNCTION_TOOL_MODULE = "verl.tools.function_tool"


class VerlInstrumentor(BaseInstrumentor):
    """Instrument verl's agent loop; ``instrument()`` is idempotent.

    ``instrument(tracer_provider=..., meter_provider=..., rollout_tracer=...,
    add_timing=True)``: ``add_timing=False`` leaves verl's ``meta_info["timing"]`` as it
    was (by default the step's ``rollout/*`` summary keys are added beside verl's
    ``agent_loop/*``).
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        agent_loop = require(AGENT_LOOP_MODULE, "verl")
        tracer = kwargs.get("rollout_tracer") or RolloutTracer(
            kwargs.get("tracer_provider"), kwargs.get("meter_provider")
        )
        self._rollout_tracer = tracer
        patches = self._patches = Patches()
        manager = agent_loop.AgentLoopManager
        patches.wrap(agent_loop, "rollout_trace_attr", trace_attr_wrapper(tracer))
        patches.wrap(agent_loop, "get_trajectory_info", trajectory_info_wrapper)
        patches.wrap(agent_loop.AgentLoopMetrics, "model_dump", metrics_dump_wrapper)
        add_timing = bool(kwargs.get("add_timing", True))
        patches.wrap(manager, "generate_sequences", manager_wrapper(tracer, add_timing))
        patches.wrap(manager, "_performance_metrics", metrics_wrapper)
        for name in TIMER_MODULES:
            module = importlib.import_module(name)
            patches.wrap(module, "simple_timer", timer_wrapper)
        tool_loop = importlib.import_module(TOOL_LOOP_MODULE)
        patches.wrap(tool_loop.ToolAgentLoop, "_call_tool", traced_call_tool)
        client = importlib.import_module(CLIENT_MODULE).LLMServerClient
        patches.wrap(client, "generate", traced_generate)
        patches.wrap(client, "_acquire_server", traced_acquire)
        patches.wrap(client, "_vllm_request_id", traced_request_id)
        self._function_tool = None
        try:
            function_tool = importlib.import_module(FUNCTION_TOOL_MODULE)
            if not isinstance(function_tool.__dict__.get("asyncio"), AsyncioProxy):
                function_tool.asyncio = AsyncioProxy(function_tool.asyncio)
                self._function_tool = function_tool
        except Exception as exc:
            internal_error("verl function tools", exc)

    def _uninstrument(self, **kwargs: Any) -> None:
        self._patches.restore()
        module = self._function_tool
        if module is not None and isinstance(module.__dict__.get("asyncio"), AsyncioProxy):
            module.asyncio = module.asyncio._real
        self._function_tool = None
