"""The resource of a process: service, run id, host, pid, instance id, and Ray's ids."""

from __future__ import annotations

import os
import socket
import sys
import uuid
from typing import TYPE_CHECKING, Any

from otel_rollout._settings.table import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource


def ray_attributes() -> dict[str, str]:
    """Ray ids of this process (``ray.node.id``, ``ray.worker.id``, ``ray.job.id``,
    ``ray.actor.id``) where available; ``{}`` when Ray is not imported or not initialised.

    Never imports Ray and never raises. In a worker configured by Ray's setup hook the
    actor id is absent: the hook runs before the process becomes an actor.
    """
    ray = sys.modules.get("ray")
    if ray is None:
        return {}
    try:
        if not ray.is_initialized():
            return {}
        ctx = ray.get_runtime_context()
        out: dict[str, str] = {}
        for what in ("node", "worker", "job", "actor"):
            try:
                value = getattr(ctx, f"get_{what}_id")()
            except Exception:
                continue
            if value:
                out[f"ray.{what}.id"] = str(value)
        return out
    except Exception:
        return {}


def resource_attributes(settings: Settings) -> dict[str, Any]:
    """The attributes of this process's resource.

    Detected values (host, pid, a per-process ``service.instance.id``, Ray ids) give way
    to ``OTEL_RESOURCE_ATTRIBUTES`` and ``resource_attributes=``; ``service.name`` is the
    resolved ``service_name`` unless that is only the default and the attributes name one.
    """
    attrs: dict[str, Any] = {
        "host.name": socket.gethostname(),
        "process.pid": os.getpid(),
        # unique per process, so cumulative series of workers that share a service name
        # do not collide in the metrics backend
        "service.instance.id": uuid.uuid4().hex,
    }
    attrs.update(ray_attributes())
    attrs.update(settings.resource_attributes or {})
    if settings.sources.get("service_name", "default") != "default" or "service.name" not in (
        settings.resource_attributes or {}
    ):
        attrs["service.name"] = settings.service_name
    attrs["rollout.run.id"] = settings.run_id
    return attrs


def build_resource(settings: Settings) -> Resource:
    from opentelemetry.sdk.resources import Resource

    # Resource.create adds the SDK's telemetry.sdk.* attributes; ours override the rest.
    return Resource.create(resource_attributes(settings))
