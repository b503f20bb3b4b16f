"""A batch's breakdowns gathered online (:class:`BatchAccumulator`, bounded, merging, each
trajectory once), grouped by batch id, and marked as consumed by a training step."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from otel_rollout._accounting.batch_analysis import analyze_batch
from otel_rollout._accounting.batch_figures import BatchAnalysis
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._base.errors import warn_once


class BatchAccumulator:
    """The online state of one batch in flight: its trajectories' breakdowns, bounded.

    At most ``max_trajectories`` are kept (those beyond are counted in ``dropped``); each
    breakdown keeps at most :data:`~otel_rollout._accounting.breakdown.MAX_INTERVALS` intervals.
    Accumulators merge (Ray workers' gathered breakdowns), and
    ``a.merge(b).analysis()`` equals ``analyze_batch(a's + b's breakdowns)``.
    """

    def __init__(
        self,
        batch_id: str | None = None,
        *,
        start_ns: int | None = None,
        max_trajectories: int = 100_000,
    ) -> None:
        if max_trajectories < 1:
            raise ValueError(f"max_trajectories must be at least 1, got {max_trajectories!r}")
        self.batch_id = batch_id
        self.start_ns = start_ns
        self.max_trajectories = max_trajectories
        self.dropped = 0
        self._items: list[Breakdown] = []
        #: (trace id, trajectory id, start) of each kept trajectory: a breakdown that
        #: arrives twice (delivered in-process and added again from a gather) counts once
        self._seen: set[tuple[str, str, int]] = set()
        #: Breakdowns ignored because the batch already held them.
        self.duplicates = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def add(self, breakdown: Breakdown) -> None:
        key = (breakdown.trace_id, breakdown.trajectory_id, breakdown.start_time_ns)
        with self._lock:
            if key in self._seen:
                self.duplicates += 1
                return
            if len(self._items) >= self.max_trajectories:
                self.dropped += 1
                warn_once(
                    "batch:max_trajectories",
                    "otel-rollout: a batch holds more than %d trajectories; the rest are left "
                    "out of its analysis (raise max_trajectories)",
                    self.max_trajectories,
                )
                return
            self._items.append(breakdown)
            self._seen.add(key)

    def extend(self, breakdowns: Iterable[Breakdown]) -> None:
        for b in breakdowns:
            self.add(b)

    def merge(self, other: BatchAccumulator) -> BatchAccumulator:
        """A new accumulator holding both batches' trajectories (the earlier start)."""
        starts = [s for s in (self.start_ns, other.start_ns) if s is not None]
        out = BatchAccumulator(
            self.batch_id if self.batch_id == other.batch_id else None,
            start_ns=min(starts) if starts else None,
            max_trajectories=self.max_trajectories + other.max_trajectories,
        )
        out.extend(self.breakdowns)
        out.extend(other.breakdowns)
        out.dropped += self.dropped + other.dropped
        return out

    @property
    def breakdowns(self) -> list[Breakdown]:
        with self._lock:
            return list(self._items)

    def analysis(self) -> BatchAnalysis:
        return analyze_batch(self.breakdowns, start_ns=self.start_ns, batch_id=self.batch_id)


def group_by_batch(breakdowns: Iterable[Breakdown]) -> dict[str, list[Breakdown]]:
    """Breakdowns that carry a batch id, grouped by it (in order of first appearance)."""
    out: dict[str, list[Breakdown]] = {}
    for b in breakdowns:
        if b.batch_id is not None:
            out.setdefault(b.batch_id, []).append(b)
    return out


def mark_consumed(
    breakdowns: Sequence[Breakdown], version: int | None, time_ns: int
) -> list[Breakdown]:
    """The breakdowns a training step on policy ``version`` consumed at ``time_ns``, marked
    so the analysis reports their staleness and buffer wait (async trainers)."""
    return [b.consumed(version, time_ns) for b in breakdowns]
