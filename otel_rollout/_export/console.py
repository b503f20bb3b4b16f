"""A span exporter that prints each trajectory as an indented tree with its breakdown.

The agent thread only queues spans; the exporter's own thread buffers them per trace
(:mod:`otel_rollout._base.spanbuffer`), renders the trees
(:mod:`otel_rollout._export.console_render`)
and writes them, so a stream nobody reads never stalls the agent loop.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from otel_rollout import attributes as A
from otel_rollout._base.errors import internal_error, warn_once
from otel_rollout._base.spanbuffer import SpanBuffer
from otel_rollout._base.text import printable_for
from otel_rollout._export.console_render import (
    TreeRenderer,
    color_enabled,
    format_duration,
    strip_ansi,
)
from otel_rollout._export.guarded import ExportStats

__all__ = ["ConsoleSpanProcessor", "ConsoleTreeExporter", "color_enabled", "format_duration"]


class ConsoleTreeExporter(SpanExporter):
    """Prints each trajectory as an indented span tree followed by its time breakdown.

    Spans are buffered per trace until the trajectory root (the span carrying
    ``rollout.trajectory.id``) arrives; then the root line (env class, trajectory id,
    status, e2e, reward), its descendants indented by depth in start-time order (offset
    from the root's start, duration, phase, tokens, finish reason) and a breakdown line
    are written in one piece. The breakdown comes from the root's ``rollout.breakdown.*``
    attributes (written by :class:`~otel_rollout.BreakdownProcessor`), else it is computed
    from the buffered spans (``bands`` maps custom phases as the processor's option does).
    Traces without a trajectory root print as plain trees when their local root ends. A
    span that ends after its trajectory was printed prints as one ``late`` line.

    ``stream`` defaults to ``sys.stdout``, looked up at each print. ``color=None`` colours
    only a TTY and only when ``NO_COLOR`` is unset or empty; ``True``/``False`` force it.

    At most ``max_buffered_spans`` spans are held. Beyond that the oldest trace is printed
    at once as a partial tree (marked ``partial: buffer full``), so nothing is lost
    silently and memory stays bounded; a warning is logged the first time. When its root
    arrives later it prints with its breakdown and a note that earlier spans printed above.

    Export never blocks the caller (the agent loop, under a ``SimpleSpanProcessor``):
    ``export()`` only queues the spans; a thread of the exporter's own buffers, renders and
    writes them. When the stream does not keep up (a pipe nobody reads), at most
    ``max_queued_spans`` wait; further spans are dropped, counted in ``dropped_spans`` and
    reported once. ``force_flush()`` waits (within its timeout) until the queue is written;
    ``shutdown()`` prints what is still buffered as partial trees, waiting at most
    ``shutdown_timeout_s`` for a stream that is stuck. A stream that fails is logged once.
    Each tree is written with one ``write`` call.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        color: bool | None = None,
        max_buffered_spans: int = 10_000,
        bands: Mapping[str, str] | None = None,
        max_queued_spans: int = 10_000,
        shutdown_timeout_s: float = 5.0,
    ) -> None:
        if color is not None and not isinstance(color, bool):
            raise TypeError(f"color must be True, False or None (auto), got {color!r}")
        if isinstance(max_queued_spans, bool) or not isinstance(max_queued_spans, int):
            raise TypeError(f"max_queued_spans must be an int, got {max_queued_spans!r}")
        if max_queued_spans < 1:
            raise ValueError(f"max_queued_spans must be at least 1, got {max_queued_spans!r}")
        self._buffer = SpanBuffer(max_buffered_spans)
        self._stream = stream
        self._color = color
        self._bands = dict(bands) if bands else None
        self._max_queued = max_queued_spans
        self.shutdown_timeout_s = shutdown_timeout_s
        self._init_state()
        #: Spans printed early as partial trees because the buffer was full.
        self.flushed_spans = 0
        #: Spans dropped because the stream did not keep up (the queue was full).
        self.dropped_spans = 0
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: (e := ref()) and e._init_state())

    def _init_state(self) -> None:
        self._cond = threading.Condition()
        self._queue: deque[list[ReadableSpan]] = deque()
        self._queued = 0  # spans queued or being handled by the thread
        self._worker: threading.Thread | None = None
        self._stopping = False
        self._shutdown = False
        self._renderer = TreeRenderer(self._bands)
        self._buffer = SpanBuffer(self._buffer.max_spans)
        self._handled = self._failed = 0

    # --- SpanExporter -------------------------------------------------------------------
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Queue ``spans`` for the exporter's thread; never blocks, never raises."""
        try:
            n = len(spans)
            with self._cond:
                if self._shutdown:
                    return SpanExportResult.FAILURE
                full = self._queued + n > self._max_queued
                if full:
                    self.dropped_spans += n
                else:
                    self._queue.append(list(spans))
                    self._queued += n
                    if self._worker is None:
                        self._start_worker_locked()
                    self._cond.notify()
        except Exception as exc:
            internal_error("ConsoleTreeExporter.export", exc)
            return SpanExportResult.FAILURE
        if full:
            warn_once(
                "console:queue",
                "otel-rollout: console output is not keeping up (is stdout a pipe nobody "
                "reads?); %d spans are waiting, further spans are dropped and counted in "
                "ConsoleTreeExporter.dropped_spans",
                self._max_queued,
            )
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Write what is queued, then every trace still buffered as a partial tree; waits
        at most ``shutdown_timeout_s`` for a stream that does not take it (called again,
        waits again)."""
        with self._cond:
            first = not self._shutdown
            self._shutdown = self._stopping = True
            worker = self._worker
            self._cond.notify_all()
        if worker is not None:
            worker.join(self.shutdown_timeout_s)
        elif first:  # nothing was ever exported: print on this thread
            self._print_partials()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait until every queued span is handled and written; trees still waiting for
        their root stay buffered. False if the stream did not take them in time."""
        with self._cond:
            return self._cond.wait_for(lambda: self._queued == 0, timeout_millis / 1000)

    @property
    def stats(self) -> ExportStats:
        """Spans handled (buffered or printed), dropped because the stream did not keep up
        (``dropped_queue_full``) or failed (``dropped_export_failed``), and still queued, as
        for the other pipelines (``Rollout.export_stats``)."""
        with self._cond:
            return ExportStats(self._handled, self.dropped_spans, self._failed, self._queued)

    @property
    def buffered_spans(self) -> int:
        """Spans held, waiting for their trajectory or local root."""
        return self._buffer.buffered

    # --- the exporter's thread ------------------------------------------------------------
    def _start_worker_locked(self) -> None:
        self._worker = threading.Thread(target=self._run, name="otel-rollout-console",
                                        daemon=True)  # fmt: skip
        self._worker.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._stopping)
                if not self._queue:
                    break
                batch = self._queue[0]
            ok = False
            try:
                chunks = [c for span in batch for c in self._accept(span)]
                ok = self._write(chunks)
            except Exception as exc:
                internal_error("ConsoleTreeExporter export thread", exc)
            finally:
                with self._cond:
                    self._queue.popleft()
                    self._queued -= len(batch)
                    if ok:
                        self._handled += len(batch)
                    else:
                        self._failed += len(batch)
                    self._cond.notify_all()
        self._print_partials()

    def _print_partials(self) -> None:
        try:
            chunks = [
                self._renderer.render_partial(tid, buf, "root not ended at shutdown")
                for tid, buf in self._buffer.drain()
            ]
        except Exception as exc:
            internal_error("ConsoleTreeExporter.shutdown", exc)
            return
        self._write(chunks)

    def _accept(self, span: ReadableSpan) -> list[str]:
        ctx = span.context
        tid, sid = ctx.trace_id, ctx.span_id
        parent = span.parent
        r = self._renderer
        is_trajectory = A.TRAJECTORY_ID in (span.attributes or {})
        if is_trajectory or parent is None or parent.is_remote:
            descendants = self._buffer.take(tid, sid)
            earlier = r.flushed_traces.pop(tid, False)
            text = r.render_root(span, descendants, is_trajectory, earlier)
            r.remember(sid, span.start_time or 0, 0, r.label(span))
            return [text]
        printed = r.printed.get(parent.span_id)
        if printed is not None:
            start, depth, label = printed
            r.remember(sid, start, depth + 1, label)
            return [r.render_late(span, start, depth + 1, label)]
        out = []
        for old_tid, old in self._buffer.add(span):
            self.flushed_spans += len(old)
            r.mark_flushed(old_tid)
            out.append(r.render_partial(old_tid, old, "buffer full"))
            warn_once(
                "console:overflow",
                "otel-rollout: console exporter buffer full (%d spans); printing the oldest "
                "traces as partial trees before their root ends",
                self._buffer.max_spans,
            )
        return out

    def _out(self) -> Any:
        return self._stream if self._stream is not None else sys.stdout

    def _write(self, chunks: list[str]) -> bool:
        if not chunks:
            return True
        text = "".join(chunks)
        try:
            out = self._out()
            if not color_enabled(out, self._color):
                text = strip_ansi(text)
            out.write(printable_for(out, text))  # odd text in ids is escaped, never fatal
            flush = getattr(out, "flush", None)
            if flush is not None:
                flush()
        except Exception as exc:
            warn_once(
                "console:stream",
                "otel-rollout: console exporter cannot write to its stream (reported once): %r",
                exc,
            )
            return False
        return True


class ConsoleSpanProcessor(SimpleSpanProcessor):
    """``SimpleSpanProcessor`` whose ``force_flush`` waits for the console exporter's queue
    (the SDK's returns at once), so ``provider.force_flush()`` means printed."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.span_exporter.force_flush(timeout_millis)
