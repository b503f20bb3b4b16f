"""Spans read back, grouped by trace, into trajectories with their breakdowns, streaming.

Spans arrive in the order they were written (a trace file is written as spans end, so a
trajectory's phase spans come before its root). A trace is held until its trajectory root
has arrived and ``window_spans`` more spans have been read (room for spans that ended
after their root), then its breakdowns are computed and it is forgotten. At most
``max_buffered_spans`` spans are held: beyond that the oldest trace is finished early and
the cut is counted. Memory is bounded by those two numbers, not by the input's size.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from opentelemetry.trace import StatusCode

from otel_rollout import attributes as A
from otel_rollout._accounting.span_tree import SpanRecord, breakdown_from_tree
from otel_rollout._accounting.waits import engine_from_tree, engine_ns
from otel_rollout._export.in_flight import SPAN_NAME as IN_FLIGHT_SPAN
from otel_rollout.report._batches import MAX_BATCHES, batch_span
from otel_rollout.report._model import (
    LOSS_DUPLICATE,
    LOSS_EVICTED,
    LOSS_INCOMPLETE,
    LOSS_INVERTED,
    LOSS_INVERTED_ROOT,
    LOSS_LATE,
    LOSS_MISSING_END,
    LOSS_MISSING_START,
    MAX_LISTED,
    RawSpan,
    ReadResult,
    TrajectoryTrace,
)

#: Spans read after a trajectory's root before its trace is finished.
WINDOW_SPANS = 10_000
#: Spans held at most, over all traces being assembled.
MAX_BUFFERED_SPANS = 200_000
#: Finished trace ids remembered, so a line written twice is not counted twice.
REMEMBERED_TRACES = 200_000


class _Trace:
    __slots__ = ("engine", "has_phase", "inverted_root", "ready_at", "records", "roots")

    def __init__(self) -> None:
        self.records: dict[int, SpanRecord] = {}
        #: span id -> (name, engine timings) of spans carrying them (waits: llm split)
        self.engine: dict[int, tuple[str, tuple[int, int, int]]] = {}
        self.roots: list[RawSpan] = []
        self.ready_at = -1  # spans read when the last root arrived; -1: no root yet
        self.has_phase = False
        self.inverted_root = False  # its root ended before it started: not "incomplete"


class TraceAssembler:
    """Feed spans with :meth:`add`, then :meth:`finish`; ``emit`` gets each trajectory.

    Every span is checked: a span without a start or an end time, or ending before it
    starts, is rejected; a span id seen before in its trace is ignored; a span of a trace
    already reported is ignored. Each is counted in ``result.losses`` by reason.
    """

    def __init__(
        self,
        emit: Callable[[TrajectoryTrace], object],
        result: ReadResult,
        *,
        bands: Mapping[str, str] | None = None,
        window_spans: int = WINDOW_SPANS,
        max_buffered_spans: int = MAX_BUFFERED_SPANS,
    ) -> None:
        self._emit = emit
        self._result = result
        self._bands = bands
        self._window = window_spans
        self._max = max_buffered_spans
        self._open: OrderedDict[str, _Trace] = OrderedDict()
        self._ready: OrderedDict[str, None] = OrderedDict()  # by when their root arrived
        self._done: OrderedDict[str, None] = OrderedDict()
        self._buffered = 0
        self._seen = 0
        #: The most spans held at once so far (bounded by ``max_buffered_spans``).
        self.peak_buffered_spans = 0

    def add(self, span: RawSpan) -> None:
        if span.name == IN_FLIGHT_SPAN and span.parent_id is None:
            return  # a writer's in-flight record (``otel-rollout top``), not a trajectory's
        result = self._result
        self._seen += 1
        result.spans += 1
        if not span.start_ns or span.start_ns <= 0:
            result.lose(LOSS_MISSING_START)
            return
        if span.end_ns is None or span.end_ns <= 0:
            result.lose(LOSS_MISSING_END)
            return
        tid = span.trace_id
        if span.end_ns < span.start_ns:
            if A.TRAJECTORY_ID in span.attributes and tid not in self._done:
                result.lose(LOSS_INVERTED_ROOT)
                trace = self._open.get(tid)
                if trace is None:
                    trace = self._open[tid] = _Trace()
                trace.inverted_root = True
            else:
                result.lose(LOSS_INVERTED)
            return
        if tid in self._done:
            result.lose(LOSS_LATE)
            return
        trace = self._open.get(tid)
        if trace is None:
            trace = self._open[tid] = _Trace()
        if span.span_id in trace.records:
            result.lose(LOSS_DUPLICATE)
            return
        record = SpanRecord.from_span(span)
        trace.records[span.span_id] = record
        self._buffered += 1
        timings = engine_ns(span.attributes)
        if timings is not None:
            trace.engine[span.span_id] = (span.name, timings)
        if A.TRAJECTORY_ID in span.attributes:
            trace.roots.append(span)
            trace.ready_at = self._seen
            self._ready.pop(tid, None)
            self._ready[tid] = None
        elif record.phase is not None:
            trace.has_phase = True
        elif A.BATCH_ID in span.attributes and len(result.batches) < MAX_BATCHES:
            result.batches[str(span.attributes[A.BATCH_ID])] = batch_span(span)
        self._finish_ready()
        while self._buffered > self._max and self._open:
            old = next(iter(self._open))
            self._finish_trace(old, cut=True)
        if self._buffered > self.peak_buffered_spans:
            self.peak_buffered_spans = self._buffered

    def finish(self) -> ReadResult:
        """Finish every trace still held (the end of the input)."""
        for tid in list(self._open):
            self._finish_trace(tid)
        return self._result

    def _finish_ready(self) -> None:
        while self._ready:
            tid = next(iter(self._ready))
            if self._seen - self._open[tid].ready_at < self._window:
                return
            self._finish_trace(tid)

    def _finish_trace(self, tid: str, *, cut: bool = False) -> None:
        trace = self._open.pop(tid)
        self._ready.pop(tid, None)
        self._buffered -= len(trace.records)
        self._done[tid] = None
        if len(self._done) > REMEMBERED_TRACES:
            self._done.popitem(last=False)
        result = self._result
        if cut and (trace.roots or trace.has_phase):  # not another service's trace
            result.lose(LOSS_EVICTED)
        if not trace.roots:
            if trace.has_phase and not trace.inverted_root:
                result.lose(LOSS_INCOMPLETE)
                if len(result.incomplete) < MAX_LISTED:
                    result.incomplete.append(tid)
            return  # or another service's trace
        records = list(trace.records.values())
        for root in trace.roots:
            bd, phases = breakdown_from_tree(
                trace.records[root.span_id],
                records,
                root.attributes,
                error=root.status_code is StatusCode.ERROR,
                trace_id=tid,
                bands=self._bands,
                engine=engine_from_tree(root.span_id, records, trace.engine),
            )
            result.found += 1
            err = root.attributes.get("error.type")
            err = None if err is None else str(err)
            self._emit(TrajectoryTrace(bd, phases, root.service, root.run_id, err))


def breakdowns_from_spans(
    spans: Iterable[RawSpan],
    *,
    bands: Mapping[str, str] | None = None,
    result: ReadResult | None = None,
) -> ReadResult:
    """Group spans by trace and recompute each trajectory's breakdown (same functions)."""
    result = result or ReadResult()
    assembler = TraceAssembler(result.trajectories.append, result, bands=bands)
    for s in spans:
        assembler.add(s)
    return assembler.finish()


def read_trace_file(path: str | Path, *, bands: Mapping[str, str] | None = None) -> ReadResult:
    """Breakdowns of every trajectory in an OTLP JSON lines file (kept in the result)."""
    from otel_rollout.report._files import iter_file_spans

    result = ReadResult()
    assembler = TraceAssembler(result.trajectories.append, result, bands=bands)
    for s in iter_file_spans(path, result):
        assembler.add(s)
    return assembler.finish()
