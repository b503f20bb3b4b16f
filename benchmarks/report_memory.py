"""Peak memory and time of ``otel-rollout report`` on a small and a large trace file.

Writes two synthetic OTLP JSON lines files (``--small-mb`` and ``--large-mb``, each line a
batch of 50 ten-turn trajectories, 22 spans each, in the order a trace file has them), runs
``otel-rollout report FILE --format json`` on each in its own process, and prints the peak
RSS of each and their ratio: a report that streams uses about the same memory on both.
The only state that grows with the input is 48 bytes per trajectory (the columns kept for
exact p90), printed too.

    python benchmarks/report_memory.py [--small-mb 64] [--large-mb 1024] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T0 = 1_700_000_000_000_000_000


def _span(trace: str, sid: int, parent: int | None, name: str, start: int, end: int,
          attrs: str) -> str:  # fmt: skip
    p = f',"parentSpanId":"{parent:016x}"' if parent is not None else ""
    return (f'{{"traceId":"{trace}","spanId":"{sid:016x}"{p},"name":"{name}","kind":1,'
            f'"startTimeUnixNano":"{start}","endTimeUnixNano":"{end}","attributes":[{attrs}],'
            f'"status":{{}}}}')  # fmt: skip


def _phase(name: str) -> str:
    return f'{{"key":"rollout.phase","value":{{"stringValue":"{name}"}}}}'


def _trajectory(n: int) -> list[str]:
    trace = f"{n:032x}"
    root = n * 100 + 1
    start = T0 + n * 1_000_000
    spans = [_span(trace, root + 1, root, "env_setup", start, start + 1000, _phase("env_setup"))]
    t = start + 1000
    for turn in range(10):
        spans.append(_span(trace, root + 2 + 2 * turn, root, "generate", t, t + 50_000,
                           _phase("llm")))  # fmt: skip
        spans.append(_span(trace, root + 3 + 2 * turn, root, "env_step", t + 50_000,
                           t + 70_000, _phase("env")))  # fmt: skip
        t += 70_000
    env = "gsm8k" if n % 2 else "text2sql"
    attrs = (f'{{"key":"rollout.trajectory.id","value":{{"stringValue":"t{n}"}}}},'
             f'{{"key":"rollout.env.class","value":{{"stringValue":"{env}"}}}}')  # fmt: skip
    spans.append(_span(trace, root, None, "trajectory", start, t + 1000, attrs))
    return spans


def write_file(path: Path, megabytes: int) -> int:
    """A trace file of about ``megabytes`` MiB; returns its number of trajectories."""
    head = ('{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":'
            '{"stringValue":"bench"}}]},"scopeSpans":[{"scope":{"name":"otel_rollout"},'
            '"spans":[')  # fmt: skip
    target = megabytes * 2**20
    n = written = 0
    with path.open("w") as f:
        while written < target:
            spans = []
            for _ in range(50):
                spans.extend(_trajectory(n))
                n += 1
            line = head + ",".join(spans) + "]}]}]}\n"
            f.write(line)
            written += len(line)
    return n


def run_report(path: Path) -> tuple[float, float, float, dict]:
    """Peak RSS (MiB), wall and CPU seconds of ``otel-rollout report path --format json``."""
    code = (
        "import resource, sys\n"
        "from otel_rollout.cli import main\n"
        "rc = main(['report', sys.argv[1], '--format', 'json'])\n"
        "u = resource.getrusage(resource.RUSAGE_SELF)\n"
        "print(u.ru_utime + u.ru_stime, u.ru_maxrss, file=sys.stderr)\n"
        "sys.exit(rc)\n"
    )
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, check=True)  # fmt: skip
    wall = time.perf_counter() - t
    cpu, peak_kib = proc.stderr.strip().splitlines()[-1].split()
    return int(peak_kib) / 1024, wall, float(cpu), json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small-mb", type=int, default=64)
    parser.add_argument("--large-mb", type=int, default=1024)
    parser.add_argument("--dir", default=None, help="where the files go (deleted after)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for mb in (args.small_mb, args.large_mb):
            path = Path(tmp) / f"traces-{mb}.jsonl"
            n = write_file(path, mb)
            size = path.stat().st_size / 2**20
            peak, wall, cpu, out = run_report(path)
            assert out["trajectories"] == n, (out["trajectories"], n)
            rows.append((size, n, peak, wall, out["losses"]))
            print(
                f"{size:8.0f} MiB  {n:9d} trajectories  peak RSS {peak:7.1f} MiB  "
                f"wall {wall:6.1f} s  CPU {cpu:6.1f} s ({n / cpu:,.0f} trajectories per CPU s)"
                f"  losses {out['losses']}"
            )
            os.unlink(path)
    (s_size, s_n, s_peak, _, _), (l_size, l_n, l_peak, _, _) = rows
    print(
        f"input {l_size / s_size:.1f}x larger -> peak RSS {l_peak / s_peak:.2f}x; growth "
        f"{(l_peak - s_peak) * 2**20 / max(1, l_n - s_n):.0f} bytes per extra trajectory"
    )


if __name__ == "__main__":
    main()
