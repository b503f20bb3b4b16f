"""The sample (``_run_agent_loop`` call) running in this context: its trajectory, its
open ``generate`` phase and the round of tool calls verl is timing. Each sample runs in
a task of its own, and the tool calls ``asyncio.gather`` starts copy its context."""

from __future__ import annotations

import contextvars
import threading
from dataclasses import dataclass
from typing import Any

from otel_rollout import Generation
from otel_rollout import PhaseHandle as Phase
from otel_rollout import TrajectoryHandle as Trajectory
from otel_rollout import attributes as A
from otel_rollout.instrumentation import phase_scope

STATE: contextvars.ContextVar[State | None] = contextvars.ContextVar(
    "otel_rollout_verl_state", default=None
)

#: The name of the span of one round of tool calls (verl's ``tool_calls`` timer).
TOOL_CALLS_SPAN = "tool_calls"
#: On an ``env_queue`` span: what was waited for (``gather``: the event loop starting the
#: round's tool calls; ``pool``: a thread of the default executor for a function tool).
WAIT_CAUSE = "verl.wait.cause"


class ToolRound:
    """One ``simple_timer("tool_calls")`` block (``asyncio.gather`` of ``_call_tool``),
    from the timer's start ``t0``: the first call to start (``t1``) opens the round's
    ``env`` phase, ``[t0, t1]`` is an ``env_queue`` wait before it, and :meth:`close` at
    the timer's end ends the phase, so the two are what verl's timer measured."""

    __slots__ = ("_lock", "calls", "phase", "t0", "t1", "traj")

    def __init__(self, traj: Trajectory, t0: int) -> None:
        self.traj, self.t0, self.t1 = traj, t0, t0
        self.phase: Phase | None = None
        self.calls = 0
        self._lock = threading.Lock()

    def begin(self) -> Phase:
        """The round's phase, opened by the first call to start (at its start)."""
        with self._lock:
            self.calls += 1
            if self.phase is None:
                traj = self.traj
                self.t1 = max(traj._clock(), self.t0)
                if self.t1 > self.t0:
                    wait = traj.env_queue(**{WAIT_CAUSE: "gather"})
                    wait.start(start_time=self.t0).end(self.t1)
                self.phase = self._scope().start(start_time=self.t1)
            return self.phase

    def close(self, t2: int, exc: BaseException | None = None) -> None:
        """At the timer's end (a phase over the whole round when no call started)."""
        with self._lock:
            if self.phase is None:
                self.phase = self._scope().start(start_time=self.t0)
            phase = self.phase
        if exc is not None:
            phase.record_error(exc)
        phase.set_attribute("verl.tool_calls", self.calls)
        phase.end(t2)

    def _scope(self) -> Any:
        attrs = {
            A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL,
            A.GEN_AI_CONVERSATION_ID: self.traj.trajectory_id,
        }
        return phase_scope(self.traj, TOOL_CALLS_SPAN, A.PHASE_ENV, **attrs)


@dataclass
class State:
    traj: Trajectory
    gen: Generation | None = None
    round: ToolRound | None = None
