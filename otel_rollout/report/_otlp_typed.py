"""OTLP JSON lines decoded straight into typed records (``msgspec``): the report's fast path.

The shape is strict: a line the general reader (:mod:`._documents`) would read otherwise
is not decoded here (:func:`typed_rows` answers None), so both give the same rows,
warnings and losses (``tests/report/test_report_fast_path.py``; keep :func:`_rows` in step
with ``_documents._otlp_spans``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType
from opentelemetry.trace import StatusCode

from otel_rollout import attributes as A
from otel_rollout.report._documents import RUN_ID, _decode_id
from otel_rollout.report._model import RawSpan, Row

_UNSET: Any = object()
#: Attributes that make the assembler read a span's others.
WHOLE_SPAN_KEYS = frozenset({
    A.TRAJECTORY_ID, A.BATCH_ID, A.STEP_WALL, A.STEP_PHASE,
    A.VLLM_TIME_IN_QUEUE, A.VLLM_TIME_IN_PREFILL, A.VLLM_TIME_IN_DECODE,
})  # fmt: skip


class _Array(Struct, gc=False):
    values: list[_Value] = []


class _Value(Struct, gc=False):
    stringValue: str | UnsetType = UNSET
    intValue: int | UnsetType = UNSET  # a text of digits too: see _decoder
    doubleValue: float | UnsetType = UNSET
    boolValue: Raw | UnsetType = UNSET  # the JSON as written: see _value
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
    startTimeUnixNano: int | None = None
    endTimeUnixNano: int | None = None
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


#: Not strict: an int written as a text of digits (OTLP JSON's int64) and a double
#: written as "NaN" are converted as ``int()`` and ``float()`` do. Not booleans
#: (``bool("false")`` is the general reader's True): those are kept as written.
_decoder = msgspec.json.Decoder(_Document, strict=False)
_json = msgspec.json.decode


_TRUE, _FALSE = b"true", b"false"


def _value(v: Any) -> Any:
    if v.stringValue is not UNSET:
        return v.stringValue
    if v.intValue is not UNSET:
        return v.intValue
    if v.doubleValue is not UNSET:
        return v.doubleValue
    if v.boolValue is not UNSET:  # as the general reader: bool() of what is written
        raw = bytes(v.boolValue)
        return True if raw == _TRUE else False if raw == _FALSE else bool(_json(raw))
    if v.arrayValue is not UNSET:
        return tuple(_value(x) for x in v.arrayValue.values)
    return None


def _attrs(values: dict[str, Any]) -> dict[str, Any]:
    """``key -> _Value`` (the last of a repeated key) as the general reader has them."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        if v is UNSET:
            out[k] = None
        else:
            text = v.stringValue  # the usual value: without a call
            out[k] = text if text is not UNSET else _value(v)
    return out


def _resources(doc: Any) -> Iterator[tuple[str | None, str | None, Sequence[Any]]]:
    """(service, run id, spans) of each resource of a decoded line."""
    for rs in doc.resourceSpans or ():
        if rs.scopeSpans is UNSET and rs.instrumentationLibrarySpans is not UNSET:
            raise ValueError  # the general reader takes it
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
    return RawSpan(
        trace_id=trace_id,
        span_id=span_id,
        parent_id=parent_id,
        name="" if sp.name is UNSET else sp.name,
        start_ns=sp.startTimeUnixNano or 0,
        end_ns=sp.endTimeUnixNano or None,
        attributes=attributes,
        status_code=StatusCode.ERROR if code in (2, "STATUS_CODE_ERROR") else None,
        service=service,
        run_id=run,
    )


def _rows(doc: Any) -> list[Row]:
    """The rows of a decoded line; raises where the general reader would read it otherwise
    (the decoder converted every value as it does, or failed the line)."""
    out: list[Row] = []
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
                raise ValueError  # the general reader takes it
            phase = span = None
            read_all = False
            for kv in sp.attributes or ():  # the last of a repeated key, as in a dict
                key = kv.key
                if key == phase_key:
                    phase = kv.value
                elif key in keys:
                    read_all = True
            span_id = from_bytes(span_bytes)
            if read_all:
                span = _raw_span(sp, trace_id, span_id, parent_id, _attributes(sp.attributes),
                                 service, run)  # fmt: skip
            if phase is not None:
                if phase is UNSET:
                    phase = None
                elif phase.stringValue is not UNSET:
                    phase = phase.stringValue
                else:
                    phase = _value(phase)
                    phase = None if phase is None else str(phase)
            add((trace_id, span_id, parent_id, "" if sp.name is UNSET else sp.name,
                 sp.startTimeUnixNano or 0, sp.endTimeUnixNano or None, phase, span))  # fmt: skip
    return out


def _attributes(kvs: list[Any] | None) -> dict[str, Any]:
    return _attrs({kv.key: kv.value for kv in kvs or ()})


def typed_rows(line: bytes | memoryview) -> list[Row] | None:
    """The rows of one OTLP JSON line, or None: not decodable here (see the module), or
    no spans (a loss record, an empty batch): the general reader takes it then."""
    try:
        doc = _decoder.decode(line)
        if doc.resourceSpans is UNSET or any(
            x is not UNSET for x in (doc.batches, doc.data, doc.trace, doc.result)
        ):
            return None
        out = _rows(doc)
    except Exception:  # the general reader says what is wrong, or reads it its way
        return None
    return out or None
