"""The handle on a trajectory in flight: phase scopes opened from it, rewards, status and
attributes on its root. It never raises into the loop (:mod:`otel_rollout._base.coerce`).
And ``otel_rollout.phase``: a phase of the current trajectory as a decorator or a context
manager, doing nothing outside a trajectory."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar, cast

from opentelemetry import _logs, trace
from opentelemetry import context as otel_context
from opentelemetry.trace import Span, SpanKind
from opentelemetry.util.types import AttributeValue

from otel_rollout import attributes as A
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._api.phase_handles import (
    _GENAI_SHORT,
    Generation,
    Phase,
    _evaluation,
    coerced,
    phase_name,
)
from otel_rollout._api.phase_scope import _COUNT_STEP, _COUNT_TURN, _CURRENT, Scope, _PhaseScope
from otel_rollout._base import coerce as C
from otel_rollout._base import semconv as _semconv
from otel_rollout._base.clock import now_ns
from otel_rollout._base.errors import internal_error

F = TypeVar("F", bound=Callable[..., Any])
_COUNTS = frozenset(
    (A.GEN_AI_USAGE_INPUT_TOKENS, A.GEN_AI_USAGE_OUTPUT_TOKENS, A.GEN_AI_REQUEST_MAX_TOKENS)
)
#: Short keyword names accepted by ``env_step(**attributes)``.
_TOOL_SHORT = MappingProxyType({"tool": A.GEN_AI_TOOL_NAME, "tool_call_id": A.GEN_AI_TOOL_CALL_ID})


class Trajectory:
    """A handle on one trajectory in flight: open phase spans from it."""

    __slots__ = (
        "_clock", "_ctx", "_dup", "_ended", "_env_steps", "_latest", "_logger", "_outer",
        "_restore", "_trace_int", "_tracer", "_turns", "agent", "breakdown", "env_class",
        "model", "span", "status", "trajectory_id",
    )  # fmt: skip

    def __init__(
        self,
        tracer: trace.Tracer,
        span: Span,
        trajectory_id: str,
        env_class: Any,
        model: Any,
        agent: Any = None,
        mode: _semconv.Mode | None = None,
        clock: Callable[[], int] = now_ns,
        logger: _logs.Logger | None = None,
    ) -> None:
        self._tracer = tracer
        self._clock = clock
        self._logger = logger  # None: the global logger provider
        #: Set by the tracer when a sampler dropped the root's attributes.
        self._restore: Callable[[Span, Mapping[str, Any]], None] | None = None
        #: The context it started in, where one started inside its block starts too.
        self._outer: otel_context.Context | None = None
        self.span = span
        self._trace_int = span.get_span_context().trace_id
        self._ctx = trace.set_span_in_context(span)
        self.trajectory_id = trajectory_id
        self.env_class = env_class
        self.model = model
        #: ``gen_ai.agent.name``: the configured agent name, else the env class.
        self.agent = agent if agent is not None else env_class
        self.status: str | None = None
        #: The breakdown, set when the trajectory ends (if a BreakdownProcessor tracks it).
        self.breakdown: Breakdown | None = None
        self._turns = 0
        self._env_steps = 0
        self._ended = False
        mode = mode or _semconv.mode()
        self._latest = mode.latest_names
        self._dup = mode.dup

    def _start_phase(
        self,
        name: str,
        context: otel_context.Context | None,
        kind: SpanKind,
        attrs: dict[str, Any],
        count: int,
        start_time: int | None,
    ) -> Span:
        if count == _COUNT_TURN:
            attrs[A.TURN] = self._turns
            self._turns += 1
        elif count == _COUNT_STEP:
            attrs[A.TURN] = self._env_steps
            self._env_steps += 1
        span = self._tracer.start_span(
            name, context=context, kind=kind, attributes=attrs,
            start_time=self._clock() if start_time is None else start_time,
        )  # fmt: skip
        if self._restore is not None:  # the sampler dropped the attributes
            self._restore(span, attrs)
        return span

    @property
    def tracer(self) -> trace.Tracer:
        """The OpenTelemetry tracer this trajectory's spans are made with."""
        return self._tracer

    @property
    def logger(self) -> _logs.Logger | None:
        """The logger of its rewards' events (``None``: the global logger provider's)."""
        return self._logger

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
        """One ``generate()`` call to the inference engine: a GenAI CLIENT span whose
        request parameters go by short name (``provider=``, ``temperature=``...)."""
        attrs: dict[str, Any] = {
            A.PHASE: A.PHASE_LLM,
            A.GEN_AI_OPERATION_NAME: A.OP_CHAT,
            A.GEN_AI_CONVERSATION_ID: self.trajectory_id,
        }
        if self.model is not None:
            attrs[A.GEN_AI_REQUEST_MODEL] = self.model
        for key, value in attributes.items():
            key = _GENAI_SHORT.get(key, key)
            if key == A.GEN_AI_SYSTEM:
                key = A.GEN_AI_PROVIDER_NAME
            value = C.to_count(value, key) if key in _COUNTS else C.to_attribute(value)
            if value is not None:
                attrs[key] = value
        if self._dup and A.GEN_AI_PROVIDER_NAME in attrs:
            attrs[A.GEN_AI_SYSTEM] = attrs[A.GEN_AI_PROVIDER_NAME]
        name = A.SPAN_GENERATE
        if self._latest:
            name = _semconv.inference_span_name(
                attrs[A.GEN_AI_OPERATION_NAME], attrs.get(A.GEN_AI_REQUEST_MODEL)
            )
        return _PhaseScope(self, name, attrs, Generation, SpanKind.CLIENT, _COUNT_TURN)

    def env_step(self, **attributes: Any) -> _PhaseScope:
        """One ``env.step()`` call: a tool execution (``gen_ai.tool.name`` from ``tool=``,
        else the env class; ``gen_ai.tool.call.id`` from ``tool_call_id=``)."""
        attrs: dict[str, Any] = {
            A.PHASE: A.PHASE_ENV,
            A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL,
            A.GEN_AI_TOOL_NAME: str(self.env_class) if self.env_class is not None else "env",
            A.GEN_AI_TOOL_TYPE: A.TOOL_TYPE_FUNCTION,
            A.GEN_AI_CONVERSATION_ID: self.trajectory_id,
        }
        attrs.update(coerced(attributes, _TOOL_SHORT))
        name = A.SPAN_ENV_STEP
        if self._latest:
            name = _semconv.tool_span_name(attrs[A.GEN_AI_TOOL_NAME])
        return _PhaseScope(self, name, attrs, Phase, SpanKind.INTERNAL, _COUNT_STEP)

    def env_teardown(self, **attributes: Any) -> _PhaseScope:
        """Environment ``close()``."""
        return self._scope(A.SPAN_ENV_TEARDOWN, A.PHASE_ENV_TEARDOWN, attributes, Phase)

    def env_queue(self, **attributes: Any) -> _PhaseScope:
        """Waiting for an executor thread before an env call (counts in that call's band)."""
        return self._scope(A.SPAN_ENV_QUEUE, A.PHASE_ENV_QUEUE, attributes, Phase)

    def phase(self, name: str, **attributes: Any) -> _PhaseScope:
        """A phase of your own (``reward``...): ``other`` unless the processor maps it."""
        return self._scope(phase_name(name), name, attributes, Phase)

    def _open_phase(self, phase: str, **attributes: Any) -> _PhaseScope:
        """A scope of ``phase``: a band's own verb (``llm`` is :meth:`generate`, ``env``
        :meth:`env_step`...), else :meth:`phase`."""
        verb = {
            A.PHASE_LLM: self.generate,
            A.PHASE_ENV: self.env_step,
            A.PHASE_ENV_SETUP: self.env_setup,
            A.PHASE_ENV_TEARDOWN: self.env_teardown,
        }.get(phase)
        return verb(**attributes) if verb is not None else self.phase(phase, **attributes)

    def set_reward(
        self, value: Any, *, name: str = A.REWARD_NAME, label: Any = None, explanation: Any = None
    ) -> float | None:
        """Record a reward (``rollout.trajectory.reward``, else ``rollout.reward.<name>``)
        on the root and as a ``gen_ai.evaluation.result`` event; returns the score."""
        try:
            return _evaluation(self, A.REWARD, value, name, label, explanation)
        except Exception as exc:
            internal_error("Trajectory.set_reward", exc)
            return None

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        value = C.to_attribute(value)
        if value is not None:
            self.span.set_attribute(key, value)

    def set_status(self, status: Any) -> None:
        """Override the final status (``ok``, ``error``, ``cancelled``, ``timeout``...);
        free text is bounded for metrics and kept as ``rollout.trajectory.status_detail``."""
        try:
            text = C.to_text(status, "status")
            if text is None:
                return
            bounded = _semconv.bounded_status(text)
            if bounded != text:
                self.span.set_attribute(A.STATUS_DETAIL, text)
            self.status = bounded
        except Exception as exc:
            internal_error("Trajectory.set_status", exc)

    def set_policy_version(self, version: int) -> None:
        """The policy (weights) version generating this trajectory (async trainers)."""
        self.span.set_attribute(A.POLICY_VERSION, int(version))

    def _scope(
        self, name: str, phase: str, attributes: dict[str, Any], handle: type[Phase]
    ) -> _PhaseScope:
        return _PhaseScope(self, name, {A.PHASE: phase, **coerced(attributes)}, handle)


