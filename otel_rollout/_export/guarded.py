"""Export that cannot hurt the trainer: every lost span counted, each outage logged once.

``guarded_batch_processor(exporter, meter_provider)`` returns a batch span processor whose
exporter never raises and whose losses (queue full while the endpoint is slow or down,
batches the exporter gave up on) are counted in ``rollout.export.dropped`` and in
:class:`ExportStats`. A failing endpoint is logged once when the outage starts and once
when export resumes, with the number of spans lost in between, never once per span.

``guarded_metric_exporter`` (in :mod:`otel_rollout._export.metric_export`) does the same for
metric exports.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from otel_rollout import attributes as A
from otel_rollout._base.bounded import BoundedCall
from otel_rollout._base.quiet import _quiet, _quiet_loggers_of
from otel_rollout._export.backlog import BACKLOG_ABOVE, Backlog
from otel_rollout._export.counts import (
    REASON_AFTER_SHUTDOWN,
    REASON_EXPORT_FAILED,
    REASON_QUEUE_FULL,
    REASON_SHUTDOWN_TIMEOUT,
    ExportCounts,
    ExportStats,
)
from otel_rollout._export.metric_export import guarded_metric_exporter
from otel_rollout._export.release import KeptRelease

_log = logging.getLogger("otel_rollout.export")

#: Spans waiting in the queue beyond which an exporter taking compact records (the trace
#: file) gets those instead of spans: a record costs the agent thread a little to make,
#: and spares the garbage collector a queue of span objects (about ten tracked objects a
#: span); the queue of a writer that keeps up stays below this. Past
#: ``backlog.BACKLOG_ABOVE`` they wait in chunks (:class:`~.backlog.Backlog`).
COMPACT_ABOVE = 512

#: How long ``shutdown()`` of the batch processor spends exporting held kept traces at
#: most (``Rollout.shutdown(timeout_s)`` bounds it further).
SHUTDOWN_DRAIN_S = 30.0


class _GuardedExporter(SpanExporter):
    def __init__(self, inner: SpanExporter, counts: ExportCounts) -> None:
        self._inner = inner
        self._counts = counts
        _quiet_loggers_of(inner)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        c = self._counts
        n = len(spans)
        with c.lock:
            # after shutdown() gave up, what is still exported was already counted lost
            late = min(n, c.abandoned)
            c.abandoned -= late
            mine = n - late
            c.stats.pending = max(0, c.stats.pending - mine)
            c.stats.in_flight += mine
            epoch = c.epoch
            _quiet.on = c.failing
        error = None
        try:
            result = self._inner.export(spans)
        except Exception as exc:
            result, error = SpanExportResult.FAILURE, exc
        finally:
            _quiet.on = False
        after = c.after_export
        if after is not None:  # room in the queue: held kept traces move in
            try:
                after()
            except Exception as exc:
                _log.debug("otel-rollout: releasing kept traces failed: %r", exc)
        with c.lock:
            if c.epoch != epoch:  # abandon() ran meanwhile and counted this batch lost
                late = n
            else:
                c.stats.in_flight -= mine
            if result is SpanExportResult.SUCCESS:
                c.stats.exported += n
                c.stats.dropped_shutdown_timeout -= late  # not lost after all
                resumed, lost = c.failing, c.lost_since_success
                c.failing, c.lost_since_success = False, 0
            else:
                n -= late
                c.stats.dropped_export_failed += n
                started = not c.failing
                c.failing = True
                c.lost_since_success += n
        if result is SpanExportResult.SUCCESS:
            if resumed:
                _log.warning(
                    "otel-rollout: trace export to %s resumed; %d spans were lost since it "
                    "last succeeded (counted in %s)", c.target, lost, A.METRIC_EXPORT_DROPPED,
                )  # fmt: skip
            return result
        c.drop(n, REASON_EXPORT_FAILED)
        if started:
            why = f": {type(error).__name__}: {error}" if error is not None else ""
            _log.warning(
                "otel-rollout: trace export to %s failed%s; spans are dropped and counted in "
                "%s until it recovers (logged again only when it does)",
                c.target, why, A.METRIC_EXPORT_DROPPED,
            )  # fmt: skip
        return result

    def shutdown(self) -> None:
        try:
            self._inner.shutdown()
        except Exception as exc:
            _log.warning("otel-rollout: exporter shutdown failed: %s", exc)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        try:
            return bool(self._inner.force_flush(timeout_millis))
        except Exception:
            return False


class _CountingBatchProcessor(SpanProcessor):
    """A BatchSpanProcessor that knows how full its queue is, so it can count what it drops."""

    def __init__(self, exporter: SpanExporter, counts: ExportCounts, max_queue_size: int,
                 kept_reserve: int = 0, kept_release: int | None = None,
                 **batch: Any) -> None:  # fmt: skip
        self._counts = counts
        self._exporter = exporter
        self._max = max_queue_size
        # Room beyond the queue for spans released by tail keep (on_end_kept): a burst of
        # failures releases far more at once than the queue holds for ordinary traffic.
        self._kept_max = max_queue_size + max(0, kept_reserve)
        max_queue_size = self._kept_max
        try:
            self._batch = BatchSpanProcessor(exporter, max_queue_size=max_queue_size, **batch)
        except ValueError as exc:  # e.g. OTEL_BSP_MAX_EXPORT_BATCH_SIZE above the queue size
            batch_size = min(512, max_queue_size)
            warnings.warn(f"otel-rollout: batch span processor settings rejected ({exc}); "
                          f"using a batch size of {batch_size}", stacklevel=4)  # fmt: skip
            self._batch = BatchSpanProcessor(exporter, max_queue_size=max_queue_size,
                                             max_export_batch_size=batch_size)  # fmt: skip
        # An exporter that takes compact records of spans (the trace file: see
        # otlp_compact.compact_span) has them queued instead once the queue is long.
        inner = getattr(exporter, "_inner", exporter)
        self._compact = getattr(inner, "compact", None)
        inner_batch = getattr(self._batch, "_batch_processor", None)
        self._emit = getattr(inner_batch, "emit", None)
        self._queue = getattr(inner_batch, "_queue", None)
        if self._emit is None or self._queue is None:  # an SDK without them: spans are
            self._compact = None  # queued as they are
        # Past BACKLOG_ABOVE waiting, records wait in chunks behind the queue; the
        # exporter's thread moves them in after each export.
        self._backlog = Backlog(self._emit) if self._compact is not None else None
        # The SDK's force_flush exports the whole queue in the caller's thread, whatever
        # its timeout: run on a thread of its own, the caller waits at most the timeout.
        self._flush_queue = BoundedCall(lambda _: self._batch.force_flush(), "otel-rollout-flush")
        # Tail-kept traces that do not fit wait here, whole, for room (None: no buffer).
        self._release: KeptRelease | None = None
        if kept_release is not None:
            # what it holds and releases is compacted as the queue's own spans are
            self._release = KeptRelease(counts, self._kept_max, kept_release,
                                        self._release_one, self._compact)  # fmt: skip
        if self._release is not None or self._backlog is not None:
            counts.after_export = self._after_export

    @property
    def stats(self) -> ExportStats:
        with self._counts.lock:
            return replace(self._counts.stats)

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self._batch.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if self._release is None:
            self._enqueue(span, self._max)
            return
        # Below 100% sampling a sampled span that finds the queue full waits, behind the
        # kept traces, in the release buffer too: a failure burst loses neither.
        self._offer([span], kept=False)

    def on_end_kept(self, span: ReadableSpan) -> None:
        """A span released by tail keep: it may also use the reserve beyond the queue."""
        if self._release is None:
            self._enqueue(span, self._kept_max)
        else:
            self._offer([span], kept=True)

    def on_end_kept_trace(self, spans: Sequence[ReadableSpan]) -> None:
        """A trace released whole by tail keep: queued, or held in the release buffer
        until the queue has room for it, or (the buffer full) dropped whole and counted
        as ``kept_overflow``."""
        if self._release is None:
            for span in spans:
                self._enqueue(span, self._kept_max)
        else:
            self._offer(spans, kept=True)

    def release_kept(self) -> None:
        """Move held spans into the queue if it has room (cheap when none are held)."""
        if self._release is not None and self._release.held:
            self._release.release()

    def _after_export(self) -> None:
        """Room in the queue (an export took a batch): held kept traces and the backlog
        move in."""
        if self._release is not None and self._release.held:
            self._release.release()
        backlog = self._backlog
        if backlog is not None and len(backlog):
            backlog.move(BACKLOG_ABOVE - len(self._queue))

    def _offer(self, spans: Sequence[ReadableSpan], *, kept: bool) -> None:
        spans = [s for s in spans if s.context.trace_flags.sampled]
        if not spans or self._dropped_closed(len(spans)):
            return
        if not self._release.offer(spans, kept=kept):  # type: ignore[union-attr]
            self._dropped_full(len(spans))  # an ordinary span: queue and buffer full

    def _drain_kept(self, timeout_s: float) -> None:
        if self._release is not None and self._release.held:
            self._release.drain(self._flush_queue, timeout_s)

    def _enqueue(self, span: ReadableSpan, limit: int) -> None:
        if not span.context.trace_flags.sampled:
            return  # the batch processor would skip it too
        if self._dropped_closed(1):
            return
        c = self._counts
        with c.lock:
            pending = c.stats.pending
            full = pending >= limit
            if not full:
                c.stats.pending += 1
        if full:
            self._dropped_full(1)
            return
        self._put(span, pending)

    def _release_one(self, span: Any) -> None:
        """A span (or compact record) tail keep released, counted in ``pending``."""
        backlog = self._backlog
        if backlog is None:
            self._batch.on_end(span)
        else:
            self._put(span, len(self._queue) + len(backlog))  # type: ignore[arg-type]

    def _put(self, span: Any, pending: int) -> None:
        """Hand ``span`` (or its compact record), counted in ``pending``, to the queue,
        ``pending`` spans waiting ahead of it: past COMPACT_ABOVE as a record, past
        BACKLOG_ABOVE into the backlog."""
        backlog = self._backlog
        if backlog is not None and pending < BACKLOG_ABOVE and len(backlog):
            # the queue drained while records were still added (a race with the
            # exporter's thread, which moves them after each export): they go first
            backlog.move(BACKLOG_ABOVE)
        record = span
        if self._compact is not None and (pending >= COMPACT_ABOVE or type(span) is tuple):
            if type(span) is not tuple:  # see COMPACT_ABOVE
                record = self._compact(span)
            if pending >= BACKLOG_ABOVE and backlog.add(record):  # type: ignore[union-attr]
                return
            if type(record) is tuple:
                self._emit(record)
                return
        self._batch.on_end(record)

    def _dropped_closed(self, n: int) -> bool:
        """Count ``n`` spans ending after shutdown() as lost; False if it was not called."""
        c = self._counts
        with c.lock:
            closed = c.closed
            if closed:
                c.stats.dropped_after_shutdown += n
                first, c.after_warned = not c.after_warned, True
        if closed:
            c.drop(n, REASON_AFTER_SHUTDOWN)
            if first:
                _log.warning(
                    "otel-rollout: spans ending after shutdown() are not exported to %s; "
                    "they are dropped and counted in %s (logged once)",
                    c.target, A.METRIC_EXPORT_DROPPED,
                )  # fmt: skip
        return closed

    def _dropped_full(self, n: int) -> None:
        # dropped here, counted, instead of a warning per span from the SDK
        c = self._counts
        with c.lock:
            c.stats.dropped_queue_full += n
            c.lost_since_success += n
            # Logged once, and not during an outage already reported as such.
            first = not c.queue_warned and not c.failing
            c.queue_warned = c.queue_warned or first
        c.drop(n, REASON_QUEUE_FULL)
        if first:
            _log.warning(
                "otel-rollout: the export queue (%d spans) is full: %s takes spans slower "
                "than they end; new spans are dropped and counted in %s (logged once)",
                self._max, c.target, A.METRIC_EXPORT_DROPPED,
            )  # fmt: skip

    def shutdown(self) -> None:
        # kept traces still held are exported first (Rollout.shutdown bounds the wait:
        # abandon() counts what is left and empties the buffer)
        self._drain_kept(SHUTDOWN_DRAIN_S)
        with self._counts.lock:
            self._counts.closed = True
        if self._backlog is not None:  # the batch processor exports its queue at shutdown
            self._backlog.close()
        self._batch.shutdown()
        if self._release is not None:  # the drain ran out of time
            n = self._release.abandon()
            if n:
                with self._counts.lock:
                    self._counts.stats.dropped_shutdown_timeout += n
                self._counts.drop(n, REASON_SHUTDOWN_TIMEOUT)

    def abandon(self) -> int:
        """Count the spans still queued as lost (``shutdown_timeout``): ``shutdown()``
        stopped waiting for them. Should they still reach the exporter, they move to
        ``exported`` (or stay lost if that export fails). Returns how many."""
        c = self._counts
        held = self._release.abandon() if self._release is not None else 0
        with c.lock:
            n = c.stats.pending + c.stats.in_flight + held
            c.stats.dropped_shutdown_timeout += n
            c.abandoned += c.stats.pending
            c.stats.pending = c.stats.in_flight = 0
            c.epoch += 1
        c.drop(n, REASON_SHUTDOWN_TIMEOUT)
        return n

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export what is queued and held; False when ``timeout_millis`` ran out first (the
        export goes on in the background, the next call waits for it)."""
        start = time.monotonic()
        if self._backlog is not None and len(self._backlog):  # the queue then is not empty
            self._backlog.move(BACKLOG_ABOVE)
        self._drain_kept(timeout_millis / 1000)
        ok = self._flush_queue(max(0.0, timeout_millis / 1000 - (time.monotonic() - start)))
        if self._release is not None and self._release.held:
            ok = False  # kept traces still wait: the timeout ran out
        timeout_millis = max(0, int(timeout_millis - (time.monotonic() - start) * 1000))
        # the SDK's batch processor does not flush its exporter (a trace file then states
        # the losses counted since its last write)
        return bool(self._exporter.force_flush(timeout_millis)) and ok


