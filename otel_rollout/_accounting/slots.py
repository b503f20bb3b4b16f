"""The slot account of one batch (docs/batch.md, "The slot account"): where the engine's
``capacity x wall`` slot-nanoseconds went, exact in integer nanoseconds, with the drain."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from otel_rollout._accounting.breakdown import Breakdown, bands_of
from otel_rollout._accounting.slot_arrays import (
    EMPTY,
    OVERFLOW,
    PARTS,
    SlotTimeline,
    band_segments,
    peak_in_flight,
    slot_entries,
    timeline_of,
)
from otel_rollout._bands import DEFAULT_BANDS, BandRegistry

__all__ = [
    "EMPTY", "OVERFLOW", "PARTS", "SLOW_FACTOR", "SlotAccount", "SlotTimeline", "Straggler",
    "check_capacity", "slot_account",
]  # fmt: skip

#: A trajectory is slow when it runs longer than this many times the median duration.
SLOW_FACTOR = 2


class Straggler(NamedTuple):
    """A slow trajectory that kept the batch running in its drain."""

    breakdown: Breakdown
    duration_ns: int
    #: How much earlier the batch would have ended had it taken the median duration.
    cost_ns: int

    @property
    def trajectory_id(self) -> str:
        return self.breakdown.trajectory_id

    @property
    def trace_id(self) -> str:
        return self.breakdown.trace_id


@dataclass(frozen=True)
class SlotAccount:
    """Where one batch's ``capacity x wall`` slot-nanoseconds went; see the module."""

    capacity: int
    #: Whether the capacity was declared (else it is the peak in flight).
    declared: bool
    start_ns: int
    end_ns: int
    #: Slot-nanoseconds per part (keys :data:`PARTS`), summing to ``capacity_ns``.
    slot_ns: Mapping[str, int]
    #: Trajectory-nanoseconds beyond the capacity per band (keys ``ALL_BANDS``).
    overflow_ns: Mapping[str, int]
    peak_in_flight: int
    drain_start_ns: int
    #: Slot-nanoseconds of the drain per part, summing to ``capacity x drain``.
    drain_slot_ns: Mapping[str, int]
    median_duration_ns: int
    #: Slow trajectories still running in the drain, by end (then ids).
    stragglers: tuple[Straggler, ...]
    #: How much earlier the batch would have ended with every straggler at the median.
    straggler_cost_ns: int
    timeline: SlotTimeline = field(repr=False)
    #: The bands the account is in (the breakdowns' registry).
    bands: BandRegistry = DEFAULT_BANDS

    @property
    def parts(self) -> tuple[str, ...]:
        """The keys of :attr:`slot_ns`: the bands, then empty."""
        return (*self.bands.names, EMPTY)

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def capacity_ns(self) -> int:
        """``capacity x wall``: what the parts sum to."""
        return self.capacity * self.wall_ns

    @property
    def drain_ns(self) -> int:
        return self.end_ns - self.drain_start_ns

    @property
    def drain_frac(self) -> float:
        return self.drain_ns / self.wall_ns if self.wall_ns > 0 else 0.0

    @property
    def overflow_total_ns(self) -> int:
        return sum(self.overflow_ns.values())

    def frac(self, part: str) -> float:
        """A part's share of ``capacity x wall`` (0.0 for an empty account)."""
        if part not in self.slot_ns:
            raise ValueError(
                f"unknown slot part {part!r}; expected one of {', '.join(self.slot_ns)}"
            )
        total = self.capacity_ns
        return self.slot_ns[part] / total if total > 0 else 0.0

    @property
    def drain_empty_mean(self) -> float:
        """Slots empty on average during the drain."""
        return self.drain_slot_ns[EMPTY] / self.drain_ns if self.drain_ns > 0 else 0.0


def check_capacity(capacity: object) -> int | None:
    """``capacity`` as an int of at least 1, or None; else a ValueError naming it."""
    if capacity is None:
        return None
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ValueError(
            f"concurrency must be a whole number of at least 1 (trajectories run at once) "
            f"or None, got {capacity!r}"
        )
    return int(capacity)


