"""What an export pipeline counts: spans exported, pending, in flight, held, and dropped
by reason, with the ``rollout.export.dropped`` counter those drops also go to.

:class:`ExportStats` is the public snapshot (``Rollout.export_stats``); ``ExportCounts``
is the live, locked state one pipeline's batch processor, exporter and release buffer
share.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import astuple, dataclass
from typing import Any

from otel_rollout import attributes as A
from otel_rollout._base.fork import reset_in_child

REASON_QUEUE_FULL = "queue_full"
REASON_EXPORT_FAILED = "export_failed"
REASON_AFTER_SHUTDOWN = "after_shutdown"
REASON_SHUTDOWN_TIMEOUT = "shutdown_timeout"
REASON_KEPT_OVERFLOW = "kept_overflow"


@dataclass
class ExportStats:
    """Span counts of one export pipeline since it was built (sampled spans only).

    Every span handed to the pipeline is in exactly one count: exported, pending, being
    exported (``in_flight``), tail-kept and waiting for room in the queue (``held``), or
    dropped for one reason (queue full; export failed; ended after ``shutdown()``; still
    queued, held or in flight when ``shutdown()`` gave up waiting; a tail-kept trace that
    found the release buffer full, ``kept_overflow``).
    """

    exported: int = 0
    dropped_queue_full: int = 0
    dropped_export_failed: int = 0
    pending: int = 0  # in the batch queue, not yet handed to the exporter
    dropped_after_shutdown: int = 0
    dropped_shutdown_timeout: int = 0
    in_flight: int = 0  # handed to the exporter, which has not answered yet
    held: int = 0  # tail-kept spans waiting in the release buffer for room in the queue
    dropped_kept_overflow: int = 0
    #: trajectories (not spans) the breakdown processor stopped tracking before their root
    #: ended (past its in-flight cap or age limit): never measured. Not in ``dropped``.
    trajectories_evicted: int = 0

    @property
    def dropped(self) -> int:
        return (
            self.dropped_queue_full
            + self.dropped_export_failed
            + self.dropped_after_shutdown
            + self.dropped_shutdown_timeout
            + self.dropped_kept_overflow
        )

    def losses(self) -> dict[str, int]:
        """Spans dropped, by reason (the ``reason`` of ``rollout.export.dropped``)."""
        return {
            REASON_QUEUE_FULL: self.dropped_queue_full,
            REASON_EXPORT_FAILED: self.dropped_export_failed,
            REASON_AFTER_SHUTDOWN: self.dropped_after_shutdown,
            REASON_SHUTDOWN_TIMEOUT: self.dropped_shutdown_timeout,
            REASON_KEPT_OVERFLOW: self.dropped_kept_overflow,
        }

    def __add__(self, other: ExportStats) -> ExportStats:
        return ExportStats(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


class ExportCounts:
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
        self.after_export: Any = None  # called after each export (the queue has room again)
        self._counter = None
        # A child forked while the parent's queue was full would otherwise count that
        # queue as its own, and drop every span it ends.
        reset_in_child(self, ExportCounts._reset)
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
