"""The report's step view: each step's account recomputed from its spans (docs/step.md),
with the slot account of the batches that generated in it, as lines and as JSON."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from otel_rollout import attributes as A
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._accounting.slots import EMPTY, slot_account
from otel_rollout._accounting.step_account import StepAccount, series_of, step_account

#: Step spans a read remembers, and phase spans per step.
MAX_STEPS = 100_000
MAX_PHASES_PER_STEP = 10_000


@dataclass
class StepRecord:
    """A step span read back, with its phases (``(name, start ns, end ns)``)."""

    trace_id: str
    span_id: int
    number: int | None
    trainer: str | None
    start_ns: int
    end_ns: int
    run_id: str | None = None
    phases: list[tuple[str, int, int]] = field(default_factory=list)
    #: samples taken during the step (``buffer_depth``, ``gpu_utilization``): (ns, value)
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    #: the step's async health as its span carries it (``rollout.async.<key>``)
    health: dict[str, Any] = field(default_factory=dict)
    #: mean GPU utilisation sampled in the step (key ``""``) and per part, where sampled
    gpu: dict[str, float] = field(default_factory=dict)


def _int(value: Any) -> int | None:
    return value if value.__class__ is int else None


def _gpu_of(attrs: Any) -> dict[str, float]:
    """``rollout.step.gpu.utilization[.<part>]``: key ``""`` for the step's mean."""
    key = A.STEP_GPU_UTILIZATION
    out = {}
    for k, v in attrs.items():
        if (k == key or k.startswith(key + ".")) and isinstance(v, (int, float)):
            out[k[len(key) + 1 :]] = float(v)
    return out


class StepSpans:
    """Step spans and step-phase spans as a read meets them (in any order); bounded."""

    def __init__(self) -> None:
        self.steps: dict[tuple[str, int], StepRecord] = {}
        #: phases whose step span was not read (yet): by (trace id, parent span id)
        self._orphans: dict[tuple[str, int], list[tuple[str, int, int]]] = {}
        self.dropped = 0

    def __len__(self) -> int:
        return len(self.steps)

    def add(self, span: Any) -> bool:
        """Keep ``span`` if it is a step or a step's phase; returns whether it was one."""
        attrs = span.attributes
        if span.end_ns is None:
            return False
        if A.STEP_WALL in attrs and span.parent_id is None:
            key = (span.trace_id, span.span_id)
            if key not in self.steps and len(self.steps) >= MAX_STEPS:
                self.dropped += 1
                return True
            record = StepRecord(
                span.trace_id, span.span_id, _int(attrs.get(A.STEP)),
                None if attrs.get(A.STEP_TRAINER) is None else str(attrs[A.STEP_TRAINER]),
                span.start_ns, span.end_ns, span.run_id,
            )  # fmt: skip
            record.phases = self._orphans.pop(key, [])
            record.gpu = _gpu_of(attrs)
            cut = len(A.ASYNC_PREFIX)
            record.health = {k[cut:]: v for k, v in attrs.items() if k.startswith(A.ASYNC_PREFIX)}
            for name in (A.SERIES_BUFFER_DEPTH, A.SERIES_GPU_UTILIZATION):
                points = series_of(name, attrs, span.start_ns)
                if points:
                    record.series[name] = points
            self.steps[key] = record
            return True
        name = attrs.get(A.STEP_PHASE)
        if name is None or span.parent_id is None:
            return False
        key = (span.trace_id, span.parent_id)
        phases = self.steps[key].phases if key in self.steps else self._orphans.get(key)
        if phases is None:
            if len(self._orphans) >= MAX_STEPS:
                self.dropped += 1
                return True
            phases = self._orphans[key] = []
        if len(phases) < MAX_PHASES_PER_STEP:
            phases.append((str(name), span.start_ns, span.end_ns))
        else:
            self.dropped += 1
        return True


#: Steps listed on the terminal (the slowest); all are in the JSON.
STEPS_SHOWN = 5
WIDTH = 80


@dataclass(frozen=True)
class StepView:
    """One step's account, its number and trace, and the empty share of its batches' slots
    (``None`` when no batch with trajectories generated in it)."""

    account: StepAccount
    trainer: str | None
    trace_id: str
    slots_empty_frac: float | None = None
    #: the batches that generated in the step: (batch id, start ns, end ns)
    batches: tuple[tuple[str, int, int], ...] = ()
    #: samples taken during the step (``buffer_depth``, ``gpu_utilization``)
    series: Mapping[str, Sequence[tuple[int, float]]] = field(default_factory=dict)
    #: the async health its span carries (``keep_rate``, ``staleness_max``...)
    health: Mapping[str, Any] = field(default_factory=dict)
    #: mean GPU utilisation sampled in the step (key ``""``) and per part, where sampled
    gpu: Mapping[str, float] = field(default_factory=dict)


