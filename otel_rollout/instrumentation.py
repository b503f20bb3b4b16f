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
  span's attributes.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from otel_rollout._accounting.waits import engine_timings
from otel_rollout._api.batch_span import (
    attach_batch,
    batch_carrier,
    batch_from_carrier,
    detach_batch,
    step_span_batch,
)
from otel_rollout._api.tracer import RolloutTracer, default_tracer
from otel_rollout._base.errors import internal_error, warn_once

__all__ = [
    "attach_batch",
    "batch_carrier",
    "batch_from_carrier",
    "detach_batch",
    "engine_timings",
    "internal_error",
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