def current_trajectory() -> Trajectory | None:
    """The trajectory whose block the caller is in, or ``None`` (never an ended one)."""
    traj = _CURRENT.get()
    return None if traj is None or traj._ended else traj


class phase(Scope[Phase | None]):
    """A phase of the current trajectory, as a decorator or a context manager.

    ``@otel_rollout.phase("llm")`` on a function or coroutine function opens a phase span
    around each call inside a trajectory (and does nothing outside one). Known names
    (``llm``, ``env``, ``env_setup``, ``env_teardown``) use the standard span names. One
    object may be shared: by concurrent tasks and threads, and entered again.
    """

    def __init__(self, name: str, **attributes: Any) -> None:
        self.name = phase_name(name)
        self.attributes = attributes
        self._scopes: list[_PhaseScope | None] = []  # None: entered outside a trajectory

    def _open(self) -> _PhaseScope | None:
        traj = current_trajectory()
        return None if traj is None else traj._open_phase(self.name, **self.attributes)

    def __call__(self, fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                scope = self._open()
                if scope is None:
                    return await fn(*args, **kwargs)
                with scope:
                    return await fn(*args, **kwargs)

            return cast(F, async_wrapper)  # functools.wraps keeps fn's signature

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            scope = self._open()
            if scope is None:
                return fn(*args, **kwargs)
            with scope:
                return fn(*args, **kwargs)

        return cast(F, wrapper)

    def __enter__(self) -> Phase | None:
        scope = self._open()
        if scope is None:
            self._scopes.append(None)
            return None
        handle = scope.__enter__()
        self._scopes.append(scope)
        return handle

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        scope = self._pop()
        if scope is not None:
            scope.__exit__(exc_type, exc, tb)

    def _pop(self) -> _PhaseScope | None:
        """The scope this context entered (its span is current), else the latest."""
        scopes = self._scopes
        if not scopes:
            return None
        current = trace.get_current_span()
        for scope in reversed(scopes):
            if scope is not None and scope._open and scope._open[-1][0].span is current:
                scopes.remove(scope)
                return scope
        if None in scopes:  # a context that entered outside any trajectory
            scopes.remove(None)
            return None
        return scopes.pop()
