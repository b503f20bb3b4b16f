"""Export that cannot hurt the trainer: the SDK's ``BatchSpanProcessor`` and exporter, each
wrapped by a small class that counts (as logfire's ``WrapperSpanProcessor`` does).

The processor admits a span only while fewer than the queue size wait, so the SDK's queue
never overflows: a span that finds it full is dropped and counted here, never waited for.
Every sampled span ends in one count of :class:`ExportStats`; an outage is logged once when
it starts and once when export resumes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import astuple, dataclass, replace
from typing import Any

from opentelemetry import metrics
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from otel_rollout import attributes as A
from otel_rollout._base.bounded import BoundedCall
from otel_rollout._base.fork import reset_in_child

_log = logging.getLogger("otel_rollout.export")
_DROPPED = A.METRIC_EXPORT_DROPPED

# An exporter's own per-batch error logs, silenced while an outage is already reported: the
# filter acts only on this thread, inside an export already known to fail.
_quiet = threading.local()
_quieted_loggers: set[str] = set()


def _quiet_loggers_of(exporter: Any) -> None:
    for cls in type(exporter).__mro__:  # the exporter logs from its modules (and bases')
        name = cls.__module__
        if name.startswith("opentelemetry.exporter") and name not in _quieted_loggers:
            _quieted_loggers.add(name)
            logging.getLogger(name).addFilter(lambda _: not getattr(_quiet, "on", False))


#: The reasons a span is dropped (``reason`` of ``rollout.export.dropped``).
REASONS = ("queue_full", "export_failed", "after_shutdown", "shutdown_timeout", "kept_overflow")
(REASON_QUEUE_FULL, REASON_EXPORT_FAILED, REASON_AFTER_SHUTDOWN, REASON_SHUTDOWN_TIMEOUT,
 REASON_KEPT_OVERFLOW) = REASONS  # fmt: skip


@dataclass
class ExportStats:
    """Span counts of one export pipeline since it was built (sampled spans only).

    Every span handed to the pipeline is in exactly one count: exported, pending (queued),
    in flight (handed to the exporter), or dropped for one reason (docs/reliability.md).
    """

    exported: int = 0
    dropped_queue_full: int = 0
    dropped_export_failed: int = 0
    pending: int = 0
    dropped_after_shutdown: int = 0
    dropped_shutdown_timeout: int = 0
    in_flight: int = 0
    dropped_kept_overflow: int = 0
    #: trajectories (not spans) the breakdown processor evicted before their root ended:
    #: never measured; not in ``dropped``
    trajectories_evicted: int = 0

    @property
    def dropped(self) -> int:
        return sum(self.losses().values())

    def losses(self) -> dict[str, int]:
        """Spans dropped, by reason."""
        return {why: getattr(self, f"dropped_{why}") for why in REASONS}

    def __add__(self, other: ExportStats) -> ExportStats:
        return ExportStats(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


class ExportCounts:
    def __init__(self, meter_provider: metrics.MeterProvider | None, target: str) -> None:
        self.target = target
        self._counter = None if meter_provider is None else meter_provider.get_meter(
            "otel_rollout").create_counter(A.METRIC_EXPORT_DROPPED, unit="{span}",
            description="Spans lost before reaching the trace backend, by reason")  # fmt: skip
        self._reset()
        # a child forked while the parent's queue was full would drop every span it ends
        reset_in_child(self, ExportCounts._reset)

    def _reset(self) -> None:
        self.lock = threading.Lock()
        self.stats = ExportStats()
        self.failing = self.queue_warned = self.after_warned = False
        self.closed = False  # shutdown() was called: spans ending now are not exported
        self.lost_since_success = 0
        self.abandoned = 0  # queued spans already counted lost when shutdown() gave up
        self.epoch = 0  # bumped by each abandon(): in-flight batches were counted lost too

    def drop(self, n: int, reason: str) -> None:
        if self._counter is not None and n:
            with contextlib.suppress(Exception):  # a metrics failure is no export failure
                self._counter.add(n, {A.EXPORT_REASON: reason})


class CountingExporter(SpanExporter):
    """Wraps an exporter: counts what it exports and fails, never raises."""

    def __init__(self, inner: SpanExporter, counts: ExportCounts) -> None:
        self.inner = inner
        self._counts = counts
        _quiet_loggers_of(inner)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        c, n = self._counts, len(spans)
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
            result = self.inner.export(spans)
        except Exception as exc:
            result, error = SpanExportResult.FAILURE, exc
        finally:
            _quiet.on = False
        ok = result is SpanExportResult.SUCCESS
        with c.lock:
            if c.epoch != epoch:  # abandon() ran meanwhile and counted this batch lost
                late = n
            else:
                c.stats.in_flight -= mine
            if ok:
                c.stats.exported += n
                c.stats.dropped_shutdown_timeout -= late  # not lost after all
                resumed, lost = c.failing, c.lost_since_success
                c.failing, c.lost_since_success = False, 0
            else:
                n -= late
                c.stats.dropped_export_failed += n
                started, c.failing = not c.failing, True
                c.lost_since_success += n
        if ok:
            if resumed:
                _log.warning("otel-rollout: trace export to %s resumed; %d spans were lost "
                             "since it last succeeded (counted in %s)", c.target, lost,
                             _DROPPED)  # fmt: skip
            return result
        c.drop(n, REASON_EXPORT_FAILED)
        if started:
            why = f": {type(error).__name__}: {error}" if error is not None else ""
            _log.warning("otel-rollout: trace export to %s failed%s; spans are dropped and "
                         "counted in %s until it recovers (logged again only when it does)",
                         c.target, why, _DROPPED)  # fmt: skip
        return result

    def shutdown(self) -> None:
        try:
            self.inner.shutdown()
        except Exception as exc:
            _log.warning("otel-rollout: exporter shutdown failed: %s", exc)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        try:
            return bool(self.inner.force_flush(timeout_millis))
        except Exception:
            return False


class CountingProcessor(SpanProcessor):
    """Wraps the SDK's ``BatchSpanProcessor``: admits a span only while its queue has
    room, and counts every span it does not admit."""

    def __init__(self, exporter: SpanExporter, counts: ExportCounts, max_queue_size: int,
                 **batch: Any) -> None:  # fmt: skip
        self._counts = counts
        self._max = max_queue_size
        self.exporter = CountingExporter(exporter, counts)
        try:
            self._batch = BatchSpanProcessor(self.exporter, max_queue_size=max_queue_size,
                                             **batch)  # fmt: skip
        except ValueError as exc:  # e.g. OTEL_BSP_MAX_EXPORT_BATCH_SIZE above the queue size
            size = min(512, max_queue_size)
            warnings.warn(f"otel-rollout: batch span processor settings rejected ({exc}); "
                          f"using a batch size of {size}", stacklevel=4)  # fmt: skip
            self._batch = BatchSpanProcessor(self.exporter, max_queue_size=max_queue_size,
                                             max_export_batch_size=size)  # fmt: skip
        # The SDK's force_flush exports the whole queue in the caller's thread, whatever
        # its timeout: run on a thread of its own, the caller waits at most the timeout.
        self._flush_queue = BoundedCall(lambda _: self._batch.force_flush(), "otel-rollout-flush")

    @property
    def stats(self) -> ExportStats:
        with self._counts.lock:
            return replace(self._counts.stats)

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self._batch.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if span.context.trace_flags.sampled and self._admit(1, REASON_QUEUE_FULL):
            self._batch.on_end(span)

    def on_end_kept_trace(self, spans: Sequence[ReadableSpan]) -> None:
        """A trace tail keep released: admitted whole, or dropped whole (``kept_overflow``)."""
        if self._admit(len(spans), REASON_KEPT_OVERFLOW):
            for span in spans:
                self._batch.on_end(span)

    def _admit(self, n: int, reason: str) -> bool:
        """Count ``n`` spans into the queue (True), or as dropped for ``reason`` or after
        shutdown (False)."""
        c = self._counts
        with c.lock:
            if c.closed:
                reason = REASON_AFTER_SHUTDOWN
                first, c.after_warned = not c.after_warned, True
            elif c.stats.pending + n > self._max:
                c.lost_since_success += n
                # logged once, and not during an outage already reported as such
                first = not c.queue_warned and not c.failing
                c.queue_warned = c.queue_warned or first
            else:
                c.stats.pending += n
                return True
            field = f"dropped_{reason}"
            setattr(c.stats, field, getattr(c.stats, field) + n)
        c.drop(n, reason)
        if first and reason == REASON_AFTER_SHUTDOWN:
            _log.warning("otel-rollout: spans ending after shutdown() are not exported to %s; "
                         "they are dropped and counted in %s (logged once)", c.target,
                         _DROPPED)  # fmt: skip
        elif first:
            _log.warning("otel-rollout: the export queue (%d spans) is full: %s takes spans "
                         "slower than they end; new spans are dropped and counted in %s "
                         "(logged once)", self._max, c.target, _DROPPED)  # fmt: skip
        return False

    def shutdown(self) -> None:
        with self._counts.lock:
            self._counts.closed = True
        self._batch.shutdown()  # exports what is queued

    def abandon(self) -> int:
        """Count the spans still queued or in flight as lost (``shutdown_timeout``):
        ``shutdown()`` stopped waiting. Should they still be exported, they move to
        ``exported``. Returns how many."""
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
        """Export what is queued; False when ``timeout_millis`` ran out first (the export
        goes on in the background, the next call waits for it)."""
        start = time.monotonic()
        ok = self._flush_queue(timeout_millis / 1000)
        left = max(0, int(timeout_millis - (time.monotonic() - start) * 1000))
        # the SDK's batch processor does not flush its exporter (a trace file then states
        # the losses counted since its last write)
        return self.exporter.force_flush(left) and ok


def guarded_span_processor(exporter: SpanExporter,
                           meter_provider: metrics.MeterProvider | None = None, *,
                           target: str = "the trace endpoint", max_queue_size: int | None = None,
                           **batch: Any) -> CountingProcessor:  # fmt: skip
    """A batch span processor over ``exporter`` that counts and logs loss, never raises.

    ``max_queue_size`` defaults to ``OTEL_BSP_MAX_QUEUE_SIZE`` or 2048 like the SDK's;
    other keyword arguments go to :class:`BatchSpanProcessor`.
    """
    if max_queue_size is None:
        from otel_rollout._settings.table import from_environment

        max_queue_size = from_environment("bsp_max_queue_size")
    return CountingProcessor(exporter, ExportCounts(meter_provider, target), max_queue_size,
                             **batch)  # fmt: skip


_metrics_log = logging.getLogger("otel_rollout.export.metrics")


def guarded_metric_exporter(exporter: Any, *, target: str = "the metrics endpoint") -> Any:
    """``exporter`` (a ``MetricExporter``) that never raises and logs an outage twice:
    when it starts and when export resumes (with the number of failed exports), instead
    of the exporter's own error at every interval.

    In a forked child it sends nothing. The SDK restarts the periodic export thread there,
    and the meter provider the child inherited holds the parent's cumulative histograms:
    sent from the child (under a new ``service.instance.id`` since SDK 1.45), the
    parent's trajectories would count twice in every backend."""
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

    class _GuardedMetricExporter(MetricExporter):
        def __init__(self) -> None:
            super().__init__(
                preferred_temporality=getattr(exporter, "_preferred_temporality", None),
                preferred_aggregation=getattr(exporter, "_preferred_aggregation", None),
            )
            self.inner = exporter
            self.pid = os.getpid()
            self.failing = False
            self.failed = 0  # failed exports since the last success
            _quiet_loggers_of(exporter)

        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kw: Any) -> Any:
            if os.getpid() != self.pid:  # a forked child: the parent's figures (see above)
                return MetricExportResult.SUCCESS
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


__all__ = [
    "CountingExporter",
    "CountingProcessor",
    "ExportStats",
    "guarded_metric_exporter",
    "guarded_span_processor",
]
