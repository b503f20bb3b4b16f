"""The toolkit for instrumentors: what a trainer or engine integration needs beyond the
public API, in one documented place.

The integrations in :mod:`otel_rollout.integrations` are built on :mod:`otel_rollout`'s
public API and on this module only (an import-linter contract); a new one should be too.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator, Mapping
from contextvars import Token
from types import ModuleType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from otel_rollout._accounting.summary import DEFAULT_MAXLEN
from otel_rollout._accounting.waits import engine_timings, stages_from_timestamps, union_split
from otel_rollout._api.batch_span import (
    RemoteBatch,
    attach_batch,
    batch_carrier,
    batch_from_carrier,
    detach_batch,
    step_span_batch,
)
from otel_rollout._api.context import QueuedCall
from otel_rollout._api.phase_handles import Generation, Phase
from otel_rollout._api.phase_handles import _capture_content as capture_content
from otel_rollout._api.phase_scope import _CURRENT, _PhaseScope
from otel_rollout._api.tracer import RolloutTracer, default_tracer
from otel_rollout._api.trajectory import Trajectory
from otel_rollout._base import semconv
from otel_rollout._base.clock import now_ns
from otel_rollout._base.errors import forget_warnings, internal_error, warn_once, warned
from otel_rollout._base.patches import SAMPLING_KEYS, Patches, sampling_keywords
from otel_rollout._settings.table import BY_NAME, SETTINGS, forwarded_variables, variable_for
from otel_rollout._setup.resource import ray_attributes

__all__ = [
    "BY_NAME", "DEFAULT_MAXLEN", "SAMPLING_KEYS", "SETTINGS", "Patches", "QueuedCall",
    "RemoteBatch", "attach_batch", "attach_trajectory", "batch_carrier",
    "batch_from_carrier", "caller_locals", "capture_content", "current_span", "detach_batch",
    "detach_trajectory", "engine_timings", "forget_warnings", "forwarded_variables",
    "internal_error", "model_call", "now_ns", "phase_scope", "ray_attributes", "require",
    "rollout_tracer", "sampling_keywords", "semconv", "stages_from_timestamps",
    "step_span_batch", "traceparent", "union_split", "variable_for", "warn_once", "warned",
]  # fmt: skip


def rollout_tracer(kwargs: dict[str, Any]) -> RolloutTracer:
    """The tracer for ``instrument(**kwargs)``.

    ``rollout_tracer=`` as given; else, with ``tracer_provider=`` (and ``meter_provider=``,
    ``processor=`` for its :class:`~otel_rollout.sdk.BreakdownProcessor`,
    ``logger_provider=`` for the rewards' evaluation events), a tracer on those;
    else the tracer of the global ``configure()`` (or, without one, of the global
    providers), the same one :func:`otel_rollout.trajectory` uses.
    """
    given = kwargs.get("rollout_tracer")
    if given is not None:
        return given
    provider = kwargs.get("tracer_provider")
    if provider is None and kwargs.get("processor") is None:
        return default_tracer()
    return RolloutTracer(provider, kwargs.get("meter_provider"), processor=kwargs.get("processor"),
                         logger_provider=kwargs.get("logger_provider"))  # fmt: skip


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise ImportError naming the exact install line."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(
            f"{module!r} is needed for this integration: pip install 'otel-rollout[{extra}]'"
        ) from err


def phase_scope(traj: Trajectory, span_name: str, phase: str, **attributes: Any) -> _PhaseScope:
    """A phase of ``traj`` in band ``phase`` (``llm``, ``env``...) whose span is called
    ``span_name``: ``with``/``async with`` it, or ``.start()`` it, as the handle's own."""
    return traj._scope(span_name, phase, attributes, Phase)


def attach_trajectory(traj: Trajectory) -> tuple[Token[Context], Token[Any]]:
    """Make ``traj`` current here: its root the current span and
    :func:`otel_rollout.current_trajectory` answering it; undo with
    :func:`detach_trajectory`."""
    return otel_context.attach(traj.context), _CURRENT.set(traj)


def detach_trajectory(tokens: tuple[Token[Context], Token[Any]]) -> None:
    """Undo :func:`attach_trajectory` (a no-op for the trajectory part when this runs in
    another context than the attach)."""
    token, var = tokens
    with contextlib.suppress(ValueError):
        _CURRENT.reset(var)
    otel_context.detach(token)


_W3C = TraceContextTextMapPropagator()  # what vLLM's server reads, whatever else is set


def traceparent(
    headers: Mapping[str, str] | None = None, context: Context | None = None
) -> dict[str, str]:
    """``headers`` with their W3C ``traceparent``/``tracestate`` replaced by those of the
    current (or ``context``'s) span: what a vLLM server nests its ``llm_request`` under."""
    out = {k: v for k, v in (headers or {}).items() if str(k).lower() not in _W3C.fields}
    _W3C.inject(out, context=context)
    return out


@contextlib.contextmanager
def model_call(traj: Trajectory, gen: Generation | None = None, **request: Any) -> Iterator[Any]:
    """The ``generate`` phase of one model call: ``gen`` (opened by the trainer's own
    timer) with ``request`` recorded into it, else a phase of its own, current while the
    call runs. Yields None where telemetry failed; the call runs on."""
    scope: Any = None
    try:
        if gen is None:
            scope = traj.generate(**request)
            gen = scope.__enter__()
        else:
            gen.record(**request)
    except Exception as exc:
        internal_error("generate start", exc)
        scope = gen = None
    if scope is None:
        yield gen
        return
    try:
        yield gen
    except BaseException as exc:
        scope.__exit__(type(exc), exc, exc.__traceback__)
        raise
    scope.__exit__(None, None, None)


def current_span(span: trace.Span) -> contextlib.AbstractContextManager[trace.Span]:
    """``span`` current while the block runs: not ended there, and an error raised in the
    block left to the caller to record."""
    return trace.use_span(span, record_exception=False, set_status_on_exception=False)


def caller_locals(function: str, depth: int = 8) -> dict[str, Any] | None:
    """The locals of the nearest frame (within ``depth``) running ``function``, above the
    caller: a trainer's method whose copy runs where patching its class cannot reach
    (Ray actors run copies of their class's methods)."""
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return None
        if frame.f_code.co_name == function:
            return frame.f_locals
        frame = frame.f_back  # type: ignore[assignment]
    return None
