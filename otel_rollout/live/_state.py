"""What ``otel-rollout top`` knows about a run, bounded in memory (docs/live.md): finished
trajectories from the report's assembler, running ones from in-flight records or spans."""

from __future__ import annotations

import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from otel_rollout import attributes as A
from otel_rollout._accounting.batch_analysis import BatchAccumulator, BatchAnalysis
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._accounting.in_flight import InFlight, OpenStep
from otel_rollout.report._batches import BatchView
from otel_rollout.report._model import BatchSpan, RawSpan, ReadResult, TrajectoryTrace

#: Batches without a verdict kept at once, verdicts kept, trajectories per batch.
OPEN_BATCHES = 16
VERDICTS = 8
MAX_BATCH_TRAJECTORIES = 200_000


class LiveBatches:
    """Breakdowns by batch id; a batch gets its verdict when its batch span arrives."""

    def __init__(self) -> None:
        self._open: OrderedDict[str, BatchAccumulator] = OrderedDict()
        self._first_start: dict[str, int] = {}
        self.verdicts: deque[BatchView] = deque(maxlen=VERDICTS)
        self._closed: OrderedDict[str, None] = OrderedDict()
        self._cache: dict[str, tuple[int, BatchAnalysis]] = {}

    def add(self, bd: Breakdown) -> None:
        bid = bd.batch_id
        if bid is None or bid in self._closed:
            return
        acc = self._open.get(bid)
        if acc is None:
            acc = self._open[bid] = BatchAccumulator(bid, max_trajectories=MAX_BATCH_TRAJECTORIES)
            while len(self._open) > OPEN_BATCHES:
                self._first_start.pop(self._open.popitem(last=False)[0], None)
        acc.add(bd)
        self.saw_running([(bid, bd.start_time_ns)])

    def saw_running(self, batch_ids: Iterable[tuple[str, int]]) -> None:
        """Batches with trajectories started ((batch id, start)): the current one may have
        none finished yet."""
        for bid, start in batch_ids:
            if bid and bid not in self._closed:
                self._first_start[bid] = min(start, self._first_start.get(bid, start))

    def batch_span(self, span: BatchSpan) -> BatchView | None:
        """The batch ended: its verdict (None if none of its trajectories was seen)."""
        bid = span.batch_id
        if bid in self._closed:
            return None
        self._closed[bid] = None
        if len(self._closed) > 10 * VERDICTS:
            self._closed.popitem(last=False)
        acc = self._open.pop(bid, None)
        self._first_start.pop(bid, None)
        self._cache.pop(bid, None)
        if acc is None or not len(acc):
            return None
        acc.start_ns = span.start_ns
        acc.capacity = span.capacity
        view = BatchView(acc.analysis(), span.step)
        self.verdicts.append(view)
        return view

    def current(self) -> tuple[str, BatchAnalysis | None, int] | None:
        """The latest-started batch without a verdict: (id, analysis of its finished
        trajectories or None, its start ns), or None."""
        if not self._first_start:
            return None
        bid = max(self._first_start, key=lambda b: (self._first_start[b], b))
        start = self._first_start[bid]
        acc = self._open.get(bid)
        if acc is None or not len(acc):
            return bid, None, start
        n = len(acc)
        cached = self._cache.get(bid)
        if cached is None or cached[0] != n:
            acc.start_ns = start
            cached = self._cache[bid] = (n, acc.analysis())
        return bid, cached[1], start


#: Rows of finished trajectories kept for the bands of the last minutes.
MAX_ROWS = 500_000
#: Span trees kept: of the latest finished trajectories, and pinned for stragglers.
TREES = 256
PINNED_TREES = 64
#: Spans held for traces whose root has not arrived (their trees, the inferred running).
MAX_OPEN_SPANS = 200_000
MAX_SPANS_PER_TREE = 2000
#: Finished trajectories remembered (a listed running trajectory that has ended is dropped).
REMEMBERED = 200_000
#: An in-flight record older than this (its writer stopped writing them) no longer counts.
STALE_RECORD_NS = 30 * 10**9
WAITS = ("env_queue", A.LOOP_BLOCKED, A.LLM_QUEUE, A.LLM_PREFILL, A.LLM_DECODE)


@dataclass
class Process:
    """One writer: a process of the run (its resource)."""

    key: str
    service: str | None = None
    run_id: str | None = None
    host: str | None = None
    pid: int | None = None
    finished: int = 0
    e2e_ns: int = 0
    band_ns: list[int] = field(default_factory=lambda: [0] * len(A.ALL_BANDS))
    in_flight: InFlight | None = None


class Running(NamedTuple):
    """A running trajectory as shown: ``inferred`` when no in-flight record listed it."""

    trace_id: str
    trajectory_id: str
    env_class: str
    batch_id: str
    start_ns: int
    phase: str
    phase_start_ns: int
    process: str
    inferred: bool = False


#: (count, e2e ns, band ns, wait ns, trajectories with each wait known)
Window = tuple[int, int, list[int], list[int], list[int]]


