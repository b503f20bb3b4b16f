"""The step account: where one training step's wall went, in integer nanoseconds, one
level above a trajectory's breakdown (the rules: docs/step.md). At every instant the time
goes to one part: the active phase that started earliest (ties: the one ending later, then
the name), else ``generation`` while a batch of the step generates, else ``other``; the
parts sum to the step's wall exactly.

Samples taken in a step (buffer depth, GPU use) go on its span as parallel arrays
(:func:`series_attributes`), so a step picture can be drawn from the trace alone.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from otel_rollout import attributes as A
from otel_rollout._accounting.compute import union


class StepPhase(NamedTuple):
    """One macro-phase of a step: the trainer's name for it and its interval (epoch ns)."""

    name: str
    start_ns: int
    end_ns: int


class Segment(NamedTuple):
    """A stretch of the step owned by one part (a phase name, generation or other)."""

    part: str
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class StepAccount:
    """Where one step's wall went. ``parts_ns`` sums to ``wall_ns`` exactly."""

    step: int | None
    start_ns: int
    end_ns: int
    wall_ns: int
    #: Integer nanoseconds per part: phase names in order of first start, then
    #: ``generation`` and ``other`` (always present, possibly 0).
    parts_ns: Mapping[str, int]
    #: Plain sums of each phase's instances, unclipped: what the trainer's own timer
    #: reports (``timing/<name>``); more than the part where phases overlapped.
    phase_sum_ns: Mapping[str, int]
    #: Union of the batch walls inside the step, before phases took their share.
    generation_wall_ns: int
    #: The step's time line, in order: which part owned each stretch.
    timeline: tuple[Segment, ...] = field(default=(), repr=False)

    def frac(self, part: str) -> float:
        """The share of the wall that ``part`` holds (0.0 for an empty step)."""
        return self.parts_ns.get(part, 0) / self.wall_ns if self.wall_ns else 0.0

    @property
    def phases(self) -> tuple[str, ...]:
        """The trainer's phase names, in order of first start."""
        return tuple(p for p in self.parts_ns if p not in _FIXED)

    def part_at(self, t_ns: int) -> str | None:
        """The part owning instant ``t_ns`` (``None`` outside the step)."""
        for seg in self.timeline:
            if seg.start_ns <= t_ns < seg.end_ns:
                return seg.part
        return None

    def mean_by_part(self, samples: Iterable[tuple[int, float]]) -> dict[str, float]:
        """The mean of ``(time ns, value)`` samples per part owning their instant (parts
        without a sample left out)."""
        sums: dict[str, list[float]] = {}
        for t, value in samples:
            part = self.part_at(int(t))
            if part is not None:
                acc = sums.setdefault(part, [0.0, 0])
                acc[0] += float(value)
                acc[1] += 1
        return {part: total / n for part, (total, n) in sums.items()}

    def summary(self, *, prefix: str = "step/") -> dict[str, float]:
        """Tracker keys: ``{prefix}wall_time`` and, per part, ``{prefix}time/<part>``
        (seconds) and ``{prefix}frac/<part>``."""
        out: dict[str, float] = {f"{prefix}wall_time": self.wall_ns / 1e9}
        for part, ns in self.parts_ns.items():
            out[f"{prefix}time/{part}"] = ns / 1e9
            out[f"{prefix}frac/{part}"] = self.frac(part)
        return out

    def as_attributes(self) -> dict[str, Any]:
        """The account as step-span attributes: ``rollout.step.wall`` and
        ``rollout.step.time.<part>`` (seconds)."""
        out: dict[str, Any] = {A.STEP_WALL: self.wall_ns / 1e9}
        for part, ns in self.parts_ns.items():
            out[A.STEP_TIME_PREFIX + part] = ns / 1e9
        return out


#: Points a series keeps on the span; more are thinned evenly (first and last kept).
MAX_POINTS = 256
_FIXED = frozenset((A.STEP_PART_GENERATION, A.STEP_PART_OTHER))