def step_views(
    steps: StepSpans | None,
    batch_spans: Mapping[str, Any] | None = None,
    breakdowns_of: Mapping[str, Sequence[Breakdown]] | None = None,
) -> list[StepView]:
    """Each step's account, by start. Its generation is the walls of the batch spans read
    that overlap it (``batch_spans``: id -> span with ``start_ns``/``end_ns``); the slot
    share is over those batches' trajectories (``breakdowns_of``: id -> breakdowns)."""
    if not steps:
        return []
    batches = [(bid, b.start_ns, b.end_ns) for bid, b in (batch_spans or {}).items() if b.end_ns]
    declared = {bid: getattr(b, "capacity", None) for bid, b in (batch_spans or {}).items()}
    out = []
    for rec in sorted(steps.steps.values(), key=lambda r: (r.start_ns, r.trace_id)):
        inside = [(bid, s, e) for bid, s, e in batches if e > rec.start_ns and s < rec.end_ns]
        account = step_account(
            rec.start_ns, rec.end_ns, rec.phases, [(s, e) for _, s, e in inside], step=rec.number
        )
        out.append(StepView(account, rec.trainer, rec.trace_id,
                            slots_empty(inside, breakdowns_of or {}, declared), tuple(inside),
                            dict(rec.series), dict(rec.health), dict(rec.gpu)))  # fmt: skip
    return out


def slots_empty(
    batches: Iterable[tuple[str, int, int]],
    breakdowns_of: Mapping[str, Sequence[Breakdown]],
    declared: Mapping[str, int | None] | None = None,
) -> float | None:
    """Empty slot-nanoseconds over the capacity of the batches' slot accounts together
    (each with its declared concurrency, ``declared``: id -> capacity, else its peak)."""
    empty = capacity = 0
    for bid, start, _ in batches:
        bds = breakdowns_of.get(bid)
        if not bds:
            continue
        acc = slot_account(bds, start_ns=start, capacity=(declared or {}).get(bid))
        empty += acc.slot_ns[EMPTY]
        capacity += acc.capacity_ns
    return empty / capacity if capacity else None


def _pct(frac: float) -> str:
    return f"{100 * frac:.0f}%"


def step_text(view: StepView, head: str | None = None, width: int = WIDTH) -> str:
    """``step 12: 41.2 s; generation 62% (slots 18% empty), run_training 30%, +2 more``:
    parts by share (under half a percent left out), as many as fit ``width`` whole, and
    how many more there are."""
    a = view.account
    name = head or (f"step {a.step}" if a.step is not None else "step")
    line = f"{name}: {a.wall_ns / 1e9:.1f} s"
    parts = sorted(((a.frac(p), p) for p in a.parts_ns if a.frac(p) >= 0.005), reverse=True)
    texts = []
    for frac, part in parts:
        text = f"{part} {_pct(frac)}"
        if part == A.STEP_PART_GENERATION and view.slots_empty_frac is not None:
            text += f" (slots {_pct(view.slots_empty_frac)} empty)"
        texts.append(text)
    for k in range(len(texts), -1, -1):  # the most parts that fit with the count of the rest
        shown = texts[:k] + ([f"+{len(texts) - k} more"] if k < len(texts) else [])
        candidate = line + ("; " + ", ".join(shown) if shown else "")
        if len(candidate) <= width:
            return candidate
    return line


def step_line(views: Sequence[StepView]) -> str | None:
    """The verdict's step line: the one step, else the slowest, named as such (the
    ``steps`` section lists the slowest five)."""
    if not views:
        return None
    if len(views) == 1:
        return step_text(views[0])
    worst = max(views, key=lambda v: v.account.wall_ns)
    num = f" {worst.account.step}" if worst.account.step is not None else ""
    return step_text(worst, f"slowest step{num} (of {len(views)})")


def print_steps(console: Any, views: Sequence[StepView]) -> None:
    """A line per step, the slowest :data:`STEPS_SHOWN` in time order (one step is the
    verdict's line already)."""
    if len(views) < 2:
        return
    shown = sorted(views, key=lambda v: -v.account.wall_ns)[:STEPS_SHOWN]
    title = f"steps: {len(views)}" + (f" (the {len(shown)} slowest)" if len(views) > len(shown)
                                      else "")  # fmt: skip
    console.print(title, style="bold", markup=False, highlight=False)
    for v in sorted(shown, key=lambda v: v.account.start_ns):
        console.print("  " + step_text(v, width=WIDTH - 2), markup=False, highlight=False)
    console.print()


def step_dict(view: StepView) -> dict[str, Any]:
    """A step's figures for ``--format json``: integer nanoseconds and shares."""
    a = view.account
    return {
        "step": a.step,
        "trainer": view.trainer,
        "trace_id": view.trace_id,
        "start_ns": a.start_ns,
        "wall_ns": a.wall_ns,
        "parts_ns": dict(a.parts_ns),
        "parts_frac": {p: a.frac(p) for p in a.parts_ns},
        "phase_sum_ns": dict(a.phase_sum_ns),
        "generation_wall_ns": a.generation_wall_ns,
        "slots_empty_frac": view.slots_empty_frac,
        "async": dict(view.health),
        "gpu_utilization": view.gpu.get(""),
        "gpu_utilization_by_part": {p: u for p, u in view.gpu.items() if p},
    }
