"""Ended spans as compact records: the trace file's export queue holds these.

A queue of a hundred thousand spans (the trace file's burst room, filled while a disk
does not answer) is millions of objects the garbage collector walks at each full
collection, stopping every thread for hundreds of milliseconds. :func:`compact_span`
turns a span into one flat tuple of plain values (ids, times, then its attributes as
key, value, key, value...), which the collector stops tracking at the first collection
that sees it. Flat, because a tuple is untracked only once everything in it is: a
record holding a tuple of pairs stayed tracked through two or three collections, long
enough to be moved into the oldest generation, where it stayed tracked until the next
full collection (and made full collections come sooner);
:func:`otel_rollout._export.otlp_json.encode_spans_line` encodes such records as it does
spans (``tests/export/test_otlp_json_conformance.py`` checks both against the official
encoder).
"""

from __future__ import annotations

import os
import threading
from itertools import chain
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace.span import DEFAULT_TRACE_STATE

from otel_rollout._export.otlp_values import (
    _FAST,
    _HAS_IS_REMOTE,
    _IS_REMOTE,
    _attributes,
    _reads_fields,
)

#: Resources and scopes of compact records (:func:`compact_span`), by index; kept alive
#: here, so their ids stay theirs. A process has a handful; past the bound, spans stay
#: spans.
_SOURCES: list[tuple[Any, Any]] = []
_SOURCE_INDEX: dict[tuple[int, int], int] = {}
_SOURCES_LOCK = threading.Lock()
MAX_SOURCES = 256


def _after_fork() -> None:
    global _SOURCES_LOCK
    _SOURCES_LOCK = threading.Lock()  # a fork while another thread held it


os.register_at_fork(after_in_child=_after_fork)


def _source_index(resource: Any, scope: Any) -> int | None:
    with _SOURCES_LOCK:
        key = (id(resource), id(scope))
        i = _SOURCE_INDEX.get(key)
        if i is None and len(_SOURCES) < MAX_SOURCES:
            i = _SOURCE_INDEX[key] = len(_SOURCES)
            _SOURCES.append((resource, scope))
        return i


#: Fields of a record before its attributes (key, value, key, value...), events (name,
#: time, dropped attributes, attribute count, then key, value... each) and links (trace
#: id, span id, remote, dropped attributes, attribute count, then key, value... each).
_FIXED = 17


def _compact_attrs(attrs: Any) -> tuple[Any, int] | None:
    # keys and values, not the dict: the collector never stops tracking a tuple that
    # holds a dict
    if type(attrs) is BoundedAttributes:
        return tuple(chain.from_iterable(attrs._dict.items())), attrs.dropped
    if attrs is None:
        return (), 0
    return None if not isinstance(attrs, dict) else (tuple(chain.from_iterable(attrs.items())), 0)


def compact_span(span: ReadableSpan) -> Any:
    """An ended span as one flat tuple of plain values (see :data:`_FIXED`), which
    ``encode_spans_line`` encodes as it would the span; the span itself when it is of
    another kind (or past :data:`MAX_SOURCES` resources and scopes)."""
    cls = type(span)
    fast = _FAST.get(cls)
    if fast is None:
        fast = _FAST[cls] = _reads_fields(cls)
    if not fast:
        return span
    key = (id(span._resource), id(span._instrumentation_scope))
    source = _SOURCE_INDEX.get(key)
    if source is None:
        source = _source_index(span._resource, span._instrumentation_scope)
        if source is None:
            return span
    attrs = _compact_attrs(span._attributes)
    if attrs is None:
        return span
    trace_id, span_id, _, _, state, _ = span._context
    parent = span._parent
    events = span._events
    links = span._links
    if type(events) is not BoundedList or type(links) is not BoundedList:
        return span
    status = span._status
    flat_events = _flat_events(events._dq) if events._dq else ()
    return (
        (
            source,
            trace_id,
            span_id,
            ",".join([f"{k}={v}" for k, v in state.items()])
            if state is not DEFAULT_TRACE_STATE and state
            else "",
            None if parent is None else parent[1],
            parent is not None and parent[2],
            span._name,
            span._kind._value_ + 1,
            span._start_time,
            span._end_time,
            attrs[1],
            len(attrs[0]),
            len(flat_events),
            events.dropped,
            links.dropped,
            status.status_code._value_,
            status.description,
        )
        + attrs[0]
        + flat_events
        + (_flat_links(links._dq) if links._dq else ())
    )


