"""The inference engine client, traced: ``generate`` is a ``generate`` phase timed as
SkyRL's ``llm`` timer, ``finish_session`` a phase of its own, and the W3C ``traceparent``
of the generate span rides on the HTTP ``_post`` so a vLLM server's spans nest under it.
Methods are wrapped on the client's class, never the instance: SkyRL pickles its clients."""

from __future__ import annotations

import contextvars
import inspect
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from otel_rollout import attributes as A
from otel_rollout.instrumentation import internal_error
from otel_rollout.integrations.skyrl._calls import record_engine_output, request
from otel_rollout.integrations.skyrl._patches import Patches
from otel_rollout.integrations.skyrl._state import STATE

#: The phase of ``inference_engine_client.finish_session``: outside the accounted time
#: (SkyRL's ``e2e_time`` leaves it out) unless ``bands`` maps it to a band.
FINISH_SESSION_PHASE = A.PHASE_FINISH_SESSION

_IN_GENERATE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "otel_rollout_skyrl_in_generate", default=False
)
_W3C = TraceContextTextMapPropagator()  # what vLLM's server reads, whatever else is set


def _add_traceparent(sig: inspect.Signature, a: tuple, kw: dict) -> tuple[tuple, dict]:
    """The call's arguments with the current span's traceparent in ``headers``."""
    if STATE.get() is None:
        return a, kw
    try:
        bound = sig.bind_partial(*a, **kw)
        headers = dict(bound.arguments.get("headers") or {})
        _W3C.inject(headers)
        bound.arguments["headers"] = headers
        return bound.args, bound.kwargs
    except Exception as exc:
        internal_error("skyrl traceparent", exc)
        return a, kw


def post_wrapper(cls: type) -> Any:
    """A wrapt wrapper adding the traceparent to ``cls._post(url, json, headers=None)``."""
    try:
        sig = inspect.signature(cls._post)  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return None
    if "headers" not in sig.parameters:
        return None
    sig = sig.replace(parameters=list(sig.parameters.values())[1:])  # self comes apart

    def traced_post(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        args, kwargs = _add_traceparent(sig, args, kwargs)
        return wrapped(*args, **kwargs)

    return traced_post


async def _traced_generate(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    state = STATE.get()
    if state is None or _IN_GENERATE.get():
        return await wrapped(*args, **kwargs)
    traj = state.traj
    # Timed as SkyRL's llm timer: from before our own work until the engine's answer is
    # back, the span's processing after that (see State.end_later).
    start = traj._clock()
    token = _IN_GENERATE.set(True)
    try:
        gen = traj.generate(**request(args, kwargs)).start(start_time=start)
        current = otel_context.attach(trace.set_span_in_context(gen.span))
        try:
            output = await wrapped(*args, **kwargs)
        except BaseException as exc:
            end = traj._clock()
            gen.record_error(exc)
            state.end_later(gen, end)
            raise
        finally:
            otel_context.detach(current)
        record_engine_output(gen, output)
        state.end_later(gen, traj._clock())
        return output
    finally:
        _IN_GENERATE.reset(token)


async def _traced_finish_session(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    state = STATE.get()
    if state is None:
        return await wrapped(*args, **kwargs)
    # After SkyRL's e2e_time is taken: a phase of its own, so it is visible.
    with state.traj.phase(FINISH_SESSION_PHASE):
        return await wrapped(*args, **kwargs)


def wrap_client(patches: Patches, client: Any) -> None:
    """Trace ``generate`` and ``finish_session`` of the client's class, and add the
    traceparent to the HTTP ``_post`` of its class or of its engines' classes."""
    if client is None:
        return
    try:
        cls = type(client)
        patches.wrap(cls, "generate", _traced_generate)
        patches.wrap(cls, "finish_session", _traced_finish_session)
        for engine in getattr(client, "engines", None) or [client]:
            wrapper = post_wrapper(type(engine))
            if wrapper is not None:
                patches.wrap(type(engine), "_post", wrapper)
    except Exception as exc:
        internal_error("skyrl client wrap", exc)
