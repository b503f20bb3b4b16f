"""The open batches of one breakdown processor (``processor.batches``), so a finished
trajectory reaches its batch, and the batch walls a step's account reads
(``processor.generation``): shared by the tracers using that processor (an integration's
own tracer included), never between processors, pipelines or tests."""

from __future__ import annotations

import threading
from collections import deque

from otel_rollout._accounting.batch_analysis import BatchAccumulator
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._base.fork import reset_in_child


class BatchRegistry:
    """Open batches by id: each an accumulator taking the breakdowns of its trajectories."""

    __slots__ = ("__weakref__", "_lock", "_open")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, BatchAccumulator] = {}
        reset_in_child(self, BatchRegistry._reset)

    def open(self, batch_id: str, accumulator: BatchAccumulator) -> None:
        """Deliver breakdowns of ``batch_id`` to ``accumulator`` until :meth:`close`."""
        with self._lock:
            self._open[batch_id] = accumulator

    def close(self, batch_id: str, accumulator: BatchAccumulator) -> None:
        """Stop delivering to ``accumulator`` (a later batch reusing the id keeps its own)."""
        with self._lock:
            if self._open.get(batch_id) is accumulator:
                del self._open[batch_id]

    def deliver(self, breakdown: Breakdown) -> bool:
        """Hand a finished trajectory's breakdown to its open batch; whether one took it."""
        batch_id = breakdown.batch_id
        acc = self._open.get(batch_id) if batch_id is not None else None
        if acc is None:
            return False
        acc.add(breakdown)
        return True

    def __len__(self) -> int:
        return len(self._open)

    def _reset(self) -> None:
        """In a forked child: the parent's open batches are not this process's."""
        self._lock = threading.Lock()
        self._open = {}


class GenerationLog:
    """The walls of a tracer's batches: open ones by id, and the latest closed ones
    (bounded), so a step can take the union of those inside it."""

    def __init__(self, maxlen: int = 4096) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}
        self._closed: deque[tuple[int, int]] = deque(maxlen=maxlen)

    def opened(self, batch_id: str, start_ns: int) -> None:
        with self._lock:
            self._open[batch_id] = start_ns

    def closed(self, batch_id: str, end_ns: int) -> None:
        with self._lock:
            start = self._open.pop(batch_id, None)
            if start is not None:
                self._closed.append((start, end_ns))

    def within(self, start_ns: int, end_ns: int) -> list[tuple[int, int]]:
        """Batch walls overlapping ``[start_ns, end_ns]``; open batches run to its end."""
        with self._lock:
            walls = [(s, e) for s, e in self._closed if e > start_ns and s < end_ns]
            walls.extend((s, end_ns) for s in self._open.values() if s < end_ns)
        return walls
