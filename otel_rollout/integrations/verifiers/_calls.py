"""Model calls through verifiers' interception server, traced.

The upstream call of the eval and train clients (``relay``, ``get_response``) opens a
``generate`` span under the rollout's root, current while the call runs, and puts its
W3C ``traceparent`` on the headers the eval client forwards upstream, so a vLLM server's
``llm_request`` span nests under it. ``InterceptionServer.record_call`` (verifiers'
one record per exchange) ends it at the end of verifiers' ``ModelCall.time`` with the
call's token usage, finish reason and error; a call made by a client not wrapped here
gets its span there, from ``ModelCall.time`` alone."""

from __future__ import annotations

import contextvars
import inspect
from time import time_ns
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from otel_rollout import Generation
from otel_rollout import attributes as A
from otel_rollout.instrumentation import internal_error
from otel_rollout.integrations.verifiers._state import Rollouts, RolloutState, to_ns

_W3C = TraceContextTextMapPropagator()  # what vLLM's server reads, whatever else is set
#: The generate span the upstream call opened, for ``record_call`` in the same task.
_OPEN: contextvars.ContextVar[tuple[RolloutState, Generation] | None] = contextvars.ContextVar(
    "otel_rollout_verifiers_generate", default=None
)
_SAMPLING = ("max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed", "n")


def _request(body: Any) -> dict[str, Any]:
    """GenAI request keywords from the native body that goes upstream."""
    out: dict[str, Any] = {}
    if not isinstance(body, dict):
        return out
    model = body.get("model")
    if isinstance(model, str):
        out["model"] = model
    for key in _SAMPLING:
        value = body.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out.setdefault("max_tokens" if key == "max_completion_tokens" else key, value)
    return out


def _with_traceparent(headers: Any) -> dict[str, str]:
    """The headers with the current span's traceparent (any the harness sent replaced)."""
    out = {
        k: v
        for k, v in dict(headers or {}).items()
        if str(k).lower() not in ("traceparent", "tracestate")
    }
    _W3C.inject(out)
    return out


def client_wrapper(method: Any, rollouts: Rollouts) -> Any:
    """A wrapt wrapper for a client's ``relay``/``get_response(dialect, body, ...,
    session_id=, headers=)``: the call in a ``generate`` span."""
    try:
        sig: inspect.Signature | None = inspect.signature(method)
        params = list(sig.parameters.values())[1:]  # self comes apart
        sig = sig.replace(parameters=params)
    except (TypeError, ValueError):
        sig = None

    async def traced(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        start = time_ns()  # first: verifiers' ModelCall.time started just before the call
        bound = None
        if sig is not None:
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:
                bound = None
        given = bound.arguments if bound is not None else kwargs
        state = rollouts.lookup(given.get("session_id"))
        if state is None or state.done:
            return await wrapped(*args, **kwargs)
        try:
            gen = state.traj.generate(**_request(given.get("body"))).start(start_time=start)
        except Exception as exc:
            internal_error("verifiers generate start", exc)
            return await wrapped(*args, **kwargs)
        state.inflight.append(gen)
        _OPEN.set((state, gen))
        current = otel_context.attach(trace.set_span_in_context(gen.span))
        try:
            if bound is not None and "headers" in (sig.parameters if sig else {}):
                try:
                    bound.arguments["headers"] = _with_traceparent(bound.arguments.get("headers"))
                    args, kwargs = bound.args, bound.kwargs
                except Exception as exc:
                    internal_error("verifiers traceparent", exc)
            return await wrapped(*args, **kwargs)
        except BaseException as exc:
            gen.record_error(exc)
            raise
        finally:
            otel_context.detach(current)

    return traced


def _record(gen: Generation, call: Any) -> None:
    """A ``ModelCall``'s usage, finish reason and error on its generate span."""
    usage = getattr(call, "usage", None)
    reason = getattr(call, "finish_reason", None)
    gen.record(
        input_tokens=getattr(usage, "input_tokens", None) if usage is not None else None,
        output_tokens=getattr(usage, "completion_tokens", None) if usage is not None else None,
        cache_read_input_tokens=getattr(usage, "cached_input_tokens", None) if usage else None,
        reasoning_output_tokens=getattr(usage, "reasoning_tokens", None) if usage else None,
        finish_reasons=[str(reason)] if reason else None,
    )
    error = getattr(call, "error", None)
    if error is not None:  # verifiers' record of it: its type, not its message
        gen.set_attribute(A.ERROR_TYPE, str(getattr(error, "type", "Error")))
        gen.span.set_status(StatusCode.ERROR)


def _forget(state: RolloutState, gen: Generation) -> None:
    if gen in state.inflight:
        state.inflight.remove(gen)


def record_call_wrapper(rollouts: Rollouts) -> Any:
    """A wrapt wrapper for ``InterceptionServer.record_call(session, ...)``: end the
    call's generate span where verifiers' ``ModelCall.time`` ends (or make it from it)."""

    def traced(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        return _recorded(rollouts, wrapped, args, kwargs)

    return traced


def _recorded(rollouts: Rollouts, wrapped: Any, args: tuple, kwargs: dict) -> Any:
    session = args[0] if args else kwargs.get("session")
    trace_ = getattr(session, "trace", None)
    calls = getattr(trace_, "calls", None)
    before = len(calls) if isinstance(calls, list) else None
    opened = _OPEN.get()
    if opened is not None:
        _OPEN.set(None)
    result = wrapped(*args, **kwargs)
    try:
        state = rollouts.lookup(getattr(trace_, "id", None))
        gen = opened[1] if opened is not None and opened[0] is state else None
        call = calls[-1] if before is not None and len(calls) > before else None
        if state is None or call is None:  # not ours, or a straggler verifiers dropped
            if opened is not None:
                _forget(*opened)
                opened[1].end()
            return result
        span = getattr(call, "time", None)
        if gen is None:
            body = args[2] if len(args) > 2 else kwargs.get("request")
            gen = state.traj.generate(**_request(body)).start(start_time=to_ns(span.start))
        else:
            _forget(state, gen)
        _record(gen, call)
        gen.end(to_ns(span.end))
    except Exception as exc:
        internal_error("verifiers record_call", exc)
    return result
