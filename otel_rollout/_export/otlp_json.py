"""OTLP JSON straight from the SDK's spans: the official file exporter's lines, ~10x cheaper.

:func:`encode_spans_line` turns a batch of :class:`ReadableSpan` into one
``ExportTraceServiceRequest`` JSON line, the document the official encoder
(``opentelemetry-exporter-otlp-json-common``'s ``encode_spans(...).to_dict()``) gives,
field for field once parsed: hex ids, int64 as strings, non-finite doubles as ``"NaN"`` /
``"Infinity"``, bytes in base64, empty fields left out, spans grouped by resource then by
scope in the order they came. The official encoder builds a message object per value and
a dict per message before ``json.dumps``; here each span becomes plain dicts and lists
once and ``orjson`` writes them, so the trace file keeps up with a busy agent loop.

Text ``orjson`` refuses (a lone surrogate, which Python strings may hold) falls back, for
those spans only, to the standard library's encoder, as does a Python without ``orjson``.
The spans may also be compact records (:mod:`.otlp_compact`), which a long export queue
holds instead. Attribute values are encoded by :mod:`.otlp_values`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace.span import DEFAULT_TRACE_STATE

from otel_rollout._export import otlp_compact
from otel_rollout._export.otlp_values import (
    _FAST,
    _HAS_IS_REMOTE,
    _IS_REMOTE,
    _attributes,
    _reads_fields,
)

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency; a broken install still works
    orjson = None  # type: ignore[assignment]


_UNSET = object()
#: Spans written to bytes together: few enough that their dicts die young (see
#: :func:`encode_spans_line`), enough that each ``orjson.dumps`` call is worth it.
_CHUNK = 32


def _scope(scope: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if scope is None:
        return out
    if scope.name:
        out["name"] = scope.name
    if scope.version:
        out["version"] = scope.version
    attrs = _attributes(scope.attributes)
    if attrs:
        out["attributes"] = attrs
    return out


def _resource(resource: Any) -> dict[str, Any]:
    attrs = _attributes(resource.attributes)
    return {"attributes": attrs} if attrs else {}


def _events(events: Sequence[Any]) -> list[dict[str, Any]]:
    out = []
    for event in events:
        e: dict[str, Any] = {}
        if event.timestamp:
            e["timeUnixNano"] = str(event.timestamp)
        if event.name:
            e["name"] = event.name
        if event.attributes:
            e["attributes"] = _attributes(event.attributes)
        if event.dropped_attributes:
            e["droppedAttributesCount"] = event.dropped_attributes
        out.append(e)
    return out


def _links(links: Sequence[Any]) -> list[dict[str, Any]]:
    out = []
    for link in links:
        ctx = link.context
        e: dict[str, Any] = {
            "traceId": format(ctx.trace_id, "032x"),
            "spanId": format(ctx.span_id, "016x"),
        }
        if link.attributes:
            e["attributes"] = _attributes(link.attributes)
        if link.dropped_attributes:
            e["droppedAttributesCount"] = link.dropped_attributes
        e["flags"] = _IS_REMOTE if ctx.is_remote else _HAS_IS_REMOTE
        out.append(e)
    return out


def encode_span(span: ReadableSpan) -> dict[str, Any]:
    """One span as the OTLP JSON ``Span`` object (plain dicts and lists)."""
    fast = _FAST.get(type(span))
    if fast is None:
        fast = _FAST[type(span)] = _reads_fields(type(span))
    if not fast:
        return _encode_public(span)
    # The SDK's own ReadableSpan or Span: its fields, not the properties that copy them.
    trace_id, span_id, _, _, state, _ = span._context  # a SpanContext is a tuple
    out: dict[str, Any] = {
        "traceId": format(trace_id, "032x"),
        "spanId": format(span_id, "016x"),
    }
    if state is not DEFAULT_TRACE_STATE and state:
        out["traceState"] = ",".join([f"{k}={v}" for k, v in state.items()])
    parent = span._parent
    if parent is not None:
        out["parentSpanId"] = format(parent[1], "016x")
        out["flags"] = _IS_REMOTE if parent[2] else _HAS_IS_REMOTE
    else:
        out["flags"] = _HAS_IS_REMOTE
    if span._name:
        out["name"] = span._name
    out["kind"] = span._kind._value_ + 1  # SDK INTERNAL=0...; OTLP INTERNAL=1...
    if span._start_time:
        out["startTimeUnixNano"] = str(span._start_time)
    if span._end_time:
        out["endTimeUnixNano"] = str(span._end_time)
    attrs = span._attributes
    if type(attrs) is BoundedAttributes:
        if attrs._dict:
            out["attributes"] = _attributes(attrs._dict)
        if attrs.dropped:
            out["droppedAttributesCount"] = attrs.dropped
    elif attrs:
        out["attributes"] = _attributes(attrs)
    events = span._events
    if type(events) is BoundedList:
        if events._dq:
            out["events"] = _events(events._dq)
        if events.dropped:
            out["droppedEventsCount"] = events.dropped
    elif events:
        out["events"] = _events(events)
    links = span._links
    if type(links) is BoundedList:
        if links._dq:
            out["links"] = _links(links._dq)
        if links.dropped:
            out["droppedLinksCount"] = links.dropped
    elif links:
        out["links"] = _links(links)
    _status(span._status, out)
    return out


def _status(status: Any, out: dict[str, Any]) -> None:
    st: dict[str, Any] = {}
    if status.description:
        st["message"] = status.description
    code = status.status_code._value_
    if code:
        st["code"] = code
    out["status"] = st


def _encode_public(span: ReadableSpan) -> dict[str, Any]:
    """:func:`encode_span` through the public properties (a span type of another kind)."""
    ctx = span.context
    out: dict[str, Any] = {
        "traceId": format(ctx.trace_id, "032x"),
        "spanId": format(ctx.span_id, "016x"),
    }
    if ctx.trace_state:
        out["traceState"] = ",".join([f"{k}={v}" for k, v in ctx.trace_state.items()])
    parent = span.parent
    if parent is not None:
        out["parentSpanId"] = format(parent.span_id, "016x")
        out["flags"] = _IS_REMOTE if parent.is_remote else _HAS_IS_REMOTE
    else:
        out["flags"] = _HAS_IS_REMOTE
    if span.name:
        out["name"] = span.name
    out["kind"] = span.kind.value + 1
    if span.start_time:
        out["startTimeUnixNano"] = str(span.start_time)
    if span.end_time:
        out["endTimeUnixNano"] = str(span.end_time)
    if span.attributes:
        out["attributes"] = _attributes(span.attributes)
    if span.dropped_attributes:
        out["droppedAttributesCount"] = span.dropped_attributes
    if span.events:
        out["events"] = _events(span.events)
    if span.dropped_events:
        out["droppedEventsCount"] = span.dropped_events
    if span.links:
        out["links"] = _links(span.links)
    if span.dropped_links:
        out["droppedLinksCount"] = span.dropped_links
    _status(span.status, out)
    return out


def encode_spans_line(spans: Sequence[ReadableSpan]) -> bytes | None:
    """``spans`` as one ``ExportTraceServiceRequest`` JSON line (ending in a newline),
    grouped by resource, then by instrumentation scope (equal ones together, as the
    official encoder's grouping by hash does), in the order they first appear; None when
    there are no spans.

    Spans are written to bytes every ``_CHUNK`` spans, so the dicts they were built from
    die young: a batch's worth of them alive at once would survive into the garbage
    collector's older generations and make it walk every live object again and again."""
    # resource -> scope -> encoded spans; equal resources (scopes) share the first's entry
    groups: dict[int, tuple[Any, dict[int, tuple[Any, list[bytes]]]]] = {}
    res_seen: dict[int, int] = {}
    scope_seen: dict[int, int] = {}
    res_firsts: list[Any] = []
    scope_firsts: list[Any] = []
    last_res = last_scope = _UNSET
    current: list[Any] = []
    for span in spans:
        if type(span) is tuple:  # a compact record (otlp_compact)
            res, scope = otlp_compact.source_of(span)
        else:
            res = span.resource
            scope = span.instrumentation_scope or None
        if res is not last_res or scope is not last_scope:
            res_key = _first_equal(res, res_seen, res_firsts)
            entry = groups.get(res_key)
            if entry is None:
                entry = groups[res_key] = (res, {})
            scope_key = _first_equal(scope, scope_seen, scope_firsts)
            hit = entry[1].get(scope_key)
            if hit is None:
                hit = entry[1][scope_key] = (scope, [])
            current = hit[1]
            last_res, last_scope = res, scope
        current.append(otlp_compact.encode(span) if type(span) is tuple else encode_span(span))
        if len(current) >= _CHUNK and type(current[-_CHUNK]) is dict:
            chunk = current[-_CHUNK:]
            del current[-_CHUNK:]
            current.append(_dumps(chunk)[1:-1])
    if not groups:
        return None
    out = [b'{"resourceSpans":[']
    for i, (res, scopes) in enumerate(groups.values()):
        out.append(b',{"resource":' if i else b'{"resource":')
        out.append(_dumps(_resource(res)))
        if res.schema_url:
            out += (b',"schemaUrl":', _dumps(res.schema_url))
        out.append(b',"scopeSpans":[')
        for j, (scope, encoded) in enumerate(scopes.values()):
            out.append(b',{"scope":' if j else b'{"scope":')
            out.append(_dumps(_scope(scope)))
            if scope is not None and scope.schema_url:
                out += (b',"schemaUrl":', _dumps(scope.schema_url))
            out += (b',"spans":[', b",".join(_as_bytes(encoded)), b"]}")
        out.append(b"]}")
    out.append(b"]}\n")
    return b"".join(out)


def _as_bytes(encoded: list[Any]) -> list[bytes]:
    """Encoded spans: chunks already written, and the dicts of the last chunk."""
    tail = [x for x in encoded if type(x) is dict]
    if not tail:
        return encoded
    return [x for x in encoded if type(x) is bytes] + [_dumps(tail)[1:-1]]


def _first_equal(obj: Any, seen: dict[int, int], firsts: list[Any]) -> int:
    """The id of the first object met equal to ``obj`` (``obj``'s own if it is the first):
    the official encoder groups by equality, and equal resources are usually one object."""
    key = seen.get(id(obj))
    if key is None:
        key = next((id(f) for f in firsts if f == obj), None)
        if key is None:
            key = id(obj)
            firsts.append(obj)
        seen[id(obj)] = key
    return key


def _dumps(obj: Any) -> bytes:
    """``obj`` as compact JSON bytes."""
    if orjson is not None:
        try:
            return orjson.dumps(obj)
        except TypeError:  # a lone surrogate: the standard library escapes it
            pass
    return json.dumps(obj, separators=(",", ":")).encode("ascii")


def dumps_line(doc: Mapping[str, Any]) -> bytes:
    """``doc`` as one compact JSON line ending in a newline."""
    return _dumps(doc) + b"\n"


__all__ = ["dumps_line", "encode_span", "encode_spans_line"]
