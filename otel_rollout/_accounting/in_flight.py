"""What is running now (spans are exported only when they end): :class:`InFlight`, a
bounded snapshot the processor takes, written as a record (:mod:`otel_rollout._export.
in_flight`) that ``otel-rollout top`` reads back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

#: The event name of the record, an OTel log record (no SDK import needed to read it).
EVENT_NAME = "rollout.in_flight"


class OpenTrajectory(NamedTuple):
    """One running trajectory: ids, labels, start, and the phase it is in now."""

    trace_id: str  # 32 hex digits
    trajectory_id: str
    env_class: str  # "" when none
    batch_id: str  # "" when none
    start_ns: int
    #: the outermost phase open now ("" between phases), and when it began (0: none)
    phase: str
    phase_start_ns: int


class OpenStep(NamedTuple):
    """The training step open now (the latest opened) and the phase it is in."""

    number: int  # -1 when the step has none
    trainer: str  # "" when none
    start_ns: int
    #: the phase in progress that started last ("" between phases), and when it began
    phase: str
    phase_start_ns: int


@dataclass(frozen=True)
class InFlight:
    """Trajectories running at ``time_ns``: counts per env class, and the oldest listed."""

    time_ns: int
    count: int
    #: env class ("" when none) -> trajectories running / of them inside a generate call
    by_env: dict[str, int] = field(default_factory=dict)
    in_llm_by_env: dict[str, int] = field(default_factory=dict)
    #: the oldest running trajectories, oldest first (at most the snapshot's limit)
    listed: tuple[OpenTrajectory, ...] = ()
    #: the training step open in the process, if any
    step: OpenStep | None = None

    @property
    def in_llm(self) -> int:
        """Trajectories inside a generate call: the engine's demand."""
        return sum(self.in_llm_by_env.values())
