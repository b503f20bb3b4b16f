"""Trace JSON documents back into spans: OTLP/JSON (one ``ExportTraceServiceRequest`` a
line), Tempo's trace JSON (the same under ``batches``), Jaeger's ``{"data": [...]}``."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry.trace import StatusCode

from otel_rollout import attributes as A
from otel_rollout.report._model import LOSS_ODD_VALUE, MAX_TIME_NS, RawSpan, TraceReadError

_HEX = re.compile(r"[0-9a-fA-F]+")
#: The resource attribute that names a run (set by configure() in every process).
RUN_ID = "rollout.run.id"
#: A span that cannot be read (a bad id or time, not an object): skipped, counted.
LOSS_BAD_SPAN = "spans rejected: unreadable (a bad id or time)"
#: An attribute whose key is not text (a number, null): skipped, counted.
LOSS_ODD_KEY = LOSS_ODD_VALUE + "attribute keys that are not text"

Lose = Callable[[str], object]


def _decode_id(raw: Any, width: int) -> str:
    s = str(raw or "")
    if not s:
        return ""
    if len(s) == width and _HEX.fullmatch(s):
        return s.lower()
    try:  # protobuf JSON encodes bytes as base64 (Tempo)
        return base64.b64decode(s).hex().rjust(width, "0")
    except Exception as exc:
        raise TraceReadError(f"bad id {s!r}") from exc


def _value(v: Mapping[str, Any]) -> Any:
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return _int(v["intValue"])
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "arrayValue" in v:
        return tuple(_value(x) for x in v["arrayValue"].get("values", []))
    return None


def _int(raw: Any) -> int:
    """An ``intValue``: digits, or a whole number written with an exponent or a fraction
    (``"1e5"``, ``"1.0"``), as protobuf's JSON takes it (and the fast reader)."""
    try:
        return int(raw)
    except ValueError:
        number = float(raw)
        if not number.is_integer():
            raise
        return int(number)


def _attrs(kvs: Iterable[Mapping[str, Any]] | None, lose: Lose | None = None) -> dict[str, Any]:
    """Attributes as a dict; one whose key is not text, or whose value is not one
    (``intValue`` of a text ``int()`` does not take), is skipped (``lose`` counts it)."""
    out: dict[str, Any] = {}
    for kv in kvs or ():
        key = kv.get("key") if isinstance(kv, Mapping) else None
        if key.__class__ is not str:
            if lose is not None:
                lose(LOSS_ODD_KEY)
            continue
        try:
            out[key] = _value(kv.get("value") or {})
        except (TypeError, ValueError, OverflowError, AttributeError):
            if lose is not None:  # an intValue int() does not take, a value not an object
                lose(LOSS_ODD_VALUE + key)
    return out


def _otlp_spans(doc: Mapping[str, Any], lose: Lose | None = None) -> list[RawSpan]:
    """The spans of an OTLP JSON document; with ``lose``, one that cannot be read is
    skipped and counted (:data:`LOSS_BAD_SPAN`), without, it raises."""
    out: list[RawSpan] = []
    for rs in doc.get("resourceSpans", doc.get("batches", [])) or []:
        scopes = rs.get("scopeSpans", rs.get("instrumentationLibrarySpans", [])) or []
        if not any(ss.get("spans") for ss in scopes):
            continue  # a loss record (read by loss_records), an empty batch
        res = rs.get("resource")
        resource = _attrs(res.get("attributes") if isinstance(res, Mapping) else None, lose)
        service = resource.get("service.name")
        run_id = resource.get(RUN_ID)
        run = None if run_id is None else str(run_id)
        for ss in scopes:
            for sp in ss.get("spans", []) or []:
                try:
                    out.append(_span(sp, service, run, lose))
                except (TraceReadError, KeyError, TypeError, ValueError, AttributeError,
                        OverflowError):  # fmt: skip
                    if lose is None:
                        raise
                    lose(LOSS_BAD_SPAN)
    return out


def _span(sp: Mapping[str, Any], service: Any, run: str | None, lose: Lose | None) -> RawSpan:
    parent = _decode_id(sp.get("parentSpanId"), 16)
    end = _int(sp.get("endTimeUnixNano") or 0)
    code = (sp.get("status") or {}).get("code")
    return RawSpan(
        trace_id=_decode_id(sp["traceId"], 32),
        span_id=int(_decode_id(sp["spanId"], 16), 16),
        parent_id=int(parent, 16) if parent else None,
        name=sp.get("name", ""),
        start_ns=_int(sp.get("startTimeUnixNano") or 0),
        end_ns=end or None,
        attributes=_attrs(sp.get("attributes"), lose),
        status_code=StatusCode.ERROR if code in (2, "STATUS_CODE_ERROR") else None,
        service=service,
        run_id=run,
    )


