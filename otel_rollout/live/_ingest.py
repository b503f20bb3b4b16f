"""The input side of ``otel-rollout top``: lines of OTLP JSON (a trace file's, or requests
received) into the live state, polled within a time budget. Spans wait in the state until
their trajectory's root arrives, then the tree goes whole to the report's
:class:`TraceAssembler`. Bad input is counted, never raised; what is wrong with a source
is said in plain lines."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from otel_rollout import attributes as A
from otel_rollout._export.in_flight import EVENT_NAME as IN_FLIGHT_EVENT
from otel_rollout._export.in_flight import from_attributes
from otel_rollout._export.log_file import EVENT_NAME_ATTRIBUTE
from otel_rollout.live._listen import loads
from otel_rollout.live._sources import FileTail, Sources
from otel_rollout.live._state import LiveState
from otel_rollout.report._assemble import TraceAssembler
from otel_rollout.report._batches import batch_span
from otel_rollout.report._documents import _attrs, loss_records, parse_document
from otel_rollout.report._model import (
    LOSS_INVERTED_ROOT,
    LOSS_ODD_VALUE,
    RawSpan,
    ReadResult,
    TraceReadError,
    TrajectoryTrace,
)

#: An in-flight record whose figures are not whole numbers (an infinity, NaN, text).
LOSS_ODD_IN_FLIGHT = "in-flight records skipped: odd values"


class Ingest:
    """Feeds :class:`LiveState` from OTLP JSON documents."""

    def __init__(self, state: LiveState, bands: Mapping[str, str] | None = None) -> None:
        self.state = state
        self._bands = bands
        self.reset(state_too=False)

    def reset(self, *, state_too: bool = True) -> None:
        """Forget everything read (another run is followed from now on)."""
        if state_too:
            self.state.reset()
        self.result = ReadResult()
        self._done: list[TrajectoryTrace] = []
        # window 0: each trajectory is handed over whole, its root last
        self.assembler = TraceAssembler(self._done.append, self.result, bands=self._bands,
                                        window_spans=0)  # fmt: skip
        self.bad_lines = self.records = 0
        self.last_error: str | None = None

    def line(self, raw: bytes | str, where: str = "") -> bool:
        """One line of OTLP JSON; False (and counted) if it is not trace JSON."""
        try:
            doc = loads(raw)
        except (ValueError, TypeError, RecursionError) as exc:
            return self._bad(f"{where}: not JSON ({str(exc)[:60]})")
        return self.document(doc, where)

    def document(self, doc: Any, where: str = "") -> bool:
        """One ``ExportTraceServiceRequest`` or ``ExportLogsServiceRequest`` (the in-flight
        records), in the OTLP JSON shape."""
        if isinstance(doc, Mapping) and isinstance(doc.get("resourceLogs"), list):
            return self._logs(doc["resourceLogs"])
        if not isinstance(doc, Mapping) or not isinstance(doc.get("resourceSpans"), list):
            return self._bad(f"{where}: JSON, but not OTLP trace JSON (no resourceSpans)")
        state, lose = self.state, self.result.lose
        for writer, counts in loss_records(doc, lose):
            state.export.note_export_losses(writer, counts)
        for rs in doc["resourceSpans"]:
            if not isinstance(rs, Mapping) or not rs.get("scopeSpans"):
                continue
            try:
                key = self._process(rs)
                spans = parse_document({"resourceSpans": [rs]}, where, lose)
            except (TraceReadError, AttributeError, TypeError, KeyError, ValueError) as exc:
                return self._bad(str(exc)[:200])
            for span in spans:
                attrs = span.attributes
                if A.TRAJECTORY_ID in attrs:
                    self._root(span, key)
                elif A.BATCH_ID in attrs and A.PHASE not in attrs:  # as report reads it
                    if span.end_ns:
                        state.batch_span(batch_span(span))
                else:
                    state.span(span, key)
        return True

    def _logs(self, resource_logs: list[Any]) -> bool:
        """The in-flight records among log records; other records are not top's."""
        for rl in resource_logs:
            if not isinstance(rl, Mapping):
                continue
            try:
                for record in (r for sl in rl.get("scopeLogs") or ()
                               for r in sl.get("logRecords") or ()):  # fmt: skip
                    attrs = _attrs(record.get("attributes"))
                    name = record.get("eventName") or attrs.get(EVENT_NAME_ATTRIBUTE)
                    if name != IN_FLIGHT_EVENT:
                        continue
                    key = self._process(rl)
                    snap = from_attributes(int(record.get("timeUnixNano") or 0), attrs)
                    if snap is None:
                        self.result.lose(LOSS_ODD_IN_FLIGHT)
                        continue
                    self.records += 1
                    self.state.in_flight(key, snap)
            except (AttributeError, TypeError, KeyError, ValueError, OverflowError) as exc:
                return self._bad(f"an odd log record: {str(exc)[:160]}")
        return True

    def _process(self, resource_doc: Mapping[str, Any]) -> str:
        """The writer of a resource's spans or records (made known to the state)."""
        resource = _attrs((resource_doc.get("resource") or {}).get("attributes"))
        key = str(resource.get("service.instance.id") or
                  f"{resource.get('host.name')}/{resource.get('process.pid')}")  # fmt: skip
        self.state.process(key, resource)
        return key

    def _root(self, root: RawSpan, process: str) -> None:
        spans = [*self.state.take_tree(root), root]
        tid = root.trace_id
        own = tid if root.parent_id is None else f"{tid}/{root.span_id:016x}"
        for s in spans:  # nested under its batch span: a trace of its own for the assembler
            self.assembler.add(s if own == tid else replace(s, trace_id=own))
        for t in self._done:
            if t.breakdown.trace_id != tid:
                t = replace(t, breakdown=replace(t.breakdown, trace_id=tid))
            self.state.trajectory(t, spans, process)
        self._done.clear()

    def _bad(self, message: str) -> bool:
        self.bad_lines += 1
        self.last_error = message
        return False