def slot_account(
    breakdowns: Iterable[Breakdown],
    *,
    capacity: int | None = None,
    start_ns: int | None = None,
) -> SlotAccount:
    """The slot account of one batch's ``breakdowns`` (arguments as :func:`analyze_batch`)."""
    cap = check_capacity(capacity)
    bds = list(breakdowns)
    bands = bands_of(bds)
    parts = (*bands.names, EMPTY)
    n = len(bds)
    if n == 0:
        s0 = int(start_ns or 0)
        c = cap or 0
        zero = dict.fromkeys(parts, 0)
        row = [0] * len(bands.names) + [c, 0]
        timeline = SlotTimeline(
            np.array([s0], np.int64), np.array([row], np.int64), (*parts, OVERFLOW)
        )
        return SlotAccount(
            c, cap is not None, s0, s0, zero, dict.fromkeys(bands.names, 0), 0, s0,
            dict(zero), 0, (), 0, timeline, bands,
        )  # fmt: skip
    starts = np.fromiter((b.start_time_ns for b in bds), np.int64, n)
    ends = np.maximum(np.fromiter((b.end_time_ns for b in bds), np.int64, n), starts)
    s0 = int(starts.min()) if start_ns is None else min(int(starts.min()), int(start_ns))
    last = int(ends.max())
    peak = peak_in_flight(starts, ends)
    c = cap if cap is not None else peak
    enter = slot_entries(bds, starts, ends, c) if peak > c else starts

    nb = len(bands.phased)
    who, band, seg_s, seg_e = band_segments(bds, nb)
    # within each trajectory's own interval (a breakdown's are; one built elsewhere may not be)
    seg_s, seg_e = np.maximum(seg_s, starts[who]), np.minimum(seg_e, ends[who])
    lo = enter[who]
    slot_len = np.clip(seg_e - np.maximum(seg_s, lo), 0, None)
    over_len = np.clip(np.minimum(seg_e, lo) - seg_s, 0, None)
    held = int((ends - enter).sum())
    waited = int((enter - starts).sum())
    slot_sum = _sum_by(band, slot_len, nb)
    over_sum = _sum_by(band, over_len, nb)
    slot_ns = dict(zip(bands.phased, slot_sum, strict=True))
    overflow = dict(zip(bands.phased, over_sum, strict=True))
    slot_ns[bands.remainder] = held - sum(slot_sum)
    overflow[bands.remainder] = waited - sum(over_sum)
    slot_ns[EMPTY] = c * (last - s0) - held

    timeline = timeline_of(
        (s0, last, c), (starts, ends, enter), band, np.maximum(seg_s, lo), seg_e, slot_len > 0,
        (*parts, OVERFLOW),
    )  # fmt: skip
    drain_start = _drain_start(timeline, int(starts.max()), last)
    drain = timeline.integrals(drain_start, last)
    drain.pop(OVERFLOW)

    durations = ends - starts
    median = _median(durations)
    stragglers, joint = _stragglers(bds, starts, ends, durations, median, drain_start, s0)
    return SlotAccount(
        c, cap is not None, s0, last, slot_ns, overflow, peak, drain_start, drain, median,
        stragglers, joint, timeline, bands,
    )  # fmt: skip


def _sum_by(code: np.ndarray, values: np.ndarray, k: int) -> list[int]:
    """Exact int sums of ``values`` per ``code`` in ``range(k)``."""
    return [int(values[code == i].sum()) for i in range(k)]


def _drain_start(timeline: SlotTimeline, last_start: int, last: int) -> int:
    """The first time at or after ``last_start`` at which the slots held drop."""
    t = timeline.times_ns
    held = -timeline.column(EMPTY)  # the capacity less the empty slots
    drop = np.flatnonzero((held[1:] < held[:-1]) & (t[1:] >= last_start)) + 1
    return int(t[drop[0]]) if len(drop) else last


def _median(values: np.ndarray) -> int:
    """The median, the two middle values' mean rounded down for an even count."""
    v = np.sort(values)
    mid = len(v) // 2
    return int(v[mid]) if len(v) % 2 else (int(v[mid - 1]) + int(v[mid])) // 2


def _stragglers(
    bds: Sequence[Breakdown],
    starts: np.ndarray,
    ends: np.ndarray,
    durations: np.ndarray,
    median: int,
    drain_start: int,
    s0: int,
) -> tuple[tuple[Straggler, ...], int]:
    """The stragglers (see the module) and the cost of all of them at once."""
    slow = np.flatnonzero((durations > SLOW_FACTOR * median) & (ends > drain_start))
    if not len(slow):
        return (), 0
    last = int(ends.max())
    rest = np.ones(len(bds), dtype=bool)
    rest[slow] = False
    others = int(ends[rest].max()) if rest.any() else s0
    at_median = starts[slow] + median
    joint = last - max(others, int(at_median.max()))
    # one straggler at the median, the rest as they ran: the latest other end
    top2 = np.sort(ends)[-2:] if len(ends) > 1 else np.array([s0, last])
    out = []
    for k, i in enumerate(slow):
        other_end = int(top2[0]) if ends[i] == last else last
        cost = last - max(other_end, int(at_median[k]))
        out.append(Straggler(bds[int(i)], int(durations[i]), cost))
    out.sort(key=lambda s: (s.breakdown.end_time_ns, s.trajectory_id, s.trace_id))
    return tuple(out), joint
