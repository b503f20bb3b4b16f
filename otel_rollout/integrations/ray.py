"""Ray: providers in every worker, W3C carriers with the work, breakdowns back to the driver.

    from otel_rollout.integrations import ray as otel_ray

    ray.init(runtime_env=otel_ray.runtime_env())          # hook + the driver's OTEL_* settings

    @ray.remote
    @otel_ray.traced
    def rollout(prompt): ...                               # a trajectory per call, in a worker

    with tracer.start_as_current_span("step"):
        refs = [rollout.remote(p, otel_carrier=otel_ray.carrier()) for p in prompts]

* :func:`setup_worker` is the ``worker_process_setup_hook`` (string form
  ``"otel_rollout.integrations.ray.setup_worker"``, which the Job Submission API needs):
  it calls :func:`otel_rollout.configure` once per worker process with the Ray ids as
  resource attributes, keeps the handle (:func:`rollout`), and flushes at exit.
* :func:`carrier` / :func:`attached` / :func:`traced` carry the caller's trace context
  to the worker as a dict of W3C headers; spans and providers are never pickled.
* :func:`drain` returns the worker's breakdowns with the results; :func:`gatherer`,
  :func:`push` and :func:`drain_gathered` collect them through a small actor instead.

Ray is imported only when a function here needs it; :func:`resource_attributes` never
imports it, so ``configure()`` can call it in any process.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib
import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from opentelemetry import context as otel_context
from opentelemetry import propagate

from otel_rollout._breakdown import Breakdown
from otel_rollout._summary import BreakdownCollector
from otel_rollout.integrations import require

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

#: The string form of the setup hook, for ``runtime_env["worker_process_setup_hook"]``.
SETUP_HOOK = "otel_rollout.integrations.ray.setup_worker"
#: The keyword argument :func:`traced` adds to a remote function or actor method.
CARRIER_KWARG = "otel_carrier"
#: The name of the actor :func:`gatherer` creates and :func:`push` finds.
GATHERER_NAME = "otel_rollout_gatherer"
#: A user's own string setup hook, run by :func:`setup_worker` after configuring.
NEXT_HOOK_ENV = "OTEL_ROLLOUT_RAY_NEXT_HOOK"

_log = logging.getLogger("otel_rollout.ray")
F = TypeVar("F", bound=Callable[..., Any])


def _ray() -> Any:
    return require("ray", "ray")


# --- Resource attributes -------------------------------------------------------------------


def resource_attributes() -> dict[str, str]:
    """Ray ids of this process (``ray.node.id``, ``ray.worker.id``, ``ray.job.id``,
    ``ray.actor.id``) where available; ``{}`` when Ray is not imported or not initialised.

    Never imports Ray and never raises. In a worker configured by :func:`setup_worker` the
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
        for key, getter in (
            ("ray.node.id", "get_node_id"),
            ("ray.worker.id", "get_worker_id"),
            ("ray.job.id", "get_job_id"),
            ("ray.actor.id", "get_actor_id"),
        ):
            try:
                value = getattr(ctx, getter)()
            except Exception:
                continue
            if value:
                out[key] = str(value)
        return out
    except Exception:
        return {}


# --- runtime_env ---------------------------------------------------------------------------

#: ``runtime_env(**settings)`` names and the variable each one becomes in the workers.
SETTING_VARS = {
    "service_name": "OTEL_ROLLOUT_SERVICE_NAME",
    "run_id": "OTEL_ROLLOUT_RUN_ID",
    "traces_exporter": "OTEL_ROLLOUT_TRACES_EXPORTER",
    "metrics_exporter": "OTEL_ROLLOUT_METRICS_EXPORTER",
    "endpoint": "OTEL_EXPORTER_OTLP_ENDPOINT",
    "protocol": "OTEL_EXPORTER_OTLP_PROTOCOL",
    "sample_ratio": "OTEL_ROLLOUT_SAMPLE_RATIO",
    "tail_keep_slower_than_s": "OTEL_ROLLOUT_TAIL_KEEP_SLOWER_THAN_S",
    "metric_export_interval_ms": "OTEL_METRIC_EXPORT_INTERVAL",
    "output_dir": "OTEL_ROLLOUT_OUTPUT_DIR",
    "resource_attributes": "OTEL_RESOURCE_ATTRIBUTES",
    "disabled": "OTEL_ROLLOUT_DISABLED",
}
#: Per-signal variables an explicit generic setting replaces.
_SHADOWED = {
    "OTEL_EXPORTER_OTLP_ENDPOINT": (
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    ),
    "OTEL_EXPORTER_OTLP_PROTOCOL": (
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    ),
}
#: Settings of the driver's global ``configure()`` that workers inherit.
_INHERITED = ("service_name", "run_id", "traces_exporter", "metrics_exporter", "endpoint",
              "protocol", "sample_ratio", "tail_keep_slower_than_s")  # fmt: skip


