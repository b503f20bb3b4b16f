"""Batch statistics with SkyRL's keys, always recomputed from per-trajectory values."""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from otel_rollout import attributes as A
from otel_rollout._accounting.breakdown import Breakdown, bands_of
from otel_rollout._accounting.reward import RewardColumns, reward_keys
from otel_rollout._bands import DEFAULT_BANDS, BandRegistry
from otel_rollout._base.fork import reset_in_child

_log = logging.getLogger("otel_rollout")

_PER_S = 1e9  # seconds as the breakdown gives them (``ns / 1e9``)


def key_names(bands: BandRegistry = DEFAULT_BANDS) -> tuple[tuple[str, str], ...]:
    """SkyRL's name for each figure in ``generate/trajectory_time_<name>_<stat>``, with the
    figure it is computed from (``e2e``, a band of ``bands``, a sub-part): the one place
    these keys are written."""
    return (
        ("completion", "e2e"),
        *((band.skyrl_key, band.name) for band in bands),
        # sub-parts and time outside completion (SkyRL's e2e_time leaves finish_session out)
        ("env_queue", A.PHASE_ENV_QUEUE),
        ("finish_session", A.PHASE_FINISH_SESSION),
    )


_KEY_NAMES = key_names()


def summary_row(b: Breakdown) -> tuple[float, ...]:
    """The seconds of each figure of :func:`key_names` of ``b``'s bands, in that order."""
    nanos = b.nanos
    return (b.e2e, *(nanos[name] / _PER_S for name in b.bands.names), b.env_queue,
            b.finish_session)  # fmt: skip


def summarize(
    breakdowns: Iterable[Breakdown], *, prefix: str = "generate/", per_class: bool = False
) -> dict[str, float]:
    """The per-batch dict trainers log (W&B), with SkyRL's key names: the keys are in
    docs/accounting.md ("The batch summary"); no breakdowns give them, each NaN."""
    items = breakdowns if isinstance(breakdowns, Sequence) else list(breakdowns)
    if not items:
        keys = summarize_columns({attr: [math.nan] for _, attr in _KEY_NAMES}, prefix=prefix)
        return dict.fromkeys(keys, math.nan)
    bands = bands_of(items)
    names = [name for _, name in key_names(bands)]
    rows = np.array([summary_row(b) for b in items], dtype=np.float64)
    table = np.ascontiguousarray(rows.reshape(len(items), len(names)).T)
    columns: dict[str, Any] = {name: table[i] for i, name in enumerate(names)}
    for name in WAIT_FIELDS:
        if any(getattr(b, name, None) is not None for b in items):
            columns[name] = np.fromiter(
                (np.nan if (v := getattr(b, name, None)) is None else v for b in items),
                dtype=np.float64,
                count=len(items),
            )
    out = summarize_columns(columns, prefix=prefix, bands=bands)
    rewards = RewardColumns()
    for b in items:
        rewards.add_breakdown(b)
    if len(rewards):
        out[f"{prefix}reward_mean"] = rewards.mean()
    if per_class:
        out.update(reward_keys(rewards.analyses(), prefix))
    return out


#: Optional columns of waits (sub-parts of llm, event-loop figures), NaN where unknown.
WAIT_FIELDS = (*A.LLM_SUBPARTS, *A.LOOP_PARTS)


#: The :class:`Breakdown` fields :func:`summarize_columns` reads, one column each.
SUMMARY_FIELDS = tuple(attr for _, attr in _KEY_NAMES)


