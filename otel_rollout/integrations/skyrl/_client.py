"""SkyRL's calls (docs/skyrl.md): what is read from them, and the inference engine client,
whose ``generate`` is a ``generate`` phase timed as SkyRL's ``llm`` timer, whose
``finish_session`` a phase of its own, and whose ``_post`` carries the ``traceparent``;
wrapped on the client's class, never the instance (SkyRL pickles its clients)."""

from __future__ import annotations

import contextlib
import contextvars
import inspect
from typing import Any

from otel_rollout import attributes as A
from otel_rollout.instrumentation import (
    Patches,
    current_span,
    internal_error,
    sampling_keywords,
    traceparent,
)
from otel_rollout.integrations.skyrl._env import STATE

#: The phase of ``inference_engine_client.finish_session``: outside the accounted time
#: (SkyRL's ``e2e_time`` leaves it out) unless ``bands`` maps it to a band.
FINISH_SESSION_PHASE = A.PHASE_FINISH_SESSION

_IN_GENERATE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "otel_rollout_skyrl_in_generate", default=False
)


def trajectory_kwargs(args: tuple, kwargs: dict, sig: inspect.Signature | None) -> dict:
    bound: dict[str, Any] = dict(kwargs)
    if sig is not None:
        with contextlib.suppress(TypeError):
            bound = dict(sig.bind_partial(None, *args, **kwargs).arguments)
    out: dict[str, Any] = {}
    if bound.get("env_class") is not None:
        out["env"] = str(bound["env_class"])
    tid = bound.get("trajectory_id")
    if tid is not None:
        inst, rep = getattr(tid, "instance_id", None), getattr(tid, "repetition_id", None)
        if inst is None:
            out["trajectory_id"] = str(tid)
        else:
            out["instance_id"] = inst
            if rep is not None:
                out["repetition_id"] = int(rep)
    return out


def model_of(generator: Any) -> str | None:
    cfg = getattr(generator, "generator_cfg", None)
    for obj, name in ((generator, "policy_model_name"), (generator, "model_name"),
                      (cfg, "model_name"), (cfg, "policy_model_name")):  # fmt: skip
        value = getattr(obj, name, None)
        if isinstance(value, str):
            return value
    return None


def _count(ids: Any) -> int | None:
    """Tokens of a batch of one: the first sequence's length (or the flat list's)."""
    if not ids:
        return None
    return len(ids[0]) if isinstance(ids[0], list | tuple) else len(ids)


def record_engine_output(gen: Any, output: Any) -> None:
    try:
        if isinstance(output, dict):
            reasons = output.get("stop_reasons")
            gen.record(
                output_tokens=_count(output.get("response_ids")),
                finish_reasons=[str(r) for r in reasons] if reasons else None,
            )
    except Exception as exc:  # SkyRL's output shape changed: report once, trace on
        internal_error("skyrl generate output", exc)


def request(args: tuple, kwargs: dict) -> dict[str, Any]:
    """GenAI request keywords of a generate call: token-in/token-out is a
    ``text_completion``; the sampling parameters SkyRL passes."""
    engine_input = args[0] if args else kwargs.get("input_batch", kwargs.get("engine_input"))
    if not isinstance(engine_input, dict):
        return {"input_tokens": None}
    ids = engine_input.get("prompt_token_ids")
    out: dict[str, Any] = dict(sampling_keywords(engine_input.get("sampling_params")))
    out["input_tokens"] = _count(ids)
    if ids:
        out["operation"] = A.OP_TEXT_COMPLETION
    return out


def post_wrapper(cls: type) -> Any:
    """A wrapt wrapper adding the traceparent to ``cls._post(url, json, headers=None)``;
    None when ``_post`` takes no headers."""
    try:
        sig = inspect.signature(cls._post)  # type: ignore[attr-defined]  # SkyRL's, untyped
    except (AttributeError, TypeError, ValueError):
        return None
    if "headers" not in sig.parameters:
        return None
    sig = sig.replace(parameters=list(sig.parameters.values())[1:])  # self comes apart

    def traced_post(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if STATE.get() is not None:
            try:
                bound = sig.bind_partial(*args, **kwargs)
                bound.arguments["headers"] = traceparent(bound.arguments.get("headers"))
                args, kwargs = bound.args, bound.kwargs
            except Exception as exc:
                internal_error("skyrl traceparent", exc)
        return wrapped(*args, **kwargs)

    return traced_post


async def _traced_generate(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    state = STATE.get()
    if state is None or _IN_GENERATE.get():
        return await wrapped(*args, **kwargs)
    traj = state.traj
    # Timed as SkyRL's llm timer: from before our own work until the engine's answer is
    # back; the span's processing after that (State.end_later).
    start = traj._clock()
    token = _IN_GENERATE.set(True)
    try:
        gen = traj.generate(**request(args, kwargs)).start(start_time=start)
        try:
            with current_span(gen.span):
                output = await wrapped(*args, **kwargs)
        except BaseException as exc:
            end = traj._clock()
            gen.record_error(exc)
            state.end_later(gen, end)
            raise
        record_engine_output(gen, output)
        state.end_later(gen, traj._clock())
        return output
    finally:
        _IN_GENERATE.reset(token)


async def _traced_finish_session(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    state = STATE.get()
    if state is None:
        return await wrapped(*args, **kwargs)
    with state.traj.phase(FINISH_SESSION_PHASE):  # after SkyRL's e2e_time is taken
        return await wrapped(*args, **kwargs)


def wrap_client(patches: Patches, client: Any) -> None:
    """Trace ``generate`` and ``finish_session`` as the client resolves them (its class's
    methods, or its own attributes: a mock, a partial), and add the traceparent to the
    HTTP ``_post`` of its class or of its engines' classes."""
    if client is None:
        return
    try:
        patches.wrap_resolved(client, "generate", _traced_generate)
        patches.wrap_resolved(client, "finish_session", _traced_finish_session)
        for engine in getattr(client, "engines", None) or [client]:
            wrapper = post_wrapper(type(engine))
            if wrapper is not None:
                patches.wrap(type(engine), "_post", wrapper)
    except Exception as exc:
        internal_error("skyrl client wrap", exc)