def guarded_batch_processor(
    exporter: SpanExporter,
    meter_provider: Any = None,
    *,
    target: str = "the trace endpoint",
    max_queue_size: int | None = None,
    kept_reserve: int = 0,
    kept_release: int | None = None,
    **batch: Any,
) -> _CountingBatchProcessor:
    """A batch span processor over ``exporter`` that counts and logs loss, never raises.

    ``max_queue_size`` defaults to ``OTEL_BSP_MAX_QUEUE_SIZE`` or 2048 like the SDK's;
    ``kept_reserve`` more spans fit for those a tail keep releases (``on_end_kept``);
    ``kept_release``: the bound in spans of the buffer where tail-kept traces that do not
    fit wait, whole, for room (``on_end_kept_trace``; None: no buffer, they are queued or
    dropped span by span); other keyword arguments go to :class:`BatchSpanProcessor`.
    The returned processor's ``stats`` is an :class:`ExportStats` snapshot.
    """
    if max_queue_size is None:
        from otel_rollout._settings.table import from_environment

        max_queue_size = from_environment("bsp_max_queue_size")
    counts = ExportCounts(meter_provider, target)
    return _CountingBatchProcessor(
        _GuardedExporter(exporter, counts), counts, max_queue_size, kept_reserve,
        kept_release, **batch,
    )  # fmt: skip


__all__ = [
    "ExportStats",
    "guarded_batch_processor",
    "guarded_metric_exporter",
]
