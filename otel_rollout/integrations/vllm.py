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
read from the ``RequestOutput`` objects as they stream past. Outside a trajectory the call
goes through untouched unless ``standalone=True`` asks for a plain GenAI span.

The generate span is never made the current span while the stream is open: an async
generator runs in its consumer's context, so attaching it across ``yield`` would leak it
into the caller's code and detach it from the wrong context when the stream is closed
from a finalizer. vLLM does not need it current; the ``traceparent`` carries it.

vLLM is imported lazily (only by :class:`VLLMInstrumentor` when no engine classes are
given); nothing here needs vLLM to import.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import os
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import ProxyTracer, Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from otel_rollout import _attributes as A
from otel_rollout._errors import internal_error
from otel_rollout._tracer import (
    Generation,
    Trajectory,
    _capture_content,
    current_trajectory,
)
from otel_rollout._version import __version__
from otel_rollout.integrations import require

require("opentelemetry.instrumentation.instrumentor", "vllm")
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # noqa: E402

__all__ = [
    "VLLMInstrumentor",
    "trace_headers",
    "unwrap_generate",
    "vllm_provider_warning",
    "wrap_generate",
]

logger = logging.getLogger("otel_rollout.integrations.vllm")

#: The headers vLLM reads (``vllm.tracing.utils.TRACE_HEADERS``), always W3C.
W3C_HEADERS: Final = ("traceparent", "tracestate")

# --- attribute keys this integration adds ---
#: vLLM's own keys (``vllm.tracing.utils.SpanAttributes``), written on our ``generate``
#: span too, computed the same way from ``RequestOutput.metrics``: one query finds both.
VLLM_REQUEST_ID: Final = "gen_ai.request.id"
VLLM_REQUEST_N: Final = "gen_ai.request.n"
VLLM_TIME_IN_QUEUE: Final = "gen_ai.latency.time_in_queue"
VLLM_TIME_TO_FIRST_TOKEN: Final = "gen_ai.latency.time_to_first_token"
VLLM_TIME_IN_PREFILL: Final = "gen_ai.latency.time_in_model_prefill"
VLLM_TIME_IN_DECODE: Final = "gen_ai.latency.time_in_model_decode"
VLLM_TIME_IN_INFERENCE: Final = "gen_ai.latency.time_in_model_inference"
VLLM_NUM_PREEMPTIONS: Final = "vllm.request.num_preemptions"
#: GenAI semantic convention: prompt tokens served from the (prefix) cache.
GEN_AI_USAGE_CACHE_READ: Final = "gen_ai.usage.cache_read.input_tokens"
#: True when the consumer closed the stream before vLLM's final output (vLLM aborts it).
CLOSED_EARLY: Final = "rollout.generate.closed_early"
#: Resource attribute vLLM puts on the tracer provider it builds (``init_tracer``).
VLLM_RESOURCE_KEY: Final = "vllm.instrumenting_module_name"

OPERATION: Final = "text_completion"
SYSTEM: Final = "vllm"

_W3C = TraceContextTextMapPropagator()
_MARK = "_otel_rollout_vllm"
#: Set while a traced call creates the engine's stream, so a second layer (an instance
#: wrapped with :func:`wrap_generate` whose class is also instrumented) passes through.
_INSIDE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "otel_rollout_vllm_inside", default=False
)


# --- headers ---
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


def _w3c_headers(context: otel_context.Context) -> dict[str, str]:
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=context)
    return carrier


def _merge_headers(caller: Mapping[str, str] | None, ours: Mapping[str, str]) -> dict[str, str]:
    """The caller's headers with their traceparent/tracestate replaced by ours."""
    out = {k: v for k, v in (caller or {}).items() if str(k).lower() not in W3C_HEADERS}
    out.update(ours)
    return out


def _parent_from_headers(headers: Mapping[str, str] | None) -> otel_context.Context | None:
    """The context named by a caller's W3C headers, or None when they name none."""
    if not headers:
        return None
    lowered = {str(k).lower(): v for k, v in headers.items()}
    if "traceparent" not in lowered:
        return None
    ctx = _W3C.extract(lowered)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


# --- the global provider vLLM may have set ---
_warn_lock = threading.Lock()
_warned: set[str] = set()


def _warn_once(key: str, level: int, message: str) -> None:
    with _warn_lock:
        if key in _warned:
            return
        _warned.add(key)
    logger.log(level, message)


def _reset_warnings() -> None:
    """Forget which one-time messages were logged (tests)."""
    with _warn_lock:
        _warned.clear()


