"""The span processor that turns each trajectory's spans into a :class:`Breakdown`."""

from __future__ import annotations

import heapq
import logging
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode

from otel_rollout import attributes as A
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._accounting.compute import root_breakdown, sequential_breakdown
from otel_rollout._accounting.in_flight import InFlight, OpenTrajectory
from otel_rollout._accounting.waits import add_engine, engine_ns
from otel_rollout._base import limits, sdk_access
from otel_rollout._base.clock import now_ns as clock_now_ns
from otel_rollout._base.errors import internal_error
from otel_rollout._base.fork import reset_in_child
from otel_rollout._processing.batch_registry import BatchRegistry, GenerationLog
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
        #: at or after ``last_end``): their lengths summed per band, which are then the
        #: bands; None once they are not
        self.sums: list[int] | None = [0] * _N_BANDS
        self.last_end = start_ns


class BreakdownProcessor(SpanProcessor):
    """Derives an exact per-trajectory time breakdown from the spans as they end.

    Install it on the ``TracerProvider`` before the export processor and hand it to
    ``RolloutTracer(provider, processor=p)``, which ends each root through :meth:`finish`
    (the breakdown is written onto the root). When the root ends, the histograms are
    recorded and ``on_breakdown`` called. At most ``max_in_flight`` trajectories are
    tracked, none older than ``max_age_s`` (evictions counted). Hooks never raise.
    """

    def __init__(self, meter_provider: metrics.MeterProvider | None = None, *,
                 on_breakdown: BreakdownSink | Iterable[BreakdownSink] | None = None,
                 bands: Mapping[str, str] | None = None, max_in_flight: int = 100_000,
                 max_age_s: float = 24 * 3600.0, record_metrics: bool = True) -> None:  # fmt: skip
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
        sinks = [] if on_breakdown is None else on_breakdown
        self._sinks: list[BreakdownSink] = [sinks] if callable(sinks) else list(sinks)
        self._bands = dict(bands) if bands else None
        self._max_in_flight = max_in_flight
        self._max_age_ns = int(max_age_s * 1e9)
        self._reset()
        self._phase_names: list[str] = [*A.BANDS, _OVERFLOW_PHASE]
        self._phase_codes = {name: i for i, name in enumerate(self._phase_names)}
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
            TrajectoryHistograms(meter, self.running_by_env) if record_metrics else None
        )
        #: The open batches of the tracers using this processor (their breakdowns go there).
        self.batches = BatchRegistry()
        #: The walls of those batches, for the steps' accounts (their ``generation``).
        self.generation = GenerationLog()
        reset_in_child(self, BreakdownProcessor._reset)
        limits.quiet_sdk_drop_warnings()  # one line with a count instead (limits.keep)

    def add_sink(self, sink: BreakdownSink) -> None:
        """Also call ``sink(breakdown)`` for every finished trajectory."""
        self._sinks.append(sink)

    @property
    def in_flight(self) -> int:
        """Trajectories whose root has started and not yet ended."""
        return len(self._trajs)

    def running_by_env(self) -> dict[str, int]:
        """Those trajectories counted by env class ("" for none)."""
        return in_flight(self, 0).by_env

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            raw, parent, ctx, start = sdk_access.started(span)
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
        traj = _Trajectory(sid, ctx.trace_id, start, sdk_access.attributes(span))
        with self._lock:
            if self._trajs:
                self._evict_locked(start)
            self._trajs[sid] = traj
            self._open[sid] = (traj, None, None)

    def on_end(self, span: ReadableSpan) -> None:
        try:
            sid, end_time, raw = sdk_access.ended(span)
            with self._lock:
                entry = self._open.pop(sid, None)
                if entry is None:
                    return
                traj, phase, top_start = entry
                if traj.root_id != sid:
                    traj.open_ids.discard(sid)
                    if top_start is not None and phase is not None:  # a phase has both
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
            if bd is not None:  # always: finish() made it, or it was computed just now
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

    def record_deferred(self) -> int:
        """Record the histograms waiting for a collection (each collection does this first,
        as do :meth:`force_flush` and :meth:`shutdown`); returns how many trajectories."""
        return self.histograms.record_waiting() if self.histograms is not None else 0

    def finish(self, root: trace.Span, end_ns: int, status: str | None = None) -> Breakdown | None:
        """End a trajectory's root at ``end_ns`` with its breakdown written onto it (a span's
        attributes freeze at ``end()``). ``status`` overrides the one of the root's status
        code. Returns the breakdown, or None when ``root`` is not tracked. Never raises."""
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
                    own = {**traj.initial, **sdk_access.attributes(root), **extra}
                    limits.keep(root, own, limits.ROOT_KEYS)
        except Exception as exc:
            internal_error("BreakdownProcessor.finish", exc)
        try:
            root.end(end_time=end_ns)
        except Exception as exc:
            internal_error("trajectory end", exc)
        return bd

    def track(self, span: trace.Span) -> None:
        """Read a started span's attributes again: a sampler may have replaced them, and
        :class:`RolloutTracer` put them back before any child started. Never raises."""
        try:
            sid = span.get_span_context().span_id
            with self._lock:
                entry = self._open.get(sid)
                if entry is not None:
                    if entry[0].root_id == sid:
                        return  # a root already tracked
                    del self._open[sid]
                    entry[0].open_ids.discard(sid)
            if isinstance(span, Span):  # another provider's span: nothing to read
                self.on_start(span)
        except Exception as exc:
            internal_error("BreakdownProcessor.track", exc)

    @property
    def open_spans(self) -> int:
        """Spans of in-flight trajectories (roots included) whose end is awaited."""
        return len(self._open)

    def _snapshot_locked(self, traj: _Trajectory, end_ns: int) -> _Phases:
        """The trajectory's outermost phases; those still open are clipped at ``end_ns``.
        For a sequential loop ended inside ``end_ns``, copies of its flat triples and
        sums instead: no accounting rule beyond the sums applies."""
        flat = traj.phases
        late: list[tuple[str, int, int]] = []
        for sid in traj.open_ids:  # rare: phases still open at the root's end
            entry = self._open.get(sid)
            if entry is not None and entry[1] is not None and entry[2] is not None:
                late.append((entry[1], entry[2], end_ns))
        if traj.sums is not None and not late and not self._bands and traj.last_end <= end_ns:
            return flat[:], traj.sums[:]
        # (name, start, end) triples, unpacked in C: this runs once per trajectory
        names = map(self._phase_names.__getitem__, flat[::3])
        phases = list(zip(names, flat[1::3], flat[2::3], strict=True))
        phases.extend(late)
        return phases

    def _compute(self, traj: _Trajectory, end_ns: int, phases: _Phases, attrs: Mapping[str, Any],
                 status_code: StatusCode | None) -> Breakdown:  # fmt: skip
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
        return root_breakdown(traj.start_ns, end_ns, phases, merged, error=error,
                              trace_id=trace_id, bands=self._bands, engine=traj.engine)  # fmt: skip

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
                reasons = ", ".join(f"{n} {why}" for why, n in self.evicted_by_reason.items())
                _log.warning(
                    "otel-rollout: %d in-flight trajectories evicted so far (%s), never "
                    "measured: their roots did not end in time (max_in_flight %d, max_age "
                    "%.0f s). Counted in the %s metric, export_stats and the summary.",
                    self.evicted, reasons, self._max_in_flight, self._max_age_ns / 1e9,
                    A.METRIC_EVICTED,
                )  # fmt: skip

    def _code(self, phase: str) -> int:
        code = self._phase_codes.get(phase)
        if code is None:
            if len(self._phase_names) >= _MAX_PHASE_NAMES:
                return self._phase_codes[_OVERFLOW_PHASE]
            code = self._phase_codes[phase] = len(self._phase_names)
            self._phase_names.append(phase)
        return code

    def _reset(self) -> None:  # also in a forked child: the parent's trajectories are not its own
        self._lock = threading.Lock()
        # oldest first: the next to evict is at the front, found and removed in O(1)
        self._trajs: OrderedDict[int, _Trajectory] = OrderedDict()
        # open span id -> (trajectory, outermost phase so far, start if a top-level phase)
        self._open: dict[int, tuple[_Trajectory, str | None, int | None]] = {}
        self.evicted = 0  # trajectories evicted, never measured
        self.evicted_by_reason: dict[str, int] = {}
        self._next_eviction_log = 1


