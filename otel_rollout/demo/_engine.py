"""Inference engines for the demo: a continuous-batching latency simulator, and OpenAI.

``SimEngine`` is docs/demo.md's latency model of one inference server: requests queue for
one of ``max_batch`` slots; each iteration costs ``step_s + step_per_seq_s * batch`` (plus
``prefill_s_per_token * prompt_tokens`` per request joining) and decodes
``tokens_per_step`` tokens of each running sequence; output lengths are seeded and
long-tailed. Each completion carries vLLM's ``RequestStateStats`` timestamps (on the
loop's clock), so its queue, prefill and decode reach the breakdown as vLLM's do.
"""

from __future__ import annotations

import asyncio
import json
import random
import urllib.request
from dataclasses import dataclass, field
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


def v1_url(base_url: str) -> str:
    """``base_url`` ending in ``/v1``, as OpenAI-compatible servers serve."""
    url = base_url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def _tokens(messages: list[dict[str, Any]]) -> int:
    return max(1, sum(len(str(m.get("content", ""))) for m in messages) // 4)


@dataclass
class _Req:
    """A request in the engine, with vLLM's ``RequestStateStats`` timestamps."""

    prompt_tokens: int
    remaining: int
    future: asyncio.Future
    queued_ts: float = 0.0
    scheduled_ts: float = 0.0
    first_token_ts: float = 0.0
    last_token_ts: float = 0.0


@dataclass
class SimEngine:
    """A latency model of a continuous-batching server (see the module doc)."""

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
            if any(r.future.done() for r in self._queue + self._running):  # callers gone
                self._queue = [r for r in self._queue if not r.future.done()]
                self._running = [r for r in self._running if not r.future.done()]
                continue
            cost = self.step_s
            while self._queue and len(self._running) < self.max_batch:
                req = self._queue.pop(0)
                req.scheduled_ts = loop.time()
                cost += self.prefill_s_per_token * req.prompt_tokens
                self._running.append(req)
            cost += self.step_per_seq_s * len(self._running)
            await asyncio.sleep(cost)
            now = loop.time()
            for req in self._running:
                req.remaining -= self.tokens_per_step
                req.first_token_ts = req.first_token_ts or now
                req.last_token_ts = now
                if req.remaining <= 0 and not req.future.done():
                    req.future.set_result(None)
            self._running = [r for r in self._running if r.remaining > 0]
        self._loop_task = None

    def _reasoning_tokens(self) -> int:
        """Reasoning tokens: mostly few, with a long tail (capped Pareto), as in RL."""
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
        return Completion(action, n_in, n_out, "stop", self.model, req)

    async def aclose(self) -> None:
        if self._loop_task is not None:
            await self._loop_task


@dataclass
class OpenAIEngine:
    """Any OpenAI-compatible server's ``/v1/chat/completions``; sends ``traceparent``."""

    base_url: str
    model: str
    max_tokens: int = 256

    def _post(self, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
        url = v1_url(self.base_url) + "/chat/completions"
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=120) as resp:
            return json.loads(resp.read().decode("utf-8"))

    async def complete(
        self, messages: list[dict[str, Any]], action: str | None = None
    ) -> Completion:
        headers = {"Content-Type": "application/json"}
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