def vllm_provider_warning(tracer: trace.Tracer | None = None) -> str | None:
    """The warning to give when vLLM's global tracer provider is not the one ``tracer``
    (otel-rollout's spans) records into, or when it is but lacks otel-rollout's pipeline;
    ``None`` when vLLM has not set the global provider."""
    gp = trace.get_tracer_provider()
    res = getattr(gp, "resource", None)
    attrs = getattr(res, "attributes", None) or {}
    if VLLM_RESOURCE_KEY not in attrs:
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


def _check_provider(tracer: trace.Tracer | None) -> None:
    if "provider" in _warned:
        return
    try:
        message = vllm_provider_warning(tracer)
    except Exception as err:
        internal_error("vllm provider check", err)
        return
    if message is not None:
        _warn_once("provider", logging.WARNING, message)


def _engine_traces(engine: Any) -> bool | None:
    """Whether the engine was started with an OTLP traces endpoint; None when unknown."""
    config = getattr(engine, "observability_config", None)
    if config is None:
        return None
    endpoint = getattr(config, "otlp_traces_endpoint", ...)
    if endpoint is ...:
        return None
    return bool(endpoint)


# --- the call's shape ---
class _Shape:
    """Where ``sampling_params``, ``request_id`` and ``trace_headers`` sit in a call."""

    __slots__ = ("names", "positions", "var_kw")

    def __init__(self, fn: Callable[..., Any], skip: int = 0) -> None:
        self.positions: dict[str, int] = {}
        self.names: set[str] = set()
        self.var_kw = True
        try:
            params = list(inspect.signature(fn).parameters.values())[skip:]
        except (TypeError, ValueError):
            return
        self.var_kw = False
        index = 0
        for p in params:
            if p.kind is p.VAR_KEYWORD:
                self.var_kw = True
                continue
            if p.kind is p.VAR_POSITIONAL:
                index = -1
                continue
            self.names.add(p.name)
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and index >= 0:
                self.positions[p.name] = index
                index += 1

    def get(self, name: str, args: tuple, kwargs: Mapping[str, Any]) -> Any:
        i = self.positions.get(name)
        if i is not None and i < len(args):
            return args[i]
        return kwargs.get(name)

    def accepts(self, name: str) -> bool:
        return self.var_kw or name in self.names

    def put(self, name: str, value: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        i = self.positions.get(name)
        if i is not None and i < len(args):
            return (*args[:i], value, *args[i + 1 :]), kwargs
        return args, {**kwargs, name: value}


class _Options:
    __slots__ = ("active", "model", "standalone", "tracer")

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None,
        standalone: bool,
        model: str | None,
    ) -> None:
        self.tracer = trace.get_tracer(
            "otel_rollout.integrations.vllm", __version__, tracer_provider
        )
        self.standalone = bool(standalone)
        self.model = model
        self.active = True


# --- reading RequestOutput ---
def _is_delta(sampling_params: Any) -> bool:
    kind = getattr(sampling_params, "output_kind", None)
    return getattr(kind, "name", None) == "DELTA"


class _Usage:
    """What the stream showed: tokens per completion index, finish reasons, metrics."""

    __slots__ = (
        "cached",
        "delta",
        "finished",
        "metrics",
        "output_tokens",
        "prompt",
        "prompt_tokens",
        "reasons",
        "texts",
    )

    def __init__(self, delta: bool, capture: bool) -> None:
        self.delta = delta
        self.prompt_tokens: int | None = None
        self.cached: int | None = None
        self.output_tokens: dict[int, int] = {}
        self.reasons: dict[int, str] = {}
        self.finished = False
        self.metrics: Any = None
        self.prompt: Any = None
        self.texts: dict[int, str] | None = {} if capture else None

    def add(self, out: Any) -> None:
        if self.prompt_tokens is None:
            ids = getattr(out, "prompt_token_ids", None)
            if ids is not None:
                self.prompt_tokens = len(ids)
        cached = getattr(out, "num_cached_tokens", None)
        if cached is not None:
            self.cached = int(cached)
        metrics = getattr(out, "metrics", None)
        if metrics is not None:
            self.metrics = metrics
        texts = self.texts
        if texts is not None and self.prompt is None:
            self.prompt = getattr(out, "prompt", None)
        for c in getattr(out, "outputs", None) or ():
            idx = getattr(c, "index", 0)
            n = len(getattr(c, "token_ids", None) or ())
            if self.delta:
                self.output_tokens[idx] = self.output_tokens.get(idx, 0) + n
            else:
                self.output_tokens[idx] = n
            reason = getattr(c, "finish_reason", None)
            if reason is not None:
                self.reasons[idx] = str(reason)
            if texts is not None:
                text = getattr(c, "text", None) or ""
                texts[idx] = texts.get(idx, "") + text if self.delta else text
        if getattr(out, "finished", False):
            self.finished = True

    def record(self, gen: Generation) -> None:
        reasons = [self.reasons[i] for i in sorted(self.reasons)]
        gen.record(
            input_tokens=self.prompt_tokens,
            output_tokens=sum(self.output_tokens.values()) if self.output_tokens else None,
            finish_reasons=reasons or None,
        )
        span = gen.span
        if self.cached is not None:
            span.set_attribute(GEN_AI_USAGE_CACHE_READ, self.cached)
        if self.metrics is not None:
            span.set_attributes(engine_timings(self.metrics))
        if self.texts is not None:
            completion = "\n".join(self.texts[i] for i in sorted(self.texts)) or None
            prompt = self.prompt if isinstance(self.prompt, str) else None
            gen.record_content(prompt=prompt, completion=completion)


