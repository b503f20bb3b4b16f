"""The tracing API: a trace per trajectory, a child span per phase, sync and async."""

from __future__ import annotations

import asyncio
import random
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import ProxyTracerProvider, Span, StatusCode
from opentelemetry.util.types import AttributeValue

from otel_rollout import attributes as A
from otel_rollout._api.batch_span import BatchInstruments, BatchScope, current_batch, new_batch_id
from otel_rollout._api.phase_decorator import phase
from otel_rollout._api.phase_handles import Generation, Phase
from otel_rollout._api.phase_scope import _CURRENT, _detach, _PhaseScope
from otel_rollout._api.recording import _capture_content, _record_exception
from otel_rollout._api.trajectory import Trajectory, current_trajectory
from otel_rollout._base import limits
from otel_rollout._base import semconv as _semconv
from otel_rollout._base.clock import now_ns
from otel_rollout._base.errors import internal_error
from otel_rollout._processing import loopstall as _loopstall
from otel_rollout._processing.breakdown_processor import SCOPE_NAME, BreakdownProcessor
from otel_rollout._version import __version__

#: A clock: nanoseconds since the epoch, like :func:`time.time_ns`.
Clock = Callable[[], int]

__all__ = [
    "Clock",
    "Generation",
    "Phase",
    "RolloutTracer",
    "Trajectory",
    "_PhaseScope",
    "find_breakdown_processor",
    "_capture_content",
    "batch",
    "current_trajectory",
    "phase",
    "trajectory",
]


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


class _TrajectoryScope:
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
        name = (
            _semconv.agent_span_name(attrs.get(A.GEN_AI_AGENT_NAME))
            if mode.latest_names
            else A.SPAN_TRAJECTORY
        )
        owner = self._owner
        tracer, clock = owner._tracer, owner._clock
        batch = current_batch()
        parent = _parent_context()
        if batch is None:
            span = tracer.start_span(name, context=parent, attributes=attrs, start_time=clock())
        else:
            attrs = {**attrs, A.BATCH_ID: batch.batch_id}
            if batch.step is not None:
                attrs[A.STEP] = batch.step
            if batch.nest:
                span = tracer.start_span(name, context=parent, attributes=attrs, start_time=clock())
            else:  # the root of a new trace, linked to the batch span
                span = tracer.start_span(
                    name, otel_context.Context(), attributes=attrs, links=batch.links,
                    start_time=clock(),
                )  # fmt: skip
        try:
            traj = Trajectory(
                tracer,
                span,
                attrs[A.TRAJECTORY_ID],
                attrs.get(A.ENV_CLASS),
                attrs.get(A.GEN_AI_REQUEST_MODEL),
                attrs.get(A.GEN_AI_AGENT_NAME),
                mode,
                clock,
            )
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

    async def __aenter__(self) -> Trajectory:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)