def step_account(
    start_ns: int,
    end_ns: int,
    phases: Iterable[StepPhase | tuple[str, int, int]] = (),
    generation: Iterable[tuple[int, int]] = (),
    *,
    step: int | None = None,
) -> StepAccount:
    """The account of the step ``[start_ns, end_ns]`` from its ``(name, start, end)``
    phases and the ``(start, end)`` walls of its batches; a ValueError on an end before a
    start."""
    start_ns, end_ns = int(start_ns), int(end_ns)
    if end_ns < start_ns:
        raise ValueError(f"step ends before it starts: [{start_ns}, {end_ns}]")
    records = [StepPhase(str(n), int(s), int(e)) for n, s, e in phases]
    sums: dict[str, int] = {}
    for p in records:
        if p.end_ns < p.start_ns:
            raise ValueError(f"phase {p.name!r} ends before it starts: [{p.start_ns}, {p.end_ns}]")
        sums[p.name] = sums.get(p.name, 0) + p.end_ns - p.start_ns
    # (clipped start, -clipped end, name) orders ownership: the earliest start owns
    clipped = sorted(
        (max(p.start_ns, start_ns), -min(p.end_ns, end_ns), p.name)
        for p in records
        if min(p.end_ns, end_ns) > max(p.start_ns, start_ns)
    )
    gen = union(generation, start_ns, end_ns)
    bounds = sorted(
        {start_ns, end_ns}
        | {s for s, _, _ in clipped}
        | {-e for _, e, _ in clipped}
        | {t for iv in gen for t in iv}
    )
    timeline: list[Segment] = []
    heap: list[tuple[int, int, str]] = []
    i = j = 0
    for a, b in itertools.pairwise(bounds):
        while i < len(clipped) and clipped[i][0] <= a:
            heapq.heappush(heap, clipped[i])
            i += 1
        while heap and -heap[0][1] <= a:
            heapq.heappop(heap)
        while j < len(gen) and gen[j][1] <= a:
            j += 1
        if heap:
            part = heap[0][2]
        elif j < len(gen) and gen[j][0] <= a:
            part = A.STEP_PART_GENERATION
        else:
            part = A.STEP_PART_OTHER
        if timeline and timeline[-1].part == part:
            timeline[-1] = Segment(part, timeline[-1].start_ns, b)
        else:
            timeline.append(Segment(part, a, b))
    parts: dict[str, int] = {}
    for name in sorted(sums, key=lambda n: min(p.start_ns for p in records if p.name == n)):
        if name not in _FIXED:
            parts[name] = 0
    parts[A.STEP_PART_GENERATION] = 0
    parts[A.STEP_PART_OTHER] = 0
    for seg in timeline:
        parts[seg.part] += seg.end_ns - seg.start_ns
    return StepAccount(
        step, start_ns, end_ns, end_ns - start_ns, MappingProxyType(parts),
        MappingProxyType(sums), sum(e - s for s, e in gen), tuple(timeline),
    )  # fmt: skip


def _keys(name: str) -> tuple[str, str]:
    return f"{A.STEP_SERIES_PREFIX}{name}.offset_ns", f"{A.STEP_SERIES_PREFIX}{name}.value"


def series_attributes(
    name: str, samples: Sequence[tuple[int, float]], start_ns: int
) -> dict[str, Any]:
    """``samples`` (``(epoch ns, value)``, in time order) as the step span's attributes."""
    if not samples:
        return {}
    n = len(samples)
    if n > MAX_POINTS:
        picks = sorted({round(i * (n - 1) / (MAX_POINTS - 1)) for i in range(MAX_POINTS)})
        samples = [samples[i] for i in picks]
    offsets, values = _keys(name)
    vals = [v for _, v in samples]
    as_int = all(isinstance(v, int) and not isinstance(v, bool) for v in vals)
    return {
        offsets: [int(t) - start_ns for t, _ in samples],
        values: [int(v) for v in vals] if as_int else [float(v) for v in vals],
    }


def series_of(name: str, attributes: Mapping[str, Any], start_ns: int) -> list[tuple[int, float]]:
    """A series read back from a step span's attributes (empty when absent or malformed)."""
    offsets, values = _keys(name)
    ts, vs = attributes.get(offsets), attributes.get(values)
    if not ts or not vs or len(ts) != len(vs):
        return []
    try:
        return [(start_ns + int(t), float(v)) for t, v in zip(ts, vs, strict=True)]
    except (TypeError, ValueError):
        return []
