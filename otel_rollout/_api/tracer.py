"""The tracing API: a trace per trajectory, a child span per phase, sync and async."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry._logs import LoggerProvider
from opentelemetry.trace import Span, StatusCode
from opentelemetry.util.types import AttributeValue

from otel_rollout import attributes as A
from otel_rollout._accounting.slots import check_capacity
from otel_rollout._api.batch_span import BatchScope, current_batch, new_batch_id
from otel_rollout._api.phase_handles import Generation, Phase, _record_exception, logger_of
from otel_rollout._api.phase_scope import _CURRENT, Scope, _detach
from otel_rollout._api.step import StepScope
from otel_rollout._api.trajectory import Trajectory, current_trajectory, phase
from otel_rollout._base import limits
from otel_rollout._base import semconv as _semconv
from otel_rollout._base.clock import now_ns
from otel_rollout._base.errors import internal_error
from otel_rollout._processing import loopstall as _loopstall
from otel_rollout._processing.batch_registry import GenerationLog
from otel_rollout._processing.breakdown_processor import SCOPE_NAME, BreakdownProcessor
from otel_rollout._version import __version__

#: A clock: nanoseconds since the epoch, like :func:`time.time_ns`.
Clock = Callable[[], int]

__all__ = [
    "Clock", "Generation", "Phase", "RolloutTracer", "Trajectory", "batch",
    "current_trajectory", "phase", "step", "trajectory",
]  # fmt: skip


#: The metrics of batches and steps (docs/batch.md, docs/step.md): (attribute, kind,
#: metric name, unit, description, bucket advice).
_DURATION = A.DURATION_BUCKETS
_Row = tuple[str, str, str, str, str, tuple[float, ...] | None]

_BATCH: tuple[_Row, ...] = (
    ("duration", "histogram", A.METRIC_BATCH_DURATION, "s",
     "Wall time of a batch: its start to its last trajectory's end.", _DURATION),
    ("drain", "histogram", A.METRIC_BATCH_DRAIN_DURATION, "s",
     "Drain of a batch: from the first slot left empty for good (no trajectory starts "
     "after it) to its last trajectory's end.", _DURATION),
)  # fmt: skip

_STEP: tuple[_Row, ...] = (
    # +1 when a phase starts, -1 when it ends (SkyRL's skyrl_training_phase gauge); the
    # unit is an annotation: no suffix on Prometheus's name
    ("phase_active", "up_down_counter", A.METRIC_STEP_PHASE_ACTIVE, "{phase}",
     "1 while a training step's phase is active, else 0.", None),
    ("duration", "histogram", A.METRIC_STEP_DURATION, "s", "Wall time of a training step.",
     _DURATION),
    ("part", "histogram", A.METRIC_STEP_PART_DURATION, "s",
     "Seconds of each part of a step's account (its phases, generation, other); the parts "
     "of a step sum to its wall.", _DURATION),
    ("staleness", "histogram", A.METRIC_STALENESS, "{version}",
     "Policy versions between a trajectory's generation and the step that trained on it.",
     A.STALENESS_BUCKETS),
    ("buffer_wait", "histogram", A.METRIC_BUFFER_WAIT, "s",
     "Time from a trajectory's end to the step taking it.", _DURATION),
    ("outcomes", "counter", A.METRIC_OUTCOMES, "{trajectory}",
     "Trajectories a step kept (trained on) or dropped, by reason.", None),
    ("buffer_depth", "gauge", A.METRIC_BUFFER_DEPTH, "{item}",
     "Items waiting in the trainer's generation buffer.", None),
    ("buffer_capacity", "gauge", A.METRIC_BUFFER_CAPACITY, "{item}",
     "Size of the trainer's generation buffer.", None),
)  # fmt: skip


def _make_instruments(
    meter_provider: metrics.MeterProvider | None, table: tuple[_Row, ...]
) -> SimpleNamespace:
    """The instruments of ``table`` on ``meter_provider`` (the global one when None)."""
    meter = (meter_provider or metrics.get_meter_provider()).get_meter("otel_rollout", __version__)
    out = SimpleNamespace()
    for attr, kind, name, unit, description, buckets in table:
        advice = {} if buckets is None else {"explicit_bucket_boundaries_advisory": list(buckets)}
        setattr(out, attr, getattr(meter, f"create_{kind}")(name, unit, description, **advice))
    return out


def _parent_context() -> otel_context.Context | None:
    """The context a trajectory starts in: the current one, less a current trajectory
    (trajectories never nest: one left open by an async generator the caller broke out
    of must not parent the next) and less a current span that has already ended."""
    outer = _CURRENT.get()
    if outer is not None and not outer._ended:
        return outer._outer
    span = trace.get_current_span()
    if span.is_recording() or not isinstance(getattr(span, "end_time", None), int):
        return None
    return trace.set_span_in_context(trace.INVALID_SPAN)


class _TrajectoryScope(Scope[Trajectory]):
    """Context manager (sync and async) for one trajectory's root span."""

    __slots__ = ("_attrs", "_ctx_token", "_loop", "_owner", "_traj", "_var_token")

    def __init__(self, owner: RolloutTracer, attrs: dict[str, Any]) -> None:
        self._owner = owner
        self._attrs = attrs
        self._traj: Trajectory | None = None
        self._loop: Any = None  # its event-loop account (otel_rollout._processing.loopstall)

    def __enter__(self) -> Trajectory:
        attrs = self._attrs
        mode = _semconv.mode()
        agent = attrs.get(A.GEN_AI_AGENT_NAME)
        name = _semconv.agent_span_name(agent) if mode.latest_names else A.SPAN_TRAJECTORY
        owner = self._owner
        tracer, clock = owner._tracer, owner._clock
        batch = current_batch()
        parent = _parent_context()
        linked = batch is not None and not batch.nest  # a new trace, linked to the batch
        context = otel_context.Context() if linked else parent
        if batch is not None:
            attrs = {**attrs, A.BATCH_ID: batch.batch_id}
            if batch.step is not None:
                attrs[A.STEP] = batch.step
        links = batch.links if batch is not None and linked else ()
        span = tracer.start_span(name, context, attributes=attrs, links=links, start_time=clock())
        try:
            traj = Trajectory(
                tracer, span, attrs[A.TRAJECTORY_ID], attrs.get(A.ENV_CLASS),
                attrs.get(A.GEN_AI_REQUEST_MODEL), agent, mode, clock, owner._logger,
            )  # fmt: skip
            traj._outer = parent if parent is not None else otel_context.get_current()
            recorded = getattr(span, "attributes", None)
            if recorded is not None and A.TRAJECTORY_ID not in recorded and span.is_recording():
                # The sampler replaced the attributes, or the attribute limit evicted the
                # id (many user attributes): restore them on the root (ours last, so they
                # survive the limit) and on each phase, and let the processor see them.
                traj._restore = owner._restore
                owner._restore(span, limits.own_last(attrs, limits.ROOT_KEYS))
            self._traj = traj
            self._ctx_token = otel_context.attach(traj._ctx)
            self._var_token = _CURRENT.set(traj)
            self._loop = _loopstall.begin(span, attrs.get(A.ENV_CLASS))
        except BaseException:  # interrupted (KeyboardInterrupt): nothing left in flight
            span.end()
            raise
        return traj

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        traj = self._traj
        if traj is None or traj._ended:
            return
        span = traj.span
        try:
            status = traj.status
            if exc is not None:
                _record_exception(span, exc)
                if status is None:
                    cancelled = isinstance(exc, asyncio.CancelledError)
                    status = A.STATUS_CANCELLED if cancelled else A.STATUS_ERROR
            if status is None:
                sdk_status = getattr(span, "status", None)
                failed = sdk_status is not None and sdk_status.status_code is StatusCode.ERROR
                status = A.STATUS_ERROR if failed else A.STATUS_OK
            span.set_attribute(A.STATUS, status)
            traj.status = status
            if self._loop is not None:
                loop, self._loop = self._loop, None
                span.set_attributes(_loopstall.finish(loop))
            owner = self._owner
            end_ns = owner._clock()
            # The hand-off: the processor writes the breakdown onto the root and ends it.
            processor = owner.processor
            if processor is not None:
                traj.breakdown = processor.finish(span, end_ns, status)
            else:
                span.end(end_time=end_ns)
        except Exception as err:
            internal_error("trajectory end", err)
        finally:
            traj._ended = True
            if span.is_recording():  # interrupted above: the root still ends
                span.end()
            # Reset only in the context that entered: an async generator closed by the
            # event loop exits in another task, whose context never held these.
            if _CURRENT.get() is traj:
                try:
                    _CURRENT.reset(self._var_token)
                except ValueError:  # a copy of the entering context: nothing to undo
                    pass
                else:
                    _detach(self._ctx_token)


