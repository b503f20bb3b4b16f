"""The global tracer provider vLLM sets when it traces in-process, and whether an engine
traces at all: each said once, never fought silently."""

from __future__ import annotations

import logging
import os
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import ProxyTracer

from otel_rollout import attributes as A
from otel_rollout.instrumentation import forget_warnings, internal_error, warn_once, warned

logger = logging.getLogger("otel_rollout.integrations.vllm")

_KEY_PROVIDER = "vllm:provider"
_KEY_ENGINE_NOT_TRACING = "vllm:engine-not-tracing"


def _reset_warnings() -> None:
    """Forget which one-time messages were logged (tests)."""
    forget_warnings("vllm:")


def vllm_provider_warning(tracer: trace.Tracer | None = None) -> str | None:
    """The warning to give when vLLM's global tracer provider is not the one ``tracer``
    (otel-rollout's spans) records into, or when it is but lacks otel-rollout's pipeline;
    ``None`` when vLLM has not set the global provider."""
    gp = trace.get_tracer_provider()
    res = getattr(gp, "resource", None)
    attrs = getattr(res, "attributes", None) or {}
    if A.VLLM_RESOURCE_KEY not in attrs:
        return None
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "?")
    head = (
        "otel-rollout: vLLM's in-process tracing has set the global OpenTelemetry tracer "
        f"provider (exporting to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT={endpoint}, which vLLM "
        "also wrote into os.environ). "
    )
    shares = tracer is None or isinstance(tracer, ProxyTracer)
    shares = shares or getattr(tracer, "resource", None) is res
    if shares:
        return head + (
            "otel-rollout's spans are recorded by that provider, which has no "
            "BreakdownProcessor: trajectories get no breakdown, histograms or summary, and "
            "otel-rollout's sampling does not apply. Call otel_rollout.configure() (or set "
            "your own provider globally) before the vLLM engine is created; vLLM's "
            "llm_request spans then go through otel-rollout's provider and exporter."
        )
    return head + (
        "otel-rollout's spans use a different provider, so there are two export pipelines: "
        "vLLM's llm_request spans still name the generate spans as parents (the ids travel "
        "in trace_headers), but they reach the backend only through vLLM's exporter, so "
        "point --otlp-traces-endpoint at the same Collector as otel-rollout's exporter. "
        "Code that uses the global provider (otel_rollout.trajectory(), other "
        "instrumentations) now records into vLLM's provider, without otel-rollout's "
        "processor. For a single pipeline call otel_rollout.configure() before the engine "
        "is created."
    )


def check_provider(tracer: trace.Tracer | None) -> None:
    """Warn once when vLLM's global provider is in the way (see above)."""
    if warned(_KEY_PROVIDER):
        return
    try:
        message = vllm_provider_warning(tracer)
    except Exception as err:
        internal_error("vllm provider check", err)
        return
    if message is not None:
        warn_once(_KEY_PROVIDER, "%s", message, log=logger)


def engine_traces(engine: Any) -> bool | None:
    """Whether the engine was started with an OTLP traces endpoint; None when unknown."""
    endpoint = getattr(getattr(engine, "observability_config", None), "otlp_traces_endpoint", ...)
    return None if endpoint is ... else bool(endpoint)


def hint_engine_not_tracing() -> None:
    warn_once(
        _KEY_ENGINE_NOT_TRACING,
        "otel-rollout: this vLLM engine was started without an OTLP traces endpoint, "
        "so it makes no llm_request spans; start it with --otlp-traces-endpoint "
        "(otlp_traces_endpoint=...) to see them under the generate spans.",
        level=logging.INFO,
        log=logger,
    )
