"""The :class:`Rollout` handle ``configure()`` returns, its shutdown summary, its shutdown
at interpreter exit and at the end of a ``multiprocessing`` worker, and the process's global
handle (:func:`get_rollout`)."""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import multiprocessing.util as mp_util
import os
import random
import threading
import time
import weakref
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from opentelemetry import metrics, trace

from otel_rollout import attributes as A
from otel_rollout._accounting.reward import RewardColumns, RewardVsLatency
from otel_rollout._accounting.summary import _KEY_NAMES, BreakdownCollector, summary_row
from otel_rollout._api.tracer import RolloutTracer, set_default_tracer
from otel_rollout._base.bounded import BoundedCall, start
from otel_rollout._base.fork import reset_in_child
from otel_rollout._base.text import printable_for
from otel_rollout._export.guarded import ExportStats
from otel_rollout._processing.breakdown_processor import BreakdownProcessor
from otel_rollout._settings.table import Settings
from otel_rollout._setup import preemption

_log = logging.getLogger("otel_rollout")

#: How long interpreter exit waits for a Rollout nobody shut down to flush.
EXIT_TIMEOUT_S = 5.0

#: The bands of the shutdown summary: (SkyRL's key name, Breakdown attribute).
_SUMMARY_BANDS = _KEY_NAMES
_FIGURES = tuple(name for _, name in _KEY_NAMES)
_LLM, _ENV = _FIGURES.index(A.PHASE_LLM), _FIGURES.index(A.PHASE_ENV)


class RunningSummary:
    """The shutdown summary's figures in bounded memory, however long the run.

    Counts, means, maxima and ``frac_time_in_env`` are exact (running sums); p90 is
    exact up to ``reservoir`` trajectories and beyond that computed from a uniform
    random sample of that many (reservoir sampling, seeded, so it is reproducible).
    """

    def __init__(self, reservoir: int = 4096) -> None:
        self._size = reservoir
        self._lock = threading.Lock()
        self._random = random.Random(0)
        self.count = 0
        self._sums = [0.0] * len(_SUMMARY_BANDS)
        self._max = [0.0] * len(_SUMMARY_BANDS)
        self._sample: list[tuple[float, ...]] = []
        # (env class, e2e, turns, reward) of trajectories with a reward: reward vs latency
        self.rewarded = 0
        self._rewards: list[tuple[Any, float, int, float]] = []
        self._reward_random = random.Random(1)
        reset_in_child(self, RunningSummary._reset)

    def _reset(self) -> None:
        """In a forked child: summarise only the child's own trajectories."""
        self.__init__(self._size)  # type: ignore[misc]  # re-initialised in place

    def __call__(self, breakdown: Any) -> None:
        row = summary_row(breakdown)
        with self._lock:
            self.count += 1
            for i, v in enumerate(row):
                self._sums[i] += v
                if v > self._max[i]:
                    self._max[i] = v
            self._keep(self._sample, row, self.count, self._random)
            b = breakdown
            if b.score is not None:
                self.rewarded += 1
                item = (b.env_class, float(b.e2e), int(b.turns), float(b.score))
                self._keep(self._rewards, item, self.rewarded, self._reward_random)

    def _keep(self, reservoir: list, item: Any, seen: int, rng: random.Random) -> None:
        """Reservoir sampling: ``item``, the ``seen``-th, kept with probability size/seen."""
        if len(reservoir) < self._size:
            reservoir.append(item)
        elif (j := rng.randrange(seen)) < self._size:
            reservoir[j] = item

    @property
    def exact(self) -> bool:
        """Whether p90 is computed from every trajectory (not from a sample)."""
        return self.count <= self._size

    def reward_analyses(self) -> list[RewardVsLatency]:
        """Mean reward by e2e decile and by turns per env class (from the reservoir when
        more trajectories than it holds had a reward)."""
        cols = RewardColumns()
        with self._lock:
            rows = list(self._rewards)
        for env_class, e2e, turns, reward in rows:
            cols.add(env_class, e2e, turns, reward)
        return cols.analyses()

    def figures(self) -> dict[str, dict[str, float]]:
        """``{band: {"mean", "p90", "max"}}`` and ``{"frac_time_in_env": {"value"}}``."""
        import numpy as np

        with self._lock:
            n, sums, maxima = self.count, list(self._sums), list(self._max)
            sample = np.array(self._sample, dtype=np.float64)
        out: dict[str, dict[str, float]] = {}
        for i, (key, _) in enumerate(_SUMMARY_BANDS):
            p90 = float(np.percentile(sample[:, i], 90)) if n else 0.0
            out[key] = {"mean": sums[i] / n if n else 0.0, "p90": p90, "max": maxima[i]}
        llm, env = sums[_LLM], sums[_ENV]
        out["frac_time_in_env"] = {"value": env / (llm + env) if llm + env > 0 else 0.0}
        return out


