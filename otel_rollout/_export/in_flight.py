"""The in-flight record: which trajectories are running, written periodically.

Spans are exported when they end, so a trajectory that is running is invisible in the
trace file and over OTLP until it ends. :class:`InFlightExporter` wraps the span exporter
of the pipeline and, every ``interval_s`` while trajectories are running, exports one
small extra span through the same exporter: the *in-flight record*, a zero-length span
named ``rollout.in_flight`` (a trace of its own) on the process's resource, whose
attributes hold the running trajectories counted per env class and the oldest few listed
with their current phase and start (parallel arrays; the format is in docs/live.md).
``otel-rollout top`` reads it; ``report`` skips it.

Bounded and optional: one record per interval, at most ``max_listed`` trajectories in it
(the oldest: the tail forming); none while nothing runs; ``interval_s=0`` turns it off.
With so many running that a record costs more than 1% of a core per interval, the
interval stretches to keep it at 1% (10,000 running: about 17 ms a record).
The record is written from a thread of its own, under the lock that also serialises the
pipeline's exports, so the exporter never sees two calls at once; it is not counted in
the export counts (it is not one of the user's spans) and never raises.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

from otel_rollout._accounting.in_flight import SPAN_NAME, InFlight, OpenTrajectory
from otel_rollout._base import standby
from otel_rollout._base.fork import reset_in_child
from otel_rollout._version import __version__

_log = logging.getLogger("otel_rollout.export")

#: The record's attributes (arrays are parallel: one entry a class or a listed
#: trajectory); its span name is SPAN_NAME.
COUNT = "rollout.in_flight.count"
ENV_CLASSES = "rollout.in_flight.env_classes"
ENV_COUNTS = "rollout.in_flight.env_counts"
ENV_IN_LLM = "rollout.in_flight.env_in_llm"
TRACE_IDS = "rollout.in_flight.trace_ids"
TRAJECTORY_IDS = "rollout.in_flight.trajectory_ids"
ENVS = "rollout.in_flight.envs"
BATCH_IDS = "rollout.in_flight.batch_ids"
STARTS = "rollout.in_flight.start_ns"
PHASES = "rollout.in_flight.phases"
PHASE_STARTS = "rollout.in_flight.phase_start_ns"
#: The records' CPU at most, as a share of one core (the interval stretches beyond it).
MAX_CPU_SHARE = 0.01
_SCOPE = InstrumentationScope("otel_rollout.in_flight", __version__)


def record_attributes(snap: InFlight) -> dict[str, Any]:
    """The record's attributes for ``snap``."""
    envs = sorted(snap.by_env)
    rows = snap.listed
    return {
        COUNT: snap.count,
        ENV_CLASSES: tuple(envs),
        ENV_COUNTS: tuple(snap.by_env[e] for e in envs),
        ENV_IN_LLM: tuple(snap.in_llm_by_env.get(e, 0) for e in envs),
        TRACE_IDS: tuple(r.trace_id for r in rows),
        TRAJECTORY_IDS: tuple(r.trajectory_id for r in rows),
        ENVS: tuple(r.env_class for r in rows),
        BATCH_IDS: tuple(r.batch_id for r in rows),
        STARTS: tuple(r.start_ns for r in rows),
        PHASES: tuple(r.phase for r in rows),
        PHASE_STARTS: tuple(r.phase_start_ns for r in rows),
    }


def from_attributes(time_ns: int, attrs: Mapping[str, Any]) -> InFlight | None:
    """The snapshot a record's attributes hold (read back), or None if they are not one."""
    try:
        envs = [str(e) for e in attrs.get(ENV_CLASSES, ())]
        counts = [int(c) for c in attrs.get(ENV_COUNTS, ())]
        llm = [int(c) for c in attrs.get(ENV_IN_LLM, ())]
        cols = [attrs.get(k, ()) for k in (TRACE_IDS, TRAJECTORY_IDS, ENVS, BATCH_IDS,
                                           STARTS, PHASES, PHASE_STARTS)]  # fmt: skip
        n = len(cols[0])
        if any(len(c) != n for c in cols) or len(counts) != len(envs):
            return None
        listed = tuple(
            OpenTrajectory(str(a), str(b), str(c), str(d), int(e), str(f), int(g))
            for a, b, c, d, e, f, g in zip(*cols, strict=True)
        )
        return InFlight(
            int(time_ns), int(attrs.get(COUNT, sum(counts))), dict(zip(envs, counts, strict=True)),
            {e: n for e, n in zip(envs, llm, strict=False) if n}, listed,
        )  # fmt: skip
    except (TypeError, ValueError):
        return None


