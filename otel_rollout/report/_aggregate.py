"""What the report shows, accumulated one trajectory at a time in bounded memory.

Per env class, one column of seconds per summary field (``e2e`` and the bands: 48 bytes a
trajectory, so p90 stays exact), and the ``k`` slowest trajectories with their phases for
the timeline. Trajectories themselves are not kept.
"""

from __future__ import annotations

import heapq
import itertools
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from otel_rollout._breakdown import Breakdown, PhaseInterval
from otel_rollout._reward import RewardColumns, reward_keys
from otel_rollout._summary import SUMMARY_FIELDS, summarize_columns
from otel_rollout.report._batches import BatchGroups
from otel_rollout.report._model import TrajectoryTrace


class ReportData:
    """Accumulates trajectories: ``add(trajectory)``, then read the groups and slowest."""

    def __init__(self, slowest: int = 5) -> None:
        self.count = 0
        self._k = slowest
        self._groups: dict[Any, dict[str, array]] = {}
        self._heap: list[tuple[float, int, TrajectoryTrace]] = []
        self._tie = itertools.count()
        #: Trajectories with a batch id, by batch (the batch view).
        self.batches = BatchGroups()
        #: (e2e, turns, reward) of the trajectories with a reward, per env class.
        self.rewards = RewardColumns()

    @classmethod
    def of(
        cls,
        breakdowns: Iterable[Breakdown],
        phases: Mapping[str, Sequence[PhaseInterval]] | None = None,
        slowest: int = 5,
    ) -> ReportData:
        """From breakdowns in memory (the demo's online ones), phases by trace id."""
        data = cls(slowest)
        for b in breakdowns:
            data.add(TrajectoryTrace(b, list((phases or {}).get(b.trace_id, ()))))
        return data

    def add(self, trajectory: TrajectoryTrace) -> None:
        b = trajectory.breakdown
        self.count += 1
        cols = self._groups.get(b.env_class)
        if cols is None:
            cols = self._groups[b.env_class] = {f: array("d") for f in SUMMARY_FIELDS}
        for f in SUMMARY_FIELDS:
            cols[f].append(getattr(b, f))
        self.batches.add(b)
        self.rewards.add_breakdown(b)
        item = (b.e2e, next(self._tie), trajectory)
        if len(self._heap) < self._k:
            heapq.heappush(self._heap, item)
        elif self._k and item[0] > self._heap[0][0]:
            heapq.heapreplace(self._heap, item)

    def groups(self) -> list[tuple[str, int, dict[str, np.ndarray]]]:
        """``(env class, n, columns)`` per env class, by name."""
        out = []
        for key, cols in sorted(self._groups.items(), key=lambda kv: str(kv[0])):
            arrays = {f: np.frombuffer(c, dtype=np.float64) for f, c in cols.items()}
            out.append((str(key), len(cols[SUMMARY_FIELDS[0]]), arrays))
        return out

    def summary(self, prefix: str = "generate/") -> dict[str, float]:
        """SkyRL's keys over every trajectory added (empty when none)."""
        if not self.count:
            return {}
        groups = self.groups()
        columns = {f: np.concatenate([g[2][f] for g in groups]) for f in SUMMARY_FIELDS}
        out = summarize_columns(columns, prefix=prefix)
        out.update(reward_keys(self.rewards.analyses(), prefix))
        return out

    def slowest(self) -> list[TrajectoryTrace]:
        """The slowest trajectories, slowest first."""
        return [t for _, _, t in sorted(self._heap, key=lambda i: (-i[0], i[1]))]
