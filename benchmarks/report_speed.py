"""``otel-rollout report``'s CPU against the standard library's ``json.loads`` of its input.

Writes a trace file through the default pipeline (``configure(local=True)``: the
breakdown on each root, the trace file rotated at ``--max-mb``) with ``--trajectories``
10-turn trajectories, or takes ``--files`` already written. Then, on the same files:

- the CPU of ``json.loads`` of every line, in this process (the baseline: a report cannot
  do its work without at least reading its input);
- ``otel-rollout report FILES --format json`` in a child process: its CPU (user +
  system), wall time and peak RSS.

Prints the report's CPU as a ratio of ``json.loads``'s (below 1.0: the report costs less
than parsing its input with the standard library).

The report above reads with ``--jobs 1``. With ``--jobs N`` (several files: rotated,
``--max-mb``), it runs ``--repeat`` times each with ``--jobs 1`` and ``--jobs N``,
alternating, and prints the medians of CPU (all processes), wall time, the peak RSS of the
report's process and of its largest worker, the ratios, the load average, and whether both
JSON answers are the same.

    python benchmarks/report_speed.py [--trajectories 30000]
    python benchmarks/report_speed.py --files /work/data/jobs/*.jsonl --jobs 2
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_CHILD = (
    "import resource, sys, time\n"
    "from otel_rollout.cli import main\n"
    "t = time.perf_counter()\n"
    "rc = main(['report', *sys.argv[1:], '--format', 'json'])\n"
    "wall = time.perf_counter() - t\n"
    "s, c = resource.getrusage(resource.RUSAGE_SELF), "
    "resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "cpu = s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime\n"
    "print(cpu, wall, s.ru_maxrss, c.ru_maxrss, file=sys.stderr)\n"
    "sys.exit(rc)\n"
)


def write_trace_file(folder: Path, n: int, max_mb: float) -> list[str]:
    """``n`` 10-turn trajectories through the default pipeline; the files written."""
    sys.path.insert(0, str(Path(__file__).parent))
    from overhead import rollout_tree

    import otel_rollout

    rollout = otel_rollout.configure(local=True, output_dir=folder, metrics_exporter="none",
                                     trace_file_max_mb=max_mb, service_name="bench")  # fmt: skip
    for i in range(n):
        rollout_tree(rollout.tracer)
        if i % 2000 == 1999:
            rollout.force_flush(30)
    rollout.shutdown(60)
    return sorted(glob.glob(str(folder / "**" / "*.jsonl"), recursive=True))


def json_loads_cpu(files: list[str]) -> tuple[float, int]:
    """CPU seconds of ``json.loads`` of every line of ``files``, and the bytes read."""
    cpu = 0.0
    size = 0
    for path in files:
        with open(path, "rb") as f:
            for line in f:
                size += len(line)
                t = time.process_time()
                json.loads(line)
                cpu += time.process_time() - t
    return cpu, size


def run_report(files: list[str], *extra: str) -> tuple[float, float, float, float, dict]:
    """CPU seconds, wall seconds, peak RSS (MiB) of the report's process and of its largest
    child (a ``--jobs`` worker; 0 without) and the JSON answer of one report."""
    proc = subprocess.run([sys.executable, "-c", _CHILD, *files, *extra],
                          capture_output=True, text=True)  # fmt: skip
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"report failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu, wall, rss, child_rss = proc.stderr.strip().splitlines()[-1].split()
    return float(cpu), float(wall), int(rss) / 1024, int(child_rss) / 1024, json.loads(proc.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--trajectories",
        type=int,
        default=30000,
        help="trajectories to write (default 30000, about 390 MB)",
    )
    parser.add_argument(
        "--max-mb",
        type=float,
        default=128.0,
        help="rotate the trace file at this size (default 128)",
    )
    parser.add_argument("--files", nargs="+", help="read these trace files instead")
    parser.add_argument("--dir", default=None, help="where the file is written (deleted after)")
    parser.add_argument("--jobs", type=int, help="also compare report --jobs 1 and --jobs N")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each with --jobs")
    args = parser.parse_args()  # fmt: skip
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        files = args.files
        if not files:
            t = time.perf_counter()
            files = write_trace_file(Path(tmp), args.trajectories, args.max_mb)
            print(f"wrote {args.trajectories} trajectories in {time.perf_counter() - t:.0f} s")
        base, size = json_loads_cpu(files)
        print(f"{len(files)} files, {size / 1e6:.0f} MB; json.loads of every line: "
              f"{base:.2f} s CPU ({size / 1e6 / base:.0f} MB/s)")  # fmt: skip
        cpu, wall, rss, _, out = run_report(files, "--jobs", "1")
        print(f"report: CPU {cpu:6.2f} s = {cpu / base:5.2f}x json.loads, wall {wall:6.2f} s, "
              f"peak RSS {rss:6.1f} MiB, {out['trajectories']} trajectories")  # fmt: skip
        if args.jobs:
            compare_jobs(files, args.jobs, args.repeat)
    return 0


def compare_jobs(files: list[str], jobs: int, repeat: int) -> None:
    """``--jobs 1`` against ``--jobs N`` on the same files, alternating, medians printed."""
    runs: dict[int, list[tuple[float, float, float, float]]] = {1: [], jobs: []}
    answers: dict[int, dict] = {}
    load = os.getloadavg()[0]
    for _ in range(repeat):
        for n in (1, jobs):
            *figures, answers[n] = run_report(files, "--jobs", str(n))
            runs[n].append(tuple(figures))  # type: ignore[arg-type]
    load = (load + os.getloadavg()[0]) / 2
    med = {n: [statistics.median(r[i] for r in rs) for i in range(4)] for n, rs in runs.items()}
    for n, (cpu, wall, rss, child) in med.items():
        print(f"--jobs {n}: CPU {cpu:6.2f} s, wall {wall:6.2f} s, peak RSS {rss:6.1f} MiB, "
              f"largest worker {child:6.1f} MiB (median of {repeat})")  # fmt: skip
    (c1, w1, *_), (cn, wn, *_) = med[1], med[jobs]
    same = answers[1] == answers[jobs]
    print(f"--jobs {jobs} / --jobs 1: CPU {cn / c1:.2f}x, wall {wn / w1:.2f}x; load average "
          f"{load:.1f} on {os.cpu_count()} cores; same JSON: {same}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
