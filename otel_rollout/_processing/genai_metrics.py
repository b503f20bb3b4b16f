"""The GenAI client metrics of the semantic conventions, from the generate spans as they end.

``gen_ai.client.operation.duration`` (s) and ``gen_ai.client.token.usage`` (``{token}``,
one point per token type), with the conventions' attributes (operation, provider, request
and response model, ``error.type``) and bucket advice; never ids. A span processor, so it
also counts the inference spans an integration makes outside a trajectory.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import metrics
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import SpanKind, StatusCode

from otel_rollout import attributes as A
from otel_rollout._base.errors import internal_error
from otel_rollout._version import __version__

#: Operations whose CLIENT spans are inference calls.
_INFERENCE = frozenset((A.OP_CHAT, A.OP_TEXT_COMPLETION, "generate_content"))
_KEYS = (
    A.GEN_AI_OPERATION_NAME,
    A.GEN_AI_PROVIDER_NAME,
    A.GEN_AI_REQUEST_MODEL,
    A.GEN_AI_RESPONSE_MODEL,
)
_MAX_CACHED = 4096


class GenAIMetricsProcessor(SpanProcessor):
    """Records the GenAI client metrics for every inference span (CLIENT kind, operation
    ``chat``/``text_completion``) when it ends. Hooks never raise."""

    def __init__(self, meter_provider: metrics.MeterProvider | None = None) -> None:
        meter = (meter_provider or metrics.get_meter_provider()).get_meter(
            "otel_rollout", __version__
        )
        self._duration = meter.create_histogram(
            A.METRIC_GENAI_OPERATION_DURATION, unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=list(A.GENAI_DURATION_BUCKETS))  # fmt: skip
        self._tokens = meter.create_histogram(
            A.METRIC_GENAI_TOKEN_USAGE, unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=list(A.GENAI_TOKEN_BUCKETS))  # fmt: skip
        # (operation, provider, models, error type) -> (base, input, output) attributes
        self._cache: dict[tuple[Any, ...], tuple[dict, dict, dict]] = {}

    def on_end(self, span: ReadableSpan) -> None:
        try:
            if span.kind is not SpanKind.CLIENT:
                return
            attrs = span.attributes or {}
            if attrs.get(A.GEN_AI_OPERATION_NAME) not in _INFERENCE:
                return
            error = attrs.get(A.ERROR_TYPE)
            if error is None and span.status.status_code is StatusCode.ERROR:
                error = "_OTHER"
            key = (*(attrs.get(k) for k in _KEYS), error)
            cached = self._cache.get(key)
            if cached is None:
                base = {k: v for k, v in zip(_KEYS, key, strict=False) if v is not None}
                if error is not None:
                    base[A.ERROR_TYPE] = error
                cached = (
                    base,
                    {**base, A.GEN_AI_TOKEN_TYPE: A.TOKEN_TYPE_INPUT},
                    {**base, A.GEN_AI_TOKEN_TYPE: A.TOKEN_TYPE_OUTPUT},
                )
                if len(self._cache) < _MAX_CACHED:
                    self._cache[key] = cached
            base, tin, tout = cached
            if span.end_time is not None and span.start_time is not None:
                self._duration.record((span.end_time - span.start_time) * 1e-9, base)
            n_in = attrs.get(A.GEN_AI_USAGE_INPUT_TOKENS)
            if isinstance(n_in, int):
                self._tokens.record(n_in, tin)
            n_out = attrs.get(A.GEN_AI_USAGE_OUTPUT_TOKENS)
            if isinstance(n_out, int):
                self._tokens.record(n_out, tout)
        except Exception as exc:
            internal_error("GenAIMetricsProcessor.on_end", exc)
