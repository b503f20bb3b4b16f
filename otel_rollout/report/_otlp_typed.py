"""OTLP JSON lines decoded straight into typed records: the report's fast path.

``msgspec`` decodes a trace-file line against the OTLP JSON shape below without building a
dict per object; its structs are not tracked by the cyclic collector (they hold no
cycles). The shape is strict: a line with anything the general reader (:mod:`._documents`)
would treat differently (another document kind, a field of an unexpected JSON type, a
span id not 16 hex digits, no spans at all, as in a loss record) is not decoded here, and
a value the general reader would fail to convert (an ``intValue`` ``int()`` does not take)
fails the line here too, even where the report does not use it: :func:`typed_rows` /
:func:`typed_spans` answer None and the line goes the general way, so both ways give the
same spans, warnings and losses.
``tests/report/test_report_fast_path.py`` checks they agree; keep :func:`_resources` and
:func:`_rows` in step with ``_documents._otlp_spans``.

:func:`typed_rows` is what the report reads with: a :data:`~._model.Row` per span, and a
whole :class:`RawSpan` only for the few spans whose attributes the assembler reads
(roots, batch spans, spans with engine timings); the attributes of the others are only
looked at for their phase.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from opentelemetry.trace import StatusCode

from otel_rollout import attributes as A
from otel_rollout._base.compiled import speedups
from otel_rollout.report._documents import RUN_ID, _decode_id
from otel_rollout.report._model import RawSpan, Row

try:
    import msgspec
    from msgspec import UNSET, Raw, Struct, UnsetType
except ImportError:  # pragma: no cover - the general reader does it all
    msgspec = None
    Struct = object  # type: ignore[assignment,misc]

_UNSET: Any = object()
#: Attributes that make the assembler read a span's others (see the module).
WHOLE_SPAN_KEYS = frozenset({
    A.TRAJECTORY_ID, A.BATCH_ID,
    A.VLLM_TIME_IN_QUEUE, A.VLLM_TIME_IN_PREFILL, A.VLLM_TIME_IN_DECODE,
})  # fmt: skip

if msgspec is not None:

    class _Array(Struct, gc=False):
        values: list[_Value] = []  # noqa: RUF012 (msgspec copies defaults)

    class _Value(Struct, gc=False):
        stringValue: str | UnsetType = UNSET
        intValue: int | str | UnsetType = UNSET
        doubleValue: float | str | UnsetType = UNSET
        boolValue: bool | UnsetType = UNSET
        arrayValue: _Array | UnsetType = UNSET

    class _KeyValue(Struct, gc=False):
        key: str
        value: _Value | UnsetType = UNSET

    class _Status(Struct, gc=False):
        code: Any = None

    class _Span(Struct, gc=False):
        traceId: str
        spanId: str
        parentSpanId: str | None = None
        name: str | UnsetType | None = UNSET
        startTimeUnixNano: int | str | None = None
        endTimeUnixNano: int | str | None = None
        attributes: list[_KeyValue] | None = None
        status: _Status | None = None

    class _ScopeSpans(Struct, gc=False):
        spans: list[_Span] | None = None

    class _Resource(Struct, gc=False):
        attributes: list[_KeyValue] | None = None

    class _ResourceSpans(Struct, gc=False):
        resource: _Resource | UnsetType = UNSET
        scopeSpans: list[_ScopeSpans] | UnsetType | None = UNSET
        instrumentationLibrarySpans: Raw | UnsetType = UNSET

    class _Document(Struct, gc=False):
        resourceSpans: list[_ResourceSpans] | UnsetType | None = UNSET
        batches: Raw | UnsetType = UNSET
        data: Raw | UnsetType = UNSET
        trace: Raw | UnsetType = UNSET
        result: Raw | UnsetType = UNSET

    _decoder = msgspec.json.Decoder(_Document)


def _value(v: Any) -> Any:
    if v.stringValue is not UNSET:
        return v.stringValue
    if v.intValue is not UNSET:
        return int(v.intValue)
    if v.doubleValue is not UNSET:
        return float(v.doubleValue)
    if v.boolValue is not UNSET:
        return v.boolValue
    if v.arrayValue is not UNSET:
        return tuple(_value(x) for x in v.arrayValue.values)
    return None


def _attrs(values: dict[str, Any]) -> dict[str, Any]:
    """Attribute values (``key -> _Value``, the last of a repeated key) as the general
    reader has them."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        if v is UNSET:
            out[k] = None
        else:
            text = v.stringValue  # the usual value: without a call
            out[k] = text if text is not UNSET else _value(v)
    return out


class _Unusual(Exception):
    """A line the general reader should take."""


def _resources(doc: Any) -> Iterator[tuple[str | None, str | None, list[Any]]]:
    """(service, run id, spans) of each resource of a decoded line."""
    for rs in doc.resourceSpans or ():
        if rs.scopeSpans is UNSET and rs.instrumentationLibrarySpans is not UNSET:
            raise _Unusual
        res = rs.resource
        resource = _attributes(res.attributes if res is not UNSET else None)
        service = resource.get("service.name")
        run_id = resource.get(RUN_ID)
        run = None if run_id is None else str(run_id)
        for ss in rs.scopeSpans or ():
            yield service, run, ss.spans or ()


def _raw_span(sp: Any, trace_id: str, span_id: int, parent_id: int | None,
              attributes: dict[str, Any], service: str | None,
              run: str | None) -> RawSpan:  # fmt: skip
    code = sp.status.code if sp.status is not None else None
    end = int(sp.endTimeUnixNano or 0)
    return RawSpan(
        trace_id=trace_id,
        span_id=span_id,
        parent_id=parent_id,
        name="" if sp.name is UNSET else sp.name,
        start_ns=int(sp.startTimeUnixNano or 0),
        end_ns=end or None,
        attributes=attributes,
        status_code=StatusCode.ERROR if code in (2, "STATUS_CODE_ERROR") else None,
        service=service,
        run_id=run,
    )


