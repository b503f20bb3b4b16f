"""The batch span (docs/batch.md): one per training step, linked from its trajectories'
roots (each the root of its own trace); their breakdowns reach the open batch by batch id,
and when the block ends the batch analysis goes onto the span.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span

from otel_rollout import attributes as A
from otel_rollout._accounting.batch_analysis import BatchAccumulator, BatchAnalysis
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._api import step_context
from otel_rollout._api.phase_handles import _record_exception
from otel_rollout._api.phase_scope import Scope
from otel_rollout._base.clock import now_ns
from otel_rollout._base.errors import internal_error
from otel_rollout._processing.batch_registry import BatchRegistry, GenerationLog

_CURRENT: ContextVar[Batch | RemoteBatch | None] = ContextVar("otel_rollout_batch", default=None)


def current_batch() -> Batch | RemoteBatch | None:
    """The batch whose block the caller is in (or whose carrier a worker attached)."""
    return _CURRENT.get()


#: Carrier key holding the batch: ``<id>;<step>;<nest>;<trace id>;<span id>``.
CARRIER_KEY = "otel-rollout-batch"


class RemoteBatch:
    """A batch opened in another process (the Ray driver), attached from a carrier."""

    __slots__ = ("batch_id", "links", "nest", "step")

    def __init__(self, batch_id: str, step: int | None, nest: bool, span_context: Any) -> None:
        self.batch_id = batch_id
        self.step = step
        self.nest = nest
        valid = span_context.is_valid
        self.links = (Link(span_context, {A.BATCH_ID: batch_id}),) if valid else ()


def batch_carrier() -> dict[str, str]:
    """The current batch as a carrier entry (empty outside a batch)."""
    batch = _CURRENT.get()
    if batch is None or not batch.links:
        return {}
    ctx = batch.links[0].context
    step = "" if batch.step is None else str(batch.step)
    value = f"{batch.batch_id};{step};{int(batch.nest)};{ctx.trace_id:032x};{ctx.span_id:016x}"
    return {CARRIER_KEY: value}


def batch_from_carrier(headers: Mapping[str, str] | None) -> RemoteBatch | None:
    """The batch a carrier brings, or ``None`` (none, or malformed: then ignored)."""
    raw = (headers or {}).get(CARRIER_KEY)
    if not raw:
        return None
    try:
        batch_id, step, nest, trace_id, span_id = raw.rsplit(";", 4)
        ctx = trace.SpanContext(
            int(trace_id, 16), int(span_id, 16), is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )  # fmt: skip
        return RemoteBatch(batch_id, int(step) if step else None, nest == "1", ctx)
    except ValueError:
        return None


def step_span_batch() -> RemoteBatch | None:
    """Outside a batch, with a user's span current (a trainer's step span), a batch whose
    id is that span's id, so trajectories become roots linked to it, not its children."""
    if _CURRENT.get() is not None:
        return None
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return RemoteBatch(format(ctx.span_id, "016x"), None, False, ctx)


def attach_batch(batch: Batch | RemoteBatch | None) -> Any:
    """Make ``batch`` current; returns a token for :func:`detach_batch`."""
    return _CURRENT.set(batch)


def detach_batch(token: Any) -> None:
    _CURRENT.reset(token)


class Batch:
    """A handle on one open batch: its span, id, and (once ended) its analysis."""

    __slots__ = ("_acc", "analysis", "batch_id", "links", "nest", "span", "step")

    def __init__(
        self, span: Span, batch_id: str, step: int | None, nest: bool, concurrency: int | None
    ) -> None:
        self.span = span
        self.batch_id = batch_id
        self.step = step
        self.nest = nest  # trajectories nest under the span rather than link to it
        start = getattr(span, "start_time", None)
        self._acc = BatchAccumulator(batch_id, start_ns=start, capacity=concurrency)
        self.links = (Link(span.get_span_context(), {A.BATCH_ID: batch_id}),)
        self.analysis: BatchAnalysis | None = None  # set when the block ends

    @property
    def trace_id(self) -> str:
        """The batch span's trace id, 32 hex digits."""
        return format(self.span.get_span_context().trace_id, "032x")

    @property
    def context(self) -> otel_context.Context:
        """A context whose current span is the batch span (to carry to workers)."""
        return trace.set_span_in_context(self.span)

    @property
    def breakdowns(self) -> list[Breakdown]:
        """Breakdowns of the batch's trajectories received so far."""
        return self._acc.breakdowns

    @property
    def dropped(self) -> int:
        """Trajectories left out of the analysis because the batch held too many."""
        return self._acc.dropped

    def add(self, breakdowns: Breakdown | Iterable[Breakdown]) -> None:
        """Add breakdowns finished elsewhere (gathered from Ray workers) to this batch."""
        if isinstance(breakdowns, Breakdown):
            breakdowns = (breakdowns,)
        for b in breakdowns:
            if b.batch_id in (None, self.batch_id):
                self._acc.add(b)


