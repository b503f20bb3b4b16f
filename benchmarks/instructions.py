"""Instruction counts per 10-turn trajectory under valgrind: a ratio that noise cannot move.

The CPU-time ratio of ``overhead.py`` swings by 0.1-0.2 on a shared 2-core machine.
``valgrind --tool=callgrind`` counts the instructions the interpreter executes, whatever
else runs: two runs of 200 trajectories differed by 0.6% per trajectory (hash seeds and
garbage collection still vary a little); use at least 200. Each mode runs in its own process
twice (warm-up only, then warm-up plus ``--trajectories``); the difference is the cost of
the trajectories alone, start-up and imports cancelled out.

    python benchmarks/instructions.py [--trajectories 200]

The last line is the cost of the GenAI client metrics (``GenAIMetricsProcessor``: a
duration and two token-usage records per generate) as a share of otel-rollout's own
per-trajectory overhead over the bare SDK.

Needs ``valgrind`` (Debian package ``valgrind``); takes about seven minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

MODES = {
    "bare": "bare SDK + batch export",
    "nometrics": "otel-rollout, no histograms",
    "ours": "otel-rollout + histograms",
    "tokens": "otel-rollout + histograms, token counts recorded",
    "genai": "as tokens + GenAI client metrics",
}


def tokens_tree(tracer) -> None:
    """The 10-turn trajectory of ``overhead.rollout_tree``, each generate recording usage."""
    with tracer.trajectory("x", env="bench", model="m") as traj:
        with traj.env_setup():
            pass
        for _ in range(10):
            with traj.generate() as gen:
                gen.record(input_tokens=512, output_tokens=128, finish_reasons="stop")
            with traj.env_step():
                pass
        with traj.env_teardown():
            pass


def _run_one(mode: str, n: int) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from overhead import NullExporter, bare_tree, rollout_tree

    from otel_rollout import BreakdownProcessor, GenAIMetricsProcessor, RolloutTracer

    provider = TracerProvider()
    if mode == "bare":
        tracer, tree = provider.get_tracer("bench"), bare_tree
    else:
        meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
        processor = BreakdownProcessor(meters, record_metrics=mode != "nometrics")
        provider.add_span_processor(processor)
        if mode == "genai":
            provider.add_span_processor(GenAIMetricsProcessor(meters))
        tree = tokens_tree if mode in ("tokens", "genai") else rollout_tree
        tracer = RolloutTracer(provider, processor=processor)
    # A long delay and a big queue: the export thread stays out of the count.
    provider.add_span_processor(
        BatchSpanProcessor(NullExporter(), schedule_delay_millis=600_000, max_queue_size=1 << 20)
    )
    for _ in range(20 + n):
        tree(tracer)


def _count(mode: str, n: int) -> int:
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
           __file__, "--one", mode, str(n)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    match = re.search(r"Collected : (\d+)", out)
    if match is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{out[-2000:]}")
    return int(match.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectories", type=int, default=200)
    parser.add_argument("--one", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        _run_one(args.one[0], int(args.one[1]))
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind not found (Debian package valgrind)", file=sys.stderr)
        return 2
    n = args.trajectories
    per = {m: (_count(m, n) - _count(m, 0)) / n for m in MODES}
    hist = (per["ours"] - per["nometrics"]) / 7
    rows = [(f"10-turn trajectory, {label}", f"{per[m] / 1e6:7.2f} M instructions")
            for m, label in MODES.items()]  # fmt: skip
    rows += [
        ("ratio otel-rollout / bare SDK", f"{per['ours'] / per['bare']:7.3f}"),
        ("ratio without histograms / bare SDK", f"{per['nometrics'] / per['bare']:7.3f}"),
        ("per histogram record (7 per trajectory)", f"{hist / 1e3:7.1f} k instructions"),
        ("GenAI client metrics / otel-rollout's overhead",
         f"{(per['genai'] - per['tokens']) / (per['tokens'] - per['bare']):7.3f}"),
    ]  # fmt: skip
    for label, value in rows:
        print(f"{label:<48}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
