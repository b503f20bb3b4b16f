"""Trace JSON documents back into spans: OTLP/JSON, Tempo's trace JSON, Jaeger's JSON.

OTLP/JSON is what the official file exporter writes, one ``ExportTraceServiceRequest`` a
line (hex or base64 ids, nanosecond times as strings); Tempo's ``/api/traces/<id>`` answers
the same shape (under ``batches``); Jaeger's query API answers ``{"data": [...]}``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.trace import StatusCode

from otel_rollout import attributes as A
from otel_rollout.report._model import RawSpan, TraceReadError

_HEX = re.compile(r"[0-9a-fA-F]+")
#: The resource attribute that names a run (set by configure() in every process).
RUN_ID = "rollout.run.id"


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
        return int(v["intValue"])
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "arrayValue" in v:
        return tuple(_value(x) for x in v["arrayValue"].get("values", []))
    return None


def _attrs(kvs: Iterable[Mapping[str, Any]] | None) -> dict[str, Any]:
    return {kv["key"]: _value(kv.get("value", {})) for kv in (kvs or [])}


def _otlp_spans(doc: Mapping[str, Any]) -> list[RawSpan]:
    out: list[RawSpan] = []
    for rs in doc.get("resourceSpans", doc.get("batches", [])) or []:
        resource = _attrs(rs.get("resource", {}).get("attributes"))
        service = resource.get("service.name")
        run_id = resource.get(RUN_ID)
        for ss in rs.get("scopeSpans", rs.get("instrumentationLibrarySpans", [])) or []:
            for sp in ss.get("spans", []) or []:
                parent = _decode_id(sp.get("parentSpanId"), 16)
                end = int(sp.get("endTimeUnixNano") or 0)
                code = (sp.get("status") or {}).get("code")
                out.append(
                    RawSpan(
                        trace_id=_decode_id(sp["traceId"], 32),
                        span_id=int(_decode_id(sp["spanId"], 16), 16),
                        parent_id=int(parent, 16) if parent else None,
                        name=sp.get("name", ""),
                        start_ns=int(sp.get("startTimeUnixNano") or 0),
                        end_ns=end or None,
                        attributes=_attrs(sp.get("attributes")),
                        status_code=StatusCode.ERROR if code in (2, "STATUS_CODE_ERROR") else None,
                        service=service,
                        run_id=None if run_id is None else str(run_id),
                    )
                )
    return out


def loss_records(doc: Any) -> list[tuple[str, dict[str, int]]]:
    """The trace file's loss records in an OTLP JSON document: (writer, cumulative spans
    lost per reason) for each resource without spans that carries
    ``rollout.export.lost.<reason>`` counts. The writer is its ``rollout.export.writer.id``,
    else its service instance, pid and run id. Anything else gives ``[]``."""
    out: list[tuple[str, dict[str, int]]] = []
    if not isinstance(doc, Mapping):
        return out
    for rs in doc.get("resourceSpans") or ():
        if not isinstance(rs, Mapping) or rs.get("scopeSpans"):
            continue  # a record holds no spans
        try:
            attrs = _attrs((rs.get("resource") or {}).get("attributes"))
        except (AttributeError, TypeError, KeyError, ValueError):
            continue
        prefix = A.EXPORT_LOST_PREFIX
        counts = {
            k[len(prefix) :]: v
            for k, v in attrs.items()
            if k.startswith(prefix) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
        }
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


def spans_from_document(doc: Any) -> list[RawSpan]:
    """Spans of one parsed JSON document: OTLP/JSON, Tempo's trace JSON or Jaeger's."""
    if not isinstance(doc, Mapping):
        raise TraceReadError("expected a JSON object")
    if "data" in doc:
        return _jaeger_spans(doc)
    if "trace" in doc and isinstance(doc["trace"], Mapping):  # Tempo v2 API
        doc = doc["trace"]
    elif "result" in doc and isinstance(doc["result"], Mapping):  # Jaeger /api/v3
        doc = doc["result"]
    if "resourceSpans" in doc or "batches" in doc:
        return _otlp_spans(doc)
    raise TraceReadError("no resourceSpans/batches (OTLP) or data (Jaeger) key")


def parse_document(doc: Any, where: str) -> list[RawSpan]:
    """:func:`spans_from_document`, any malformed shape a :class:`TraceReadError` naming
    ``where`` (a file and line, a URL) instead of whatever the parser tripped on."""
    try:
        return spans_from_document(doc)
    except TraceReadError as exc:
        raise TraceReadError(f"{where}: not OTLP, Tempo or Jaeger trace JSON: {exc}") from None
    except KeyError as exc:
        raise TraceReadError(
            f"{where}: not OTLP, Tempo or Jaeger trace JSON (missing key {exc})"
        ) from None
    except (AttributeError, TypeError, ValueError, OverflowError) as exc:
        raise TraceReadError(
            f"{where}: not OTLP, Tempo or Jaeger trace JSON (unexpected shape: {exc})"
        ) from None