@dataclass
class Rollout:
    """What :func:`configure` set up. ``shutdown()`` flushes and stops, within a timeout."""

    #: the SDK's providers (users add processors and readers to them), or the API's no-op
    #: ones when disabled
    tracer_provider: Any
    meter_provider: Any
    tracer: RolloutTracer
    collector: BreakdownCollector
    processor: BreakdownProcessor | None
    trace_file: Path | None = None
    is_global: bool = False
    settings: Settings = field(kw_only=True)  # resolved by configure()
    summary_stream: TextIO | None = None
    #: What is read of the GPUs, or why nothing is (one line; ``None`` when disabled).
    gpu: str | None = None
    _summary: RunningSummary | None = field(default=None, repr=False)
    _export: list = field(default_factory=list, repr=False)
    _closers: list = field(default_factory=list, repr=False)
    _shutdown_worker: Any = field(default=None, repr=False)
    _shutdown_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _flush: BoundedCall | None = field(default=None, repr=False)
    _trace_writer: Any = field(default=None, repr=False)
    _spill: Any = field(default=None, repr=False)  # OTLP mode: what failed went to a file
    _recorder: Any = field(default=None, repr=False)  # the in-flight record's writer
    _logger_provider: Any = field(default=None, repr=False)  # our log records' (file, OTLP)
    #: The process that configured it: a forked child shuts down its spans only.
    _pid: int = field(default_factory=os.getpid, repr=False)

    @property
    def export_stats(self) -> ExportStats:
        """Spans exported, pending, and dropped by reason, all pipelines together."""
        total = ExportStats()
        for p in self._export:
            total += p.stats
        if self.processor is not None:  # trajectories never measured, not spans
            total.trajectories_evicted = self.processor.evicted
        return total

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Export what waits, spans, metrics, then log records; returns False when
        ``timeout_s`` ran out first. Never waits longer, even with the endpoint down: the
        export goes on in the background, and the next call waits for it before starting
        its own."""
        with self._shutdown_lock:
            if self._flush is None:
                self._flush = BoundedCall(self._flush_providers, "otel-rollout-force-flush")
        return self._flush(timeout_s)

    def _flush_providers(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        ok = True
        # in a forked child the meter provider holds the parent's histograms (see _stop)
        forked = os.getpid() != self._pid
        for p in (self.tracer_provider, None if forked else self.meter_provider,
                  self._logger_provider):  # fmt: skip
            fn = getattr(p, "force_flush", None)
            if fn is not None:
                ms = max(0, int((deadline - time.monotonic()) * 1000))
                ok = bool(fn(ms)) and ok
        return ok

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Stop exporting; returns False when the exporters did not finish in time.

        Called again (or at interpreter exit, which configure() arranges, or on SIGTERM),
        it only waits for the first call's work, up to ``timeout_s``. A SIGTERM or SIGHUP
        arriving meanwhile takes effect when it returns.
        """
        with preemption.deferred():
            return self._shutdown(timeout_s)

    def _shutdown(self, timeout_s: float) -> bool:
        with self._shutdown_lock:
            worker = self._shutdown_worker
            first = worker is None
            if first:
                worker = self._shutdown_worker = start(self._stop, "otel-rollout-shutdown")
        if first:
            _exit_registry.pop(id(self), None)
        worker.join(timeout_s)
        done = not worker.is_alive()
        if first:
            if not done:  # what is still queued is lost, and counted so
                for p in self._export:
                    p.abandon()
            stats = self.export_stats
            if stats.dropped:
                _log.warning("otel-rollout: %s", _loss_line(stats))
            if stats.trajectories_evicted:
                _log.warning("otel-rollout: %s", _evicted_line(self.processor))
            self._print_summary()
            if self.is_global:  # its SIGTERM/SIGHUP handlers, where still set: only now,
                preemption.uninstall()
        return done

    def __enter__(self) -> Rollout:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def _stop(self) -> None:
        if self._recorder is not None:  # its last record, before the trace file closes
            self._recorder.shutdown()
        if self._logger_provider is not None:
            try:
                self._logger_provider.shutdown()
            except Exception as exc:
                _log.debug("otel-rollout: log record pipeline shutdown failed: %r", exc)
        # A forked child (a multiprocessing worker): its spans are its own, but its meter
        # provider holds the parent's cumulative histograms, which a final export would
        # count twice; the parent's servers are not the child's to stop.
        forked = os.getpid() != self._pid
        _stop_providers(self.tracer_provider, None if forked else self.meter_provider,
                        [] if forked else self._closers)  # fmt: skip

    def _print_summary(self) -> None:
        summary = self._summary
        if self.summary_stream is None or summary is None or not summary.count:
            return
        figures = summary.figures()
        out = self.summary_stream
        lines: list[str] = []
        evicted = self.processor.evicted if self.processor is not None else 0
        more = f" (and {evicted} evicted, not measured)" if evicted else ""
        lines.append(f"otel-rollout: {summary.count} trajectories{more}")
        p90 = "p90" if summary.exact else "p90~"  # from a sample beyond the reservoir
        for band, _ in _SUMMARY_BANDS:
            f = figures[band]
            lines.append(f"  {band:<14} mean {f['mean']:8.3f}s  {p90:<4} {f['p90']:8.3f}s")
        lines.append(f"  frac_time_in_env {figures['frac_time_in_env']['value']:.3f}")
        for a in summary.reward_analyses():  # do slow trajectories succeed less?
            deciles = " ".join(f"{b.mean_reward:.2f}" for b in a.by_e2e_decile)
            turns = " ".join(f"{b.label}:{b.mean_reward:.2f}" for b in a.by_turns)
            env = printable_for(out, str(a.env_class))  # users' text: escaped if need be
            lines.append(f"  reward {env}: by e2e decile (fastest first) {deciles}; "
                  f"by turns {turns}")  # fmt: skip
        stats = self.export_stats
        if stats.dropped:
            lines.append(f"  {_loss_line(stats)}")
        if stats.trajectories_evicted:
            lines.append(f"  {_evicted_line(self.processor)}")
        spill = self._spill
        if spill is not None:
            lines.append(f"  traces: sent to {printable_for(out, spill.target)}")
            if spill.spilled:
                where = printable_for(out, str(spill.path))
                lines.append(f"  {spill.spilled} spans the endpoint failed went to {where}")
        if self.trace_file is not None:
            written = getattr(self._trace_writer, "paths", None)
            first = written[0] if written else self.trace_file  # a forked child: its own file
            rotated = len(list(first.parent.glob(f"{first.stem}_*{first.suffix}")))
            files = f"{first.parent / first.stem}*{first.suffix} ({rotated + 1} files)"
            lines.append(f"  traces: {printable_for(out, files if rotated else str(first))}")

        # One write: the summaries of processes sharing a stream (a pool's workers on one
        # stderr) come out whole, not interleaved line by line.
        try:
            out.write("".join(line + "\n" for line in lines))
            flush = getattr(out, "flush", None)
            if flush is not None:
                flush()
        except (OSError, ValueError) as e:  # a closed stream or pipe: the run still ends well
            _log.debug("otel-rollout: the summary could not be written: %s", e)


