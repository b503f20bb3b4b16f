"""Sampling that never loses a metric: every span is recorded, a ratio is exported."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult, TraceIdRatioBased
from opentelemetry.trace import Link, SpanKind, get_current_span
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes


class RecordingRatioSampler(Sampler):
    """Export ``ratio`` of traces, but record every span (RECORD_ONLY for the rest), so
    the breakdown processor and the histograms see 100% of trajectories. A root is picked
    by trace id (``TraceIdRatioBased``); children, local or remote, follow their parent
    (docs/configure.md, "Sampling that keeps every metric")."""

    def __init__(self, ratio: float) -> None:
        if not isinstance(ratio, int | float) or not 0.0 <= float(ratio) <= 1.0:
            raise ValueError(f"sampling ratio must be a number in [0, 1], got {ratio!r}")
        self.ratio = float(ratio)
        self._root = TraceIdRatioBased(self.ratio)

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        parent = get_current_span(parent_context).get_span_context()
        if parent.is_valid:
            sampled = parent.trace_flags.sampled
            state: Any = parent.trace_state
        else:
            sampled = self._root.should_sample(parent_context, trace_id, name).decision.is_sampled()
            state = None
        decision = Decision.RECORD_AND_SAMPLE if sampled else Decision.RECORD_ONLY
        # The SDK replaces a span's attributes with the sampler's: pass them through.
        return SamplingResult(decision, attributes, state)

    def get_description(self) -> str:
        return f"RecordingRatioSampler{{{self.ratio}}}"
