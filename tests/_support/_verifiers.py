"""Stand-ins for verifiers tests: an OpenAI-compatible server that streams (SSE) with a
known latency, and an in-process harness plugin (harness id ``_verifiers``) whose loop
calls the model through verifiers' interception endpoint and runs a tool of known
latency for each tool call. Imported only where verifiers is installed."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
from aiohttp import web
from verifiers.v1.configs.harness import HarnessConfig
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.harness import Harness
from verifiers.v1.runtimes import ProgramResult

__all__ = ["StandInServer", "TimedHarness", "TimedHarnessConfig"]

TOOL = "wait"
_TURNS = re.compile(r"turns=(\d+)")


class StandInServer:
    """``POST /v1/chat/completions``, streamed: after ``generate_s`` it answers with a
    call of ``tool`` (with ``arguments``) until the conversation holds ``turns - 1`` tool
    results (``turns=N`` in the first user message), then with text; with ``cut``, the
    stream ends before its terminal event. Records each request's headers."""

    def __init__(
        self,
        generate_s: float,
        prompt_tokens: int = 11,
        output_tokens: int = 3,
        tool: str = TOOL,
        arguments: str = "{}",
        cut: bool = False,
    ):
        self.generate_s = generate_s
        self.cut = cut
        self.tool, self.arguments = tool, arguments
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.headers: list[dict[str, str]] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> StandInServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        body = await request.json()
        messages = body["messages"]
        first = next(m["content"] for m in messages if m["role"] == "user")
        wanted = int(_TURNS.search(first).group(1))
        tools_done = sum(1 for m in messages if m["role"] == "tool")
        await asyncio.sleep(self.generate_s)
        base = {"id": f"c{tools_done}", "object": "chat.completion.chunk", "created": 1,
                "model": body["model"]}  # fmt: skip
        if tools_done + 1 < wanted:
            call = {"index": 0, "id": f"call{tools_done}", "type": "function",
                    "function": {"name": self.tool, "arguments": self.arguments}}  # fmt: skip
            delta: dict[str, Any] = {"role": "assistant", "tool_calls": [call]}
            finish = "tool_calls"
        else:
            delta, finish = {"role": "assistant", "content": "42"}, "stop"
        usage = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.output_tokens,
                 "total_tokens": self.prompt_tokens + self.output_tokens}  # fmt: skip
        chunks = (
            {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
             "usage": usage},
        )  # fmt: skip
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for chunk in chunks[:1] if self.cut else chunks:
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        if not self.cut:
            await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


class TimedHarnessConfig(HarnessConfig):
    tool_s: float = 0.02


class TimedHarness(Harness[TimedHarnessConfig]):
    """A chat loop run in-process (verifiers allows it: every model call goes through
    the interception endpoint): stream a completion, run each tool call (sleeping
    ``tool_s``), repeat until the model answers without one. A later segment of an
    exchange (``Agent.interaction``) relaunches it on the conversation so far."""

    EXECUTES_CODE = False
    NEEDS_CONTAINER = False
    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True  # a later segment relaunches on the conversation so far

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, **kw):
        if isinstance(data.prompt, str):
            messages: list[dict[str, Any]] = [{"role": "user", "content": data.prompt}]
        else:
            messages = [message_to_wire(m) for m in data.prompt]
        tools = [{"type": "function", "function": {"name": TOOL, "parameters": {
            "type": "object", "properties": {}}}}]  # fmt: skip
        url = endpoint.rstrip("/") + "/chat/completions"
        auth = {"Authorization": f"Bearer {secret}"}
        async with httpx.AsyncClient(timeout=60) as client:
            while True:
                request = {"model": "m", "messages": messages, "tools": tools, "stream": True}
                async with client.stream("POST", url, headers=auth, json=request) as r:
                    text = (await r.aread()).decode()
                if r.status_code != 200:
                    return ProgramResult(1, "", text)
                content, calls = _parse_sse(text)
                reply: dict[str, Any] = {"role": "assistant", "content": content or None}
                if calls:
                    reply["tool_calls"] = calls
                messages.append(reply)
                if not calls:
                    return ProgramResult(0, content, "")
                for call in calls:
                    await asyncio.sleep(self.config.tool_s)
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": "ok"})


def _parse_sse(text: str) -> tuple[str, list[dict[str, Any]]]:
    content, calls = "", []
    for line in text.splitlines():
        if not line.startswith("data:") or line.strip() == "data: [DONE]":
            continue
        for choice in json.loads(line[5:]).get("choices", []):
            delta = choice.get("delta") or {}
            content += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                if call.get("id"):
                    fn = call["function"]
                    calls.append({"id": call["id"], "type": "function", "function": {
                        "name": fn["name"], "arguments": fn.get("arguments") or ""}})  # fmt: skip
    return content, calls
