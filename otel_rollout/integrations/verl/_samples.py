"""Samples and steps: each sample of ``AgentLoopWorker._run_agent_loop`` is a
trajectory root; each ``generate_sequences`` call (one step) is a batch, the roots
linked to it.

verl runs its workers as Ray actors, and a Ray actor runs copies of its class's
methods made when the driver called ``ray.remote(AgentLoopWorker)``: patches on
``AgentLoopWorker`` itself never run there. So the sample is found where verl's
methods call module functions and other classes, which are looked up when they run:
the root encloses ``rollout_trace_attr(...)`` (the ``with`` around a sample's whole
body in ``_run_agent_loop``; the sample's fields and output are read from that
method's locals); the driver's carrier is taken from the chunk's ``meta_info`` when
``generate_sequences`` awaits ``get_trajectory_info``, before it starts the samples'
tasks; and each sample's breakdown goes back with verl's own per-sample metrics
(``AgentLoopMetrics.model_dump()``).

``AgentLoopManager.generate_sequences`` (the driver) opens the batch and puts its
carrier (:func:`otel_rollout.integrations.ray.carrier`) in the prompts' ``meta_info``,
which ``prompts.chunk()`` copies to every worker's chunk; the driver takes the
breakdowns out in ``_performance_metrics`` (before verl reads its keys) and adds them
to the batch. A worker called directly (not through the manager) joins the batch the
caller has open, if any.

No method of ``AgentLoopWorker`` is wrapped, in the driver either: Ray pickles the
actor class by value with the methods it finds there, and a wrapped method would
neither pickle nor run in the actors.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import sys
from typing import Any

from opentelemetry import context as otel_context

from otel_rollout import BatchHandle as Batch
from otel_rollout import RolloutTracer, current_batch, summarize
from otel_rollout.instrumentation import attach_batch, batch_from_carrier, internal_error
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
#: How far up the stack verl's calling method is looked for.
_FRAME_DEPTH = 6


def _caller_locals(name: str) -> dict[str, Any] | None:
    """The local variables of the nearest calling frame of function ``name`` (verl's
    own method, whichever copy of it runs: Ray actors run copies of their class's
    methods, so reading them here works where patching the class cannot)."""
    frame = sys._getframe(2)
    for _ in range(_FRAME_DEPTH):
        if frame is None:
            return None
        if frame.f_code.co_name == name:
            return frame.f_locals
        frame = frame.f_back
    return None


class _Sample:
    """One sample: ``rollout_trace_attr(...)`` in ``_run_agent_loop``, inside our root."""

    __slots__ = ("_inner", "_scope", "_state", "_token")

    def __init__(self, tracer: RolloutTracer, inner: Any, kwargs: dict) -> None:
        self._inner = inner
        self._state: State | None = None
        self._token: Any = None
        try:
            frame = _caller_locals("_run_agent_loop") or {}
            sample = dict(frame.get("kwargs") or {})
            sample["agent_name"] = frame.get("agent_name")
            info = {k: kwargs.get(k) for k in ("step", "sample_index", "rollout_n", "validate")}
            tkw = trajectory_kwargs((None, info), sample)
            model = model_of(frame.get("self"))
        except Exception as exc:
            internal_error("verl sample", exc)
            tkw, model = {}, None
        self._scope = tracer.trajectory(model=model, **tkw)

    def __enter__(self) -> Any:
        traj = self._scope.__enter__()
        self._state = State(traj)
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
            frame = _caller_locals("_run_agent_loop")
            self._end(frame.get("output") if frame else None, exc_type, exc, tb)

    def _end(self, output: Any, exc_type: Any, exc: Any, tb: Any) -> None:
        state = self._state
        if state is None:
            return
        self._state = None
        STATE.reset(self._token)
        traj = state.traj
        if output is not None:
            record_sample(traj, output)
        self._scope.__exit__(exc_type, exc, tb)
        bd = traj.breakdown
        if bd is None or output is None:
            return
        if _HAND_BACK.get():  # the driver's batch: the breakdown goes back with verl's metrics
            with contextlib.suppress(Exception):
                object.__setattr__(output.metrics, _BREAKDOWN_ATTR, bd)


def trace_attr_wrapper(tracer: RolloutTracer) -> Any:
    """``rollout_trace_attr(...)`` as ``_run_agent_loop`` enters it: the sample's root."""

    def rollout_trace_attr(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        inner = wrapped(*args, **kwargs)
        if STATE.get() is not None or _caller_locals("_run_agent_loop") is None:
            return inner
        return _Sample(tracer, inner, kwargs)

    return rollout_trace_attr


async def trajectory_info_wrapper(wrapped: Any, instance: Any, args: tuple, kw: dict) -> Any:
    """``get_trajectory_info(...)``, awaited by ``AgentLoopWorker.generate_sequences`` before
    it starts the samples' tasks: the driver's carrier, in the chunk's ``meta_info``, is
    attached to the calling task here, so the samples' tasks start with it."""
    try:
        frame = _caller_locals("generate_sequences") or {}
        meta = getattr(frame.get("batch"), "meta_info", None)
        headers = meta.pop(CARRIER_META, None) if isinstance(meta, dict) else None
        remote = batch_from_carrier(headers) if headers else None
        if remote is not None:  # set in the caller's task: it lasts for its call
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


def _step_of(data: Any) -> int | None:
    meta = getattr(data, "meta_info", None)
    step = plain(meta.get("global_steps")) if isinstance(meta, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None


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
