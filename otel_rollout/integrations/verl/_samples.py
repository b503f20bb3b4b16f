"""Samples and steps (docs/verl.md): each sample of ``AgentLoopWorker._run_agent_loop`` is
a trajectory root around ``rollout_trace_attr(...)`` (no worker method is wrapped: Ray
actors run copies of their class's methods), each ``AgentLoopManager.generate_sequences``
call a batch, whose carrier the worker attaches in ``get_trajectory_info``; breakdowns go
back in ``AgentLoopMetrics.model_dump()``, taken out in ``_performance_metrics``."""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import sys
from typing import Any

from opentelemetry import context as otel_context

from otel_rollout import RolloutTracer, current_batch, summarize
from otel_rollout.instrumentation import (
    attach_batch,
    batch_from_carrier,
    caller_locals,
    internal_error,
)
from otel_rollout.integrations.ray._propagation import carrier, extract
from otel_rollout.integrations.verl._calls import model_of, plain, record_sample, trajectory_kwargs
from otel_rollout.integrations.verl._state import STATE, State

#: The ``meta_info`` key of the driver's carrier, on the prompts and each chunk.
CARRIER_META = "otel_rollout_carrier"
#: The key of a worker's breakdowns, in the first sample's ``metrics`` dict.
BREAKDOWNS_KEY = "otel_rollout_breakdowns"
#: The prefix of the keys added to ``meta_info["timing"]`` (verl logs ``timing_s/<key>``).
TIMING_PREFIX = "rollout/"

#: Whether this worker call's samples belong to a batch of another process (the driver).
_HAND_BACK: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "otel_rollout_verl_hand_back", default=False
)
#: Where a sample's breakdown waits on its ``AgentLoopMetrics`` for ``model_dump()``.
_BREAKDOWN_ATTR = "_otel_rollout_breakdown"


class _Sample:
    """One sample: ``rollout_trace_attr(...)`` in ``_run_agent_loop``, inside our root."""

    __slots__ = ("_inner", "_scope", "_state", "_token")

    def __init__(self, tracer: RolloutTracer, inner: Any, kwargs: dict) -> None:
        self._inner = inner
        self._state: State | None = None
        self._token: Any = None
        try:
            frame = caller_locals("_run_agent_loop") or {}
            sample = {**(frame.get("kwargs") or {}), "agent_name": frame.get("agent_name")}
            info = {k: kwargs.get(k) for k in ("step", "sample_index", "rollout_n", "validate")}
            tkw, model = trajectory_kwargs(info, sample), model_of(frame.get("self"))
        except Exception as exc:
            internal_error("verl sample", exc)
            tkw, model = {}, None
        self._scope = tracer.trajectory(model=model, **tkw)

    def __enter__(self) -> Any:
        self._state = State(self._scope.__enter__())
        self._token = STATE.set(self._state)
        try:
            return self._inner.__enter__()
        except BaseException:
            self._end(None, *sys.exc_info())
            raise

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Any:
        try:
            return self._inner.__exit__(exc_type, exc, tb)
        finally:
            frame = caller_locals("_run_agent_loop") or {}
            self._end(frame.get("output"), exc_type, exc, tb)

    def _end(self, output: Any, exc_type: Any, exc: Any, tb: Any) -> None:
        state, self._state = self._state, None
        if state is None:
            return
        STATE.reset(self._token)
        if output is not None:
            record_sample(state.traj, output)
        self._scope.__exit__(exc_type, exc, tb)
        bd = state.traj.breakdown
        if bd is not None and output is not None and _HAND_BACK.get():
            # the driver's batch: the breakdown goes back with verl's metrics
            with contextlib.suppress(Exception):
                object.__setattr__(output.metrics, _BREAKDOWN_ATTR, bd)


