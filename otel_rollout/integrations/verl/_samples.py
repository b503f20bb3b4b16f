"""Samples and steps: each ``AgentLoopWorker._run_agent_loop`` call (one sample) is a
trajectory root; each ``generate_sequences`` call (one step) is a batch, the roots
linked to it.

``AgentLoopManager.generate_sequences`` (the driver) opens the batch and puts its
carrier (:func:`otel_rollout.integrations.ray.carrier`) in the prompts' ``meta_info``,
which ``prompts.chunk()`` copies to every worker's chunk. ``AgentLoopWorker.
generate_sequences`` (a Ray actor, configured by the Ray integration's worker setup
hook) attaches it, so its trajectories are roots linked to the driver's batch span, and
returns their breakdowns with verl's own per-sample ``metrics`` in ``meta_info``; the
driver takes them out in ``_performance_metrics`` (before verl reads its keys) and adds
them to the batch. A worker called without a carrier, outside any batch, opens a batch
of its own for the call.
"""

from __future__ import annotations

import contextvars
import inspect
from typing import Any

from otel_rollout._accounting.summary import summarize
from otel_rollout._api.batch_span import Batch, current_batch, step_span_batch
from otel_rollout._api.tracer import RolloutTracer
from otel_rollout._base.errors import internal_error
from otel_rollout.integrations.ray._propagation import attached, carrier
from otel_rollout.integrations.verl._calls import model_of, plain, record_sample, trajectory_kwargs
from otel_rollout.integrations.verl._state import STATE, State

#: The ``meta_info`` key of the driver's carrier, on the prompts and each chunk.
CARRIER_META = "otel_rollout_carrier"
#: The key of a worker's breakdowns, in the first sample's ``metrics`` dict.
BREAKDOWNS_KEY = "otel_rollout_breakdowns"
#: The prefix of the keys added to ``meta_info["timing"]`` (verl logs ``timing_s/<key>``).
TIMING_PREFIX = "rollout/"

#: The breakdowns of the trajectories of the worker call running in this context.
_FINISHED: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "otel_rollout_verl_finished", default=None
)


def sample_wrapper(tracer: RolloutTracer) -> Any:
    async def run_agent_loop(wrapped: Any, instance: Any, args: tuple, kw: dict) -> Any:
        if STATE.get() is not None:
            return await wrapped(*args, **kw)
        try:
            tkw = trajectory_kwargs(args, kw)
            model = model_of(instance)
        except Exception as exc:
            internal_error("verl sample", exc)
            tkw, model = {}, None
        async with tracer.trajectory(model=model, **tkw) as traj:
            token = STATE.set(State(traj))
            try:
                output = await wrapped(*args, **kw)
            finally:
                STATE.reset(token)
            record_sample(traj, output)
        finished = _FINISHED.get()
        if finished is not None and traj.breakdown is not None:
            finished.append(traj.breakdown)
        return output

    return run_agent_loop


def _step_of(data: Any) -> int | None:
    meta = getattr(data, "meta_info", None)
    step = plain(meta.get("global_steps")) if isinstance(meta, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None


def worker_wrapper(tracer: RolloutTracer) -> Any:
    async def generate_sequences(wrapped: Any, instance: Any, args: tuple, kw: dict) -> Any:
        data = args[0] if args else kw.get("batch")
        meta = getattr(data, "meta_info", None)
        headers = meta.pop(CARRIER_META, None) if isinstance(meta, dict) else None
        if headers:  # the driver's batch, from another process
            finished: list = []
            token = _FINISHED.set(finished)
            try:
                async with attached(headers):
                    output = await wrapped(*args, **kw)
            finally:
                _FINISHED.reset(token)
            _hand_back(output, finished)
            return output
        if current_batch() is not None or step_span_batch() is not None:
            return await wrapped(*args, **kw)
        async with tracer.batch(_step_of(data)):
            return await wrapped(*args, **kw)

    return generate_sequences


def _hand_back(output: Any, finished: list) -> None:
    """The worker's breakdowns, with the first sample's metrics, to the driver."""
    if not finished:
        return
    try:
        metrics = output.meta_info.get("metrics")
        if isinstance(metrics, list) and metrics and isinstance(metrics[0], dict):
            metrics[0][BREAKDOWNS_KEY] = finished
    except Exception as exc:
        internal_error("verl breakdowns to the driver", exc)


def metrics_wrapper(wrapped: Any, instance: Any, args: tuple, kw: dict) -> Any:
    """``_performance_metrics(metrics, output)``: the workers' breakdowns taken out of
    ``metrics`` before verl reads it; they ride in the timing dict it returns to the
    driver's step (:class:`_DriverStep`), which takes them out again."""
    metrics = args[0] if args else kw.get("metrics")
    gathered: list = []
    try:
        for chunk in metrics or ():
            for metric in chunk or ():
                if isinstance(metric, dict):
                    gathered.extend(metric.pop(BREAKDOWNS_KEY, None) or ())
    except Exception as exc:
        internal_error("verl breakdowns from workers", exc)
    timing = wrapped(*args, **kw)
    if gathered and isinstance(timing, dict):
        timing[BREAKDOWNS_KEY] = gathered
    return timing


class _DriverStep:
    """The batch of one ``AgentLoopManager.generate_sequences`` call."""

    def __init__(self, tracer: RolloutTracer, prompts: Any, add_timing: bool) -> None:
        self._scope = tracer.batch(_step_of(prompts))
        self._prompts = prompts
        self._add_timing = add_timing
        self.batch: Batch | None = None

    def enter(self) -> None:
        self.batch = self._scope.__enter__()
        meta = getattr(self._prompts, "meta_info", None)
        if isinstance(meta, dict):
            meta[CARRIER_META] = carrier()

    def exit(self, output: Any, exc: BaseException | None) -> None:
        meta = getattr(self._prompts, "meta_info", None)
        if isinstance(meta, dict):
            meta.pop(CARRIER_META, None)
        out_meta = getattr(output, "meta_info", None)
        timing = out_meta.get("timing") if isinstance(out_meta, dict) else None
        batch = self.batch
        if isinstance(timing, dict):
            gathered = timing.pop(BREAKDOWNS_KEY, None)
            if gathered and batch is not None:
                batch.add(gathered)
        self._scope.__exit__(type(exc) if exc else None, exc, None)
        if isinstance(timing, dict) and self._add_timing and batch is not None:
            try:
                timing.update(summarize(batch.breakdowns, prefix=TIMING_PREFIX))
                timing.update(batch.summary(prefix=TIMING_PREFIX))
            except Exception as err:
                internal_error("verl timing keys", err)


def manager_wrapper(tracer: RolloutTracer, add_timing: bool) -> Any:
    """``AgentLoopManager.generate_sequences`` (verl's ``auto_await``: a coroutine to
    await, or run to its result): a batch around the step, whichever way it runs."""

    def generate_sequences(wrapped: Any, instance: Any, args: tuple, kw: dict) -> Any:
        if current_batch() is not None:
            return wrapped(*args, **kw)
        step = _DriverStep(tracer, args[0] if args else kw.get("prompts"), add_timing)
        step.enter()
        try:
            result = wrapped(*args, **kw)
        except BaseException as exc:
            step.exit(None, exc)
            raise
        if not inspect.isawaitable(result):
            step.exit(result, None)
            return result

        async def finish() -> Any:
            try:
                output = await result
            except BaseException as exc:
                step.exit(None, exc)
                raise
            step.exit(output, None)
            return output

        return finish()

    return generate_sequences
