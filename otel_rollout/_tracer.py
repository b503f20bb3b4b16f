"""The tracing API: a trace per trajectory, a child span per phase, sync and async."""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import random
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from time import time_ns
from typing import Any, ClassVar, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from otel_rollout import _attributes as A
from otel_rollout._breakdown import Breakdown
from otel_rollout._errors import error_type, internal_error
from otel_rollout._processor import owner_of
from otel_rollout._version import __version__

F = TypeVar("F", bound=Callable[..., Any])

_CURRENT: ContextVar[Trajectory | None] = ContextVar("otel_rollout_trajectory", default=None)

#: Short keyword names accepted by ``generate(**attributes)`` and their GenAI keys.
_GENAI_SHORT = {
    "model": A.GEN_AI_REQUEST_MODEL,
    "max_tokens": A.GEN_AI_REQUEST_MAX_TOKENS,
    "temperature": A.GEN_AI_REQUEST_TEMPERATURE,
    "top_p": A.GEN_AI_REQUEST_TOP_P,
    "operation": A.GEN_AI_OPERATION_NAME,
    "system": A.GEN_AI_SYSTEM,
    "input_tokens": A.GEN_AI_USAGE_INPUT_TOKENS,
    "output_tokens": A.GEN_AI_USAGE_OUTPUT_TOKENS,
}


def _capture_content() -> bool:
    return os.environ.get(A.CAPTURE_CONTENT_ENV, "").strip().lower() in ("1", "true", "yes")


def _capture_limit() -> int:
    raw = os.environ.get("OTEL_ROLLOUT_CAPTURE_MAX_CHARS", "").strip()
    try:
        return max(0, int(raw)) if raw else 2000
    except ValueError:
        return 2000


def current_trajectory() -> Trajectory | None:
    """The trajectory whose block the caller is in, or ``None``."""
    return _CURRENT.get()


def _record_exception(span: Span, exc: BaseException) -> None:
    try:
        span.record_exception(exc, escaped=True)
    except TypeError:  # API versions without ``escaped``
        span.record_exception(exc)
    span.set_attribute(A.ERROR_TYPE, error_type(exc))
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:256]))