def engine_timings(metrics: Any) -> dict[str, float | int]:
    """Durations from ``RequestOutput.metrics`` (vLLM's ``RequestStateStats``), seconds.

    Only differences taken within one clock: ``queued_ts``, ``scheduled_ts``,
    ``first_token_ts`` and ``last_token_ts`` are the engine core's monotonic clock, while
    ``arrival_time`` is the frontend's wall clock and is never subtracted from them.
    A timestamp still at its default 0.0 (not reached, e.g. aborted while queued) yields
    nothing. ``first_token_latency`` is vLLM's own wall-clock difference from arrival.
    """
    out: dict[str, float | int] = {}

    def ts(name: str) -> float:
        value = getattr(metrics, name, None)
        return float(value) if isinstance(value, int | float) else 0.0

    queued, scheduled = ts("queued_ts"), ts("scheduled_ts")
    first, last = ts("first_token_ts"), ts("last_token_ts")
    for key, a, b in (
        (VLLM_TIME_IN_QUEUE, queued, scheduled),
        (VLLM_TIME_IN_PREFILL, scheduled, first),
        (VLLM_TIME_IN_DECODE, first, last),
        (VLLM_TIME_IN_INFERENCE, scheduled, last),
    ):
        if a > 0.0 and b > 0.0 and b >= a:
            out[key] = b - a
    ttft = ts("first_token_latency")
    if ttft > 0.0:
        out[VLLM_TIME_TO_FIRST_TOKEN] = ttft
    preemptions = getattr(metrics, "num_preemptions", None)
    if isinstance(preemptions, int) and preemptions > 0:
        out[VLLM_NUM_PREEMPTIONS] = preemptions
    return out


def _model_of(engine: Any) -> str | None:
    config = getattr(engine, "model_config", None)
    if config is None:
        return None
    served = getattr(config, "served_model_name", None)
    if isinstance(served, list | tuple) and served:
        served = served[0]
    if isinstance(served, str) and served:
        return served
    model = getattr(config, "model", None)
    return model if isinstance(model, str) else None


def _request_attributes(
    engine: Any, sampling_params: Any, request_id: Any, model: str | None
) -> dict[str, Any]:
    attrs: dict[str, Any] = {A.GEN_AI_OPERATION_NAME: OPERATION, A.GEN_AI_SYSTEM: SYSTEM}
    model = model or _model_of(engine)
    if model:
        attrs[A.GEN_AI_REQUEST_MODEL] = model
    if request_id is not None:
        attrs[VLLM_REQUEST_ID] = str(request_id)
    if sampling_params is not None:
        for key, name, kind in (
            (A.GEN_AI_REQUEST_MAX_TOKENS, "max_tokens", int),
            (A.GEN_AI_REQUEST_TEMPERATURE, "temperature", float),
            (A.GEN_AI_REQUEST_TOP_P, "top_p", float),
            (VLLM_REQUEST_N, "n", int),
        ):
            value = getattr(sampling_params, name, None)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attrs[key] = kind(value)
    return attrs


