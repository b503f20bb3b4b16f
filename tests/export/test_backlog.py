"""The trace file's queue past ``BACKLOG_ABOVE`` waiting spans: compact records in chunks.

While the writer is stuck (a hung disk) the spans waiting are held in a few hundred
objects, not one per span, so a full garbage collection does not walk them one by one;
once it writes again, every span reaches the file exactly as the official encoder
writes it, none lost.
"""

from __future__ import annotations

import gc
import json
import threading
import types
import weakref

from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from otel_rollout._export.backlog import BACKLOG_ABOVE, CHUNK, Backlog
from otel_rollout._export.guarded import guarded_batch_processor
from otel_rollout._export.otlp_compact import compact_span
from otel_rollout._export.tracefile import RotatingTraceFile


def test_records_wait_in_chunks_and_leave_oldest_first():
    queue: list[int] = []
    backlog = Backlog(queue.append, chunk=4)
    for i in range(10):
        assert backlog.add(i)
    assert len(backlog) == 10 and backlog.chunks == 3  # two full chunks and the open one
    assert backlog.move(5) == 8  # whole chunks, at least what was asked
    assert queue == list(range(8)) and len(backlog) == 2
    assert backlog.move(100) == 2  # the open chunk too
    assert queue == list(range(10)) and len(backlog) == 0
    assert backlog.move(100) == 0


def test_a_closed_backlog_hands_everything_over_and_takes_no_more():
    queue: list[int] = []
    backlog = Backlog(queue.append, chunk=4)
    for i in range(6):
        backlog.add(i)
    assert backlog.close() == 6 and queue == list(range(6))
    assert not backlog.add(6) and len(backlog) == 0


class _HungFile(RotatingTraceFile):
    """A trace file whose writes wait until ``go`` is set: a disk that stopped answering."""

    def __init__(self, path, go: threading.Event) -> None:
        super().__init__(path)
        self.go = go

    def export(self, spans):
        self.go.wait(60)
        return super().export(spans)


def _end_spans(tracer, n: int, start: int = 0) -> None:
    link = Link(SpanContext(7, 9, True, TraceFlags(1)), {"l": 1})
    for i in range(start, start + n):
        span = tracer.start_span(
            f"s{i}",
            kind=SpanKind(i % 5),
            attributes={"i": i, "s": f"v{i}", "f": i / 3, "b": i % 2 == 0, "seq": (i, i + 1)},
            links=[link] if i % 7 == 0 else (),
            start_time=1_000 + i,
        )
        if i % 3 == 0:
            span.add_event("e", {"k": "v"}, timestamp=2_000 + i)
        if i % 4 == 0:
            span.set_status(Status(StatusCode.ERROR, "bad"))
        span.end(end_time=5_000 + i)


#: Not followed from the processor: code, modules and classes lead to the whole program.
_NOT_FOLLOWED = (types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                 types.ModuleType, type, weakref.ReferenceType, threading.Thread)  # fmt: skip


def _traversed(root: object) -> int:
    """References the garbage collector follows in a full collection among what ``root``
    (the span processor) holds: each tracked object's referents, after two collections
    have untracked what they can. Walks only what the processor reaches, not the whole
    heap, whose size depends on what else the test session holds."""
    gc.collect()
    gc.collect()
    seen = {id(root)}
    todo = [root]
    followed = 0
    while todo:
        obj = todo.pop()
        referents = gc.get_referents(obj)
        followed += len(referents)
        for ref in referents:
            if id(ref) in seen or not gc.is_tracked(ref) or isinstance(ref, _NOT_FOLLOWED):
                continue
            if isinstance(ref, dict) and "__builtins__" in ref:
                continue  # a module's globals
            seen.add(id(ref))
            todo.append(ref)
    return followed


def _pipeline(tmp_path, capture=None):
    go = threading.Event()
    writer = _HungFile(tmp_path / "t.jsonl", go)
    proc = guarded_batch_processor(writer, target="t", max_queue_size=100_000)
    provider = TracerProvider(resource=Resource({"service.name": "b"}), shutdown_on_exit=False)
    provider.add_span_processor(proc)
    if capture is not None:
        provider.add_span_processor(SimpleSpanProcessor(capture))
    return go, proc, provider.get_tracer("scope", "1")


