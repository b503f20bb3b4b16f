"""The in-flight record: the running trajectories (and the open step), one OTel log record
(event ``rollout.in_flight``) every ``interval_s`` while anything runs, into the trace file
or over OTLP logs, never a span. Its format, bounds and cost: docs/live.md."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from otel_rollout._accounting.in_flight import EVENT_NAME, InFlight, OpenStep, OpenTrajectory
from otel_rollout._base.fork import reset_in_child
from otel_rollout._export.log_file import emit_event
from otel_rollout._version import __version__

if TYPE_CHECKING:
    from opentelemetry.sdk._logs import LoggerProvider

_log = logging.getLogger("otel_rollout.export")

#: The record's attributes (arrays are parallel: one entry a class or a listed
#: trajectory); its event name is EVENT_NAME (an attribute where the SDK has no event
#: names: otel_rollout._export.log_file.EVENT_NAME_ATTRIBUTE).
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
#: The training step open in the process (only when one is): number (-1: none), trainer,
#: start, and the phase it is in ("" between phases) with that phase's start.
STEP = "rollout.in_flight.step"
STEP_TRAINER = "rollout.in_flight.step_trainer"
STEP_START = "rollout.in_flight.step_start_ns"
STEP_PHASE = "rollout.in_flight.step_phase"
STEP_PHASE_START = "rollout.in_flight.step_phase_start_ns"
#: The records' CPU at most, as a share of one core (the interval stretches beyond it).
MAX_CPU_SHARE = 0.01
_SCOPE_NAME = "otel_rollout.in_flight"


def record_attributes(snap: InFlight) -> dict[str, Any]:
    """The record's attributes for ``snap``."""
    envs = sorted(snap.by_env)
    rows = snap.listed
    out, step = {}, snap.step
    if step is not None:
        out = {STEP: step.number, STEP_TRAINER: step.trainer, STEP_START: step.start_ns,
               STEP_PHASE: step.phase, STEP_PHASE_START: step.phase_start_ns}  # fmt: skip
    return out | {
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


def _step_of(attrs: Mapping[str, Any]) -> OpenStep | None:
    if STEP not in attrs:
        return None
    return OpenStep(int(attrs[STEP]), str(attrs.get(STEP_TRAINER, "")),
                    int(attrs.get(STEP_START, 0)), str(attrs.get(STEP_PHASE, "")),
                    int(attrs.get(STEP_PHASE_START, 0)))  # fmt: skip


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
            {e: n for e, n in zip(envs, llm, strict=False) if n}, listed, _step_of(attrs),
        )  # fmt: skip
    except (TypeError, ValueError, OverflowError):  # OverflowError: int() of an infinity
        return None


class InFlightRecorder:
    """An in-flight record every ``interval_s`` while anything runs, as a log record on
    ``logger_provider`` (an SDK ``LoggerProvider`` whose processor writes the trace file,
    or exports OTLP logs).

    ``snapshot()`` answers the running trajectories (the breakdown processor's
    ``in_flight``). The thread starts at once, and again in a forked child. ``shutdown()``
    writes a last record (what still runs): call it before the logger provider shuts down.
    """

    def __init__(self, snapshot: Callable[[], InFlight], logger_provider: LoggerProvider,
                 interval_s: float) -> None:  # fmt: skip
        self._snapshot = snapshot
        self._logger = logger_provider.get_logger(_SCOPE_NAME, __version__)
        self._interval = float(interval_s)
        self._start()
        reset_in_child(self, InFlightRecorder._start)

    def _start(self) -> None:  # also in a forked child: its own thread, its own counts
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shut = False
        self._last_count = 0
        self.records = 0  # records written (a test and benchmark figure)
        self.start()

    def start(self) -> None:
        if self._thread is None and not self._shut:
            thread = threading.Thread(target=self._run, name="otel-rollout-in-flight",
                                      daemon=True)  # fmt: skip
            try:
                thread.start()
            except RuntimeError:  # at exit on 3.12.0/3.12.1: no records, spans still go
                return
            self._thread = thread

    def write_record(self) -> bool:
        """Write one record now if trajectories run (or just stopped); True if written."""
        try:
            snap = self._snapshot()
            active = snap.count or snap.step is not None  # a step shows between rollouts
            if self._shut or (not active and not self._last_count):
                return False
            emit_event(self._logger, EVENT_NAME, record_attributes(snap), snap.time_ns)
            self._last_count = 1 if active else 0
            self.records += 1
            return True
        except Exception as exc:  # never into the run; the next interval tries again
            _log.debug("otel-rollout: in-flight record not written: %r", exc)
            return False

    def _run(self) -> None:
        wait = self._interval
        while not self._stop.wait(wait):
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
