"""Where ``otel-rollout report`` reads traces: files (globs, folders), Jaeger's or Tempo's API."""

from __future__ import annotations

import glob
import json
import os
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from otel_rollout.report._assemble import TraceAssembler
from otel_rollout.report._documents import Lose, parse_document
from otel_rollout.report._files import Warn, iter_file_rows
from otel_rollout.report._model import RawSpan, ReadResult, TraceReadError, TrajectoryTrace, row_of

#: Jaeger's query service looks back this far when a search names no start (its default).
JAEGER_LOOKBACK_NS = 2 * 24 * 3600 * 10**9
#: Traces asked of a search API at most (Tempo answers 20 when a search names no limit).
SEARCH_LIMIT = 10000
#: configure()'s service name when nothing sets one (the settings table's default).
DEFAULT_SERVICE = "otel-rollout"
#: What a folder is read for: the trace files (rotated ones too), else any JSON in it.
FOLDER_PATTERNS = (("traces-*.jsonl",), ("*.jsonl", "*.json"))


def _get(url: str, timeout: float = 30.0, *, missing: Any = ...) -> Any:
    """The JSON at ``url``; a 404 answers ``missing`` when one is given."""
    import urllib.error
    import urllib.request  # here: a report of files never needs HTTP (start-up)

    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            raw = resp.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        if exc.code == 404 and missing is not ...:
            return missing
        raise TraceReadError(f"{url}: request failed: {exc}") from None
    except (OSError, ValueError) as exc:  # ValueError: a malformed URL, bytes not UTF-8
        raise TraceReadError(f"{url}: request failed: {exc}") from None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TraceReadError(f"{url}: not JSON: {exc.msg}") from None


def _tempo(url: str, lose: Lose | None = None) -> list[RawSpan]:
    """Tempo: its search, then each trace by id (``/api/v2/traces/<id>``, else
    ``/api/traces/<id>`` for a Tempo without the v2 API)."""
    parts = urllib.parse.urlsplit(url)
    if "limit" not in urllib.parse.parse_qs(parts.query):
        url = f"{url}{'&' if parts.query else '?'}limit={SEARCH_LIMIT}"
    search = _get(url)
    hits = search.get("traces", []) if isinstance(search, dict) else None
    if not isinstance(hits, list | None) or not all(isinstance(h, dict) for h in hits or []):
        raise TraceReadError(f"{url}: not a Tempo search answer (no list of traces)")
    spans: list[RawSpan] = []
    for tr in hits or []:
        tid = tr.get("traceID") or tr.get("traceId")
        turl = f"{parts.scheme}://{parts.netloc}/api/v2/traces/{tid}"
        doc = _get(turl, missing=None)
        if doc is None:
            turl = turl.replace("/api/v2/", "/api/")
            doc = _get(turl)
        spans.extend(parse_document(doc, turl, lose))
    return spans


def default_service() -> str:
    """The service a base URL is asked for without ``--service``: what configure() would
    name this process."""
    for name in ("OTEL_ROLLOUT_SERVICE_NAME", "OTEL_SERVICE_NAME"):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return DEFAULT_SERVICE


def jaeger_services(base: str) -> list[str] | None:
    """The services a Jaeger knows, or None when it does not answer."""
    for path, key in (("/api/v3/services", "services"), ("/api/services", "data")):
        try:
            doc = _get(base.rstrip("/") + path, timeout=5.0)
        except TraceReadError:
            continue
        names = doc.get(key) if isinstance(doc, dict) else None
        if isinstance(names, list):
            return sorted(str(n) for n in names)
    return None


def _window(since: int | None, until: int | None) -> tuple[int, int]:
    """The search's [start, end] in ns: Jaeger's own two days back when not given."""
    now = time.time_ns()
    return (since if since is not None else now - JAEGER_LOOKBACK_NS,
            until if until is not None else now + 60 * 10**9)  # fmt: skip


def _rfc3339(ns: int) -> str:
    secs, frac = divmod(ns, 10**9)
    return datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"


def _jaeger_url(base: str, service: str | None, since: int | None, until: int | None) -> str:
    """Jaeger's OTLP API (``/api/v3/traces``: nanoseconds, unlike ``/api/traces``'s
    microseconds) for ``service``'s traces that started in [since, until]."""
    start, end = _window(since, until)
    query = {
        "query.service_name": service or default_service(),
        "query.start_time_min": _rfc3339(start),
        "query.start_time_max": _rfc3339(end),
        "query.num_traces": SEARCH_LIMIT,
    }
    return base.rstrip("/") + "/api/v3/traces?" + urllib.parse.urlencode(query)


