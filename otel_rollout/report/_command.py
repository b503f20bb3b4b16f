"""``otel-rollout report``: read traces back, recompute, print tables, pictures or JSON
(exit codes: docs/demo.md)."""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
from collections import Counter
from collections.abc import Iterator
from typing import IO, Any, TextIO

from otel_rollout.report._aggregate import ReportData
from otel_rollout.report._model import LOSS_INCOMPLETE, ReadResult, TraceReadError, TrajectoryTrace

EXIT_OK, EXIT_NO_TRAJECTORIES, EXIT_USAGE, EXIT_UNREADABLE = 0, 1, 2, 3
#: Bad-line warnings printed; the rest are only counted.
_WARNINGS_SHOWN = 20
#: Values listed per attribute when a filter matches nothing.
_PRESENT_SHOWN = 8


class _Warnings:
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.n = 0

    def __call__(self, message: str) -> None:
        self.n += 1
        if self.n <= _WARNINGS_SHOWN:
            print(f"otel-rollout report: warning: {message}", file=self.stream)
        elif self.n == _WARNINGS_SHOWN + 1:
            print("otel-rollout report: warning: more bad lines; counted below, not shown",
                  file=self.stream)  # fmt: skip


def _keep(args: argparse.Namespace, t: TrajectoryTrace) -> bool:
    b = t.breakdown
    return (
        (args.env is None or b.env_class == args.env)
        and (args.model is None or b.model == args.model)
        and (args.since is None or b.start_time_ns >= args.since)
        and (args.until is None or b.start_time_ns <= args.until)
    )


@contextlib.contextmanager
def few_collections() -> Iterator[None]:
    """Cyclic garbage collection seldom while a report reads (the spans held for assembly
    would survive many young collections, each walking them again)."""
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


def run_report(args: argparse.Namespace, need: Any) -> int:
    """The ``report`` subcommand on parsed ``args``; ``need(*modules)`` checks the extra."""
    from otel_rollout.report._sources import read_sources

    if args.format == "table":
        need("rich", *(("matplotlib",) if args.output_dir is not None else ()))
    if args.by == "run" and args.baseline:
        print("otel-rollout report: --baseline compares env classes; it does not go with "
              "--by run (report each run against the baseline instead)",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    bands = dict(args.band) if args.band else None
    data = ReportData(by=args.by)
    # Every trajectory read, filters or not: what there is when a filter matches nothing.
    present: dict[str, Counter] = {"env class": Counter(), "model": Counter(),
                                   "service": Counter()}  # fmt: skip

    def tally(t: TrajectoryTrace) -> None:
        b = t.breakdown
        for what, key in (("env class", b.env_class), ("model", b.model),
                          ("service", t.service)):  # fmt: skip
            if key in present[what] or len(present[what]) < 1000:
                present[what][key] += 1

    def emit(t: TrajectoryTrace) -> None:
        tally(t)
        if _keep(args, t):
            data.add(t)

    try:
        with few_collections():
            result = read_sources(args.source, bands=bands, service=args.service, emit=emit,
                                  warn=_Warnings(sys.stderr), since=args.since,
                                  until=args.until, skipped=tally)  # fmt: skip
    except TraceReadError as exc:
        print(f"otel-rollout report: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    changes = None
    if args.baseline:
        from otel_rollout.report._compare import compare

        base = ReportData()
        try:
            base_result = read_sources(args.baseline, bands=bands, service=args.service,
                                       emit=lambda t: base.add(t) if _keep(args, t) else None,
                                       warn=_Warnings(sys.stderr))  # fmt: skip
        except TraceReadError as exc:
            print(f"otel-rollout report: baseline: {exc}", file=sys.stderr)
            return EXIT_UNREADABLE
        changes = compare(base, data)
    if args.format == "json":
        from otel_rollout.report._json import dumps

        print(dumps(data, result, changes))
        _say_empty(result, data, sys.stderr, present, args)
        if result.incomplete:  # the ids are in the JSON
            n = max(len(result.incomplete), result.losses.get(LOSS_INCOMPLETE, 0))
            print(f"otel-rollout report: {n} incomplete trajectories (no root span); ids in "
                  "incomplete_trace_ids", file=sys.stderr)  # fmt: skip
        return EXIT_OK if data.count else EXIT_NO_TRAJECTORIES
    from rich.console import Console

    from otel_rollout.report._render import show
    from otel_rollout.report._tables import print_losses

    console = Console()
    console.on_broken_pipe = _closed_pipe  # type: ignore[method-assign]
    title = " ".join(args.source)
    title = f"report: {title if len(title) <= 40 else title[:39] + '…'}"
    if changes is not None:  # the answer first, then the bands, then the run's own report
        from otel_rollout.report._compare import headline, print_changes

        views = (base.batches.analyses(base_result.batches) if len(base.batches) else [],
                 data.batches.analyses(result.batches) if len(data.batches) else [])  # fmt: skip
        console.print(headline(*views, width=console.width), style="bold", markup=False,
                      highlight=False)  # fmt: skip
        console.print()
        print_changes(console, changes, " ".join(args.baseline))
        console.print()
    show(console, data, title=title, batch_spans=result.batches, out_dir=args.output_dir,
         jaeger_url=args.jaeger_url, verbose=args.verbose, losses=result.all_losses(),
         steps=result.steps)  # fmt: skip
    print_losses(console, result, args.verbose)
    _say_empty(result, data, console.file, present, args)
    return EXIT_OK if data.count else EXIT_NO_TRAJECTORIES


def _closed_pipe() -> None:
    """The output was closed early (``| head``): on to the command line's quiet exit (rich's
    own exits with 1, which says "no trajectories" here)."""
    raise BrokenPipeError


def _listing(counts: Counter) -> str:
    items = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))
    shown = ", ".join(f"{k if k is not None else '(none)'} ({n})" for k, n in
                      items[:_PRESENT_SHOWN])  # fmt: skip
    more = len(items) - _PRESENT_SHOWN
    return shown + (f", and {more} more (see --format json)" if more > 0 else "")


def _say_empty(result: ReadResult, data: ReportData, stream: IO[str],
               present: dict[str, Counter], args: argparse.Namespace) -> None:  # fmt: skip
    found = sum(present["env class"].values()) or result.found
    if not found:
        print(f"otel-rollout report: no trajectories in the input ({result.spans} spans read)",
              file=stream)  # fmt: skip
        hint = _jaeger_services_hint(args)
        if hint:
            print(f"otel-rollout report: {hint}", file=stream)
    elif not data.count:
        print(f"otel-rollout report: none of the {found} trajectories matches the "
              "filters", file=stream)  # fmt: skip
        for what, flag in (("env class", "env"), ("model", "model"), ("service", "service")):
            value = getattr(args, flag)
            if value is not None and present[what]:
                plural = "env classes" if what == "env class" else f"{what}s"
                print(f"  --{flag} {value!r}: {plural} present: {_listing(present[what])}",
                      file=stream)  # fmt: skip


def _jaeger_services_hint(args: argparse.Namespace) -> str | None:
    """For a Jaeger base URL that gave nothing: the service asked for and those it has."""
    from otel_rollout.report._sources import default_service, is_url, jaeger_services

    for source in args.source:
        if is_url(source) and "/api/" not in source:
            services = jaeger_services(source)
            if services is not None:
                listed = ", ".join(services[:_PRESENT_SHOWN]) or "none"
                asked = args.service or default_service()
                return f"asked Jaeger for service {asked!r}; it has: {listed} (--service NAME)"
    return None
