"""The arguments of ``otel-rollout top`` (light: ``--help`` imports nothing heavy)."""

from __future__ import annotations

import argparse
from typing import Any

from otel_rollout.live._listen import parse_listen


def add_parser(sub: Any, parse_band: Any, need: Any) -> None:
    """The ``top`` subparser (cli.py calls this); ``need(*modules)`` checks the extra."""

    def listen(value: str) -> tuple[str, int]:
        try:
            return parse_listen(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    top = sub.add_parser(
        "top",
        help="a live view of a running rollout, in the terminal",
        description=(
            "Watch a rollout while it runs: where time goes, the current batch's tail as it "
            "forms, the last batches' stragglers, export health. SOURCE: a trace file (and "
            "its rotations), a glob, or a folder being written (default: the newest run "
            "in ./otel-rollout-output); or --listen for traces sent over OTLP. Keys: q quit, "
            "p pause, f env filter, s sort, w per process, up/down select, enter span tree."
        ),
    )
    top.add_argument(
        "source",
        metavar="SOURCE",
        nargs="*",
        help="trace file, glob or folder (default ./otel-rollout-output)",
    )
    top.add_argument(
        "--listen",
        type=listen,
        metavar="[HOST:]PORT",
        help="receive OTLP: gRPC on PORT, HTTP on PORT+1 (e.g. 4317)",
    )
    top.add_argument("--run", metavar="RUN_ID", help="in a folder, this run (default: newest)")
    top.add_argument(
        "--window",
        type=float,
        default=5.0,
        metavar="MINUTES",
        help="the bands cover the last MINUTES (default 5)",
    )
    top.add_argument(
        "--refresh", type=float, default=1.0, metavar="SECONDS", help="screen refresh (default 1)"
    )
    top.add_argument(
        "--stale-after",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="say the source stopped growing after SECONDS (default 30)",
    )
    top.add_argument(
        "--band",
        action="append",
        type=parse_band,
        metavar="PHASE=BAND",
        help="map a phase to a band (llm, env, env_setup, env_teardown, other)",
    )
    top.add_argument(
        "--jaeger-url",
        help="Jaeger UI for the selected trajectory's link "
        "(default: $OTEL_ROLLOUT_JAEGER_URL, else http://localhost:16686)",
    )
    top.add_argument("--once", action="store_true",
                     help="print one screen of what is there now and exit")  # fmt: skip

    def run(args: argparse.Namespace) -> int:
        from otel_rollout.live._command import run_top

        return run_top(args, need)

    top.set_defaults(func=run)
