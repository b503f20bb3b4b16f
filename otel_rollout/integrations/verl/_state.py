"""The trajectory of the ``_run_agent_loop`` call running in this context, its open
``generate`` phase, and the round of tool calls verl is timing.

Each sample runs in a task of its own (``AgentLoopWorker.generate_sequences`` creates
one per sample), so a context variable set in ``_run_agent_loop`` is that sample's
alone, and the tool calls ``asyncio.gather`` starts copy it.
"""

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

#: The state of the ``_run_agent_loop`` call this context runs in; None outside one.
STATE: contextvars.ContextVar[State | None] = contextvars.ContextVar(
    "otel_rollout_verl_state", default=None
)

#: The name of the span of one round of tool calls (verl's ``tool_calls`` timer).
TOOL_CALLS_SPAN = "tool_calls"
#: On an ``env_queue`` span: what was waited for (``gather``: the event loop starting the
#: round's tool calls; ``pool``: a thread of the default executor for a function tool).
WAIT_CAUSE = "verl.wait.cause"


class ToolRound:
    """One ``simple_timer("tool_calls")`` block: ``asyncio.gather`` of ``_call_tool``.

    Opened at the timer's start (``t0``). The first call to start running (``t1``) opens
    the round's ``env`` phase there, and ``[t0, t1]``, the gather's scheduling of the
    calls, becomes an ``env_queue`` phase before it: the wait is a sub-part of ``env``,
    as the executor wait is for SkyRL. :meth:`close` at the timer's end (``t2``) ends the
    phase, so ``env_queue`` plus the phase is ``[t0, t2]``, what verl's timer measured.
    Each call is an ``execute_tool`` span inside the phase (with its tool's name, call
    id and reward).
    """

    __slots__ = ("_lock", "calls", "phase", "t0", "t1", "traj")

    def __init__(self, traj: Trajectory, t0: int) -> None:
        self.traj = traj
        self.t0 = t0
        self.t1 = t0  # the phase's start, once a call began
        self.phase: Phase | None = None
        self.calls = 0
        self._lock = threading.Lock()

    def begin(self) -> Phase:
        """The round's phase, opened by the first call to start (at its start)."""
        with self._lock:
            self.calls += 1
            if self.phase is None:
                traj = self.traj
                t1 = traj._clock()
                if t1 > self.t0:
                    wait = traj.env_queue(**{WAIT_CAUSE: "gather"})
                    wait.start(start_time=self.t0).end(t1)
                else:
                    t1 = self.t0
                self.t1 = t1
                self.phase = _round_scope(traj).start(start_time=t1)
            return self.phase

    def close(self, t2: int, exc: BaseException | None = None) -> None:
        """At the timer's end: end the round's phase (one covering the whole round when
        no call ever started)."""
        with self._lock:
            phase = self.phase
            if phase is None:
                phase = self.phase = _round_scope(self.traj).start(start_time=self.t0)
        if exc is not None:
            phase.record_error(exc)
        phase.set_attribute("verl.tool_calls", self.calls)
        phase.end(t2)


def _round_scope(traj: Trajectory) -> Any:
    attrs = {
        A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL,
        A.GEN_AI_CONVERSATION_ID: traj.trajectory_id,
    }
    return phase_scope(traj, TOOL_CALLS_SPAN, A.PHASE_ENV, **attrs)


@dataclass
class State:
    """One sample's trajectory, its open ``generate`` phase (verl's
    ``generate_sequences`` timer), and its open round of tool calls."""

    traj: Trajectory
    gen: Generation | None = None
    round: ToolRound | None = None
