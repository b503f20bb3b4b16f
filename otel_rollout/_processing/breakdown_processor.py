"""The span processor that turns each trajectory's spans into a :class:`Breakdown`."""

from __future__ import annotations

import logging
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from opentelemetry import metrics
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode

from otel_rollout import attributes as A
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._accounting.compute import root_breakdown, sequential_breakdown
from otel_rollout._accounting.waits import add_engine, engine_ns
from otel_rollout._base import limits
from otel_rollout._base.errors import internal_error
from otel_rollout._base.fork import reset_in_child
from otel_rollout._processing.batch_registry import BatchRegistry
from otel_rollout._processing.histograms import TrajectoryHistograms
from otel_rollout._version import __version__

_log = logging.getLogger("otel_rollout")
BreakdownSink = Callable[[Breakdown], Any]
_TRAJECTORY_ID = A.TRAJECTORY_ID
_PHASE = A.PHASE
_PHASE_LLM = A.PHASE_LLM
#: The engine's timings on a generate span (most have none: engine_ns is not called).
_ENGINE_KEYS = frozenset((A.VLLM_TIME_IN_QUEUE, A.VLLM_TIME_IN_PREFILL, A.VLLM_TIME_IN_DECODE))
#: A SpanContext is a tuple: its span id by index, not through the property (a call).
_SPAN_ID = 1
#: A trajectory's phases at its end: (name, start, end) triples, or for a sequential loop
#: its flat (band index, start, end) triples and the sums per band.
_Phases = list[tuple[str, int, int]] | tuple[array, list[int]]
_EMPTY: Mapping[str, Any] = MappingProxyType({})
#: Distinct custom phase names remembered; beyond this they are accounted as one (other).
_MAX_PHASE_NAMES = 1024
_OVERFLOW_PHASE = "_custom"
#: Phase codes below this are the bands, in A.BANDS order (the first phase names).
_N_BANDS = len(A.BANDS)
#: Trajectories evicted for their age by one trajectory start, at most.
_AGE_EVICTIONS = 64
#: The instrumentation scope of :class:`~otel_rollout.RolloutTracer`'s spans.
SCOPE_NAME = "otel_rollout"


