"""Sustained load through the default pipeline: queue, losses, memory and stalls over time.

Runs two-phase trajectories (root, ``generate``, ``env_step``: three spans, nothing done
in them) at ``--rate`` per second for ``--seconds`` through ``configure(local=True)``
(the breakdown processor, histograms, the local trace file), paced in 10 ms slices.
Every ``--every`` seconds it prints the export queue (spans waiting), the spans exported
and dropped, the RSS, the worst trajectory of the slice (wall clock) and, on Linux, the
same less the time its thread waited for a core (``/proc/thread-self/schedstat``: what
the process itself stalled it, without the machine's other load), and the worst garbage
collection of the slice (``gc.callbacks``, CPU time of the collecting thread: a
collection stops every thread) with the number of full collections. Once a second the
breakdowns are drained, as a trainer does each step. At the end: the queue's growth after
warm-up, spans dropped, RSS after warm-up against the end, the worst figures after
warm-up with the load average, and what the file holds.

``--hung-disk`` makes every trace-file write wait (a disk that stopped answering: the
writer's thread blocks in the write, holding the writer's lock): the queue fills, then
spans are dropped and counted, and the figures show what that costs the agent loop (the
worst trajectory, the worst collection).

    python benchmarks/sustained.py [--rate 1000] [--seconds 60] [--hung-disk]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_queue_wait() -> Callable[[], int]:
    """Nanoseconds the calling thread has waited for a core so far (0 where unknown)."""
    try:
        fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        return lambda: int(os.pread(fd, 64, 0).split()[1])
    except (OSError, IndexError, ValueError):
        return lambda: 0


class GcPauses:
    """The longest collection since the last :meth:`take`, and by generation overall;
    full collections since the last :meth:`take_full`."""

    def __init__(self) -> None:
        self._start = 0.0
        self.worst = 0.0
        self.full = 0
        self.total = 0.0  # CPU seconds in collections so far
        self.by_gen = [0.0, 0.0, 0.0]
        gc.callbacks.append(self._on)

    def _on(self, phase: str, info: dict) -> None:
        # the CPU time of the collecting thread: what the collection itself costs, not the
        # time this thread waited for a core on a busy machine
        if phase == "start":
            self._start = time.thread_time()
            return
        took = time.thread_time() - self._start
        self.worst = max(self.worst, took)
        g = info["generation"]
        self.by_gen[g] = max(self.by_gen[g], took)
        self.full += g == 2
        self.total += took

    def take(self) -> float:
        worst, self.worst = self.worst, 0.0
        return worst

    def take_full(self) -> int:
        full, self.full = self.full, 0
        return full


def hang_disk() -> threading.Event:
    """Every trace-file write waits until the returned event is set: where a write to a
    disk that stopped answering blocks, the writer's lock and the file's lock held."""
    from otel_rollout._export.tracefile import RotatingTraceFile

    go = threading.Event()
    real = RotatingTraceFile._write_whole

    def write_whole(self, data):
        go.wait()
        return real(self, data)

    RotatingTraceFile._write_whole = write_whole  # type: ignore[method-assign]
    return go


def run(rate: int, seconds: float, every: float, hung: bool, folder: Path) -> int:
    import otel_rollout
    from otel_rollout.report import read_sources

    gate = hang_disk() if hung else None
    rollout = otel_rollout.configure(local=True, output_dir=folder, service_name="sustained")
    tracer = rollout.tracer
    pauses = GcPauses()
    waited = run_queue_wait()
    per_slice = max(1, rate // 100)
    load_start = os.getloadavg()[0]
    start = time.perf_counter()
    next_print = every
    done = 0
    worst_traj = worst_own = 0.0
    # after warm-up, the trajectory longest less its waits for a core: (that, wall, CPU,
    # CPU in collections, waits for a core)
    worst_parts = (0.0, 0.0, 0.0, 0.0, 0.0)
    warm_from = min(10.0, seconds / 3)
    rows = []
    print(f"{'t s':>5} {'queued':>8} {'exported':>10} {'dropped':>8} {'RSS MiB':>8} "
          f"{'worst traj ms':>13} {'less wait':>9} {'GC CPU ms':>9} {'full GCs':>8}")  # fmt: skip
    while True:
        now = time.perf_counter() - start
        if now >= next_print or now >= seconds:  # the last slice too
            s = rollout.export_stats
            row = (now, s.pending, s.exported, s.dropped, rss_mib(), worst_traj, pauses.take(),
                   worst_own, pauses.take_full())  # fmt: skip
            rows.append(row)
            print(f"{row[0]:5.0f} {row[1]:8d} {row[2]:10d} {row[3]:8d} {row[4]:8.1f} "
                  f"{row[5] * 1e3:13.1f} {row[7] * 1e3:9.1f} {row[6] * 1e3:9.1f} "
                  f"{row[8]:8d}")  # fmt: skip
            worst_traj = worst_own = 0.0
            next_print += every
        if now >= seconds:
            break
        for _ in range(per_slice):
            w = waited()
            g = pauses.total
            cpu = time.thread_time()
            t = time.perf_counter()
            with tracer.trajectory(f"t{done}", env="bench", model="m") as traj:
                with traj.generate():
                    pass
                with traj.env_step():
                    pass
            took = time.perf_counter() - t
            cpu = time.thread_time() - cpu
            wait = (waited() - w) / 1e9
            worst_traj = max(worst_traj, took)
            worst_own = max(worst_own, took - wait)
            if took - wait > worst_parts[0] and now >= warm_from:
                worst_parts = (took - wait, took, cpu, pauses.total - g, wait)
            done += 1
            if done % rate == 0:  # a training step: the trainer takes its breakdowns
                rollout.collector.drain()
        lag = (done / rate) - (time.perf_counter() - start)
        if lag > 0:
            time.sleep(lag)
    elapsed = time.perf_counter() - start
    load_end = os.getloadavg()[0]
    if gate is not None:
        gate.set()
    rollout.shutdown(120)
    s = rollout.export_stats
    warm = [r for r in rows if r[0] >= warm_from]
    print(f"trajectories {done} in {elapsed:.1f} s ({done / elapsed:.0f}/s), spans "
          f"{3 * done}; exported {s.exported}, dropped {s.dropped}")  # fmt: skip
    if warm:
        print(
            f"after warm-up: queue {warm[0][1]} -> {warm[-1][1]} (max "
            f"{max(r[1] for r in warm)}), RSS {warm[0][4]:.1f} -> {warm[-1][4]:.1f} MiB"
        )
        print(f"worst trajectory {max(r[5] for r in warm) * 1e3:.1f} ms wall, "
              f"{worst_parts[0] * 1e3:.1f} ms less its waits for a core; worst "
              f"collection {max(r[6] for r in warm) * 1e3:.1f} ms CPU (gen 0/1/2: "
              + "/".join(f"{g * 1e3:.1f}" for g in pauses.by_gen) + " ms), "
              f"{sum(r[8] for r in warm)} full collections; load average "
              f"{load_start:.1f} -> {load_end:.1f}")  # fmt: skip
        _, wall, cpu, in_gc, wait = (x * 1e3 for x in worst_parts)
        print(f"that trajectory: {wall:.1f} ms wall = {cpu:.1f} ms CPU ({in_gc:.1f} in "
              f"collections) + {wait:.1f} waiting for a core + {max(0.0, wall - cpu - wait):.1f} "
              f"blocked (a lock, the GIL, a sleep)")  # fmt: skip
    files = sorted(str(p) for p in folder.rglob("*.jsonl"))
    res = read_sources(files)
    print(f"the trace file holds {res.found} trajectories; losses {res.all_losses()}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=1000, help="trajectories per second")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long (default 60)")
    parser.add_argument("--every", type=float, default=5.0, help="print every N s (5)")
    parser.add_argument(
        "--hung-disk", action="store_true", help="every trace-file write waits until the end"
    )
    parser.add_argument("--dir", default=None, help="where the trace file goes (deleted)")
    args = parser.parse_args()  # fmt: skip
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        return run(args.rate, args.seconds, args.every, args.hung_disk, Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
