"""In-process tail keep: export the trajectories that matter even when sampling skipped them,
decided when the root ends (docs/configure.md, "Sampling that keeps every metric")."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

import numpy as np
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import SpanContext, TraceFlags

from otel_rollout import attributes as A
from otel_rollout._base.errors import internal_error, warn_once
from otel_rollout._base.fork import reset_in_child
from otel_rollout._base.spanbuffer import SpanBuffer

_KEEP_STATUSES = frozenset({A.STATUS_ERROR, A.STATUS_CANCELLED})
#: Trajectories the running percentile is taken over, and how often it is refreshed.
PERCENTILE_WINDOW = 1000
_REFRESH = 32


def _as_sampled(span: ReadableSpan) -> ReadableSpan:
    c = span.context
    ctx = SpanContext(c.trace_id, c.span_id, c.is_remote, TraceFlags(TraceFlags.SAMPLED),
                      c.trace_state)  # fmt: skip
    return ReadableSpan(
        name=span.name, context=ctx, parent=span.parent, resource=span.resource,
        attributes=span.attributes, events=span.events, links=span.links, kind=span.kind,
        status=span.status, start_time=span.start_time, end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )  # fmt: skip


class TailKeepProcessor(SpanProcessor):
    """Wraps an export processor: sampled spans pass straight through; unsampled
    (RECORD_ONLY) ones wait per trace (at most ``max_buffered_spans``, the oldest trace
    dropped beyond, counted in ``dropped_spans``) until their trajectory's root ends, then
    are exported in full if it failed, was cancelled, or was slow (``slower_than_s``, or the
    running ``slower_than_percentile`` of the last 1,000 once ``percentile_warmup`` ended)."""

    def __init__(self, export_processor: SpanProcessor, *, slower_than_s: float | None = None,
                 slower_than_percentile: float | None = None, max_buffered_spans: int = 100_000,
                 percentile_warmup: int = 50) -> None:  # fmt: skip
        if slower_than_s is not None and slower_than_s < 0:
            raise ValueError(f"slower_than_s must be >= 0 seconds, got {slower_than_s!r}")
        if slower_than_percentile is not None and not 0 < slower_than_percentile < 100:
            raise ValueError("slower_than_percentile must be in (0, 100), e.g. 99, "
                             f"got {slower_than_percentile!r}")  # fmt: skip
        if not 1 <= percentile_warmup <= PERCENTILE_WINDOW:
            raise ValueError(f"percentile_warmup must be in [1, {PERCENTILE_WINDOW}], "
                             f"got {percentile_warmup!r}")  # fmt: skip
        self._inner = export_processor
        self._slow_ns = None if slower_than_s is None else int(slower_than_s * 1e9)
        self._pct = slower_than_percentile
        self._recent: deque[int] = deque(maxlen=PERCENTILE_WINDOW)
        self._warmup = percentile_warmup
        self._pct_ns: int | None = None  # threshold from the running percentile
        self._since_refresh = 0
        self._max_buffered = max_buffered_spans
        self._after_fork()
        reset_in_child(self, TailKeepProcessor._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        self._buffer = SpanBuffer(self._max_buffered)
        self.kept_trajectories = 0
        self.dropped_spans = 0

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self._inner.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if span.context.trace_flags.sampled:
            if self._pct is not None and A.TRAJECTORY_ID in (span.attributes or {}):
                with self._lock:
                    self._observe((span.end_time or 0) - (span.start_time or 0))
            self._inner.on_end(span)
            return
        try:
            self._buffer_or_decide(span)
        except Exception as exc:
            internal_error("TailKeepProcessor.on_end", exc)

    @property
    def buffered_spans(self) -> int:
        return self._buffer.buffered

    @property
    def percentile_threshold_s(self) -> float | None:
        """The running-percentile threshold in seconds (None before warm-up)."""
        return None if self._pct_ns is None else self._pct_ns / 1e9

    def _observe(self, duration_ns: int) -> None:
        # Under self._lock. The threshold in force is the one from before this trajectory.
        if self._pct is None:
            return
        self._recent.append(duration_ns)
        self._since_refresh += 1
        if len(self._recent) >= self._warmup and (
            self._pct_ns is None or self._since_refresh >= _REFRESH
        ):
            self._pct_ns = int(np.percentile(np.fromiter(self._recent, np.int64), self._pct))
            self._since_refresh = 0

    def _buffer_or_decide(self, span: ReadableSpan) -> None:
        trace_id = span.context.trace_id
        attrs = span.attributes or {}
        with self._lock:
            for _, old in self._buffer.add(span):
                self.dropped_spans += len(old)
                warn_once("tailkeep:overflow", "otel-rollout: tail-keep buffer full; dropping "
                          "the oldest unsampled traces (counted in dropped_spans)")  # fmt: skip
            if A.TRAJECTORY_ID not in attrs:
                return
            duration = (span.end_time or 0) - (span.start_time or 0)
            if trace_id not in self._buffer:  # dropped for room: nothing of it left to keep
                self._observe(duration)
                return
            keep = (
                attrs.get(A.STATUS) in _KEEP_STATUSES
                or (self._slow_ns is not None and duration >= self._slow_ns)
                or (self._pct_ns is not None and duration >= self._pct_ns)
            )
            self._observe(duration)
            # this trajectory's spans leave the buffer; siblings in the same trace (other
            # trajectories of one batch span) are released only with their own roots
            chosen = self._buffer.take(trace_id, span.context.span_id, with_root=True)
            self.kept_trajectories += keep
        if keep:
            kept = [_as_sampled(s) for s in chosen]
            whole = getattr(self._inner, "on_end_kept_trace", None)
            if whole is not None:  # queued whole, or dropped whole and counted
                whole(kept)
                return
            for s in kept:
                self._inner.on_end(s)

    def shutdown(self) -> None:
        with self._lock:
            self._buffer.drain()
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)
