"""The tool calls of a round: each ``ToolAgentLoop._call_tool`` is an ``execute_tool``
span (``gen_ai.tool.name``, ``gen_ai.tool.call.id``, the tool's reward) inside the
round's ``env`` phase, current while the tool runs so the tool's own spans nest under
it. A sync function tool waits for a thread of the default executor
(``asyncio.to_thread``): that wait is an ``env_queue`` span inside the call's."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from otel_rollout.instrumentation import internal_error
from otel_rollout.integrations.verl._calls import record_tool_result, tool_call
from otel_rollout.integrations.verl._state import STATE, WAIT_CAUSE

#: The call span of the ``_call_tool`` running in this task.
_CALL: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_rollout_verl_call", default=None)


async def traced_call_tool(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    state = STATE.get()
    if state is None or _CALL.get() is not None:
        return await wrapped(*args, **kwargs)
    traj = state.traj
    call = token = var = None
    try:
        rnd = state.round
        parent = trace.set_span_in_context(rnd.begin().span) if rnd is not None else None
        call = traj.env_step(**tool_call(args, kwargs)).start(context=parent)
        token = otel_context.attach(trace.set_span_in_context(call.span))
        var = _CALL.set(call)
    except Exception as exc:
        internal_error("verl tool call start", exc)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        if call is not None:
            call.record_error(exc)
        raise
    else:
        if call is not None:
            record_tool_result(call, result)
        return result
    finally:
        if var is not None:
            _CALL.reset(var)
        if token is not None:
            with contextlib.suppress(Exception):
                otel_context.detach(token)
        if call is not None:
            call.end()


class AsyncioProxy:
    """Stands in for ``asyncio`` in verl's ``function_tool`` module: ``to_thread`` from a
    traced tool call times the wait for a thread as an ``env_queue`` span."""

    def __init__(self, real: Any = asyncio) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    async def to_thread(self, func: Any, /, *args: Any, **kwargs: Any) -> Any:
        state = STATE.get()
        call = _CALL.get()
        if state is None or call is None:
            return await self._real.to_thread(func, *args, **kwargs)
        traj = state.traj
        t0 = traj._clock()
        parent = trace.set_span_in_context(call.span)

        def run() -> Any:
            try:
                t1 = traj._clock()
                traj.env_queue(**{WAIT_CAUSE: "pool"}).start(context=parent, start_time=t0).end(t1)
            except Exception as exc:
                internal_error("verl tool pool wait", exc)
            return func(*args, **kwargs)

        return await self._real.to_thread(functools.partial(run))
