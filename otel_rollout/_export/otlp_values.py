"""OTLP JSON values shared by the trace file's encoders: attributes, span flags, and
which span types can be read field by field (:mod:`.otlp_json`, :mod:`.otlp_compact`)."""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace.span import DEFAULT_TRACE_STATE, SpanContext

_log = logging.getLogger("otel_rollout.export")

#: ``SpanFlags``: the parent's is-remote bit is known (always), and set.
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x300
#: SpanContext is (trace_id, span_id, is_remote, trace_flags, trace_state, is_valid).
_TUPLE_CONTEXT = tuple(SpanContext(1, 2, True)) == (1, 2, True, 0, DEFAULT_TRACE_STATE, True)


def any_value(value: Any) -> dict[str, Any]:
    """An ``AnyValue`` of any type the official encoder takes (same order of checks)."""
    t = type(value)
    if t is str:
        return {"stringValue": value}
    if t is bool:
        return {"boolValue": value}
    if t is int:
        return {"intValue": str(value)}
    if t is float:
        return {"doubleValue": value if value - value == 0.0 else _non_finite(value)}
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"boolValue": bool(value)}
    if isinstance(value, str):
        return {"stringValue": str.__str__(value)}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        value = float(value)
        return {"doubleValue": value if value - value == 0.0 else _non_finite(value)}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode("ascii")} if value else {}
    if isinstance(value, Sequence):
        values = [any_value(v) for v in value]
        return {"arrayValue": {"values": values} if values else {}}
    if isinstance(value, Mapping):
        kvs = [_key_value(str(k), v) for k, v in value.items()]
        return {"kvlistValue": {"values": kvs} if kvs else {}}
    raise TypeError(f"Invalid type {type(value)} of value {value}")


def _non_finite(value: float) -> str:
    if value != value:
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _key_value(key: str, value: Any) -> dict[str, Any]:
    if key:
        return {"key": key, "value": any_value(value)}
    return {"value": any_value(value)}


def _attributes(attributes: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Encoded attributes; one the encoder cannot take is left out and logged, as the
    official encoder does."""
    out = []
    if not attributes:
        return out
    append = out.append
    # a compact record's attributes are a tuple of (key, value) pairs
    items = attributes if type(attributes) is tuple else attributes.items()
    for key, value in items:
        t = type(value)
        if t is str:
            append({"key": key, "value": {"stringValue": value}})
        elif t is int:
            append({"key": key, "value": {"intValue": str(value)}})
        elif t is bool:
            append({"key": key, "value": {"boolValue": value}})
        elif t is float and value - value == 0.0:
            append({"key": key, "value": {"doubleValue": value}})
        else:
            try:
                append(_key_value(key, value))
            except Exception as exc:
                _log.debug("otel-rollout: attribute %r not encoded: %r", key, exc)
    return out


#: Span types -> whether their public fields are the SDK's plain ones (read directly).
_FAST: dict[type, bool] = {}
_FIELDS = ("context", "parent", "name", "kind", "start_time", "end_time", "attributes",
           "events", "links", "status", "dropped_attributes", "dropped_events",
           "dropped_links", "resource", "instrumentation_scope")  # fmt: skip


def _reads_fields(cls: type) -> bool:
    return (
        issubclass(cls, ReadableSpan)
        and _TUPLE_CONTEXT
        and all(getattr(cls, f, None) is getattr(ReadableSpan, f) for f in _FIELDS)
    )
