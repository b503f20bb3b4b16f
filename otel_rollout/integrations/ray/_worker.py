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
    """The ``worker_process_setup_hook``: configure otel-rollout once in this process.

    Calls :func:`otel_rollout.configure` (global providers, so ``otel_rollout.trajectory``
    works in tasks) with the Ray ids as resource attributes and ``service.instance.id``
    set to the worker id, keeps the handle for :func:`rollout`, :func:`flush` and
    :func:`drain`; ``configure`` flushes and shuts the providers down at exit, within
    5 s. A failure to configure is logged and the worker runs without telemetry. Then
    runs ``OTEL_ROLLOUT_RAY_NEXT_HOOK`` if set.
    """
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
                _log.warning(
                    "otel-rollout could not configure this Ray worker (%s: %s); "
                    "it runs without telemetry",
                    type(err).__name__,
                    err,
                )
    next_hook = os.environ.get(NEXT_HOOK_ENV, "").strip()
    if next_hook and next_hook != SETUP_HOOK:
        module, _, name = next_hook.rpartition(".")
        getattr(importlib.import_module(module), name)()


def rollout() -> Rollout | None:
    """The ``Rollout`` handle of this process: the worker's, else the driver's global one."""
    return _rollout if _rollout is not None else get_rollout()


def flush(timeout_s: float = 5.0) -> bool:
    """Export this process's pending spans and current metrics now.

    Call it at the end of work in a worker Ray may kill: idle workers exit gracefully (the
    exit handler flushes), but ``ray.kill`` and ``ray.shutdown`` end workers without it.
    Returns False if the exporters did not finish in time; True when nothing is configured.
    """
    handle = rollout()
    if handle is None:
        return True
    try:
        return bool(handle.force_flush(timeout_s))
    except Exception as err:
        _log.warning("otel-rollout: flush failed: %s", err)
        return False


def drain() -> list[Breakdown]:
    """This process's breakdowns since the last drain: return them with the results.

    Each breakdown is drained once, so with concurrent calls in one actor a call may carry
    breakdowns of another; over all results every trajectory appears exactly once.
    """
    handle = rollout()
    if handle is None:
        return []
    return handle.collector.drain()