class RolloutTracer:
    """Makes trajectory spans and hands each finished root to ``processor`` (the
    :class:`~otel_rollout.sdk.BreakdownProcessor` on ``tracer_provider``), which ends it
    with the breakdown on it; without one, :attr:`Trajectory.breakdown` stays ``None``.
    ``meter_provider`` gets the batch and step metrics; the others: docs/agent-loop.md."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        processor: BreakdownProcessor | None = None,
        clock: Clock | None = None,
        id_generator: Any = None,
        logger_provider: LoggerProvider | None = None,
    ) -> None:
        self._provider = tracer_provider
        self._tracer = trace.get_tracer(SCOPE_NAME, __version__, tracer_provider)
        self._logger = logger_of(logger_provider)
        _loopstall.prepare()
        self._meter_provider = meter_provider
        self._instruments: dict[str, Any] = {}  # batch's and step's, made at first use
        self._own_generation = GenerationLog()  # without a processor to share one
        self._processor = processor
        self._clock: Clock = clock if clock is not None else now_ns
        self._ids = id_generator

    @property
    def processor(self) -> BreakdownProcessor | None:
        """The processor finishing this tracer's trajectories (``processor=``), or None."""
        return self._processor

    def _meters(self, which: str, table: tuple) -> Any:
        """The instruments of ``table``, or None when the meter provider is broken."""
        if which not in self._instruments:
            try:
                self._instruments[which] = _make_instruments(self._meter_provider, table)
            except Exception as err:
                internal_error(f"{which} instruments", err)
                return None
        return self._instruments[which]

    def _generation(self) -> GenerationLog:
        """The batch walls steps read: the processor's, shared by the tracers using it."""
        processor = self.processor
        log = getattr(processor, "generation", None)
        return log if isinstance(log, GenerationLog) else self._own_generation

    def _restore(self, span: Span, attributes: Mapping[str, Any]) -> None:
        """Put back attributes a sampler dropped at start, and have the processor see them."""
        span.set_attributes(attributes)
        processor = self.processor
        if processor is not None:
            processor.track(span)

    def batch(
        self,
        step: int | None = None,
        *,
        attributes: Mapping[str, AttributeValue] | None = None,
        batch_id: str | None = None,
        nest: bool = False,
        concurrency: int | None = None,
    ) -> BatchScope:
        """One batch (training step): ``with``/``async with`` it around its trajectories
        (docs/batch.md)."""
        _check_int("step", step)
        concurrency = check_capacity(concurrency)
        return BatchScope(
            self._tracer, self._meters("batch", _BATCH), step,
            str(batch_id) if batch_id is not None else new_batch_id(step), attributes or {},
            nest, self._clock,
            processor.batches if (processor := self.processor) is not None else None,
            self._generation(), concurrency,
        )  # fmt: skip

    def step(
        self,
        step: int | None = None,
        *,
        trainer: str | None = None,
        policy_version: int | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> StepScope:
        """One training step: ``with``/``async with`` it around the trainer's loop body
        (docs/step.md)."""
        _check_int("step", step)
        _check_int("policy_version", policy_version)
        name = A.SPAN_STEP_LATEST if _semconv.mode().latest_names else A.SPAN_STEP
        return StepScope(
            self._tracer, step, None if trainer is None else str(trainer), policy_version,
            attributes or {}, self._clock, self._meters("step", _STEP),
            self._generation(), name,
        )  # fmt: skip

    def trajectory(
        self,
        trajectory_id: str | None = None,
        *,
        env: str | None = None,
        model: str | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
        instance_id: str | int | None = None,
        repetition_id: int | None = None,
        group_id: str | int | None = None,
        agent: str | None = None,
    ) -> _TrajectoryScope:
        """One trajectory: ``with``/``async with`` it, and open phases on the handle.
        ``trajectory_id`` defaults to ``"{instance_id}_{repetition_id}"``, else a random id."""
        if trajectory_id is None:
            if instance_id is not None:
                suffix = "" if repetition_id is None else f"_{repetition_id}"
                trajectory_id = f"{instance_id}{suffix}"
            elif self._ids is not None:
                trajectory_id = format(self._ids.generate_span_id(), "016x")
            else:
                trajectory_id = format(random.getrandbits(64), "016x")
        attrs: dict[str, Any] = {
            A.TRAJECTORY_ID: str(trajectory_id),
            A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT,
            A.GEN_AI_CONVERSATION_ID: str(trajectory_id),
        }
        if env is not None:
            attrs[A.ENV_CLASS] = env
        if agent is not None or env is not None:
            attrs[A.GEN_AI_AGENT_NAME] = str(agent if agent is not None else env)
        if model is not None:
            attrs[A.GEN_AI_REQUEST_MODEL] = model
        if instance_id is not None:
            attrs[A.INSTANCE_ID] = str(instance_id)
        if repetition_id is not None:
            attrs[A.REPETITION_ID] = int(repetition_id)
        if group_id is not None:
            attrs[A.GROUP_ID] = str(group_id)
        if attributes:
            attrs.update((k, v) for k, v in attributes.items() if v is not None)
        return _TrajectoryScope(self, attrs)


def _check_int(name: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{name} must be an int or None, got {value!r}")


_default: RolloutTracer | None = None


def set_default_tracer(tracer: RolloutTracer | None) -> None:
    """Make ``tracer`` the one :func:`trajectory` and :func:`batch` use (``configure()``
    installs its own, with its processor); ``None`` goes back to the global providers."""
    global _default
    _default = tracer


def default_tracer() -> RolloutTracer:
    """The tracer of the module-level helpers: the global ``configure()``'s, else one on
    the global providers."""
    global _default
    if _default is None:
        _default = RolloutTracer()
    return _default


def trajectory(
    trajectory_id: str | None = None,
    *,
    env: str | None = None,
    model: str | None = None,
    attributes: Mapping[str, AttributeValue] | None = None,
    instance_id: str | int | None = None,
    repetition_id: int | None = None,
    group_id: str | int | None = None,
    agent: str | None = None,
) -> _TrajectoryScope:
    """:meth:`RolloutTracer.trajectory` on :func:`default_tracer`."""
    return default_tracer().trajectory(
        trajectory_id, env=env, model=model, attributes=attributes, instance_id=instance_id,
        repetition_id=repetition_id, group_id=group_id, agent=agent,
    )  # fmt: skip


def batch(
    step: int | None = None,
    *,
    attributes: Mapping[str, AttributeValue] | None = None,
    batch_id: str | None = None,
    nest: bool = False,
    concurrency: int | None = None,
) -> BatchScope:
    """:meth:`RolloutTracer.batch` on :func:`default_tracer`."""
    return default_tracer().batch(
        step, attributes=attributes, batch_id=batch_id, nest=nest, concurrency=concurrency
    )


def step(
    step: int | None = None,
    *,
    trainer: str | None = None,
    policy_version: int | None = None,
    attributes: Mapping[str, AttributeValue] | None = None,
) -> StepScope:
    """:meth:`RolloutTracer.step` on :func:`default_tracer`."""
    return default_tracer().step(
        step, trainer=trainer, policy_version=policy_version, attributes=attributes
    )
