"""Ray: providers in every worker, W3C carriers with the work, breakdowns back to the driver.

    from otel_rollout.integrations import ray as otel_ray

    ray.init(runtime_env=otel_ray.runtime_env())          # hook + the driver's settings

    @ray.remote
    @otel_ray.traced
    def rollout(prompt): ...                               # a trajectory per call, in a worker

    with tracer.start_as_current_span("step"):
        refs = [rollout.remote(p, otel_carrier=otel_ray.carrier()) for p in prompts]

* :func:`runtime_env` forwards every setting of the settings table (the driver's
  resolved values, then the ``env_vars`` and keywords given) and installs
  :func:`setup_worker` as the ``worker_process_setup_hook`` (string form
  ``"otel_rollout.integrations.ray.setup_worker"``, which the Job Submission API needs):
  it calls :func:`otel_rollout.configure` once per worker process with the Ray ids as
  resource attributes, keeps the handle (:func:`rollout`), and flushes at exit.
* :func:`carrier` / :func:`attached` / :func:`traced` carry the caller's trace context
  to the worker as a dict of W3C headers; spans and providers are never pickled. While
  OpenTelemetry instrumentation is suppressed, :func:`carrier` is empty.
* :func:`drain` returns the worker's breakdowns with the results; :func:`gatherer`,
  :func:`push` and :func:`drain_gathered` collect them through a small actor instead.

Modules: ``_forward`` (runtime_env), ``_worker`` (setup hook, handle, flush, drain),
``_propagation`` (carriers), ``_traced`` (the decorator), ``_gather`` (the actor). Ray
is imported only when a function here needs it; :func:`resource_attributes` never
imports it, so ``configure()`` can call it in any process.
"""

from __future__ import annotations

from otel_rollout.instrumentation import ray_attributes as resource_attributes
from otel_rollout.integrations.ray._forward import (
    NEXT_HOOK_ENV,
    SETTING_VARS,
    SETUP_HOOK,
    runtime_env,
)
from otel_rollout.integrations.ray._gather import (
    GATHERER_NAME,
    BreakdownGatherer,
    drain_gathered,
    gatherer,
    push,
)
from otel_rollout.integrations.ray._propagation import CARRIER_KWARG, attached, carrier
from otel_rollout.integrations.ray._traced import traced
from otel_rollout.integrations.ray._worker import drain, flush, rollout, setup_worker

__all__ = [
    "CARRIER_KWARG",
    "GATHERER_NAME",
    "NEXT_HOOK_ENV",
    "SETTING_VARS",
    "SETUP_HOOK",
    "BreakdownGatherer",
    "attached",
    "carrier",
    "drain",
    "drain_gathered",
    "flush",
    "gatherer",
    "push",
    "resource_attributes",
    "rollout",
    "runtime_env",
    "setup_worker",
    "traced",
]
