"""The per-trajectory histograms, recorded when metrics are next collected.

The SDK cleans and hashes a record's attributes every time: most of what metrics cost a
trajectory. So the values wait here, packed (80 bytes a trajectory, with the exemplar's
ids), and the collecting thread records them first, through the in-flight gauge's
callback; ``force_flush`` and ``shutdown`` record them too. Past :data:`MAX_DEFERRED`
waiting, records are made at once: nothing is lost either way (docs/performance.md)."""

from __future__ import annotations

import threading
from array import array
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from otel_rollout import attributes as A
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._bands import DEFAULT_BANDS
from otel_rollout._base.errors import internal_error
from otel_rollout._base.fork import reset_in_child

#: Ended trajectories whose records may wait for the next collection.
MAX_DEFERRED = 20_000
#: The bands recorded, one ``rollout.phase`` value each (the registry's).
_BANDS = DEFAULT_BANDS.names
#: Values kept per trajectory: e2e, one per band, turns.
_WIDTH = 2 + len(_BANDS)
_LOW64 = (1 << 64) - 1
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
#: Distinct label sets whose attribute dicts are kept for reuse.
_MAX_LABEL_SETS = 4096

_Labels = tuple[dict[str, Any], tuple[dict[str, Any], ...]]


class TrajectoryHistograms:
    """``rollout.trajectory.duration``, ``.phase.duration`` and ``.turns``, and the
    ``rollout.processor.in_flight`` gauge per env class (``in_flight()``, running
    trajectories by env class, at each collection; 0 for a class seen before)."""

    def __init__(self, meter: metrics.Meter, in_flight: Callable[[], Mapping[str, int]]) -> None:
        self._duration = meter.create_histogram(
            A.METRIC_DURATION, unit="s", description="End-to-end time of a trajectory.",
            explicit_bucket_boundaries_advisory=list(A.DURATION_BUCKETS))  # fmt: skip
        self._phase_duration = meter.create_histogram(
            A.METRIC_PHASE_DURATION, unit="s",
            description="Time of a trajectory in each band (disjoint; the bands sum to e2e).",
            explicit_bucket_boundaries_advisory=list(A.DURATION_BUCKETS))  # fmt: skip
        self._turns = meter.create_histogram(
            A.METRIC_TURNS, unit="{turn}", description="Generate calls per trajectory.",
            explicit_bucket_boundaries_advisory=list(A.TURN_BUCKETS))  # fmt: skip
        self._in_flight = in_flight
        meter.create_observable_up_down_counter(
            A.METRIC_IN_FLIGHT,
            callbacks=[self._observe],
            unit="{trajectory}",
            description="Trajectories whose root has started and not yet ended, by env class.",
        )
        self._env_classes: dict[str, dict[str, str]] = {}  # seen: their attribute dicts
        self._label_sets: dict[tuple[Any, ...], _Labels] = {}
        self._reset()
        reset_in_child(self, TrajectoryHistograms._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._values = array("d")  # _WIDTH per trajectory
        self._ids = array("Q")  # trace id (high, low 64 bits), span id; zeros: not sampled
        self._labels: list[_Labels] = []

    @property
    def waiting(self) -> int:
        """Ended trajectories whose records wait for the next collection."""
        return len(self._labels)

    def add(self, bd: Breakdown, span_context: SpanContext) -> None:
        """The records of one ended trajectory (its root's span context for exemplars)."""
        labels = self._labels_of(bd)
        nanos = bd.nanos
        values = (bd.e2e, *[nanos[band] / 1e9 for band in _BANDS], bd.turns)
        sampled = span_context.trace_flags.sampled
        if len(self._labels) >= MAX_DEFERRED:
            self._record(values, labels, span_context if sampled else None)
            return
        tid = span_context.trace_id if sampled else 0
        ids = (tid >> 64, tid & _LOW64, span_context.span_id if sampled else 0)
        with self._lock:
            self._values.extend(values)
            self._ids.extend(ids)
            self._labels.append(labels)

    def record_waiting(self) -> int:
        """Record what waits; returns the number of trajectories recorded. Never raises."""
        with self._lock:
            values, ids, labels = self._values, self._ids, self._labels
            self._values, self._ids, self._labels = array("d"), array("Q"), []
        done = 0
        try:
            for i, label in enumerate(labels):
                high, low, span_id = ids[3 * i : 3 * i + 3]
                context = None
                if span_id:
                    context = SpanContext(high << 64 | low, span_id, False, _SAMPLED)
                self._record(values[_WIDTH * i : _WIDTH * (i + 1)], label, context)
                done += 1
        except Exception as exc:
            internal_error("recording the trajectory histograms", exc)
        return done

    def _observe(self, options: CallbackOptions) -> Iterable[Observation]:
        self.record_waiting()
        running = self._in_flight()
        seen = self._env_classes
        for env in running:
            if env not in seen and len(seen) < _MAX_LABEL_SETS:
                seen[env] = {A.ENV_CLASS: env}
        return [Observation(running.get(env, 0), attrs) for env, attrs in seen.items()]

    def _record(self, values: Any, labels: _Labels, span_context: SpanContext | None) -> None:
        base, per_band = labels
        ctx = None
        if span_context is not None:
            ctx = trace.set_span_in_context(NonRecordingSpan(span_context))
        self._duration.record(values[0], base, context=ctx)
        record = self._phase_duration.record
        for k, band_attrs in enumerate(per_band, 1):
            record(values[k], band_attrs, context=ctx)
        self._turns.record(int(values[-1]), base, context=ctx)

    def _labels_of(self, bd: Breakdown) -> _Labels:
        """The attribute dicts of a trajectory's records, built once per label set."""
        key = (bd.env_class, bd.model, bd.status)
        labels = self._label_sets.get(key)
        if labels is None:
            base = dict(bd.attributes)
            labels = (base, tuple({**base, A.PHASE: band} for band in _BANDS))
            if len(self._label_sets) < _MAX_LABEL_SETS:
                self._label_sets[key] = labels
        return labels