# --- the traced stream ---
def _start_span(
    traj: Trajectory | None,
    parent: otel_context.Context,
    caller_headers: Mapping[str, str] | None,
    attrs: dict[str, Any],
    opts: _Options,
) -> Span:
    if traj is not None:
        # Trajectory.generate numbers the turn and adds the trajectory's model; the span is
        # started here, not entered, so that it is never attached across a yield.
        if traj.model is not None:
            attrs.pop(A.GEN_AI_REQUEST_MODEL, None)
        # ``traj`` was current when the call was made, so the caller's context is inside
        # it (possibly inside another phase: an LLM judge in env.step is env time).
        return traj.generate(**attrs).start(context=parent).span
    ctx = _parent_from_headers(caller_headers) or parent
    return opts.tracer.start_span(
        A.SPAN_GENERATE, context=ctx, kind=SpanKind.CLIENT, attributes=attrs
    )


def _begin(
    engine: Any,
    args: tuple,
    kwargs: dict,
    shape: _Shape,
    traj: Trajectory | None,
    parent: otel_context.Context,
    opts: _Options,
) -> tuple[Generation, _Usage, tuple, dict, bool]:
    """Start the span (or reuse the enclosing generate span: ``owned`` False) and put
    its traceparent into the call's ``trace_headers``."""
    _check_provider(traj.tracer if traj is not None else opts.tracer)
    caller_headers = shape.get("trace_headers", args, kwargs)
    sampling_params = shape.get("sampling_params", args, kwargs)
    request_id = shape.get("request_id", args, kwargs)
    attrs = _request_attributes(engine, sampling_params, request_id, opts.model)
    outer = trace.get_current_span(parent)
    owned = traj is None or not _is_open_generate(outer)
    if owned:
        span = _start_span(traj, parent, caller_headers, attrs, opts)
    else:
        # Already inside a generate phase (the user's traj.generate(), or the SkyRL
        # instrumentor around its client): that span is the call; no second turn.
        span = outer
        span.set_attributes(attrs)
    usage = _Usage(_is_delta(sampling_params), _capture_content())
    if _engine_traces(engine) is False:
        _warn_once(
            "engine-not-tracing",
            logging.INFO,
            "otel-rollout: this vLLM engine was started without an OTLP traces endpoint, "
            "so it makes no llm_request spans; start it with --otlp-traces-endpoint "
            "(otlp_traces_endpoint=...) to see them under the generate spans.",
        )
    elif shape.accepts("trace_headers"):
        merged = _merge_headers(caller_headers, _w3c_headers(trace.set_span_in_context(span)))
        args, kwargs = shape.put("trace_headers", merged, args, kwargs)
    return Generation(span), usage, args, kwargs, owned


def _is_open_generate(span: Any) -> bool:
    attrs = getattr(span, "attributes", None)
    return (
        getattr(span, "name", None) == A.SPAN_GENERATE
        and span.is_recording()
        and attrs is not None
        and attrs.get(A.PHASE) == A.PHASE_LLM
    )


async def _stream(
    call: Callable[..., Any],
    engine: Any,
    args: tuple,
    kwargs: dict,
    shape: _Shape,
    traj: Trajectory | None,
    parent: otel_context.Context,
    opts: _Options,
) -> Any:
    gen: Generation | None = None
    usage: _Usage | None = None
    owned = True
    try:
        gen, usage, args, kwargs, owned = _begin(engine, args, kwargs, shape, traj, parent, opts)
    except Exception as err:  # never break the call: it goes through untraced
        internal_error("vllm generate start", err)
    inner: Any = None
    closed_early = False
    try:
        token = _INSIDE.set(True)
        try:
            inner = call(*args, **kwargs)
        finally:
            _INSIDE.reset(token)
        if not hasattr(inner, "__aiter__") and inspect.isawaitable(inner):
            inner = await inner
        async for out in inner:
            if usage is not None:
                try:
                    usage.add(out)
                except Exception as err:
                    internal_error("vllm output", err)
            yield out
    except GeneratorExit:
        closed_early = usage is not None and not usage.finished
        aclose = getattr(inner, "aclose", None)
        if aclose is not None:
            try:
                await aclose()  # vLLM aborts the request now, not when garbage collected
            except Exception as err:
                logger.debug("closing the vLLM stream raised %r", err)
        raise
    except BaseException as exc:
        if gen is not None and owned:  # an enclosing phase records it as it propagates
            gen.record_error(exc)
        raise
    finally:
        if gen is not None and usage is not None:
            try:
                usage.record(gen)
                if closed_early:
                    gen.span.set_attribute(CLOSED_EARLY, True)
                if owned:
                    gen.span.end()
            except Exception as err:
                internal_error("vllm generate end", err)


