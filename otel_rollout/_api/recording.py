"""What the handles write onto spans besides plain attributes: an exception (its message
only with content capture opted in) and a reward as a ``gen_ai.evaluation.result`` event;
the content-capture settings they follow."""

from __future__ import annotations

import traceback
from typing import Any

from opentelemetry.trace import Span, Status, StatusCode

from otel_rollout import attributes as A
from otel_rollout._base import coerce as C
from otel_rollout._base.errors import error_type
from otel_rollout._settings.table import from_environment


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
    """The exception event, ``error.type`` and status ERROR on ``span``.

    Exception messages can hold completion text: they reach the span only when content
    capture is opted in (truncated); otherwise only the type and the traceback's frames.
    An exception whose ``__str__`` raises is recorded all the same.
    """
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


def _evaluation(
    span: Span, attr_default: str, value: Any, name: Any, label: Any, explanation: Any
) -> float | None:
    """Record a reward as an attribute and a ``gen_ai.evaluation.result`` event."""
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
        attrs[A.GEN_AI_EVALUATION_EXPLANATION] = C.to_text(explanation, "explanation")[
            : _capture_limit()
        ]
    span.add_event(A.EVENT_EVALUATION_RESULT, attrs)
    return score
