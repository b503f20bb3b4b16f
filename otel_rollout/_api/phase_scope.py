"""Phase scopes: a trajectory's phase span opened in the right context (the root's when
the caller lost it) and ended by the context that entered it; the current trajectory."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from otel_rollout import attributes as A
from otel_rollout._api.phase_handles import Phase
from otel_rollout._api.recording import _record_exception
from otel_rollout._base import limits
from otel_rollout._base.errors import internal_error
from otel_rollout._processing import loopstall as _loopstall


class PhaseOwner(Protocol):
    """What a phase scope needs of its trajectory: its root's context, its clock, and a way
    to start one of its phase spans (the trajectory numbers turns and restores attributes
    a sampler dropped)."""

    _ctx: otel_context.Context
    _clock: Callable[[], int]
    _trace_int: int

    def _start_phase(
        self,
        name: str,
        context: otel_context.Context | None,
        kind: SpanKind,
        attrs: dict[str, Any],
        count: int,
        start_time: int | None,
    ) -> Span: ...


#: The trajectory whose block the caller is in (:func:`otel_rollout.current_trajectory`).
_CURRENT: ContextVar[Any] = ContextVar("otel_rollout_trajectory", default=None)


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


def _context_var() -> ContextVar[Any] | None:
    """The ContextVar holding OpenTelemetry's current context under its default runtime
    context, or None under another one. A phase reads, sets and resets it directly: the
    API's ``get_current``, ``attach`` and ``detach`` are two Python calls each, which
    every phase span would pay."""
    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    var = getattr(runtime, "_current_context", None)
    if type(runtime).__name__ != "ContextVarsRuntimeContext" or not isinstance(var, ContextVar):
        return None
    return var


_OTEL_CONTEXT = _context_var()


#: What a phase span needs to be read back as one, least needed first.
_PHASE_KEYS = (A.TURN, A.PHASE)

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
        self._open: list[tuple[Phase, object]] = []

    def _start(self, context: otel_context.Context | None, start_time: int | None = None) -> Span:
        return self._traj._start_phase(
            self._name, context, self._kind, self._attrs, self._count, start_time
        )

    def __enter__(self) -> Any:
        traj = self._traj
        var = _OTEL_CONTEXT
        ctx = var.get() if var is not None else otel_context.get_current()
        # The root's own context is current (the usual case: no phase open): the parent
        # is the root. Else, outside this trajectory's context (an executor thread that
        # lost the context), or with another trajectory's span current (its phase open in
        # this task), parent explicitly to the root so the span still belongs to this
        # trajectory.
        if ctx is not traj._ctx and (
            _CURRENT.get() is not traj
            or trace.get_current_span(ctx).get_span_context().trace_id != traj._trace_int
        ):
            ctx = traj._ctx
        span = traj._start_phase(self._name, ctx, self._kind, self._attrs, self._count, None)
        try:
            handle = self._handle(span, traj._clock)
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
                # limits.dropped(span), without the call: past the attribute limit, the
                # phase's own attributes are set again so that it survives
                if getattr(getattr(span, "_attributes", None), "dropped", 0):
                    limits.keep(span, self._attrs, _PHASE_KEYS)
                span.end(end_time=handle._clock())
            finally:
                if _OTEL_CONTEXT is None:
                    _detach(token)
                else:
                    try:  # noqa: SIM105 (as in _detach)
                        _OTEL_CONTEXT.reset(token)  # type: ignore[arg-type]
                    except (ValueError, RuntimeError):  # exited in another context
                        pass

    def _pop(self, opened: list[tuple[Phase, object]]) -> tuple[Phase, object]:
        """The entry this context opened, of several: its span is the current one
        (concurrent tasks), else the latest."""
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
