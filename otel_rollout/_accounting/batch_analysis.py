"""The batch view (docs/batch.md, "The analysis"): one pure, order-independent analysis
of one batch's breakdowns (:func:`analyze_batch`: :class:`BatchAnalysis`, with
:class:`StepFunction` counts over time), the same online, at a Ray driver and in
``report``; and a batch's breakdowns gathered online (:class:`BatchAccumulator`)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otel_rollout import attributes as A
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._accounting.slot_arrays import interval_table, order_by
from otel_rollout._accounting.slots import SlotAccount, check_capacity, slot_account
from otel_rollout._base.errors import warn_once

_NS = 1e-9
#: Straggler trace ids written onto the batch span (the rest are in the analysis).
MAX_STRAGGLER_IDS = 32


class StepFunction:
    """A count over time: ``values[i]`` holds from ``times_ns[i]`` to the next time (the
    last one to the batch's end). Both are int64 numpy arrays."""

    __slots__ = ("times_ns", "values")

    def __init__(self, times_ns: Any, values: Any) -> None:
        self.times_ns = np.asarray(times_ns, dtype=np.int64)
        self.values = np.asarray(values, dtype=np.int64)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StepFunction):
            return NotImplemented
        return np.array_equal(self.times_ns, other.times_ns) and np.array_equal(
            self.values, other.values
        )

    __hash__ = None  # type: ignore[assignment]  # unhashable: equal by value

    def __len__(self) -> int:
        return len(self.times_ns)

    def __repr__(self) -> str:
        return f"StepFunction({len(self)} steps, max {self.max()})"

    def max(self) -> int:
        return int(self.values.max()) if len(self.values) else 0

    def at(self, t_ns: int) -> int:
        """The value at time ``t_ns`` (0 before the first time)."""
        i = int(np.searchsorted(self.times_ns, t_ns, "right")) - 1
        return int(self.values[i]) if i >= 0 else 0


@dataclass(frozen=True, eq=True)
class BatchAnalysis:
    """The figures of one batch; :func:`analyze_batch` computes them."""

    batch_id: str | None
    trajectories: int
    start_ns: int
    end_ns: int
    wall_ns: int
    #: Finish times (end - batch start), ascending.
    finish_ns: tuple[int, ...]
    #: Where the batch's capacity went: :mod:`otel_rollout._accounting.slots`.
    slots: SlotAccount
    in_flight: StepFunction = field(default_factory=lambda: StepFunction((), ()))
    in_generate: StepFunction = field(default_factory=lambda: StepFunction((), ()))
    #: Trajectory-nanoseconds in generate calls (the ``llm`` band), summed.
    llm_ns: int = 0
    llm_concurrency_mean: float = 0.0
    llm_concurrency_max: int = 0
    low_llm_demand_ns: int = 0
    low_llm_demand_frac: float = 0.0
    #: Wall time with no generate call in flight, and its share of the wall.
    engine_idle_ns: int = 0
    engine_idle_frac: float = 0.0
    #: The engine's own queue time, summed over the trajectories whose spans report it
    #: (vLLM's ``llm_request``); ``None`` when none did.
    engine_queue_ns: int | None = None
    #: Policy versions between generation and consumption, and nanoseconds waited in the
    #: buffer, over the trajectories where they are known (async trainers).
    staleness: tuple[int, ...] = ()
    buffer_wait_ns: tuple[int, ...] = ()

    @property
    def capacity(self) -> int:
        """Trajectories the batch may run at once (declared, else the peak in flight)."""
        return self.slots.capacity

    @property
    def drain_ns(self) -> int:
        return self.slots.drain_ns

    @property
    def drain_frac(self) -> float:
        return self.slots.drain_frac

    @property
    def stragglers(self) -> tuple[Breakdown, ...]:
        """The slow trajectories that kept the batch in its drain, by end."""
        return tuple(s.breakdown for s in self.slots.stragglers)

    @property
    def straggler_cost_ns(self) -> int:
        return self.slots.straggler_cost_ns

    def summary(self, *, prefix: str = "generate/") -> dict[str, float]:
        """Per-batch keys for an experiment tracker, beside :func:`summarize`'s
        (docs/batch.md lists them); an empty batch gives the same keys, each NaN."""
        p, sl = prefix, self.slots
        out = {f"{p}batch_wall_time": self.wall_ns * _NS, f"{p}batch_capacity": float(sl.capacity)}
        out.update((f"{p}batch_slot_frac_{part}", sl.frac(part)) for part in sl.parts)
        out.update((p + key, float(get(self))) for key, _, get in _FIGURES)
        if self.staleness:
            out[f"{p}policy_staleness_mean"] = float(np.mean(self.staleness))
            out[f"{p}policy_staleness_max"] = float(max(self.staleness))
        if self.buffer_wait_ns:
            out[f"{p}buffer_wait_time_mean"] = float(np.mean(self.buffer_wait_ns)) * _NS
            out[f"{p}buffer_wait_time_max"] = max(self.buffer_wait_ns) * _NS
        return out if self.trajectories else dict.fromkeys(out, math.nan)

    def as_attributes(self) -> dict[str, Any]:
        """The figures as batch-span attributes (``rollout.batch.*``, seconds)."""
        P, sl = A.BATCH_PREFIX, self.slots
        out: dict[str, Any] = {
            P + "trajectories": self.trajectories,
            P + "wall_time": self.wall_ns * _NS,
            P + "capacity": sl.capacity,
        }
        out.update((f"{P}slot.{part}_frac", sl.frac(part)) for part in sl.parts)
        out.update((P + attr, get(self)) for _, attr, get in _FIGURES)
        if sl.overflow_total_ns:
            out[P + "overflow_time"] = sl.overflow_total_ns * _NS
        if self.engine_queue_ns is not None:
            out[P + "engine_queue_time"] = self.engine_queue_ns * _NS
        if sl.stragglers:
            ids = [s.trace_id for s in sl.stragglers[-MAX_STRAGGLER_IDS:]]
            out[P + "straggler_trace_ids"] = ids
        return out


