"""The ``otel-rollout`` command line: ``demo``, ``report``, ``top``."""

from __future__ import annotations

import argparse
import math
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

from otel_rollout.demo import ENVS as DEMO_ENVS

_CLI_HINT = "pip install 'otel-rollout[cli]'"
#: What the ``[cli]`` extra installs that a command imports (a missing one: one line).
_CLI_MODULES = frozenset({"rich", "textual", "matplotlib", "skyrl_gym", "opentelemetry"})

_JAEGER_URL_HELP = (
    "Jaeger UI the pictures link trace ids to (default: $OTEL_ROLLOUT_JAEGER_URL, "
    "else http://localhost:16686, the compose stack's)"
)
_VERBOSE_HELP = "every table: per band, engine split, event loop, rewards, batches"


def _at_least_one(value: str) -> int:
    """An integer >= 1 (trajectories, concurrency, processes)."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def _seconds(value: str) -> float:
    """Seconds, a finite number >= 0 (--linger)."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"must be seconds >= 0, got {value}")
    return seconds


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
    """Exit with the install line when a module of the ``[cli]`` extra is missing."""
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
    """``PHASE=BAND``: a phase name mapped to one of the bands."""
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
    from otel_rollout.attributes import ALL_BANDS

    parser.add_argument("--version", action="version", version=f"otel-rollout {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_OneLineErrors)
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
            "or the server at --base-url). Prints the verdict (where the batch's slots went, "
            "the engine, the drain and stragglers, losses), then the tables. Writes an OTLP "
            "JSON lines trace file, PNGs and HTML pages. Also exports over OTLP when "
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
        type=_seconds,
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
            "report printed, 1 no trajectories (in the input, or left by the filters), 2 bad "
            "arguments, 3 input cannot be read."
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
        help=f"map a phase to a band ({', '.join(ALL_BANDS)})",
    )
    rep.add_argument("--format", choices=("table", "json"), default="table",
                     help="tables on the terminal, or every figure as JSON on stdout")  # fmt: skip
    rep.add_argument("--output-dir", type=Path, help="write the pictures and HTML pages here")
    rep.add_argument("--jaeger-url", help=_JAEGER_URL_HELP)
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
    from otel_rollout.live._command import add_parser as add_top

    add_top(sub, _parse_band, _need)
    return parser


def _demo(args: argparse.Namespace) -> int:
    _need("rich", "matplotlib", "skyrl_gym")
    from otel_rollout.demo._command import run_demo_command

    return run_demo_command(args)


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
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        return args.func(args)
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in _CLI_MODULES:
            raise
        print(f"otel-rollout: the command line needs {exc.name}; install with: {_CLI_HINT}",
              file=sys.stderr)  # fmt: skip
        return 1
    except BrokenPipeError:  # stdout closed early (``report --format json | head``)
        return _closed_pipe()


#: The exit status of a command whose output pipe closed (128 + SIGPIPE, as the shell's).
EXIT_CLOSED_PIPE = 141


def _closed_pipe() -> int:
    """Say nothing; output still buffered goes nowhere, so the flush at exit cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor (stdout replaced in-process)
        pass
    return EXIT_CLOSED_PIPE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
