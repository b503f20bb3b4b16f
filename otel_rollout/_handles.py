"""Handles on a trajectory in flight and its phase spans; they never raise into the loop.

What users plausibly pass (``None``, strings, lists for n > 1 samples, NaN) is converted
(:mod:`otel_rollout._coerce`); what is not meaningful is dropped with a warning logged
once per kind.
"""

from __future__ import annotations

import functools
import inspect
import traceback
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from time import time_ns
from typing import Any, ClassVar, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from otel_rollout import _attributes as A
from otel_rollout import _coerce as C
from otel_rollout import _loopstall, _semconv
from otel_rollout._breakdown import Breakdown
from otel_rollout._errors import error_type, internal_error
from otel_rollout._settings import from_environment

F = TypeVar("F", bound=Callable[..., Any])

_CURRENT: ContextVar[Trajectory | None] = ContextVar("otel_rollout_trajectory", default=None)

#: Short keyword names accepted by ``generate(**attributes)`` and their GenAI keys.
_GENAI_SHORT = {
    "model": A.GEN_AI_REQUEST_MODEL,
    "max_tokens": A.GEN_AI_REQUEST_MAX_TOKENS,
    "temperature": A.GEN_AI_REQUEST_TEMPERATURE,
    "top_p": A.GEN_AI_REQUEST_TOP_P,
    "top_k": A.GEN_AI_REQUEST_TOP_K,
    "seed": A.GEN_AI_REQUEST_SEED,
    "frequency_penalty": A.GEN_AI_REQUEST_FREQUENCY_PENALTY,
    "presence_penalty": A.GEN_AI_REQUEST_PRESENCE_PENALTY,
    "stop_sequences": A.GEN_AI_REQUEST_STOP_SEQUENCES,
    "n": A.GEN_AI_REQUEST_CHOICE_COUNT,
    "operation": A.GEN_AI_OPERATION_NAME,
    "provider": A.GEN_AI_PROVIDER_NAME,
    "system": A.GEN_AI_PROVIDER_NAME,  # the deprecated name of the same thing
    "input_tokens": A.GEN_AI_USAGE_INPUT_TOKENS,
    "output_tokens": A.GEN_AI_USAGE_OUTPUT_TOKENS,
}
_COUNTS = frozenset(
    (A.GEN_AI_USAGE_INPUT_TOKENS, A.GEN_AI_USAGE_OUTPUT_TOKENS, A.GEN_AI_REQUEST_MAX_TOKENS)
)
#: Short keyword names accepted by ``env_step(**attributes)``.
_TOOL_SHORT = {"tool": A.GEN_AI_TOOL_NAME, "tool_call_id": A.GEN_AI_TOOL_CALL_ID}


def _capture_content() -> bool:
    return from_environment("capture_content")


def _capture_limit() -> int:
    return from_environment("capture_max_chars")


def _detach(token: object) -> None:
    """Detach an OpenTelemetry context token; a no-op where the exit runs in another
    context than the entry (an async generator closed by the event loop in a task of
    its own), which the API would log as an error."""
    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    if runtime is None:
        otel_context.detach(token)  # type: ignore[arg-type]
        return
    try:  # noqa: SIM105 (contextlib.suppress costs more, and this runs for every span)
        runtime.detach(token)
    except (ValueError, RuntimeError):
        pass


def current_trajectory() -> Trajectory | None:
    """The trajectory whose block the caller is in, or ``None`` (never an ended one)."""
    traj = _CURRENT.get()
    return None if traj is None or traj._ended else traj


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return f"<{type(exc).__name__}: str() failed>"


def _record_exception(span: Span, exc: BaseException) -> None:
    """The exception event, ``error.type`` and status ERROR on ``span``.

    Exception messages can hold completion text: they reach the span only when content
    capture is opted in (truncated); otherwise only the type and the traceback's frames.
    An exception whose ``__str__`` raises is recorded all the same.
    """
    etype = error_type(exc)
    capture = _capture_content()
    attrs: dict[str, Any] = {"exception.type": etype, "exception.escaped": True}
    description = type(exc).__name__
    if capture:
        limit = _capture_limit()
        message = _safe_str(exc)[:limit]
        attrs["exception.message"] = message
        description = f"{description}: {message}"[:256]
    try:
        frames = "".join(traceback.format_tb(exc.__traceback__)) if exc.__traceback__ else ""
    except Exception:
        frames = ""
    attrs["exception.stacktrace"] = f"Traceback (most recent call last):\n{frames}{etype}"
    span.add_event("exception", attrs)
    span.set_attribute(A.ERROR_TYPE, etype)
    span.set_status(Status(StatusCode.ERROR, description))


