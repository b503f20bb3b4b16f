"""The traced ``generate`` stream: one ``generate`` span per call, its traceparent in the
call's ``trace_headers``, the outputs read as they stream past; the span is never made
current while the stream is open (docs/vllm.md, Decisions)."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import Span, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from otel_rollout import Generation, __version__, current_trajectory
from otel_rollout import TrajectoryHandle as Trajectory
from otel_rollout import attributes as A
from otel_rollout.instrumentation import capture_content as _capture_content
from otel_rollout.instrumentation import internal_error, traceparent
from otel_rollout.instrumentation import semconv as _semconv
from otel_rollout.integrations.vllm._outputs import Usage, output_kind, request_attributes
from otel_rollout.integrations.vllm._provider import (
    check_provider,
    engine_traces,
    hint_engine_not_tracing,
)
from otel_rollout.integrations.vllm._samples import live_sample_stats

logger = logging.getLogger("otel_rollout.integrations.vllm")

#: The headers vLLM reads (``vllm.tracing.utils.TRACE_HEADERS``), always W3C.
W3C_HEADERS: Final = ("traceparent", "tracestate")

_W3C = TraceContextTextMapPropagator()


def trace_headers(context: otel_context.Context | None = None) -> dict[str, str]:
    """Headers naming the current (or ``context``'s) span, for a vLLM server or engine:
    always the W3C ones vLLM reads, whatever the global propagator writes as well (for
    proxies in between); empty when there is no valid span."""
    carrier: dict[str, str] = {}
    try:
        propagate.inject(carrier, context=context)
    except Exception as err:  # a custom global propagator must never break the request
        internal_error("vllm trace_headers", err)
    _W3C.inject(carrier, context=context)
    return carrier


def parent_from_headers(headers: Mapping[str, str] | None) -> otel_context.Context | None:
    """The context named by a caller's W3C headers, or None when they name none."""
    if not headers:
        return None
    lowered = {str(k).lower(): v for k, v in headers.items()}
    if "traceparent" not in lowered:
        return None
    ctx = _W3C.extract(lowered)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


class CallShape:
    """The positions and names of a callable's parameters (after ``skip`` leading ones)."""

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
        """The argument ``name`` of a call, positional or keyword; None when absent."""
        i = self.positions.get(name)
        if i is not None and i < len(args):
            return args[i]
        return kwargs.get(name)

    def accepts(self, name: str) -> bool:
        return self.var_kw or name in self.names

    def put(self, name: str, value: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """The call's arguments with ``name`` set to ``value`` where it was (or as keyword)."""
        i = self.positions.get(name)
        if i is not None and i < len(args):
            return (*args[:i], value, *args[i + 1 :]), kwargs
        return args, {**kwargs, name: value}


#: Set while a traced call creates the engine's stream, so a second layer (an instance
#: wrapped with ``wrap_generate`` whose class is also instrumented) passes through.
_INSIDE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "otel_rollout_vllm_inside", default=False
)


#: How long, and how often, a FINAL_ONLY call with n > 1 looks for its samples' stats in
#: the engine while the request runs (found within milliseconds of the request's start).
_WATCH_S = 5.0
_WATCH_EVERY_S = 0.001


async def _watch_samples(engine: Any, usage: Usage) -> None:
    """``FINAL_ONLY`` with ``n > 1``: the one output arrives once every sample has finished
    and the engine has dropped their state, so the samples' stats are picked up while the
    request runs (:func:`live_sample_stats`)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + _WATCH_S
    while not usage.samples and loop.time() < end:
        try:
            found = live_sample_stats(engine, usage.request_id)
        except Exception as err:  # another engine's shape: the outputs' stats stay
            internal_error("vllm samples", err)
            return
        if found:
            usage.adopt(found)
            return
        await asyncio.sleep(_WATCH_EVERY_S)


class Options:
    """One instrumentation's settings; ``active`` False turns its wrappers inert."""

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


def _start_span(
    traj: Trajectory | None,
    parent: otel_context.Context,
    caller_headers: Mapping[str, str] | None,
    attrs: dict[str, Any],
    opts: Options,
) -> Span:
    if traj is not None:
        # Trajectory.generate numbers the turn and adds the trajectory's model; the span is
        # started here, not entered, so that it is never attached across a yield.
        if traj.model is not None:
            attrs.pop(A.GEN_AI_REQUEST_MODEL, None)
        # ``traj`` was current when the call was made, so the caller's context is inside
        # it (possibly inside another phase: an LLM judge in env.step is env time).
        return traj.generate(**attrs).start(context=parent).span
    ctx = parent_from_headers(caller_headers) or parent
    name = A.SPAN_GENERATE
    if _semconv.mode().latest_names:
        name = _semconv.inference_span_name(
            attrs.get(A.GEN_AI_OPERATION_NAME), attrs.get(A.GEN_AI_REQUEST_MODEL)
        )
    return opts.tracer.start_span(name, context=ctx, kind=SpanKind.CLIENT, attributes=attrs)


def _is_open_generate(span: Any) -> bool:
    attrs = getattr(span, "attributes", None)
    return (  # by its phase, not its name (which follows the semconv opt-in)
        span.is_recording() and attrs is not None and attrs.get(A.PHASE) == A.PHASE_LLM
    )


def _begin(
    engine: Any,
    args: tuple,
    kwargs: dict,
    shape: CallShape,
    traj: Trajectory | None,
    parent: otel_context.Context,
    opts: Options,
) -> tuple[Generation, Usage, tuple, dict, bool]:
    """Start the span (or reuse the enclosing generate span: ``owned`` False) and put
    its traceparent into the call's ``trace_headers``."""
    check_provider(traj.tracer if traj is not None else opts.tracer)
    caller_headers = shape.get("trace_headers", args, kwargs)
    sampling_params = shape.get("sampling_params", args, kwargs)
    request_id = shape.get("request_id", args, kwargs)
    attrs = request_attributes(engine, sampling_params, request_id, opts.model)
    outer = trace.get_current_span(parent)
    owned = traj is None or not _is_open_generate(outer)
    if owned:
        span = _start_span(traj, parent, caller_headers, attrs, opts)
    else:
        # Already inside a generate phase (the user's traj.generate(), or the SkyRL
        # instrumentor around its client): that span is the call; no second turn.
        span = outer
        span.set_attributes(attrs)
    n = getattr(sampling_params, "n", 1)
    n = n if isinstance(n, int) else 1
    usage = Usage(output_kind(sampling_params) == "DELTA", _capture_content(), n, request_id)
    if engine_traces(engine) is False:
        hint_engine_not_tracing()
    elif shape.accepts("trace_headers"):
        merged = traceparent(caller_headers, trace.set_span_in_context(span))
        args, kwargs = shape.put("trace_headers", merged, args, kwargs)
    return Generation(span), usage, args, kwargs, owned


async def _stream(
    call: Callable[..., Any],
    engine: Any,
    args: tuple,
    kwargs: dict,
    shape: CallShape,
    traj: Trajectory | None,
    parent: otel_context.Context,
    opts: Options,
) -> Any:
    gen: Generation | None = None
    usage: Usage | None = None
    owned = True
    try:
        gen, usage, args, kwargs, owned = _begin(engine, args, kwargs, shape, traj, parent, opts)
    except Exception as err:  # never break the call: it goes through untraced
        internal_error("vllm generate start", err)
    inner: Any = None
    closed_early = False
    watch: asyncio.Task | None = None
    try:
        if (
            usage is not None
            and usage.n > 1
            and output_kind(shape.get("sampling_params", args, kwargs)) == "FINAL_ONLY"
            and hasattr(engine, "output_processor")
        ):
            watch = asyncio.ensure_future(_watch_samples(engine, usage))
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
                    if usage.n > 1 and not usage.samples:  # the request's samples, live
                        usage.adopt(live_sample_stats(engine, usage.request_id))
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
        if watch is not None:
            watch.cancel()
        if gen is not None and usage is not None:
            try:
                usage.record(gen)
                if closed_early:
                    gen.span.set_attribute(A.GENERATE_CLOSED_EARLY, True)
                if owned:
                    gen.end()
            except Exception as err:
                internal_error("vllm generate end", err)


def dispatch(
    call: Callable[..., Any],
    engine: Any,
    args: tuple,
    kwargs: dict,
    shape: CallShape,
    opts: Options,
) -> Any:
    """The engine's own stream, or a traced one: inside a trajectory (or ``standalone``),
    not nested in another traced call, and not while instrumentation is suppressed."""
    if not opts.active or _INSIDE.get() or not is_instrumentation_enabled():
        return call(*args, **kwargs)
    traj = current_trajectory()
    if traj is None and not opts.standalone:
        return call(*args, **kwargs)
    return _stream(call, engine, args, kwargs, shape, traj, otel_context.get_current(), opts)
