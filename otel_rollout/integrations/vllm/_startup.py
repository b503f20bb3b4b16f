"""vLLM's engine start-up spans (``Overall Loading``, ``AsyncMPClient init``...) kept out
of otel-rollout's provider (docs/vllm.md, vLLM's start-up spans): ``vllm.tracing.otel``'s
``trace`` (which its start-up functions take tracers from) and ``TracerProvider`` (to
find the provider vLLM builds) are replaced, both restored by :func:`unroute`. A start-up
span is made by vLLM's provider (else the global one) in a trace of its own unless it
nests in another vLLM span; ``llm_request`` spans keep the global provider."""

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
    class VLLMTracerProvider(base):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            _state["provider"] = self

    return VLLMTracerProvider


def route() -> bool:
    """Route vLLM's start-up spans as described above; False when this vLLM has no
    ``vllm.tracing.otel`` of the expected shape (nothing patched)."""
    try:
        otel: Any = importlib.import_module(_REQUEST_MODULE)  # vLLM's: attributes unknown
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
