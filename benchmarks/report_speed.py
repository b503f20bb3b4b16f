"""``otel-rollout report``'s CPU against the standard library's ``json.loads`` of its input.

Writes a trace file through the default pipeline (``configure(local=True)``: the
breakdown on each root, the trace file rotated at ``--max-mb``) with ``--trajectories``
10-turn trajectories, or takes ``--files`` already written. Then, on the same files:

- the CPU of ``json.loads`` of every line, in this process (the baseline: a report cannot
  do its work without at least reading its input);
- ``otel-rollout report FILES --format json`` in a child process: its CPU (user +
  system), wall time and peak RSS;
- the CPU of a child that only starts and imports what the report imports: the fixed
  start-up cost inside the report's figure.

Each is run ``--repeat`` times; the medians are printed. The children write their
bytecode to a temporary cache (warmed up first), as an installed package has it, even
where ``PYTHONDONTWRITEBYTECODE`` is set: compiling the package is not the report's cost.

Says whether the report's hot loops ran in C (``otel_rollout._speedups``) or in Python
(``OTEL_ROLLOUT_PURE_PYTHON=1`` in the environment, or no extension built). Prints the
report's CPU as a ratio of ``json.loads``'s (below 1.0: the report costs less
than parsing its input with the standard library), with and without the start-up.

The report above reads with ``--jobs 1`` (one process: its CPU is the figure compared
with ``json.loads``). With ``--jobs N`` (several files: rotated, ``--max-mb``), it also
runs ``--repeat`` times each with ``--jobs 1`` and ``--jobs N``, alternating, and prints
the medians of CPU (all processes), wall time, the peak RSS of the report's process and
of its largest worker, the ratios, the load average, and whether both JSON answers are
the same.

    python benchmarks/report_speed.py [--trajectories 30000] [--files F ...] [--repeat 3]
    python benchmarks/report_speed.py --files /data/run/*.jsonl --jobs 2
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


_IMPORTS = (
    "import resource\n"
    "from otel_rollout.cli import main\n"
    "import otel_rollout.report._command, otel_rollout.report._sources\n"
    "import otel_rollout.report._json, otel_rollout.report._aggregate\n"
    "s = resource.getrusage(resource.RUSAGE_SELF)\n"
    "print(s.ru_utime + s.ru_stime)\n"
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


def loops(env: dict[str, str]) -> str:
    """Where the report's hot loops run in a child with ``env``: C or Python."""
    probe = "from otel_rollout.report import _otlp_typed as t; print(t._span_rows is not None)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env=env, check=True).stdout.strip()  # fmt: skip
    if out == "True":
        return "C (otel_rollout._speedups)"
    return "Python (no _speedups, or OTEL_ROLLOUT_PURE_PYTHON=1)"


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


def child_env(cache: str) -> dict[str, str]:
    """The children's environment: bytecode cached in ``cache``."""
    env = dict(os.environ, PYTHONPYCACHEPREFIX=cache)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def start_up_cpu(env: dict[str, str]) -> float:
    """CPU seconds of a child that starts and imports what the report imports."""
    proc = subprocess.run([sys.executable, "-c", _IMPORTS], capture_output=True, text=True,
                          env=env, check=True)  # fmt: skip
    return float(proc.stdout.strip().splitlines()[-1])


def run_report(
    files: list[str], *extra: str, env: dict[str, str] | None = None
) -> tuple[float, float, float, float, dict]:
    """CPU seconds, wall seconds, peak RSS (MiB) of the report's process and of its largest
    child (a ``--jobs`` worker; 0 without) and the JSON answer of one report."""
    proc = subprocess.run([sys.executable, "-c", _CHILD, *files, *extra],
                          capture_output=True, text=True, env=env)  # fmt: skip
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
    parser.add_argument("--repeat", type=int, default=3, help="runs of each (default 3)")
    parser.add_argument("--dir", default=None, help="where the file is written (deleted after)")
    parser.add_argument("--jobs", type=int, help="also compare report --jobs 1 and --jobs N")
    args = parser.parse_args()  # fmt: skip
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        files = args.files
        if not files:
            t = time.perf_counter()
            files = write_trace_file(Path(tmp), args.trajectories, args.max_mb)
            print(f"wrote {args.trajectories} trajectories in {time.perf_counter() - t:.0f} s")
        n = max(1, args.repeat)
        loads = [json_loads_cpu(files) for _ in range(n)]
        size = loads[0][1]
        base = statistics.median(cpu for cpu, _ in loads)
        print(f"{len(files)} files, {size / 1e6:.0f} MB; json.loads of every line: "
              f"{base:.2f} s CPU ({size / 1e6 / base:.0f} MB/s), median of {n}: "
              f"{' '.join(f'{c:.2f}' for c, _ in loads)}")  # fmt: skip
        env = child_env(os.path.join(tmp, "pycache"))
        start_up_cpu(env)  # warms the bytecode cache, with a report of one line
        one = os.path.join(tmp, "one-line.jsonl")
        with open(files[0], "rb") as f, open(one, "wb") as w:
            w.write(f.readline())
        run_report([one], env=env)
        starts = [start_up_cpu(env) for _ in range(n)]
        runs = [run_report(files, "--jobs", "1", env=env) for _ in range(n)]
        for cpu, wall, rss, _, out in runs:
            print(f"  report: CPU {cpu:6.2f} s, wall {wall:6.2f} s, peak RSS {rss:6.1f} MiB, "
                  f"{out['trajectories']} trajectories")  # fmt: skip
        cpu = statistics.median(r[0] for r in runs)
        wall = statistics.median(r[1] for r in runs)
        rss = statistics.median(r[2] for r in runs)
        start = statistics.median(starts)
        print(f"report (median of {n}): CPU {cpu:.2f} s = {cpu / base:.2f}x json.loads; "
              f"wall {wall:.2f} s; peak RSS {rss:.1f} MiB")  # fmt: skip
        print(f"of which start-up (interpreter + imports): {start:.2f} s CPU; without it: "
              f"{cpu - start:.2f} s = {(cpu - start) / base:.2f}x json.loads")  # fmt: skip
        print(f"the report's hot loops ran in {loops(env)}; load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")  # fmt: skip
        if args.jobs:
            compare_jobs(files, args.jobs, n, env)
    return 0


def compare_jobs(files: list[str], jobs: int, repeat: int, env: dict[str, str]) -> None:
    """``--jobs 1`` against ``--jobs N`` on the same files, alternating, medians printed."""
    runs: dict[int, list[tuple[float, float, float, float]]] = {1: [], jobs: []}
    answers: dict[int, dict] = {}
    load = os.getloadavg()[0]
    for _ in range(repeat):
        for n in (1, jobs):
            *figures, answers[n] = run_report(files, "--jobs", str(n), env=env)
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
