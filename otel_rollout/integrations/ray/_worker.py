"""The worker side: the setup hook that configures each worker once, and its handle."""

from __future__ import annotations

import importlib
import logging
import os
import threading
from typing import Any

from otel_rollout import Breakdown, Rollout, get_rollout
from otel_rollout.instrumentation import ray_attributes

#: The string form of the setup hook, for ``runtime_env["worker_process_setup_hook"]``.
SETUP_HOOK = "otel_rollout.integrations.ray.setup_worker"
#: A user's own string setup hook, run by :func:`setup_worker` after configuring.
NEXT_HOOK_ENV = "OTEL_ROLLOUT_RAY_NEXT_HOOK"


_log = logging.getLogger("otel_rollout.ray")
_setup_lock = threading.Lock()
_rollout: Rollout | None = None  # the worker's handle, set by setup_worker()


def setup_worker() -> None:
    """The ``worker_process_setup_hook``: :func:`otel_rollout.configure` once in this
    process, with the Ray ids as resource attributes (``service.instance.id`` the worker
    id), or a warning and no telemetry if that fails; then ``OTEL_ROLLOUT_RAY_NEXT_HOOK``."""
    global _rollout
    with _setup_lock:
        if _rollout is None:
            try:
                from otel_rollout import configure

                handle = get_rollout()
                if handle is None:
                    attrs: dict[str, Any] = ray_attributes()
                    if "ray.worker.id" in attrs:
                        # One series per worker process: OTLP-to-Prometheus maps this to
                        # ``instance``, so cumulative histograms of workers never collide.
                        attrs["service.instance.id"] = attrs["ray.worker.id"]
                    handle = configure(resource_attributes=attrs)
                _rollout = handle
            except Exception as err:
                _log.warning("otel-rollout could not configure this Ray worker (%s: %s); it "
                             "runs without telemetry", type(err).__name__, err)  # fmt: skip
    next_hook = os.environ.get(NEXT_HOOK_ENV, "").strip()
    if next_hook and next_hook != SETUP_HOOK:
        module, _, name = next_hook.rpartition(".")
        getattr(importlib.import_module(module), name)()


def rollout() -> Rollout | None:
    """The ``Rollout`` handle of this process: the worker's, else the driver's global one."""
    return _rollout if _rollout is not None else get_rollout()


def flush(timeout_s: float = 5.0) -> bool:
    """Export this process's pending spans and current metrics now (before Ray may kill
    the worker); False if the exporters did not finish in time."""
    handle = rollout()
    if handle is None:
        return True
    try:
        return bool(handle.force_flush(timeout_s))
    except Exception as err:
        _log.warning("otel-rollout: flush failed: %s", err)
        return False


def drain() -> list[Breakdown]:
    """This process's breakdowns since the last drain (each once), to return with the
    results."""
    handle = rollout()
    if handle is None:
        return []
    return handle.collector.drain()
