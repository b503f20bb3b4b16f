"""Where ``otel-rollout report`` reads traces: a file, Jaeger's or Tempo's query API."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from typing import Any

from otel_rollout.report._assemble import breakdowns_from_spans
from otel_rollout.report._documents import read_spans_file, spans_from_document
from otel_rollout.report._model import RawSpan, ReadResult, TraceReadError


def _get(url: str, timeout: float = 30.0) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            raw = resp.read().decode("utf-8")
    except OSError as exc:
        raise TraceReadError(f"{url}: request failed: {exc}") from exc
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TraceReadError(f"{url}: not JSON: {exc.msg}") from exc


def _tempo(url: str) -> list[RawSpan]:
    parts = urllib.parse.urlsplit(url)
    base = f"{parts.scheme}://{parts.netloc}"
    search = _get(url)
    spans: list[RawSpan] = []
    for tr in search.get("traces", []) or []:
        tid = tr.get("traceID") or tr.get("traceId")
        turl = f"{base}/api/traces/{tid}"
        try:
            spans.extend(spans_from_document(_get(turl)))
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceReadError(f"{turl}: not Tempo trace JSON: {exc}") from exc
    return spans


def read_source(
    source: str, *, bands: dict[str, str] | None = None, service: str | None = None
) -> ReadResult:
    """Breakdowns from a trace file, a Jaeger ``/api/traces?...`` or Tempo ``/api/search``."""
    result = ReadResult()
    if source.startswith(("http://", "https://")):
        if "/api/search" in source:
            spans = _tempo(source)
        else:
            url = source
            if "/api/traces" not in url:
                url = (
                    url.rstrip("/")
                    + "/api/traces?"
                    + urllib.parse.urlencode(
                        {"service": service or "otel-rollout-demo", "limit": 10000}
                    )
                )
            try:
                spans = spans_from_document(_get(url))
            except (KeyError, TypeError, ValueError) as exc:
                raise TraceReadError(f"{url}: not Jaeger trace JSON: {exc}") from exc
    else:
        spans = read_spans_file(source, result)
    if service:
        roots_ok = {s.trace_id for s in spans if s.service in (service, None)}
        spans = [s for s in spans if s.trace_id in roots_ok]
    return breakdowns_from_spans(spans, bands=bands, result=result)
