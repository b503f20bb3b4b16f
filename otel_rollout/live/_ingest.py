"""Lines of OTLP JSON (a trace file's, or requests received over OTLP) into the live state.

Each line is parsed once (with the report's parser), resource by resource so each span
is known by the process that wrote it; in-flight records, loss records and batch spans
go to the state as such; the other spans are held by the state until their trajectory's
root arrives (a trace file is written as spans end: a root comes after its phases), and
then the trajectory's tree goes whole to the report's :class:`TraceAssembler`, which
gives its breakdown, the same as ``report``'s, at once. A trajectory nested under its
batch span (one trace per step) is assembled on its own, under a key of its own. A line
that is not trace JSON is counted (and a source whose lines all are not is said to be not
a trace file); nothing here raises for bad input.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from otel_rollout import attributes as A
from otel_rollout._export.in_flight import SPAN_NAME as IN_FLIGHT_SPAN
from otel_rollout._export.in_flight import from_attributes
from otel_rollout.live._state import LiveState
from otel_rollout.report._assemble import TraceAssembler
from otel_rollout.report._batches import batch_span
from otel_rollout.report._documents import _attrs, loss_records, parse_document
from otel_rollout.report._model import RawSpan, ReadResult, TraceReadError, TrajectoryTrace

try:  # three times faster where installed; the standard parser otherwise
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads


class Ingest:
    """Feeds :class:`LiveState` from OTLP JSON documents."""

    def __init__(self, state: LiveState, bands: Mapping[str, str] | None = None) -> None:
        self.state = state
        self.result = ReadResult()
        # window 0: each trajectory is handed over whole, its root last
        self.assembler = TraceAssembler(self._emit, self.result, bands=bands, window_spans=0)
        self._current: tuple[str, list[RawSpan], str] | None = None
        self.lines = 0
        self.bad_lines = 0
        self.records = 0
        self.spans = 0
        self.last_error: str | None = None

    def line(self, raw: bytes | str, where: str = "") -> bool:
        """One line of OTLP JSON; False (and counted) if it is not trace JSON."""
        self.lines += 1
        try:
            doc = _loads(raw)
        except (ValueError, TypeError, RecursionError) as exc:
            return self._bad(f"{where}: not JSON ({str(exc)[:60]})")
        return self.document(doc, where)

    def document(self, doc: Any, where: str = "") -> bool:
        """One parsed ``ExportTraceServiceRequest`` (OTLP JSON shape)."""
        if not isinstance(doc, Mapping) or not isinstance(doc.get("resourceSpans"), list):
            return self._bad(f"{where}: JSON, but not OTLP trace JSON (no resourceSpans)")
        for writer, counts in loss_records(doc):
            self.state.losses(writer, counts)
        state = self.state
        now = time.monotonic()
        for rs in doc["resourceSpans"]:
            if not isinstance(rs, Mapping) or not rs.get("scopeSpans"):
                continue
            try:
                resource = _attrs((rs.get("resource") or {}).get("attributes"))
                spans = parse_document({"resourceSpans": [rs]}, where)
            except (TraceReadError, AttributeError, TypeError, KeyError, ValueError) as exc:
                return self._bad(str(exc)[:200])
            key = str(resource.get("service.instance.id") or
                      f"{resource.get('host.name')}/{resource.get('process.pid')}")  # fmt: skip
            state.process(key, resource)
            for span in spans:
                self.spans += 1
                if span.name == IN_FLIGHT_SPAN and span.parent_id is None:
                    snap = from_attributes(span.start_ns, span.attributes)
                    if snap is not None:
                        self.records += 1
                        state.in_flight(key, snap, now)
                    continue
                attrs = span.attributes
                if A.TRAJECTORY_ID in attrs:
                    self._root(span, key)
                elif A.BATCH_ID in attrs and A.PHASE not in attrs:  # as report reads it
                    if span.end_ns:
                        state.batch_span(batch_span(span))
                else:
                    state.span(span, key)
        return True

    def _root(self, root: RawSpan, process: str) -> None:
        tree = self.state.take_tree(root)
        tid = root.trace_id
        self._current = (tid, [*tree, root], process)
        if root.parent_id is None:
            for s in tree:
                self.assembler.add(s)
            self.assembler.add(root)
        else:  # nested under its batch span: a trace of its own for the assembler
            own = f"{tid}/{root.span_id:016x}"
            for s in tree:
                self.assembler.add(replace(s, trace_id=own))
            self.assembler.add(replace(root, trace_id=own))
        self._current = None

    def _emit(self, t: TrajectoryTrace) -> None:
        current = self._current
        if current is None:  # pragma: no cover - the assembler emits only on a root
            return
        tid, spans, process = current
        if t.breakdown.trace_id != tid:
            t = replace(t, breakdown=replace(t.breakdown, trace_id=tid))
        self.state.trajectory(t, spans, process)

    def _bad(self, message: str) -> bool:
        self.bad_lines += 1
        self.last_error = message
        return False