class RolloutTracer:
    """Makes trajectory spans and hands each finished root to a :class:`BreakdownProcessor`.

    ``processor`` is the :class:`~otel_rollout.BreakdownProcessor` installed on
    ``tracer_provider``; its :meth:`~otel_rollout.BreakdownProcessor.finish` ends each
    root with the breakdown on it. When it is not given, the tracer uses the first one
    among an SDK ``TracerProvider``'s span processors (the global provider's when
    ``tracer_provider`` is ``None``); without one, roots end without breakdown attributes
    and :attr:`Trajectory.breakdown` stays ``None``.

    ``meter_provider`` records the batch histograms of :meth:`batch` (the trajectory
    histograms are the processor's). ``clock`` (epoch nanoseconds, like
    :func:`time.time_ns`) times every trajectory and phase span; ``id_generator`` (an
    OpenTelemetry ``IdGenerator``) draws default trajectory ids. :mod:`otel_rollout.testing`
    has deterministic ones of both.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        processor: BreakdownProcessor | None = None,
        clock: Clock | None = None,
        id_generator: Any = None,
    ) -> None:
        self._provider = tracer_provider
        self._tracer = trace.get_tracer(SCOPE_NAME, __version__, tracer_provider)
        _loopstall.prepare()
        self._meter_provider = meter_provider
        self._batch_instruments: BatchInstruments | None = None
        self._processor = processor
        self._found: tuple[Any, BreakdownProcessor | None] | None = None
        self._clock: Clock = clock if clock is not None else now_ns
        self._ids = id_generator

    @property
    def processor(self) -> BreakdownProcessor | None:
        """The processor finishing this tracer's trajectories (given, or found)."""
        if self._processor is not None:
            return self._processor
        provider = self._provider if self._provider is not None else trace.get_tracer_provider()
        found = self._found
        if found is not None and found[0] is provider:
            return found[1]
        processor = find_breakdown_processor(provider)
        if not isinstance(provider, ProxyTracerProvider):  # the global one may still change
            self._found = (provider, processor)
            if processor is not None:
                warnings.warn(
                    "RolloutTracer found its BreakdownProcessor by reading the SDK "
                    "provider's private processor list, which is deprecated: pass "
                    "RolloutTracer(provider, processor=processor), or use "
                    "otel_rollout.configure()'s rollout.tracer",
                    DeprecationWarning,
                    stacklevel=3,
                )
        return processor

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
    ) -> BatchScope:
        """One batch (training step): ``with``/``async with`` it around its trajectories.

        Opens a ``batch`` span (``rollout.batch.id``, ``rollout.step``). Each trajectory
        started inside is the root of its own trace, linked to the batch span and carrying
        the batch id; ``nest=True`` keeps them children of the batch span instead (one
        trace per step). When the block ends, the batch analysis (wall, tail, stragglers,
        what the tail was spent on, engine demand) goes onto the batch span, into the
        ``rollout.batch.duration`` and ``rollout.batch.tail.duration`` histograms, and onto
        the handle's ``analysis``; ``handle.analysis.summary()`` gives the tracker keys.
        """
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            raise ValueError(f"step must be an int or None, got {step!r}")
        if self._batch_instruments is None:
            try:
                self._batch_instruments = BatchInstruments(self._meter_provider)
            except Exception as err:  # a broken meter provider must not stop the step
                internal_error("batch instruments", err)
        return BatchScope(
            self._tracer,
            self._batch_instruments,
            step,
            str(batch_id) if batch_id is not None else new_batch_id(step),
            attributes or {},
            nest,
            self._clock,
            processor.batches if (processor := self.processor) is not None else None,
        )

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

        ``trajectory_id`` defaults to ``"{instance_id}_{repetition_id}"`` when those are
        given, else to a random id. ``env`` (env class) and ``model`` become low-cardinality
        metric attributes; ids never do. The root is a GenAI agent invocation:
        ``gen_ai.agent.name`` is ``agent`` or else the env class, and
        ``gen_ai.conversation.id`` the trajectory id.
        """
        if trajectory_id is None:
            if instance_id is not None:
                trajectory_id = (
                    f"{instance_id}_{repetition_id}"
                    if repetition_id is not None
                    else str(instance_id)
                )
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


def find_breakdown_processor(provider: Any) -> BreakdownProcessor | None:
    """The first :class:`BreakdownProcessor` among an SDK ``TracerProvider``'s processors.

    Deprecated: it reads the SDK's private processor list. Pass the processor to
    :class:`RolloutTracer` (``processor=``), or use ``configure()``'s ``rollout.tracer``.
    """
    active = getattr(provider, "_active_span_processor", None)
    for p in getattr(active, "_span_processors", ()):
        if isinstance(p, BreakdownProcessor):
            return p
    return None


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
    """:meth:`RolloutTracer.trajectory` on the global ``configure()``'s tracer (else the
    global providers): the same keywords, the same meaning."""
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
) -> BatchScope:
    """:meth:`RolloutTracer.batch` on the global ``configure()``'s tracer (else the global
    providers)."""
    return default_tracer().batch(step, attributes=attributes, batch_id=batch_id, nest=nest)
