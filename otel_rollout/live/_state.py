"""What ``otel-rollout top`` knows about a run, updated as spans arrive, bounded in memory.

Finished trajectories come from the report's assembler (the same breakdown function as
the online processor); running ones from the writers' in-flight records, or, for a
writer that writes none, inferred from the phase spans of traces whose root has not
arrived. Everything kept is bounded: a window of compact rows of recent trajectories,
a few batches, the span trees of the latest trajectories and of the last stragglers.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from otel_rollout import attributes as A
from otel_rollout._accounting.in_flight import InFlight
from otel_rollout.live._batches import LiveBatches
from otel_rollout.report._model import BatchSpan, RawSpan, TrajectoryTrace

#: Rows of finished trajectories kept for the bands of the last minutes.
MAX_ROWS = 500_000
#: Span trees kept: of the latest finished trajectories, and pinned for stragglers.
TREES = 256
PINNED_TREES = 64
#: Spans held for traces whose root has not arrived (their trees, the inferred running).
MAX_OPEN_SPANS = 200_000
MAX_SPANS_PER_TREE = 2000
#: Finished trace ids remembered (a listed running trajectory that has ended is dropped).
REMEMBERED = 200_000
#: An in-flight record older than this (its writer stopped writing them: killed, or shut
#: down before its last trajectories ended) no longer counts.
STALE_RECORD_NS = 30 * 10**9
WAITS = ("env_queue", A.LOOP_BLOCKED, A.LLM_QUEUE, A.LLM_PREFILL, A.LLM_DECODE)
_BAND_KEYS = A.ALL_BANDS


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
    band_ns: list[int] = field(default_factory=lambda: [0] * len(_BAND_KEYS))
    in_flight: InFlight | None = None
    in_flight_at: float = 0.0  # monotonic time the latest record arrived


@dataclass(frozen=True)
class Running:
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
    """A finished trajectory's key: its trace id alone is not enough when trajectories
    nest under their batch span (one trace per step)."""
    return f"{trace_id}/{trajectory_id}"


class _Open:
    __slots__ = ("children", "first_start", "last_end", "last_phase", "n", "process")

    def __init__(self, process: str) -> None:
        self.process = process
        #: parent span id -> the spans held below it (a trajectory's tree is taken out of
        #: here, by its root's span id, when the root arrives)
        self.children: dict[int | None, list[RawSpan]] = {}
        self.n = 0
        self.first_start = 0
        self.last_end = 0
        self.last_phase = ""


class LiveState:
    """Feed it spans, trajectories and records; read figures for the screen."""

    def __init__(self, clock_ns: Callable[[], int] = time.time_ns) -> None:
        self.clock_ns = clock_ns
        self.processes: dict[str, Process] = {}
        self.finished_by_env: Counter[str] = Counter()
        self.finished = 0
        self.errors = 0
        self.first_start_ns: int | None = None
        self.last_end_ns: int | None = None
        # (end ns, env, e2e ns, 5 bands ns, 5 waits ns or -1)
        self.rows: deque[tuple[int, str, int, tuple[int, ...], tuple[int, ...]]] = deque(
            maxlen=MAX_ROWS
        )
        self.batches = LiveBatches()
        self._open: OrderedDict[str, _Open] = OrderedDict()
        self._open_spans = 0
        self.trees: OrderedDict[str, list[RawSpan]] = OrderedDict()
        self.pinned: OrderedDict[str, list[RawSpan]] = OrderedDict()
        self._done: OrderedDict[str, None] = OrderedDict()
        #: spans the writers counted lost before the file, per writer and reason
        self.writer_losses: dict[str, dict[str, int]] = {}
        self.demand: deque[int] = deque(maxlen=120)  # trajectories in generate, per tick
        self.trees_cut = 0

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
        """A span that is not a trajectory's root: held until its trajectory's root
        arrives (its tree, and the running trajectory it shows meanwhile)."""
        tid = span.trace_id
        o = self._open.get(tid)
        if o is None:
            o = self._open[tid] = _Open(process)
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
            _, old = self._open.popitem(last=False)
            self._open_spans -= old.n
            self.trees_cut += 1

    def take_tree(self, root: RawSpan) -> list[RawSpan]:
        """The spans held below ``root`` (a trajectory's root that just arrived), taken
        out of the hold; the trace's other spans stay (other trajectories of a step)."""
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
        self.trees[key] = spans
        if len(self.trees) > TREES:
            self.trees.popitem(last=False)
        self._done[key] = None
        if len(self._done) > REMEMBERED:
            self._done.popitem(last=False)
        nanos = b.nanos
        bands = tuple(int(nanos.get(k, 0)) for k in _BAND_KEYS)
        e2e = int(nanos.get("e2e", sum(bands)))
        w = b.waits_nanos
        waits = (int(nanos.get("env_queue", 0)),
                 *(int(w[k]) if k in w else -1 for k in WAITS[1:]))  # fmt: skip
        env = b.env_class or ""
        self.rows.append((b.end_time_ns, env, e2e, bands, waits))
        self.finished += 1
        self.finished_by_env[env] += 1
        if b.status == A.STATUS_ERROR:
            self.errors += 1
        if self.first_start_ns is None or b.start_time_ns < self.first_start_ns:
            self.first_start_ns = b.start_time_ns
        if self.last_end_ns is None or b.end_time_ns > self.last_end_ns:
            self.last_end_ns = b.end_time_ns
        p = self.processes.get(process)
        if p is not None:
            p.finished += 1
            p.e2e_ns += e2e
            for i, v in enumerate(bands):
                p.band_ns[i] += v
        self.batches.add(b)

    def batch_span(self, span: BatchSpan) -> None:
        view = self.batches.batch_span(span)
        if view is None:
            return
        for s in view.analysis.stragglers[-PINNED_TREES // 4 :]:
            key = done_key(s.trace_id, s.trajectory_id)
            spans = self.trees.get(key)
            if spans is not None:
                self.pinned[key] = spans
        while len(self.pinned) > PINNED_TREES:
            self.pinned.popitem(last=False)

    def in_flight(self, process: str, snap: InFlight, received_at: float) -> None:
        p = self.processes.get(process)
        if p is None or (p.in_flight is not None and snap.time_ns < p.in_flight.time_ns):
            return
        p.in_flight, p.in_flight_at = snap, received_at
        self.batches.saw_running((r.batch_id, r.start_ns) for r in snap.listed)
        starts = [r.start_ns for r in snap.listed]
        if starts and (self.first_start_ns is None or min(starts) < self.first_start_ns):
            self.first_start_ns = min(starts)

    def losses(self, writer: str, counts: dict[str, int]) -> None:
        latest = self.writer_losses.setdefault(writer, {})
        for why, n in counts.items():
            if n > latest.get(why, 0):
                latest[why] = n

    def tick(self) -> None:
        """Once a refresh: sample the engine demand (trajectories in generate)."""
        records = self._records()
        if records:
            self.demand.append(sum(s.in_llm for _, s in records))

    # --- figures -------------------------------------------------------------------------
    def _records(self) -> list[tuple[Process, InFlight]]:
        """The writers' latest in-flight records that are not stale."""
        now = self.clock_ns()
        out = []
        for p in self.processes.values():
            if p.in_flight is not None and now - p.in_flight.time_ns < STALE_RECORD_NS:
                out.append((p, p.in_flight))
        return out

    @property
    def has_records(self) -> bool:
        return any(p.in_flight is not None for p in self.processes.values())

    def running(self) -> list[Running]:
        """Running trajectories: listed by the writers' latest records (minus those that
        ended since), then inferred ones from writers without records."""
        out: list[Running] = []
        recorded = set()
        for p in self.processes.values():
            if p.in_flight is not None:
                recorded.add(p.key)
        for p, snap in self._records():
            for r in snap.listed:
                if done_key(r.trace_id, r.trajectory_id) not in self._done:
                    out.append(Running(r.trace_id, r.trajectory_id, r.env_class, r.batch_id,
                                       r.start_ns, r.phase, r.phase_start_ns, p.key))  # fmt: skip
        for tid, o in self._open.items():
            if o.process in recorded or not o.first_start:
                continue
            out.append(Running(tid, "", "", "", o.first_start, "", o.last_end, o.process,
                               inferred=True))  # fmt: skip
            out[-1] = _after(out[-1], o.last_phase)
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
        inferred = sum(1 for r in self.running() if r.inferred)
        if inferred:
            c["?"] += inferred
        return c

    def window(self, seconds: float, env: str | None = None) -> Window:
        """Over trajectories that ended in the last ``seconds`` (of the latest end seen):
        (count, e2e ns, band ns, wait ns, trajectories with each wait known)."""
        n, e2e = 0, 0
        bands = [0] * len(_BAND_KEYS)
        waits = [0] * len(WAITS)
        known = [0] * len(WAITS)
        if self.last_end_ns is None:
            return n, e2e, bands, waits, known
        since = self.last_end_ns - int(seconds * 1e9)
        for end, row_env, row_e2e, row_bands, row_waits in reversed(self.rows):
            if end < since:
                break
            if env is not None and row_env != env:
                continue
            n += 1
            e2e += row_e2e
            for i, v in enumerate(row_bands):
                bands[i] += v
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
        span = min(seconds, max(1e-9, (now - (self.first_start_ns or now)) / 1e9))
        return n / span if span > 0 else 0.0

    def tree(self, trace_id: str, trajectory_id: str = "") -> tuple[list[RawSpan], bool] | None:
        """(spans held of the trajectory, whether its root has arrived), or None."""
        key = done_key(trace_id, trajectory_id)
        for held in (self.trees, self.pinned):
            if key in held:
                return held[key], True
        o = self._open.get(trace_id)
        if o is None:
            return None
        return [x for kids in o.children.values() for x in kids], False


def _after(r: Running, last_phase: str) -> Running:
    from dataclasses import replace

    return replace(r, phase=f"after {last_phase}" if last_phase else "")
