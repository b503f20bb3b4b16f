"""Handles on one open phase span: :class:`Phase` (attributes, a step's reward, an error,
``end()``) and :class:`Generation` (a ``generate`` span's token counts, finish reasons and,
with capture opted in, content). They never raise into the loop."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from opentelemetry.trace import Span
from opentelemetry.util.types import AttributeValue

from otel_rollout import attributes as A
from otel_rollout._api.recording import (
    _capture_content,
    _capture_limit,
    _evaluation,
    _record_exception,
)
from otel_rollout._base import coerce as C
from otel_rollout._base.clock import now_ns
from otel_rollout._base.errors import internal_error, warn_once
from otel_rollout._processing import loopstall as _loopstall

#: OpenAI's usage field names, accepted by ``Generation.record``.
_OPENAI_USAGE = frozenset(("prompt_tokens", "completion_tokens", "total_tokens"))


def _openai_usage(input_tokens: Any, output_tokens: Any, attributes: dict[str, Any]) -> tuple:
    """``prompt_tokens``/``completion_tokens`` popped from ``attributes`` as the input and
    output counts (the GenAI names win when both are given); ``total_tokens`` popped and
    checked against their sum. Disagreements are warned about once per kind."""
    prompt = attributes.pop("prompt_tokens", None)
    completion = attributes.pop("completion_tokens", None)
    total = attributes.pop("total_tokens", None)
    pairs = ((input_tokens, prompt, "prompt_tokens/input_tokens"),
             (output_tokens, completion, "completion_tokens/output_tokens"))  # fmt: skip
    for ours, theirs, name in pairs:
        if (
            ours is not None
            and theirs is not None
            and C.to_count(ours, name) != C.to_count(theirs, name)
        ):
            warn_once(f"record.{name}", "otel-rollout: Generation.record got both %s with "
                      "different values; the GenAI name's is recorded", name)  # fmt: skip
    input_tokens = prompt if input_tokens is None else input_tokens
    output_tokens = completion if output_tokens is None else output_tokens
    if total is not None:
        counts = [C.to_count(v, "tokens") for v in (input_tokens, output_tokens)]
        t = C.to_count(total, "total_tokens")
        if t is not None and None not in counts and sum(counts) != t:
            warn_once("record.total_tokens", "otel-rollout: Generation.record: total_tokens "
                      "%s is not input + output (%s + %s); not recorded", t, *counts)  # fmt: skip
    return input_tokens, output_tokens


#: Short keyword names accepted by ``generate(**attributes)`` and their GenAI keys.
_GENAI_SHORT = MappingProxyType(
    {
        "model": A.GEN_AI_REQUEST_MODEL,
        "max_tokens": A.GEN_AI_REQUEST_MAX_TOKENS,
        "temperature": A.GEN_AI_REQUEST_TEMPERATURE,
        "top_p": A.GEN_AI_REQUEST_TOP_P,
        "top_k": A.GEN_AI_REQUEST_TOP_K,
        "seed": A.GEN_AI_REQUEST_SEED,
        "frequency_penalty": A.GEN_AI_REQUEST_FREQUENCY_PENALTY,
        "presence_penalty": A.GEN_AI_REQUEST_PRESENCE_PENALTY,
        "stop_sequences": A.GEN_AI_REQUEST_STOP_SEQUENCES,
        "n": A.GEN_AI_REQUEST_CHOICE_COUNT,
        "operation": A.GEN_AI_OPERATION_NAME,
        "provider": A.GEN_AI_PROVIDER_NAME,
        "system": A.GEN_AI_PROVIDER_NAME,  # the deprecated name of the same thing
        "input_tokens": A.GEN_AI_USAGE_INPUT_TOKENS,
        "output_tokens": A.GEN_AI_USAGE_OUTPUT_TOKENS,
    }
)


class Phase:
    """A handle on one open phase span (``env_setup``, ``env_step``, ``env_teardown``...)."""

    __slots__ = ("_clock", "span")

    def __init__(self, span: Span, clock: Callable[[], int] = now_ns) -> None:
        self.span = span
        self._clock = clock

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        value = C.to_attribute(value)
        if value is not None:
            self.span.set_attribute(key, value)

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def set_reward(
        self, value: Any, *, name: str = A.REWARD_NAME, label: Any = None, explanation: Any = None
    ) -> float | None:
        """A per-step reward (what ``env.step`` returned): ``rollout.step.reward`` and a
        ``gen_ai.evaluation.result`` event on this span. Returns the score recorded."""
        try:
            return _evaluation(self.span, A.STEP_REWARD, value, name, label, explanation)
        except Exception as exc:
            internal_error("Phase.set_reward", exc)
            return None

    def record_error(self, exc: BaseException) -> None:
        """Mark the span failed by ``exc`` (status ERROR, ``error.type``, the event)."""
        try:
            _record_exception(self.span, exc)
        except Exception as err:
            internal_error("record_error", err)

    def end(self, end_time: int | None = None) -> None:
        """End a phase opened with ``scope.start()`` (a ``with`` block ends its own);
        ``end_time`` in nanoseconds since the epoch (the tracer's clock), now if not given."""
        if _loopstall.ACTIVE:
            _loopstall.phase_ending(self.span)
        self.span.end(end_time=self._clock() if end_time is None else end_time)


class Generation(Phase):
    """A handle on one open ``generate`` span; record usage after the engine answers."""

    __slots__ = ()

    def record(
        self,
        *,
        input_tokens: Any = None,
        output_tokens: Any = None,
        finish_reason: Any = None,
        finish_reasons: Any = None,
        response_model: Any = None,
        cache_read_input_tokens: Any = None,
        reasoning_output_tokens: Any = None,
        response_id: Any = None,
        **attributes: Any,
    ) -> None:
        """Record token counts and why generation stopped (GenAI attributes).

        Token counts may be lists (one per sample when n > 1): their sum is recorded.
        OpenAI's usage names are accepted too: ``prompt_tokens`` and ``completion_tokens``
        count as ``input_tokens`` and ``output_tokens``, and ``total_tokens`` is only
        checked against their sum (a mismatch, or a name given twice with two values, is
        warned about once). ``finish_reasons="stop"`` is one reason. Other keywords are
        set as attributes (short names such as ``temperature`` map to their GenAI keys).
        """
        try:
            if attributes.keys() & _OPENAI_USAGE:
                input_tokens, output_tokens = _openai_usage(input_tokens, output_tokens,
                                                            attributes)  # fmt: skip
            span = self.span
            for key, value in (
                (A.GEN_AI_USAGE_INPUT_TOKENS, input_tokens),
                (A.GEN_AI_USAGE_OUTPUT_TOKENS, output_tokens),
                (A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, cache_read_input_tokens),
                (A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, reasoning_output_tokens),
            ):
                count = C.to_count(value, key)
                if count is not None:
                    span.set_attribute(key, count)
            reasons = C.to_strings(finish_reasons, A.GEN_AI_RESPONSE_FINISH_REASONS)
            if finish_reason is not None:
                reasons = (*(reasons or ()), *(C.to_strings(finish_reason, "finish_reason") or ()))
            if reasons is not None:
                span.set_attribute(A.GEN_AI_RESPONSE_FINISH_REASONS, reasons)
            for key, value in (
                (A.GEN_AI_RESPONSE_MODEL, response_model),
                (A.GEN_AI_RESPONSE_ID, response_id),
            ):
                text = C.to_text(value, key)
                if text is not None:
                    span.set_attribute(key, text)
            for key, value in attributes.items():
                self.set_attribute(_GENAI_SHORT.get(key, key), value)
        except Exception as exc:
            internal_error("Generation.record", exc)

    def record_content(self, *, prompt: Any = None, completion: Any = None) -> bool:
        """Record prompt/completion text, truncated, only when capture is opted in.

        Capture follows ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``; the limit
        is ``OTEL_ROLLOUT_CAPTURE_MAX_CHARS`` (default 2000). Returns whether it recorded.
        """
        if not _capture_content():
            return False
        limit = _capture_limit()
        if prompt is not None:
            self.span.set_attribute(A.GEN_AI_INPUT_MESSAGES, C._text(prompt)[:limit])
        if completion is not None:
            self.span.set_attribute(A.GEN_AI_OUTPUT_MESSAGES, C._text(completion)[:limit])
        return True
