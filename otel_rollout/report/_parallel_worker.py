"""One trace file read in a worker process of ``otel-rollout report --jobs N``.

A worker assembles its file alone as the sequential read does (the fast reader's rows,
:meth:`TraceAssembler.add_rows` a slice of a line at a time, no :class:`RawSpan` for most
spans), and notes what the parent needs to put the files back into one stream: where (in
spans read) each trace first appeared and got its last root, where each loss reason first
occurred, which batch spans were recorded and where, and how many spans it held. Spans of
traces that also appear in another file are not assembled here but sent back (rows) with
their positions: the parent assembles those traces from all their spans, in file order.
"""

from __future__ import annotations

import gc
import mmap
import re
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

from otel_rollout import attributes as A
from otel_rollout._accounting.breakdown import PhaseInterval
from otel_rollout._accounting.in_flight import SPAN_NAME as IN_FLIGHT_SPAN
from otel_rollout.report._assemble import TraceAssembler
from otel_rollout.report._documents import _decode_id
from otel_rollout.report._files import iter_file_rows
from otel_rollout.report._model import (
    LOSS_DUPLICATE,
    LOSS_LATE,
    BatchSpan,
    RawSpan,
    ReadResult,
    Row,
    TraceReadError,
    TrajectoryTrace,
)

#: A trace id as OTLP JSON (``traceId``, ``trace_id``) or Jaeger JSON (``traceID``) writes
#: it; case-sensitive, so the scan skips ahead to each ``"trace``. A key spelt otherwise is
#: seen by the worker (an id not found), and the read goes sequential.
_TRACE_ID = re.compile(rb'"trace(?:Id|ID|_id)"\s*:\s*"([^"\\]*)"')
_trace_id = itemgetter(0)
#: Why the assembler refuses a span it could have added.
_REFUSED = (LOSS_DUPLICATE, LOSS_LATE)
#: Where losses first counted when the input ends (incomplete traces) are placed.
END = float("inf")

#: (last root's position, first span's position, the trajectories of one trace)
Group = tuple[int, int, list[TrajectoryTrace]]


def trace_ids(path: str) -> frozenset[str] | None:
    """Every trace id written in ``path`` (a byte scan, no JSON decoding), or None when it
    cannot be read (the sequential read then says why)."""
    try:
        with open(path, "rb") as f:
            if not Path(path).stat().st_size:
                return frozenset()
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                raw = set(_TRACE_ID.findall(data))
    except (OSError, ValueError):
        return None
    out = set()
    for r in raw:
        try:
            out.add(_decode_id(r.decode("ascii", "replace"), 32))
        except TraceReadError:
            continue  # such a span is rejected by the decoder too, or flagged unknown
    return frozenset(out)


@dataclass
class CountingResult(ReadResult):
    """A read's result that also notes where each loss reason was first counted and where
    spans were refused (duplicates, late), in positions of the whole stream.

    While the assembler takes a slice of rows, ``rows`` is the iterator it reads them from
    (a list's, which knows how many it has left) and ``positions`` their positions: the
    row being added is the one the iterator gave last. Between slices (bad lines, the
    end), a loss is placed at ``between``.
    """

    #: loss reason -> (position where first counted, order among those counted there)
    first_loss: dict[str, tuple[float, int]] = field(default_factory=dict)
    #: positions of the spans refused since this list was last cleared
    refused: list[float] = field(default_factory=list)
    between: float = 0.5
    rows: Any = None  # a list iterator
    positions: Sequence[int] = range(0)
    _last: tuple[float, int] = (-1.0, 0)

    def lose(self, reason: str, n: int = 1) -> None:
        losses = self.losses
        new = reason not in losses
        losses[reason] = losses.get(reason, 0) + n
        if new or reason in _REFUSED:
            rows = self.rows
            if rows is None:
                at = self.between
            else:  # the iterator's length hint: the rows not given yet
                at = self.positions[len(self.positions) - rows.__length_hint__() - 1]
            if new:
                where, i = self._last
                self._last = (at, i + 1 if where == at else 0)
                self.first_loss[reason] = self._last
            if reason in _REFUSED:
                self.refused.append(at)


