"""The trajectory of the ``agent_loop`` call running in this context, and the phases it
has timed whose ``end()`` waits for the event loop's next turn."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from dataclasses import dataclass, field

from otel_rollout import PhaseHandle as Phase
from otel_rollout import TrajectoryHandle as Trajectory

#: The state of the ``agent_loop`` call this context runs in; None outside one.
STATE: contextvars.ContextVar[State | None] = contextvars.ContextVar(
    "otel_rollout_skyrl_state", default=None
)


@dataclass
class State:
    """The trajectory of one ``agent_loop`` call, its env_setup spans not yet ended, and
    the phases timed but whose ``end()`` waits for the loop's next turn."""

    traj: Trajectory
    pending_setup: list[Phase] = field(default_factory=list)
    deferred: list[tuple[Phase, int]] = field(default_factory=list)

    def end_later(self, phase: Phase, end_ns: int) -> None:
        """End ``phase`` at ``end_ns``, on the loop's next turn: the span processors' work
        then falls outside SkyRL's timer around the call, as it falls outside the span."""
        self.deferred.append((phase, end_ns))
        if len(self.deferred) == 1:
            try:
                asyncio.get_running_loop().call_soon(self.end_deferred)
            except RuntimeError:  # no running loop: now
                self.end_deferred()

    def end_deferred(self) -> None:
        items, self.deferred = self.deferred, []
        for phase, end_ns in items:
            with contextlib.suppress(Exception):
                phase.end(end_ns)

    def end_pending(self) -> None:
        self.end_deferred()
        for setup in self.pending_setup:  # make() returned but init() never ran
            with contextlib.suppress(Exception):
                setup.end()
        self.pending_setup.clear()
