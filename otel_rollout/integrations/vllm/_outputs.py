"""Reading vLLM's ``RequestOutput`` stream: tokens, finish reasons and engine timings."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from otel_rollout import Generation
from otel_rollout import attributes as A
from otel_rollout.instrumentation import semconv as _semconv
from otel_rollout.integrations.vllm._samples import request_timings


def output_kind(sampling_params: Any) -> str | None:
    """The name of the call's ``RequestOutputKind`` (``DELTA``, ``FINAL_ONLY``...)."""
    return getattr(getattr(sampling_params, "output_kind", None), "name", None)


class Usage:
    """What the stream showed: tokens per completion index, finish reasons, metrics (the
    last seen, and each sample's by completion index), when each sample finished."""

    __slots__ = ("cached", "delta", "done_wall", "finished", "metrics", "n", "output_tokens",
                 "prompt", "prompt_tokens", "reasons", "request_id", "samples",
                 "texts")  # fmt: skip

    def __init__(self, delta: bool, capture: bool, n: int = 1, request_id: Any = None) -> None:
        self.delta = delta
        self.n = n
        self.request_id = request_id
        self.samples: dict[int, Any] = {}
        self.done_wall: dict[int, float] = {}
        self.prompt_tokens: int | None = None
        self.cached: int | None = None
        self.output_tokens: dict[int, int] = {}
        self.reasons: dict[int, str] = {}
        self.finished = False
        self.metrics: Any = None
        self.prompt: Any = None
        self.texts: dict[int, str] | None = {} if capture else None

    def adopt(self, samples: dict[int, Any]) -> None:
        """Each sample's stats found elsewhere (the engine's own, by completion index);
        they replace what the outputs showed."""
        if samples:
            self.samples.update(samples)

    def add(self, out: Any) -> None:
        """Take in one ``RequestOutput``."""
        if self.prompt_tokens is None:
            ids = getattr(out, "prompt_token_ids", None)
            if ids is not None:
                self.prompt_tokens = len(ids)
        cached = getattr(out, "num_cached_tokens", None)
        if cached is not None:
            self.cached = int(cached)
        metrics = getattr(out, "metrics", None)
        if metrics is not None:
            self.metrics = metrics
        texts = self.texts
        if texts is not None and self.prompt is None:
            self.prompt = getattr(out, "prompt", None)
        completions: Sequence[Any] = getattr(out, "outputs", None) or ()
        # one completion: the output came from that sample and carries its stats; several:
        # outputs merged while they waited for the consumer (or FINAL_ONLY's aggregate),
        # carrying one of the samples' stats, not saying which
        if metrics is not None and len(completions) == 1:
            self.samples.setdefault(getattr(completions[0], "index", 0), metrics)
        for c in completions:
            idx = getattr(c, "index", 0)
            n = len(getattr(c, "token_ids", None) or ())
            if self.delta:
                self.output_tokens[idx] = self.output_tokens.get(idx, 0) + n
            else:
                self.output_tokens[idx] = n
            reason = getattr(c, "finish_reason", None)
            if reason is not None:
                self.reasons[idx] = str(reason)
                self.done_wall.setdefault(idx, time.time())
            if texts is not None:
                text = getattr(c, "text", None) or ""
                texts[idx] = texts.get(idx, "") + text if self.delta else text
        if getattr(out, "finished", False):
            self.finished = True

    def record(self, gen: Generation) -> None:
        """Write what was seen onto the generate span."""
        reasons = [self.reasons[i] for i in sorted(self.reasons)]
        gen.record(
            input_tokens=self.prompt_tokens,
            output_tokens=sum(self.output_tokens.values()) if self.output_tokens else None,
            finish_reasons=reasons or None,
        )
        span = gen.span
        if self.cached is not None:
            span.set_attribute(A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, self.cached)
        timings = request_timings(self.samples, self.done_wall, self.metrics)
        if self.n > 1 and timings and A.VLLM_SAMPLES_TIMED not in timings:
            timings[A.VLLM_SAMPLES_TIMED] = len(self.samples) or 1
        if timings:
            span.set_attributes(timings)
        if self.texts is not None:
            completion = "\n".join(self.texts[i] for i in sorted(self.texts)) or None
            prompt = self.prompt if isinstance(self.prompt, str) else None
            gen.record_content(prompt=prompt, completion=completion)


def model_of(engine: Any) -> str | None:
    """The served model name from ``engine.model_config``, if any."""
    config = getattr(engine, "model_config", None)
    served = getattr(config, "served_model_name", None)
    if isinstance(served, list | tuple) and served:
        served = served[0]
    if isinstance(served, str) and served:
        return served
    model = getattr(config, "model", None)
    return model if isinstance(model, str) else None


def request_attributes(
    engine: Any, sampling_params: Any, request_id: Any, model: str | None
) -> dict[str, Any]:
    """GenAI request attributes of one call, from its ``SamplingParams``."""
    attrs: dict[str, Any] = {
        A.GEN_AI_OPERATION_NAME: A.OP_TEXT_COMPLETION,
        A.GEN_AI_PROVIDER_NAME: A.PROVIDER_VLLM,
    }
    if _semconv.mode().dup:  # the deprecated name only under the compatibility opt-in
        attrs[A.GEN_AI_SYSTEM] = A.PROVIDER_VLLM
    model = model or model_of(engine)
    if model:
        attrs[A.GEN_AI_REQUEST_MODEL] = model
    if request_id is not None:
        attrs[A.VLLM_REQUEST_ID] = str(request_id)
    if sampling_params is not None:
        for key, name, kind in (
            (A.GEN_AI_REQUEST_MAX_TOKENS, "max_tokens", int),
            (A.GEN_AI_REQUEST_TEMPERATURE, "temperature", float),
            (A.GEN_AI_REQUEST_TOP_P, "top_p", float),
            (A.VLLM_REQUEST_N, "n", int),
        ):
            value = getattr(sampling_params, name, None)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attrs[key] = kind(value)
    return attrs
