"""The batch view: one pure analysis over the breakdowns of one batch (a training step).

A synchronous step waits for its slowest trajectory. :func:`analyze_batch` says how long
that wait was and what it was spent on, from the breakdowns alone, so it gives the same
figures online (the batch span), at a Ray driver from gathered breakdowns, and offline
in ``report``:

* **wall** = batch start (the batch span's start, else the earliest trajectory start) to
  the last trajectory end; each trajectory's **finish** is its end minus the batch start.
* **tail** = last finish - median finish (the mean of the two middle finishes for an
  even count, rounded down to a whole nanosecond), and its share of the wall.
* **stragglers**: trajectories finishing after the 90th percentile of finishes
  (``numpy.percentile(finish, 90)``).
* **what the tail was spent on**: over the tail interval ``[median finish, last finish]``
  the trajectory-nanoseconds of the trajectories still running, split into the five bands
  with the same overlap priority as a breakdown (so ``other`` is what no phase covers).
* **engine demand**: trajectories in flight and trajectories inside a generate call, as
  step functions over the batch; the time-averaged and peak in-generate concurrency, and
  the share of the wall during which in-generate concurrency was below a quarter of peak.

Every figure is computed from per-trajectory integers, so it does not depend on the
order of the breakdowns, and the analysis of two batches' breakdowns together is the
analysis of their union. Times are integer nanoseconds; fractions and means are floats.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable

import numpy as np

from otel_rollout import attributes as A
from otel_rollout._accounting.batch_figures import BatchAnalysis, StepFunction
from otel_rollout._accounting.breakdown import Breakdown

_LLM = A.BANDS.index(A.PHASE_LLM)


def analyze_batch(
    breakdowns: Iterable[Breakdown],
    *,
    start_ns: int | None = None,
    batch_id: str | None = None,
) -> BatchAnalysis:
    """The batch figures of ``breakdowns`` (one batch); pure and order-independent.

    ``start_ns`` is the batch's start (the batch span's); the earliest trajectory start
    is used when it is later or not given. ``batch_id`` defaults to the breakdowns' own
    when they all agree.
    """
    bds = list(breakdowns)
    n = len(bds)
    if batch_id is None:
        ids = {b.batch_id for b in bds}
        batch_id = ids.pop() if len(ids) == 1 else None
    if n == 0:
        s0 = int(start_ns or 0)
        return BatchAnalysis(batch_id, 0, s0, s0, 0, (), 0, 0.0, 0, 0.0, (), 0)
    # one pass over the breakdowns; everything after is array arithmetic
    starts = np.empty(n, dtype=np.int64)
    ends = np.empty(n, dtype=np.int64)
    counts = np.empty(n, dtype=np.int64)
    buf = array("q")
    llm_total = 0
    staleness: list[int] = []
    waits: list[int] = []
    for i, b in enumerate(bds):
        starts[i] = b.start_time_ns
        ends[i] = b.end_time_ns
        iv = b.intervals
        buf.extend(iv)
        counts[i] = len(iv) // 3
        llm_total += b.nanos.get(A.PHASE_LLM, 0)
        if b.consumed_time_ns is not None:
            waits.append(b.buffer_wait_ns)
            if b.policy_version is not None and b.consumed_version is not None:
                staleness.append(b.consumed_version - b.policy_version)
    ends = np.maximum(ends, starts)
    s0 = int(starts.min())
    if start_ns is not None:
        s0 = min(s0, int(start_ns))
    last = int(ends.max())
    wall = last - s0
    finish = np.sort(ends - s0)
    mid = n // 2
    median = int(finish[mid]) if n % 2 else (int(finish[mid - 1]) + int(finish[mid])) // 2
    p90 = float(np.percentile(finish, 90))
    tail = int(finish[-1]) - median
    cut = s0 + median

    # stragglers: finish > p90, ordered by finish then ids (order-independent)
    late = np.flatnonzero(ends - s0 > p90)
    stragglers = tuple(
        sorted((bds[i] for i in late), key=lambda b: (b.end_time_ns, b.trajectory_id, b.trace_id))
    )

    # every trajectory's phase intervals as one (band, start, end) table
    table = np.frombuffer(buf, dtype=np.int64).reshape(-1, 3) if len(buf) else _EMPTY_TABLE
    owner = np.repeat(np.arange(n, dtype=np.int64), counts)

    band_ns, running = _tail_bands(table, owner, starts, ends, cut)
    band_frac = {b: (band_ns[b] / running if running > 0 else 0.0) for b in A.ALL_BANDS}
    dominant = max(A.ALL_BANDS, key=lambda b: band_ns[b]) if running > 0 else None

    in_flight = _step(
        np.concatenate((starts, ends)) - s0,
        np.concatenate((np.ones(n, np.int64), -np.ones(n, np.int64))),
        s0,
    )
    gen_t, gen_d = _llm_edges(table, owner, s0)
    in_generate = _step(gen_t, gen_d, s0)
    peak = in_generate.max()
    low = _below(in_generate, last, peak / 4) if peak > 0 else 0

    return BatchAnalysis(
        batch_id=batch_id,
        trajectories=n,
        start_ns=s0,
        end_ns=last,
        wall_ns=wall,
        finish_ns=tuple(finish.tolist()),
        median_finish_ns=median,
        p90_finish_ns=p90,
        tail_ns=tail,
        tail_frac=tail / wall if wall > 0 else 0.0,
        stragglers=stragglers,
        tail_running_ns=running,
        tail_band_ns=band_ns,
        tail_band_frac=band_frac,
        dominant_tail_band=dominant,
        in_flight=in_flight,
        in_generate=in_generate,
        llm_concurrency_mean=llm_total / wall if wall > 0 else 0.0,
        llm_concurrency_max=int(peak),
        low_llm_demand_ns=low,
        low_llm_demand_frac=low / wall if wall > 0 else 0.0,
        staleness=tuple(sorted(staleness)),
        buffer_wait_ns=tuple(sorted(waits)),
    )


_EMPTY_TABLE = np.zeros((0, 3), dtype=np.int64)


def _order(owner: np.ndarray | None, t: np.ndarray, low: np.ndarray, bits: int) -> np.ndarray:
    """Indices sorting by ``(owner, t, low)``; ``t >= 0``, ``0 <= low < 2**bits``.

    One int64 key and one sort when it fits (it does unless a batch spans days of
    millions of trajectories), else a three-key lexsort.
    """
    span = int(t.max()) + 1 if len(t) else 1
    owners = int(owner.max()) + 1 if owner is not None and len(owner) else 1
    if (owners * span) << bits < 1 << 62:
        key = t << bits | low
        if owner is not None:
            key += (owner * span) << bits
        return np.argsort(key)
    return np.lexsort((low, t) if owner is None else (low, t, owner))


def _tail_bands(
    table: np.ndarray, owner: np.ndarray, starts: np.ndarray, ends: np.ndarray, cut: int
) -> tuple[dict[str, int], int]:
    """Band nanoseconds of the still-running trajectories over ``[cut, their end]``."""
    lo = np.maximum(starts, cut)
    running = int(np.clip(ends - lo, 0, None).sum())
    out = dict.fromkeys(A.ALL_BANDS, 0)
    if running == 0:
        return out, 0
    e = table[:, 2]
    keep = e > cut
    s = np.maximum(table[keep, 1], lo[owner[keep]])
    e, band, who = e[keep], table[keep, 0], owner[keep]
    keep = e > s
    s, e, band, who = s[keep], e[keep], band[keep], who[keep]
    if len(s):
        m = len(s)
        t = np.concatenate((s, e)) - cut
        d = np.concatenate((np.ones(m, np.int64), -np.ones(m, np.int64)))
        bb = np.concatenate((band, band))
        ww = np.concatenate((who, who))
        order = _order(ww, t, bb, 2)
        t, d, bb, ww = t[order], d[order], bb[order], ww[order]
        # each trajectory's deltas sum to zero, so global running sums are per trajectory
        code = np.full(len(t), len(A.BANDS), dtype=np.int64)
        for idx in range(len(A.BANDS) - 1, -1, -1):
            active = np.cumsum(np.where(bb == idx, d, 0)) > 0
            code[active] = idx
        seg = np.zeros(len(t), dtype=np.int64)
        same = ww[1:] == ww[:-1]
        seg[:-1] = np.where(same, t[1:] - t[:-1], 0)
        for idx, name in enumerate(A.BANDS):
            out[name] = int(seg[code == idx].sum())
    out[A.BAND_OTHER] = running - sum(out[b] for b in A.BANDS)
    return out, running


def _llm_edges(table: np.ndarray, owner: np.ndarray, s0: int) -> tuple[np.ndarray, np.ndarray]:
    """Times (after ``s0``) a trajectory enters (+1) and leaves (-1) the union of its
    generate calls."""
    mask = table[:, 0] == _LLM
    s, e, who = table[mask, 1] - s0, table[mask, 2] - s0, owner[mask]
    if not len(s):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    m = len(s)
    t = np.concatenate((s, e))
    is_end = np.concatenate((np.zeros(m, np.int64), np.ones(m, np.int64)))
    ww = np.concatenate((who, who))
    # by trajectory, then time, starts before ends at a tie (touching calls merge)
    span = int(t.max()) + 1
    if (int(who.max()) + 1) * span < 1 << 61:
        key = np.sort((ww * span + t) << 1 | is_end)
        d = 1 - 2 * (key & 1)
        t = (key >> 1) % span
    else:
        order = _order(ww, t, is_end, 1)
        t, d = t[order], 1 - 2 * is_end[order]
    level = np.cumsum(d)
    edge = ((d == 1) & (level == 1)) | ((d == -1) & (level == 0))
    return t[edge], d[edge]


def _step(times: np.ndarray, deltas: np.ndarray, origin: int) -> StepFunction:
    """The running sum of ``deltas`` (+1/-1) at ``times`` (after ``origin``), from 0."""
    if not len(times):
        return StepFunction([origin], [0])
    # leaving before entering at a tie: no false peaks
    t = np.sort(times << 1 | (deltas > 0))
    level = np.cumsum(np.where(t & 1, 1, -1))
    t >>= 1
    last = np.ones(len(t), dtype=bool)
    last[:-1] = t[1:] != t[:-1]
    t, level = t[last], level[last]
    if t[0] > 0:
        t = np.concatenate(([0], t))
        level = np.concatenate(([0], level))
    return StepFunction(t + origin, level)


def _below(step: StepFunction, end_ns: int, threshold: float) -> int:
    """Nanoseconds up to ``end_ns`` during which ``step`` is below ``threshold``."""
    t, v = step.times_ns, step.values
    dur = np.diff(np.append(t, max(end_ns, int(t[-1]))))
    return int(dur[v < threshold].sum())