#: The figures both forms hold: (tracker key, span attribute after ``rollout.batch.``, value).
_FIGURES: tuple[tuple[str, str, Callable[[BatchAnalysis], float]], ...] = (
    ("batch_drain_time", "drain_time", lambda a: a.slots.drain_ns * _NS),
    ("batch_drain_frac", "drain_frac", lambda a: a.slots.drain_frac),
    ("batch_stragglers", "stragglers", lambda a: len(a.slots.stragglers)),
    ("batch_straggler_cost_time", "straggler_cost_time", lambda a: a.straggler_cost_ns * _NS),
    ("batch_engine_idle_frac", "engine_idle_frac", lambda a: a.engine_idle_frac),
    ("llm_concurrency_mean", "llm_concurrency.mean", lambda a: a.llm_concurrency_mean),
    ("llm_concurrency_max", "llm_concurrency.max", lambda a: a.llm_concurrency_max),
    ("low_llm_demand_frac", "low_llm_demand_frac", lambda a: a.low_llm_demand_frac),
)


_LLM = A.BANDS.index(A.PHASE_LLM)


def _named(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"


def breakdown_list(value: Any, where: str) -> list[Breakdown]:
    """``value`` (an iterable of :class:`Breakdown`) as a list; else a ``TypeError`` naming
    ``where`` and what it accepts."""
    if hasattr(value, "drain") and hasattr(value, "peek"):  # a BreakdownCollector
        raise TypeError(f"{where}: expected breakdowns, got a collector; pass what it "
                        f"holds: collector.drain()")  # fmt: skip
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise TypeError(f"{where}: expected an iterable of Breakdown (a list, "
                        f"collector.drain()), got {_named(value)}")  # fmt: skip
    out = list(value)
    for item in out:
        if not isinstance(item, Breakdown):
            raise TypeError(f"{where}: expected Breakdown items, got {_named(item)}")
    return out


def analyze_batch(
    breakdowns: Iterable[Breakdown],
    *,
    start_ns: int | None = None,
    batch_id: str | None = None,
    capacity: int | None = None,
) -> BatchAnalysis:
    """The batch figures of ``breakdowns`` (one batch). ``start_ns``: the batch's start (the
    earliest trajectory start when earlier); ``batch_id``: the breakdowns' own when they
    agree; ``capacity``: the declared concurrency, else the peak in flight."""
    bds = breakdown_list(breakdowns, "analyze_batch(breakdowns)")
    n = len(bds)
    if batch_id is None:
        ids = {b.batch_id for b in bds}
        batch_id = ids.pop() if len(ids) == 1 else None
    slots = slot_account(bds, capacity=capacity, start_ns=start_ns)
    s0, last = slots.start_ns, slots.end_ns
    if n == 0:
        return BatchAnalysis(batch_id, 0, s0, s0, 0, (), slots)
    starts = np.fromiter((b.start_time_ns for b in bds), np.int64, n)
    ends = np.maximum(np.fromiter((b.end_time_ns for b in bds), np.int64, n), starts)
    llm_total = sum(b.nanos.get(A.PHASE_LLM, 0) for b in bds)
    queues = [q for b in bds if (q := b.waits_nanos.get(A.LLM_QUEUE)) is not None]
    consumed = [b for b in bds if b.buffer_wait_ns is not None]
    staleness = [s for b in consumed if (s := b.staleness) is not None]
    wall = last - s0
    in_flight = _step(
        np.concatenate((starts, ends)) - s0,
        np.concatenate((np.ones(n, np.int64), -np.ones(n, np.int64))),
        s0,
    )
    in_generate = _step(*_llm_edges(*interval_table(bds), s0), s0)
    peak = in_generate.max()
    low = _below(in_generate, last, peak / 4) if peak > 0 else 0
    idle = _below(in_generate, last, 1)
    return BatchAnalysis(
        batch_id=batch_id,
        trajectories=n,
        start_ns=s0,
        end_ns=last,
        wall_ns=wall,
        finish_ns=tuple(np.sort(ends - s0).tolist()),
        slots=slots,
        in_flight=in_flight,
        in_generate=in_generate,
        llm_ns=llm_total,
        llm_concurrency_mean=llm_total / wall if wall > 0 else 0.0,
        llm_concurrency_max=int(peak),
        low_llm_demand_ns=low,
        low_llm_demand_frac=low / wall if wall > 0 else 0.0,
        engine_idle_ns=idle,
        engine_idle_frac=idle / wall if wall > 0 else 0.0,
        engine_queue_ns=sum(queues) if queues else None,
        staleness=tuple(sorted(staleness)),
        buffer_wait_ns=tuple(sorted(b.buffer_wait_ns or 0 for b in consumed)),
    )


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
    # by trajectory, then time, starts before ends at a tie (touching calls merge)
    order = order_by(np.concatenate((who, who)), t, is_end, 2)
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


class BatchAccumulator:
    """One batch in flight: its trajectories' breakdowns, each once, at most
    ``max_trajectories`` (the rest counted in ``dropped``). Accumulators merge (Ray
    workers'): ``a.merge(b).analysis()`` is ``analyze_batch`` of both's breakdowns.
    ``capacity``: the declared concurrency (``None``: the peak in flight).
    """

    def __init__(
        self,
        batch_id: str | None = None,
        *,
        start_ns: int | None = None,
        max_trajectories: int = 100_000,
        capacity: int | None = None,
    ) -> None:
        if max_trajectories < 1:
            raise ValueError(f"max_trajectories must be at least 1, got {max_trajectories!r}")
        self.batch_id = batch_id
        self.start_ns = start_ns
        self.capacity = check_capacity(capacity)
        self.max_trajectories = max_trajectories
        self.dropped = 0
        self._items: list[Breakdown] = []
        #: (trace id, trajectory id, start) of each kept trajectory: one delivered in-process
        #: and added again from a gather counts once
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
        """A new accumulator holding both batches' trajectories (the earlier start); two
        parts of one batch keep the larger declared capacity, two batches add theirs."""
        starts = [s for s in (self.start_ns, other.start_ns) if s is not None]
        same = self.batch_id == other.batch_id
        caps = [c for c in (self.capacity, other.capacity) if c is not None]
        out = BatchAccumulator(
            self.batch_id if same else None,
            start_ns=min(starts) if starts else None,
            max_trajectories=self.max_trajectories + other.max_trajectories,
            capacity=(max(caps) if same else sum(caps)) if caps else None,
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
        return analyze_batch(
            self.breakdowns, start_ns=self.start_ns, batch_id=self.batch_id, capacity=self.capacity
        )


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
