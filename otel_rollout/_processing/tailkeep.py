"""In-process tail keep: export the trajectories that matter even when sampling skipped them.

A Collector's tail sampler decides a fixed time after a trace's first span, which is too
early for trajectories that run for minutes. Here the decision is made when the
trajectory's root ends, in the process that saw every span.
"""

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


def _as_sampled(span: ReadableSpan) -> ReadableSpan:
    ctx = span.context
    sampled = SpanContext(
        ctx.trace_id, ctx.span_id, ctx.is_remote, TraceFlags(TraceFlags.SAMPLED), ctx.trace_state
    )
    return ReadableSpan(
        name=span.name,
        context=sampled,
        parent=span.parent,
        resource=span.resource,
        attributes=span.attributes,
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class TailKeepProcessor(SpanProcessor):
    """Wraps an export processor; also exports unsampled trajectories that failed or were slow.

    Sampled spans pass straight through. Spans recorded but not sampled (RECORD_ONLY) are
    buffered per trace; when a trajectory root ends with status ``error`` or
    ``cancelled`` (``keep_errors``), lasted at least ``slower_than_s``, or lasted at least
    the running ``slower_than_percentile`` of recent trajectories, its buffered spans are
    exported in full, else dropped. At most ``max_buffered_spans`` are held; beyond that
    the oldest trace's buffer is dropped and counted in ``dropped_spans``.

    The running percentile is taken over the durations of the last ``percentile_window``
    trajectories (sampled or not), once ``percentile_warmup`` of them have ended, and is
    refreshed every 32 trajectories: a run's slowest tail is kept without choosing a
    threshold in seconds up front.
    """

    def __init__(
        self,
        export_processor: SpanProcessor,
        *,
        slower_than_s: float | None = None,
        slower_than_percentile: float | None = None,
        keep_errors: bool = True,
        max_buffered_spans: int = 100_000,
        percentile_window: int = 1000,
        percentile_warmup: int = 50,
    ) -> None:
        if slower_than_s is not None and slower_than_s < 0:
            raise ValueError(f"slower_than_s must be >= 0 seconds, got {slower_than_s!r}")
        if slower_than_percentile is not None and not 0 < slower_than_percentile < 100:
            raise ValueError(
                "slower_than_percentile must be in (0, 100), e.g. 99, "
                f"got {slower_than_percentile!r}"
            )
        if percentile_warmup < 1 or percentile_window < percentile_warmup:
            raise ValueError(
                "need 1 <= percentile_warmup <= percentile_window, got "
                f"{percentile_warmup!r} and {percentile_window!r}"
            )
        self._buffer = SpanBuffer(max_buffered_spans)
        self._inner = export_processor
        self._slow_ns = None if slower_than_s is None else int(slower_than_s * 1e9)
        self._keep_errors = keep_errors
        self._lock = threading.Lock()
        self._pct = slower_than_percentile
        self._recent: deque[int] = deque(maxlen=percentile_window)
        self._warmup = percentile_warmup
        self._pct_ns: int | None = None  # threshold from the running percentile
        self._since_refresh = 0
        self.kept_trajectories = 0
        self.dropped_spans = 0
        self._max_buffered = max_buffered_spans
        reset_in_child(self, TailKeepProcessor._after_fork)

    def _after_fork(self) -> None:
        """In a forked child: the parent's unsampled spans are not the child's to keep."""
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
            release = getattr(self._inner, "release_kept", None)
            if release is not None:  # held kept traces move into room the queue made
                release()
        except Exception as exc:
            internal_error("TailKeepProcessor.on_end", exc)

    @property
    def buffered_spans(self) -> int:
        """Unsampled spans held, waiting for their trajectory's root to end."""
        return self._buffer.buffered

    @property
    def percentile_threshold_s(self) -> float | None:
        """The current running-percentile threshold in seconds (None before warm-up)."""
        return None if self._pct_ns is None else self._pct_ns / 1e9

    def _observe(self, duration_ns: int) -> None:
        # Under self._lock. The threshold in force is the one from before this trajectory.
        self._recent.append(duration_ns)
        self._since_refresh += 1
        if len(self._recent) >= self._warmup and (
            self._pct_ns is None or self._since_refresh >= 32
        ):
            self._pct_ns = int(np.percentile(np.fromiter(self._recent, np.int64), self._pct))
            self._since_refresh = 0

    def _buffer_or_decide(self, span: ReadableSpan) -> None:
        trace_id = span.context.trace_id
        attrs = span.attributes or {}
        with self._lock:
            for _, old in self._buffer.add(span):
                self.dropped_spans += len(old)
                warn_once(
                    "tailkeep:overflow",
                    "otel-rollout: tail-keep buffer full; dropping the oldest unsampled "
                    "traces (counted in dropped_spans)",
                )
            if A.TRAJECTORY_ID not in attrs:
                return
            duration = (span.end_time or 0) - (span.start_time or 0)
            if trace_id not in self._buffer:  # dropped for room: nothing of it left to keep
                if self._pct is not None:
                    self._observe(duration)
                return
            keep = self._keep_errors and attrs.get(A.STATUS) in _KEEP_STATUSES
            if not keep and self._slow_ns is not None:
                keep = duration >= self._slow_ns
            if not keep and self._pct_ns is not None:
                keep = duration >= self._pct_ns
            if self._pct is not None:
                self._observe(duration)
            # Spans of this trajectory leave the buffer; siblings in the same trace (other
            # trajectories of one batch span) are released only with their own roots.
            chosen = self._buffer.take(trace_id, span.context.span_id, with_root=True)
            if keep:
                self.kept_trajectories += 1
        if keep:
            kept = [_as_sampled(s) for s in chosen]
            whole = getattr(self._inner, "on_end_kept_trace", None)
            if whole is not None:  # queued, or held whole until the queue has room
                whole(kept)
                return
            release = getattr(self._inner, "on_end_kept", self._inner.on_end)
            for s in kept:
                release(s)

    def shutdown(self) -> None:
        with self._lock:
            self._buffer.drain()
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)
