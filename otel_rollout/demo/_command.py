"""``otel-rollout demo``: run the workload, then print the verdict, the tables, the files.

Errors the user can fix are one line (an engine without its options, an output folder
that cannot be written); Ctrl-C stops the run at once and prints what ran so far.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

EXIT_INTERRUPTED = 130
_MORE = "more tables: --verbose; every figure: the report line below, --format json"


def _engine(args: argparse.Namespace) -> Any:
    from otel_rollout.demo._engine import OpenAIEngine, SimEngine

    if args.engine == "openai":
        if not args.base_url or not args.model:
            raise SystemExit("otel-rollout: --engine openai needs --base-url and --model")
        return OpenAIEngine(args.base_url, args.model)
    if args.engine == "vllm":
        from otel_rollout.demo._vllm import vllm_engine

        return vllm_engine(args.model, args.base_url)
    return SimEngine(seed=args.seed)


def check_writable(folder: Path) -> None:
    """Make ``folder`` and write a file in it, or exit with one line saying why not."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise SystemExit(f"otel-rollout: cannot write to --output-dir {folder}: {why}") from None


def run_demo_command(args: argparse.Namespace) -> int:
    """The demo as the CLI runs it; its exit code (130 when interrupted)."""
    try:
        return _run(args)
    except KeyboardInterrupt:  # outside the run (starting, printing): nothing to summarise
        print("otel-rollout: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from otel_rollout.demo._hints import jaeger_hint, report_command
    from otel_rollout.demo._run import run_demo
    from otel_rollout.report import read_trace_file
    from otel_rollout.report._aggregate import ReportData
    from otel_rollout.report._render import show

    check_writable(args.output_dir)
    engine = _engine(args)
    console = Console()

    def say(*lines: str) -> None:  # as is: a path runs past 80 columns on its own line
        for line in lines:
            console.print(line, markup=False, highlight=False, soft_wrap=True)

    with Progress(console=console, disable=args.no_progress, transient=True) as progress:
        task = progress.add_task("trajectories", total=args.trajectories)
        result = run_demo(n=args.trajectories, concurrency=args.concurrency,
                          envs=tuple(args.envs), engine=engine, seed=args.seed,
                          output_dir=args.output_dir, on_done=lambda: progress.advance(task),
                          linger_s=args.linger, pace=True)  # fmt: skip
    if result.interrupted:
        say("interrupted after {:,} of {:,} trajectories; what ran:".format(*result.interrupted))
    phases, batch_spans, steps = {}, {}, None
    if result.trace_file.exists():
        read = read_trace_file(result.trace_file)
        phases = {t.breakdown.trace_id: t.phases for t in read.trajectories}
        batch_spans, steps = read.batches, read.steps
    data = ReportData.of(result.breakdowns, phases, run_id=result.run_id)
    show(console, data, title="demo (online breakdowns)", batch_spans=batch_spans,
         out_dir=None if result.interrupted else args.output_dir, jaeger_url=args.jaeger_url,
         verbose=args.verbose, failures=result.failures, losses=result.losses,
         exported=result.exported, more=_MORE, steps=steps)  # fmt: skip
    if result.rewards:
        say("mean reward: " + ", ".join(f"{e} {r:.3f}" for e, r in sorted(result.rewards.items())))
    say("trace file:", f"  {result.trace_file}", "recompute offline:",
        f"  {report_command(result.trace_file)}", *jaeger_hint())  # fmt: skip
    if result.interrupted:
        return EXIT_INTERRUPTED
    return 0 if not result.errors else 1
