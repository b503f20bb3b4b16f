"""vLLM: ``generate`` spans whose traceparent reaches the engine, so that vLLM's own
``llm_request`` span nests under them (docs/vllm.md). vLLM is imported only by
:class:`VLLMInstrumentor` when no engine classes are given.

    from otel_rollout.integrations.vllm import VLLMInstrumentor
    VLLMInstrumentor().instrument()          # or: wrap_generate(engine); trace_headers()
"""

from __future__ import annotations

from otel_rollout.instrumentation import require

require("opentelemetry.instrumentation.instrumentor", "vllm")

from otel_rollout.integrations.vllm._instrumentor import (  # noqa: E402
    VLLMInstrumentor,
    unwrap_generate,
    wrap_generate,
)
from otel_rollout.integrations.vllm._instrumentor import (  # noqa: E402
    _vllm_engine_classes as _vllm_engine_classes,
)
from otel_rollout.integrations.vllm._provider import _reset_warnings as _reset_warnings  # noqa: E402
from otel_rollout.integrations.vllm._provider import vllm_provider_warning  # noqa: E402
from otel_rollout.integrations.vllm._stream import W3C_HEADERS as W3C_HEADERS  # noqa: E402
from otel_rollout.integrations.vllm._stream import trace_headers  # noqa: E402

__all__ = [
    "VLLMInstrumentor", "trace_headers", "unwrap_generate", "vllm_provider_warning", "wrap_generate"
]  # fmt: skip
