"""What the report shows, accumulated one trajectory at a time in bounded memory: per group,
a column of seconds per summary field (p90 stays exact), and the slowest trajectories."""

from __future__ import annotations

import heapq
import itertools
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from otel_rollout import attributes as A
from otel_rollout._accounting.breakdown import Breakdown, PhaseInterval
from otel_rollout._accounting.reward import RewardColumns, reward_keys
from otel_rollout._accounting.summary import (
    WAIT_FIELDS,
    bands_of,
    key_names,
    summarize_columns,
    summary_row,
)
from otel_rollout._bands import DEFAULT_BANDS, BandRegistry
from otel_rollout.report._batches import BatchGroups
from otel_rollout.report._model import TrajectoryTrace

#: Distinct run ids and failure reasons counted (beyond these, only totals grow).
MAX_KEYS = 1000
#: What the report can group trajectories by (``--by``).
GROUP_BY = ("env", "run")


def _tally(counter: Counter, key: Any) -> None:
    if key in counter or len(counter) < MAX_KEYS:
        counter[key] += 1


def failure_reason(b: Breakdown, error_type: str | None = None) -> str | None:
    """Why a trajectory did not end ``ok``: its status and, when recorded, error type."""
    if b.status == A.STATUS_OK:
        return None
    detail = error_type or b.attributes.get("error.type") or b.attributes.get(A.STATUS_DETAIL)
    return f"{b.status}: {detail}" if detail else str(b.status)


class ReportData:
    """Accumulates trajectories: ``add(trajectory)``, then read the groups (by env class,
    or by run id with ``by="run"``) and slowest; run ids, env classes and failure reasons
    are counted whatever the grouping."""

    def __init__(
        self, slowest: int = 5, by: str = "env", bands: BandRegistry = DEFAULT_BANDS
    ) -> None:
        if by not in GROUP_BY:
            raise ValueError(f"by must be one of {', '.join(GROUP_BY)}, got {by!r}")
        self.by = by
        self.bands = bands
        #: The columns of each group: ``e2e``, the bands, the sub-parts (:func:`key_names`).
        self.fields = tuple(name for _, name in key_names(bands))
        #: The tables' first column: what a group is.
        self.group_label = "env class" if by == "env" else "run"
        self.runs: Counter = Counter()
        self.env_classes: Counter = Counter()
        self.failures: Counter = Counter()
        self.count = 0
        self._k = slowest
        self._groups: dict[Any, dict[str, array]] = {}
        self._heap: list[tuple[float, int, TrajectoryTrace]] = []
        #: Per env class, a column per wait (NaN where a trajectory has none).
        self._waits: dict[Any, dict[str, array]] = {}
        #: The ``k`` trajectories with the most own time in loop stalls (the culprits).
        self._culprits: list[tuple[float, int, Breakdown]] = []
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
        run_id: str | None = None,
    ) -> ReportData:
        """From breakdowns in memory (the demo's online ones), phases by trace id."""
        breakdowns = list(breakdowns)
        data = cls(slowest, bands=bands_of(breakdowns))
        for b in breakdowns:
            phs = list((phases or {}).get(b.trace_id, ()))
            data.add(TrajectoryTrace(b, phs, run_id=run_id))
        return data

    def add(self, trajectory: TrajectoryTrace) -> None:
        b = trajectory.breakdown
        self.count += 1
        _tally(self.runs, trajectory.run_id)
        _tally(self.env_classes, b.env_class)
        reason = failure_reason(b, trajectory.error_type)
        if reason is not None:
            _tally(self.failures, reason)
        key = b.env_class if self.by == "env" else trajectory.run_id
        cols = self._groups.get(key)
        if cols is None:
            cols = self._groups[key] = {f: array("d") for f in self.fields}
        if b.bands is not self.bands and b.bands != self.bands:
            raise ValueError(
                f"a breakdown of bands {', '.join(b.bands.names)} added to a report of "
                f"{', '.join(self.bands.names)}"
            )
        for f, v in zip(self.fields, summary_row(b), strict=True):
            cols[f].append(v)
        self.batches.add(b)
        self.rewards.add_breakdown(b)
        self._add_waits(b, key)
        self._keep_top(self._heap, b.e2e, trajectory)

    def _add_waits(self, b: Breakdown, key: Any) -> None:
        known = {f: v for f in WAIT_FIELDS if (v := getattr(b, f, None)) is not None}
        cols = self._waits.get(key)
        if cols is None:
            if not known:
                return
            n_before = len(self._groups[key][self.fields[0]]) - 1
            cols = self._waits[key] = {
                f: array("d", [float("nan")] * n_before) for f in WAIT_FIELDS
            }
        for f in WAIT_FIELDS:
            cols[f].append(known.get(f, float("nan")))
        stall = known.get("loop_stall") or 0.0
        if stall > 0:
            self._keep_top(self._culprits, stall, b)

    def _keep_top(self, heap: list, key: float, item: Any) -> None:
        """Keep ``item`` in ``heap`` if its ``key`` is among the ``k`` largest."""
        if len(heap) < self._k:
            heapq.heappush(heap, (key, next(self._tie), item))
        elif self._k and key > heap[0][0]:
            heapq.heapreplace(heap, (key, next(self._tie), item))

    def groups(self) -> list[tuple[str, int, dict[str, np.ndarray]]]:
        """``(env class, n, columns)`` per env class, by name; the waits' columns too
        where any trajectory of the class has them."""
        out = []
        for key, cols in sorted(self._groups.items(), key=lambda kv: str(kv[0])):
            arrays = {f: np.frombuffer(c, dtype=np.float64) for f, c in cols.items()}
            for f, c in self._waits.get(key, {}).items():
                arrays[f] = np.frombuffer(c, dtype=np.float64)
            out.append((str(key), len(cols[self.fields[0]]), arrays))
        return out

    def culprits(self) -> list[Breakdown]:
        """The trajectories with the most own time in loop stalls, most first."""
        return [b for _, _, b in sorted(self._culprits, key=lambda i: (-i[0], i[1]))]

    def summary(self, prefix: str = "generate/") -> dict[str, float]:
        """SkyRL's keys over every trajectory added (empty when none)."""
        if not self.count:
            return {}
        groups = self.groups()
        columns = {f: np.concatenate([g[2][f] for g in groups]) for f in self.fields}
        if self._waits:
            nan = float("nan")
            for f in WAIT_FIELDS:
                columns[f] = np.concatenate([g[2].get(f, np.full(g[1], nan)) for g in groups])
        out = summarize_columns(columns, prefix=prefix, bands=self.bands)
        if len(self.rewards):
            out[f"{prefix}reward_mean"] = self.rewards.mean()
        out.update(reward_keys(self.rewards.analyses(), prefix))
        return out

    def slowest(self) -> list[TrajectoryTrace]:
        """The slowest trajectories, slowest first."""
        return [t for _, _, t in sorted(self._heap, key=lambda i: (-i[0], i[1]))]
