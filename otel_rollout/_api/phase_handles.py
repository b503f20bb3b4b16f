"""Handles on one open phase span: :class:`Phase` (attributes, a step's reward, an error,
``end()``) and :class:`Generation` (token counts, finish reasons, content with capture opted
in); what they record besides plain attributes: an exception, a reward. They never raise
into the loop."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from opentelemetry import _logs
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from otel_rollout import attributes as A
from otel_rollout._base import coerce as C
from otel_rollout._base.clock import now_ns
from otel_rollout._base.errors import error_type, internal_error, warn_once
from otel_rollout._processing import loopstall as _loopstall
from otel_rollout._processing.breakdown_processor import SCOPE_NAME
from otel_rollout._settings.table import from_environment
from otel_rollout._version import __version__


def _capture_content() -> bool:
    return from_environment("capture_content")


def _capture_limit() -> int:
    return from_environment("capture_max_chars")


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return f"<{type(exc).__name__}: str() failed>"


def _record_exception(span: Span, exc: BaseException) -> None:
    """The exception event, ``error.type`` and status ERROR on ``span``; the message (it may
    hold completion text) only with content capture opted in."""
    etype = error_type(exc)
    capture = _capture_content()
    attrs: dict[str, Any] = {"exception.type": etype, "exception.escaped": True}
    description = type(exc).__name__
    if capture:
        limit = _capture_limit()
        message = _safe_str(exc)[:limit]
        attrs["exception.message"] = message
        description = f"{description}: {message}"[:256]
    try:
        frames = "".join(traceback.format_tb(exc.__traceback__)) if exc.__traceback__ else ""
    except Exception:
        frames = ""
    attrs["exception.stacktrace"] = f"Traceback (most recent call last):\n{frames}{etype}"
    span.add_event("exception", attrs)
    span.set_attribute(A.ERROR_TYPE, etype)
    span.set_status(Status(StatusCode.ERROR, description))


def _reward_key(name: str, default: str) -> str:
    return default if name == A.REWARD_NAME else A.REWARD_PREFIX + name


def logger_of(provider: _logs.LoggerProvider | None = None) -> _logs.Logger:
    """The logger of our events on ``provider`` (``None``: the global logger provider, a
    no-op unless one is set)."""
    return _logs.get_logger(SCOPE_NAME, __version__, provider)


def _evaluation(
    handle: Any, attr_default: str, value: Any, name: Any, label: Any, explanation: Any
) -> float | None:
    """A reward on ``handle`` (a trajectory or a phase): an attribute on its span and a
    ``gen_ai.evaluation.result`` event."""
    span = handle.span
    name = C.to_text(name, "reward name") or A.REWARD_NAME
    score = C.to_score(value, f"reward {name!r}")
    label = C.to_text(label, "reward label")
    if score is None and label is None:
        return None
    attrs: dict[str, Any] = {A.GEN_AI_EVALUATION_NAME: name}
    if score is not None:
        span.set_attribute(_reward_key(name, attr_default), score)
        attrs[A.GEN_AI_EVALUATION_SCORE_VALUE] = score
    if label is not None:
        attrs[A.GEN_AI_EVALUATION_SCORE_LABEL] = label
    if explanation is not None and _capture_content():
        attrs[A.GEN_AI_EVALUATION_EXPLANATION] = C._text(explanation)[: _capture_limit()]
    from otel_rollout._export.log_file import emit_event  # the SDK's logs: only with a reward

    logger = handle._logger or logger_of()
    emit_event(logger, A.EVENT_EVALUATION_RESULT, attrs, handle._clock(), span)
    return score


#: OpenAI's usage field names, accepted by ``Generation.record``.
_OPENAI_USAGE = frozenset(("prompt_tokens", "completion_tokens", "total_tokens"))


def _openai_usage(input_tokens: Any, output_tokens: Any, attributes: dict[str, Any]) -> tuple:
    """OpenAI's usage names popped from ``attributes`` as the input and output counts (the
    GenAI names win); ``total_tokens`` only checked. Disagreements are warned about once."""
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
        tin, tout = C.to_count(input_tokens, "tokens"), C.to_count(output_tokens, "tokens")
        t = C.to_count(total, "total_tokens")
        if t is not None and tin is not None and tout is not None and tin + tout != t:
            warn_once("record.total_tokens", "otel-rollout: Generation.record: total_tokens "
                      "%s is not input + output (%s + %s); not recorded", t, tin, tout)  # fmt: skip
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


def phase_name(name: object) -> str:
    """``name`` when it is a non-empty string; else a ValueError naming it."""
    if not name or not isinstance(name, str):
        raise ValueError(f"phase name must be a non-empty string, got {name!r}")
    return name


def coerced(attributes: Mapping[str, Any], names: Mapping[str, str] | None = None) -> dict:
    """``attributes`` as span attributes, short ``names`` mapped to their keys; values that
    cannot be one (None, NaN...) left out (:mod:`otel_rollout._base.coerce`)."""
    out = {}
    for key, value in attributes.items():
        value = C.to_attribute(value)
        if value is not None:
            out[names.get(key, key) if names else key] = value
    return out


class Phase:
    """A handle on one open phase span (``env_setup``, ``env_step``, ``env_teardown``...)."""

    __slots__ = ("_clock", "_logger", "span")

    def __init__(self, span: Span, clock: Callable[[], int] = now_ns,
                 logger: _logs.Logger | None = None) -> None:  # fmt: skip
        self.span = span
        self._clock = clock
        self._logger = logger  # None: the global logger provider

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        value = C.to_attribute(value)
        if value is not None:
            self.span.set_attribute(key, value)

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        self.span.set_attributes(coerced(attributes))

    def set_reward(
        self, value: Any, *, name: str = A.REWARD_NAME, label: Any = None, explanation: Any = None
    ) -> float | None:
        """A per-step reward: ``rollout.step.reward`` on this span and a
        ``gen_ai.evaluation.result`` event; returns the score recorded."""
        try:
            return _evaluation(self, A.STEP_REWARD, value, name, label, explanation)
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
        """Record token counts (lists: summed; OpenAI's usage names accepted) and why
        generation stopped; other keywords are set as attributes, by short name or key."""
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
        """Record prompt/completion text, truncated, only when capture is opted in
        (docs/configure.md); returns whether it recorded."""
        if not _capture_content():
            return False
        limit = _capture_limit()
        if prompt is not None:
            self.span.set_attribute(A.GEN_AI_INPUT_MESSAGES, C._text(prompt)[:limit])
        if completion is not None:
            self.span.set_attribute(A.GEN_AI_OUTPUT_MESSAGES, C._text(completion)[:limit])
        return True
