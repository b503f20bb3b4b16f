"""The slot account's arrays (numpy): a batch's phase intervals as disjoint band segments,
who holds a slot when, and the account over time (:class:`SlotTimeline`)."""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._bands import DEFAULT_BANDS

#: The part of the account no trajectory holds.
EMPTY = "empty"
#: Trajectories in flight beyond the capacity (a column of the timeline, not a part).
OVERFLOW = "overflow"
#: The parts of an account of the default bands, in order: the bands, then empty
#: (``SlotAccount.parts`` for an account of other bands).
PARTS = (*DEFAULT_BANDS.names, EMPTY)


@dataclass(frozen=True)
class SlotTimeline:
    """The account over time: from ``times_ns[i]`` to the next time (the last row, all
    zero but empty, at the batch's end), ``counts[i]`` slots per part (the first
    ``len(columns) - 1`` columns: the account's parts, each row summing to the capacity)
    and ``counts[i, -1]`` trajectories in overflow. int64 numpy arrays."""

    times_ns: np.ndarray
    counts: np.ndarray
    #: The name of each column of ``counts``: the parts, then ``overflow``.
    columns: tuple[str, ...] = (*PARTS, OVERFLOW)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SlotTimeline):
            return NotImplemented
        return np.array_equal(self.times_ns, other.times_ns) and np.array_equal(
            self.counts, other.counts
        )

    __hash__ = None  # type: ignore[assignment]  # unhashable: equal by value

    def column(self, name: str) -> np.ndarray:
        """The counts of one part (a band, ``empty`` or ``overflow``) over time."""
        if name not in self.columns:
            raise ValueError(
                f"unknown slot part {name!r}; expected one of {', '.join(self.columns)}"
            )
        return self.counts[:, self.columns.index(name)]

    def integral(self, name: str, start_ns: int, end_ns: int) -> int:
        """Slot-nanoseconds of part ``name`` over ``[start_ns, end_ns]``."""
        return self.integrals(start_ns, end_ns)[name]

    def integrals(self, start_ns: int, end_ns: int) -> dict[str, int]:
        """Slot-nanoseconds of every column over ``[start_ns, end_ns]``, by name."""
        t = self.times_ns
        if not len(t):
            return dict.fromkeys(self.columns, 0)
        nxt = np.append(t[1:], t[-1])
        dur = np.clip(np.minimum(nxt, end_ns) - np.maximum(t, start_ns), 0, None)
        return dict(zip(self.columns, (int(v) for v in dur @ self.counts), strict=True))


def interval_table(bds: Sequence[Breakdown]) -> tuple[np.ndarray, np.ndarray]:
    """Every breakdown's (band, start, end) intervals as one int64 table, and the index of
    the breakdown each row belongs to."""
    buf = array("q")
    counts = np.empty(len(bds), np.int64)
    for i, b in enumerate(bds):
        iv = b.intervals
        buf.extend(iv)
        counts[i] = len(iv) // 3
    table = np.frombuffer(buf, np.int64).reshape(-1, 3) if len(buf) else np.zeros((0, 3), np.int64)
    return table, np.repeat(np.arange(len(bds), dtype=np.int64), counts)