def trace_attr_wrapper(tracer: RolloutTracer) -> Any:
    """``rollout_trace_attr(...)`` as ``_run_agent_loop`` enters it: the sample's root."""

    def rollout_trace_attr(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        inner = wrapped(*args, **kwargs)
        if STATE.get() is not None or caller_locals("_run_agent_loop") is None:
            return inner
        return _Sample(tracer, inner, kwargs)

    return rollout_trace_attr


async def trajectory_info_wrapper(wrapped: Any, instance: Any, args: tuple, kw: dict) -> Any:
    """``get_trajectory_info(...)``, awaited by ``AgentLoopWorker.generate_sequences``
    before it starts the samples' tasks: the driver's carrier is attached to the calling
    task here (for the rest of its call), so the samples' tasks start with it."""
    try:
        meta = getattr((caller_locals("generate_sequences") or {}).get("batch"), "meta_info", None)
        headers = meta.pop(CARRIER_META, None) if isinstance(meta, dict) else None
        remote = batch_from_carrier(headers) if headers else None
        if remote is not None:
            ctx = extract(headers)
            if ctx is not None:
                otel_context.attach(ctx)
            attach_batch(remote)
            _HAND_BACK.set(True)
    except Exception as exc:
        internal_error("verl carrier", exc)
    return await wrapped(*args, **kw)


def metrics_dump_wrapper(wrapped: Any, instance: Any, args: tuple, kw: dict) -> Any:
    """``AgentLoopMetrics.model_dump()``: a sample of the driver's batch adds its breakdown."""
    out = wrapped(*args, **kw)
    bd = getattr(instance, "__dict__", {}).get(_BREAKDOWN_ATTR)
    if bd is not None and isinstance(out, dict):
        out[BREAKDOWNS_KEY] = [bd]
    return out


def metrics_wrapper(wrapped: Any, instance: Any, args: tuple, kw: dict) -> Any:
    """``_performance_metrics(metrics, output)``: the workers' breakdowns taken out of
    ``metrics`` before verl reads it, to ride in the timing dict it returns."""
    gathered: list = []
    try:
        for chunk in (args[0] if args else kw.get("metrics")) or ():
            for metric in chunk or ():
                if isinstance(metric, dict):
                    gathered.extend(metric.pop(BREAKDOWNS_KEY, None) or ())
    except Exception as exc:
        internal_error("verl breakdowns from workers", exc)
    timing = wrapped(*args, **kw)
    if gathered and isinstance(timing, dict):
        timing[BREAKDOWNS_KEY] = gathered
    return timing


def _meta(data: Any) -> dict | None:
    meta = getattr(data, "meta_info", None)
    return meta if isinstance(meta, dict) else None


def _finish(scope: Any, batch: Any, prompts: Any, output: Any, exc: Any, add: bool) -> None:
    """The end of a ``generate_sequences`` call: the workers' breakdowns into the batch,
    its summary into verl's ``meta_info["timing"]`` as ``rollout/*``."""
    (_meta(prompts) or {}).pop(CARRIER_META, None)
    timing = (_meta(output) or {}).get("timing")
    timing = timing if isinstance(timing, dict) else None
    if timing is not None and (gathered := timing.pop(BREAKDOWNS_KEY, None)):
        batch.add(gathered)
    scope.__exit__(type(exc) if exc else None, exc, None)
    if timing is not None and add:
        try:
            timing.update(summarize(batch.breakdowns, prefix=TIMING_PREFIX))
            if batch.analysis is not None:
                timing.update(batch.analysis.summary(prefix=TIMING_PREFIX))
        except Exception as err:
            internal_error("verl timing keys", err)


def manager_wrapper(tracer: RolloutTracer, add_timing: bool) -> Any:
    """``AgentLoopManager.generate_sequences`` (verl's ``auto_await``: a coroutine to
    await, or run to its result): a batch around the step, whichever way it runs."""

    def generate_sequences(wrapped: Any, instance: Any, args: tuple, kw: dict) -> Any:
        if current_batch() is not None:
            return wrapped(*args, **kw)
        prompts = args[0] if args else kw.get("prompts")
        meta = _meta(prompts)
        step = plain(meta.get("global_steps")) if meta is not None else None
        ok = isinstance(step, int) and not isinstance(step, bool) and step >= 0
        scope = tracer.batch(step if ok else None)
        batch = scope.__enter__()
        if meta is not None:
            meta[CARRIER_META] = carrier()

        def finish(output: Any, exc: BaseException | None = None) -> Any:
            _finish(scope, batch, prompts, output, exc, add_timing)
            return output

        try:
            result = wrapped(*args, **kw)
        except BaseException as exc:
            finish(None, exc)
            raise
        if not inspect.isawaitable(result):
            return finish(result)

        async def finish_async() -> Any:
            try:
                output = await result
            except BaseException as exc:
                finish(None, exc)
                raise
            return finish(output)

        return finish_async()

    return generate_sequences
