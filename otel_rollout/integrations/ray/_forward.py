"""``runtime_env()``: the setup hook and every setting of the settings table, forwarded to
workers."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from otel_rollout import get_rollout
from otel_rollout.instrumentation import BY_NAME, SETTINGS, forwarded_variables, variable_for
from otel_rollout.integrations.ray._worker import NEXT_HOOK_ENV, SETUP_HOOK, setup_worker

#: ``runtime_env(**settings)`` names and the variable each one becomes in the workers.
SETTING_VARS: dict[str, str] = {s.name: s.variable for s in SETTINGS}


def _apply(into: dict[str, str], layer: Mapping[str, str]) -> None:
    """Put ``layer`` over ``into``; a generic variable removes the per-signal ones it
    replaces (``OTEL_EXPORTER_OTLP_ENDPOINT`` those of traces and metrics) from below."""
    shadows = {s.variable: s.shadows for s in SETTINGS if s.shadows}
    for var in layer:
        for shadowed in shadows.get(var, ()):
            if shadowed not in layer:
                into.pop(shadowed, None)
    into.update(layer)


def _driver_vars() -> dict[str, str]:
    """The variables that make a worker resolve the settings this driver resolved."""
    out = {k: v for k, v in os.environ.items() if k.startswith("OTEL_") and v.strip()}
    handle = get_rollout()
    if handle is not None:
        _apply(out, forwarded_variables(handle.settings))
        if handle.trace_file is not None:
            out[BY_NAME["output_dir"].variable] = str(handle.trace_file.resolve().parent)
    return out


def runtime_env(base: Mapping[str, Any] | None = None, **settings: Any) -> dict[str, Any]:
    """``base`` (not modified) with :func:`setup_worker` as hook and, as ``env_vars``,
    lowest first: the driver's ``OTEL_*`` variables, the settings its ``configure()``
    resolved, ``base``'s ``env_vars``, then ``settings`` (names of :data:`SETTING_VARS`).
    A hook already in ``base`` runs after ours: a string through
    ``OTEL_ROLLOUT_RAY_NEXT_HOOK`` (the result stays JSON), a callable chained."""
    unknown = sorted(set(settings) - set(SETTING_VARS))
    if unknown:
        raise TypeError(
            f"runtime_env() got unknown settings {unknown}; expected some of {sorted(SETTING_VARS)}"
        )
    explicit: dict[str, str] = {}
    for name, value in settings.items():
        if value is not None:
            var, text, _ = variable_for(name, value)
            explicit[var] = text
    env: dict[str, Any] = dict(base or {})
    env_vars = _driver_vars()
    base_vars = env.get("env_vars") or {}
    if not isinstance(base_vars, Mapping):
        raise TypeError(f"runtime_env env_vars must be a mapping, got {type(base_vars).__name__}")
    _apply(env_vars, {str(k): str(v) for k, v in base_vars.items()})
    _apply(env_vars, explicit)

    hook = env.get("worker_process_setup_hook")
    if hook is None or hook == SETUP_HOOK or hook is setup_worker:
        env["worker_process_setup_hook"] = SETUP_HOOK
    elif isinstance(hook, str):
        env_vars[NEXT_HOOK_ENV] = hook
        env["worker_process_setup_hook"] = SETUP_HOOK
    elif callable(hook):
        env["worker_process_setup_hook"] = _chain(hook)
    else:
        raise TypeError(
            f"worker_process_setup_hook must be a string or a callable, got {type(hook).__name__}"
        )
    env["env_vars"] = env_vars
    return env


def _chain(user_hook: Callable[[], Any]) -> Callable[[], Any]:
    def otel_rollout_setup_worker() -> None:
        setup_worker()
        user_hook()

    return otel_rollout_setup_worker
