"""The tool calls of a round (docs/verl.md): each ``ToolAgentLoop._call_tool`` is an
``execute_tool`` span inside the round's ``env`` phase, current while the tool runs; a
sync function tool's wait for a thread (``asyncio.to_thread``) an ``env_queue`` inside."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from typing import Any

from opentelemetry import trace

from otel_rollout.instrumentation import current_span, internal_error
from otel_rollout.integrations.verl._calls import plain
from otel_rollout.integrations.verl._state import STATE, WAIT_CAUSE

#: The call span of the ``_call_tool`` running in this task.
_CALL: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_rollout_verl_call", default=None)


def _tool_call(args: tuple, kwargs: dict) -> dict[str, Any]:
    """``env_step`` keywords of ``_call_tool(tool_call, tools_kwargs, agent_data)``."""
    call = args[0] if args else kwargs.get("tool_call")
    name, call_id = getattr(call, "name", None), getattr(call, "tool_call_id", None)
    out: dict[str, Any] = {"tool": name} if isinstance(name, str) else {}
    if call_id is not None:
        out["tool_call_id"] = str(call_id)
    return out


async def traced_call_tool(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    state = STATE.get()
    if state is None or _CALL.get() is not None:
        return await wrapped(*args, **kwargs)
    try:
        rnd = state.round
        parent = trace.set_span_in_context(rnd.begin().span) if rnd is not None else None
        call = state.traj.env_step(**_tool_call(args, kwargs)).start(context=parent)
    except Exception as exc:
        internal_error("verl tool call start", exc)
        return await wrapped(*args, **kwargs)
    var = _CALL.set(call)
    try:
        with current_span(call.span):
            result = await wrapped(*args, **kwargs)
        if isinstance(result, tuple) and len(result) >= 2:  # (ToolResponse, reward, extra)
            with contextlib.suppress(Exception):
                if result[1] is not None:
                    call.set_reward(plain(result[1]))
        return result
    except BaseException as exc:
        call.record_error(exc)
        raise
    finally:
        _CALL.reset(var)
        call.end()


class AsyncioProxy:
    """Stands in for ``asyncio`` in verl's ``function_tool`` module: ``to_thread`` from a
    traced tool call times the wait for a thread as an ``env_queue`` span."""

    def __init__(self, real: Any = asyncio) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    async def to_thread(self, func: Any, /, *args: Any, **kwargs: Any) -> Any:
        state, call = STATE.get(), _CALL.get()
        if state is None or call is None:
            return await self._real.to_thread(func, *args, **kwargs)
        traj = state.traj
        t0 = traj._clock()
        parent = trace.set_span_in_context(call.span)

        def run() -> Any:
            try:
                t1 = traj._clock()
                wait = traj.env_queue(**{WAIT_CAUSE: "pool"})
                wait.start(context=parent, start_time=t0).end(t1)
            except Exception as exc:
                internal_error("verl tool pool wait", exc)
            return func(*args, **kwargs)

        return await self._real.to_thread(run)
