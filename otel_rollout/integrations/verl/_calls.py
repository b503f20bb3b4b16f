"""What is read from verl's calls: a sample's trajectory attributes from
``_run_agent_loop``'s arguments, the policy model from the worker, a ``generate``
request (input tokens, sampling parameters) and its ``TokenOutput`` (output tokens,
why it stopped, preemptions), and what a sample's output carries (reward, turns)."""

from __future__ import annotations

import contextlib
from typing import Any

from otel_rollout.instrumentation import internal_error

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


def trajectory_kwargs(args: tuple, kwargs: dict) -> dict[str, Any]:
    """``RolloutTracer.trajectory`` keywords for ``_run_agent_loop(sampling_params,
    trajectory, *, agent_name, trace, **sample)``: the dataset index and rollout number
    as ids, ``data_source`` as the env class (else the agent name), ``uid`` as group."""
    info = args[1] if len(args) > 1 else kwargs.get("trajectory")
    info = info if isinstance(info, dict) else {}
    out: dict[str, Any] = {}
    attrs: dict[str, Any] = {}
    agent = kwargs.get("agent_name")
    if agent is not None:
        out["agent"] = str(plain(agent))
    source = kwargs.get("data_source")
    env = plain(source) if source is not None else plain(agent)
    if env is not None:
        out["env"] = str(env)
    rollout_n = plain(info.get("rollout_n"))
    sample_index = plain(info.get("sample_index"))
    if "index" in kwargs and sample_index is not None:  # a dataset index: a stable id
        out["instance_id"] = str(sample_index)
        if isinstance(rollout_n, int):
            out["repetition_id"] = rollout_n
    uid = kwargs.get("uid")
    if uid is not None:
        out["group_id"] = str(plain(uid))
    for key, value in (
        (STEP_ATTR, plain(info.get("step"))),
        (SAMPLE_INDEX_ATTR, sample_index),
        (ROLLOUT_N_ATTR, rollout_n),
        (VALIDATE_ATTR, plain(info.get("validate"))),
    ):
        if isinstance(value, bool | int | float | str):
            attrs[key] = value
    out["attributes"] = attrs
    return out


def model_of(worker: Any) -> str | None:
    """The policy model's path (``actor_rollout_ref.model.path``)."""
    for cfg in (getattr(worker, "model_config", None),):
        path = getattr(cfg, "path", None)
        if isinstance(path, str) and path:
            return path
    with contextlib.suppress(Exception):
        path = worker.config.actor_rollout_ref.model.path
        if isinstance(path, str) and path:
            return path
    return None


#: verl's sampling-parameter keys and the ``generate()`` keywords for them.
_SAMPLING_KEYS = (
    ("max_tokens", "max_tokens"), ("max_new_tokens", "max_tokens"),
    ("temperature", "temperature"), ("top_p", "top_p"), ("top_k", "top_k"), ("seed", "seed"),
)  # fmt: skip


def request(kwargs: dict) -> dict[str, Any]:
    """GenAI request attributes of ``LLMServerClient.generate(request_id, *, prompt_ids,
    sampling_params, ...)``."""
    out: dict[str, Any] = {}
    ids = kwargs.get("prompt_ids")
    with contextlib.suppress(TypeError):
        if ids is not None:
            out["input_tokens"] = len(ids)
    params = kwargs.get("sampling_params")
    if isinstance(params, dict):
        for key, name in _SAMPLING_KEYS:
            value = params.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out.setdefault(name, value)
    return out


def record_output(gen: Any, output: Any) -> None:
    """Output tokens, stop reason and preemptions of a ``TokenOutput``."""
    try:
        ids = getattr(output, "token_ids", None)
        reason = getattr(output, "stop_reason", None)
        gen.record(
            output_tokens=len(ids) if ids is not None else None,
            finish_reasons=[str(reason)] if reason else None,
        )
        preempted = getattr(output, "num_preempted", None)
        if isinstance(preempted, int):
            gen.set_attribute(PREEMPTED_ATTR, preempted)
        extra = getattr(output, "extra_fields", None)
        cached = extra.get("num_cached_tokens") if isinstance(extra, dict) else None
        if isinstance(cached, int):
            gen.record(cache_read_input_tokens=cached)
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


def tool_call(args: tuple, kwargs: dict) -> dict[str, Any]:
    """``env_step`` keywords of ``_call_tool(tool_call, tools_kwargs, agent_data)``."""
    call = args[0] if args else kwargs.get("tool_call")
    out: dict[str, Any] = {}
    name = getattr(call, "name", None)
    if isinstance(name, str):
        out["tool"] = name
    call_id = getattr(call, "tool_call_id", None)
    if call_id is not None:
        out["tool_call_id"] = str(call_id)
    return out


def record_tool_result(phase: Any, result: Any) -> None:
    """A ``_call_tool`` result ``(ToolResponse, reward, extra)``: the tool's reward."""
    try:
        if isinstance(result, tuple) and len(result) >= 2 and result[1] is not None:
            phase.set_reward(plain(result[1]))
    except Exception as exc:
        internal_error("verl tool result", exc)