def _var_value(name: str, value: Any) -> str:
    if name == "resource_attributes":
        if isinstance(value, str):
            return value
        return ",".join(f"{k}={quote(str(v), safe='')}" for k, v in dict(value).items())
    if isinstance(value, bool):
        return "true" if value else "false"
    if name == "output_dir":
        return str(Path(value).expanduser().resolve())
    return str(value)


def _driver_vars() -> dict[str, str]:
    """The variables that make a worker resolve the settings this driver resolved."""
    out = {k: v for k, v in os.environ.items() if k.startswith("OTEL_") and v.strip()}
    from otel_rollout import _config

    handle = _config._global
    if handle is None or handle.settings.get("disabled"):
        return out
    for name in _INHERITED:
        value = handle.settings.get(name)
        if value is not None:
            var = SETTING_VARS[name]
            for shadowed in _SHADOWED.get(var, ()):
                out.pop(shadowed, None)
            out[var] = _var_value(name, value)
    if handle.trace_file is not None:
        out[SETTING_VARS["output_dir"]] = str(Path(handle.trace_file).resolve().parent)
    return out


def runtime_env(base: Mapping[str, Any] | None = None, **settings: Any) -> dict[str, Any]:
    """A runtime_env with :func:`setup_worker` as hook and the telemetry settings as env vars.

    ``env_vars`` carry, lowest precedence first: the driver's ``OTEL_*`` variables (which
    include ``OTEL_ROLLOUT_*``), the settings the driver's global ``configure()`` resolved
    (service name, run id, exporters, protocol, sampling), the ``env_vars`` of ``base``,
    then ``settings`` (the names of :data:`SETTING_VARS`, e.g. ``endpoint=``,
    ``metric_export_interval_ms=``). Every other key of ``base`` is kept. A setup hook
    already in ``base`` still runs, after this one: a string through
    ``OTEL_ROLLOUT_RAY_NEXT_HOOK`` (so the result stays JSON, as the Job Submission API
    needs), a callable chained in a function. ``base`` itself is not modified.
    """
    unknown = sorted(set(settings) - set(SETTING_VARS))
    if unknown:
        raise TypeError(
            f"runtime_env() got unknown settings {unknown}; expected some of {sorted(SETTING_VARS)}"
        )
    env: dict[str, Any] = dict(base or {})
    env_vars = _driver_vars()
    base_vars = env.get("env_vars") or {}
    if not isinstance(base_vars, Mapping):
        raise TypeError(f"runtime_env env_vars must be a mapping, got {type(base_vars).__name__}")
    env_vars.update({str(k): str(v) for k, v in base_vars.items()})
    for name, value in settings.items():
        if value is None:
            continue
        var = SETTING_VARS[name]
        for shadowed in _SHADOWED.get(var, ()):
            env_vars.pop(shadowed, None)
        env_vars[var] = _var_value(name, value)

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


# --- The worker side -----------------------------------------------------------------------

_setup_lock = threading.Lock()
_rollout: Any = None  # the worker's ``Rollout`` handle, set by setup_worker()


def setup_worker() -> None:
    """The ``worker_process_setup_hook``: configure otel-rollout once in this process.

    Calls :func:`otel_rollout.configure` (global providers, so ``otel_rollout.trajectory``
    works in tasks) with :func:`resource_attributes` and ``service.instance.id`` set to
    the worker id, keeps the handle for :func:`rollout`,
    :func:`flush` and :func:`drain`; ``configure`` flushes and shuts the providers down at
    exit, within 5 s. A failure to configure is logged and the worker runs without
    telemetry. Then runs ``OTEL_ROLLOUT_RAY_NEXT_HOOK`` if set.
    """
    global _rollout
    with _setup_lock:
        if _rollout is None:
            try:
                from otel_rollout import _config

                handle = _config._global
                if handle is None:
                    attrs: dict[str, Any] = resource_attributes()
                    if "ray.worker.id" in attrs:
                        # One series per worker process: OTLP-to-Prometheus maps this to
                        # ``instance``, so cumulative histograms of workers never collide.
                        attrs["service.instance.id"] = attrs["ray.worker.id"]
                    handle = _config.configure(resource_attributes=attrs)
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


def rollout() -> Any:
    """The ``Rollout`` handle of this process: the worker's, else the driver's global one."""
    if _rollout is not None:
        return _rollout
    from otel_rollout import _config

    return _config._global


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


_flush_now = flush