class Tracker:
    """A :class:`TraceAssembler` fed rows with their position in the whole stream (spans
    read, in-flight records left out), noting what the merge needs (see the module).

    Rows go to the assembler as :meth:`TraceAssembler.add_rows` takes them, a slice of a
    line at a time (see :meth:`add_rows`); what the merge needs of each span is noted
    here without a :class:`RawSpan`, and where spans were refused or losses first counted
    is told by the result (:class:`CountingResult`).

    ``far`` names a trace that got a span more than ``window`` spans after its last root:
    the sequential read may have finished it before, so its content depends on everything
    read in between; the parent reads sequentially then.
    """

    def __init__(
        self,
        result: CountingResult,
        bands: Mapping[str, str] | None,
        window: int,
        asm_window: int,
        asm_max: int,
        divert: frozenset[str] = frozenset(),
    ) -> None:
        self.result = result
        self.window = window
        self.emitted: list[TrajectoryTrace] = []
        self.asm = TraceAssembler(
            self.emitted.append,
            result,
            bands=bands,
            window_spans=asm_window,
            max_buffered_spans=asm_max,
        )
        #: trace id -> [first span's position, last root's position (-1: none), valid spans]
        self.traces: dict[str, list[int]] = {}
        self.position = 0  # of the last span read
        self.last_added = 0
        self.batch_events: list[tuple[float, str, BatchSpan]] = []
        self.far: str | None = None
        self.divert = divert
        #: spans of the traces in ``divert``, with their positions, not assembled here
        self.diverted: list[tuple[int, Row]] = []

    def add_rows(self, rows: list[Row]) -> None:
        """One line's rows, read after every row given before. They go to the assembler
        in slices: one ends at each root or batch span (its position is noted before the
        next row's), and the rows it does not take (diverted, in-flight) are left out."""
        traces, window, divert = self.traces, self.window, self.divert
        trajectory_id, batch_id = A.TRAJECTORY_ID, A.BATCH_ID
        q = q0 = self.position  # q0: the position before rows[i0], the slice's first
        i0 = 0
        for i, (tid, _, parent, name, start, end, _, span) in enumerate(rows):
            if parent is None and name == IN_FLIGHT_SPAN:  # not read by the assembler
                if i > i0:
                    self._add(rows[i0:i], range(q0 + 1, q + 1), None)
                i0, q0 = i + 1, q
                continue
            q += 1
            if divert and tid in divert:
                if i > i0:
                    self._add(rows[i0:i], range(q0 + 1, q), None)
                self.diverted.append((q, rows[i]))
                i0, q0 = i + 1, q
                continue
            if not start or start <= 0 or end is None or end <= 0:
                continue
            if end >= start:
                info = traces.get(tid)
                if info is None:
                    info = traces[tid] = [q, -1, 0]
                elif info[1] >= 0 and q - info[1] > window:
                    self.far = tid
                info[2] += 1
                if span is not None:
                    attributes = span.attributes
                    if trajectory_id in attributes or batch_id in attributes:
                        self._add(rows[i0 : i + 1], range(q0 + 1, q + 1), span)
                        i0, q0 = i + 1, q
            elif span is not None and trajectory_id in span.attributes:
                info = traces.get(tid)  # an inverted root: the assembler looks it up
                if info is None:
                    traces[tid] = [q, -1, 0]
                elif info[1] >= 0 and q - info[1] > window:
                    self.far = tid
        if i0 < len(rows):
            self._add(rows[i0:], range(q0 + 1, q + 1), None)
        self.position = q
        self.result.between = q + 0.5

    def _add(self, rows: list[Row], at: range, last: RawSpan | None) -> None:
        """``rows`` at positions ``at`` to the assembler; ``last``: the last row's span, a
        valid root or batch span."""
        result = self.result
        key = old = None
        if last is not None and A.TRAJECTORY_ID not in last.attributes:
            key = str(last.attributes[A.BATCH_ID])
            old = result.batches.get(key)
        result.positions = at
        result.rows = it = iter(rows)
        try:
            self.asm.add_rows(it)
        finally:
            result.rows = None
        refused = result.refused
        gone = set(refused) if refused else ()
        refused.clear()
        for row, q in zip(reversed(rows), reversed(at), strict=True):
            if q not in gone and _valid(row):
                break
        else:
            return  # none added
        self.last_added = q
        if last is None or q != at[-1]:
            return  # ``last`` refused: a duplicate, or late
        if key is None:
            self.traces[rows[-1][0]][1] = q
        elif (new := result.batches.get(key)) is not old:
            self.batch_events.append((q, key, new))  # type: ignore[arg-type]

    def finish(self) -> None:
        self.result.between = END
        self.asm.finish()

    def groups(self) -> list[Group]:
        """The trajectories emitted, one group per trace (its roots, in order)."""
        out: list[Group] = []
        for t in self.emitted:
            tid = t.breakdown.trace_id
            if out and out[-1][2][0].breakdown.trace_id == tid:
                out[-1][2].append(t)
            else:
                info = self.traces[tid]
                out.append((info[1], info[0], [t]))
        return out