def _flat_events(events: Any) -> tuple[Any, ...]:
    out: list[Any] = []
    for e in events:
        attrs = e.attributes
        out += (e.name, e.timestamp, e.dropped_attributes, len(attrs) if attrs else 0)
        if attrs:
            out += chain.from_iterable(attrs.items())
    return tuple(out)


def _flat_links(links: Any) -> tuple[Any, ...]:
    out: list[Any] = []
    for x in links:
        ctx = x.context
        attrs = x.attributes
        out += (ctx.trace_id, ctx.span_id, ctx.is_remote, x.dropped_attributes,
                len(attrs) if attrs else 0)  # fmt: skip
        if attrs:
            out += chain.from_iterable(attrs.items())
    return tuple(out)


def _pairs(r: tuple[Any, ...], i: int, n: int) -> tuple[tuple[Any, Any], ...]:
    """The ``n`` (key, value) pairs of ``r`` from index ``i``."""
    end = i + 2 * n
    return tuple(zip(r[i:end:2], r[i + 1 : end : 2], strict=True))


def source_of(record: Any) -> tuple[Any, Any]:
    """(resource, instrumentation scope or None) of a span or of its compact record."""
    if type(record) is tuple:
        res, scope = _SOURCES[record[0]]
        return res, scope or None
    return record.resource, record.instrumentation_scope or None


def encode(r: tuple[Any, ...]) -> dict[str, Any]:
    """:func:`encode_span` of a :func:`compact_span` record."""
    (_, trace_id, span_id, state, parent, remote, name, kind, start, end, dropped_attrs,
     n_attrs, n_events, dropped_events, dropped_links, code, message) = r[:_FIXED]  # fmt: skip
    out: dict[str, Any] = {"traceId": format(trace_id, "032x"), "spanId": format(span_id, "016x")}
    if state:
        out["traceState"] = state
    if parent is not None:
        out["parentSpanId"] = format(parent, "016x")
        out["flags"] = _IS_REMOTE if remote else _HAS_IS_REMOTE
    else:
        out["flags"] = _HAS_IS_REMOTE
    if name:
        out["name"] = name
    out["kind"] = kind
    if start:
        out["startTimeUnixNano"] = str(start)
    if end:
        out["endTimeUnixNano"] = str(end)
    if n_attrs:
        out["attributes"] = _attributes(_pairs(r, _FIXED, n_attrs // 2))
    if dropped_attrs:
        out["droppedAttributesCount"] = dropped_attrs
    i = _FIXED + n_attrs
    if n_events:
        out["events"] = events = []
        while i < _FIXED + n_attrs + n_events:
            name, ts, dropped, n = r[i : i + 4]
            events.append(_event_dict(name, ts, _pairs(r, i + 4, n), dropped))
            i += 4 + 2 * n
    if dropped_events:
        out["droppedEventsCount"] = dropped_events
    if i < len(r):
        out["links"] = links = []
        while i < len(r):
            trace, span, remote, dropped, n = r[i : i + 5]
            links.append(_link_dict(trace, span, remote, _pairs(r, i + 5, n), dropped))
            i += 5 + 2 * n
    if dropped_links:
        out["droppedLinksCount"] = dropped_links
    st: dict[str, Any] = {}
    if message:
        st["message"] = message
    if code:
        st["code"] = code
    out["status"] = st
    return out


def _event_dict(name: str, ts: int, attrs: Any, dropped: int) -> dict[str, Any]:
    e: dict[str, Any] = {}
    if ts:
        e["timeUnixNano"] = str(ts)
    if name:
        e["name"] = name
    if attrs:
        e["attributes"] = _attributes(attrs)
    if dropped:
        e["droppedAttributesCount"] = dropped
    return e


def _link_dict(trace_id: int, span_id: int, remote: bool, attrs: Any,
               dropped: int) -> dict[str, Any]:  # fmt: skip
    e: dict[str, Any] = {"traceId": format(trace_id, "032x"), "spanId": format(span_id, "016x")}
    if attrs:
        e["attributes"] = _attributes(attrs)
    if dropped:
        e["droppedAttributesCount"] = dropped
    e["flags"] = _IS_REMOTE if remote else _HAS_IS_REMOTE
    return e


__all__ = ["compact_span", "encode", "source_of"]
