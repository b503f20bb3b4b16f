"""Shared by the verl tests and benchmark: a tiny model directory built here (a byte-level
chat tokenizer and a ``config.json`` with ``architectures``; no download), verl's own
hydra ``ppo_trainer`` config composed for it, a stand-in server replica with a known
latency per generate, a function tool with a known latency, and a batch of prompts
asking for 1 to 10 turns.

The stand-in replica answers as verl's vLLM server does (``generate(prompt_ids,
sampling_params, request_id, ...) -> TokenOutput``): hermes ``<tool_call>``s while the
conversation has fewer assistant turns than its prompt asks for, then a final answer.
:class:`LocalHandle` makes a plain object look like a Ray actor handle
(``handle.method.remote(...)`` is awaitable), for runs without Ray.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import textwrap
from pathlib import Path
from typing import Any

from _skyrl import tiny_tokenizer

TOOL_NAME = "wait_tool"
FINAL_ANSWER = "#### 42"
#: Called (with no argument) each time the tool has waited: a test's manual clock.
TOOL_HOOKS: list[Any] = []


def tool_ran() -> None:
    for hook in TOOL_HOOKS:
        hook()


def build_model_dir(root: Path) -> Path:
    """A model directory verl's ``HFModelConfig`` accepts: tokenizer and config.json."""
    path = root / "tiny-model"
    path.mkdir(parents=True, exist_ok=True)
    tiny_tokenizer().save_pretrained(str(path))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
        "vocab_size": 512,
        "max_position_embeddings": 8192,
    }
    (path / "config.json").write_text(json.dumps(config))
    return path


def write_tool(root: Path, tool_s: float) -> Path:
    """A function-tool file for ``multi_turn.function_tool_path``: a sync tool that
    sleeps ``tool_s`` (verl runs it with ``asyncio.to_thread``)."""
    path = root / "tools.py"
    path.write_text(
        textwrap.dedent(
            f'''
            import time

            import _verl
            from verl.tools.function_tool import function_tool


            @function_tool
            def {TOOL_NAME}(seconds: float) -> str:
                """Wait, then say so.

                Args:
                    seconds: ignored; the tool always takes its fixed latency.
                """
                time.sleep({tool_s!r})
                _verl.tool_ran()
                return "waited"
            '''
        )
    )
    return path


def ppo_config(model_dir: Path, tool_path: Path, *, num_workers: int = 1, extra=()) -> Any:
    """verl's own ``ppo_trainer`` config, composed by hydra, for the tiny model and tool."""
    import verl.trainer.config as cfg_pkg
    from hydra import compose, initialize_config_dir

    config_dir = os.path.dirname(os.path.abspath(cfg_pkg.__file__))
    overrides = [
        f"actor_rollout_ref.model.path={model_dir}",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.rollout.prompt_length=1024",
        "actor_rollout_ref.rollout.response_length=8192",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        "actor_rollout_ref.rollout.multi_turn.format=hermes",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=20",
        "actor_rollout_ref.rollout.multi_turn.max_user_turns=20",
        f"actor_rollout_ref.rollout.multi_turn.function_tool_path={tool_path}",
        "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
        f"actor_rollout_ref.rollout.agent.num_workers={num_workers}",
        *extra,
    ]
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


class StandInServer:
    """A server replica: each ``generate`` sleeps ``generate_s``, then answers."""

    def __init__(self, model_dir: str, generate_s: float, on_generate: Any = None) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.generate_s = generate_s
        self.on_generate = on_generate  # called once a generate has waited
        self.calls = 0

    async def generate(
        self, prompt_ids, sampling_params, request_id, image_data=None, video_data=None, **kw
    ):
        from verl.workers.rollout.replica import TokenOutput

        self.calls += 1
        await asyncio.sleep(self.generate_s)
        if self.on_generate is not None:
            self.on_generate()
        text = self.tokenizer.decode(prompt_ids)
        wanted = int(re.search(r"turns=(\d+)", text).group(1))
        parallel = re.search(r"parallel=(\d+)", text)
        calls = int(parallel.group(1)) if parallel else 1
        rounds = text.count("<|im_start|>assistant") - 1  # the generation prompt is one
        if rounds + 1 < wanted:
            call = json.dumps({"name": TOOL_NAME, "arguments": {"seconds": 0}})
            reply = "".join(f"<tool_call>{call}</tool_call>" for _ in range(calls))
        else:
            reply = FINAL_ANSWER
        ids = [*self.tokenizer.encode(reply, add_special_tokens=False)]
        ids.append(self.tokenizer.eos_token_id)
        return TokenOutput(token_ids=ids, stop_reason="completed", num_preempted=0)


class _Method:
    __slots__ = ("_fn",)

    def __init__(self, fn: Any) -> None:
        self._fn = fn

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        result = self._fn(*args, **kwargs)
        if asyncio.iscoroutine(result):
            return asyncio.ensure_future(result)
        future = asyncio.get_running_loop().create_future()
        future.set_result(result)
        return future


class LocalHandle:
    """A plain object seen as a Ray actor handle: ``handle.m.remote(...)`` awaitable."""

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    def __getattr__(self, name: str) -> Any:
        return _Method(getattr(self._obj, name))


def local_client(config: Any, model_dir: Path, generate_s: float, on_generate: Any = None) -> Any:
    """verl's ``LLMServerClient`` and ``GlobalRequestLoadBalancer``, in this process,
    over one stand-in replica."""
    from verl.workers.rollout.llm_server import LLMServerClient
    from verl.workers.rollout.router import GlobalRequestLoadBalancer

    server = LocalHandle(StandInServer(str(model_dir), generate_s, on_generate))
    balancer = LocalHandle(GlobalRequestLoadBalancer(servers={"replica-0": server}))
    return LLMServerClient(config, load_balancer_handle=balancer)


def prompts(turns: list[int], *, step: int = 1, parallel: int = 1) -> Any:
    """A ``DataProto`` of one prompt per entry, each asking for that many turns (and
    ``parallel`` tool calls in each reply but the last)."""
    import numpy as np
    from verl.protocol import DataProto

    n = len(turns)
    raw = np.empty(n, dtype=object)
    raw[:] = [[{"role": "user", "content": f"turns={t} parallel={parallel}"}] for t in turns]
    data = DataProto.from_dict(
        non_tensors={
            "raw_prompt": raw,
            "index": np.arange(n),
            "data_source": np.array(["timed_tools"] * n, dtype=object),
            "agent_name": np.array(["tool_agent"] * n, dtype=object),
        },
        meta_info={"global_steps": step},
    )
    return data