def record_span(snap: InFlight, resource: Any) -> ReadableSpan:
    """The in-flight record of ``snap`` as a finished, sampled span on ``resource``."""
    ctx = SpanContext(random.getrandbits(128) or 1, random.getrandbits(64) or 1,
                      is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))  # fmt: skip
    return ReadableSpan(
        name=SPAN_NAME, context=ctx, parent=None, resource=resource,
        attributes=record_attributes(snap), kind=SpanKind.INTERNAL,
        start_time=snap.time_ns, end_time=snap.time_ns, instrumentation_scope=_SCOPE,
    )  # fmt: skip


class InFlightExporter(SpanExporter):
    """``inner``, plus an in-flight record every ``interval_s`` while anything runs.

    ``snapshot()`` answers the running trajectories (:func:`otel_rollout._processing.
    in_flight.in_flight` on the pipeline's processor); ``resource`` is the spans'. The
    thread starts at once and, in a forked child, at the child's first export.
    """

    def __init__(self, inner: SpanExporter, snapshot: Callable[[], InFlight], resource: Any,
                 interval_s: float) -> None:  # fmt: skip
        if not interval_s > 0:
            raise ValueError(f"interval_s must be positive seconds, got {interval_s!r}")
        self.inner = inner
        self._snapshot = snapshot
        self._resource = resource
        self._interval = float(interval_s)
        self._reset()
        reset_in_child(self, InFlightExporter._reset)
        self.start()

    def _reset(self) -> None:
        # new in a forked child too: the parent's thread may have held it at the fork
        self._lock = threading.Lock()  # one call into ``inner`` at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shut = False
        self._last_count = 0
        self.records = 0  # records written (a test and benchmark figure)

    def __getattr__(self, name: str) -> Any:  # the trace file's ``path``, ``paths``...
        inner = self.__dict__.get("inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def start(self) -> None:
        if self._thread is None and not self._shut:
            thread = threading.Thread(target=self._run, name="otel-rollout-in-flight",
                                      daemon=True)  # fmt: skip
            try:
                thread.start()
            except RuntimeError:  # at exit on 3.12.0/3.12.1: no records, spans still go
                return
            self._thread = thread

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._thread is None:
            self.start()
        with self._lock:
            return self.inner.export(spans)

    def write_record(self) -> bool:
        """Write one record now if trajectories run (or just stopped); True if written."""
        try:
            snap = self._snapshot()
            if snap.count == 0 and self._last_count == 0:
                return False
            span = record_span(snap, self._resource)
            with self._lock:
                if self._shut:
                    return False
                self.inner.export([span])
            self._last_count = snap.count
            self.records += 1
            return True
        except Exception as exc:  # never into the run; the next interval tries again
            _log.debug("otel-rollout: in-flight record not written: %r", exc)
            return False

    def _run(self) -> None:
        standby.leave_signals_to_main_thread()  # started lazily, even in a forked child
        pid = os.getpid()
        wait = self._interval
        while not self._stop.wait(wait):
            if os.getpid() != pid:  # pragma: no cover - a thread does not survive a fork
                return
            cpu = time.thread_time()
            self.write_record()
            # tens of thousands running make a record cost milliseconds: wait longer, so
            # the records never take more than MAX_CPU_SHARE of a core
            wait = max(self._interval, (time.thread_time() - cpu) / MAX_CPU_SHARE)

    def shutdown(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(1.0, self._interval))
        if self._thread is not None:
            self.write_record()  # the last word: what still runs (none, at a clean end)
        self._shut = True
        # not under the lock: an OTLP exporter's shutdown cuts short a retry in progress
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)