def band_segments(
    bds: Sequence[Breakdown], nb: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each trajectory's time in the phase bands after the overlap priority, as disjoint
    ``(trajectory index, band code, start, end)`` int64 arrays; ``nb`` phased bands."""
    table, owner = interval_table(bds)
    keep = table[:, 2] > table[:, 1]
    table, owner = table[keep], owner[keep]
    if not len(table):
        z = np.zeros(0, np.int64)
        return z, z, z, z
    band, s, e = table[:, 0], table[:, 1], table[:, 2]
    # a sequential loop (most): each trajectory's intervals already in order, none
    # overlapping the next; nothing to resolve
    same = owner[1:] == owner[:-1]
    if not (same & (s[1:] < e[:-1])).any():
        return owner, band.copy(), s.copy(), e.copy()
    m = len(table)
    t = np.concatenate((s, e))
    d = np.concatenate((np.ones(m, np.int64), -np.ones(m, np.int64)))
    bb = np.concatenate((band, band))
    ww = np.concatenate((owner, owner))
    order = order_by(ww, t, bb, nb)
    t, d, bb, ww = t[order], d[order], bb[order], ww[order]
    # each trajectory's deltas sum to zero per band, so global running sums are its own
    code = np.full(len(t), nb, dtype=np.int64)
    for idx in range(nb - 1, -1, -1):
        code[np.cumsum(np.where(bb == idx, d, 0)) > 0] = idx
    nxt = np.append(t[1:], t[-1])
    ok = np.zeros(len(t), dtype=bool)
    ok[:-1] = (ww[1:] == ww[:-1]) & (t[1:] > t[:-1])
    ok &= code < nb
    return ww[ok], code[ok], t[ok], nxt[ok]


def order_by(owner: np.ndarray, t: np.ndarray, low: np.ndarray, k: int) -> np.ndarray:
    """Indices sorting by ``(owner, t, low)`` with ``0 <= low < k``: one int64 key when it
    fits (it does unless a batch spans days of millions of trajectories), else lexsort."""
    t0 = int(t.min())
    span = int(t.max()) - t0 + 1
    owners = int(owner.max()) + 1
    if owners * span * k < 1 << 62:
        return np.argsort((owner * span + (t - t0)) * k + low)
    return np.lexsort((low, t, owner))


def peak_in_flight(starts: np.ndarray, ends: np.ndarray) -> int:
    """The most trajectories in flight at once (one ending as another starts: not both)."""
    live = starts < ends
    t = np.concatenate((starts[live], ends[live]))
    if not len(t):
        return 0
    d = np.concatenate((np.ones(live.sum(), np.int64), -np.ones(live.sum(), np.int64)))
    order = np.lexsort((d, t))  # ends (-1) before starts at a tie
    return int(np.cumsum(d[order]).max())


def slot_entries(
    bds: Sequence[Breakdown], starts: np.ndarray, ends: np.ndarray, c: int
) -> np.ndarray:
    """When each trajectory takes a slot: once fewer than ``c`` trajectories that started
    before it (start, then ids) are still running; never later than its end."""
    keys = [(int(starts[i]), b.trajectory_id, b.trace_id) for i, b in enumerate(bds)]
    order = sorted(range(len(bds)), key=keys.__getitem__)
    enter = starts.copy()
    top: list[int] = []  # the c latest ends among the trajectories started so far
    for i in order:
        s, e = int(starts[i]), int(ends[i])
        if len(top) == c:
            enter[i] = min(max(s, top[0]), e)
            heapq.heappushpop(top, e)
        else:
            heapq.heappush(top, e)
    return enter


def timeline_of(
    wall: tuple[int, int, int],
    spans: tuple[np.ndarray, np.ndarray, np.ndarray],
    band: np.ndarray,
    seg_s: np.ndarray,
    seg_e: np.ndarray,
    held: np.ndarray,
    columns: tuple[str, ...],
) -> SlotTimeline:
    """The slots per band, the slots held and the trajectories in flight over time."""
    s0, last, c = wall
    starts, ends, enter = spans
    nb = len(columns) - 3  # the phased bands: before the remainder, empty, overflow
    hs, he = enter < ends, starts < ends
    parts = (
        (seg_s[held], seg_e[held], band[held]),
        (enter[hs], ends[hs], np.full(int(hs.sum()), nb, np.int64)),  # held
        (starts[he], ends[he], np.full(int(he.sum()), nb + 1, np.int64)),  # in flight
    )
    bounds = np.array([s0, last], np.int64)  # the rows of the wall's ends, changing nothing
    t = np.concatenate([p[0] for p in parts] + [p[1] for p in parts] + [bounds]) - s0
    col = np.concatenate([p[2] for p in parts] * 2 + [np.zeros(2, np.int64)])
    rise = np.concatenate(
        [np.ones(len(p[0]), np.int64) for p in parts]
        + [np.zeros(len(p[0]), np.int64) for p in parts]
        + [np.full(2, 2, np.int64)]  # neither: no change
    )
    # one sort of packed (time, column, rise) keys when they fit in 63 bits (unless a
    # batch runs for years), else a three-key sort
    shift = int(nb + 2).bit_length() + 2
    if int(t.max()) < 1 << (62 - shift):
        key = np.sort(t << shift | col << 2 | rise)
        t, col, rise = key >> shift, (key >> 2) & ((1 << (shift - 2)) - 1), key & 3
    else:
        order = np.lexsort((rise, col, t))
        t, col, rise = t[order], col[order], rise[order]
    d = np.where(rise == 1, 1, np.where(rise == 0, -1, 0))
    t += s0
    last_of_time = np.ones(len(t), dtype=bool)
    last_of_time[:-1] = t[1:] != t[:-1]
    acc = np.empty((int(last_of_time.sum()), nb + 2), np.int64)
    for k in range(nb + 2):
        acc[:, k] = np.cumsum(np.where(col == k, d, 0))[last_of_time]
    counts = np.empty((len(acc), nb + 3), np.int64)
    counts[:, :nb] = acc[:, :nb]
    counts[:, nb] = acc[:, nb] - acc[:, :nb].sum(axis=1)  # the remainder band
    counts[:, nb + 1] = c - acc[:, nb]  # empty
    counts[:, nb + 2] = acc[:, nb + 1] - acc[:, nb]  # overflow
    return SlotTimeline(t[last_of_time], counts, columns)
