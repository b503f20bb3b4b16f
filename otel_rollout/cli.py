"""The ``otel-rollout`` command line: ``demo``, ``report``, ``example``."""

from __future__ import annotations

import argparse
import math
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

_CLI_HINT = "pip install 'otel-rollout[cli]'"

_JAEGER_URL_HELP = (
    "Jaeger UI the pictures link trace ids to (default: $OTEL_ROLLOUT_JAEGER_URL, "
    "else http://localhost:16686, the compose stack's)"
)
_VERBOSE_HELP = "every table: per band, engine split, event loop, rewards, batches"
_DEMO_MORE = "more tables: --verbose; every figure: the report line below, --format json"
#: The demo's env classes (kept here so --help needs no import of the demo).
DEMO_ENVS = ("gsm8k_multi_turn", "text2sql", "lcb")


def _at_least_one(value: str) -> int:
    """An integer >= 1 (trajectories, concurrency, processes)."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def _env_list(value: str) -> tuple[str, ...]:
    """Comma-separated demo env classes, each one of :data:`DEMO_ENVS`."""
    envs = tuple(e.strip() for e in value.split(",") if e.strip())
    unknown = [e for e in envs if e not in DEMO_ENVS]
    if unknown or not envs:
        what = f"unknown env class {', '.join(map(repr, unknown))}" if unknown else "no env class"
        raise argparse.ArgumentTypeError(f"{what}; choose from {','.join(DEMO_ENVS)}")
    return envs


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """--help shows each option's default (those that have one worth showing)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or isinstance(action.default, list):
            return action.help
        if isinstance(action.default, tuple):  # --envs
            return f"{action.help} (default: {','.join(action.default)})"
        return super()._get_help_string(action)


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
    ex = sub.add_parser(
        "example",
        help="run a small traced rollout and print its breakdown",
        formatter_class=_Help,
        description=(
            "Run toy trajectories (sleeps standing in for generate and env steps) through "
            "otel_rollout.configure(local=True), the way a trainer would, and print "
            "summarize()'s dict: SkyRL's generate/trajectory_time_* keys. Traces go to an "
            "OTLP JSON lines file under otel-rollout-output/, unless OTEL_EXPORTER_OTLP_"
            "ENDPOINT sends them to a Collector."
        ),
    )
    ex.add_argument("-n", "--trajectories", type=_at_least_one, default=16,
                    help="trajectories to run")  # fmt: skip
    ex.set_defaults(func=_example)

    demo = sub.add_parser(
        "demo",
        help="run a traced concurrent rollout on real skyrl-gym envs; verdict, tables, pictures",
        formatter_class=_Help,
        description=(
            "Run concurrent trajectories on skyrl-gym's gsm8k_multi_turn, text2sql (a SQLite "
            "database is created in the output dir) and lcb (generated code run against test "
            "cases in a subprocess) envs, as one batch, against a simulated "
            "continuous-batching inference server (--engine sim), any OpenAI-compatible "
            "server (--engine openai) or vLLM (--engine vllm: in-process on --model PATH, "
            "or the server at --base-url). Prints the verdict (where the time went, the batch "
            "tail, stragglers, losses), then the tables. Writes an OTLP JSON lines trace "
            "file, PNGs and HTML pages. Also exports over OTLP when "
            "OTEL_EXPORTER_OTLP_ENDPOINT is set."
        ),
    )
    demo.add_argument("-n", "--trajectories", type=_at_least_one, default=64,
                      help="trajectories to run, one batch")  # fmt: skip
    demo.add_argument("--concurrency", type=_at_least_one, default=16,
                      help="trajectories running at once")  # fmt: skip
    demo.add_argument("--envs", type=_env_list, default=DEMO_ENVS, metavar="ENV[,ENV...]",
                      help=f"env classes, round robin; from {','.join(DEMO_ENVS)}")  # fmt: skip
    demo.add_argument("--engine", choices=("sim", "openai", "vllm"), default="sim",
                      help="simulated engine, an OpenAI-compatible server, or vLLM")  # fmt: skip
    demo.add_argument("--base-url", help="OpenAI-compatible server, e.g. http://host:8000/v1")
    demo.add_argument("--model", help="model name (--engine openai); a local model path for "
                      "an in-process engine (--engine vllm)")  # fmt: skip
    demo.add_argument("--seed", type=int, default=0, help="seed of the workload and engine")
    demo.add_argument("--output-dir", default=Path("otel-rollout-output"), type=Path,
                      help="where the trace file, pictures and SQLite database go")  # fmt: skip
    demo.add_argument("--no-progress", action="store_true", help="no progress bar")
    demo.add_argument("-v", "--verbose", action="store_true", help=_VERBOSE_HELP)
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
        formatter_class=_Help,
        description=(
            "Read traces back and recompute each trajectory's breakdown with the same "
            "function the online processor uses; print the verdict, then the tables. "
            "PATH_OR_URL (one or more, read as one stream): OTLP JSON lines files, globs "
            "('traces-*.jsonl') or folders (their traces-*.jsonl files); a Jaeger base URL "
            "(http://host:16686, service from --service, else $OTEL_SERVICE_NAME, else "
            "otel-rollout, configure()'s default) or query URL; or a Tempo base URL (the same "
            "service) or search URL (http://host:3200/api/search?tags=...). Exit codes: 0 "
            "report printed, 1 no trajectories in the input, 2 bad arguments, 3 input cannot "
            "be read."
        ),
    )
    rep.add_argument("source", metavar="PATH_OR_URL", nargs="+",
                     help="trace files, globs, folders, Jaeger or Tempo URLs")  # fmt: skip
    rep.add_argument("--env", help="only this env class")
    rep.add_argument("--model", help="only this model")
    rep.add_argument("--service", help="only traces of this service.name")
    rep.add_argument("--by", choices=("env", "run"), default="env",
                     help="group the tables by env class or by run (rollout.run.id)")  # fmt: skip
    rep.add_argument("-v", "--verbose", action="store_true",
                     help=f"{_VERBOSE_HELP}, incomplete trace ids")  # fmt: skip
    rep.add_argument("--since", type=_parse_time, help="ISO time or unix seconds")
    rep.add_argument("--until", type=_parse_time, help="ISO time or unix seconds")
    rep.add_argument(
        "--band",
        action="append",
        type=_parse_band,
        metavar="PHASE=BAND",
        help="map a phase to a band (llm, env, env_setup, env_teardown, other)",
    )
    rep.add_argument("--format", choices=("table", "json"), default="table",
                     help="tables on the terminal, or every figure as JSON on stdout")  # fmt: skip
    rep.add_argument("--output-dir", type=Path, help="write the pictures and HTML pages here")
    rep.add_argument("--jaeger-url", help=_JAEGER_URL_HELP)
    rep.add_argument(
        "--jobs",
        type=_at_least_one,
        metavar="N",
        help="processes reading several trace files (rotated files, a glob, a folder) "
        "at once (default 1: this process reads them); the figures are the same. Worth it "
        "with idle cores and files of tens of MB: each worker holds a whole file's "
        "trajectories. Inputs under 16 MB are read in this process",
    )
    rep.add_argument(
        "--baseline",
        action="append",
        metavar="PATH_OR_URL",
        help="compare with another run (repeatable for several files): per env class and "
        "band, both means, the difference, a bootstrap 95%% interval and a Holm-adjusted "
        "p-value; * marks a difference beyond noise across all comparisons and at least "
        "5%% and 1 ms (docs/demo.md)",
    )
    rep.set_defaults(func=_report)
    from otel_rollout.live._args import add_parser as add_top

    add_top(sub, _parse_band, _need)
    return parser


