"""verl: a trajectory per sample of the agent loop, a batch per step, without editing
verl (0.9.1).

    from otel_rollout.integrations.verl import VerlInstrumentor
    VerlInstrumentor().instrument()

Each sample ``AgentLoopWorker._run_agent_loop`` runs (``ToolAgentLoop``,
``SingleTurnAgentLoop`` or any registered agent loop) is a trajectory root, around the
``rollout_trace_attr`` block that holds its whole body: id
``<dataset index>_<rollout n>``, env class ``data_source`` (else the agent name),
``gen_ai.agent.name`` the agent name, model ``actor_rollout_ref.model.path``, reward
and turns from its output. Phases are timed where verl times them, by ``simple_timer``
as verl's agent-loop modules reference it: ``generate_sequences`` is a ``generate``
(``llm``) phase, ``tool_calls`` an ``env_queue`` wait (the gather starting the calls)
and an ``env`` phase with an ``execute_tool`` span per call, ``compute_score`` a
``reward`` phase; so per sample our ``llm`` is verl's
``AgentLoopMetrics.generate_sequences`` and our ``env`` its ``tool_calls``.
``LLMServerClient.generate`` adds the GenAI request and output attributes, the load
balancer's ``acquire_server`` is a span inside, and the engine's request id is the
span's ``gen_ai.request.id``. A sync function tool's wait for a thread is an
``env_queue`` span inside its call.

A ``generate_sequences`` call is a batch: the driver's ``AgentLoopManager`` opens it
and hands its carrier to the ``AgentLoopWorker`` actors in the chunks' ``meta_info``;
their trajectories are roots linked to it, and their breakdowns come back with verl's
per-sample metrics. In the workers, the Ray integration's setup hook configures
otel-rollout and :func:`instrument_worker`, chained after it, instruments verl::

    ray.init(runtime_env=otel_rollout.integrations.ray.runtime_env(
        {"worker_process_setup_hook": "otel_rollout.integrations.verl.instrument_worker"}
    ))

Ray actors run copies of their class's methods, so no ``AgentLoopWorker`` method is
wrapped: what those methods look up when they run is (see ``_samples``). The step's
summary keys join verl's ``meta_info["timing"]`` as ``rollout/*`` (``add_timing=False``
leaves it alone). ``uninstrument()`` restores every function it wrapped.

Modules: ``_state`` (the sample's trajectory and its open phases), ``_calls`` (what
is read from verl's arguments and outputs), ``_timers`` (verl's timers, ours around
them), ``_client`` (the model calls), ``_tools`` (the tool calls), ``_samples``
(trajectories, batches and the way back to the driver), ``_worker`` (the Ray
workers' hook), ``_instrumentor``.
"""

from __future__ import annotations

from otel_rollout.integrations import require

require("wrapt", "verl")
require("opentelemetry.instrumentation.instrumentor", "verl")

from otel_rollout.integrations.verl._client import ACQUIRE_SPAN  # noqa: E402
from otel_rollout.integrations.verl._instrumentor import (  # noqa: E402
    AGENT_LOOP_MODULE,
    TIMER_MODULES,
    VerlInstrumentor,
)
from otel_rollout.integrations.verl._samples import CARRIER_META, TIMING_PREFIX  # noqa: E402
from otel_rollout.integrations.verl._state import TOOL_CALLS_SPAN, WAIT_CAUSE  # noqa: E402
from otel_rollout.integrations.verl._timers import REWARD_PHASE  # noqa: E402
from otel_rollout.integrations.verl._worker import instrument_worker  # noqa: E402

__all__ = [
    "ACQUIRE_SPAN",
    "AGENT_LOOP_MODULE",
    "CARRIER_META",
    "REWARD_PHASE",
    "TIMER_MODULES",
    "TIMING_PREFIX",
    "TOOL_CALLS_SPAN",
    "VerlInstrumentor",
    "WAIT_CAUSE",
    "instrument_worker",
]
