"""GenAI semantic conventions: the ``OTEL_SEMCONV_STABILITY_OPT_IN`` opt-in (span names
after the conventions, deprecated attributes too: docs/semconv.md), span names, and bounded
metric values. Accounting never depends on span names: it keys on ``rollout.phase``."""

from __future__ import annotations

import os
from typing import NamedTuple

from otel_rollout import attributes as A


class Mode(NamedTuple):
    """What the opt-in variable asks for."""

    latest_names: bool = False
    dup: bool = False


_DEFAULT = Mode()
_cache: tuple[str | None, Mode] = (None, _DEFAULT)


def mode() -> Mode:
    """The opt-in now (re-read when the variable changes; cheap enough per trajectory)."""
    global _cache
    raw = os.environ.get(A.SEMCONV_OPT_IN_ENV)
    cached_raw, cached = _cache
    if raw == cached_raw:
        return cached
    if not raw:
        parsed = _DEFAULT
    else:
        items = {item.strip().lower() for item in raw.split(",")}
        parsed = Mode(A.SEMCONV_GENAI_LATEST in items, A.SEMCONV_GENAI_DUP in items)
    _cache = (raw, parsed)
    return parsed


def agent_span_name(agent: object) -> str:
    """``invoke_agent {gen_ai.agent.name}``, or ``invoke_agent`` when there is no name."""
    return f"{A.OP_INVOKE_AGENT} {agent}" if agent else A.OP_INVOKE_AGENT


def inference_span_name(operation: object, model: object) -> str:
    """``{gen_ai.operation.name} {gen_ai.request.model}``."""
    op = operation or A.OP_CHAT
    return f"{op} {model}" if model else str(op)


def tool_span_name(tool: object) -> str:
    """``execute_tool {gen_ai.tool.name}``."""
    return f"{A.OP_EXECUTE_TOOL} {tool}" if tool else A.OP_EXECUTE_TOOL


_STATUS_SET = frozenset(A.STATUSES)


def bounded_status(status: object) -> str:
    """The metric-safe status of a free-form one: itself when known, else the known
    status its text starts with (``"timeout after 600s"`` -> ``timeout``), else ``other``."""
    if isinstance(status, str):
        if status in _STATUS_SET:
            return status
        text = status.strip().lower()
        if text in _STATUS_SET:
            return text
        for known in A.STATUSES:
            if text.startswith(known) and not text[len(known) : len(known) + 1].isalnum():
                return known
    return A.STATUS_OTHER
