"""Export that cannot hurt the trainer: every lost span counted, each outage logged once.

``guarded_batch_processor(exporter, meter_provider)`` returns a batch span processor whose
exporter never raises and whose losses (queue full while the endpoint is slow or down,
batches the exporter gave up on) are counted in ``rollout.export.dropped`` and in
:class:`ExportStats`. A failing endpoint is logged once when the outage starts and once
when export resumes, with the number of spans lost in between, never once per span.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from collections.abc import Sequence
from dataclasses import astuple, dataclass, replace
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from otel_rollout import _attributes as A
from otel_rollout._fork import reset_in_child

_log = logging.getLogger("otel_rollout.export")
_metrics_log = logging.getLogger("otel_rollout.export.metrics")

REASON_QUEUE_FULL = "queue_full"
REASON_EXPORT_FAILED = "export_failed"
REASON_AFTER_SHUTDOWN = "after_shutdown"
REASON_SHUTDOWN_TIMEOUT = "shutdown_timeout"


@dataclass
class ExportStats:
    """Span counts of one export pipeline since it was built (sampled spans only).

    Every span handed to the pipeline is in exactly one count: exported, pending, being
    exported (``in_flight``), or dropped for one reason (queue full; export failed; ended
    after ``shutdown()``; still queued or in flight when ``shutdown()`` gave up waiting).
    """

    exported: int = 0
    dropped_queue_full: int = 0
    dropped_export_failed: int = 0
    pending: int = 0  # in the batch queue, not yet handed to the exporter
    dropped_after_shutdown: int = 0
    dropped_shutdown_timeout: int = 0
    in_flight: int = 0  # handed to the exporter, which has not answered yet

    @property
    def dropped(self) -> int:
        return (
            self.dropped_queue_full
            + self.dropped_export_failed
            + self.dropped_after_shutdown
            + self.dropped_shutdown_timeout
        )

    def losses(self) -> dict[str, int]:
        """Spans dropped, by reason (the ``reason`` of ``rollout.export.dropped``)."""
        return {
            REASON_QUEUE_FULL: self.dropped_queue_full,
            REASON_EXPORT_FAILED: self.dropped_export_failed,
            REASON_AFTER_SHUTDOWN: self.dropped_after_shutdown,
            REASON_SHUTDOWN_TIMEOUT: self.dropped_shutdown_timeout,
        }

    def __add__(self, other: ExportStats) -> ExportStats:
        return ExportStats(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


class _Counts:
    def __init__(self, meter_provider: Any, target: str) -> None:
        self.lock = threading.Lock()
        self.stats = ExportStats()
        self.target = target
        self.failing = False
        self.queue_warned = False
        self.lost_since_success = 0
        self.closed = False  # shutdown() was called: spans ending now are not exported
        self.after_warned = False
        self.abandoned = 0  # queued spans already counted lost when shutdown() gave up
        self.epoch = 0  # bumped by each abandon(): in-flight batches were counted lost too
        self._counter = None
        # A child forked while the parent's queue was full would otherwise count that
        # queue as its own, and drop every span it ends.
        reset_in_child(self, _Counts._reset)
        if meter_provider is not None:
            meter = meter_provider.get_meter("otel_rollout")
            self._counter = meter.create_counter(
                A.METRIC_EXPORT_DROPPED,
                unit="{span}",
                description="Spans lost before reaching the trace backend, by reason",
            )

    def _reset(self) -> None:
        """In a forked child: the SDK gives its batch processor an empty queue; so here."""
        self.lock = threading.Lock()
        self.stats = ExportStats()
        self.failing = False
        self.queue_warned = False
        self.lost_since_success = 0
        self.closed = False
        self.after_warned = False
        self.abandoned = 0
        self.epoch = 0

    def drop(self, n: int, reason: str) -> None:
        if self._counter is not None and n:
            # A metrics failure must not turn into an export failure.
            with contextlib.suppress(Exception):
                self._counter.add(n, {A.EXPORT_REASON: reason})


_quiet = threading.local()
_quieted_loggers: set[str] = set()


class _QuietDuringOutage(logging.Filter):
    """Drops an exporter's own per-batch error logs once the outage has been reported."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_quiet, "on", False)


def _quiet_loggers_of(exporter: SpanExporter) -> None:
    # The exporter logs from its module (and its base classes' modules) on every failed
    # batch; the filter only acts on this thread, inside an export already known to fail.
    for cls in type(exporter).__mro__:
        name = cls.__module__
        if name.startswith("opentelemetry.exporter") and name not in _quieted_loggers:
            _quieted_loggers.add(name)
            logging.getLogger(name).addFilter(_QuietDuringOutage())