def _rows(doc: Any, whole: bool) -> list[Any]:
    """Rows (``whole``: :class:`RawSpan` s) of a decoded line; raises where the general
    reader would fail or read it otherwise."""
    out: list[Any] = []
    add = out.append
    phase_key = A.PHASE
    keys = WHOLE_SPAN_KEYS
    fromhex = bytes.fromhex
    from_bytes = int.from_bytes
    # a trace id comes back on every span of its trajectory, a root's span id on each of
    # its children: decoded once per line
    traces: dict[str, str] = {}
    parents: dict[str | None, int | None] = {}
    for service, run, spans in _resources(doc):
        for sp in spans:
            raw = sp.parentSpanId
            parent_id = parents.get(raw, _UNSET)
            if parent_id is _UNSET:
                parent = _decode_id(raw, 16)
                parent_id = parents[raw] = int(parent, 16) if parent else None
            trace_id = traces.get(sp.traceId)
            if trace_id is None:
                trace_id = traces[sp.traceId] = _decode_id(sp.traceId, 32)
            span_hex = sp.spanId
            span_bytes = fromhex(span_hex)  # hex digits only: else the general reader's
            if len(span_hex) != 16 or len(span_bytes) != 8:
                raise _Unusual
            span_id = from_bytes(span_bytes)
            end = int(sp.endTimeUnixNano or 0) or None
            start = int(sp.startTimeUnixNano or 0)
            phase = span = None
            read_all = whole
            for kv in sp.attributes or ():  # the last of a repeated key, as in a dict
                key = kv.key
                v = kv.value
                if key == phase_key:
                    phase = v
                elif key in keys:
                    read_all = True
                if v is not UNSET and v.stringValue is UNSET:
                    # int() or float() fails here as in the general reader
                    number = v.intValue
                    if number is UNSET:
                        if v.doubleValue.__class__ is not float:  # a JSON number: no check
                            _value(v)
                    elif number.__class__ is str:
                        int(number)
            if read_all:
                span = _raw_span(sp, trace_id, span_id, parent_id, _attributes(sp.attributes),
                                 service, run)  # fmt: skip
                if whole:
                    add(span)
                    continue
            if phase is not None:
                if phase is UNSET:
                    phase = None
                elif phase.stringValue is not UNSET:
                    phase = phase.stringValue
                else:
                    phase = _value(phase)
                    phase = None if phase is None else str(phase)
            add((trace_id, span_id, parent_id, "" if sp.name is UNSET else sp.name,
                 start, end, phase, span))  # fmt: skip
    return out


def _check_value(v: Any) -> None:
    _value(v)


def _phase_value(v: Any) -> str | None:
    value = _value(v)
    return None if value is None else str(value)


def _whole_span(sp: Any, trace_id: str, span_id: int, parent_id: int | None,
                service: str | None, run: str | None) -> RawSpan:  # fmt: skip
    return _raw_span(sp, trace_id, span_id, parent_id, _attributes(sp.attributes), service,
                     run)  # fmt: skip


def _kv_attrs(kvs: list[Any] | None) -> dict[str, Any]:
    return _attrs({kv.key: kv.value for kv in kvs or ()})


def _parent_miss(raw: str | None) -> int | None:
    parent = _decode_id(raw, 16)
    return int(parent, 16) if parent else None


def _trace_miss(raw: str) -> str:
    return _decode_id(raw, 32)


def _compiled_rows(doc: Any) -> list[Any]:
    """:func:`_rows` of a line's rows (not whole spans), the span loop in C."""
    out: list[Any] = []
    traces: dict[str, str] = {}
    parents: dict[str | None, int | None] = {}
    for service, run, spans in _resources(doc):
        if spans:
            _span_rows(spans, out, traces, parents, service, run)
    return out


def _known_names() -> dict[str, str]:
    """The attribute names and values this package defines, each its own key: the objects
    the C loops share with the rows and spans they keep (see ``shared`` there)."""
    return {v: v for v in vars(A).values() if isinstance(v, str)}


#: What the C loops share (see _known_names); they add to it, up to 4,096 names.
_names = _known_names()
_span_rows: Any = None
_attributes: Any = _kv_attrs
if msgspec is not None and (_c := speedups()) is not None:
    _c.configure_rows(_Span, _KeyValue, _Value, _Array, UNSET, A.PHASE, WHOLE_SPAN_KEYS,
                      _trace_miss, _parent_miss, _check_value, _phase_value, _whole_span,
                      _value, _names)  # fmt: skip
    _span_rows = _c.span_rows
    _attributes = _c.attributes


def _decode(line: bytes, whole: bool) -> list[Any] | None:
    if msgspec is None:
        return None
    try:
        doc = _decoder.decode(line)
        if doc.resourceSpans is UNSET or any(
            x is not UNSET for x in (doc.batches, doc.data, doc.trace, doc.result)
        ):
            return None
        out = _rows(doc, whole) if whole or _span_rows is None else _compiled_rows(doc)
    except Exception:  # the general reader says what is wrong, or reads it its way
        return None
    return out or None


def typed_rows(line: bytes) -> list[Row] | None:
    """The rows of one OTLP JSON line, or None: not decodable here (see the module), or
    no spans (a loss record, an empty batch): the general reader takes it then."""
    return _decode(line, False)


def typed_spans(line: bytes) -> list[RawSpan] | None:
    """The spans of one OTLP JSON line, or None as for :func:`typed_rows`."""
    return _decode(line, True)
