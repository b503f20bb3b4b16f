"""W3C trace headers for vLLM: what it extracts, merged with the caller's headers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from otel_rollout.instrumentation import internal_error

#: The headers vLLM reads (``vllm.tracing.utils.TRACE_HEADERS``), always W3C.
W3C_HEADERS: Final = ("traceparent", "tracestate")

_W3C = TraceContextTextMapPropagator()


def trace_headers(context: otel_context.Context | None = None) -> dict[str, str]:
    """Headers naming the current (or ``context``'s) span, for a vLLM server or engine.

    Always holds the W3C ``traceparent`` (and ``tracestate`` when there is one), whatever
    the global propagator is: vLLM extracts with ``TraceContextTextMapPropagator`` only and
    keeps only these two headers. Whatever the globally configured propagator writes
    (``baggage``, ``b3``...) is included as well, for proxies and gateways in between.
    Empty when there is no valid span.
    """
    carrier: dict[str, str] = {}
    try:
        propagate.inject(carrier, context=context)
    except Exception as err:  # a custom global propagator must never break the request
        internal_error("vllm trace_headers", err)
    _W3C.inject(carrier, context=context)
    return carrier


def w3c_headers(context: otel_context.Context) -> dict[str, str]:
    """Only the W3C headers of ``context``'s span."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=context)
    return carrier


def merge_headers(caller: Mapping[str, str] | None, ours: Mapping[str, str]) -> dict[str, str]:
    """The caller's headers with their traceparent/tracestate replaced by ours."""
    out = {k: v for k, v in (caller or {}).items() if str(k).lower() not in W3C_HEADERS}
    out.update(ours)
    return out


def parent_from_headers(headers: Mapping[str, str] | None) -> otel_context.Context | None:
    """The context named by a caller's W3C headers, or None when they name none."""
    if not headers:
        return None
    lowered = {str(k).lower(): v for k, v in headers.items()}
    if "traceparent" not in lowered:
        return None
    ctx = _W3C.extract(lowered)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None