def _reward_key(name: str, default: str) -> str:
    return default if name == A.REWARD_NAME else A.REWARD_PREFIX + name


def _evaluation(
    span: Span, attr_default: str, value: Any, name: Any, label: Any, explanation: Any
) -> float | None:
    """Record a reward as an attribute and a ``gen_ai.evaluation.result`` event."""
    name = C.to_text(name, "reward name") or A.REWARD_NAME
    score = C.to_score(value, f"reward {name!r}")
    label = C.to_text(label, "reward label")
    if score is None and label is None:
        return None
    attrs: dict[str, Any] = {A.GEN_AI_EVALUATION_NAME: name}
    if score is not None:
        span.set_attribute(_reward_key(name, attr_default), score)
        attrs[A.GEN_AI_EVALUATION_SCORE_VALUE] = score
    if label is not None:
        attrs[A.GEN_AI_EVALUATION_SCORE_LABEL] = label
    if explanation is not None and _capture_content():
        attrs[A.GEN_AI_EVALUATION_EXPLANATION] = C.to_text(explanation, "explanation")[
            : _capture_limit()
        ]
    span.add_event(A.EVENT_EVALUATION_RESULT, attrs)
    return score


class Phase:
    """A handle on one open phase span (``env_setup``, ``env_step``, ``env_teardown``...)."""

    __slots__ = ("_clock", "span")

    def __init__(self, span: Span, clock: Callable[[], int] = time_ns) -> None:
        self.span = span
        self._clock = clock

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        value = C.to_attribute(value)
        if value is not None:
            self.span.set_attribute(key, value)

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def set_reward(
        self, value: Any, *, name: str = A.REWARD_NAME, label: Any = None, explanation: Any = None
    ) -> float | None:
        """A per-step reward (what ``env.step`` returned): ``rollout.step.reward`` and a
        ``gen_ai.evaluation.result`` event on this span. Returns the score recorded."""
        try:
            return _evaluation(self.span, A.STEP_REWARD, value, name, label, explanation)
        except Exception as exc:
            internal_error("Phase.set_reward", exc)
            return None

    def record_error(self, exc: BaseException) -> None:
        """Mark the span failed by ``exc`` (status ERROR, ``error.type``, the event)."""
        try:
            _record_exception(self.span, exc)
        except Exception as err:
            internal_error("record_error", err)

    def end(self, end_time: int | None = None) -> None:
        """End a phase opened with ``scope.start()`` (a ``with`` block ends its own);
        ``end_time`` in nanoseconds since the epoch (the tracer's clock), now if not given."""
        if _loopstall.ACTIVE:
            _loopstall.phase_ending(self.span)
        self.span.end(end_time=self._clock() if end_time is None else end_time)


