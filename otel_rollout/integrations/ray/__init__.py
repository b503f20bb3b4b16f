"""Ray: providers in every worker, W3C carriers with the work, breakdowns back to the
driver (docs/ray.md). Ray is imported only when a function here needs it.

    from otel_rollout.integrations import ray as otel_ray

    ray.init(runtime_env=otel_ray.runtime_env())          # hook + the driver's settings

    @ray.remote
    @otel_ray.traced
    def rollout(prompt): ...                               # a trajectory per call, in a worker

    refs = [rollout.remote(p, otel_carrier=otel_ray.carrier()) for p in prompts]
"""

from __future__ import annotations

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
    "CARRIER_KWARG", "GATHERER_NAME", "NEXT_HOOK_ENV", "SETTING_VARS", "SETUP_HOOK",
    "BreakdownGatherer", "attached", "carrier", "drain", "drain_gathered", "flush", "gatherer",
    "push", "rollout", "runtime_env", "setup_worker", "traced"
]  # fmt: skip