def is_tempo(base: str, timeout: float = 5.0) -> bool:
    """Whether a base URL is a Tempo: it answers ``/api/echo`` with ``echo``."""
    import urllib.request

    try:
        with urllib.request.urlopen(base.rstrip("/") + "/api/echo", timeout=timeout) as resp:
            return resp.status == 200 and resp.read(64).strip() == b"echo"
    except (OSError, ValueError):
        return False


def _url_spans(url: str, service: str | None, since: int | None, until: int | None,
               lose: Lose) -> list[RawSpan]:  # fmt: skip
    """The spans a backend answers for ``url``."""
    if "/api/search" in url:
        return _tempo(url, lose)
    if "/api/" not in url:  # a base URL: Tempo's, or else Jaeger's
        if is_tempo(url):
            start, end = _window(since, until)
            query = {"tags": f"service.name={service or default_service()}",
                     "start": start // 10**9, "end": -(-end // 10**9)}  # fmt: skip
            return _tempo(url.rstrip("/") + "/api/search?" + urllib.parse.urlencode(query), lose)
        url = _jaeger_url(url, service, since, until)
    # Jaeger's /api/v3 answers 404 when no trace matches.
    doc = _get(url, missing={"result": {"resourceSpans": []}} if "/api/v3/" in url else ...)
    return parse_document(doc, url, lose)


def is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


def _folder_files(folder: str) -> list[str]:
    for patterns in FOLDER_PATTERNS:
        found = sorted({f for p in patterns for f in glob.glob(os.path.join(folder, p))})
        found = [f for f in found if os.path.isfile(f)]
        if found:
            return found
    raise TraceReadError(f"{folder}: a folder with no trace files (traces-*.jsonl, *.jsonl, "
                         "*.json); give a file, a glob or another folder")  # fmt: skip


def expand(sources: Iterable[str]) -> list[str]:
    """Files, folders (their trace files), globs (in name order) and URLs, as a list of
    each; a glob that matches nothing or a folder without trace files raises."""
    out: list[str] = []
    for source in sources:
        if is_url(source):
            out.append(source)
        elif os.path.isdir(source):
            out.extend(_folder_files(source))
        elif os.path.exists(source) or not glob.has_magic(source):
            out.append(source)
        else:
            matches = sorted(glob.glob(source))
            if not matches:
                raise TraceReadError(f"{source}: no file matches")
            out.extend(matches)
    return out


def read_sources(
    sources: Iterable[str],
    *,
    bands: Mapping[str, str] | None = None,
    service: str | None = None,
    emit: Callable[[TrajectoryTrace], object] | None = None,
    warn: Warn | None = None,
    since: int | None = None,
    until: int | None = None,
    skipped: Callable[[TrajectoryTrace], object] | None = None,
) -> ReadResult:
    """Every trajectory in ``sources`` (files, folders, globs, Jaeger or Tempo URLs), read
    as one stream (docs/demo.md): handed to ``emit`` (else kept), those of other services
    to ``skipped``, bad lines to ``warn``; ``since``/``until`` (unix ns) bound a search."""
    result = ReadResult()
    keep = emit or result.trajectories.append
    if service is not None:
        inner = keep

        def keep(t: TrajectoryTrace) -> None:
            if t.service in (service, None):
                inner(t)
            elif skipped is not None:
                skipped(t)

    assembler = TraceAssembler(keep, result, bands=bands)
    for source in expand(sources):
        if is_url(source):
            spans = _url_spans(source, service, since, until, result.lose)
            assembler.add_rows([row_of(s) for s in spans])
        else:
            for rows in iter_file_rows(source, result, warn):
                assembler.add_rows(rows)
    return assembler.finish()


def read_source(
    source: str, *, bands: dict[str, str] | None = None, service: str | None = None
) -> ReadResult:
    """:func:`read_sources` of one file or URL, its trajectories kept."""
    return read_sources([source], bands=bands, service=service)


def read_trace_file(path: str | os.PathLike[str], *,
                    bands: Mapping[str, str] | None = None) -> ReadResult:  # fmt: skip
    return read_sources([os.fspath(path)], bands=bands)
