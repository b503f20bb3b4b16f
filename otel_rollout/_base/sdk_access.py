"""The one module that reads the OpenTelemetry SDK's private state.

Each reader here saves a cost a benchmark showed on a path every span takes (the figure is
beside it); each falls back to the public API where the field is gone, so an SDK that
renames one is slower, never wrong. ``tests/base/test_sdk_access.py`` checks that each
reads what the public API answers, on the newest SDK of the main venv and on the oldest
the project supports (``opentelemetry-sdk==1.30.0``, ``.ci/steps/11-oldest-sdk.sh``).
Nothing here writes SDK state.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar, Token
from types import MappingProxyType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util import BoundedList

EMPTY: Mapping[str, Any] = MappingProxyType({})

# --- Span fields in the breakdown processor's hooks -------------------------------------------
# ``span.attributes`` is a new read-only view on each read (of an ended span) over
# BoundedAttributes, whose ``in``/``get`` are Python methods; ``span.parent`` and
# ``get_span_context()`` are Python calls. The hooks run for every span of every
# trajectory: reading the fields saves 2.6 us of the 26.4 us a span of a 10-turn trajectory
# costs in all, 10% (benchmarks/sdk_access.py, 2-core machine under load, SDK 1.45).


def attributes(span: Any) -> Mapping[str, Any]:
    """A span's attributes, as the SDK's plain dict when it has one (live: what is set
    later is read later)."""
    try:
        return span._attributes._dict
    except AttributeError:
        return span.attributes or EMPTY


def started(span: Any) -> tuple[Mapping[str, Any], Any, Any, int | None]:
    """(attributes, parent span context or None, span context, start time) of a span in
    ``on_start``; span contexts index as tuples (span id at 1)."""
    try:
        return span._attributes._dict, span._parent, span._context, span._start_time
    except AttributeError:
        return span.attributes or EMPTY, span.parent, span.get_span_context(), span.start_time


def ended(span: Any) -> tuple[int, int, Mapping[str, Any]]:
    """(span id, end time, attributes) of a span in ``on_end`` (ended: its end time is set)."""
    try:
        return span._context[1], span._end_time, span._attributes._dict
    except AttributeError:
        return span.context.span_id, span.end_time, span.attributes or EMPTY


# --- The current context in a phase's enter and exit -----------------------------------------
# The API's ``get_current``, ``attach`` and ``detach`` are two Python calls each; a phase
# reads, sets and resets the ContextVar underneath directly: 0.7 us of 25.1 us per span,
# 3% (benchmarks/sdk_access.py). ``detach_quietly`` is also what keeps an async generator
# closed in another task from logging the API's "Failed to detach context" error.


def context_var() -> ContextVar[Context] | None:
    """The ContextVar holding OpenTelemetry's current context under its default runtime
    context, or None under another one (then use the API)."""
    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    var = getattr(runtime, "_current_context", None)
    if type(runtime).__name__ != "ContextVarsRuntimeContext" or not isinstance(var, ContextVar):
        return None
    return var


def detach_quietly(token: Token[Context]) -> None:
    """Detach an OpenTelemetry context token; a no-op where the exit runs in another
    context than the entry (an async generator closed by the event loop in a task of its
    own), which ``opentelemetry.context.detach`` would log as an error."""
    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    if runtime is None:
        otel_context.detach(token)
        return
    try:  # noqa: SIM105 (contextlib.suppress costs more, and this runs for every span)
        runtime.detach(token)
    except (ValueError, RuntimeError):
        pass


# --- Span fields for the trace file's encoder ------------------------------------------------
# The public properties copy (``events`` and ``links`` into new tuples, ``attributes`` into
# a view): encoding a span from its fields costs 6.9 us against 10.6 us through the
# properties, 35% less (benchmarks/sdk_access.py), on the thread that shares the
# interpreter with the agent loop.

_PROPERTIES = ("context", "parent", "name", "kind", "start_time", "end_time", "attributes",
               "events", "links", "status", "dropped_attributes", "dropped_events",
               "dropped_links", "resource", "instrumentation_scope")  # fmt: skip
#: span type -> whether its public fields are the SDK's plain ones (a cache by class)
_PLAIN: dict[type, bool] = {}


def _items(bounded: Any, plain: type[Any], field: str) -> tuple[Any, int]:
    if type(bounded) is plain:
        return getattr(bounded, field), bounded.dropped
    return (bounded or ()), 0


def public_fields(span: Any) -> tuple[Any, ...]:
    """:func:`span_fields` through the public properties."""
    return (span.context, span.parent, span.name, span.kind, span.start_time, span.end_time,
            span.attributes, span.dropped_attributes, span.events, span.dropped_events,
            span.links, span.dropped_links, span.status)  # fmt: skip


def span_fields(span: Any) -> tuple[Any, ...]:
    """``(context, parent, name, kind, start_time, end_time, attributes, dropped
    attributes, events, dropped events, links, dropped links, status)`` of a span, read
    from the SDK's fields; through the properties for a span type that overrides them.
    Span contexts are tuples (span id at 1)."""
    cls = type(span)
    plain = _PLAIN.get(cls)
    if plain is None:
        plain = _PLAIN[cls] = issubclass(cls, ReadableSpan) and all(
            getattr(cls, f, None) is getattr(ReadableSpan, f) for f in _PROPERTIES
        )
    if not plain:
        return public_fields(span)
    attrs, dropped_attrs = _items(span._attributes, BoundedAttributes, "_dict")
    events, dropped_events = _items(span._events, BoundedList, "_dq")
    links, dropped_links = _items(span._links, BoundedList, "_dq")
    return (span._context, span._parent, span._name, span._kind, span._start_time,
            span._end_time, attrs, dropped_attrs, events, dropped_events, links,
            dropped_links, span._status)  # fmt: skip