def new_batch_id(step: int | None) -> str:
    suffix = format(random.getrandbits(32), "08x")
    return f"{step}-{suffix}" if step is not None else suffix


class BatchScope(Scope[Batch]):
    """Context manager (sync and async) for one batch span."""

    __slots__ = (
        "_attrs", "_batch", "_clock", "_concurrency", "_generation", "_instruments", "_nest",
        "_registry", "_step", "_token", "_tracer",
    )  # fmt: skip

    def __init__(
        self,
        tracer: trace.Tracer,
        instruments: Any,
        step: int | None,
        batch_id: str,
        attributes: Mapping[str, Any],
        nest: bool,
        clock: Callable[[], int] = now_ns,
        registry: BatchRegistry | None = None,
        generation: GenerationLog | None = None,
        concurrency: int | None = None,
    ) -> None:
        self._tracer = tracer
        self._generation = generation  # the tracer's batch walls, for its steps' accounts
        self._registry = registry  # the processor's open batches (None: no processor)
        self._clock = clock
        self._instruments = instruments
        self._step = step
        self._nest = nest
        attrs: dict[str, Any] = {A.BATCH_ID: batch_id}
        if step is not None:
            attrs[A.STEP] = step
        if concurrency is not None:
            attrs[A.BATCH_CONCURRENCY] = concurrency
        self._concurrency = concurrency
        attrs.update((k, v) for k, v in attributes.items() if v is not None)
        self._attrs = attrs
        self._batch: Batch | None = None

    def __enter__(self) -> Batch:
        attrs = self._attrs
        links: tuple[Link, ...] = ()
        step = step_context.current_step()
        if step is not None:  # generated by the step in progress
            if step.number is not None and self._step is None:
                self._step = step.number
                attrs = {**attrs, A.STEP: step.number}
            link_attrs = {A.LINK_TYPE: A.LINK_GENERATED_BY}
            if step.number is not None:
                link_attrs[A.STEP] = step.number
            links = (Link(step.span.get_span_context(), link_attrs),)
        start = self._clock()
        span = self._tracer.start_span(
            A.SPAN_BATCH, attributes=attrs, links=links, start_time=start
        )
        batch = Batch(span, attrs[A.BATCH_ID], self._step, self._nest, self._concurrency)
        if self._generation is not None:
            self._generation.opened(batch.batch_id, start)
        self._batch = batch
        if self._registry is not None:
            self._registry.open(batch.batch_id, batch._acc)
        ctx = trace.set_span_in_context(span)
        self._token = (otel_context.attach(ctx), _CURRENT.set(batch))
        return batch

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        batch = self._batch
        assert batch is not None
        span = batch.span
        try:
            if self._registry is not None:
                self._registry.close(batch.batch_id, batch._acc)
            if exc is not None:  # its message only with content capture on
                _record_exception(span, exc)
            analysis = batch.analysis = batch._acc.analysis()
            if analysis.trajectories:
                span.set_attributes(analysis.as_attributes())
                if self._instruments is not None:
                    ctx = trace.set_span_in_context(span)
                    self._instruments.duration.record(analysis.wall_ns * 1e-9, context=ctx)
                    self._instruments.drain.record(analysis.drain_ns * 1e-9, context=ctx)
            end = self._clock()
            span.end(end_time=end)
            if self._generation is not None:
                self._generation.closed(batch.batch_id, end)
        except Exception as err:
            internal_error("batch end", err)
            if span.is_recording():
                span.end()
        finally:
            token, var_token = self._token
            try:
                _CURRENT.reset(var_token)
                otel_context.detach(token)
            except Exception as err:
                internal_error("batch detach", err)
