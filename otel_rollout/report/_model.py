"""What the report's readers produce: spans read back, and trajectories rebuilt from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import StatusCode

from otel_rollout._breakdown import Breakdown, PhaseInterval


class TraceReadError(ValueError):
    """Input that is not OTLP/Jaeger/Tempo trace JSON; the message names where."""


@dataclass
class RawSpan:
    """One span as read back from a trace file or a backend (ids as ints, times in ns)."""

    trace_id: str
    span_id: int
    parent_id: int | None
    name: str
    start_ns: int
    end_ns: int | None
    attributes: dict[str, Any]
    status_code: StatusCode | None = None
    service: str | None = None


@dataclass
class TrajectoryTrace:
    """One trajectory rebuilt from a trace: its breakdown and outermost phases."""

    breakdown: Breakdown
    phases: list[PhaseInterval]
    service: str | None = None


@dataclass
class ReadResult:
    trajectories: list[TrajectoryTrace] = field(default_factory=list)
    #: trace ids with phase spans but no trajectory root (lost, still running, truncated)
    incomplete: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def breakdowns(self) -> list[Breakdown]:
        return [t.breakdown for t in self.trajectories]
