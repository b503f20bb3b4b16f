"""Model calls through verifiers' interception server (docs/verifiers.md): the eval and
train clients' upstream call opens a ``generate`` span, current while it runs, whose
``traceparent`` the eval client forwards; ``InterceptionServer.record_call`` ends it at
the end of verifiers' ``ModelCall.time`` (or makes it from that, for another client)."""

from __future__ import annotations

import contextlib
import contextvars
import inspect
from time import time_ns
from typing import Any

from opentelemetry.trace import StatusCode

from otel_rollout import Generation
from otel_rollout import attributes as A
from otel_rollout.instrumentation import (
    current_span,
    internal_error,
    sampling_keywords,
    traceparent,
)
from otel_rollout.integrations.verifiers._state import Rollouts, RolloutState, to_ns

#: The generate span the upstream call opened, for ``record_call`` in the same task.
_OPEN: contextvars.ContextVar[tuple[RolloutState, Generation] | None] = contextvars.ContextVar(
    "otel_rollout_verifiers_generate", default=None
)


def _request(body: Any) -> dict[str, Any]:
    """GenAI request keywords from the native body that goes upstream."""
    out: dict[str, Any] = {}
    if not isinstance(body, dict):
        return out
    model = body.get("model")
    if isinstance(model, str):
        out["model"] = model
    for name, value in sampling_keywords(body).items():
        out.setdefault(name, value)
    return out


def client_wrapper(method: Any, rollouts: Rollouts) -> Any:
    """A wrapt wrapper for a client's ``relay``/``get_response(dialect, body, ...,
    session_id=, headers=)``: the call in a ``generate`` span."""
    sig: inspect.Signature | None
    try:
        full = inspect.signature(method)
        params = list(full.parameters.values())[1:]  # self comes apart
        sig = full.replace(parameters=params)
    except (TypeError, ValueError):
        sig = None

    async def traced(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        start = time_ns()  # first: verifiers' ModelCall.time started just before the call
        bound = None
        with contextlib.suppress(TypeError):
            bound = sig.bind(*args, **kwargs) if sig is not None else None
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
        try:
            with current_span(gen.span):
                if bound is not None and "headers" in bound.signature.parameters:
                    try:
                        bound.arguments["headers"] = traceparent(bound.arguments.get("headers"))
                        args, kwargs = bound.args, bound.kwargs
                    except Exception as exc:
                        internal_error("verifiers traceparent", exc)
                return await wrapped(*args, **kwargs)
        except BaseException as exc:
            gen.record_error(exc)
            raise

    return traced


def _record(gen: Generation, call: Any) -> None:
    """A ``ModelCall``'s usage, finish reason and error on its generate span."""
    usage = getattr(call, "usage", None)
    reason = getattr(call, "finish_reason", None)
    gen.record(
        input_tokens=getattr(usage, "input_tokens", None),
        output_tokens=getattr(usage, "completion_tokens", None),
        cache_read_input_tokens=getattr(usage, "cached_input_tokens", None),
        reasoning_output_tokens=getattr(usage, "reasoning_tokens", None),
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
        session = args[0] if args else kwargs.get("session")
        trace_ = getattr(session, "trace", None)
        calls = getattr(trace_, "calls", None)
        before = len(calls) if isinstance(calls, list) else None
        opened = _OPEN.get()
        _OPEN.set(None)
        result = wrapped(*args, **kwargs)
        try:
            state = rollouts.lookup(getattr(trace_, "id", None))
            gen = opened[1] if opened is not None and opened[0] is state else None
            # before is set exactly when calls is a list
            call = calls[-1] if isinstance(calls, list) and len(calls) > (before or 0) else None
            if state is None or call is None:  # not ours, or a straggler verifiers dropped
                if opened is not None:
                    _forget(*opened)
                    opened[1].end()
                return result
            span = call.time
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

    return traced
