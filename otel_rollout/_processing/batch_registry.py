"""The open batches of one breakdown processor, so a finished trajectory reaches its batch.

A batch scope opens its accumulator here when its block starts and closes it when the
block ends; the processor delivers each breakdown that carries a batch id. The registry
belongs to a :class:`~otel_rollout.BreakdownProcessor` (``processor.batches``) and is
handed to the scopes of the tracer that uses that processor: nothing is shared between
processors, pipelines or tests.
"""

from __future__ import annotations

import threading

from otel_rollout._accounting.batch_accumulator import BatchAccumulator
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