def _valid(row: Row) -> bool:
    """Whether the assembler checks a row's trace (it has a start and an end, in order)."""
    start, end = row[4], row[5]
    return bool(start and start > 0 and end is not None and end > 0 and end >= start)


@dataclass
class FileRead:
    """What a worker sends back for one file (positions counted from its first span)."""

    result: ReadResult
    messages: list[str] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    incomplete: list[tuple[int, str]] = field(default_factory=list)
    batch_events: list[tuple[float, str, BatchSpan]] = field(default_factory=list)
    first_loss: dict[str, tuple[float, int]] = field(default_factory=dict)
    #: spans of traces also in other files, with their positions
    diverted: list[tuple[int, Row]] = field(default_factory=list)
    positions: int = 0
    last_added: int = 0
    peak: int = 0
    #: spans of traces without a root, held to the end of the input
    rootless: int = 0
    #: (last root's position, spans) of traces perhaps still held after the file's end
    open_at_end: list[tuple[int, int]] = field(default_factory=list)
    #: why this file's figures may depend on other files (the parent reads sequentially)
    problem: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Phases as one array a trajectory: a third of the cost of pickling them as tuples.
        state = dict(self.__dict__)
        state["groups"] = [(r, f, [_pack(t) for t in ts]) for r, f, ts in self.groups]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["groups"] = [(r, f, [_unpack(t) for t in ts]) for r, f, ts in state["groups"]]
        self.__dict__.update(state)


def _pack(t: TrajectoryTrace) -> tuple | TrajectoryTrace:
    try:
        times = array("q", [x for p in t.phases for x in (p.start_ns, p.end_ns)])
    except (OverflowError, TypeError):
        return t  # pickled as it is
    names = tuple(p.phase for p in t.phases)
    return (t.breakdown, names, times, t.service, t.run_id, t.error_type)


def _unpack(t: tuple | TrajectoryTrace) -> TrajectoryTrace:
    if isinstance(t, TrajectoryTrace):
        return t
    breakdown, names, times, service, run_id, error_type = t
    phases = [PhaseInterval(*p) for p in zip(names, times[::2], times[1::2], strict=True)]
    return TrajectoryTrace(breakdown, phases, service, run_id, error_type)


def read_file(
    path: str,
    ids: frozenset[str],
    divert: frozenset[str],
    bands: Mapping[str, str] | None,
    window: int,
    max_buffered: int,
) -> FileRead:
    """Assemble ``path`` alone, its spans of the traces in ``divert`` set aside."""
    old = gc.get_threshold()
    gc.set_threshold(50_000, 20, 100)  # as the command's own read: spans held survive
    try:
        result = CountingResult()
        out = FileRead(result)
        tracker = Tracker(result, bands, window, window, max_buffered, divert)
        for rows in iter_file_rows(path, result, out.messages.append):
            if out.problem is None and not ids.issuperset(map(_trace_id, rows)):
                tid = next(r[0] for r in rows if r[0] not in ids)
                out.problem = f"{path}: a trace id the byte scan did not find ({tid!r})"
            tracker.add_rows(rows)
        out.peak = tracker.asm.peak_buffered_spans
        tracker.finish()
        if tracker.far is not None:
            out.problem = f"{path}: trace {tracker.far} has a span {window}+ spans after its root"
        elif out.peak >= max_buffered:
            out.problem = f"{path}: the read buffer filled ({max_buffered} spans)"
        out.positions = tracker.position
        out.last_added = tracker.last_added
        out.groups = tracker.groups()
        out.diverted = tracker.diverted
        traces = tracker.traces
        out.incomplete = [(traces[tid][0], tid) for tid in result.incomplete]
        out.batch_events = tracker.batch_events
        out.first_loss = result.first_loss
        for _first, root, n in traces.values():
            if root < 0:
                out.rootless += n
            elif root + window > tracker.last_added:
                out.open_at_end.append((root, n))
        result.incomplete, result.warnings, result.batches = [], [], {}
        result.first_loss = {}
        return out
    finally:
        gc.set_threshold(*old)
