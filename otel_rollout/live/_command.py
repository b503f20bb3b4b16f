"""``otel-rollout top``: its arguments (light: ``--help`` imports nothing heavy), then the
terminal app, or with ``--once`` (or a stdout that is not a terminal) one printed screen."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from otel_rollout.attributes import ALL_BANDS
from otel_rollout.live._listen import parse_listen

#: ``--once`` reads for at most this long before printing what it has.
ONCE_MAX_S = 60.0


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
            "Watch a rollout while it runs: where time goes, the current batch's slots as "
            "its drain forms, the last batches' slots and stragglers, export health. SOURCE: "
            "a trace file (and its rotations), a glob, or a folder being written (default: "
            "the newest run in ./otel-rollout-output); or --listen for traces sent over "
            "OTLP. Keys: q quit, p pause, f env filter, s sort, w per process, up/down "
            "select, enter span tree."
        ),
    )
    arg = top.add_argument
    # fmt: off
    arg("source", metavar="SOURCE", nargs="*",
        help="trace file, glob or folder (default ./otel-rollout-output)")
    arg("--listen", type=listen, metavar="[HOST:]PORT",
        help="receive OTLP: gRPC on PORT, HTTP on PORT+1 (e.g. 4317)")
    arg("--run", metavar="RUN_ID", help="in a folder, this run (default: newest)")
    arg("--window", type=float, default=5.0, metavar="MINUTES",
        help="the bands cover the last MINUTES (default 5)")
    arg("--refresh", type=float, default=1.0, metavar="SECONDS",
        help="screen refresh (default 1)")
    arg("--stale-after", type=float, default=30.0, metavar="SECONDS",
        help="say the source stopped growing after SECONDS (default 30)")
    arg("--band", action="append", type=parse_band, metavar="PHASE=BAND",
        help=f"map a phase to a band ({', '.join(ALL_BANDS)})")
    arg("--jaeger-url", help="Jaeger UI for the selected trajectory's link "
        "(default: $OTEL_ROLLOUT_JAEGER_URL, else http://localhost:16686)")
    arg("--once", action="store_true", help="print one screen of what is there now and exit")
    # fmt: on
    top.set_defaults(func=lambda args: run_top(args, need))


def run_top(args: argparse.Namespace, need: Any) -> int:
    """The ``top`` subcommand on parsed ``args``."""
    need("rich")
    from rich.console import Console

    from otel_rollout.live._ingest import Feed, Ingest
    from otel_rollout.live._listen import Listener
    from otel_rollout.live._screen import View, render
    from otel_rollout.live._sources import Sources
    from otel_rollout.live._state import LiveState

    bands = dict(args.band) if args.band else None
    listener = Listener(*args.listen).start() if args.listen is not None else None
    sources = Sources.of(args.source, run=args.run) if args.source or listener is None else None
    feed = Feed(Ingest(LiveState(), bands=bands), sources, listener, stale_s=args.stale_after)
    view = View(window_s=args.window * 60.0)
    try:
        if args.once or not sys.stdout.isatty():
            import shutil

            deadline = time.monotonic() + ONCE_MAX_S  # read until caught up, then print
            while time.monotonic() < deadline:
                feed.poll(budget_s=1.0)
                if feed.caught_up:
                    break
            feed.ingest.state.tick()
            view.live, view.notes = feed.status(), feed.notes()
            cols, rows = shutil.get_terminal_size((80, 24))
            height = max(6, rows - 1)  # the prompt's line
            Console(file=sys.stdout, width=cols, height=height, highlight=False).print(
                render(feed.ingest.state, view, cols, height, feed.reader_losses()))  # fmt: skip
            return 0
        need("textual")
        from otel_rollout.live._app import TopApp

        TopApp(feed, view, refresh_s=args.refresh, jaeger=args.jaeger_url, bands=bands).run()
        return 0
    finally:
        if listener is not None:
            listener.stop()
