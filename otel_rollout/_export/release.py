"""Tail-kept traces released into the export queue as it drains, instead of dropped.

Below 100% sampling, tail keep decides when a trajectory's root ends; a burst of failures
(an inference server crash) keeps a thousand traces at once, far more than the export
queue holds. :class:`KeptRelease` takes each kept trace whole: into the queue if there is
room and nothing is waiting ahead of it, else into a bounded FIFO of its own, from which
spans move into the queue as room frees (after each export, at each span that ends, and
at ``force_flush``/``shutdown``, which drain it within their timeout). Only a trace that
would take the FIFO past its bound is dropped, whole, and counted as ``kept_overflow``.
Sampled spans that find the queue full wait in the same FIFO (behind the kept traces).
Nothing here ever waits: a thread that finds another one releasing leaves it the work.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_rollout import attributes as A
from otel_rollout._base.fork import reset_in_child
from otel_rollout._export.counts import REASON_KEPT_OVERFLOW

_log = logging.getLogger("otel_rollout.export")

#: Default bound of the release FIFO, in spans (``OTEL_ROLLOUT_TAIL_KEEP_RELEASE_MAX_SPANS``).
DEFAULT_MAX_SPANS = 100_000


class KeptRelease:
    """The release FIFO of one export queue (see the module).

    ``counts``: the queue's ``ExportCounts`` (its lock guards ``stats.pending``, ``held`` and
    ``dropped_kept_overflow``); ``queue_max``: the queue's bound in spans; ``max_spans``:
    this FIFO's bound (0: no FIFO, a kept trace that does not fit is dropped);
    ``enqueue(span)``: hands one span, already counted in ``pending``, to the queue;
    ``compact(span)``, if given, what to hold instead of a span (a compact record, which
    ``enqueue`` then takes: see ``otlp_compact``), so that a FIFO of a hundred thousand
    spans is not millions of objects for the garbage collector to walk.
    """

    def __init__(self, counts: Any, queue_max: int, max_spans: int,
                 enqueue: Callable[[Any], None],
                 compact: Callable[[ReadableSpan], Any] | None = None) -> None:  # fmt: skip
        self._counts = counts
        self._compact = compact
        self._queue_max = queue_max
        self.max_spans = max(0, int(max_spans))
        self._enqueue = enqueue
        self._held: deque[ReadableSpan] = deque()
        self._releasing = threading.Lock()
        self._warned = False
        reset_in_child(self, KeptRelease._reset)

    def _reset(self) -> None:
        """In a forked child: the parent's kept traces are the parent's to export."""
        self._held = deque()
        self._releasing = threading.Lock()
        self._warned = False

    @property
    def held(self) -> int:
        """Spans waiting in the FIFO."""
        return len(self._held)

    def offer(self, spans: Sequence[ReadableSpan], *, kept: bool = True) -> bool:
        """Spans of one trace (sampled), whole: queued, or held behind those already
        held. When the buffer has no room: a kept trace is dropped whole and counted as
        ``kept_overflow`` (True is returned); else False, nothing counted (the caller's
        ``queue_full``)."""
        n = len(spans)
        if not n:
            return True
        c = self._counts
        first = False
        with c.lock:
            if not self._held and c.stats.pending + n <= self._queue_max:
                outcome = "queued"
                c.stats.pending += n
            elif c.stats.held + n <= self.max_spans:
                outcome = "held"
                self._held.extend(spans if self._compact is None else map(self._compact, spans))
                c.stats.held += n
            elif not kept:
                return False
            else:
                outcome = "dropped"
                c.stats.dropped_kept_overflow += n
                first, self._warned = not self._warned, True
                held = c.stats.held
        if outcome == "queued":
            for span in spans:
                self._enqueue(span)
        elif outcome == "held":
            self.release()
        else:
            c.drop(n, REASON_KEPT_OVERFLOW)
            if first:
                _log.warning(
                    "otel-rollout: %d spans wait for the export queue (%s); tail-kept "
                    "traces beyond that are dropped whole and counted in %s as %s (logged "
                    "once; OTEL_ROLLOUT_TAIL_KEEP_RELEASE_MAX_SPANS sets the bound)",
                    held, c.target, A.METRIC_EXPORT_DROPPED, REASON_KEPT_OVERFLOW,
                )  # fmt: skip
        return True

    def release(self) -> int:
        """Move held spans into the queue while it has room; returns how many moved."""
        if not self._held or not self._releasing.acquire(blocking=False):
            return 0
        moved = 0
        try:
            c = self._counts
            while True:
                with c.lock:
                    room = min(self._queue_max - c.stats.pending, len(self._held))
                    if room <= 0 or c.closed:
                        return moved
                    batch = [self._held.popleft() for _ in range(room)]
                    c.stats.pending += room
                    c.stats.held -= room
                for span in batch:
                    self._enqueue(span)
                moved += room
        finally:
            self._releasing.release()

    def drain(self, flush: Callable[[float], Any], timeout_s: float) -> bool:
        """Release and flush until nothing is held or ``timeout_s`` passed; True if empty.

        ``flush(seconds_left)`` exports the queue (each export releases more into it)."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        while self._held and time.monotonic() < deadline:
            self.release()
            flush(max(0.0, deadline - time.monotonic()))
        return not self._held

    def abandon(self) -> int:
        """Give up on what is held (counted by the caller); returns how many spans."""
        with self._counts.lock:
            n = len(self._held)
            self._held.clear()
            self._counts.stats.held = 0
        return n
