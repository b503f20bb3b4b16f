"""The demo against a real vLLM engine: in-process ``AsyncLLM`` on a local model, or a
running vLLM (any OpenAI-compatible) server.

``VLLMEngine`` starts ``AsyncLLM`` once, before the run (start-up takes tens of seconds
and must not count as any trajectory's time), and wraps its ``generate`` with
:func:`otel_rollout.integrations.vllm.wrap_generate`: each call inside the demo's
``generate`` phase hands vLLM that span's ``traceparent`` and writes the tokens and the
engine's own queue / prefill / decode times onto it, so the breakdown's ``llm`` split is
the engine's. vLLM traces too (``llm_request`` spans under the generate spans) when
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_ENDPOINT``) names a
Collector. On a CPU build of vLLM the engine runs eager in bfloat16.

The model writes what it writes: the envs score its text, so a small or random model
earns no reward, but every phase, wait and token is real.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_rollout.demo._engine import Completion

#: Room kept for the completion when a long chat is cut to the model's context.
DEFAULT_MAX_TOKENS = 128


def _traces_endpoint() -> str | None:
    specific = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if specific:
        return specific
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return base or None


@dataclass
class VLLMEngine:
    """An in-process vLLM ``AsyncLLM`` behind the demo's ``complete(messages, action)``."""

    model_path: str
    max_tokens: int = DEFAULT_MAX_TOKENS
    model: str = ""
    _engine: Any = field(default=None, repr=False)
    _tokenizer: Any = field(default=None, repr=False)
    _max_len: int = 0

    @classmethod
    def start(cls, model_path: str, max_tokens: int = DEFAULT_MAX_TOKENS) -> VLLMEngine:
        """Build the engine now (tens of seconds); ImportError without vLLM."""
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.platforms import current_platform
        from vllm.v1.engine.async_llm import AsyncLLM

        from otel_rollout.integrations.vllm import wrap_generate

        kwargs: dict[str, Any] = {"model": model_path, "otlp_traces_endpoint": _traces_endpoint()}
        if current_platform.is_cpu():
            kwargs.update(dtype="bfloat16", enforce_eager=True)
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))
        demo_engine = cls(model_path, max_tokens, Path(model_path).name or model_path)
        demo_engine._engine = wrap_generate(engine)
        demo_engine._tokenizer = engine.tokenizer
        demo_engine._max_len = int(engine.model_config.max_model_len)
        return demo_engine

    def _prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        ids = self._tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # a BatchEncoding
            ids = ids["input_ids"]
        room = max(1, self._max_len - self.max_tokens)
        return list(ids)[-room:]  # the end of a long chat: the latest turn matters most

    async def complete(self, messages: list[dict[str, Any]], action: str | None = None) -> Any:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        prompt = TokensPrompt(prompt_token_ids=self._prompt_ids(messages))
        params = SamplingParams(max_tokens=self.max_tokens, temperature=0.8, seed=0)
        last = None
        async for out in self._engine.generate(prompt, params, uuid.uuid4().hex):
            last = out
        choice = last.outputs[0]
        return Completion(
            text=choice.text,
            input_tokens=len(last.prompt_token_ids or ()),
            output_tokens=len(choice.token_ids),
            finish_reason=str(choice.finish_reason or "stop"),
            model=self.model,
            metrics=None,  # the traced stream wrote the engine's timings on the span
        )

    async def aclose(self) -> None:
        """Stop the engine (the demo calls this once every trajectory has ended)."""
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None


def served_model(base_url: str, timeout_s: float = 10.0) -> str | None:
    """The first model a vLLM (OpenAI-compatible) server lists at ``/v1/models``."""
    import json
    import urllib.request

    url = base_url.rstrip("/")
    if not url.endswith("/v1"):
        url += "/v1"
    try:
        with urllib.request.urlopen(url + "/models", timeout=timeout_s) as resp:
            data = json.loads(resp.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    models = data.get("data") or []
    return str(models[0].get("id")) if models and models[0].get("id") else None


def vllm_engine(model: str | None, base_url: str | None) -> Any:
    """``--engine vllm``: the server at ``base_url`` (its first listed model unless
    ``model`` names one), else an in-process engine on the local model ``model``."""
    from otel_rollout.demo._engine import OpenAIEngine

    if base_url:
        name = model or served_model(base_url)
        if not name:
            raise SystemExit(f"otel-rollout: no model listed at {base_url}; pass --model")
        return OpenAIEngine(base_url, name)
    if not model:
        raise SystemExit("otel-rollout: --engine vllm needs --model PATH (or --base-url URL)")
    try:
        return VLLMEngine.start(model)
    except ImportError as exc:
        raise SystemExit(f"otel-rollout: --engine vllm needs vLLM installed here ({exc})") from exc