class Generation(Phase):
    """A handle on one open ``generate`` span; record usage after the engine answers."""

    __slots__ = ()

    def record(
        self,
        *,
        input_tokens: Any = None,
        output_tokens: Any = None,
        finish_reason: Any = None,
        finish_reasons: Any = None,
        response_model: Any = None,
        cache_read_input_tokens: Any = None,
        reasoning_output_tokens: Any = None,
        response_id: Any = None,
        **attributes: Any,
    ) -> None:
        """Record token counts and why generation stopped (GenAI attributes).

        Token counts may be lists (one per sample when n > 1): their sum is recorded.
        ``finish_reasons="stop"`` is one reason. Other keywords are set as attributes
        (short names such as ``temperature`` map to their GenAI keys).
        """
        try:
            span = self.span
            for key, value in (
                (A.GEN_AI_USAGE_INPUT_TOKENS, input_tokens),
                (A.GEN_AI_USAGE_OUTPUT_TOKENS, output_tokens),
                (A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, cache_read_input_tokens),
                (A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, reasoning_output_tokens),
            ):
                count = C.to_count(value, key)
                if count is not None:
                    span.set_attribute(key, count)
            reasons = C.to_strings(finish_reasons, A.GEN_AI_RESPONSE_FINISH_REASONS)
            if finish_reason is not None:
                reasons = (*(reasons or ()), *(C.to_strings(finish_reason, "finish_reason") or ()))
            if reasons is not None:
                span.set_attribute(A.GEN_AI_RESPONSE_FINISH_REASONS, reasons)
            for key, value in (
                (A.GEN_AI_RESPONSE_MODEL, response_model),
                (A.GEN_AI_RESPONSE_ID, response_id),
            ):
                text = C.to_text(value, key)
                if text is not None:
                    span.set_attribute(key, text)
            for key, value in attributes.items():
                self.set_attribute(_GENAI_SHORT.get(key, key), value)
        except Exception as exc:
            internal_error("Generation.record", exc)

    def record_content(self, *, prompt: Any = None, completion: Any = None) -> bool:
        """Record prompt/completion text, truncated, only when capture is opted in.

        Capture follows ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``; the limit
        is ``OTEL_ROLLOUT_CAPTURE_MAX_CHARS`` (default 2000). Returns whether it recorded.
        """
        if not _capture_content():
            return False
        limit = _capture_limit()
        if prompt is not None:
            self.span.set_attribute(A.GEN_AI_INPUT_MESSAGES, C._text(prompt)[:limit])
        if completion is not None:
            self.span.set_attribute(A.GEN_AI_OUTPUT_MESSAGES, C._text(completion)[:limit])
        return True


#: Which per-trajectory counter numbers a phase's ``rollout.turn``.
_NO_COUNT, _COUNT_TURN, _COUNT_STEP = 0, 1, 2


class _PhaseScope:
    """Context manager (sync and async) for one phase span of a trajectory.

    It may be entered again, in a loop or by concurrent tasks: each entry opens its own
    span, and each exit ends the span that the exiting context entered.
    """

    __slots__ = ("_attrs", "_count", "_handle", "_kind", "_name", "_open", "_traj")

    def __init__(
        self,
        traj: Trajectory,
        name: str,
        attrs: dict[str, Any],
        handle: type[Phase],
        kind: SpanKind = SpanKind.INTERNAL,
        count: int = _NO_COUNT,
    ) -> None:
        self._traj = traj
        self._name = name
        self._attrs = attrs
        self._handle = handle
        self._kind = kind
        self._count = count
        self._open: list[tuple[Phase, object]] = []

    def _start(self, context: otel_context.Context | None, start_time: int | None = None) -> Span:
        traj = self._traj
        if self._count == _COUNT_TURN:
            self._attrs[A.TURN] = traj._turns
            traj._turns += 1
        elif self._count == _COUNT_STEP:
            self._attrs[A.TURN] = traj._env_steps
            traj._env_steps += 1
        span = traj._tracer.start_span(
            self._name, context=context, kind=self._kind, attributes=self._attrs,
            start_time=traj._clock() if start_time is None else start_time,
        )  # fmt: skip
        if traj._restore is not None:  # the sampler dropped the attributes
            traj._restore(span, self._attrs)
        return span

    def __enter__(self) -> Any:
        traj = self._traj
        # Outside this trajectory's context (an executor thread that lost the context),
        # parent explicitly to the root so the span still belongs to the trajectory.
        ctx = None if _CURRENT.get() is traj else traj._ctx
        span = self._start(ctx)
        try:
            handle = self._handle(span, self._traj._clock)
            token = otel_context.attach(trace.set_span_in_context(span, ctx))
            self._open.append((handle, token))
        except BaseException:
            span.end()
            raise
        return handle

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        entry = self._pop()
        if entry is None:
            return
        handle, token = entry
        span = handle.span
        try:
            if exc is not None:
                _record_exception(span, exc)
        except Exception as err:
            internal_error("phase end", err)
        finally:
            try:
                if _loopstall.ACTIVE:
                    _loopstall.phase_ending(span)
                span.end(end_time=handle._clock())
            finally:
                _detach(token)

    def _pop(self) -> tuple[Phase, object] | None:
        """The entry this context opened: its span is the current one (concurrent tasks)."""
        opened = self._open
        if not opened:
            return None
        if len(opened) > 1:
            current = trace.get_current_span()
            for i in range(len(opened) - 1, -1, -1):
                if opened[i][0].span is current:
                    return opened.pop(i)
        return opened.pop()

    async def __aenter__(self) -> Any:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)

    def start(
        self, context: otel_context.Context | None = None, start_time: int | None = None
    ) -> Any:
        """Start the phase without making it current; end it with the handle's ``end()``.

        For calls that outlive a ``with`` block or end in another thread (a stream, an
        env made here and initialised in an executor). The parent is ``context`` if
        given, else the trajectory's root; ``start_time`` (nanoseconds since the epoch)
        is now if not given.
        """
        traj = self._traj
        ctx = context if context is not None else traj._ctx
        return self._handle(self._start(ctx, start_time), traj._clock)


