"""Spans read back, grouped by trace, into trajectories with their breakdowns, streaming:
memory is bounded by ``window_spans`` and ``max_buffered_spans``, not by the input's size
(docs/demo.md)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping

from opentelemetry.trace import StatusCode

from otel_rollout import attributes as A
from otel_rollout._accounting.span_tree import SpanRecord, SpanTuple, breakdown_from_tree
from otel_rollout._accounting.waits import engine_from_tree, engine_ns
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
    LOSS_TIME_RANGE,
    MAX_LISTED,
    MAX_TIME_NS,
    RawSpan,
    ReadResult,
    Row,
    TrajectoryTrace,
    row_of,
)
from otel_rollout.report._values import drop_odd_values

#: Spans read after a trajectory's root before its trace is finished.
WINDOW_SPANS = 10_000
#: Spans held at most, over all traces being assembled.
MAX_BUFFERED_SPANS = 200_000
#: Finished trace ids remembered, so a line written twice is not counted twice.
REMEMBERED_TRACES = 200_000


_NEVER = float("inf")


class _Trace:
    __slots__ = ("engine", "has_phase", "inverted_root", "ready_at", "records", "roots")

    def __init__(self) -> None:
        self.records: dict[int, SpanTuple] = {}  # (id, parent, start, end, phase)
        #: span id -> (name, engine timings) of spans carrying them (waits: llm split)
        self.engine: dict[int, tuple[str, tuple[int, int, int]]] = {}
        self.roots: list[RawSpan] = []
        self.ready_at = -1  # spans read when the last root arrived; -1: no root yet
        self.has_phase = False
        self.inverted_root = False  # its root ended before it started: not "incomplete"


class TraceAssembler:
    """Feed spans with :meth:`add` or :meth:`add_rows`, then :meth:`finish`; ``emit`` gets
    each trajectory. A span that cannot be used is counted in ``result.losses``."""

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
        self._due = _NEVER  # _seen at which the first trace in _ready is finished
        #: The most spans held at once so far (bounded by ``max_buffered_spans``).
        self.peak_buffered_spans = 0

    def add(self, span: RawSpan) -> None:
        self.add_rows((row_of(span),))

    def add_rows(self, rows: Iterable[Row]) -> None:
        # the hot loop of a report: locals, and the trace of the span before kept
        result = self._result
        opened = self._open
        done = self._done
        trajectory_id = A.TRAJECTORY_ID
        seen = first = self._seen
        limit = self._max
        peak = self.peak_buffered_spans
        due = self._due  # reloaded after each call that may change it
        last_tid: str | None = None
        trace = None
        try:
            for tid, span_id, parent_id, _name, start, end, phase, span in rows:
                seen += 1
                if end is None or not 0 < start <= end <= MAX_TIME_NS:  # else the usual span
                    if not start or start <= 0:
                        result.lose(LOSS_MISSING_START)
                    elif end is None or end <= 0:
                        result.lose(LOSS_MISSING_END)
                    elif start > MAX_TIME_NS or end > MAX_TIME_NS:
                        result.lose(LOSS_TIME_RANGE)
                    elif span is not None and trajectory_id in span.attributes and tid not in done:
                        result.lose(LOSS_INVERTED_ROOT)
                        last_tid = None
                        trace = opened.get(tid)
                        if trace is None:
                            trace = opened[tid] = _Trace()
                        trace.inverted_root = True
                    else:
                        result.lose(LOSS_INVERTED)
                    continue
                # else still open: every finish forgets last_tid (trace: None only before)
                if tid is not last_tid or trace is None:
                    if tid in done:
                        result.lose(LOSS_LATE)
                        continue
                    trace = opened.get(tid)
                    if trace is None:
                        trace = opened[tid] = _Trace()
                    last_tid = tid
                records = trace.records
                if span_id in records:
                    result.lose(LOSS_DUPLICATE)
                    continue
                records[span_id] = (span_id, parent_id, start, end, phase)
                buffered = self._buffered = self._buffered + 1
                if span is not None:
                    self._seen = seen
                    self._whole_span(tid, trace, span, phase)
                    due = self._due
                elif phase is not None:
                    trace.has_phase = True
                if seen >= due:
                    self._seen = seen
                    self._finish_ready()
                    due = self._due
                    buffered = self._buffered
                    last_tid = None
                if buffered > limit:
                    while self._buffered > limit and opened:
                        self._finish_trace(next(iter(opened)), cut=True)
                    due = self._due
                    buffered = self._buffered
                    last_tid = None
                if buffered > peak:
                    peak = buffered
        finally:
            self._seen = seen
            self.peak_buffered_spans = peak
            result.spans += seen - first

    def _whole_span(self, tid: str, trace: _Trace, span: RawSpan, phase: str | None) -> None:
        """What a span's other attributes say: engine timings, a root, a batch."""
        attributes = span.attributes
        drop_odd_values(attributes, self._result.lose)
        timings = engine_ns(attributes)
        if timings is not None:
            trace.engine[span.span_id] = (span.name, timings)
        if A.TRAJECTORY_ID in attributes:
            trace.roots.append(span)
            trace.ready_at = self._seen
            self._ready.pop(tid, None)
            self._ready[tid] = None
            self._set_due()
        elif phase is not None:
            trace.has_phase = True
        elif A.BATCH_ID in attributes:
            if len(self._result.batches) < MAX_BATCHES:
                self._result.batches[str(attributes[A.BATCH_ID])] = batch_span(span)
        elif A.STEP_WALL in attributes or A.STEP_PHASE in attributes:
            self._result.steps.add(span)

    def finish(self) -> ReadResult:
        """Finish every trace still held (the end of the input)."""
        for tid in list(self._open):
            self._finish_trace(tid)
        return self._result

    def _set_due(self) -> None:
        """When the first trace waiting after its root is due (``_ready`` is by ready_at)."""
        ready = self._ready
        self._due = self._open[next(iter(ready))].ready_at + self._window if ready else _NEVER

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
        self._set_due()
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
        # records are plain tuples (cheaper than SpanRecords); the engine's reader wants those
        full = [SpanRecord._make(r) for r in records] if trace.engine else records
        for root in trace.roots:
            bd, phases = breakdown_from_tree(
                trace.records[root.span_id],
                records,
                root.attributes,
                error=root.status_code is StatusCode.ERROR,
                trace_id=tid,
                bands=self._bands,
                engine=engine_from_tree(root.span_id, full, trace.engine),
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
    result = result or ReadResult()
    assembler = TraceAssembler(result.trajectories.append, result, bands=bands)
    assembler.add_rows([row_of(s) for s in spans])
    return assembler.finish()
