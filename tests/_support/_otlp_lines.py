"""OTLP JSON trace-file lines written by hand, for the report's tests: a span as a dict,
a line of spans under one service."""

from __future__ import annotations

import json


def kv(key, value):
    """An OTLP JSON attribute (bool, int or string)."""
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": str(value)}}


def span(trace, sid, parent, name, start, end, **attrs):
    """A span; ``parent``, ``start`` or ``end`` None leaves the field out."""
    sp = {"traceId": format(trace, "032x"), "spanId": format(sid, "016x"), "name": name,
          "attributes": [kv(k, v) for k, v in attrs.items()]}  # fmt: skip
    if parent is not None:
        sp["parentSpanId"] = format(parent, "016x")
    if start is not None:
        sp["startTimeUnixNano"] = str(start)
    if end is not None:
        sp["endTimeUnixNano"] = str(end)
    return sp


def line(spans, service="svc"):
    """One ``ExportTraceServiceRequest`` line holding ``spans``."""
    return json.dumps({"resourceSpans": [{
        "resource": {"attributes": [kv("service.name", service)]},
        "scopeSpans": [{"spans": spans}]}]})  # fmt: skip
