"""The report's batch view: trajectories grouped by batch id, each analysed with
:func:`~otel_rollout.analyze_batch` (docs/batch.md), as tables and as JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otel_rollout import attributes as A
from otel_rollout._accounting.batch_analysis import BatchAccumulator, BatchAnalysis
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._accounting.slots import EMPTY, SLOW_FACTOR
from otel_rollout._base.text import mid
from otel_rollout.report._fit import print_fitted, table
from otel_rollout.report._model import BatchSpan, RawSpan

#: Batch spans remembered by a read; trajectories kept for batch analysis across batches.
MAX_BATCHES = 100_000
MAX_BATCH_TRAJECTORIES = 200_000
#: Batches shown with their own straggler table (the longest drains); all are in the JSON.
TABLES_SHOWN = 5
#: Stragglers listed per batch on the terminal.
STRAGGLERS_SHOWN = 10
LOSS_BATCH_FULL = "trajectories left out of the batch view: too many kept"


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def batch_span(span: RawSpan) -> BatchSpan:
    capacity = _count(span.attributes.get(A.BATCH_CONCURRENCY))
    return BatchSpan(
        str(span.attributes[A.BATCH_ID]),
        _count(span.attributes.get(A.STEP)),
        span.start_ns,
        span.end_ns,
        capacity if capacity is not None and capacity >= 1 else None,
    )


class BatchGroups:
    """Breakdowns that carry a batch id, by batch; bounded across batches."""

    def __init__(self, max_trajectories: int = MAX_BATCH_TRAJECTORIES) -> None:
        self._groups: dict[str, BatchAccumulator] = {}
        self._max = max_trajectories
        self.kept = 0
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._groups)

    def add(self, breakdown: Breakdown) -> None:
        if breakdown.batch_id is None:
            return
        if self.kept >= self._max:
            self.dropped += 1
            return
        acc = self._groups.get(breakdown.batch_id)
        if acc is None:
            acc = self._groups[breakdown.batch_id] = BatchAccumulator(
                breakdown.batch_id, max_trajectories=self._max
            )
        acc.add(breakdown)
        self.kept += 1

    def breakdowns_of(self) -> dict[str, list[Breakdown]]:
        """The breakdowns kept, by batch id."""
        return {k: acc.breakdowns for k, acc in self._groups.items()}

    def analyses(self, spans: Mapping[str, BatchSpan] | None = None) -> list[BatchView]:
        """One analysis per batch, measured from its batch span's start when read; by start."""
        out = []
        for batch_id, acc in self._groups.items():
            span = (spans or {}).get(batch_id)
            if span is not None:
                acc.start_ns = span.start_ns
                acc.capacity = span.capacity
            out.append(BatchView(acc.analysis(), span.step if span is not None else None))
        out.sort(key=lambda v: (v.analysis.start_ns, v.analysis.batch_id or ""))
        return out


class BatchView:
    """A batch's analysis and its step (when its batch span was read)."""

    __slots__ = ("analysis", "step")

    def __init__(self, analysis: BatchAnalysis, step: int | None) -> None:
        self.analysis = analysis
        self.step = step

    @property
    def name(self) -> str:
        a = self.analysis
        return f"{a.batch_id} (step {self.step})" if self.step is not None else str(a.batch_id)


def _secs(ns: float) -> float:
    return round(ns * 1e-9, 9)


def batch_dict(view: BatchView) -> dict[str, Any]:
    """A batch's figures for ``--format json`` (seconds, fractions, trace ids)."""
    a = view.analysis
    sl = a.slots
    return {
        "batch_id": a.batch_id,
        "step": view.step,
        "trajectories": a.trajectories,
        "start_time_unix_nano": a.start_ns,
        "wall_time": _secs(a.wall_ns),
        "capacity": sl.capacity,
        "capacity_declared": sl.declared,
        "slot_time": {part: _secs(ns) for part, ns in sl.slot_ns.items()},
        "slot_frac": {part: sl.frac(part) for part in sl.parts},
        "overflow_time": {band: _secs(ns) for band, ns in sl.overflow_ns.items()},
        "peak_in_flight": sl.peak_in_flight,
        "drain_start_time": _secs(sl.drain_start_ns - a.start_ns),
        "drain_time": _secs(sl.drain_ns),
        "drain_frac": sl.drain_frac,
        "drain_slot_time": {part: _secs(ns) for part, ns in sl.drain_slot_ns.items()},
        "median_duration": _secs(sl.median_duration_ns),
        "straggler_cost_time": _secs(sl.straggler_cost_ns),
        "engine_idle_frac": a.engine_idle_frac,
        "engine_queue_time": None if a.engine_queue_ns is None else _secs(a.engine_queue_ns),
        "llm_concurrency_mean": a.llm_concurrency_mean,
        "llm_concurrency_max": a.llm_concurrency_max,
        "low_llm_demand_frac": a.low_llm_demand_frac,
        "stragglers": [
            {
                "trajectory_id": s.trajectory_id,
                "trace_id": s.trace_id,
                "env_class": s.breakdown.env_class,
                "finish_time": _secs(s.breakdown.end_time_ns - a.start_ns),
                "duration": _secs(s.duration_ns),
                "cost_time": _secs(s.cost_ns),
                **s.breakdown.seconds,
            }
            for s in sl.stragglers
        ],
        "summary": a.summary(),
    }


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


#: How the account's parts read in a sentence (another band: ``in <name>``).
SAYS = {
    A.PHASE_LLM: "generating",
    A.PHASE_ENV: "in env",
    A.PHASE_ENV_SETUP: "in setup",
    A.PHASE_ENV_TEARDOWN: "in teardown",
    A.BAND_OTHER: "between phases",
    EMPTY: "empty",
}