class Trajectory:
    """A handle on one trajectory in flight: open phase spans from it."""

    __slots__ = (
        "_clock",
        "_ctx",
        "_dup",
        "_ended",
        "_env_steps",
        "_latest",
        "_restore",
        "_tracer",
        "_turns",
        "agent",
        "breakdown",
        "env_class",
        "model",
        "span",
        "status",
        "trajectory_id",
    )

    def __init__(
        self,
        tracer: trace.Tracer,
        span: Span,
        trajectory_id: str,
        env_class: Any,
        model: Any,
        agent: Any = None,
        mode: _semconv.Mode | None = None,
        clock: Callable[[], int] = time_ns,
    ) -> None:
        self._tracer = tracer
        self._clock = clock
        #: Set by the tracer when a sampler dropped the root's attributes: restores a
        #: phase's attributes after it starts.
        self._restore: Callable[[Span, Mapping[str, Any]], None] | None = None
        self.span = span
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
        """One ``generate()`` call to the inference engine; yields a :class:`Generation`.

        A CLIENT span with the GenAI inference attributes (``gen_ai.operation.name``
        ``chat`` unless ``operation="text_completion"``, ``gen_ai.request.model``,
        ``gen_ai.provider.name`` from ``provider=``, request parameters by short name).
        """
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
        for key, value in attributes.items():
            value = C.to_attribute(value)
            if value is not None:
                attrs[_TOOL_SHORT.get(key, key)] = value
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
        if not name or not isinstance(name, str):
            raise ValueError(f"phase name must be a non-empty string, got {name!r}")
        return self._scope(name, name, attributes, Phase)

    def set_reward(
        self, value: Any, *, name: str = A.REWARD_NAME, label: Any = None, explanation: Any = None
    ) -> float | None:
        """Record a reward: the ``rollout.trajectory.reward`` attribute (``rollout.reward.
        <name>`` for other names) and a ``gen_ai.evaluation.result`` event on the root.

        Call it once per named reward (reward functions, judges). ``"1.0 (correct)"``
        records 1.0; ``None`` or NaN record nothing. ``explanation`` is kept only when
        content capture is opted in. Returns the score recorded.
        """
        try:
            return _evaluation(self.span, A.REWARD, value, name, label, explanation)
        except Exception as exc:
            internal_error("Trajectory.set_reward", exc)
            return None

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        value = C.to_attribute(value)
        if value is not None:
            self.span.set_attribute(key, value)

    def set_status(self, status: Any) -> None:
        """Override the final status (``ok``, ``error``, ``cancelled``, ``timeout``...).

        Metric attributes get a bounded value (:data:`~otel_rollout._attributes.STATUSES`:
        the known status the text starts with, else ``other``); free text stays on the
        root span as ``rollout.trajectory.status_detail``.
        """
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
        attrs: dict[str, Any] = {A.PHASE: phase}
        for key, value in attributes.items():
            value = C.to_attribute(value)
            if value is not None:
                attrs[key] = value
        return _PhaseScope(self, name, attrs, handle)


class phase:
    """A phase of the current trajectory, as a decorator or a context manager.

    ``@otel_rollout.phase("llm")`` on a function or coroutine function opens a phase span
    around each call inside a trajectory (and does nothing outside one). Known names
    (``llm``, ``env``, ``env_setup``, ``env_teardown``) use the standard span names. One
    object may be shared: by concurrent tasks and threads, and entered again.
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
        self._scopes: list[_PhaseScope] = []

    def _open(self) -> _PhaseScope | None:
        traj = current_trajectory()
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
        scope = self._open()
        if scope is None:
            self._scopes.append(None)  # type: ignore[arg-type]
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
            scopes.remove(None)  # type: ignore[arg-type]
            return None
        return scopes.pop()

    async def __aenter__(self) -> Phase | None:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)