class Phase:
    """A handle on one open phase span (``env_setup``, ``env_step``, ``env_teardown``...)."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        self.span.set_attribute(key, value)

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        self.span.set_attributes(attributes)

    def record_error(self, exc: BaseException) -> None:
        """Mark the span failed by ``exc`` (status ERROR, ``error.type``, the event)."""
        _record_exception(self.span, exc)

    def end(self) -> None:
        """End a phase opened with ``scope.start()`` (a ``with`` block ends its own)."""
        self.span.end()


class Generation(Phase):
    """A handle on one open ``generate`` span; record usage after the engine answers."""

    __slots__ = ()

    def record(
        self,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        finish_reason: str | None = None,
        finish_reasons: list[str] | tuple[str, ...] | None = None,
        response_model: str | None = None,
    ) -> None:
        """Record token counts and why generation stopped (GenAI attributes)."""
        span = self.span
        if input_tokens is not None:
            span.set_attribute(A.GEN_AI_USAGE_INPUT_TOKENS, int(input_tokens))
        if output_tokens is not None:
            span.set_attribute(A.GEN_AI_USAGE_OUTPUT_TOKENS, int(output_tokens))
        if finish_reason is not None:
            finish_reasons = [finish_reason]
        if finish_reasons is not None:
            span.set_attribute(A.GEN_AI_RESPONSE_FINISH_REASONS, [str(r) for r in finish_reasons])
        if response_model is not None:
            span.set_attribute(A.GEN_AI_RESPONSE_MODEL, response_model)

    def record_content(self, *, prompt: Any = None, completion: Any = None) -> bool:
        """Record prompt/completion text, truncated, only when capture is opted in.

        Capture follows ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``; the limit
        is ``OTEL_ROLLOUT_CAPTURE_MAX_CHARS`` (default 2000). Returns whether it recorded.
        """
        if not _capture_content():
            return False
        limit = _capture_limit()
        if prompt is not None:
            self.span.set_attribute(A.GEN_AI_INPUT_MESSAGES, str(prompt)[:limit])
        if completion is not None:
            self.span.set_attribute(A.GEN_AI_OUTPUT_MESSAGES, str(completion)[:limit])
        return True


class _PhaseScope:
    """Context manager (sync and async) for one phase span of a trajectory."""

    __slots__ = ("_attrs", "_handle", "_name", "_token", "_traj")

    def __init__(
        self, traj: Trajectory, name: str, attrs: dict[str, Any], handle: type[Phase]
    ) -> None:
        self._traj = traj
        self._name = name
        self._attrs = attrs
        self._handle = handle
        self._token: object | None = None

    def __enter__(self) -> Any:
        traj = self._traj
        # Outside this trajectory's context (an executor thread that lost the context),
        # parent explicitly to the root so the span still belongs to the trajectory.
        ctx = None if _CURRENT.get() is traj else traj._ctx
        span = traj._tracer.start_span(self._name, context=ctx, attributes=self._attrs)
        self._token = otel_context.attach(trace.set_span_in_context(span, ctx))
        self._handle = handle = self._handle(span)
        return handle

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        span = self._handle.span
        try:
            if exc is not None:
                _record_exception(span, exc)
            span.end()
        except Exception as err:
            internal_error("phase end", err)
        finally:
            try:
                otel_context.detach(self._token)
            except Exception as err:  # detached in another context: harmless, report once
                internal_error("phase detach", err)

    async def __aenter__(self) -> Any:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)

    def start(self, context: otel_context.Context | None = None) -> Any:
        """Start the phase without making it current; end it with the handle's ``end()``.

        For calls that outlive a ``with`` block or end in another thread (a stream, an
        env made here and initialised in an executor). The parent is ``context`` if
        given, else the trajectory's root.
        """
        traj = self._traj
        span = traj._tracer.start_span(
            self._name, context=context if context is not None else traj._ctx,
            attributes=self._attrs,
        )  # fmt: skip
        return self._handle(span)


class Trajectory:
    """A handle on one trajectory in flight: open phase spans from it."""

    __slots__ = (
        "_ctx",
        "_env_steps",
        "_tracer",
        "_turns",
        "breakdown",
        "env_class",
        "model",
        "span",
        "status",
        "trajectory_id",
    )

    def __init__(
        self, tracer: trace.Tracer, span: Span, trajectory_id: str, env_class: Any, model: Any
    ) -> None:
        self._tracer = tracer
        self.span = span
        self._ctx = trace.set_span_in_context(span)
        self.trajectory_id = trajectory_id
        self.env_class = env_class
        self.model = model
        self.status: str | None = None
        #: The breakdown, set when the trajectory ends (if a BreakdownProcessor tracks it).
        self.breakdown: Breakdown | None = None
        self._turns = 0
        self._env_steps = 0

    @property
    def tracer(self) -> trace.Tracer:
        """The OpenTelemetry tracer this trajectory's spans are made with."""
        return self._tracer

    @property
    def trace_id(self) -> str:
        """The trajectory's trace id, 32 hex digits (as Jaeger and Tempo show it)."""
        return format(self.span.get_span_context().trace_id, "032x")

    @property
    def context(self) -> otel_context.Context:
        """A context whose current span is the root: for work that runs elsewhere."""
        return self._ctx

    def env_setup(self, **attributes: Any) -> _PhaseScope:
        """Environment construction and ``init``."""
        return self._scope(A.SPAN_ENV_SETUP, A.PHASE_ENV_SETUP, attributes, Phase)

    def generate(self, **attributes: Any) -> _PhaseScope:
        """One ``generate()`` call to the inference engine; yields a :class:`Generation`."""
        attrs: dict[str, Any] = {A.PHASE: A.PHASE_LLM, A.TURN: self._turns}
        self._turns += 1
        attrs[A.GEN_AI_OPERATION_NAME] = "chat"
        if self.model is not None:
            attrs[A.GEN_AI_REQUEST_MODEL] = self.model
        for key, value in attributes.items():
            if value is not None:
                attrs[_GENAI_SHORT.get(key, key)] = value
        return _PhaseScope(self, A.SPAN_GENERATE, attrs, Generation)

    def env_step(self, **attributes: Any) -> _PhaseScope:
        """One ``env.step()`` call."""
        attrs: dict[str, Any] = {A.PHASE: A.PHASE_ENV, A.TURN: self._env_steps}
        self._env_steps += 1
        if attributes:
            attrs.update((k, v) for k, v in attributes.items() if v is not None)
        return _PhaseScope(self, A.SPAN_ENV_STEP, attrs, Phase)

    def env_teardown(self, **attributes: Any) -> _PhaseScope:
        """Environment ``close()``."""
        return self._scope(A.SPAN_ENV_TEARDOWN, A.PHASE_ENV_TEARDOWN, attributes, Phase)

    def phase(self, name: str, **attributes: Any) -> _PhaseScope:
        """A phase of your own (``reward``...): ``other`` unless the processor maps it."""
        if not name or not isinstance(name, str):
            raise ValueError(f"phase name must be a non-empty string, got {name!r}")
        return self._scope(name, name, attributes, Phase)

    def set_reward(self, reward: float) -> None:
        self.span.set_attribute(A.REWARD, float(reward))

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        self.span.set_attribute(key, value)

    def set_status(self, status: str) -> None:
        """Override the final status (``ok``, ``error``, ``cancelled``, or your own)."""
        self.status = status

    def _scope(
        self, name: str, phase: str, attributes: dict[str, Any], handle: type[Phase]
    ) -> _PhaseScope:
        attrs: dict[str, Any] = {A.PHASE: phase}
        if attributes:
            attrs.update((k, v) for k, v in attributes.items() if v is not None)
        return _PhaseScope(self, name, attrs, handle)


