"""What is running now: the trajectories whose root has started and not ended, as values.

A running trajectory is invisible in a trace file or an OTLP stream until it ends (spans
are exported when they end). :class:`InFlight` is a snapshot of them taken inside the
process (by :mod:`otel_rollout._processing.in_flight`), written periodically as a small
record (:mod:`otel_rollout._export.in_flight`) and read back by ``otel-rollout top``.
It is bounded: every trajectory is counted per env class, the oldest few are listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

#: The span name of the record (readers of a trace file skip it; no SDK import needed).
SPAN_NAME = "rollout.in_flight"


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

    @property
    def in_llm(self) -> int:
        """Trajectories inside a generate call: the engine's demand."""
        return sum(self.in_llm_by_env.values())