def drain() -> list[Breakdown]:
    """This process's breakdowns since the last drain: return them with the results.

    Each breakdown is drained once, so with concurrent calls in one actor a call may carry
    breakdowns of another; over all results every trajectory appears exactly once.
    """
    handle = rollout()
    if handle is None:
        return []
    return handle.collector.drain()


# --- Context propagation -------------------------------------------------------------------


def carrier(context: otel_context.Context | None = None) -> dict[str, str]:
    """The current (or given) trace context as W3C headers, to send with a work item."""
    out: dict[str, str] = {}
    propagate.inject(out, context=context)
    return out


def _extract(headers: Mapping[str, str] | None) -> otel_context.Context | None:
    if not headers:
        return None
    return propagate.extract(dict(headers))


class attached:
    """Make the context of a :func:`carrier` current, with ``with`` or ``async with``.

    An empty or ``None`` carrier changes nothing. Yields the attached context.
    """

    __slots__ = ("_ctx", "_token")

    def __init__(self, headers: Mapping[str, str] | None) -> None:
        self._ctx = _extract(headers)
        self._token: Any = None

    def __enter__(self) -> otel_context.Context:
        if self._ctx is None:
            return otel_context.get_current()
        self._token = otel_context.attach(self._ctx)
        return self._ctx

    def __exit__(self, *exc: Any) -> None:
        if self._token is not None:
            otel_context.detach(self._token)
            self._token = None

    async def __aenter__(self) -> otel_context.Context:
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> None:
        self.__exit__()


def _signature_with(fn: Callable[..., Any], kwarg: str) -> inspect.Signature | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if kwarg in sig.parameters:
        return sig
    extra = inspect.Parameter(kwarg, inspect.Parameter.KEYWORD_ONLY, default=None)
    at = len(params)
    if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD:
        at -= 1
    params.insert(at, extra)
    return sig.replace(parameters=params)


def traced(
    fn: F | None = None,
    *,
    flush: bool = True,
    gather: bool | str = False,
    kwarg: str = CARRIER_KWARG,
) -> Any:
    """Decorate a remote function or actor method so callers can pass a :func:`carrier`.

    Put it under ``@ray.remote`` (or on the method of an actor class) and call
    ``f.remote(x, otel_carrier=otel_ray.carrier())``: the call runs with that context
    current, so a trajectory it opens is a child of the caller's span. Sync and async
    functions and (async) generators keep their kind, so Ray still sees an async actor or
    a streaming generator. Without a carrier the call runs as it would undecorated.

    ``flush`` (default True) exports this process's spans and metrics when the call ends
    (a few ms; pass False for small, frequent calls). ``gather`` (True, or a gatherer
    name) pushes this process's breakdowns to the :func:`gatherer` actor and waits for it
    before returning, so the driver's :func:`drain_gathered` after ``ray.get`` sees them.
    """
    if fn is None:
        return functools.partial(traced, flush=flush, gather=gather, kwarg=kwarg)
    sig = _signature_with(fn, kwarg)
    passes_through = sig is not None and kwarg in inspect.signature(fn).parameters
    name = GATHERER_NAME if gather is True else (gather or None)

    def take(kwargs: dict[str, Any]) -> otel_context.Context | None:
        headers = kwargs.get(kwarg) if passes_through else kwargs.pop(kwarg, None)
        return _extract(headers)

    def after() -> None:
        if name:
            items = drain()
            try:
                if items:
                    _ray().get(push(breakdowns=items, name=name))
            except Exception as err:
                _gather_failed(items, name, err)
        if flush:
            _flush_now()

    async def after_async() -> None:
        if name:
            items = drain()
            try:
                if items:
                    await push(breakdowns=items, name=name)
            except Exception as err:
                _gather_failed(items, name, err)
        if flush:
            await asyncio.to_thread(_flush_now)

    wrapper: Callable[..., Any]
    if inspect.isasyncgenfunction(fn):

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            step_ctx = _step_context(take(kwargs))
            loop = asyncio.get_running_loop()
            agen = fn(*args, **kwargs)
            try:
                while True:
                    step = loop.create_task(_anext(agen), context=step_ctx)
                    try:
                        item = await step
                    except StopAsyncIteration:
                        return
                    yield item
            finally:
                await loop.create_task(_aclose(agen), context=step_ctx)
                await after_async()

    elif inspect.iscoroutinefunction(fn):

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            ctx = take(kwargs)
            token = otel_context.attach(ctx) if ctx is not None else None
            try:
                return await fn(*args, **kwargs)
            finally:
                if token is not None:
                    otel_context.detach(token)
                await after_async()

    elif inspect.isgeneratorfunction(fn):

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            step_ctx = _step_context(take(kwargs))
            gen = fn(*args, **kwargs)
            try:
                while True:
                    try:
                        item = step_ctx.run(next, gen)
                    except StopIteration as stop:
                        return stop.value
                    yield item
            finally:
                step_ctx.run(gen.close)
                after()

    else:

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            ctx = take(kwargs)
            token = otel_context.attach(ctx) if ctx is not None else None
            try:
                return fn(*args, **kwargs)
            finally:
                if token is not None:
                    otel_context.detach(token)
                after()

    functools.update_wrapper(wrapper, fn)
    # Ray unwraps actor methods (inspect.unwrap) to read their signature: without
    # ``__wrapped__`` it reads ``__signature__``, which accepts the carrier keyword.
    del wrapper.__wrapped__
    if sig is not None:
        wrapper.__signature__ = sig  # type: ignore[attr-defined]
    return wrapper


