"""What is read from SkyRL's calls: a trajectory's attributes from ``agent_loop``'s
arguments, the policy model from the generator, and a ``generate`` call's request
(input tokens, sampling parameters) and output (output tokens, finish reasons)."""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

from otel_rollout import attributes as A
from otel_rollout.instrumentation import internal_error


def trajectory_kwargs(args: tuple, kwargs: dict, sig: inspect.Signature | None) -> dict:
    bound: dict[str, Any] = dict(kwargs)
    if sig is not None:
        with contextlib.suppress(TypeError):
            bound = dict(sig.bind_partial(None, *args, **kwargs).arguments)
    out: dict[str, Any] = {}
    env_class = bound.get("env_class")
    if env_class is not None:
        out["env"] = str(env_class)
    tid = bound.get("trajectory_id")
    if tid is not None:
        inst = getattr(tid, "instance_id", None)
        rep = getattr(tid, "repetition_id", None)
        if inst is not None:
            out["instance_id"] = inst
            if rep is not None:
                out["repetition_id"] = int(rep)
        else:
            out["trajectory_id"] = str(tid)
    return out


def model_of(generator: Any) -> str | None:
    for name in ("policy_model_name", "model_name"):
        value = getattr(generator, name, None)
        if isinstance(value, str):
            return value
    cfg = getattr(generator, "generator_cfg", None)
    for name in ("model_name", "policy_model_name"):
        value = getattr(cfg, name, None) if cfg is not None else None
        if isinstance(value, str):
            return value
    return None


def record_engine_output(gen: Any, output: Any) -> None:
    try:
        if not isinstance(output, dict):
            return
        ids = output.get("response_ids")
        out_tokens = None
        if ids:
            first = ids[0]
            out_tokens = len(first) if isinstance(first, list | tuple) else len(ids)
        reasons = output.get("stop_reasons")
        gen.record(
            output_tokens=out_tokens,
            finish_reasons=[str(r) for r in reasons] if reasons else None,
        )
    except Exception as exc:  # SkyRL's output shape changed: report once, trace on
        internal_error("skyrl generate output", exc)


def _input_tokens(args: tuple, kwargs: dict) -> int | None:
    engine_input = args[0] if args else kwargs.get("input_batch", kwargs.get("engine_input"))
    if isinstance(engine_input, dict):
        ids = engine_input.get("prompt_token_ids")
        if ids:
            first = ids[0]
            return len(first) if isinstance(first, list | tuple) else len(ids)
    return None


#: SkyRL's sampling-parameter keys (backend dicts) and the ``generate()`` keywords for them.
_SAMPLING_KEYS = (
    ("max_tokens", "max_tokens"), ("max_generate_length", "max_tokens"),
    ("max_new_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p"),
    ("top_k", "top_k"), ("seed", "seed"), ("n", "n"),
)  # fmt: skip


def request(args: tuple, kwargs: dict) -> dict[str, Any]:
    """GenAI request keywords of a generate call: token-in/token-out is a
    ``text_completion``; the sampling parameters SkyRL passes."""
    engine_input = args[0] if args else kwargs.get("input_batch", kwargs.get("engine_input"))
    out: dict[str, Any] = {"input_tokens": _input_tokens(args, kwargs)}
    if not isinstance(engine_input, dict):
        return out
    if engine_input.get("prompt_token_ids"):
        out["operation"] = A.OP_TEXT_COMPLETION
    params = engine_input.get("sampling_params")
    if isinstance(params, dict):
        for key, name in _SAMPLING_KEYS:
            value = params.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out.setdefault(name, value)
    return out
