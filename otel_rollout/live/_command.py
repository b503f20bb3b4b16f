"""``otel-rollout top``: build the feed from the arguments and run the terminal app (or,
with ``--once`` or when stdout is not a terminal, print one screen and exit)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from otel_rollout.live._feed import Feed
from otel_rollout.live._ingest import Ingest
from otel_rollout.live._screen import View, render
from otel_rollout.live._sources import Sources
from otel_rollout.live._state import LiveState

#: ``--once`` reads for at most this long before printing what it has.
ONCE_MAX_S = 60.0


def build_feed(args: argparse.Namespace) -> Feed:
    """The feed the arguments describe (files, folder, glob, and/or ``--listen``)."""
    bands = dict(args.band) if getattr(args, "band", None) else None
    state = LiveState()
    ingest = Ingest(state, bands=bands)
    listener = None
    if args.listen is not None:
        from otel_rollout.live._listen import Listener

        host, port = args.listen
        listener = Listener(host, port).start()
    sources = Sources.of(args.source, run=args.run) if args.source or listener is None else None
    return Feed(ingest, sources, listener, stale_s=args.stale_after)


def print_once(feed: Feed, view: View, width: int, height: int, stream: Any) -> None:
    """Read until caught up (or :data:`ONCE_MAX_S`), then print one screen."""
    from rich.console import Console

    deadline = time.monotonic() + ONCE_MAX_S
    while time.monotonic() < deadline:
        feed.poll(budget_s=1.0)
        if feed.caught_up:
            break
    feed.ingest.state.tick()
    view.live, view.notes = feed.status(), feed.notes()
    console = Console(file=stream, width=width, height=height, highlight=False)
    console.print(render(feed.ingest.state, view, width, height, feed.reader_losses()))


def run_top(args: argparse.Namespace, need: Any) -> int:
    """The ``top`` subcommand on parsed ``args``; ``need(*modules)`` checks the extra."""
    need("rich")
    view = View(window_s=args.window * 60.0)
    feed = build_feed(args)
    try:
        if args.once or not sys.stdout.isatty():
            import shutil

            cols, rows = shutil.get_terminal_size((80, 24))
            print_once(feed, view, cols, max(6, rows - 1), sys.stdout)  # the prompt
            return 0
        need("textual")
        from otel_rollout.live._app import TopApp

        TopApp(feed, view, refresh_s=args.refresh, jaeger=args.jaeger_url,
               bands=dict(args.band) if args.band else None).run()  # fmt: skip
        return 0
    finally:
        if feed.listener is not None:
            feed.listener.stop()