def _evicted_line(processor: Any) -> str:
    reasons = ", ".join(f"{n} {why}" for why, n in processor.evicted_by_reason.items())
    return (f"{processor.evicted} trajectories evicted before their root ended ({reasons}): "
            "not measured, not in the figures above")  # fmt: skip


def _loss_line(stats: ExportStats) -> str:
    reasons = ", ".join(f"{n} {why}" for why, n in stats.losses().items() if n)
    return f"{stats.dropped} spans were not exported ({reasons}); {stats.exported} were"


def _stop_providers(
    tracer_provider: trace.TracerProvider | None,
    meter_provider: metrics.MeterProvider | None,
    closers: list,
) -> None:
    for p in (tracer_provider, meter_provider):
        fn = getattr(p, "shutdown", None)
        if fn is not None:
            fn()
    for server in closers:  # the port is free again for the next configure()
        server.shutdown()
        server.server_close()


# --- Shutdown at exit, holding nothing alive -------------------------------------------------

#: id(rollout) -> weak references to the handle and to what it would shut down. An entry
#: goes at shutdown() or when everything it refers to is gone, so handles made and shut
#: down by the thousand (tests, embedding) are not kept for the life of the process.
_exit_registry: dict[int, tuple[Any, Any, Any, list]] = {}
_exit_lock = threading.Lock()
_exit_hooked = False