#: Trajectories listed by default (the oldest: the tail forming); all are counted.
DEFAULT_MAX_LISTED = 20


def in_flight(processor: BreakdownProcessor, max_listed: int = DEFAULT_MAX_LISTED,
              now_ns: int | None = None) -> InFlight:  # fmt: skip
    """The trajectories ``processor`` tracks now: counted per env class, the oldest
    ``max_listed`` listed with the phase each is in (the latest-started open one)."""
    with processor._lock:  # two C-level copies under the lock: no per-span work
        trajs = list(processor._trajs.values())
        opened = list(processor._open.values())
    now = clock_now_ns() if now_ns is None else now_ns
    # root span id -> (phase, its start) of the latest-started open outermost phase
    current: dict[int, tuple[str, int]] = {}
    in_llm: set[int] = set()
    for traj, phase, top_start in opened:
        if top_start is None:
            continue
        rid = traj.root_id
        if phase == A.PHASE_LLM:
            in_llm.add(rid)
        seen = current.get(rid)
        if seen is None or top_start >= seen[1]:
            current[rid] = (str(phase), top_start)
    by_env: dict[str, int] = {}
    llm_by_env: dict[str, int] = {}
    for t in trajs:
        env = _text(t.attrs.get(A.ENV_CLASS))
        by_env[env] = by_env.get(env, 0) + 1
        if t.root_id in in_llm:
            llm_by_env[env] = llm_by_env.get(env, 0) + 1
    oldest = heapq.nsmallest(max(0, max_listed), trajs, key=lambda t: t.start_ns)
    listed = []
    for t in oldest:
        phase, phase_start = current.get(t.root_id, ("", 0))
        attrs = t.attrs
        listed.append(OpenTrajectory(
            format(t.trace_id, "032x"), _text(attrs.get(A.TRAJECTORY_ID)),
            _text(attrs.get(A.ENV_CLASS)), _text(attrs.get(A.BATCH_ID)), t.start_ns,
            phase, phase_start,
        ))  # fmt: skip
    return InFlight(now, len(trajs), by_env, llm_by_env, tuple(listed))


def _text(value: Any) -> str:
    return "" if value is None else str(value)
