"""The toolkit for instrumentors: what a trainer or engine integration needs beyond the
public API, in one documented place.

The integrations in :mod:`otel_rollout.integrations` (SkyRL, verl, verifiers, Ray, vLLM)
are built on :mod:`otel_rollout`'s public API and on this module only; a new one should
be too. It gives:

* :func:`rollout_tracer`: the tracer an instrumentor's ``instrument(**kwargs)`` should
  use (``rollout_tracer=``, else ``tracer_provider=`` / ``meter_provider=`` /
  ``processor=``, else the global ``configure()``'s);
* :func:`require`: import the instrumented library or fail with the ``pip install`` line;
* batch carriers, so a trajectory started in a worker joins the driver's batch
  (:func:`batch_carrier`, :func:`batch_from_carrier`, :func:`attach_batch`,
  :func:`detach_batch`, :func:`step_span_batch`);
* :func:`internal_error` and :func:`warn_once`: an instrumentor's own failure is logged
  once per kind and never reaches the training run (re-raised under pytest);
* :func:`engine_timings`: the engine's queue / prefill / decode split from an engine
  span's attributes;
* :func:`phase_scope`: a phase span of any name in one of the bands (an instrumentor
  timing where the trainer times, under the trainer's own span name);
* :func:`attach_trajectory` / :func:`detach_trajectory`: make a trajectory current in a
  context the instrumentor did not open it in (a callback of the trainer's);
* :class:`QueuedCall`: a call handed to an executor, timed from its submission
  (``env_queue``) to its start;
* :mod:`semconv` (the GenAI conventions' opt-in and span names), :func:`capture_content`
  (whether message content may be recorded), :func:`union_split` and
  :func:`stages_from_timestamps` (an engine request's queue / prefill / decode over its
  samples), :func:`warned` / :func:`forget_warnings` (warn-once bookkeeping);
* for the Ray integration: the settings a worker must resolve as the driver did
  (:func:`forwarded_variables`, :func:`variable_for`, :data:`SETTINGS`, :data:`BY_NAME`),
  :func:`ray_attributes` and :data:`DEFAULT_MAXLEN`;
* :func:`now_ns`: the default clock (the wall clock read once, moved by the monotonic one),
  so an instrumentor can tell whether a trajectory runs on it or on an injected one.
"""

from __future__ import annotations

import contextlib
import importlib
from types import ModuleType
from typing import Any

from opentelemetry import context as otel_context

from otel_rollout._accounting.engine_union import stages_from_timestamps, union_split
from otel_rollout._accounting.summary import DEFAULT_MAXLEN
from otel_rollout._accounting.waits import engine_timings
from otel_rollout._api.batch_span import (
    RemoteBatch,
    attach_batch,
    batch_carrier,
    batch_from_carrier,
    detach_batch,
    step_span_batch,
)
from otel_rollout._api.context import QueuedCall
from otel_rollout._api.phase_handles import Phase
from otel_rollout._api.phase_scope import _CURRENT, _PhaseScope
from otel_rollout._api.recording import _capture_content as capture_content
from otel_rollout._api.tracer import RolloutTracer, default_tracer
from otel_rollout._api.trajectory import Trajectory
from otel_rollout._base import semconv
from otel_rollout._base.clock import now_ns
from otel_rollout._base.errors import forget_warnings, internal_error, warn_once, warned
from otel_rollout._settings.table import BY_NAME, SETTINGS, forwarded_variables, variable_for
from otel_rollout._setup.resource import ray_attributes

__all__ = [
    "BY_NAME",
    "DEFAULT_MAXLEN",
    "SETTINGS",
    "QueuedCall",
    "RemoteBatch",
    "attach_batch",
    "attach_trajectory",
    "capture_content",
    "forget_warnings",
    "semconv",
    "stages_from_timestamps",
    "union_split",
    "warned",
    "detach_trajectory",
    "forwarded_variables",
    "phase_scope",
    "ray_attributes",
    "variable_for",
    "batch_carrier",
    "batch_from_carrier",
    "detach_batch",
    "engine_timings",
    "internal_error",
    "now_ns",
    "require",
    "rollout_tracer",
    "step_span_batch",
    "warn_once",
]


def rollout_tracer(kwargs: dict[str, Any]) -> RolloutTracer:
    """The tracer for ``instrument(**kwargs)``.

    ``rollout_tracer=`` as given; else, with ``tracer_provider=`` (and ``meter_provider=``,
    ``processor=`` for its :class:`~otel_rollout.BreakdownProcessor`), a tracer on those;
    else the tracer of the global ``configure()`` (or, without one, of the global
    providers), the same one :func:`otel_rollout.trajectory` uses.
    """
    given = kwargs.get("rollout_tracer")
    if given is not None:
        return given
    provider = kwargs.get("tracer_provider")
    if provider is None and kwargs.get("processor") is None:
        return default_tracer()
    return RolloutTracer(provider, kwargs.get("meter_provider"), processor=kwargs.get("processor"))


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


def attach_trajectory(traj: Trajectory) -> tuple[object, object]:
    """Make ``traj`` current here: its root the current span and
    :func:`otel_rollout.current_trajectory` answering it; undo with
    :func:`detach_trajectory`."""
    return otel_context.attach(traj.context), _CURRENT.set(traj)


def detach_trajectory(tokens: tuple[object, object]) -> None:
    """Undo :func:`attach_trajectory` (a no-op for the trajectory part when this runs in
    another context than the attach)."""
    token, var = tokens
    with contextlib.suppress(ValueError):
        _CURRENT.reset(var)  # type: ignore[arg-type]
    otel_context.detach(token)  # type: ignore[arg-type]