def register_for_exit(rollout: Rollout) -> None:
    """Shut ``rollout`` down at interpreter exit, within :data:`EXIT_TIMEOUT_S`, unless
    someone did first. A handle nobody holds any more still has its providers flushed
    while they are alive (a user may keep only ``rollout.tracer``)."""
    global _exit_hooked
    key = id(rollout)

    def forget(_: Any, key: int = key) -> None:
        entry = _exit_registry.get(key)
        if entry is not None and all(ref() is None for ref in entry[:3]):
            _exit_registry.pop(key, None)

    entry = (
        weakref.ref(rollout, forget),
        weakref.ref(rollout.tracer_provider, forget),
        weakref.ref(rollout.meter_provider, forget),
        rollout._closers,
    )
    with _exit_lock:
        _exit_registry[key] = entry
        first, _exit_hooked = not _exit_hooked, True
    if first:
        atexit.register(_shutdown_at_exit)
        # held weakly by multiprocessing: a module's function lives as long as the process
        mp_util.register_after_fork(_shutdown_at_exit, _after_fork_in_worker)
    if multiprocessing.parent_process() is not None:  # configure() in a worker
        _register_worker_end()


def _shutdown_at_exit(timeout_s: float = EXIT_TIMEOUT_S) -> None:
    """Shut down every setup of this process not shut down yet (at exit, at the end of a
    multiprocessing worker, on a signal that ends the process), each within ``timeout_s``."""
    with preemption.deferred():
        with _exit_lock:
            entries = list(_exit_registry.values())
        for ref, tp_ref, mp_ref, closers in entries:
            rollout = ref()
            if rollout is not None:
                rollout.shutdown(timeout_s)
                continue
            tp, mp = tp_ref(), mp_ref()
            if tp is not None or mp is not None:
                start(partial(_stop_providers, tp, mp, closers), "otel-rollout-exit").join(
                    timeout_s
                )


# --- The end of a multiprocessing worker (docs/reliability.md) -------------------------------
# A worker started by fork or forkserver ends through os._exit, which skips exit hooks; a
# multiprocessing Finalize registered in each worker shuts its setups down first. Higher
# priorities run first: before the user's finalizers (0 to 10), one of which may hang.
_WORKER_PRIORITY = 100
_worker_pid: int | None = None  # the process whose finalizer is registered


def _after_fork_in_worker(_: Any) -> None:
    global _worker_pid
    _worker_pid = None  # the worker's finalizers were just cleared: registered anew
    _register_worker_end()


def _register_worker_end() -> None:
    global _worker_pid
    if _worker_pid != os.getpid():
        _worker_pid = os.getpid()
        mp_util.Finalize(None, _end_of_worker, exitpriority=_WORKER_PRIORITY)


def _end_of_worker() -> None:
    with contextlib.suppress(Exception):  # never into the worker's exit
        _shutdown_at_exit()


def _flush_all(timeout_s: float) -> None:
    """Flush every setup of this process not shut down yet, within ``timeout_s`` in all."""
    deadline = time.monotonic() + timeout_s
    with _exit_lock:
        entries = list(_exit_registry.values())
    for ref, *_ in entries:
        rollout = ref()
        if rollout is not None:
            rollout.force_flush(max(0.0, deadline - time.monotonic()))


def flush_on_signals() -> list[str]:
    """Flush, summarise and end as the signal would on SIGTERM and SIGHUP (see
    :mod:`otel_rollout._setup.preemption`); returns the signals now handled."""
    return preemption.install(_shutdown_at_exit, _flush_all, EXIT_TIMEOUT_S)


# --- The process's global handle -------------------------------------------------------------

_global_lock = threading.Lock()
_global: Rollout | None = None


def get_rollout() -> Rollout | None:
    """The :class:`Rollout` of this process's global ``configure()``, or ``None``."""
    return _global


def _set_global(rollout: Rollout | None) -> None:
    """Make ``rollout`` this process's global handle; ``otel_rollout.trajectory()`` and
    ``otel_rollout.batch()`` then use its tracer (and its breakdown processor)."""
    global _global
    _global = rollout
    set_default_tracer(rollout.tracer if rollout is not None else None)
