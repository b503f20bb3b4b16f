"""Shared by the AReaL tests: a stand-in vLLM server (``POST /v1/completions`` with token
ids, as AReaL's ``RemotevLLMEngine`` calls it; ``GET /health``) answering each request
after a known latency, reward functions of known latency (module level: AReaL runs them
in a process pool), and AReaL's own engine and workflows built on them with a byte-level
chat tokenizer made here (no download). Imported only where AReaL is installed.

A prompt's data says what its episode does: ``turns`` (the attempt on which the reward
becomes 1.0: ``MultiTurnWorkflow`` retries until then), ``reward_s`` (the reward
function's latency), ``fail`` (the reward function raises), ``accept`` (what the test's
``should_accept_fn`` answers).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from _skyrl import tiny_tokenizer

ANSWER = "#### 42"

__all__ = [
    "ANSWER", "StandInVLLM", "accept", "engine", "gconfig", "prompts", "reward", "tiny_tokenizer",
    "tool_workflow",
]  # fmt: skip


def reward(prompt: str, completion: str, prompt_ids: Any, completion_ids: Any, **data: Any):
    """1.0 from attempt ``turns`` on (the earlier attempts are in the prompt), after
    sleeping ``reward_s``; raises when ``fail``."""
    time.sleep(float(data.get("reward_s", 0.0)))
    if data.get("fail"):
        raise ValueError("the reward function failed, as the test asked")
    attempt = prompt.count(ANSWER) + 1
    return 1.0 if attempt >= int(data.get("turns", 1)) else 0.0


def accept(trajectory: dict[str, Any]) -> bool:
    """The test's ``should_accept_fn``: rejects episodes whose reward is below 0.5."""
    return float(trajectory["rewards"].flatten()[0]) >= 0.5


def prompts(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One prompt per spec (its keys become the episode's data)."""
    return [{"messages": [{"role": "user", "content": f"question {i}"}], **spec}
            for i, spec in enumerate(specs)]  # fmt: skip


class StandInVLLM:
    """A real HTTP server answering AReaL's vLLM requests: each completion after
    ``generate_s`` (or, with ``on_generate``, after calling it: a test's manual clock),
    with the token ids of :data:`ANSWER` and EOS. Records each request's headers."""

    def __init__(self, tokenizer: Any, generate_s: float = 0.0, on_generate: Any = None):
        self.generate_s = generate_s
        self.on_generate = on_generate
        self.headers: list[dict[str, str]] = []
        answer = [*tokenizer.encode(ANSWER, add_special_tokens=False), tokenizer.eos_token_id]
        rx = self
        count = iter(range(1 << 30))

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _send(self, body: dict[str, Any]) -> None:
                raw = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                self._send({})

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n))
                rx.headers.append({k.lower(): v for k, v in self.headers.items()})
                if rx.on_generate is not None:
                    rx.on_generate()
                elif rx.generate_s:
                    time.sleep(rx.generate_s)
                out = answer[: int(body.get("max_tokens") or len(answer))]
                self._send({
                    "id": f"cmpl-{next(count)}", "object": "text_completion", "created": 1,
                    "model": "stand-in",
                    "choices": [{
                        "index": 0, "text": ANSWER, "finish_reason": "stop",
                        "logprobs": {"tokens": [f"token:{t}" for t in out],
                                     "token_logprobs": [-0.5] * len(out)},
                    }],
                    "usage": {"prompt_tokens": len(body["prompt"]),
                              "completion_tokens": len(out)},
                })  # fmt: skip

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.addr = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def engine(addr: str, concurrency: int, batch_size: int = 1, **config: Any) -> Any:
    """AReaL's own ``RemotevLLMEngine`` on the stand-in server, initialized."""
    from areal.api.cli_args import InferenceEngineConfig
    from areal.engine.vllm_remote import RemotevLLMEngine

    cfg = InferenceEngineConfig(
        backend="vllm:d1",
        max_concurrent_rollouts=concurrency,
        consumer_batch_size=batch_size,
        setup_timeout=30.0,
        request_timeout=60.0,
        **config,
    )
    eng = RemotevLLMEngine(cfg)
    eng.initialize(addr=addr, train_data_parallel_size=1)
    return eng


def gconfig(max_new_tokens: int = 16) -> Any:
    from areal.api.cli_args import GenerationHyperparameters

    return GenerationHyperparameters(n_samples=1, max_new_tokens=max_new_tokens)


