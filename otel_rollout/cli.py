"""The ``otel-rollout`` command line: ``demo``, ``report``, ``example``."""

from __future__ import annotations

import argparse
import math
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

_CLI_HINT = "pip install 'otel-rollout[cli]'"

JAEGER_HINT = (
    "Open it in Jaeger: run Jaeger (docker run --rm -p 16686:16686 -p 4318:4318 "
    "jaegertracing/jaeger:2.12.0), open http://localhost:16686, Search > Upload, and pick "
    "the file (OTLP JSON); or re-run with OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318."
)


_JAEGER_URL_HELP = (
    "Jaeger UI the batch timelines link trace ids to (default: $OTEL_ROLLOUT_JAEGER_URL, "
    "else http://localhost:16686, the compose stack's)"
)


def _need(*modules: str) -> None:
    missing = []
    for m in modules:
        try:
            __import__(m)
        except ImportError:
            missing.append(m)
    if missing:
        raise SystemExit(
            f"otel-rollout: this command needs {', '.join(missing)}; install with: {_CLI_HINT}"
        )


#: Times accepted by --since/--until: from 1970 to the end of year 9999 (unix seconds).
_LAST_SECOND = 253402300799


def _parse_time(value: str) -> int:
    """ISO 8601 time (or unix seconds) as unix nanoseconds, between 1970 and 9999."""
    try:
        seconds = float(value)
    except ValueError:
        try:
            dt = datetime.fromisoformat(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"not an ISO time or unix seconds: {value!r}"
            ) from None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        seconds = dt.timestamp()
    if not math.isfinite(seconds) or not 0 <= seconds <= _LAST_SECOND:
        raise argparse.ArgumentTypeError(
            f"not a time: {value!r} (unix seconds or ISO 8601, from 1970 to 9999)"
        )
    return int(seconds * 1e9)


def _parse_band(item: str) -> tuple[str, str]:
    """``PHASE=BAND``: a phase name mapped to one of the five bands."""
    from otel_rollout.attributes import ALL_BANDS

    phase, sep, band = item.partition("=")
    if not sep or not phase.strip():
        raise argparse.ArgumentTypeError(f"expected PHASE=BAND, got {item!r}")
    if band not in ALL_BANDS:
        raise argparse.ArgumentTypeError(
            f"{item!r}: {band!r} is not a band; expected one of {', '.join(ALL_BANDS)}"
        )
    return phase.strip(), band


