"""vLLM: ``generate`` spans whose traceparent reaches the engine, so that vLLM's own
``llm_request`` span (queue, prefill and decode times) nests under them.

In-process engine (``AsyncLLM`` / ``AsyncLLMEngine``)::

    from otel_rollout.integrations.vllm import VLLMInstrumentor
    VLLMInstrumentor().instrument()          # or: wrap_generate(engine)

OpenAI-compatible server, any HTTP client::

    from otel_rollout.integrations.vllm import trace_headers
    async with traj.generate() as gen:
        resp = await client.post(url, json=body, headers=trace_headers())

Inside a trajectory each ``engine.generate(...)`` stream becomes one ``generate`` (``llm``
phase) span of that trajectory; its W3C ``traceparent`` is passed as ``trace_headers``
(merged with the caller's), and token counts, finish reasons and the engine's timings are
read from the ``RequestOutput`` objects as they stream past. The timings give the
breakdown its ``llm_queue / llm_prefill / llm_decode / llm_client`` sub-parts of ``llm``.
Outside a trajectory the call goes through untouched unless ``standalone=True`` asks for a
plain GenAI span; while OpenTelemetry instrumentation is suppressed
(``opentelemetry.instrumentation.utils.suppress_instrumentation``) it always does.

The modules: ``_headers`` (W3C propagation), ``_shape`` (where arguments sit in a call),
``_outputs`` (reading ``RequestOutput``), ``_provider`` (vLLM's global tracer provider),
``_stream`` (the traced stream) and ``_instrumentor`` (patching, with ``wrapt``).

vLLM is imported lazily (only by :class:`VLLMInstrumentor` when no engine classes are
given); nothing here needs vLLM to import.
"""

from __future__ import annotations

from otel_rollout.integrations import require

require("opentelemetry.instrumentation.instrumentor", "vllm")

from otel_rollout import attributes as _A  # noqa: E402
from otel_rollout.integrations.vllm._headers import W3C_HEADERS as W3C_HEADERS  # noqa: E402
from otel_rollout.integrations.vllm._headers import trace_headers  # noqa: E402
from otel_rollout.integrations.vllm._instrumentor import (  # noqa: E402
    VLLMInstrumentor,
    unwrap_generate,
    wrap_generate,
)
from otel_rollout.integrations.vllm._instrumentor import (  # noqa: E402
    _vllm_engine_classes as _vllm_engine_classes,
)
from otel_rollout.integrations.vllm._outputs import (  # noqa: E402
    OPERATION as OPERATION,
)
from otel_rollout.integrations.vllm._outputs import (  # noqa: E402
    SYSTEM as SYSTEM,
)
from otel_rollout.integrations.vllm._outputs import (  # noqa: E402
    engine_timings,
)
from otel_rollout.integrations.vllm._provider import (  # noqa: E402
    _reset_warnings as _reset_warnings,
)
from otel_rollout.integrations.vllm._provider import vllm_provider_warning  # noqa: E402

__all__ = [
    "VLLMInstrumentor",
    "engine_timings",
    "trace_headers",
    "unwrap_generate",
    "vllm_provider_warning",
    "wrap_generate",
]

# Attribute keys, kept importable from here (they live in otel_rollout.attributes).
VLLM_REQUEST_ID = _A.VLLM_REQUEST_ID
VLLM_REQUEST_N = _A.VLLM_REQUEST_N
VLLM_TIME_IN_QUEUE = _A.VLLM_TIME_IN_QUEUE
VLLM_TIME_TO_FIRST_TOKEN = _A.VLLM_TIME_TO_FIRST_TOKEN
VLLM_TIME_IN_PREFILL = _A.VLLM_TIME_IN_PREFILL
VLLM_TIME_IN_DECODE = _A.VLLM_TIME_IN_DECODE
VLLM_TIME_IN_INFERENCE = _A.VLLM_TIME_IN_INFERENCE
VLLM_NUM_PREEMPTIONS = _A.VLLM_NUM_PREEMPTIONS
VLLM_RESOURCE_KEY = _A.VLLM_RESOURCE_KEY
GEN_AI_USAGE_CACHE_READ = _A.GEN_AI_USAGE_CACHE_READ
CLOSED_EARLY = _A.GENERATE_CLOSED_EARLY