def loss_records(doc: Any, lose: Lose | None = None) -> list[tuple[str, dict[str, int]]]:
    """The trace file's loss records in an OTLP JSON document: (writer, cumulative spans
    lost per reason) of each resource without spans that carries ``rollout.export.lost.*``
    counts; an odd count or key is skipped (and counted with ``lose``)."""
    out: list[tuple[str, dict[str, int]]] = []
    if not isinstance(doc, Mapping):
        return out
    for rs in doc.get("resourceSpans") or ():
        if not isinstance(rs, Mapping) or rs.get("scopeSpans"):
            continue  # a record holds no spans
        try:
            attrs = _attrs((rs.get("resource") or {}).get("attributes"), lose)
        except (AttributeError, TypeError, KeyError, ValueError, OverflowError):
            continue
        prefix = A.EXPORT_LOST_PREFIX
        counts = {}
        for k, v in attrs.items():
            if k.startswith(prefix):
                if v.__class__ is int and 0 <= v <= MAX_TIME_NS:
                    counts[k[len(prefix) :]] = v
                elif lose is not None:
                    lose(LOSS_ODD_VALUE + k)
        if not counts:
            continue
        writer = attrs.get(A.EXPORT_WRITER_ID) or "/".join(
            str(attrs.get(k)) for k in ("service.instance.id", "process.pid", "rollout.run.id")
        )
        out.append((str(writer), counts))
    return out


def _jaeger_spans(doc: Mapping[str, Any]) -> list[RawSpan]:
    out: list[RawSpan] = []
    for tr in doc.get("data", []) or []:
        procs = tr.get("processes", {}) or {}
        for sp in tr.get("spans", []) or []:
            parent = None
            for ref in sp.get("references", []) or []:
                if ref.get("refType") == "CHILD_OF":
                    parent = int(ref["spanID"], 16)
            tags = {t["key"]: t.get("value") for t in sp.get("tags", []) or []}
            start = int(sp["startTime"]) * 1000
            err = tags.get("otel.status_code") == "ERROR" or tags.get("error") is True
            proc = procs.get(sp.get("processID"), {}) or {}
            ptags = {t.get("key"): t.get("value") for t in proc.get("tags", []) or []}
            out.append(
                RawSpan(
                    trace_id=sp["traceID"].rjust(32, "0"),
                    span_id=int(sp["spanID"], 16),
                    parent_id=parent,
                    name=sp.get("operationName", ""),
                    start_ns=start,
                    end_ns=start + int(sp.get("duration", 0)) * 1000,
                    attributes=tags,
                    status_code=StatusCode.ERROR if err else None,
                    service=proc.get("serviceName"),
                    run_id=None if ptags.get(RUN_ID) is None else str(ptags[RUN_ID]),
                )
            )
    return out


def spans_from_document(doc: Any, lose: Lose | None = None) -> list[RawSpan]:
    """Spans of one parsed JSON document: OTLP/JSON, Tempo's trace JSON or Jaeger's
    (``lose`` counts what is skipped in it: see :func:`_attrs`)."""
    if not isinstance(doc, Mapping):
        raise TraceReadError("expected a JSON object")
    if "data" in doc:
        return _jaeger_spans(doc)
    if "trace" in doc and isinstance(doc["trace"], Mapping):  # Tempo v2 API
        doc = doc["trace"]
    elif "result" in doc and isinstance(doc["result"], Mapping):  # Jaeger /api/v3
        doc = doc["result"]
    if "resourceSpans" in doc or "batches" in doc:
        return _otlp_spans(doc, lose)
    if "resourceLogs" in doc or "resourceMetrics" in doc:
        return []  # another signal in an OTLP JSON file (the in-flight record): no spans
    raise TraceReadError("no resourceSpans/batches (OTLP) or data (Jaeger) key")


def parse_document(doc: Any, where: str, lose: Lose | None = None) -> list[RawSpan]:
    """:func:`spans_from_document`, any malformed shape a :class:`TraceReadError` naming
    ``where`` (a file and line, a URL) instead of whatever the parser tripped on."""
    try:
        return spans_from_document(doc, lose)
    except TraceReadError as exc:
        detail = f": {exc}"
    except KeyError as exc:
        detail = f" (missing key {exc})"
    except (AttributeError, TypeError, ValueError, OverflowError) as exc:
        detail = f" (unexpected shape: {exc})"
    raise TraceReadError(f"{where}: not OTLP, Tempo or Jaeger trace JSON{detail}")