def done_key(trace_id: str, trajectory_id: str) -> str:
    """A finished trajectory's key (trajectories nested under their batch span share one
    trace)."""
    return f"{trace_id}/{trajectory_id}"


class _Open:
    """The spans held of a trace whose root has not arrived, by parent span id."""

    __slots__ = ("children", "first_start", "last_end", "last_phase", "n", "process")

    def __init__(self, process: str) -> None:
        self.process = process
        self.children: dict[int | None, list[RawSpan]] = {}
        self.n = self.first_start = self.last_end = 0
        self.last_phase = ""


class LiveState:
    """Feed it spans, trajectories and records; read figures for the screen."""

    def __init__(self, clock_ns: Callable[[], int] = time.time_ns) -> None:
        self.clock_ns = clock_ns
        self.reset()

    def reset(self) -> None:
        """Forget every figure (the screen follows another run)."""
        self.processes: dict[str, Process] = {}
        self.finished_by_env: Counter[str] = Counter()
        self.errors = 0
        self.first_start_ns: int | None = None
        self.last_end_ns: int | None = None
        # (end ns, env, e2e ns, band ns, wait ns or -1 when not known)
        self.rows: deque[tuple[int, str, int, tuple[int, ...], tuple[int, ...]]] = deque(
            maxlen=MAX_ROWS
        )
        self.batches = LiveBatches()
        self._open: OrderedDict[str, _Open] = OrderedDict()
        self._open_spans = 0
        self.trees: OrderedDict[str, list[RawSpan]] = OrderedDict()
        self.pinned: OrderedDict[str, list[RawSpan]] = OrderedDict()
        #: the writers' loss records (spans lost before the file)
        self.export = ReadResult()
        self.demand: deque[int] = deque(maxlen=120)  # trajectories in generate, per tick
        self._done: OrderedDict[str, None] = OrderedDict()  # finished trajectories' keys

    @property
    def finished(self) -> int:
        return self.finished_by_env.total()

    # --- input ---------------------------------------------------------------------------
    def process(self, key: str, resource: dict[str, Any]) -> Process:
        p = self.processes.get(key)
        if p is None:
            pid = resource.get("process.pid")
            p = self.processes[key] = Process(
                key, resource.get("service.name"), resource.get("rollout.run.id"),
                resource.get("host.name"), pid if isinstance(pid, int) else None,
            )  # fmt: skip
        return p

    def span(self, span: RawSpan, process: str) -> None:
        """A span that is not a trajectory's root: held until its root arrives."""
        o = self._open.get(span.trace_id)
        if o is None:
            o = self._open[span.trace_id] = _Open(process)
        if o.n < MAX_SPANS_PER_TREE:
            o.children.setdefault(span.parent_id, []).append(span)
            o.n += 1
            self._open_spans += 1
        phase = span.attributes.get(A.PHASE)
        if phase is not None and span.end_ns is not None:
            if not o.first_start or span.start_ns < o.first_start:
                o.first_start = span.start_ns
            if span.end_ns >= o.last_end:
                o.last_end, o.last_phase = span.end_ns, str(phase)
        while self._open_spans > MAX_OPEN_SPANS and self._open:
            self._open_spans -= self._open.popitem(last=False)[1].n

    def take_tree(self, root: RawSpan) -> list[RawSpan]:
        """The spans held below ``root``, taken out of the hold; the trace's other spans
        stay (other trajectories of a step)."""
        o = self._open.get(root.trace_id)
        if o is None:
            return []
        out: list[RawSpan] = []
        stack = [root.span_id]
        while stack:
            kids = o.children.pop(stack.pop(), None)
            if kids:
                out.extend(kids)
                stack.extend(k.span_id for k in kids)
        o.n -= len(out)
        self._open_spans -= len(out)
        if root.parent_id is None or not o.children:
            self._open.pop(root.trace_id, None)
            self._open_spans -= o.n
        return out

    def trajectory(self, t: TrajectoryTrace, spans: list[RawSpan], process: str) -> None:
        """A finished trajectory (from the assembler) and its spans, root included."""
        b = t.breakdown
        key = done_key(b.trace_id, b.trajectory_id)
        self.trees[key], self._done[key] = spans, None
        if len(self.trees) > TREES:
            self.trees.popitem(last=False)
        if len(self._done) > REMEMBERED:
            self._done.popitem(last=False)
        nanos, w = b.nanos, b.waits_nanos
        bands = tuple(int(nanos.get(k, 0)) for k in A.ALL_BANDS)
        e2e = int(nanos.get("e2e", sum(bands)))
        waits = (int(nanos.get("env_queue", 0)),
                 *(int(w[k]) if k in w else -1 for k in WAITS[1:]))  # fmt: skip
        env = b.env_class or ""
        self.rows.append((b.end_time_ns, env, e2e, bands, waits))
        self.finished_by_env[env] += 1
        self.errors += b.status == A.STATUS_ERROR
        self.first_start_ns = min(self.first_start_ns or b.start_time_ns, b.start_time_ns)
        self.last_end_ns = max(self.last_end_ns or b.end_time_ns, b.end_time_ns)
        if (p := self.processes.get(process)) is not None:
            p.finished += 1
            p.e2e_ns += e2e
            p.band_ns = [x + y for x, y in zip(p.band_ns, bands, strict=True)]
        self.batches.add(b)

    def batch_span(self, span: BatchSpan) -> None:
        view = self.batches.batch_span(span)
        if view is None:
            return
        for s in view.analysis.stragglers[-PINNED_TREES // 4 :]:
            key = done_key(s.trace_id, s.trajectory_id)
            if key in self.trees:
                self.pinned[key] = self.trees[key]
        while len(self.pinned) > PINNED_TREES:
            self.pinned.popitem(last=False)

    def in_flight(self, process: str, snap: InFlight) -> None:
        p = self.processes.get(process)
        if p is None or (p.in_flight is not None and snap.time_ns < p.in_flight.time_ns):
            return
        p.in_flight = snap
        self.batches.saw_running((r.batch_id, r.start_ns) for r in snap.listed)
        starts = [r.start_ns for r in snap.listed]
        if starts:
            self.first_start_ns = min(self.first_start_ns or min(starts), *starts)

    def tick(self) -> None:
        """Once a refresh: sample the engine demand (trajectories in generate)."""
        records = self._records()
        if records:
            self.demand.append(sum(s.in_llm for _, s in records))

    # --- figures -------------------------------------------------------------------------
    def _records(self) -> list[tuple[Process, InFlight]]:
        """The writers' latest in-flight records that are not stale."""
        now = self.clock_ns()
        snaps = [(p, p.in_flight) for p in self.processes.values() if p.in_flight is not None]
        return [(p, s) for p, s in snaps if now - s.time_ns < STALE_RECORD_NS]

    def steps(self) -> list[OpenStep]:
        """The training step open in each writer (its latest fresh record), latest first."""
        found = [snap.step for _, snap in self._records() if snap.step is not None]
        return sorted(found, key=lambda st: -st.start_ns)

    def running(self) -> list[Running]:
        """Running trajectories: listed by the writers' latest records (minus those that
        ended since), then inferred ones from writers without records."""
        out = [Running(*r, p.key) for p, snap in self._records() for r in snap.listed
               if done_key(r.trace_id, r.trajectory_id) not in self._done]  # fmt: skip
        recorded = {p.key for p in self.processes.values() if p.in_flight is not None}
        for tid, o in self._open.items():
            if o.process not in recorded and o.first_start:
                phase = f"after {o.last_phase}" if o.last_phase else ""
                out.append(Running(tid, "", "", "", o.first_start, phase, o.last_end, o.process,
                                   inferred=True))  # fmt: skip
        return out

    def running_by_env(self) -> Counter[str]:
        """Running trajectories per env class (records count all, not only the listed)."""
        c: Counter[str] = Counter()
        for _, snap in self._records():
            c.update(snap.by_env)
            for r in snap.listed:  # ended since the record: no longer running
                if done_key(r.trace_id, r.trajectory_id) in self._done and c[r.env_class] > 0:
                    c[r.env_class] -= 1
        c = +c
        if inferred := sum(1 for r in self.running() if r.inferred):
            c["?"] += inferred
        return c

    def window(self, seconds: float, env: str | None = None) -> Window:
        """Over trajectories that ended in the last ``seconds`` (of the latest end seen):
        (count, e2e ns, band ns, wait ns, trajectories with each wait known)."""
        n = e2e = 0
        bands, waits, known = [0] * len(A.ALL_BANDS), [0] * len(WAITS), [0] * len(WAITS)
        since = (self.last_end_ns or 0) - int(seconds * 1e9)
        for end, row_env, row_e2e, row_bands, row_waits in reversed(self.rows):
            if end < since:
                break
            if env is not None and row_env != env:
                continue
            n += 1
            e2e += row_e2e
            bands = [x + y for x, y in zip(bands, row_bands, strict=True)]
            for i, v in enumerate(row_waits):
                if v >= 0:
                    waits[i] += v
                    known[i] += 1
        return n, e2e, bands, waits, known

    def rate(self, seconds: float = 60.0) -> float:
        """Trajectories finished per second over the last ``seconds`` (of wall time)."""
        now = self.clock_ns()
        since = now - int(seconds * 1e9)
        n = 0
        for row in reversed(self.rows):
            if row[0] < since:
                break
            n += 1
        return n / min(seconds, max(1e-9, (now - (self.first_start_ns or now)) / 1e9))

    def tree(self, trace_id: str, trajectory_id: str = "") -> tuple[list[RawSpan], bool] | None:
        """(spans held of the trajectory, whether its root has arrived), or None."""
        key = done_key(trace_id, trajectory_id)
        spans = self.trees.get(key) or self.pinned.get(key)
        if spans is not None:
            return spans, True
        o = self._open.get(trace_id)
        if o is None:
            return None
        return [x for kids in o.children.values() for x in kids], False