def tool_workflow(tokenizer: Any, clock: Any = None) -> Any:
    """A multi-turn tool episode timed with AReaL's own session API, as a workflow of
    AReaL's users would: its ``arun_episode`` is a session (``session_context``); per
    turn a model call inside ``atrace_session_phase("generate")`` and, but for the last
    turn, a tool call of ``tool_s`` inside ``atrace_session_phase("toolcall")``; then the
    reward (``trace_session("reward")``, ``reward_s``). ``none`` returns no trajectory
    (AReaL rejects it: ``returned_none``); ``fail`` raises after the first model call.
    With ``clock`` (a manual clock), the tool and the reward advance it instead of
    sleeping."""
    import asyncio
    import uuid

    import torch
    from areal.api import ModelRequest, RolloutWorkflow
    from areal.utils import perf_tracer
    from areal.utils.perf_tracer import session_context, trace_session

    async def wait(seconds: float) -> None:
        if clock is not None:
            clock.advance(ms=round(seconds * 1000))
        else:
            await asyncio.sleep(seconds)

    class ToolWorkflow(RolloutWorkflow):
        def __init__(self) -> None:
            self.gconfig = gconfig().new_with_stop_and_pad_token_ids(tokenizer)

        @trace_session("reward")
        async def _reward(self, data: dict[str, Any]) -> float:
            await wait(float(data.get("reward_s", 0.0)))
            return 1.0 if data.get("accept", True) else 0.0

        @session_context()
        async def arun_episode(self, engine: Any, data: dict[str, Any]) -> Any:
            ids = tokenizer.encode(data["messages"][0]["content"], add_special_tokens=False)
            prompt_len = len(ids)
            versions: list[int] = []
            turns = int(data.get("turns", 1))
            for turn in range(turns):
                g = self.gconfig.new(n_samples=1)
                req = ModelRequest(rid=uuid.uuid4().hex, input_ids=list(ids), gconfig=g,
                                   tokenizer=tokenizer)  # fmt: skip
                async with perf_tracer.atrace_session_phase("generate"):
                    resp = await engine.agenerate(req)
                if data.get("fail"):
                    raise RuntimeError("the episode failed, as the test asked")
                ids += resp.output_tokens
                versions += resp.output_versions
                if turn < turns - 1:
                    async with perf_tracer.atrace_session_phase("toolcall"):
                        await wait(float(data.get("tool_s", 0.0)))
            reward = await self._reward(data)
            if data.get("none"):
                return None
            n, out = len(ids), len(ids) - prompt_len
            res = {
                "input_ids": torch.tensor(ids, dtype=torch.int32),
                "loss_mask": torch.tensor([0] * prompt_len + [1] * out, dtype=torch.int32),
                "logprobs": torch.zeros(n, dtype=torch.float32),
                "versions": torch.tensor([-1] * prompt_len + versions, dtype=torch.int32),
                "attention_mask": torch.ones(n, dtype=torch.bool),
                "rewards": torch.tensor(reward, dtype=torch.float32),
            }
            return {k: v.unsqueeze(0) for k, v in res.items()}

    return ToolWorkflow()


class _DeviceStats:
    def log(self, *a: Any) -> None:
        pass


class StandInActor:
    """What ``PPOTrainer.train`` asks of its actor, with the GPU work stood in for by
    sleeps of known length; ``prepare_batch`` is the real engine's."""

    def __init__(self, engine: Any, advantage_s: float, train_s: float, update_s: float):
        self.engine = engine
        self.advantage_s, self.train_s, self.update_s = advantage_s, train_s, update_s

    def prepare_batch(self, dataloader: Any, **kwargs: Any) -> Any:
        return self.engine.prepare_batch(dataloader, **kwargs)

    def compute_advantages(self, batch: Any) -> Any:
        time.sleep(self.advantage_s)
        return batch

    def ppo_update(self, batch: Any) -> None:
        time.sleep(self.train_s)

    def update_weights(self, meta: Any) -> None:
        time.sleep(self.update_s)

    def get_device_stats(self) -> _DeviceStats:
        return _DeviceStats()

    def step_lr_scheduler(self) -> None:
        pass

    def set_version(self, version: int) -> None:
        pass

    def clear_batches(self, *batches: Any) -> None:
        pass


def ppo_trainer(engine: Any, data: list[dict[str, Any]], batch_size: int, steps: int,
                advantage_s: float, train_s: float, update_s: float) -> Any:  # fmt: skip
    """AReaL's own ``PPOTrainer`` (its ``train`` loop unchanged) around ``engine``, with
    the GPU work (advantages, the PPO update, the weight update) stood in for, and no
    saving, evaluation or stats export; a dataloader of ``data``."""
    from types import SimpleNamespace as NS

    from areal.trainer.rl_trainer import PPOTrainer
    from torchdata.stateful_dataloader import StatefulDataLoader

    trainer = object.__new__(PPOTrainer)
    actor = StandInActor(engine, advantage_s, train_s, update_s)
    trainer.config = NS(
        total_train_epochs=steps, total_train_steps=steps, dynamic_bs=False,
        gconfig=NS(n_samples=1), memory_profiler=None, teacher=None,
        actor=NS(should_compute_prox_logp=lambda: False),
    )  # fmt: skip
    trainer.recover_info = None
    trainer.train_dataloader = StatefulDataLoader(
        data, batch_size=batch_size, collate_fn=lambda x: x
    )
    trainer.actor, trainer.rollout = actor, engine
    trainer.critic = trainer.ref = trainer.teacher = trainer.eval_rollout = None
    trainer.data_controller = None
    for role in ("rollout", "actor", "critic", "ref", "teacher"):
        setattr(trainer, f"_should_offload_{role}", False)
    trainer.saver = NS(maybe_wait_for_staging=lambda: None)
    trainer.weight_update_meta = NS(with_version=lambda version: version)
    trainer._save_hf = trainer._save_recover_checkpoint = lambda **kw: None
    trainer._evaluate = trainer._export_and_commit_stats = lambda **kw: None
    trainer._save_perf_tracer = lambda **kw: None
    return trainer