def _reasons(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {why}" for why, n in counts.items())


def _plain_attributes(span: ReadableSpan) -> Mapping[str, Any]:
    """A span's attributes, as the SDK's plain dict when it has one.

    ``span.attributes`` is a read-only view (a new one on each read of an ended span) over
    BoundedAttributes, a Mapping whose ``in``/``get``/``len`` are Python methods; the hooks
    below run for every span, so they read the dict underneath.
    """
    try:
        return span._attributes._dict  # type: ignore[attr-defined]
    except AttributeError:
        return span.attributes or _EMPTY


class _Trajectory:
    __slots__ = (
        "attrs", "breakdown", "engine", "initial", "last_end", "open_ids", "phases", "root_id",
        "start_ns", "sums", "trace_id",
    )  # fmt: skip

    def __init__(self, root_id: int, trace_id: int, start_ns: int, attrs: Any) -> None:
        self.root_id = root_id
        self.trace_id = trace_id
        self.start_ns = start_ns
        self.attrs = attrs  # the root's attributes (a live view)
        # as they were at the start: what the span attribute limit evicts later stays here
        self.initial = dict(attrs)
        # flat (phase code, start ns, end ns) triples of the ended outermost phases:
        # 24 bytes a phase instead of a tuple of boxed ints
        self.phases: array[int] = array("q")
        #: its open descendant spans in the processor's open map: removing a trajectory
        #: touches only these, never the whole map
        self.open_ids: set[int] = set()
        self.breakdown: Breakdown | None = None
        self.engine: list[int] | None = None  # engine timings of its generate calls
        #: while its phases are a sequential loop of band phases (each non-empty, starting
        #: at or after the end of the one before, which ``last_end`` is): their lengths
        #: summed per band, which are then the bands; None once they are not
        self.sums: list[int] | None = [0] * _N_BANDS
        self.last_end = start_ns

    @property
    def n_open(self) -> int:
        return len(self.open_ids)


class BreakdownProcessor(SpanProcessor):
    """Derives an exact per-trajectory time breakdown from the spans as they end.

    Install it on the ``TracerProvider`` (before the export processor) and hand it to
    :class:`~otel_rollout.RolloutTracer` (``RolloutTracer(provider, processor=p)``). It sees
    every recorded span, sampled or RECORD_ONLY; the tracer ends each trajectory's root
    through :meth:`finish`, which writes the breakdown onto the root; when the root ends
    the processor records the histograms and calls ``on_breakdown``.

    State is bounded: at most ``max_in_flight`` trajectories are tracked, and those older
    than ``max_age_s`` are evicted; evictions are counted in ``rollout.processor.evicted``.
    Hooks never raise into the caller.
    """

    def __init__(
        self,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        on_breakdown: BreakdownSink | Iterable[BreakdownSink] | None = None,
        bands: Mapping[str, str] | None = None,
        max_in_flight: int = 100_000,
        max_age_s: float = 24 * 3600.0,
        record_metrics: bool = True,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight!r}")
        if max_age_s <= 0:
            raise ValueError(f"max_age_s must be positive seconds, got {max_age_s!r}")
        if bands:
            for phase, band in bands.items():
                if band not in A.ALL_BANDS:
                    raise ValueError(
                        f"bands[{phase!r}] = {band!r}: expected one of {', '.join(A.ALL_BANDS)}"
                    )
        if on_breakdown is None:
            self._sinks: list[BreakdownSink] = []
        elif callable(on_breakdown):
            self._sinks = [on_breakdown]
        else:
            self._sinks = list(on_breakdown)
        self._bands = dict(bands) if bands else None
        self._max_in_flight = max_in_flight
        self._max_age_ns = int(max_age_s * 1e9)
        self._lock = threading.Lock()
        # oldest first: the next to evict is at the front, found and removed in O(1)
        self._trajs: OrderedDict[int, _Trajectory] = OrderedDict()
        # open span id -> (trajectory, outermost phase so far, start if a top-level phase)
        self._open: dict[int, tuple[_Trajectory, str | None, int | None]] = {}
        self._phase_names: list[str] = [*A.BANDS, _OVERFLOW_PHASE]
        self._phase_codes = {name: i for i, name in enumerate(self._phase_names)}
        self.evicted = 0  # trajectories evicted, never measured
        self.evicted_by_reason: dict[str, int] = {}
        self._next_eviction_log = 1
        meter = (meter_provider or metrics.get_meter_provider()).get_meter(
            "otel_rollout", __version__
        )
        self._evicted_counter = meter.create_counter(
            A.METRIC_EVICTED,
            unit="{trajectory}",
            description="Trajectories dropped from the processor's state before their root ended.",
        )
        #: The histograms (None with ``record_metrics=False``); their records wait for the
        #: next metric collection, made by the collecting thread.
        self.histograms = (
            TrajectoryHistograms(meter, lambda: self.in_flight) if record_metrics else None
        )
        #: The open batches of the tracers using this processor (their breakdowns go there).
        self.batches = BatchRegistry()
        reset_in_child(self, BreakdownProcessor._reset)
        limits.quiet_sdk_drop_warnings()  # one line with a count instead (limits.keep)

    # --- public ---------------------------------------------------------------------------
    def add_sink(self, sink: BreakdownSink) -> None:
        """Also call ``sink(breakdown)`` for every finished trajectory."""
        self._sinks.append(sink)

    @property
    def in_flight(self) -> int:
        """Trajectories whose root has started and not yet ended."""
        return len(self._trajs)

    # --- SpanProcessor ----------------------------------------------------------------------
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            try:  # the SDK span's fields: its properties are Python calls, and this runs
                raw = span._attributes._dict  # type: ignore[attr-defined]  # for every span
                parent, ctx, start = span._parent, span._context, span._start_time
            except AttributeError:
                raw, parent = span.attributes or _EMPTY, span.parent
                ctx, start = span.get_span_context(), span.start_time
            if _TRAJECTORY_ID in raw:
                self._start_root(span)
                return
            if parent is None:
                return
            entry = self._open.get(parent[_SPAN_ID])
            if entry is None:
                return
            traj, outer, _ = entry
            if outer is None:
                phase = raw.get(_PHASE)
                new = (traj, None, None) if phase is None else (traj, phase, start)
            else:
                new = (traj, outer, None)
            sid = ctx[_SPAN_ID]
            with self._lock:
                if traj.root_id in self._trajs:
                    self._open[sid] = new
                    traj.open_ids.add(sid)
        except Exception as exc:
            internal_error("BreakdownProcessor.on_start", exc)

    def _start_root(self, span: Span) -> None:
        ctx = span.context
        sid = ctx.span_id
        start = span.start_time or 0
        # the root's attributes, live: attributes set later are read when it ends
        traj = _Trajectory(sid, ctx.trace_id, start, _plain_attributes(span))
        with self._lock:
            if self._trajs:
                self._evict_locked(start)
            self._trajs[sid] = traj
            self._open[sid] = (traj, None, None)

    def on_end(self, span: ReadableSpan) -> None:
        try:
            try:  # the SDK span's fields, as in on_start
                sid, end_time = span._context[_SPAN_ID], span._end_time
                raw = span._attributes._dict  # type: ignore[attr-defined]
            except AttributeError:
                sid, end_time = span.context.span_id, span.end_time
                raw = span.attributes or _EMPTY
            with self._lock:
                entry = self._open.pop(sid, None)
                if entry is None:
                    return
                traj, phase, top_start = entry
                if traj.root_id != sid:
                    traj.open_ids.discard(sid)
                    if top_start is not None:
                        code = self._phase_codes.get(phase)
                        if code is None:
                            code = self._code(phase)
                        traj.phases.extend((code, top_start, end_time))
                        sums = traj.sums
                        if sums is not None:
                            if code < _N_BANDS and traj.last_end <= top_start < end_time:
                                sums[code] += end_time - top_start
                                traj.last_end = end_time
                            else:  # not a sequential loop: the general rules at the end
                                traj.sums = None
                        if phase == _PHASE_LLM and not _ENGINE_KEYS.isdisjoint(raw):
                            part = engine_ns(raw)
                            if part is not None:
                                traj.engine = add_engine(traj.engine, part)
                    return
                end = end_time or traj.start_ns
                bd = traj.breakdown  # set by finish(), which ended the root: reuse it
                phases = None if bd is not None else self._snapshot_locked(traj, end)
                self._remove_locked(traj)
            if phases is not None:
                bd = self._compute(
                    traj, end, phases, span.attributes or {}, span.status.status_code
                )
            self._emit(bd, span)
        except Exception as exc:
            internal_error("BreakdownProcessor.on_end", exc)

    def shutdown(self) -> None:
        self.record_deferred()
        with self._lock:
            self._trajs.clear()
            self._open.clear()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.record_deferred()
        return True

    # --- histograms ------------------------------------------------------------------------
    def record_deferred(self) -> int:
        """Record the histograms of ended trajectories still waiting for a collection.

        Every metric collection does this first, and so do :meth:`force_flush` and
        :meth:`shutdown`. Returns the number of trajectories recorded. Never raises.
        """
        return self.histograms.record_waiting() if self.histograms is not None else 0

    # --- the hand-off from RolloutTracer ------------------------------------------------------
    def finish(self, root: Span, end_ns: int, status: str | None = None) -> Breakdown | None:
        """End a trajectory's root span at ``end_ns`` with its breakdown written onto it.

        :class:`~otel_rollout.RolloutTracer` calls this when a trajectory block exits: the
        breakdown must be computed *before* the root ends, since a span's attributes freeze
        at ``end()``. ``status`` (``ok``, ``error``...) overrides the one derived from the
        root's status code. Returns the breakdown, or ``None`` when this processor does not
        track ``root`` (the span is ended all the same). Never raises.
        """
        bd = None
        try:
            ctx = root.get_span_context()
            traj = self._trajs.get(ctx.span_id)
            if traj is not None:
                with self._lock:
                    phases = self._snapshot_locked(traj, end_ns)
                sdk_status = getattr(root, "status", None)
                code = sdk_status.status_code if sdk_status is not None else None
                extra = {A.STATUS: status} if status is not None else _EMPTY
                bd = traj.breakdown = self._compute(traj, end_ns, phases, extra, code)
                root.set_attributes(bd.as_attributes())
                if limits.dropped(root):  # past the attribute limit: ours are set again
                    own = {**traj.initial, **_plain_attributes(root), **extra}
                    limits.keep(root, own, limits.ROOT_KEYS)
        except Exception as exc:
            internal_error("BreakdownProcessor.finish", exc)
        try:
            root.end(end_time=end_ns)
        except Exception as exc:
            internal_error("trajectory end", exc)
        return bd

    def track(self, span: Span) -> None:
        """Read a started span's attributes again (they were restored after it started).

        A sampler may replace a span's attributes with its own, or with none, so that
        ``on_start`` cannot tell a trajectory root or a phase; :class:`RolloutTracer`
        puts them back and calls this, before any child of the span starts. Never raises.
        """
        try:
            sid = span.get_span_context().span_id
            with self._lock:
                entry = self._open.get(sid)
                if entry is not None:
                    if entry[0].root_id == sid:
                        return  # a root already tracked
                    del self._open[sid]
                    entry[0].open_ids.discard(sid)
            self.on_start(span)
        except Exception as exc:
            internal_error("BreakdownProcessor.track", exc)

    @property
    def open_spans(self) -> int:
        """Spans of in-flight trajectories (roots included) whose end is awaited."""
        return len(self._open)

    # --- internals ---------------------------------------------------------------------------
    def _snapshot_locked(self, traj: _Trajectory, end_ns: int) -> _Phases:
        """The trajectory's outermost phases; those still open are clipped at ``end_ns``.
        For a sequential loop ended inside ``end_ns``, copies of its flat triples and
        sums instead: no accounting rule beyond the sums applies."""
        flat = traj.phases
        late = []
        for sid in traj.open_ids:  # rare: phases still open at the root's end
            entry = self._open.get(sid)
            if entry is not None and entry[2] is not None:
                late.append((entry[1], entry[2], end_ns))
        if traj.sums is not None and not late and not self._bands and traj.last_end <= end_ns:
            return flat[:], traj.sums[:]
        # (name, start, end) triples, unpacked in C: this runs once per trajectory
        names = map(self._phase_names.__getitem__, flat[::3])
        phases = list(zip(names, flat[1::3], flat[2::3], strict=True))
        phases.extend(late)
        return phases

    def _compute(
        self,
        traj: _Trajectory,
        end_ns: int,
        phases: _Phases,
        attrs: Mapping[str, Any],
        status_code: StatusCode | None,
    ) -> Breakdown:
        merged = dict(traj.initial)
        merged.update(traj.attrs)
        merged.update(attrs)
        error = status_code is StatusCode.ERROR
        trace_id = format(traj.trace_id, "032x")
        if isinstance(phases, tuple):  # a sequential loop: its sums are the bands
            flat, sums = phases
            return sequential_breakdown(
                traj.start_ns, end_ns, flat, sums, merged, error=error, trace_id=trace_id,
                engine=traj.engine,
            )  # fmt: skip
        return root_breakdown(
            traj.start_ns,
            end_ns,
            phases,
            merged,
            error=error,
            trace_id=trace_id,
            bands=self._bands,
            engine=traj.engine,
        )

    def _emit(self, bd: Breakdown, span: ReadableSpan) -> None:
        if self.histograms is not None:
            self.histograms.add(bd, span.context)
        if bd.batch_id is not None:
            self.batches.deliver(bd)
        for sink in self._sinks:
            try:
                sink(bd)
            except Exception as exc:
                internal_error(f"on_breakdown sink {sink!r}", exc)

    def _remove_locked(self, traj: _Trajectory) -> None:
        self._trajs.pop(traj.root_id, None)
        self._open.pop(traj.root_id, None)
        if traj.open_ids:
            for sid in traj.open_ids:
                self._open.pop(sid, None)
            traj.open_ids = set()

    def _evict_locked(self, now_ns: int) -> None:
        # Too old: at most _AGE_EVICTIONS per start, so that a day's worth of leaked
        # handles all turning 24 h old never holds the lock long (the next starts go on).
        aged = 0
        while self._trajs:
            oldest = next(iter(self._trajs.values()))
            if len(self._trajs) >= self._max_in_flight:
                reason = "max_in_flight"
            elif aged < _AGE_EVICTIONS and now_ns - oldest.start_ns > self._max_age_ns:
                reason = "max_age"
                aged += 1
            else:
                return
            self._remove_locked(oldest)
            self.evicted += 1
            self.evicted_by_reason[reason] = self.evicted_by_reason.get(reason, 0) + 1
            self._evicted_counter.add(1, {A.EVICTION_REASON: reason})
            if self.evicted >= self._next_eviction_log:  # at 1, 10, 100...: a few lines
                self._next_eviction_log *= 10
                _log.warning(
                    "otel-rollout: %d in-flight trajectories evicted so far (%s), never "
                    "measured: their roots did not end in time (max_in_flight %d, max_age "
                    "%.0f s). Counted in the %s metric, export_stats and the summary.",
                    self.evicted, _reasons(self.evicted_by_reason), self._max_in_flight,
                    self._max_age_ns / 1e9, A.METRIC_EVICTED,
                )  # fmt: skip

    def _code(self, phase: str) -> int:
        code = self._phase_codes.get(phase)
        if code is None:
            if len(self._phase_names) >= _MAX_PHASE_NAMES:
                return self._phase_codes[_OVERFLOW_PHASE]
            code = self._phase_codes[phase] = len(self._phase_names)
            self._phase_names.append(phase)
        return code

    def _reset(self) -> None:
        """In a forked child: the parent's trajectories are not this process's to finish."""
        self._lock = threading.Lock()
        self._trajs = OrderedDict()
        self._open = {}
        self.evicted = 0
        self.evicted_by_reason = {}
        self._next_eviction_log = 1
