"""What the report's readers produce: spans read back, and trajectories rebuilt from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import StatusCode

from otel_rollout._accounting.breakdown import Breakdown, PhaseInterval
from otel_rollout.attributes import PHASE as PHASE_KEY
from otel_rollout.report._steps import StepSpans


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
    #: the writer's ``rollout.run.id`` resource attribute, where it has one
    run_id: str | None = None


#: A span as the assembler takes it: (trace id, span id, parent id, name, start ns, end ns
#: or None, phase or None, the whole :class:`RawSpan` where the assembler reads more of its
#: attributes than the phase: a root, a batch span, engine timings).
Row = tuple[str, int, int | None, str | None, int, int | None, str | None, RawSpan | None]


def row_of(span: RawSpan) -> Row:
    phase = (span.attributes or {}).get(PHASE_KEY)
    return (span.trace_id, span.span_id, span.parent_id, span.name, span.start_ns,
            span.end_ns, None if phase is None else str(phase), span)  # fmt: skip


@dataclass
class TrajectoryTrace:
    """One trajectory rebuilt from a trace: its breakdown and outermost phases."""

    breakdown: Breakdown
    phases: list[PhaseInterval]
    service: str | None = None
    run_id: str | None = None
    #: the root's ``error.type``, when it failed with one
    error_type: str | None = None


@dataclass
class BatchSpan:
    """A batch (training step) span read back: the start its analysis is measured from."""

    batch_id: str
    step: int | None
    start_ns: int
    end_ns: int | None
    #: The declared concurrency (``rollout.batch.concurrency``), else None.
    capacity: int | None = None


#: Why a span or a trajectory read back was not counted (keys of ``ReadResult.losses``).
LOSS_BAD_LINE = "bad lines skipped"
LOSS_DUPLICATE = "duplicate spans ignored"
LOSS_MISSING_START = "spans rejected: missing start time"
LOSS_MISSING_END = "spans rejected: missing end time"
LOSS_INVERTED = "spans rejected: end before start"
LOSS_TIME_RANGE = "spans rejected: time past the year 2262"
#: The latest time a span may have: OTLP allows up to 2**64 - 1, int64 arithmetic not.
MAX_TIME_NS = 2**63 - 1
LOSS_INVERTED_ROOT = "trajectories rejected: root ends before it starts (a clock step?)"
LOSS_LATE = "spans after their trajectory was reported"
LOSS_INCOMPLETE = "incomplete trajectories (no root span)"
LOSS_EVICTED = "traces cut short: read buffer full"
#: A value the readers compute with that they cannot take: counted per key (this + key).
LOSS_ODD_VALUE = "odd values skipped: "
#: Spans the writer counted lost before they reached the file, per reason (``queue_full``...).
LOSS_EXPORT_PREFIX = "spans lost before the file: "

#: Trace ids and warnings kept for the output; counts go on beyond these.
MAX_LISTED = 1000


@dataclass
class ReadResult:
    """What a read produced: trajectories (unless streamed) and every loss, per reason."""

    trajectories: list[TrajectoryTrace] = field(default_factory=list)
    #: trace ids with phase spans but no trajectory root (lost, still running, truncated);
    #: the first :data:`MAX_LISTED`, the total is ``losses[LOSS_INCOMPLETE]``
    incomplete: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    losses: dict[str, int] = field(default_factory=dict)
    #: trajectories found (also those streamed to a callback instead of kept)
    found: int = 0
    spans: int = 0
    #: batch spans read, by batch id
    batches: dict[str, BatchSpan] = field(default_factory=dict)
    #: step spans and their phase spans read
    steps: StepSpans = field(default_factory=StepSpans)
    #: the trace file's loss records: writer -> its latest cumulative losses per reason
    writer_losses: dict[str, dict[str, int]] = field(default_factory=dict)

    def note_export_losses(self, writer: str, counts: dict[str, int]) -> None:
        """A loss record of ``writer``: its counts only grow, so the largest is the latest
        (a record read twice, or out of order, counts once)."""
        latest = self.writer_losses.setdefault(writer, {})
        for why, n in counts.items():
            if n > latest.get(why, 0):
                latest[why] = n

    @property
    def export_losses(self) -> dict[str, int]:
        """Spans lost before the trace file, per reason, summed over the writers."""
        total: dict[str, int] = {}
        for counts in self.writer_losses.values():
            for why, n in counts.items():
                if n:
                    total[why] = total.get(why, 0) + n
        return dict(sorted(total.items()))

    def all_losses(self) -> dict[str, int]:
        """The reader's own losses and, prefixed, the writers'."""
        out = dict(self.losses)
        for why, n in self.export_losses.items():
            out[LOSS_EXPORT_PREFIX + why] = n
        return out

    @property
    def breakdowns(self) -> list[Breakdown]:
        return [t.breakdown for t in self.trajectories]

    def lose(self, reason: str, n: int = 1) -> None:
        self.losses[reason] = self.losses.get(reason, 0) + n

    def warn(self, message: str) -> bool:
        """Keep ``message``; False once :data:`MAX_LISTED` are kept."""
        if len(self.warnings) >= MAX_LISTED:
            return False
        self.warnings.append(message)
        return True
