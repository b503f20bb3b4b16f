"""The report's batch view: trajectories grouped by batch id, each batch analysed with
:func:`~otel_rollout.analyze_batch` (measured from its batch span when one was read), as
tables that fit an 80-column terminal and as JSON."""

from __future__ import annotations

from typing import Any

from otel_rollout import attributes as A
from otel_rollout._accounting.batch_accumulator import BatchAccumulator
from otel_rollout._accounting.batch_figures import BatchAnalysis
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout.report._model import BatchSpan, RawSpan

#: Batch spans remembered by a read; trajectories kept for batch analysis across batches.
MAX_BATCHES = 100_000
MAX_BATCH_TRAJECTORIES = 200_000
#: Batches shown with their own straggler table (the longest tails); all are in the JSON.
TABLES_SHOWN = 5
#: Stragglers listed per batch on the terminal.
STRAGGLERS_SHOWN = 10
LOSS_BATCH_FULL = "trajectories left out of the batch view: too many kept"


def batch_span(span: RawSpan) -> BatchSpan:
    step = span.attributes.get(A.STEP)
    return BatchSpan(
        str(span.attributes[A.BATCH_ID]),
        int(step) if isinstance(step, int) and not isinstance(step, bool) else None,
        span.start_ns,
        span.end_ns,
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

    def analyses(self, spans: dict[str, BatchSpan] | None = None) -> list[BatchView]:
        """One analysis per batch, measured from its batch span's start when read; by start."""
        out = []
        for batch_id, acc in self._groups.items():
            span = (spans or {}).get(batch_id)
            if span is not None:
                acc.start_ns = span.start_ns
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
    return {
        "batch_id": a.batch_id,
        "step": view.step,
        "trajectories": a.trajectories,
        "start_time_unix_nano": a.start_ns,
        "wall_time": _secs(a.wall_ns),
        "median_finish_time": _secs(a.median_finish_ns),
        "p90_finish_time": _secs(a.p90_finish_ns),
        "tail_time": _secs(a.tail_ns),
        "tail_frac": a.tail_frac,
        "tail_band_frac": dict(a.tail_band_frac),
        "dominant_tail_band": a.dominant_tail_band,
        "llm_concurrency_mean": a.llm_concurrency_mean,
        "llm_concurrency_max": a.llm_concurrency_max,
        "low_llm_demand_frac": a.low_llm_demand_frac,
        "stragglers": [
            {
                "trajectory_id": b.trajectory_id,
                "trace_id": b.trace_id,
                "env_class": b.env_class,
                "finish_time": _secs(b.end_time_ns - a.start_ns),
                "e2e": b.e2e,
                **{band: b.band(band) for band in A.ALL_BANDS},
            }
            for b in a.stragglers
        ],
        "summary": a.summary(),
    }


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def tail_spent_on(a: BatchAnalysis, top: int = 3) -> str:
    """``env 58%, llm 30%, other 12%``: the tail's bands, largest first."""
    bands = sorted(A.ALL_BANDS, key=lambda b: -a.tail_band_ns.get(b, 0))
    return ", ".join(
        f"{b} {_pct(a.tail_band_frac[b])}" for b in bands[:top] if a.tail_band_ns.get(b, 0) > 0
    )


def print_batches(console: Any, views: list[BatchView]) -> None:
    """An overview row per batch, then a straggler table for the longest tails."""
    if not views:
        return
    print_batches_overview(console, views)
    shown = sorted(views, key=lambda v: -v.analysis.tail_ns)[:TABLES_SHOWN]
    for v in sorted(shown, key=lambda v: v.analysis.start_ns):
        print_batch(console, v)
    if len(views) > len(shown):
        console.print(f"({len(views) - len(shown)} more batches: --format json has them all)")


def print_batches_overview(console: Any, views: list[BatchView], limit: int | None = None) -> None:
    """A row per batch (the first ``limit``, then "and N more")."""
    from rich import box
    from rich.table import Table

    t = Table(title="batches (seconds)", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    t.add_column("batch", overflow="fold", ratio=1)
    for h in ("n", "wall", "tail", "tail %", "tail band", "strag."):
        t.add_column(h, justify="right" if h != "tail band" else "left", no_wrap=True)
    for v in views[:limit]:
        a = v.analysis
        dom = a.dominant_tail_band
        band = f"{dom} {_pct(a.tail_band_frac[dom])}" if dom else "-"
        t.add_row(v.name, str(a.trajectories), f"{a.wall_ns / 1e9:.2f}",
                  f"{a.tail_ns / 1e9:.2f}", _pct(a.tail_frac), band,
                  str(len(a.stragglers)))  # fmt: skip
    console.print(t)
    if limit is not None and len(views) > limit:
        console.print(f"and {len(views) - limit} more (see --format json)")


def print_batch(console: Any, view: BatchView) -> None:
    """One batch: its figures in a few short lines and its stragglers with trace ids."""
    from rich import box
    from rich.table import Table

    a = view.analysis
    lines = [
        f"batch {view.name}: {a.trajectories} trajectories, wall {a.wall_ns / 1e9:.2f} s",
        f"median finish {a.median_finish_ns / 1e9:.2f} s, tail {a.tail_ns / 1e9:.2f} s "
        f"({_pct(a.tail_frac)} of wall)",
        f"tail spent on: {tail_spent_on(a) or 'nothing'}",
        f"llm concurrency mean {a.llm_concurrency_mean:.1f}, max {a.llm_concurrency_max}; "
        f"below 1/4 of max {_pct(a.low_llm_demand_frac)} of wall",
    ]
    t = Table(title="\n".join(lines), box=box.SIMPLE_HEAD, padding=(0, 1), title_justify="left",
              pad_edge=False)  # fmt: skip
    t.add_column("straggler", overflow="fold", ratio=3)
    t.add_column("env", overflow="fold", ratio=2)
    t.add_column("finish", justify="right", no_wrap=True, min_width=6)
    t.add_column("e2e", justify="right", no_wrap=True)
    t.add_column("trace id", no_wrap=True, min_width=32)
    late = list(reversed(a.stragglers))
    for b in late[:STRAGGLERS_SHOWN]:
        t.add_row(b.trajectory_id, str(b.env_class or "-"),
                  f"{(b.end_time_ns - a.start_ns) / 1e9:.2f}", f"{b.e2e:.2f}",
                  b.trace_id)  # fmt: skip
    console.print(t)
    if len(late) > STRAGGLERS_SHOWN:
        console.print(f"and {len(late) - STRAGGLERS_SHOWN} more (see --format json)")