def summarize_columns(
    columns: Mapping[str, Any], *, prefix: str = "generate/", bands: BandRegistry = DEFAULT_BANDS
) -> dict[str, float]:
    """:func:`summarize` from columns of seconds, one per figure of :func:`key_names`."""
    out: dict[str, float] = {}
    sums: dict[str, float] = {}

    def stats(key: str, values: np.ndarray) -> None:
        out[f"{prefix}trajectory_time_{key}_mean"] = float(np.mean(values))
        out[f"{prefix}trajectory_time_{key}_p90"] = float(np.percentile(values, 90))
        out[f"{prefix}trajectory_time_{key}_max"] = float(np.max(values))

    for key, attr in key_names(bands):
        values = np.asarray(columns[attr], dtype=np.float64)
        if values.size == 0:
            return {}
        stats(key, values)
        sums[attr] = float(np.sum(values))
    denom = sums[A.PHASE_LLM] + sums[A.PHASE_ENV]
    out[f"{prefix}frac_time_in_env"] = sums[A.PHASE_ENV] / denom if denom > 0 else 0.0
    # waits: over the trajectories that have them (NaN where a trajectory has none)
    for name in WAIT_FIELDS:
        column = columns.get(name)
        if column is None:
            continue
        values = np.asarray(column, dtype=np.float64)
        values = values[~np.isnan(values)]
        if values.size:
            stats(name, values)
    return out


def group_by(
    breakdowns: Iterable[Breakdown], key: str | Callable[[Breakdown], Any] = "env_class"
) -> dict[Any, list[Breakdown]]:
    """Breakdowns grouped by an attribute name of :class:`Breakdown` or a function."""
    fn = key if callable(key) else (lambda b: getattr(b, key))
    groups: dict[Any, list[Breakdown]] = {}
    for b in breakdowns:
        groups.setdefault(fn(b), []).append(b)
    return groups


#: Breakdowns a collector keeps by default: several steps of a large run (a breakdown is
#: about 1.6 KB with 20 phases, so about 80 MB if nothing ever drains it).
DEFAULT_MAXLEN = 50_000


class BreakdownCollector:
    """A thread-safe sink for :class:`BreakdownProcessor`: keeps breakdowns until drained.

    Pass it as ``on_breakdown``; each training step, ``summarize(collector.drain())``. At
    most ``maxlen`` breakdowns are kept (default :data:`DEFAULT_MAXLEN`); beyond that the
    oldest are dropped, counted in ``dropped``, and a warning is logged the first time.
    """

    def __init__(self, maxlen: int | None = DEFAULT_MAXLEN) -> None:
        if maxlen is not None and maxlen < 1:
            raise ValueError(f"maxlen must be at least 1 or None, got {maxlen!r}")
        self._items: deque[Breakdown] = deque()
        self._maxlen = maxlen
        self._lock = threading.Lock()
        self.dropped = 0
        reset_in_child(self, BreakdownCollector._reset)

    def _reset(self) -> None:
        """In a forked child: the parent's breakdowns are the parent's to report."""
        self._lock = threading.Lock()
        self._items = deque()
        self.dropped = 0

    def __call__(self, breakdown: Breakdown) -> None:
        with self._lock:
            if self._maxlen is not None and len(self._items) >= self._maxlen:
                self._items.popleft()
                self.dropped += 1
                first = self.dropped == 1
            else:
                first = False
            self._items.append(breakdown)
        if first:
            _log.warning(
                "otel-rollout: a BreakdownCollector holds its maximum of %d breakdowns; the "
                "oldest are dropped from now on (counted in its .dropped). Drain it each step "
                "(summarize(collector.drain())) or give it a larger maxlen.",
                self._maxlen,
            )

    def __len__(self) -> int:
        return len(self._items)

    def extend(self, breakdowns: Iterable[Breakdown]) -> None:
        """Add breakdowns gathered elsewhere (other workers) to this collector."""
        for b in breakdowns:
            self(b)

    def drain(self) -> list[Breakdown]:
        """Every breakdown collected since the last drain, oldest first; empties the sink."""
        with self._lock:
            items = list(self._items)
            self._items.clear()
        return items

    def peek(self) -> list[Breakdown]:
        """The breakdowns collected so far, without removing them."""
        with self._lock:
            return list(self._items)
