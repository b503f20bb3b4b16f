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

Prints the report's CPU as a ratio of ``json.loads``'s (below 1.0: the report costs
less than parsing its input with the standard library), with and without the start-up.

On a shared machine the CPU ratio moves with the load (the report's work waits on memory
more than ``json.loads``'s). ``--instructions`` adds a figure the load cannot move: the
instructions (``valgrind --tool=callgrind``) of ``json.loads`` of every line of the
first file and of the report of that file, each less its start-up (the same script on a
one-line file). Needs valgrind; takes minutes per 20 MB.

    python benchmarks/report_speed.py [--trajectories 30000] [--files F ...] [--repeat 3]
    python benchmarks/report_speed.py --files small.jsonl --repeat 1 --instructions
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
    "s = resource.getrusage(resource.RUSAGE_SELF)\n"
    "print(s.ru_utime + s.ru_stime, wall, s.ru_maxrss, file=sys.stderr)\n"
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
) -> tuple[float, float, float, dict]:
    """CPU seconds, wall seconds, peak RSS (MiB) and the JSON answer of one report."""
    proc = subprocess.run([sys.executable, "-c", _CHILD, *files, *extra],
                          capture_output=True, text=True, env=env)  # fmt: skip
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"report failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu, wall, rss = proc.stderr.strip().splitlines()[-1].split()
    return float(cpu), float(wall), int(rss) / 1024, json.loads(proc.stdout)


_LOADS = "import json, sys\nfor line in open(sys.argv[1], 'rb'):\n    json.loads(line)\n"
_LINES = "import sys\nfor line in open(sys.argv[1], 'rb'):\n    pass\n"
_REPORT = ("import io, sys\nfrom otel_rollout.cli import main\nsys.stdout = io.StringIO()\n"
           "main(['report', sys.argv[1], '--format', 'json'])\n")  # fmt: skip


def instructions(code: str, path: str, env: dict[str, str]) -> int:
    """Instructions (callgrind's total) of ``python -c code path``."""
    import re

    with tempfile.NamedTemporaryFile(suffix=".callgrind") as out:
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out.name}",
                        sys.executable, "-c", code, path], capture_output=True, check=True,
                       env=env)  # fmt: skip
        text = Path(out.name).read_text()
    return int(re.search(r"^summary: (\d+)", text, re.M).group(1))  # type: ignore[union-attr]


def compare_instructions(path: str, one: str, env: dict[str, str]) -> None:
    """The report's instructions as a ratio of ``json.loads``'s on ``path``."""
    loads = instructions(_LOADS, path, env) - instructions(_LINES, path, env)
    report = instructions(_REPORT, path, env) - instructions(_REPORT, one, env)
    print(f"instructions on {Path(path).name}: json.loads {loads / 1e9:.2f} G, report "
          f"{report / 1e9:.2f} G = {report / loads:.2f}x json.loads")  # fmt: skip


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
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions on the first file (valgrind)")  # fmt: skip
    args = parser.parse_args()  # fmt: skip
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
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
        runs = [run_report(files, env=env) for _ in range(n)]
        for cpu, wall, rss, out in runs:
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
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        if args.instructions:
            compare_instructions(files[0], one, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
