"""Where ``otel-rollout report`` reads traces: files (globs too), Jaeger's or Tempo's API."""

from __future__ import annotations

import glob
import json
import os
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from otel_rollout.report._assemble import TraceAssembler
from otel_rollout.report._documents import parse_document
from otel_rollout.report._files import Warn, iter_file_spans
from otel_rollout.report._model import RawSpan, ReadResult, TraceReadError, TrajectoryTrace


def _get(url: str, timeout: float = 30.0) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            raw = resp.read().decode("utf-8")
    except (OSError, ValueError) as exc:  # ValueError: a malformed URL, bytes not UTF-8
        raise TraceReadError(f"{url}: request failed: {exc}") from None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TraceReadError(f"{url}: not JSON: {exc.msg}") from None


def _tempo(url: str) -> list[RawSpan]:
    parts = urllib.parse.urlsplit(url)
    base = f"{parts.scheme}://{parts.netloc}"
    search = _get(url)
    hits = search.get("traces", []) if isinstance(search, dict) else None
    if not isinstance(hits, list | None) or not all(isinstance(h, dict) for h in hits or []):
        raise TraceReadError(f"{url}: not a Tempo search answer (no list of traces)")
    spans: list[RawSpan] = []
    for tr in hits or []:
        tid = tr.get("traceID") or tr.get("traceId")
        turl = f"{base}/api/traces/{tid}"
        spans.extend(parse_document(_get(turl), turl))
    return spans


def _url_spans(url: str, service: str | None) -> list[RawSpan]:
    if "/api/search" in url:
        return _tempo(url)
    if "/api/traces" not in url:
        url = (
            url.rstrip("/")
            + "/api/traces?"
            + urllib.parse.urlencode({"service": service or "otel-rollout-demo", "limit": 10000})
        )
    return parse_document(_get(url), url)


def is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


def expand(sources: Iterable[str]) -> list[str]:
    """Files, globs (``traces-*.jsonl``, in name order) and URLs, as a list of each; a
    glob that matches nothing or a missing file is a :class:`TraceReadError`."""
    out: list[str] = []
    for source in sources:
        if is_url(source) or os.path.exists(source) or not glob.has_magic(source):
            out.append(source)
            continue
        matches = sorted(glob.glob(source))
        if not matches:
            raise TraceReadError(f"{source}: no file matches")
        out.extend(matches)
    return out


def _spans(sources: Sequence[str], service: str | None, result: ReadResult,
           warn: Warn | None) -> Iterator[RawSpan]:  # fmt: skip
    for source in sources:
        if is_url(source):
            yield from _url_spans(source, service)
        else:
            yield from iter_file_spans(source, result, warn)


def read_sources(
    sources: Iterable[str],
    *,
    bands: Mapping[str, str] | None = None,
    service: str | None = None,
    emit: Callable[[TrajectoryTrace], object] | None = None,
    warn: Warn | None = None,
) -> ReadResult:
    """Every trajectory in ``sources`` (files, globs, Jaeger or Tempo URLs), read as one
    stream: a trajectory split across rotated files is put back together.

    With ``emit``, each trajectory is handed to it and not kept (memory stays bounded
    whatever the input's size); else they are kept in ``ReadResult.trajectories``. Bad
    lines go to ``warn`` (default: :func:`warnings.warn`) and every loss is counted in
    ``ReadResult.losses``. Raises :class:`TraceReadError` for input that cannot be read.
    """
    result = ReadResult()
    keep = emit or result.trajectories.append
    if service is not None:
        inner = keep

        def keep(t: TrajectoryTrace) -> None:
            if t.service in (service, None):
                inner(t)

    assembler = TraceAssembler(keep, result, bands=bands)
    for span in _spans(expand(sources), service, result, warn):
        assembler.add(span)
    return assembler.finish()


def read_source(
    source: str, *, bands: dict[str, str] | None = None, service: str | None = None
) -> ReadResult:
    """Breakdowns from a trace file, a Jaeger ``/api/traces?...`` or Tempo ``/api/search``."""
    return read_sources([source], bands=bands, service=service)
