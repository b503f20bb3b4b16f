"""One trace file read in a worker process of ``otel-rollout report --jobs N``.

A worker assembles its file alone with the same :class:`TraceAssembler` as the sequential
read, and notes what the parent needs to put the files back into one stream: where (in
spans read) each trace first appeared and got its last root, where each loss reason first
occurred, which batch spans were recorded and where, and how many spans it held. Spans of
traces that also appear in another file are not assembled here but sent back with their
positions: the parent assembles those traces from all their spans, in file order.
"""

from __future__ import annotations

import gc
import mmap
import re
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_rollout import attributes as A
from otel_rollout._accounting.breakdown import PhaseInterval
from otel_rollout._export.in_flight import SPAN_NAME as IN_FLIGHT_SPAN
from otel_rollout.report._assemble import TraceAssembler
from otel_rollout.report._documents import _decode_id
from otel_rollout.report._files import iter_file_spans
from otel_rollout.report._model import (
    LOSS_DUPLICATE,
    LOSS_LATE,
    BatchSpan,
    RawSpan,
    ReadResult,
    TraceReadError,
    TrajectoryTrace,
)

#: A trace id as OTLP JSON (``traceId``, ``trace_id``) or Jaeger JSON (``traceID``) writes
#: it; case-sensitive, so the scan skips ahead to each ``"trace``. A key spelt otherwise is
#: seen by the worker (an id not found), and the read goes sequential.
_TRACE_ID = re.compile(rb'"trace(?:Id|ID|_id)"\s*:\s*"([^"\\]*)"')
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
    """A read's result that also counts the spans the assembler refused to add."""

    refused: int = 0

    def lose(self, reason: str, n: int = 1) -> None:
        super().lose(reason, n)
        if reason in (LOSS_DUPLICATE, LOSS_LATE):
            self.refused += n


class Tracker:
    """A :class:`TraceAssembler` fed spans with their position in the whole stream (spans
    read, in-flight records left out), noting what the merge needs (see the module).

    ``far`` names a trace that got a span more than ``window`` spans after its last root:
    the sequential read may have finished it before, so its content depends on everything
    read in between; the parent reads sequentially then.
    """

    def __init__(
        self,
        result: ReadResult,
        bands: Mapping[str, str] | None,
        window: int,
        asm_window: int,
        asm_max: int,
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
        self.last_added = 0
        self.batch_events: list[tuple[float, str, BatchSpan]] = []
        #: loss reason -> (position where first counted, order among those counted there)
        self.first_loss: dict[str, tuple[float, int]] = {}
        self.far: str | None = None
        self._nloss = 0

    def add(self, q: int, span: RawSpan) -> None:
        start, end, attrs = span.start_ns, span.end_ns, span.attributes
        if start and start > 0 and end is not None and end > 0:
            rooted = A.TRAJECTORY_ID in attrs
            valid = end >= start
            if valid or rooted:  # the assembler looks this span's trace up
                tid = span.trace_id
                info = self.traces.get(tid)
                if info is None:
                    info = self.traces[tid] = [q, -1, 0]
                elif info[1] >= 0 and q - info[1] > self.window:
                    self.far = tid
                if valid:
                    self._add_valid(q, span, info, rooted)
                    return
        self.asm.add(span)
        self.note_losses(q)

    def _add_valid(self, q: int, span: RawSpan, info: list[int], rooted: bool) -> None:
        info[2] += 1
        result = self.result
        refused = result.refused
        key = None
        if not rooted and A.BATCH_ID in span.attributes:
            key = str(span.attributes[A.BATCH_ID])
            old = result.batches.get(key)
        self.asm.add(span)
        if result.refused == refused:  # added: neither a duplicate nor late
            self.last_added = q
            if rooted:
                info[1] = q
            elif key is not None and (new := result.batches.get(key)) is not old:
                self.batch_events.append((q, key, new))  # type: ignore[arg-type]
        if len(result.losses) != self._nloss:
            self.note_losses(q)

    def note_losses(self, where: float) -> None:
        """Place the loss reasons counted for the first time since the last call."""
        losses = self.result.losses
        if len(losses) != self._nloss:
            for i, why in enumerate(list(losses)[self._nloss :]):
                self.first_loss[why] = (where, i)
            self._nloss = len(losses)

    def finish(self) -> None:
        self.asm.finish()
        self.note_losses(END)

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
    diverted: list[tuple[int, RawSpan]] = field(default_factory=list)
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
        return _read_file(path, ids, divert, bands, window, max_buffered)
    finally:
        gc.set_threshold(*old)


def _read_file(
    path: str,
    ids: frozenset[str],
    divert: frozenset[str],
    bands: Mapping[str, str] | None,
    window: int,
    max_buffered: int,
) -> FileRead:
    result = CountingResult()
    out = FileRead(result)
    tracker = Tracker(result, bands, window, window, max_buffered)
    diverted = out.diverted
    q = 0
    for span in iter_file_spans(path, result, out.messages.append):
        if span.name == IN_FLIGHT_SPAN and span.parent_id is None:
            continue  # not read by the assembler either
        q += 1
        tid = span.trace_id
        if tid in divert:
            tracker.note_losses(q - 0.5)  # bad lines read before this span
            diverted.append((q, span))
            continue
        if tid not in ids and out.problem is None:
            out.problem = f"{path}: a trace id the byte scan did not find ({tid!r})"
        tracker.add(q, span)
    tracker.note_losses(q + 0.5)  # bad lines after the last span
    out.peak = tracker.asm.peak_buffered_spans
    tracker.finish()
    if tracker.far is not None:
        out.problem = f"{path}: trace {tracker.far} has a span {window}+ spans after its root"
    elif out.peak >= max_buffered:
        out.problem = f"{path}: the read buffer filled ({max_buffered} spans)"
    out.positions = q
    out.last_added = tracker.last_added
    out.groups = tracker.groups()
    traces = tracker.traces
    out.incomplete = [(traces[tid][0], tid) for tid in result.incomplete]
    out.batch_events = tracker.batch_events
    out.first_loss = tracker.first_loss
    for _first, root, n in traces.values():
        if root < 0:
            out.rootless += n
        elif root + window > tracker.last_added:
            out.open_at_end.append((root, n))
    result.incomplete, result.warnings, result.batches = [], [], {}
    return out