def _dispatch(
    call: Callable[..., Any],
    engine: Any,
    args: tuple,
    kwargs: dict,
    shape: _Shape,
    opts: _Options,
) -> Any:
    if not opts.active or _INSIDE.get():
        return call(*args, **kwargs)
    traj = current_trajectory()
    if traj is None and not opts.standalone:
        return call(*args, **kwargs)
    return _stream(call, engine, args, kwargs, shape, traj, otel_context.get_current(), opts)


# --- public wrappers ---
def wrap_generate(
    engine: Any,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    standalone: bool = False,
    model: str | None = None,
) -> Any:
    """Trace ``engine.generate`` on this one engine object (idempotent); returns ``engine``.

    Inside a trajectory each call is a ``generate`` span of it (recorded by the
    trajectory's own provider). Outside one the call passes through unchanged, unless
    ``standalone=True``: then it is a plain GenAI ``generate`` span (kind CLIENT) from
    ``tracer_provider`` (default: the global one), parented by the caller's
    ``trace_headers`` when they name a span, else by the current context. ``model``
    overrides the model name read from ``engine.model_config``.
    """
    current = engine.generate
    if getattr(current, _MARK, False):
        return engine
    opts = _Options(tracer_provider, standalone, model)
    shape = _Shape(current)

    @functools.wraps(current)
    def generate(*args: Any, **kwargs: Any) -> Any:
        return _dispatch(current, engine, args, kwargs, shape, opts)

    setattr(generate, _MARK, opts)
    engine.generate = generate
    if opts.standalone:
        _check_provider(opts.tracer)
    return engine


def unwrap_generate(engine: Any) -> Any:
    """Undo :func:`wrap_generate` on ``engine``; returns ``engine``."""
    current = getattr(engine, "__dict__", {}).get("generate")
    opts = getattr(current, _MARK, None)
    if opts is not None:
        opts.active = False
        del engine.generate
    return engine


def _vllm_engine_classes() -> list[type]:
    require("vllm", "vllm")
    import importlib

    found: list[type] = []
    for module, name in (
        ("vllm.v1.engine.async_llm", "AsyncLLM"),
        ("vllm.engine.async_llm_engine", "AsyncLLMEngine"),
    ):
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        if isinstance(cls, type) and cls not in found:
            found.append(cls)
    if not found:
        raise ImportError("no AsyncLLM / AsyncLLMEngine class found in this vLLM")
    return found


class VLLMInstrumentor(BaseInstrumentor):
    """Trace ``AsyncLLM.generate`` / ``AsyncLLMEngine.generate``; idempotent.

    ``instrument(tracer_provider=..., standalone=False, model=None, engine_classes=None)``:
    ``tracer_provider`` is used for standalone spans (spans inside a trajectory always use
    the trajectory's provider, so its BreakdownProcessor sees them); ``engine_classes``
    patches other classes with the same ``generate`` shape instead of vLLM's (a subclass,
    a fork, a test double). ``uninstrument()`` restores the original methods.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        classes: Iterable[type] = kwargs.get("engine_classes") or _vllm_engine_classes()
        opts = _Options(
            kwargs.get("tracer_provider"), kwargs.get("standalone", False), kwargs.get("model")
        )
        self._opts = opts
        self._patched: list[tuple[type, Any, bool, Any]] = []
        for cls in dict.fromkeys(classes):
            own = "generate" in cls.__dict__
            original = cls.__dict__["generate"] if own else cls.generate
            if getattr(original, _MARK, None) is not None:
                continue
            wrapper = _class_wrapper(original, opts)
            cls.generate = wrapper
            self._patched.append((cls, original, own, wrapper))
        if opts.standalone:
            _check_provider(opts.tracer)

    def _uninstrument(self, **kwargs: Any) -> None:
        opts = getattr(self, "_opts", None)
        if opts is not None:
            opts.active = False  # a wrapper someone else wrapped over stays, inert
        for cls, original, own, wrapper in getattr(self, "_patched", ()):
            if cls.__dict__.get("generate") is not wrapper:
                continue
            if own:
                cls.generate = original
            else:
                delattr(cls, "generate")
        self._patched = []


def _class_wrapper(original: Callable[..., Any], opts: _Options) -> Callable[..., Any]:
    shape = _Shape(original, skip=1)

    @functools.wraps(original)
    def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not opts.active:
            return original(self, *args, **kwargs)
        return _dispatch(functools.partial(original, self), self, args, kwargs, shape, opts)

    setattr(generate, _MARK, opts)
    return generate