def slots_said(slot_ns: Mapping[str, int], top: int = 3) -> str:
    """``62% generating, 21% in env, 12% empty``: the ``top - 1`` largest bands of an
    account (its ``slot_ns``, the bands in priority order, then empty) and its empty
    slots, in the account's order (parts under half a percent left out)."""
    total = sum(slot_ns.values())
    if total <= 0:
        return "no slot time"
    bands = sorted((p for p in slot_ns if p != EMPTY and slot_ns[p] / total >= 0.005),
                   key=lambda p: -slot_ns[p])[: max(top - 1, 1)]  # fmt: skip
    shown = [*bands, *([EMPTY] if slot_ns.get(EMPTY, 0) / total >= 0.005 else [])]
    return ", ".join(f"{_pct(slot_ns[p] / total)} {SAYS.get(p, f'in {p}')}"
                     for p in slot_ns if p in shown)  # fmt: skip


def short_secs(ns: float) -> str:
    """``1.9 s`` from a second up, ``0.38 s`` below."""
    x = ns / 1e9
    return f"{x:.1f} s" if x >= 1 else f"{x:.2f} s"


def drain_said(a: BatchAnalysis) -> str:
    """``drain 1.90 s (21% of wall): 40% generating, 55% empty``."""
    sl = a.slots
    if sl.drain_ns <= 0:
        return "no drain: every slot held to the end"
    return (f"drain {sl.drain_ns / 1e9:.2f} s ({_pct(sl.drain_frac)} of wall): "
            f"{slots_said(sl.drain_slot_ns)}")  # fmt: skip


def engine_said(a: BatchAnalysis) -> str:
    """``engine idle 8% of wall; generating 9.9 of 16 slots on average (max 16)``."""
    return (f"engine idle {_pct(a.engine_idle_frac)} of wall; generating "
            f"{a.llm_concurrency_mean:.1f} of {a.capacity} slots on average "
            f"(max {a.llm_concurrency_max})")  # fmt: skip


def longest_drains(views: list[BatchView], n: int = TABLES_SHOWN) -> list[BatchView]:
    """The ``n`` batches with the longest drains, in the order they started."""
    shown = sorted(views, key=lambda v: -v.analysis.drain_ns)[:n]
    return sorted(shown, key=lambda v: v.analysis.start_ns)


def print_batches_overview(console: Any, views: list[BatchView], limit: int | None = None) -> None:
    """A row per batch (the first ``limit``, then "and N more")."""
    t = table(
        ["batch", "n", "slots", "wall", "drain", "gen", "env", "empty", "strag."],
        right=range(1, 9),
        title="batches (seconds; shares of the slots)",
    )
    rows = []
    for v in views[:limit]:
        a = v.analysis
        sl = a.slots
        rows.append([v.name, str(a.trajectories), str(sl.capacity), f"{a.wall_ns / 1e9:.2f}",
                     f"{sl.drain_ns / 1e9:.2f}", _pct(sl.frac(A.PHASE_LLM)),
                     _pct(sl.frac(A.PHASE_ENV)), _pct(sl.frac(EMPTY)),
                     str(len(sl.stragglers))])  # fmt: skip
    print_fitted(console, t, rows)
    if limit is not None and len(views) > limit:
        console.print(f"and {len(views) - limit} more (see --format json)")


def print_batch(console: Any, view: BatchView) -> None:
    """One batch: its slot account in a few short lines and its stragglers with trace ids."""
    a = view.analysis
    sl = a.slots
    how = "declared" if sl.declared else "peak in flight"
    lines = [
        f"batch {view.name}: {a.trajectories} trajectories, wall {a.wall_ns / 1e9:.2f} s",
        f"{sl.capacity} slots ({how}): {slots_said(sl.slot_ns, top=4)}",
        drain_said(a),
        engine_said(a),
    ]
    if sl.drain_ns > 0:
        lines.insert(
            3, f"{sl.drain_empty_mean:.1f} of {sl.capacity} slots empty on average in the drain"
        )
    if sl.overflow_total_ns:
        lines.append(f"overflow: {sl.overflow_total_ns / 1e9:.2f} s of trajectory time beyond "
                     f"{sl.capacity} (peak {sl.peak_in_flight} in flight)")  # fmt: skip
    if a.engine_queue_ns is not None and a.llm_ns > 0:
        lines.append(f"engine queue {a.engine_queue_ns / 1e9:.2f} s "
                     f"({_pct(a.engine_queue_ns / a.llm_ns)} of generate time)")  # fmt: skip
    if not sl.stragglers:
        median = sl.median_duration_ns / 1e9
        lines.append(f"stragglers: none (none over {SLOW_FACTOR}x the median {median:.2f} s "
                     "in the drain)")  # fmt: skip
    else:
        lines.append(f"stragglers: {len(sl.stragglers)}, together "
                     f"{sl.straggler_cost_ns / 1e9:.2f} s of step time")  # fmt: skip
    console.print()
    for line in lines:
        console.print(line, markup=False, highlight=False)
    if not sl.stragglers:
        return
    t = table(["straggler", "duration", "cost", "trace id"], right=(1, 2))
    t.columns[3].min_width = 32
    late = sorted(sl.stragglers, key=lambda s: (-s.cost_ns, -s.duration_ns, s.trajectory_id))
    for s in late[:STRAGGLERS_SHOWN]:
        t.add_row(mid(s.trajectory_id, 24),
                  f"{s.duration_ns / 1e9:.2f}", f"{s.cost_ns / 1e9:.2f}",
                  s.trace_id)  # fmt: skip
    console.print(t)
    if len(late) > STRAGGLERS_SHOWN:
        console.print(f"and {len(late) - STRAGGLERS_SHOWN} more (see --format json)")
