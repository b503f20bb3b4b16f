"""The training step (docs/step.md): a trace of its own, a span per macro-phase, what it
trained on or dropped, and, when its block ends, the step account and async health."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext

from otel_rollout import attributes as A
from otel_rollout._accounting.async_health import AsyncHealth, Fate, async_health, bounded_reason
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._accounting.in_flight import OpenStep
from otel_rollout._accounting.step_account import (
    StepAccount,
    StepPhase,
    series_attributes,
    step_account,
)
from otel_rollout._api import step_context
from otel_rollout._api.batch_span import Batch
from otel_rollout._api.phase_handles import _record_exception, coerced, phase_name
from otel_rollout._api.phase_scope import Scope
from otel_rollout._api.trajectory import Trajectory
from otel_rollout._base import coerce as C
from otel_rollout._base.errors import internal_error
from otel_rollout._processing.batch_registry import GenerationLog
from otel_rollout._processing.gpu import active_sampler

#: Phase instances a step keeps for its account; beyond this they are counted only.
MAX_PHASES = 10_000
Link = tuple[SpanContext, dict[str, Any]]


def check_name(name: Any) -> str:
    if phase_name(name) == A.STEP_PART_OTHER:
        raise ValueError(
            f"phase name {name!r} is reserved for the step's unaccounted time; "
            "name the phase after what the trainer does"
        )
    return name


class StepPhaseHandle:
    """One macro-phase in progress; :meth:`end` ends it (once)."""

    __slots__ = ("_ended", "_labels", "_step", "name", "span", "start_ns")

    def __init__(self, step: Any, name: str, span: Span, start_ns: int, labels: dict) -> None:
        self._step = step
        self._labels = labels
        self._ended = False
        self.name = name
        self.span = span
        self.start_ns = start_ns

    def end(self, end_ns: int | None = None, *, error: BaseException | None = None) -> None:
        """End the phase at ``end_ns`` (epoch ns; default: now on the step's clock)."""
        if self._ended:
            return
        self._ended = True
        step = self._step
        try:
            end = step._clock() if end_ns is None else int(end_ns)
            if error is not None:
                _record_exception(self.span, error)
            self.span.end(end_time=end)
            step._phase_done(self, end)
        except Exception as err:
            internal_error("step phase end", err)


class StepPhaseScope(Scope[StepPhaseHandle]):
    """Context manager (sync and async) around one macro-phase."""

    __slots__ = ("_attrs", "_name", "_open", "_step")

    def __init__(self, step: Any, name: str, attributes: Mapping[str, Any]) -> None:
        self._step = step
        self._name = name
        self._attrs = attributes
        self._open: list[StepPhaseHandle] = []

    def __enter__(self) -> StepPhaseHandle:
        handle = self._step.start_phase(self._name, **self._attrs)
        self._open.append(handle)
        return handle

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self._open:
            self._open.pop().end(error=exc)


def _link_attrs(outcome: str, reason: str | None) -> dict[str, Any]:
    kept = outcome == A.OUTCOME_KEPT
    attrs: dict[str, Any] = {A.LINK_TYPE: A.LINK_TRAINED_ON if kept else A.LINK_DROPPED}
    if reason is not None:
        attrs[A.DROP_REASON] = reason
    return attrs


def fates_of(
    items: Any, outcome: str, reason: str | None, trained: int | None, taken_ns: int
) -> tuple[list[Fate], list[Link], list[Breakdown]]:
    """Fates, links and (for kept items) consumed-marked breakdowns of ``items``."""
    fates: list[Fate] = []
    links: list[Link] = []
    marked: list[Breakdown] = []
    kept = outcome == A.OUTCOME_KEPT

    def one(item: Any) -> None:
        if isinstance(item, Breakdown):
            engine, end = item.nanos.get(A.PHASE_LLM), item.end_time_ns
            fates.append(Fate(outcome, reason, item.policy_version, trained, end, taken_ns, engine))
            if kept:
                marked.append(item.consumed(trained, taken_ns))
        elif isinstance(item, Batch):
            before = len(fates)
            for b in item.breakdowns:
                one(b)
            attrs = _link_attrs(outcome, reason)
            attrs[A.BATCH_ID] = item.batch_id
            stales = [f.staleness for f in fates[before:] if f.staleness is not None]
            if stales:
                attrs[A.POLICY_STALENESS] = max(stales)
            links.append((item.span.get_span_context(), attrs))
        elif isinstance(item, Trajectory):
            attrs = _link_attrs(outcome, reason)
            if item.breakdown is not None:
                one(item.breakdown)
                stale, wait = fates[-1].staleness, fates[-1].buffer_wait_ns
                if wait is not None:
                    attrs[A.BUFFER_WAIT] = wait / 1e9
            else:
                version = (getattr(item.span, "attributes", None) or {}).get(A.POLICY_VERSION)
                version = version if isinstance(version, int) else None
                fate = Fate(outcome, reason, version, trained, None, taken_ns, None)
                fates.append(fate)
                stale = fate.staleness
            if stale is not None:
                attrs[A.POLICY_STALENESS] = stale
            if not item._ended:  # still open: the facts go on its root too
                root = {k: v for k, v in attrs.items() if k != A.LINK_TYPE}
                root[A.OUTCOME] = outcome
                if trained is not None:
                    root[A.POLICY_TRAINED_VERSION] = trained
                item.span.set_attributes(root)
            links.append((item.span.get_span_context(), attrs))
        elif isinstance(item, Iterable) and not isinstance(item, (str, bytes)):
            for x in item:
                one(x)
        else:
            raise TypeError(
                "a step takes a batch handle, trajectory handles, breakdowns or an "
                f"iterable of them, got {type(item).__name__}"
            )

    one(items)
    return fates, links, marked


class Step:
    """A handle on one training step in progress."""

    def __init__(
        self,
        tracer: trace.Tracer,
        span: Span,
        number: int | None,
        trainer: str | None,
        policy_version: int | None,
        clock: Callable[[], int],
        instruments: Any,
        generation: GenerationLog,
    ) -> None:
        self._tracer = tracer
        self._clock = clock
        self._instruments = instruments
        self._generation = generation
        self._lock = threading.Lock()
        self._phases: list[StepPhase] = []
        self._active: list[StepPhaseHandle] = []
        self._fates: list[Fate] = []
        self._depth: list[tuple[int, int]] = []
        self._capacity: int | None = None
        self._linked: set[int] = set()
        self._ended = False
        self._pid = os.getpid()  # a forked child is not in this step
        self._ctx = trace.set_span_in_context(span, otel_context.Context())
        self.span = span
        self.number = number
        self.trainer = trainer
        self.policy_version = policy_version
        self.start_ns: int = getattr(span, "start_time", None) or clock()
        #: Over :data:`MAX_PHASES` phase instances: counted, left out of the account.
        self.phases_dropped = 0
        #: Set when the block ends.
        self.account: StepAccount | None = None
        self.health: AsyncHealth | None = None
        #: The GPUs' mean utilisation (0..1) over the step and per part; None without NVML.
        self.gpu_utilization: float | None = None
        self.gpu_utilization_by_part: dict[str, float] | None = None

    @property
    def trace_id(self) -> str:
        """The step's trace id, 32 hex digits."""
        return format(self.span.get_span_context().trace_id, "032x")

    @property
    def context(self) -> otel_context.Context:
        """A context whose current span is the step span (to parent spans of your own)."""
        return self._ctx

    @property
    def current_phase(self) -> tuple[str, int] | None:
        """The phase in progress that started last, and its start (epoch ns), or ``None``."""
        with self._lock:
            if not self._active:
                return None
            latest = self._active[-1]
            return latest.name, latest.start_ns

    def open_step(self) -> OpenStep:
        """This step as the in-flight record lists it (``otel-rollout top``)."""
        current = self.current_phase
        phase, since = current if current is not None else ("", 0)
        number = -1 if self.number is None else self.number
        return OpenStep(number, self.trainer or "", self.start_ns, phase, since)

    def _labels(self, name: str) -> dict[str, Any]:
        labels: dict[str, Any] = {A.STEP_PHASE: name}
        if self.trainer is not None:
            labels[A.STEP_TRAINER] = self.trainer
        return labels

    def phase(self, name: str, **attributes: Any) -> StepPhaseScope:
        """One macro-phase (``run_training``, ``sync_weights``...): ``with``/``async with``."""
        return StepPhaseScope(self, check_name(name), attributes)

    def start_phase(
        self, name: str, *, start_ns: int | None = None, **attributes: Any
    ) -> StepPhaseHandle:
        """A macro-phase without a block; the handle's :meth:`~StepPhaseHandle.end` ends it."""
        name = check_name(name)
        start = self._clock() if start_ns is None else int(start_ns)
        handle = StepPhaseHandle(self, name, self._span(name, start, attributes), start,
                                 self._labels(name))  # fmt: skip
        with self._lock:
            self._active.append(handle)
        try:
            if self._instruments is not None:
                self._instruments.phase_active.add(1, handle._labels)
        except Exception as err:
            internal_error("step phase gauge", err)
        return handle

    def record_phase(self, name: str, start_ns: int, end_ns: int, **attributes: Any) -> None:
        """A macro-phase that already ran, exactly ``[start_ns, end_ns]`` (epoch ns)."""
        name = check_name(name)
        start, end = int(start_ns), int(end_ns)
        if end < start:
            raise ValueError(f"phase {name!r} ends before it starts: [{start}, {end}]")
        self._span(name, start, attributes).end(end_time=end)
        self._add_phase(StepPhase(name, start, end))

    def _span(self, name: str, start: int, attributes: dict[str, Any]) -> Span:
        attrs = {**self._labels(name), **coerced(attributes)}
        return self._tracer.start_span(name, self._ctx, attributes=attrs, start_time=start)

    def _phase_done(self, handle: StepPhaseHandle, end_ns: int) -> None:
        with self._lock:
            if handle in self._active:
                self._active.remove(handle)
        if self._instruments is not None:
            self._instruments.phase_active.add(-1, handle._labels)
        self._add_phase(StepPhase(handle.name, handle.start_ns, end_ns))

    def _add_phase(self, phase: StepPhase) -> None:
        with self._lock:
            if len(self._phases) < MAX_PHASES:
                self._phases.append(phase)
            else:
                self.phases_dropped += 1

    def set_policy_version(self, version: int) -> None:
        """The policy version this step trains (``consumed`` defaults to it)."""
        self.policy_version = int(version)
        self.span.set_attribute(A.POLICY_VERSION, self.policy_version)

    def set_buffer(
        self, depth: int, *, capacity: int | None = None, time_ns: int | None = None
    ) -> None:
        """A sample of the generation buffer's depth (and its capacity)."""
        t = self._clock() if time_ns is None else int(time_ns)
        with self._lock:
            self._depth.append((t, int(depth)))
            if capacity is not None:
                self._capacity = int(capacity)
        try:
            if self._instruments is not None:
                self._instruments.buffer_depth.set(int(depth))
                if capacity is not None:
                    self._instruments.buffer_capacity.set(int(capacity))
        except Exception as err:
            internal_error("step buffer gauge", err)

    def consumed(
        self, items: Any, *, version: int | None = None, time_ns: int | None = None
    ) -> list[Breakdown]:
        """The step trains on ``items`` (docs/step.md); returns their breakdowns, marked
        consumed."""
        return self._take(items, A.OUTCOME_KEPT, None, version, time_ns)

    def dropped(
        self,
        items: Any,
        reason: str,
        *,
        version: int | None = None,
        time_ns: int | None = None,
    ) -> None:
        """The step throws ``items`` away (as :meth:`consumed` takes them) for ``reason``."""
        if not isinstance(reason, str) or not reason:
            raise ValueError(
                f"reason must be a non-empty string (e.g. {', '.join(A.DROP_REASONS)}), "
                f"got {reason!r}"
            )
        self._take(items, A.OUTCOME_DROPPED, reason, version, time_ns)

    def _take(
        self, items: Any, outcome: str, reason: str | None, version: int | None, t: int | None
    ) -> list[Breakdown]:
        trained = self.policy_version if version is None else int(version)
        taken = self._clock() if t is None else int(t)
        try:
            fates, links, marked = fates_of(items, outcome, reason, trained, taken)
        except TypeError:
            raise
        except Exception as err:
            internal_error("step consumed", err)
            return []
        with self._lock:
            self._fates.extend(fates)
            new = [(c, a) for c, a in links if c.span_id not in self._linked]
            self._linked.update(c.span_id for c, _ in new)
        try:
            for ctx, attrs in new:
                self.span.add_link(ctx, attrs)
            self._record_fates(fates)
        except Exception as err:
            internal_error("step consumed", err)
        return marked

    def _record_fates(self, fates: Iterable[Fate]) -> None:
        inst = self._instruments
        if inst is None:
            return
        ctx = self._ctx
        for f in fates:
            labels = {A.OUTCOME: f.outcome}
            if f.outcome == A.OUTCOME_DROPPED:
                labels[A.DROP_REASON] = bounded_reason(f.reason)
            inst.outcomes.add(1, labels)
            if f.staleness is not None:
                inst.staleness.record(f.staleness, {A.OUTCOME: f.outcome}, context=ctx)
            if f.outcome == A.OUTCOME_KEPT and f.buffer_wait_ns is not None:
                inst.buffer_wait.record(f.buffer_wait_ns / 1e9, context=ctx)

    def set_attribute(self, key: str, value: Any) -> None:
        value = C.to_attribute(value)
        if value is not None:
            self.span.set_attribute(key, value)

    def _finish(self, end_ns: int, exc: BaseException | None) -> None:
        with self._lock:
            still_open = list(self._active)
        for handle in still_open:  # a phase left open ends with its step
            handle.span.set_attribute(A.STEP_PHASE + ".ended_by_step", True)
            handle.end(end_ns)
        with self._lock:
            phases = list(self._phases)
            fates, depth, capacity = list(self._fates), list(self._depth), self._capacity
        walls = self._generation.within(self.start_ns, end_ns)
        account = step_account(self.start_ns, end_ns, phases, walls, step=self.number)
        health = async_health(fates, depth, capacity)
        self.account, self.health = account, health
        span = self.span
        span.set_attributes(account.as_attributes())
        span.set_attributes(health.as_attributes())
        depth_series = series_attributes(A.SERIES_BUFFER_DEPTH, health.buffer_depth, self.start_ns)
        span.set_attributes(depth_series)
        self._gpu(account)
        if self.phases_dropped:
            span.set_attribute(A.STEP_PHASE + ".dropped", self.phases_dropped)
        if exc is not None:
            _record_exception(span, exc)
        inst = self._instruments
        if inst is not None:
            ctx = self._ctx
            inst.duration.record(account.wall_ns / 1e9, context=ctx)
            for part, ns in account.parts_ns.items():
                inst.part.record(ns / 1e9, self._labels(part), context=ctx)
        span.end(end_time=end_ns)

    def _gpu(self, account: StepAccount) -> None:
        """Each part's mean GPU utilisation from the samples taken during the step."""
        sampler = active_sampler()
        if sampler is None:
            return
        samples = sampler.samples(account.start_ns, account.end_ns)
        if not samples:
            return
        mean = sum(v for _, v in samples) / len(samples)
        by_part = account.mean_by_part(samples)
        self.gpu_utilization, self.gpu_utilization_by_part = mean, by_part
        span = self.span
        span.set_attribute(A.STEP_GPU_UTILIZATION, mean)
        span.set_attributes(series_attributes(A.SERIES_GPU_UTILIZATION, samples, self.start_ns))
        for part, value in by_part.items():
            span.set_attribute(f"{A.STEP_GPU_UTILIZATION}.{part}", value)


class StepScope(Scope[Step]):
    """Context manager (sync and async) for one step span."""

    __slots__ = ("_args", "_step", "_token")

    def __init__(self, *args: Any) -> None:
        self._args = args
        self._step: Step | None = None

    def __enter__(self) -> Step:
        (tracer, number, trainer, version, attributes, clock, instruments, log, name) = self._args
        attrs: dict[str, Any] = {}
        if number is not None:
            attrs[A.STEP] = number
        if trainer is not None:
            attrs[A.STEP_TRAINER] = trainer
        if version is not None:
            attrs[A.POLICY_VERSION] = version
        attrs.update((k, v) for k, v in attributes.items() if v is not None)
        span = tracer.start_span(name, otel_context.Context(), attributes=attrs, start_time=clock())
        step = Step(tracer, span, number, trainer, version, clock, instruments, log)
        self._step = step
        self._token = step_context.enter(step)
        return step

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        step = self._step
        if step is None or step._ended:
            return
        try:
            step._finish(step._clock(), exc)
        except Exception as err:
            internal_error("step end", err)
            if step.span.is_recording():
                step.span.end()
        finally:
            step._ended = True
            step_context.leave(step, self._token)