class _GuardedExporter(SpanExporter):
    def __init__(self, inner: SpanExporter, counts: _Counts) -> None:
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

    def __init__(self, exporter: SpanExporter, counts: _Counts, max_queue_size: int,
                 kept_reserve: int = 0, **batch: Any) -> None:  # fmt: skip
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

    @property
    def stats(self) -> ExportStats:
        with self._counts.lock:
            return replace(self._counts.stats)

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self._batch.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        self._enqueue(span, self._max)

    def on_end_kept(self, span: ReadableSpan) -> None:
        """A span released by tail keep: it may also use the reserve beyond the queue."""
        self._enqueue(span, self._kept_max)

    def _enqueue(self, span: ReadableSpan, limit: int) -> None:
        if not span.context.trace_flags.sampled:
            return  # the batch processor would skip it too
        c = self._counts
        with c.lock:
            closed = c.closed
            if closed:
                c.stats.dropped_after_shutdown += 1
                first, c.after_warned = not c.after_warned, True
        if closed:
            c.drop(1, REASON_AFTER_SHUTDOWN)
            if first:
                _log.warning(
                    "otel-rollout: spans ending after shutdown() are not exported to %s; "
                    "they are dropped and counted in %s (logged once)",
                    c.target, A.METRIC_EXPORT_DROPPED,
                )  # fmt: skip
            return
        with c.lock:
            full = c.stats.pending >= limit
            if full:  # dropped here, counted, instead of a warning per span from the SDK
                c.stats.dropped_queue_full += 1
                c.lost_since_success += 1
                # Logged once, and not during an outage already reported as such.
                first = not c.queue_warned and not c.failing
                c.queue_warned = c.queue_warned or first
            else:
                c.stats.pending += 1
        if full:
            c.drop(1, REASON_QUEUE_FULL)
            if first:
                _log.warning(
                    "otel-rollout: the export queue (%d spans) is full: %s takes spans slower "
                    "than they end; new spans are dropped and counted in %s (logged once)",
                    self._max, c.target, A.METRIC_EXPORT_DROPPED,
                )  # fmt: skip
            return
        self._batch.on_end(span)

    def shutdown(self) -> None:
        with self._counts.lock:
            self._counts.closed = True
        self._batch.shutdown()

    def abandon(self) -> int:
        """Count the spans still queued as lost (``shutdown_timeout``): ``shutdown()``
        stopped waiting for them. Should they still reach the exporter, they move to
        ``exported`` (or stay lost if that export fails). Returns how many."""
        c = self._counts
        with c.lock:
            n = c.stats.pending + c.stats.in_flight
            c.stats.dropped_shutdown_timeout += n
            c.abandoned += c.stats.pending
            c.stats.pending = c.stats.in_flight = 0
            c.epoch += 1
        c.drop(n, REASON_SHUTDOWN_TIMEOUT)
        return n

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        ok = self._batch.force_flush(timeout_millis)
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
    **batch: Any,
) -> _CountingBatchProcessor:
    """A batch span processor over ``exporter`` that counts and logs loss, never raises.

    ``max_queue_size`` defaults to ``OTEL_BSP_MAX_QUEUE_SIZE`` or 2048 like the SDK's;
    ``kept_reserve`` more spans fit for those a tail keep releases (``on_end_kept``);
    other keyword arguments go to :class:`BatchSpanProcessor`. The returned processor's
    ``stats`` is an :class:`ExportStats` snapshot.
    """
    if max_queue_size is None:
        from otel_rollout._settings import from_environment

        max_queue_size = from_environment("bsp_max_queue_size")
    counts = _Counts(meter_provider, target)
    return _CountingBatchProcessor(
        _GuardedExporter(exporter, counts), counts, max_queue_size, kept_reserve, **batch
    )


def guarded_metric_exporter(exporter: Any, *, target: str = "the metrics endpoint") -> Any:
    """``exporter`` (a ``MetricExporter``) that never raises and logs an outage twice:
    when it starts and when export resumes (with the number of failed exports), instead
    of the exporter's own error at every interval."""
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

    class _GuardedMetricExporter(MetricExporter):
        def __init__(self) -> None:
            super().__init__(
                preferred_temporality=getattr(exporter, "_preferred_temporality", None),
                preferred_aggregation=getattr(exporter, "_preferred_aggregation", None),
            )
            self.inner = exporter
            self.failing = False
            self.failed = 0  # failed exports since the last success
            _quiet_loggers_of(exporter)

        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kw: Any) -> Any:
            _quiet.on = self.failing
            error = None
            try:
                result = exporter.export(metrics_data, timeout_millis=timeout_millis, **kw)
            except Exception as exc:
                result, error = MetricExportResult.FAILURE, exc
            finally:
                _quiet.on = False
            if result is MetricExportResult.SUCCESS:
                if self.failing:
                    _metrics_log.warning(
                        "otel-rollout: metric export to %s resumed after %d failed exports",
                        target, self.failed,
                    )  # fmt: skip
                self.failing, self.failed = False, 0
                return result
            self.failed += 1
            if not self.failing:
                self.failing = True
                why = f": {type(error).__name__}: {error}" if error is not None else ""
                _metrics_log.warning(
                    "otel-rollout: metric export to %s failed%s; retried every interval and "
                    "logged again only when it recovers",
                    target, why,
                )  # fmt: skip
            return MetricExportResult.FAILURE

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            try:
                return bool(exporter.force_flush(timeout_millis))
            except Exception:
                return False

        def shutdown(self, timeout_millis: float = 30_000, **kw: Any) -> None:
            try:
                exporter.shutdown(timeout_millis=timeout_millis, **kw)
            except Exception as exc:
                _metrics_log.warning("otel-rollout: metric exporter shutdown failed: %s", exc)

    return _GuardedMetricExporter()
