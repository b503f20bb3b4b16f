"""Reward against latency: do slow trajectories succeed less?

Per env class, the mean reward of the trajectories in each e2e decile (ranked by e2e,
split into ten groups as even as can be) and at each turn count, over the trajectories
whose reward is known. Recomputed from per-trajectory values, like every statistic here.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from otel_rollout._accounting.breakdown import Breakdown

DECILES = 10


@dataclass(frozen=True)
class RewardBin:
    """One group of trajectories: its label, size, mean reward and e2e range (seconds)."""

    label: int  # the decile (1 = fastest) or the turn count
    n: int
    mean_reward: float
    e2e_min: float
    e2e_max: float


@dataclass(frozen=True)
class RewardVsLatency:
    """The mean reward of one env class by e2e decile and by turn count."""

    env_class: str
    n: int
    by_e2e_decile: tuple[RewardBin, ...]
    by_turns: tuple[RewardBin, ...]


class RewardColumns:
    """Per env class, the (e2e, turns, reward) of the trajectories with a known reward:
    24 bytes a trajectory, so a report over a large file stays small."""

    def __init__(self) -> None:
        self._cols: dict[str, tuple[array, array, array]] = {}

    def add(self, env_class: Any, e2e: float, turns: int, reward: float | None) -> None:
        if reward is None or not math.isfinite(reward):
            return
        cols = self._cols.get(str(env_class))
        if cols is None:
            cols = self._cols[str(env_class)] = (array("d"), array("q"), array("d"))
        cols[0].append(e2e)
        cols[1].append(turns)
        cols[2].append(reward)

    def add_breakdown(self, b: Breakdown) -> None:
        self.add(b.env_class, b.e2e, b.turns, b.score)

    def __len__(self) -> int:
        return sum(len(c[2]) for c in self._cols.values())

    def mean(self) -> float:
        """The mean reward over every env class (NaN when there is none)."""
        n = len(self)
        return math.fsum(r for c in self._cols.values() for r in c[2]) / n if n else math.nan

    def analyses(self) -> list[RewardVsLatency]:
        """One :class:`RewardVsLatency` per env class, by name."""
        return [_analyse(env, *cols) for env, cols in sorted(self._cols.items())]


def reward_vs_latency(breakdowns: Iterable[Breakdown]) -> list[RewardVsLatency]:
    """Mean reward by e2e decile and by turn count, per env class (those with rewards)."""
    cols = RewardColumns()
    for b in breakdowns:
        cols.add_breakdown(b)
    return cols.analyses()


def _analyse(env: str, e2e: array, turns: array, reward: array) -> RewardVsLatency:
    e = np.frombuffer(e2e, dtype=np.float64)
    t = np.frombuffer(turns, dtype=np.int64)
    r = np.frombuffer(reward, dtype=np.float64)

    def group(label: int, idx: np.ndarray) -> RewardBin:
        re, ee = r[idx], e[idx]
        return RewardBin(label, int(re.size), float(re.mean()), float(ee.min()), float(ee.max()))

    splits = np.array_split(np.argsort(e, kind="stable"), DECILES)
    deciles = tuple(group(k, idx) for k, idx in enumerate(splits, start=1) if idx.size)
    by_turns = tuple(group(int(turn), np.flatnonzero(t == turn)) for turn in np.unique(t))
    return RewardVsLatency(env, int(r.size), deciles, by_turns)


def reward_keys(analyses: Iterable[RewardVsLatency], prefix: str = "generate/") -> dict[str, float]:
    """Flat keys for a trainer's log: ``{prefix}reward_by_e2e_decile/<env>/<k>`` and
    ``{prefix}reward_by_turns/<env>/<turns>`` (mean reward), ``{prefix}reward_mean/<env>``."""
    out: dict[str, float] = {}
    for a in analyses:
        total = sum(b.mean_reward * b.n for b in a.by_turns)
        out[f"{prefix}reward_mean/{a.env_class}"] = total / a.n
        for b in a.by_e2e_decile:
            out[f"{prefix}reward_by_e2e_decile/{a.env_class}/{b.label}"] = b.mean_reward
        for b in a.by_turns:
            out[f"{prefix}reward_by_turns/{a.env_class}/{b.label}"] = b.mean_reward
    return out


def analyses_dict(analyses: Iterable[RewardVsLatency]) -> list[Mapping[str, Any]]:
    """The analyses as plain data (the report's JSON)."""
    return [
        {
            "env_class": a.env_class,
            "n": a.n,
            "by_e2e_decile": [vars(b) for b in a.by_e2e_decile],
            "by_turns": [vars(b) for b in a.by_turns],
        }
        for a in analyses
    ]
