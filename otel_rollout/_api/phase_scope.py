"""Phase scopes: a trajectory's phase span opened in the right context (the root's when
the caller lost it) and ended by the context that entered it; the current trajectory."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any, Generic, Protocol, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind

from otel_rollout import attributes as A
from otel_rollout._api.phase_handles import Phase, _record_exception
from otel_rollout._base import limits, sdk_access
from otel_rollout._base.errors import internal_error
from otel_rollout._processing import loopstall as _loopstall


class PhaseOwner(Protocol):
    """What a phase scope needs of its trajectory (``_api.trajectory.Trajectory``)."""

    _ctx: otel_context.Context
    _clock: Callable[[], int]
    _logger: Any
    _trace_int: int

    def _start_phase(
        self, name: str, context: Context | None, kind: SpanKind, attrs: dict[str, Any],
        count: int, start_time: int | None,
    ) -> Span: ...  # fmt: skip


T = TypeVar("T")

#: The trajectory whose block the caller is in (:func:`otel_rollout.current_trajectory`).
_CURRENT: ContextVar[Any] = ContextVar("otel_rollout_trajectory", default=None)


_detach = sdk_access.detach_quietly
_OTEL_CONTEXT = sdk_access.context_var()


#: What a phase span needs to be read back as one, least needed first.
_PHASE_KEYS = (A.TURN, A.PHASE)

#: Which per-trajectory counter numbers a phase's ``rollout.turn``.
_NO_COUNT, _COUNT_TURN, _COUNT_STEP = 0, 1, 2


class Scope(Generic[T]):
    """A context manager that is also an async one: ``async with`` does what ``with`` does."""

    __slots__ = ()

    def __enter__(self) -> T:
        raise NotImplementedError

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> T:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)


class _PhaseScope(Scope[Any]):
    """Context manager (sync and async) for one phase span of a trajectory.

    It may be entered again, in a loop or by concurrent tasks: each entry opens its own
    span, and each exit ends the span that the exiting context entered.
    """

    __slots__ = ("_attrs", "_count", "_handle", "_kind", "_name", "_open", "_traj")

    def __init__(
        self,
        traj: PhaseOwner,
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
        self._open: list[tuple[Phase, Token[Context]]] = []

    def __enter__(self) -> Any:
        traj = self._traj
        var = _OTEL_CONTEXT
        ctx = var.get() if var is not None else otel_context.get_current()
        # The root's context current (no phase open) or one of this trajectory's spans:
        # the parent is the current span; else (a thread that lost the context, another
        # trajectory's span current) the root, so the span still belongs here.
        if ctx is not traj._ctx and (
            _CURRENT.get() is not traj
            or trace.get_current_span(ctx).get_span_context().trace_id != traj._trace_int
        ):
            ctx = traj._ctx
        span = traj._start_phase(self._name, ctx, self._kind, self._attrs, self._count, None)
        try:
            handle = self._handle(span, traj._clock, traj._logger)
            inner = trace.set_span_in_context(span, ctx)
            token = var.set(inner) if var is not None else otel_context.attach(inner)
            self._open.append((handle, token))
        except BaseException:
            span.end()
            raise
        return handle

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        opened = self._open
        if not opened:
            return
        handle, token = opened.pop() if len(opened) == 1 else self._pop(opened)
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
                # past the attribute limit, the phase's own attributes are set again so
                # that it survives
                limits.keep(span, self._attrs, _PHASE_KEYS)
                span.end(end_time=handle._clock())
            finally:
                if _OTEL_CONTEXT is None:
                    _detach(token)
                else:
                    try:  # noqa: SIM105 (as in _detach)
                        _OTEL_CONTEXT.reset(token)
                    except (ValueError, RuntimeError):  # exited in another context
                        pass

    def _pop(self, opened: list[tuple[Phase, Token[Context]]]) -> tuple[Phase, Token[Context]]:
        """The entry this context opened, of several: its span is the current one
        (concurrent tasks), else the latest."""
        current = trace.get_current_span()
        for i in range(len(opened) - 1, -1, -1):
            if opened[i][0].span is current:
                return opened.pop(i)
        return opened.pop()

    def start(
        self, context: otel_context.Context | None = None, start_time: int | None = None
    ) -> Any:
        """Start the phase without making it current (a call that outlives a ``with``
        block); the handle's ``end()`` ends it. The parent: ``context``, else the root."""
        traj = self._traj
        ctx = context if context is not None else traj._ctx
        span = traj._start_phase(self._name, ctx, self._kind, self._attrs, self._count, start_time)
        return self._handle(span, traj._clock, traj._logger)
