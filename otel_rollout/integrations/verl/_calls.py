"""What is read from verl's calls, and the model calls (docs/verl.md):
``LLMServerClient.generate`` records into verl's ``generate_sequences`` phase (or a phase
of its own), ``_acquire_server`` is a span inside, the engine's request id on it."""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any

from otel_rollout import attributes as A
from otel_rollout.instrumentation import internal_error, model_call, sampling_keywords
from otel_rollout.integrations.verl._state import STATE

#: verl's own names for a sample, on its trajectory root.
STEP_ATTR, SAMPLE_INDEX_ATTR, ROLLOUT_N_ATTR = "verl.step", "verl.sample_index", "verl.rollout_n"
VALIDATE_ATTR, NUM_TURNS_ATTR = "verl.validate", "verl.num_turns"
#: On a ``generate`` span: the server replica the load balancer chose, and preemptions.
SERVER_ATTR, PREEMPTED_ATTR = "verl.server.id", "verl.num_preempted"


def plain(value: Any) -> Any:
    """A numpy scalar or 0-d array (what verl's ``non_tensor_batch`` holds) as Python."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", 0) == 0:
        with contextlib.suppress(Exception):
            return item()
    return value


def trajectory_kwargs(info: dict[str, Any], sample: dict[str, Any]) -> dict[str, Any]:
    """``RolloutTracer.trajectory`` keywords of a sample (``info``: ``rollout_trace_attr``'s
    keywords; ``sample``: its columns and ``agent_name``), as docs/verl.md lists them."""
    out: dict[str, Any] = {}
    agent = sample.get("agent_name")
    if agent is not None:
        out["agent"] = str(plain(agent))
    env = plain(sample["data_source"]) if sample.get("data_source") is not None else plain(agent)
    if env is not None:
        out["env"] = str(env)
    rollout_n, sample_index = plain(info.get("rollout_n")), plain(info.get("sample_index"))
    if "index" in sample and sample_index is not None:  # a dataset index: a stable id
        out["instance_id"] = str(sample_index)
        if isinstance(rollout_n, int):
            out["repetition_id"] = rollout_n
    if sample.get("uid") is not None:
        out["group_id"] = str(plain(sample["uid"]))
    attrs = {
        STEP_ATTR: plain(info.get("step")),
        SAMPLE_INDEX_ATTR: sample_index,
        ROLLOUT_N_ATTR: rollout_n,
        VALIDATE_ATTR: plain(info.get("validate")),
    }
    out["attributes"] = {k: v for k, v in attrs.items() if isinstance(v, bool | int | float | str)}
    return out


def model_of(worker: Any) -> str | None:
    """The policy model's path (``actor_rollout_ref.model.path``)."""
    path = getattr(getattr(worker, "model_config", None), "path", None)
    if not (isinstance(path, str) and path):
        with contextlib.suppress(Exception):
            path = worker.config.actor_rollout_ref.model.path
    return path if isinstance(path, str) and path else None


def request(kwargs: dict) -> dict[str, Any]:
    """GenAI request keywords of ``LLMServerClient.generate(request_id, *, prompt_ids,
    sampling_params, ...)``."""
    out: dict[str, Any] = dict(sampling_keywords(kwargs.get("sampling_params")))
    with contextlib.suppress(TypeError):
        if kwargs.get("prompt_ids") is not None:
            out["input_tokens"] = len(kwargs["prompt_ids"])
    return out


def record_output(gen: Any, output: Any) -> None:
    """Output tokens, stop reason, preemptions and cached tokens of a ``TokenOutput``."""
    try:
        ids = getattr(output, "token_ids", None)
        reason = getattr(output, "stop_reason", None)
        extra = getattr(output, "extra_fields", None)
        cached = extra.get("num_cached_tokens") if isinstance(extra, dict) else None
        gen.record(
            output_tokens=len(ids) if ids is not None else None,
            finish_reasons=[str(reason)] if reason else None,
            cache_read_input_tokens=cached if isinstance(cached, int) else None,
        )
        preempted = getattr(output, "num_preempted", None)
        if isinstance(preempted, int):
            gen.set_attribute(PREEMPTED_ATTR, preempted)
    except Exception as exc:  # verl's output shape changed: report once, trace on
        internal_error("verl generate output", exc)


def record_sample(traj: Any, output: Any) -> None:
    """What a sample's output says about the whole trajectory: reward, turns."""
    try:
        score = getattr(output, "reward_score", None)
        if score is not None:
            traj.set_reward(plain(score))
        turns = getattr(output, "num_turns", None)
        if isinstance(turns, int):
            traj.set_attribute(NUM_TURNS_ATTR, turns)
    except Exception as exc:
        internal_error("verl sample output", exc)


ACQUIRE_SPAN = "acquire_server"

#: The generate phase of the call in flight in this task (ours or verl's timer's).
_GEN: contextvars.ContextVar[Any] = contextvars.ContextVar("otel_rollout_verl_gen", default=None)


async def traced_generate(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    state = STATE.get()
    if state is None or _GEN.get() is not None:
        return await wrapped(*args, **kwargs)
    req = request(kwargs)
    with model_call(state.traj, state.gen, operation=A.OP_TEXT_COMPLETION, **req) as gen:
        token = _GEN.set(gen)
        try:
            output = await wrapped(*args, **kwargs)
        finally:
            _GEN.reset(token)
        if gen is not None:
            record_output(gen, output)
        return output


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
