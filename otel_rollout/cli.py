"""The ``otel-rollout`` command line."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otel-rollout",
        description="Observe the rollouts of LLM RL trainers with OpenTelemetry.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    ex = sub.add_parser("example", help="run a small traced rollout and print its breakdown")
    ex.add_argument("-n", "--trajectories", type=int, default=16, help="trajectories to run")
    ex.set_defaults(func=_example)
    return parser


def _example(args: argparse.Namespace) -> int:
    from otel_rollout._example import run_example

    run_example(args.trajectories)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
