"""vLLM's engine start-up spans (``Overall Loading``, ``AsyncMPClient init``, ``API server
setup``...) kept out of the process's tracer provider when that provider is otel-rollout's.

vLLM (0.11 and later) decorates its start-up functions with ``vllm.tracing.instrument``,
whose spans take ``trace.get_tracer(module)`` from the global provider when they run and
nest under whatever span is current. When ``configure()`` set the global provider first
(the recommended order), vLLM's own provider (``init_tracer``, with its resource
``vllm.instrumenting_module_name`` / ``vllm.process_id`` and its exporter to
``--otlp-traces-endpoint``) is refused as the global one, so the front-end process's
start-up spans went out through otel-rollout's pipeline, under the trainer's service
name, and inside the current trajectory if the engine was built in one.

Here vLLM's tracer lookups are routed: a start-up span (any vLLM module but
``vllm.tracing.otel``, which makes the per-request ``llm_request`` spans, and those keep
riding the global provider under the generate spans) is made by the provider vLLM built
for this process, and starts a trace of its own when the current span is not one of
vLLM's. The engine-core and worker processes set up their own providers and are not
concerned. Without a vLLM provider of this process (the engine does not trace, or it was
built before :func:`route`) start-up spans use the global provider, still in traces of
their own. Patched: ``vllm.tracing.otel.trace`` (the module reference those
functions read) and ``vllm.tracing.otel.TracerProvider`` (to find vLLM's provider);
both restored by :func:`unroute`.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from opentelemetry import trace as _trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider

#: The vLLM module whose tracer makes ``llm_request`` spans.
_REQUEST_MODULE = "vllm.tracing.otel"

_lock = threading.Lock()
_state: dict[str, Any] = {}


def _is_vllms(span: Any) -> bool:
    scope = getattr(span, "instrumentation_scope", None)
    return str(getattr(scope, "name", "")).startswith("vllm.")


class _StartupTracer:
    """A tracer whose spans start a trace of their own unless the current span is one of
    vLLM's (a start-up span nested in another)."""

    def __init__(self, tracer: Any) -> None:
        self._tracer = tracer

    def _context(self, context: Any) -> Any:
        if context is not None:
            return context
        current = _trace.get_current_span()
        if current.get_span_context().is_valid and not _is_vllms(current):
            return Context()  # not under a trajectory (or any other span of the process)
        return None

    def start_as_current_span(self, name: str, context: Any = None, *a: Any, **kw: Any) -> Any:
        return self._tracer.start_as_current_span(name, self._context(context), *a, **kw)

    def start_span(self, name: str, context: Any = None, *a: Any, **kw: Any) -> Any:
        return self._tracer.start_span(name, self._context(context), *a, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tracer, name)


class _RoutedTrace:
    """Stands for ``opentelemetry.trace`` inside ``vllm.tracing.otel``."""

    def __getattr__(self, name: str) -> Any:
        return getattr(_trace, name)

    def get_tracer(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if name == _REQUEST_MODULE:
            return _trace.get_tracer(name, *args, **kwargs)
        provider = _state.get("provider")
        if provider is None:  # vLLM's provider is the global one, or there is none
            return _StartupTracer(_trace.get_tracer(name, *args, **kwargs))
        return _StartupTracer(provider.get_tracer(name, *args, **kwargs))


def _recording_provider(base: type) -> type:
    class VLLMTracerProvider(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            _state["provider"] = self

    return VLLMTracerProvider


def route() -> bool:
    """Route vLLM's start-up spans as described above; False when this vLLM has no
    ``vllm.tracing.otel`` of the expected shape (nothing patched)."""
    try:
        otel = importlib.import_module(_REQUEST_MODULE)
    except Exception:
        return False
    with _lock:
        if "otel" in _state:
            return True
        if getattr(otel, "trace", None) is not _trace:
            return False
        base = getattr(otel, "TracerProvider", None)
        if not (isinstance(base, type) and issubclass(base, TracerProvider)):
            return False
        _state.update(otel=otel, trace=otel.trace, base=base)
        otel.TracerProvider = _recording_provider(base)
        otel.trace = _RoutedTrace()
    return True


def unroute() -> None:
    """Undo :func:`route` (the provider vLLM built is forgotten, not shut down)."""
    with _lock:
        otel = _state.pop("otel", None)
        if otel is None:
            return
        if isinstance(otel.trace, _RoutedTrace):
            otel.trace = _state["trace"]
        if getattr(otel.TracerProvider, "__name__", "") == "VLLMTracerProvider":
            otel.TracerProvider = _state["base"]
        _state.clear()