#: The export line's names for the report's longer reasons.
ODD_VALUES = "odd values skipped"
_SHORT = {LOSS_INVERTED_ROOT: "roots ending before they start"}
#: Bytes read from one file per read call; a poll goes on while its budget lasts.
CHUNK_BYTES = 4 * 1024 * 1024


class Feed:
    """Polls ``sources`` (files) and/or ``listener`` into ``ingest``."""

    def __init__(self, ingest: Ingest, sources: Sources | None = None, listener: Any = None,
                 *, stale_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.ingest, self.sources, self.listener = ingest, sources, listener
        self.stale_s = stale_s
        self._clock = clock
        self._good: set[FileTail] = set()  # files with a trace line read
        self._bad: dict[FileTail, tuple[int, str]] = {}  # bad lines: how many, the first's error
        self._errors: dict[str, str] = {}
        self.started = clock()
        self.last_data: float | None = None
        self.caught_up = False
        self._switches = 0

    def poll(self, budget_s: float = 0.5) -> int:
        """Read what arrived, for at most about ``budget_s``; the lines or requests read."""
        deadline = self._clock() + budget_s
        n = 0
        if self.listener is not None:
            for doc in self.listener.take(deadline, self._clock):
                self.ingest.document(doc, "otlp")
                n += 1
        self.caught_up = True
        if self.sources is not None:
            tails = self.sources.discover()
            if self.sources.switches != self._switches:  # a newer run: start over on it
                self._switches = self.sources.switches
                self.ingest.reset()
                self._good.clear()
                self._bad.clear()
                self._errors.clear()
            more = True
            while more and self._clock() < deadline:
                more = False
                for tail in tails:
                    got = self._read(tail)
                    n += got
                    more = more or (got > 0 and tail.pending)
                    if self._clock() >= deadline:
                        break
            self.caught_up = not any(t.pending for t in tails)
        if n:
            self.last_data = self._clock()
        return n

    def _read(self, tail: FileTail) -> int:
        where = str(tail.path)
        try:
            lines = tail.read(CHUNK_BYTES)
        except OSError as exc:
            self._errors[where] = f"{where}: cannot read ({exc.strerror or exc})"
            return 0
        self._errors.pop(where, None)
        first = tail.lines_read - len(lines) + 1
        for i, line in enumerate(lines):
            if self.ingest.line(line, f"{where}:{first + i}"):
                self._good.add(tail)
            else:
                k, error = self._bad.get(tail, (0, self.ingest.last_error or ""))
                self._bad[tail] = (k + 1, error)
        return len(lines)

    # --- what the screen says ------------------------------------------------------------
    def quiet_s(self) -> float | None:
        """Seconds since the sources last grew (a file written, a request received); None
        before anything was read."""
        if self.last_data is None:
            return None
        quiet = self._clock() - self.last_data
        if self.sources is not None and self.sources.tails:
            newest = max(t.mtime for t in self.sources.tails.values())
            by_files = max(0.0, time.time() - newest)
            quiet = min(quiet, by_files) if self.listener else by_files
        return quiet

    def status(self) -> str:
        """``live``, ``waiting`` (nothing read yet) or ``stale Ns``."""
        quiet = self.quiet_s()
        if quiet is None:
            return "waiting"
        return "live" if quiet < self.stale_s else f"stale {quiet:.0f}s"

    def notes(self) -> list[str]:
        """Lines about the sources: what is missing, unreadable, not trace JSON, quiet."""
        out = [self.listener.describe()] if self.listener is not None else []
        if self.sources is not None:
            out += self.sources.notes
        out += self._errors.values()
        for tail, (k, first) in self._bad.items():
            if tail not in self._good:
                out.append(f"{tail.path}: not a trace file ({k} lines; {first.split(': ', 1)[-1]})")
            else:
                out.append(f"{tail.path}: {k} bad lines skipped ({first})")
        quiet = self.quiet_s()
        if quiet is not None:
            if quiet >= self.stale_s:
                out.append(f"no new data for {quiet:.0f}s: the run finished or stalled")
        elif self.sources is not None and self.sources.tails and self._clock() - self.started > 5:
            out.append("the trace files hold no spans yet (a batch is written every few s)")
        return out

    def reader_losses(self) -> dict[str, int]:
        """What the reading itself lost, for the export line: the report's reasons, the long
        ones shortened (``report`` names each key)."""
        out: dict[str, int] = {}
        for why, n in self.ingest.result.losses.items():
            short = _SHORT.get(why) or (ODD_VALUES if why.startswith(LOSS_ODD_VALUE) else why)
            out[short] = out.get(short, 0) + n
        if self.ingest.bad_lines:
            out["bad lines"] = self.ingest.bad_lines
        if self.listener is not None and self.listener.dropped:
            out["receiver queue full"] = self.listener.dropped
        return out
