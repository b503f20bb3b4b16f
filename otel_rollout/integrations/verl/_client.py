"""The model calls: ``LLMServerClient.generate`` (one turn: acquire a replica from the
load balancer, ``server.generate.remote(...)``, release) and its ``_acquire_server``.

Inside verl's ``generate_sequences`` timer the ``generate`` phase is already open
(:mod:`~otel_rollout.integrations.verl._timers`): the call adds the request's and the
output's GenAI attributes to it. Called from an agent loop that does not time it, the
call is a ``generate`` phase of its own. The load balancer's ``acquire_server`` round
trip is an ``acquire_server`` span inside (part of ``llm``: verl's timer holds it too),
with the replica chosen; the request id verl gives the engine is the span's
``gen_ai.request.id``, the key vLLM's own ``llm_request`` spans carry.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from otel_rollout import attributes as A
from otel_rollout.instrumentation import internal_error
from otel_rollout.integrations.verl._calls import SERVER_ATTR, record_output, request
from otel_rollout.integrations.verl._state import STATE

ACQUIRE_SPAN = "acquire_server"

#: The generate phase of the call in flight in this task (ours or verl's timer's).
_GEN: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_rollout_verl_gen", default=None)


async def traced_generate(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    state = STATE.get()
    if state is None or _GEN.get() is not None:
        return await wrapped(*args, **kwargs)
    traj = state.traj
    gen = state.gen
    own = gen is None
    token = current = None
    try:
        req = request(kwargs)
        if own:  # not inside verl's timer: a phase of its own
            gen = traj.generate(operation=A.OP_TEXT_COMPLETION, **req).start(
                context=otel_context.get_current()
            )
            current = otel_context.attach(trace.set_span_in_context(gen.span))
        else:
            gen.record(**req)
        token = _GEN.set(gen)
    except Exception as exc:
        internal_error("verl generate start", exc)
    try:
        output = await wrapped(*args, **kwargs)
    except BaseException as exc:
        if own and gen is not None:
            gen.record_error(exc)
        raise
    else:
        if gen is not None:
            record_output(gen, output)
        return output
    finally:
        if token is not None:
            _GEN.reset(token)
        if current is not None:
            with contextlib.suppress(Exception):
                otel_context.detach(current)
        if own and gen is not None:
            gen.end()


async def traced_acquire(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    state = STATE.get()
    if state is None or _GEN.get() is None:
        return await wrapped(*args, **kwargs)
    with state.traj.tracer.start_as_current_span(ACQUIRE_SPAN) as span:
        result = await wrapped(*args, **kwargs)
        with contextlib.suppress(Exception):
            span.set_attribute(SERVER_ATTR, str(result[0]))
        return result


def traced_request_id(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``_vllm_request_id(request_id)``: the id the engine sees, on the generate span."""
    rid = wrapped(*args, **kwargs)
    gen = _GEN.get()
    if gen is not None and isinstance(rid, str):
        gen.set_attribute(A.VLLM_REQUEST_ID, rid)
    return rid