def test_while_the_writer_hangs_the_spans_waiting_are_held_in_few_objects(tmp_path):
    go, proc, tracer = _pipeline(tmp_path)
    try:
        _end_spans(tracer, BACKLOG_ABOVE + 2_000)  # the queue full, the backlog begun
        before = _traversed(proc)
        extra = 40 * CHUNK
        _end_spans(tracer, extra, start=BACKLOG_ABOVE + 2_000)
        grown = _traversed(proc) - before
        stats = proc.stats
        assert stats.pending + stats.in_flight == BACKLOG_ABOVE + 2_000 + extra
        # a queue of records would add one reference per span (10,240 here)
        assert grown < extra // 10, grown
    finally:
        go.set()
    assert proc.force_flush(60_000)
    proc.shutdown()
    stats = proc.stats
    assert stats.dropped == 0 and stats.pending == 0
    assert stats.exported == BACKLOG_ABOVE + 2_000 + extra


def _spans_of(docs):
    """(resource, scope, span) of every span in OTLP JSON documents, by trace and span id."""
    out = []
    for doc in docs:
        for rs in doc.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    out.append((rs.get("resource"), ss.get("scope"), span))
    return sorted(out, key=lambda t: (t[2]["traceId"], t[2]["spanId"]))


def test_what_waited_is_written_as_the_official_encoder_writes_it(tmp_path):
    capture = InMemorySpanExporter()
    go, proc, tracer = _pipeline(tmp_path, capture)
    n = BACKLOG_ABOVE + 6 * CHUNK + 100  # spans, records in the queue, records in chunks
    _end_spans(tracer, n)
    go.set()
    assert proc.force_flush(60_000)
    proc.shutdown()
    assert proc.stats.exported == n and proc.stats.dropped == 0
    lines = [json.loads(x) for x in (tmp_path / "t.jsonl").read_bytes().splitlines()]
    official = json.loads(json.dumps(encode_spans(capture.get_finished_spans()).to_dict()))
    ours = _spans_of(lines)
    assert len(ours) == n
    assert ours == _spans_of([official])


def test_records_a_race_left_in_the_backlog_go_out_with_the_next_span(tmp_path):
    # the exporter's thread moved everything and its queue drained just as a span was
    # added: the next span to end, finding few waiting, moves it first
    capture = InMemorySpanExporter()
    go, proc, tracer = _pipeline(tmp_path, capture)
    go.set()
    _end_spans(tracer, 1)
    (first,) = capture.get_finished_spans()
    assert proc.force_flush(60_000)
    with proc._counts.lock:
        proc._counts.stats.pending += 1
    assert proc._backlog.add(compact_span(first))
    _end_spans(tracer, 1, start=1)
    assert len(proc._backlog) == 0
    assert proc.force_flush(60_000)
    proc.shutdown()
    assert proc.stats.exported == 3 and proc.stats.pending == 0


class _KeepTraces:
    """Hands each group of ``size`` ended spans to ``proc`` as one tail-kept trace."""

    def __init__(self, proc, size: int) -> None:
        self.proc, self.size, self.spans = proc, size, []

    def on_start(self, span, parent_context=None):
        pass

    def _on_ending(self, span):
        pass

    def on_end(self, span):
        self.spans.append(span)
        if len(self.spans) == self.size:
            self.proc.on_end_kept_trace(self.spans)
            self.spans = []

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


def test_tail_kept_traces_waiting_for_a_hung_writer_are_held_as_untracked_records(tmp_path):
    # below 100% sampling, what does not fit the queue waits in the release FIFO
    go = threading.Event()
    proc = guarded_batch_processor(_HungFile(tmp_path / "t.jsonl", go), target="t",
                                   max_queue_size=4_000, kept_release=100_000)  # fmt: skip
    provider = TracerProvider(resource=Resource({"service.name": "b"}), shutdown_on_exit=False)
    provider.add_span_processor(_KeepTraces(proc, 10))
    tracer = provider.get_tracer("scope", "1")
    try:
        _end_spans(tracer, 6_000)  # the queue full, the FIFO begun
        gc.collect()
        before = len(gc.get_objects())
        _end_spans(tracer, 5_000, start=6_000)
        gc.collect()
        grown = len(gc.get_objects()) - before
        assert proc.stats.held >= 5_000
        # held as spans, each would be about ten tracked objects (50,000 here)
        assert grown < 500, grown
    finally:
        go.set()
    assert proc.force_flush(60_000)
    proc.shutdown()
    stats = proc.stats
    assert stats.dropped == 0 and stats.exported == 11_000 and stats.held == 0
    lines = [json.loads(x) for x in (tmp_path / "t.jsonl").read_bytes().splitlines()]
    assert len({s[2]["spanId"] for s in _spans_of(lines)}) == 11_000
