"""Inference engines for the demo: a continuous-batching latency simulator, and OpenAI.

``SimEngine`` models one inference server with continuous batching: requests wait in a
queue until a slot of the running batch (``max_batch`` sequences) is free; each engine
iteration costs ``step_s + step_per_seq_s * batch`` and decodes ``tokens_per_step`` tokens
of every running sequence; a request that joins the batch adds its prefill cost
(``prefill_s_per_token * prompt_tokens``) to that iteration. Output lengths have a long
tail (a few generations reason far longer than the rest), so a batch has stragglers.
Latencies are real: callers ``await`` the server loop, which advances by
``asyncio.sleep``. Seeded, so output lengths and answers repeat; wall times vary with the
machine only through scheduling.
Each completion carries ``metrics`` with the fields of vLLM's ``RequestStateStats``
(``queued_ts``, ``scheduled_ts``, ``first_token_ts``, ``last_token_ts``, on the loop's
monotonic clock), so its queue, prefill and decode times reach the breakdown as vLLM's do.
"""

from __future__ import annotations

import asyncio
import json
import random
import urllib.request
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from opentelemetry import propagate


@dataclass
class Completion:
    text: str
    input_tokens: int
    output_tokens: int
    finish_reason: str = "stop"
    model: str | None = None
    #: The engine's per-request timestamps (vLLM's ``RequestStateStats`` fields), if known.
    metrics: Any = None


def _tokens(messages: list[dict[str, Any]]) -> int:
    return max(1, sum(len(str(m.get("content", ""))) for m in messages) // 4)


@dataclass
class _Req:
    prompt_tokens: int
    remaining: int
    future: asyncio.Future
    prefilled: bool = False
    queued_ts: float = 0.0
    scheduled_ts: float = 0.0
    first_token_ts: float = 0.0
    last_token_ts: float = 0.0


@dataclass
class SimEngine:
    """A documented latency model of a continuous-batching server (see module doc)."""

    seed: int = 0
    max_batch: int = 8
    step_s: float = 0.004
    step_per_seq_s: float = 0.0004
    tokens_per_step: int = 4
    prefill_s_per_token: float = 0.00002
    model: str = "sim-7b"
    reasoning_scale: float = 20.0
    tail_shape: float = 1.5
    max_reasoning_tokens: int = 1000
    _queue: list[_Req] = field(default_factory=list)
    _running: list[_Req] = field(default_factory=list)
    _loop_task: asyncio.Task | None = None
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        while self._queue or self._running:
            cost = self.step_s
            while self._queue and len(self._running) < self.max_batch:
                req = self._queue.pop(0)
                req.scheduled_ts = loop.time()
                cost += self.prefill_s_per_token * req.prompt_tokens
                self._running.append(req)
            cost += self.step_per_seq_s * len(self._running)
            await asyncio.sleep(cost)
            now = loop.time()
            done = []
            for req in self._running:
                req.remaining -= self.tokens_per_step
                req.first_token_ts = req.first_token_ts or now
                req.last_token_ts = now
                if req.remaining <= 0:
                    done.append(req)
            for req in done:
                self._running.remove(req)
                if not req.future.done():
                    req.future.set_result(None)
        self._loop_task = None

    def _reasoning_tokens(self) -> int:
        """Reasoning tokens before the answer: mostly short, with a long tail (Pareto,
        shape ``tail_shape``, capped at ``max_reasoning_tokens``), as RL rollouts have."""
        raw = self._rng.paretovariate(self.tail_shape) * self.reasoning_scale
        return min(int(raw), self.max_reasoning_tokens)

    async def complete(self, messages: list[dict[str, Any]], action: str) -> Completion:
        """Wait the simulated latency of generating ``action`` for ``messages``."""
        n_in = _tokens(messages)
        n_out = max(8, len(action) // 4 + self._reasoning_tokens())
        loop = asyncio.get_running_loop()
        req = _Req(n_in, n_out, loop.create_future(), queued_ts=loop.time())
        self._queue.append(req)
        if self._loop_task is None:
            self._loop_task = asyncio.create_task(self._serve())
        await req.future
        metrics = SimpleNamespace(
            queued_ts=req.queued_ts, scheduled_ts=req.scheduled_ts,
            first_token_ts=req.first_token_ts, last_token_ts=req.last_token_ts,
        )  # fmt: skip
        return Completion(action, n_in, n_out, "stop", self.model, metrics)

    async def aclose(self) -> None:
        if self._loop_task is not None:
            await self._loop_task


@dataclass
class OpenAIEngine:
    """Any OpenAI-compatible server's ``/v1/chat/completions``; sends ``traceparent``."""

    base_url: str
    model: str
    max_tokens: int = 256
    timeout_s: float = 120.0
    api_key: str | None = None

    def _url(self) -> str:
        url = self.base_url.rstrip("/")
        if not url.endswith("/v1"):
            url += "/v1"
        return url + "/chat/completions"

    def _post(self, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
        req = urllib.request.Request(self._url(), data=body, headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            return json.loads(resp.read().decode("utf-8"))

    async def complete(
        self, messages: list[dict[str, Any]], action: str | None = None
    ) -> Completion:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        propagate.inject(headers)  # the current span is the generate span
        body = json.dumps(
            {"model": self.model, "messages": messages, "max_tokens": self.max_tokens}
        ).encode()
        data = await asyncio.to_thread(self._post, body, headers)
        choice = (data.get("choices") or [{}])[0]
        usage = data.get("usage") or {}
        return Completion(
            text=(choice.get("message") or {}).get("content") or "",
            input_tokens=int(usage.get("prompt_tokens", _tokens(messages))),
            output_tokens=int(usage.get("completion_tokens", 0)),
            finish_reason=choice.get("finish_reason") or "stop",
            model=data.get("model"),
        )

    async def aclose(self) -> None:
        return None
