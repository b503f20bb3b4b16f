"""The model calls (docs/areal.md): ``agenerate`` records into AReaL's ``generate`` phase
(or a phase of its own), ``arequest_with_retry`` carries its ``traceparent``; AReaL's
session phases (``generate``, ``reward``, ``toolcall``) open ours around its scope."""

from __future__ import annotations

import contextlib
from typing import Any

from otel_rollout import attributes as A
from otel_rollout.instrumentation import internal_error, model_call, phase_scope, traceparent
from otel_rollout.integrations._trainer_steps import Around
from otel_rollout.integrations.areal._state import GEN, TASK

#: AReaL's own id of the request (``ModelRequest.rid``), on the ``generate`` span.
REQUEST_ID = "areal.request.id"
#: HTTP calls the request took (more than one when a weight update interrupted it).
HTTP_CALLS = "areal.http.calls"

_GCONFIG = (("max_new_tokens", "max_tokens"), ("top_p", "top_p"), ("top_k", "top_k"),
            ("temperature", "temperature"))  # fmt: skip


def request_attributes(req: Any) -> dict[str, Any]:
    """``generate()`` keywords of a ``ModelRequest``: prompt tokens and sampling."""
    out: dict[str, Any] = {}
    ids = getattr(req, "input_ids", None)
    if isinstance(ids, list):
        out["input_tokens"] = len(ids)
    g = getattr(req, "gconfig", None)
    for key, name in _GCONFIG if g is not None else ():
        value = getattr(g, key, None)
        if name == "temperature" and getattr(g, "greedy", False):
            value = 0.0
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = value
    rid = getattr(req, "rid", None)
    if rid is not None:
        out[REQUEST_ID] = str(rid)
    return out


async def traced_agenerate(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    task = TASK.get()
    if task is None:
        return await wrapped(*args, **kwargs)
    try:
        ep = task.episode_here()
        request = request_attributes(args[0] if args else kwargs.get("req"))
    except Exception as exc:
        internal_error("areal generate start", exc)
        return await wrapped(*args, **kwargs)
    open_gen = GEN.get()
    with model_call(ep.traj, open_gen, operation=A.OP_TEXT_COMPLETION, **request) as gen:
        token = GEN.set(gen) if open_gen is None and gen is not None else None
        try:
            resp = await wrapped(*args, **kwargs)
        finally:
            if token is not None:
                with contextlib.suppress(ValueError):
                    GEN.reset(token)
        if gen is not None:
            tokens = getattr(resp, "output_tokens", None)
            reason = getattr(resp, "stop_reason", None)
            gen.record(output_tokens=len(tokens) if isinstance(tokens, list) else None,
                       finish_reasons=[str(reason)] if reason else None)  # fmt: skip
        ep.saw_versions(getattr(resp, "output_versions", None))
        return resp


class _TracedSession:
    """AReaL's aiohttp session, posting with the ``traceparent`` of the current span."""

    __slots__ = ("_headers", "_real")

    def __init__(self, real: Any, headers: dict[str, str]) -> None:
        self._real, self._headers = real, headers

    def post(self, url: Any, **kwargs: Any) -> Any:
        headers = {**(kwargs.pop("headers", None) or {}), **self._headers}
        return self._real.post(url, headers=headers, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


async def traced_request(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``arequest_with_retry(addr, endpoint, payload=None, session=None, ...)`` inside a
    ``generate`` phase: the request carries its traceparent; the response id is read."""
    gen = GEN.get()
    if gen is None:
        return await wrapped(*args, **kwargs)
    try:
        headers = traceparent()
        if kwargs.get("session") is not None:
            kwargs = {**kwargs, "session": _TracedSession(kwargs["session"], headers)}
        elif len(args) > 3 and args[3] is not None:
            args = (*args[:3], _TracedSession(args[3], headers), *args[4:])
        calls = (getattr(gen.span, "attributes", None) or {}).get(HTTP_CALLS, 0)
        gen.set_attribute(HTTP_CALLS, int(calls) + 1)
    except Exception as exc:
        internal_error("areal traceparent", exc)
    result = await wrapped(*args, **kwargs)
    if isinstance(result, dict) and isinstance(result.get("id"), str):
        gen.set_attribute(A.GEN_AI_RESPONSE_ID, result["id"])
    return result


#: The phase of AReaL's ``reward`` session phase.
REWARD_PHASE = "reward"


def _opener(traj: Any, name: str) -> Any:
    if name == "generate":
        return traj.generate(operation=A.OP_TEXT_COMPLETION)
    if name == "toolcall":
        return traj.env_step(tool="toolcall")
    return phase_scope(traj, REWARD_PHASE, REWARD_PHASE)


def traced_session_phase(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``(a)trace_session_phase(phase, ...)``: AReaL's scope inside our phase when an
    episode runs here."""
    inner = wrapped(*args, **kwargs)
    name = args[0] if args else kwargs.get("phase")
    task = TASK.get()
    if task is None or name not in ("generate", "reward", "toolcall"):
        return inner
    try:
        scope = _opener(task.episode_here().traj, name)
    except Exception as exc:
        internal_error("areal session phase", exc)
        return inner

    def begin() -> tuple[Any, Any]:
        handle = scope.__enter__()
        return handle, GEN.set(handle) if name == "generate" else None

    def end(begun: tuple[Any, Any], exc: BaseException | None) -> None:
        if begun[1] is not None:
            with contextlib.suppress(ValueError):
                GEN.reset(begun[1])
        scope.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)

    return Around(inner, begin, end)