def _example(args: argparse.Namespace) -> int:
    from otel_rollout.demo._example import run_example

    run_example(args.trajectories)
    return 0


def _demo(args: argparse.Namespace) -> int:
    _need("rich", "matplotlib", "skyrl_gym")
    import asyncio

    from rich.console import Console
    from rich.progress import Progress

    from otel_rollout.demo._engine import OpenAIEngine, SimEngine
    from otel_rollout.demo._hints import jaeger_hint, report_command
    from otel_rollout.demo._run import run_demo_async
    from otel_rollout.report import read_trace_file
    from otel_rollout.report._aggregate import ReportData
    from otel_rollout.report._render import show

    if args.engine == "openai":
        if not args.base_url or not args.model:
            raise SystemExit("otel-rollout: --engine openai needs --base-url and --model")
        engine = OpenAIEngine(args.base_url, args.model)
    elif args.engine == "vllm":
        from otel_rollout.demo._vllm import vllm_engine

        engine = vllm_engine(args.model, args.base_url)
    else:
        engine = SimEngine(seed=args.seed)
    console = Console()
    with Progress(console=console, disable=args.no_progress, transient=True) as progress:
        task = progress.add_task("trajectories", total=args.trajectories)
        result = asyncio.run(
            run_demo_async(
                n=args.trajectories,
                concurrency=args.concurrency,
                envs=tuple(args.envs),
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
    data = ReportData.of(result.breakdowns, phases, run_id=result.run_id)
    show(console, data, title="demo (online breakdowns)", batch_spans=batch_spans,
         out_dir=args.output_dir, jaeger_url=args.jaeger_url, verbose=args.verbose,
         failures=result.failures, losses=result.losses, exported=result.exported,
         more=_DEMO_MORE)  # fmt: skip
    if result.rewards:
        rewards = ", ".join(f"{env} {r:.3f}" for env, r in sorted(result.rewards.items()))
        console.print(f"mean reward: {rewards}", markup=False, highlight=False)
    console.print(f"trace file: {result.trace_file}", markup=False, highlight=False,
                  soft_wrap=True)  # fmt: skip
    console.print("recompute offline:", markup=False, highlight=False)
    console.print(f"  {report_command(result.trace_file)}", markup=False, highlight=False,
                  soft_wrap=True)  # fmt: skip
    for line in jaeger_hint():
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0 if not result.errors else 1


def _report(args: argparse.Namespace) -> int:
    from otel_rollout.report._command import run_report

    return run_report(args, _need)


def main(argv: list[str] | None = None) -> int:
    if "numpy" not in sys.modules:
        # No command does linear algebra: the thread pool OpenBLAS starts when numpy is
        # imported would only spin (6% of a report's CPU). A value the user set is kept.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from otel_rollout._base.text import escape_stream_errors

    escape_stream_errors(sys.stdout)  # odd text in ids is escaped, never a traceback
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