class _OneLineErrors(argparse.ArgumentParser):
    """A subcommand parser whose usage errors are one line (exit code 2), no usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otel-rollout",
        description="Observe the rollouts of LLM RL trainers with OpenTelemetry.",
    )
    from otel_rollout._version import __version__

    parser.add_argument("--version", action="version", version=f"otel-rollout {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_OneLineErrors)
    ex = sub.add_parser("example", help="run a small traced rollout and print its breakdown")
    ex.add_argument("-n", "--trajectories", type=int, default=16, help="trajectories to run")
    ex.set_defaults(func=_example)

    demo = sub.add_parser(
        "demo",
        help="run a traced concurrent rollout on real skyrl-gym envs; table, trace, pictures",
        description=(
            "Run concurrent trajectories on skyrl-gym's gsm8k_multi_turn, text2sql (a SQLite "
            "database is created in the output dir) and lcb (generated code run against test "
            "cases in a subprocess) envs, as one batch, against a simulated "
            "continuous-batching inference server (--engine sim) or any OpenAI-compatible "
            "server (--engine openai). Writes an OTLP JSON lines trace file, a PNG and an "
            "HTML page. Also exports over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set."
        ),
    )
    demo.add_argument("-n", "--trajectories", type=int, default=64)
    demo.add_argument("--concurrency", type=int, default=16)
    demo.add_argument(
        "--envs", default="gsm8k_multi_turn,text2sql,lcb", help="comma-separated env classes"
    )
    demo.add_argument("--engine", choices=("sim", "openai"), default="sim")
    demo.add_argument("--base-url", help="OpenAI-compatible server, e.g. http://host:8000/v1")
    demo.add_argument("--model", help="model name for --engine openai")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--output-dir", default="otel-rollout-demo", type=Path)
    demo.add_argument("--no-progress", action="store_true", help="no progress bar")
    demo.add_argument("--jaeger-url", help=_JAEGER_URL_HELP)
    demo.add_argument(
        "--linger",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="keep the providers up SECONDS after the run, before shutdown (lets Prometheus "
        "scrape the final values when OTEL_METRICS_EXPORTER=prometheus)",
    )
    demo.set_defaults(func=_demo)

    rep = sub.add_parser(
        "report",
        help="recompute breakdowns from a trace file, Jaeger or Tempo",
        description=(
            "Read traces back and recompute each trajectory's breakdown with the same "
            "function the online processor uses. PATH_OR_URL (one or more, read as one "
            "stream): OTLP JSON lines files or globs ('traces-*.jsonl'); a Jaeger query URL "
            "(http://host:16686/api/traces?service=NAME); or a Tempo search URL "
            "(http://host:3200/api/search?tags=...). Exit codes: 0 report printed, 1 no "
            "trajectories in the input, 2 bad arguments, 3 input cannot be read."
        ),
    )
    rep.add_argument("source", metavar="PATH_OR_URL", nargs="+")
    rep.add_argument("--env", help="only this env class")
    rep.add_argument("--model", help="only this model")
    rep.add_argument("--service", help="only traces of this service.name")
    rep.add_argument("--since", type=_parse_time, help="ISO time or unix seconds")
    rep.add_argument("--until", type=_parse_time, help="ISO time or unix seconds")
    rep.add_argument(
        "--band",
        action="append",
        type=_parse_band,
        metavar="PHASE=BAND",
        help="map a phase to a band (llm, env, env_setup, env_teardown, other)",
    )
    rep.add_argument("--format", choices=("table", "json"), default="table")
    rep.add_argument("--output-dir", type=Path, help="where pictures go (default: none)")
    rep.add_argument("--jaeger-url", help=_JAEGER_URL_HELP)
    rep.add_argument(
        "--baseline",
        action="append",
        metavar="PATH_OR_URL",
        help="compare with another run (repeatable for several files): per env class and "
        "band, both means and p90s, the difference and a bootstrap 95%% interval",
    )
    rep.set_defaults(func=_report)
    return parser


def _example(args: argparse.Namespace) -> int:
    from otel_rollout.demo._example import run_example

    run_example(args.trajectories)
    return 0


def _show(console, data, out_dir: Path | None, title: str, batch_spans=None,
          jaeger_url: str | None = None) -> None:  # fmt: skip
    from otel_rollout.report._tables import print_slowest, print_table, print_waits

    print_table(console, data, title)
    print_slowest(console, data)
    print_waits(console, data)
    if out_dir is not None and data.count:
        from otel_rollout.report._pictures import draw

        png, page = draw(data, out_dir)
        console.print(f"pictures: {png}  {page}")
    if len(data.batches):
        from otel_rollout.report._command import show_batches

        show_batches(console, data, batch_spans or {}, out_dir, jaeger_url)


def _demo(args: argparse.Namespace) -> int:
    _need("rich", "matplotlib", "skyrl_gym")
    import asyncio

    from rich.console import Console
    from rich.progress import Progress

    from otel_rollout.demo._engine import OpenAIEngine, SimEngine
    from otel_rollout.demo._run import run_demo_async
    from otel_rollout.report import read_trace_file
    from otel_rollout.report._aggregate import ReportData

    envs = tuple(e.strip() for e in args.envs.split(",") if e.strip())
    if args.engine == "openai":
        if not args.base_url or not args.model:
            raise SystemExit("otel-rollout: --engine openai needs --base-url and --model")
        engine = OpenAIEngine(args.base_url, args.model)
    else:
        engine = SimEngine(seed=args.seed)
    console = Console()
    with Progress(console=console, disable=args.no_progress, transient=True) as progress:
        task = progress.add_task("trajectories", total=args.trajectories)
        result = asyncio.run(
            run_demo_async(
                n=args.trajectories,
                concurrency=args.concurrency,
                envs=envs,
                engine=engine,
                seed=args.seed,
                output_dir=args.output_dir,
                on_done=lambda: progress.advance(task),
                linger_s=args.linger,
            )
        )
    phases, batch_spans = {}, {}
    if result.trace_file.exists():
        read = read_trace_file(result.trace_file)
        phases = {t.breakdown.trace_id: t.phases for t in read.trajectories}
        batch_spans = read.batches
    data = ReportData.of(result.breakdowns, phases)
    _show(console, data, args.output_dir, "demo (online breakdowns)", batch_spans,
          args.jaeger_url)  # fmt: skip
    if result.errors:
        console.print(f"[red]{result.errors} trajectories failed[/red]")
    rewards = ", ".join(f"{env} {r:.3f}" for env, r in sorted(result.rewards.items()))
    console.print(f"mean reward: {rewards}")
    console.print(f"trace file: {result.trace_file}")
    console.print(f"recompute offline: otel-rollout report {result.trace_file}")
    console.print(JAEGER_HINT)
    return 0 if not result.errors else 1


def _report(args: argparse.Namespace) -> int:
    from otel_rollout.report._command import run_report

    return run_report(args, _need)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
