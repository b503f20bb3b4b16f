"""One trajectory per verifiers ``Rollout``: the root starts at verifiers' boot start, is
current while ``open``/``step``/``close`` run, and ends when ``close()`` (or ``abort()``)
returns, with its phase spans (:mod:`._phases`), rewards and status. It is entered and
exited in a copy of the caller's context (peer rollouts interleave in one task)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

from otel_rollout import RolloutTracer
from otel_rollout import attributes as A
from otel_rollout.instrumentation import (
    attach_batch,
    attach_trajectory,
    detach_trajectory,
    internal_error,
    step_span_batch,
)
from otel_rollout.integrations.verifiers._phases import (
    HARNESS,
    STOP_CONDITION,
    record_phases,
)
from otel_rollout.integrations.verifiers._state import Rollouts, RolloutState, pin

_TRUNCATED = frozenset(("max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens"))


def _attributes(rollout: Any) -> dict[str, Any]:
    """The trajectory's attributes from a ``Rollout`` (its trace, task, harness, model)."""
    trace = rollout.trace
    out: dict[str, Any] = {"trajectory_id": str(trace.id)}
    task = getattr(trace, "task", None)
    task_type = getattr(task, "type", None)
    if task_type:
        out["env"] = str(task_type)
    data = getattr(task, "data", None)
    instance = getattr(data, "id", None)
    instance = getattr(data, "idx", None) if instance is None else instance
    if instance is not None:
        out["instance_id"] = instance
    model = getattr(getattr(rollout, "ctx", None), "model", None)
    if isinstance(model, str):
        out["model"] = model
    name = getattr(getattr(trace, "agent", None), "name", None)
    if isinstance(name, str):
        out["agent"] = name
    return out


def harness_id(rollout: Any) -> str | None:
    value = getattr(getattr(getattr(rollout, "harness", None), "config", None), "id", None)
    return str(value) if value is not None else None


def begin(
    tracer: RolloutTracer, rollouts: Rollouts, rollout: Any, start_ns: int | None = None
) -> RolloutState:
    """Start the rollout's trajectory, at ``start_ns`` when given (verifiers' boot start,
    with the instrumentor's clock): in a batch, linked to it; under a user's step span, a
    root linked to that span."""
    kw = _attributes(rollout)
    harness = harness_id(rollout)
    ctx = contextvars.copy_context()

    def enter() -> tuple[Any, Any]:
        if start_ns is not None:
            pin(start_ns)
        step = step_span_batch()
        if step is not None:
            attach_batch(step)  # in the copy: never seen by the caller
        attrs = {HARNESS: harness} if harness else None
        scope = tracer.trajectory(kw.pop("trajectory_id"), attributes=attrs, **kw)
        try:
            return scope, scope.__enter__()
        finally:
            pin(None)

    scope, traj = ctx.run(enter)
    state = RolloutState(traj=traj, scope=scope, context=ctx, rollout=rollout, harness=harness)
    rollouts.register(str(rollout.trace.id), state)
    return state


@contextlib.contextmanager
def current(state: RolloutState) -> Iterator[None]:
    """The trajectory current while a lifecycle call runs."""
    tokens = attach_trajectory(state.traj)
    try:
        yield
    finally:
        detach_trajectory(tokens)


class Starting:
    """A rollout whose ``open()`` runs and whose root starts at verifiers' boot start
    (the first ``Trace.notify`` with it set), current until ``open()`` returns."""

    __slots__ = ("rollout", "rollouts", "state", "tokens", "tracer")

    def __init__(self, tracer: RolloutTracer, rollouts: Rollouts, rollout: Any) -> None:
        self.tracer, self.rollouts, self.rollout = tracer, rollouts, rollout
        self.state: RolloutState | None = None
        self.tokens: tuple[Any, Any] | None = None

    def start(self, start_ns: int | None) -> None:
        if self.state is None:
            self.state = begin(self.tracer, self.rollouts, self.rollout, start_ns)
            self.tokens = attach_trajectory(self.state.traj)

    def release(self) -> None:
        if self.tokens is not None:
            tokens, self.tokens = self.tokens, None
            detach_trajectory(tokens)


def _status(traj: Any, trace: Any) -> None:
    stop = getattr(trace, "stop_condition", None)
    if stop:
        traj.set_attribute(STOP_CONDITION, str(stop))
    if not getattr(trace, "ok", True):
        error = trace.errors[-1].type if getattr(trace, "errors", None) else None
        traj.set_status(f"{A.STATUS_ERROR}: {error}" if error else A.STATUS_ERROR)
    elif getattr(trace, "is_timeout", False):
        traj.set_status(f"{A.STATUS_TIMEOUT}: {stop}")
    elif stop in _TRUNCATED:
        traj.set_status(f"{A.STATUS_TRUNCATED}: {stop}")


def _rewards(traj: Any, trace: Any) -> None:
    rewards = getattr(trace, "rewards", None) or {}
    if not rewards:
        return
    traj.set_reward(trace.reward)
    for name, reward in rewards.items():
        if reward is not None and name != A.REWARD_NAME:
            traj.set_reward(reward.score, name=str(name))


def finish(
    rollouts: Rollouts,
    state: RolloutState,
    rollout: Any,
    exc: BaseException | None,
    status: str | None,
) -> None:
    """End the trajectory: phases from verifiers' timestamps, rewards, status, root."""
    if state.done:
        return
    state.done = True
    traj = state.traj
    trace = rollout.trace
    end_ns = traj._clock()
    try:
        for gen in state.inflight:  # calls still in flight when the rollout ended
            gen.end(end_ns)
        state.inflight.clear()
        record_phases(state, trace, end_ns)
        _rewards(traj, trace)
        _status(traj, trace)
        if status is not None and exc is None:
            traj.set_status(status)
    except Exception as err:
        internal_error("verifiers rollout end", err)
    finally:
        rollouts.unregister(str(trace.id), state)
        state.context.run(_exit, state.scope, exc, end_ns)


def _exit(scope: Any, exc: BaseException | None, end_ns: int) -> None:
    pin(end_ns)  # in the rollout's context: the root ends when close() returned
    try:
        tb = exc.__traceback__ if exc is not None else None
        scope.__exit__(type(exc) if exc is not None else None, exc, tb)
    finally:
        pin(None)