def _gather_failed(items: list[Breakdown], name: str, err: Exception) -> None:
    """Keep breakdowns a push could not deliver, for a later push or :func:`drain`."""
    _log.warning(
        "otel-rollout: could not push %d breakdowns to the gatherer %r (%s: %s); "
        "they stay in this process for drain()",
        len(items),
        name,
        type(err).__name__,
        err,
    )
    handle = rollout()
    if handle is not None:
        handle.collector.extend(items)


async def _anext(agen: Any) -> Any:
    return await agen.__anext__()


async def _aclose(agen: Any) -> None:
    await agen.aclose()


def _step_context(ctx: otel_context.Context | None) -> contextvars.Context:
    """A contextvars context with ``ctx`` attached, in which a generator's steps all run,
    so context it sets between yields (an open trajectory) survives to the next step."""
    step = contextvars.copy_context()
    if ctx is not None:
        step.run(otel_context.attach, ctx)
    return step


# --- Gathering breakdowns in an actor ------------------------------------------------------


class BreakdownGatherer:
    """The actor behind :func:`gatherer`: workers push breakdowns, the driver drains them."""

    def __init__(self, maxlen: int | None = 1_000_000) -> None:
        self._collector = BreakdownCollector(maxlen)

    def push(self, breakdowns: Iterable[Breakdown]) -> int:
        self._collector.extend(breakdowns)
        return len(self._collector)

    def drain(self) -> list[Breakdown]:
        return self._collector.drain()

    def count(self) -> int:
        return len(self._collector)

    def dropped(self) -> int:
        return self._collector.dropped


_actor_class: Any = None
_handles: dict[tuple[str, str | None], Any] = {}
_handles_lock = threading.Lock()


def gatherer(name: str = GATHERER_NAME, *, namespace: str | None = None, **options: Any) -> Any:
    """The named :class:`BreakdownGatherer` actor, created if it does not exist yet.

    Create it in the driver and keep the handle: the actor lives as long as the job (or
    pass ``lifetime="detached"`` in ``options``). It takes no CPU (``num_cpus=0``).
    """
    global _actor_class
    ray = _ray()
    if _actor_class is None:
        _actor_class = ray.remote(num_cpus=0)(BreakdownGatherer)
    handle = _actor_class.options(
        name=name, namespace=namespace, get_if_exists=True, **options
    ).remote()
    with _handles_lock:
        _handles[(name, namespace)] = handle
    return handle


def _lookup(name: str, namespace: str | None) -> Any:
    with _handles_lock:
        handle = _handles.get((name, namespace))
    if handle is None:
        ray = _ray()
        if not ray.is_initialized():  # ray.get_actor would start a local cluster
            raise RuntimeError(f"Ray is not initialised: no gatherer {name!r} to push to")
        handle = ray.get_actor(name, namespace=namespace)
        with _handles_lock:
            _handles[(name, namespace)] = handle
    return handle


def push(
    handle: Any = None,
    breakdowns: Iterable[Breakdown] | None = None,
    *,
    name: str = GATHERER_NAME,
    namespace: str | None = None,
) -> Any:
    """Send ``breakdowns`` (default: :func:`drain`) to the gatherer; returns the ObjectRef
    of the push (``ray.get`` or ``await`` it before reporting the work done), or None when
    there was nothing to send."""
    items = drain() if breakdowns is None else list(breakdowns)
    if not items:
        return None
    if handle is None:
        handle = _lookup(name, namespace)
    return handle.push.remote(items)


def drain_gathered(
    handle: Any = None,
    *,
    name: str = GATHERER_NAME,
    namespace: str | None = None,
    timeout_s: float | None = 30.0,
) -> list[Breakdown]:
    """Every breakdown pushed to the gatherer since the last drain (in the driver)."""
    if handle is None:
        handle = _lookup(name, namespace)
    return _ray().get(handle.drain.remote(), timeout=timeout_s)
