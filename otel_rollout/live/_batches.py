"""The batches ``otel-rollout top`` follows: the current one as it forms, the last ones'
verdicts. Each is analysed by :func:`~otel_rollout.analyze_batch` (what ``report`` uses),
measured from its batch span's start once that has arrived (a batch span ends after its
trajectories), so a finished batch's figures equal ``report``'s. Bounded: a few open
batches and a few verdicts are kept; older ones are forgotten."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable

from otel_rollout._accounting.batch_accumulator import BatchAccumulator
from otel_rollout._accounting.batch_figures import BatchAnalysis
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout.report._batches import BatchView
from otel_rollout.report._model import BatchSpan

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
        self.forgotten = 0

    def add(self, bd: Breakdown) -> None:
        bid = bd.batch_id
        if bid is None or bid in self._closed:
            return
        acc = self._open.get(bid)
        if acc is None:
            acc = self._open[bid] = BatchAccumulator(bid, max_trajectories=MAX_BATCH_TRAJECTORIES)
            while len(self._open) > OPEN_BATCHES:
                old, _ = self._open.popitem(last=False)
                self._first_start.pop(old, None)
                self.forgotten += 1
        acc.add(bd)
        first = self._first_start.get(bid)
        if first is None or bd.start_time_ns < first:
            self._first_start[bid] = bd.start_time_ns

    def saw_running(self, batch_ids: Iterable[tuple[str, int]]) -> None:
        """Batches with running trajectories ((batch id, start)): the current one may have
        none finished yet."""
        for bid, start in batch_ids:
            if not bid or bid in self._closed:
                continue
            first = self._first_start.get(bid)
            if first is None or start < first:
                self._first_start[bid] = start

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