class _TrajectoryScope:
    """Context manager (sync and async) for one trajectory's root span."""

    __slots__ = ("_attrs", "_ctx_token", "_tracer", "_traj", "_var_token")

    def __init__(self, tracer: trace.Tracer, attrs: dict[str, Any]) -> None:
        self._tracer = tracer
        self._attrs = attrs
        self._traj: Trajectory | None = None

    def __enter__(self) -> Trajectory:
        attrs = self._attrs
        span = self._tracer.start_span(A.SPAN_TRAJECTORY, attributes=attrs)
        traj = Trajectory(
            self._tracer,
            span,
            attrs[A.TRAJECTORY_ID],
            attrs.get(A.ENV_CLASS),
            attrs.get(A.GEN_AI_REQUEST_MODEL),
        )
        self._traj = traj
        self._ctx_token = otel_context.attach(traj._ctx)
        self._var_token = _CURRENT.set(traj)
        return traj

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        traj = self._traj
        assert traj is not None
        span = traj.span
        try:
            status = traj.status
            if exc is not None:
                _record_exception(span, exc)
                if status is None:
                    cancelled = isinstance(exc, asyncio.CancelledError)
                    status = A.STATUS_CANCELLED if cancelled else A.STATUS_ERROR
            sdk_status = getattr(span, "status", None)
            code = sdk_status.status_code if sdk_status is not None else None
            if status is None:
                status = A.STATUS_ERROR if code is StatusCode.ERROR else A.STATUS_OK
            span.set_attribute(A.STATUS, status)
            traj.status = status
            end_ns = time_ns()
            owner = owner_of(span.get_span_context().span_id)
            if owner is not None:
                bd = owner._prepare_end(
                    span.get_span_context().span_id, end_ns, {A.STATUS: status}, code
                )
                if bd is not None:
                    traj.breakdown = bd
                    span.set_attributes(bd.as_attributes())
            span.end(end_time=end_ns)
        except Exception as err:
            internal_error("trajectory end", err)
        finally:
            try:
                _CURRENT.reset(self._var_token)
                otel_context.detach(self._ctx_token)
            except Exception as err:
                internal_error("trajectory detach", err)

    async def __aenter__(self) -> Trajectory:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)


class RolloutTracer:
    """Makes trajectory spans. Providers default to the global ones (resolved lazily)."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self._tracer = trace.get_tracer("otel_rollout", __version__, tracer_provider)
        self._meter_provider = meter_provider

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
    ) -> _TrajectoryScope:
        """One trajectory: ``with``/``async with`` it, and open phases on the handle.

        ``trajectory_id`` defaults to ``"{instance_id}_{repetition_id}"`` when those are
        given, else to a random id. ``env`` (env class) and ``model`` become low-cardinality
        metric attributes; ids never do.
        """
        if trajectory_id is None:
            if instance_id is not None:
                trajectory_id = (
                    f"{instance_id}_{repetition_id}"
                    if repetition_id is not None
                    else str(instance_id)
                )
            else:
                trajectory_id = format(random.getrandbits(64), "016x")
        attrs: dict[str, Any] = {A.TRAJECTORY_ID: str(trajectory_id)}
        if env is not None:
            attrs[A.ENV_CLASS] = env
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
        return _TrajectoryScope(self._tracer, attrs)


_default: RolloutTracer | None = None


def _default_tracer() -> RolloutTracer:
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
    **ids: Any,
) -> _TrajectoryScope:
    """:meth:`RolloutTracer.trajectory` on the global tracer provider."""
    return _default_tracer().trajectory(
        trajectory_id, env=env, model=model, attributes=attributes, **ids
    )


class phase:
    """A phase of the current trajectory, as a decorator or a context manager.

    ``@otel_rollout.phase("llm")`` on a function or coroutine function opens a phase span
    around each call inside a trajectory (and does nothing outside one). Known names
    (``llm``, ``env``, ``env_setup``, ``env_teardown``) use the standard span names.
    """

    _SPANS: ClassVar[dict[str, str]] = {
        A.PHASE_LLM: A.SPAN_GENERATE,
        A.PHASE_ENV: A.SPAN_ENV_STEP,
        A.PHASE_ENV_SETUP: A.SPAN_ENV_SETUP,
        A.PHASE_ENV_TEARDOWN: A.SPAN_ENV_TEARDOWN,
    }

    def __init__(self, name: str, **attributes: Any) -> None:
        if not name or not isinstance(name, str):
            raise ValueError(f"phase name must be a non-empty string, got {name!r}")
        self.name = name
        self.attributes = attributes
        self._scope: _PhaseScope | None = None

    def _open(self) -> _PhaseScope | None:
        traj = _CURRENT.get()
        if traj is None:
            return None
        if self.name == A.PHASE_LLM:
            return traj.generate(**self.attributes)
        if self.name == A.PHASE_ENV:
            return traj.env_step(**self.attributes)
        return traj._scope(self._SPANS.get(self.name, self.name), self.name, self.attributes, Phase)

    def __call__(self, fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                scope = self._open()
                if scope is None:
                    return await fn(*args, **kwargs)
                with scope:
                    return await fn(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            scope = self._open()
            if scope is None:
                return fn(*args, **kwargs)
            with scope:
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    def __enter__(self) -> Phase | None:
        self._scope = self._open()
        return None if self._scope is None else self._scope.__enter__()

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        scope, self._scope = self._scope, None
        if scope is not None:
            scope.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> Phase | None:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)
