"""``otel-rollout report``: read traces back, recompute, print tables, pictures or JSON.

Exit codes: 0 the report was printed; 1 the input holds no trajectories; 2 bad arguments;
3 the input cannot be read (missing file, a glob matching nothing, a backend that fails or
answers something that is not trace JSON). Bad lines in a file are skipped with a warning
naming file and line, and every loss is counted per reason in the output.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any, TextIO

from otel_rollout.report._aggregate import ReportData
from otel_rollout.report._model import (
    LOSS_INCOMPLETE,
    ReadResult,
    TraceReadError,
    TrajectoryTrace,
)

EXIT_OK = 0
EXIT_NO_TRAJECTORIES = 1
EXIT_USAGE = 2
EXIT_UNREADABLE = 3

#: Bad-line warnings printed; the rest are only counted.
_WARNINGS_SHOWN = 20


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
    """Cyclic garbage collection seldom while a report reads: the spans held for assembly
    would survive many young collections, each walking them again. The assembler's own
    records are untracked, so this now guards what it cannot untrack (a plugin's objects,
    the parser's on the Python path). The objects alive before are set aside
    (``gc.freeze``); this process is the command's own, and the usual thresholds come
    back after."""
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
        need("rich")
        if args.output_dir is not None:
            need("matplotlib")
    bands = dict(args.band) if args.band else None
    by = getattr(args, "by", "env")
    if by == "run" and getattr(args, "baseline", None):
        print(
            "otel-rollout report: --baseline compares env classes; it does not go with "
            "--by run (report each run against the baseline instead)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    data = ReportData(by=by)
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

    def reset() -> None:  # a parallel read starts again sequentially
        nonlocal data
        data = ReportData(by=by)
        for counts in present.values():
            counts.clear()

    try:
        with few_collections():
            result = _read(args, bands, emit, tally, reset)
    except TraceReadError as exc:
        print(f"otel-rollout report: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    changes = None
    if getattr(args, "baseline", None):
        base = ReportData()
        try:
            read_sources(args.baseline, bands=bands, service=args.service,
                         emit=lambda t: base.add(t) if _keep(args, t) else None,
                         warn=_Warnings(sys.stderr))  # fmt: skip
        except TraceReadError as exc:
            print(f"otel-rollout report: baseline: {exc}", file=sys.stderr)
            return EXIT_UNREADABLE
        from otel_rollout.report._compare import compare

        changes = compare(base, data)
    if args.format == "json":
        from otel_rollout.report._json import dumps

        extra = {}
        if changes is not None:
            from otel_rollout.report._compare import changes_json

            extra["baseline"] = changes_json(changes)
        print(dumps(data, result, extra))
        _say_empty(result, data, sys.stderr, present, args)
        if result.incomplete:  # the ids are in the JSON
            n = max(len(result.incomplete), result.losses.get(LOSS_INCOMPLETE, 0))
            print(f"otel-rollout report: {n} incomplete trajectories (no root span); ids in "
                  "incomplete_trace_ids", file=sys.stderr)  # fmt: skip
        return EXIT_OK if result.found else EXIT_NO_TRAJECTORIES
    from rich.console import Console

    from otel_rollout.report._render import show
    from otel_rollout.report._tables import print_losses

    console = Console()
    verbose = bool(getattr(args, "verbose", False))
    title = " ".join(args.source)
    title = f"report: {title if len(title) <= 40 else title[:39] + '…'}"
    show(console, data, title=title, batch_spans=result.batches, out_dir=args.output_dir,
         jaeger_url=getattr(args, "jaeger_url", None), verbose=verbose,
         losses=result.all_losses())  # fmt: skip
    if changes is not None:
        from otel_rollout.report._compare import print_changes

        print_changes(console, changes, " ".join(args.baseline))
    print_losses(console, result, verbose)
    _say_empty(result, data, console.file, present, args)
    return EXIT_OK if result.found else EXIT_NO_TRAJECTORIES


def _read(args: argparse.Namespace, bands: dict[str, str] | None, emit: Any, tally: Any,
          reset: Any) -> ReadResult:  # fmt: skip
    """``read_sources`` of the command's input, with ``--jobs`` processes for files."""
    from otel_rollout.report._sources import read_sources

    jobs = getattr(args, "jobs", None)
    if jobs is None:
        from otel_rollout.report._parallel import default_jobs

        jobs = default_jobs()
    kwargs = dict(bands=bands, service=args.service, emit=emit, warn=_Warnings(sys.stderr),
                  since=args.since, until=args.until, skipped=tally)  # fmt: skip
    if jobs == 1:
        return read_sources(args.source, **kwargs)
    from otel_rollout.report._parallel import read_sources_parallel

    def note(message: str) -> None:
        print(f"otel-rollout report: --jobs: {message}", file=sys.stderr)

    return read_sources_parallel(
        args.source, jobs=jobs, reset=reset, note=note, own_process=True, **kwargs
    )


def show_batches(console: Any, data: ReportData, spans: Any, out_dir: Any, jaeger: Any) -> None:
    """The batch tables, and with ``out_dir`` the batch timelines (PNG and HTML)."""
    from otel_rollout.report._batches import print_batches

    views = data.batches.analyses(spans)
    print_batches(console, views)
    if out_dir is not None and views:
        from otel_rollout.report._timeline import write_batch_pages

        pngs, page = write_batch_pages(views, data.batches.breakdowns_of(), out_dir, jaeger)
        console.print(f"batch timelines: {page}  ({len(pngs)} PNG)")


#: Values listed per attribute when a filter matches nothing.
_PRESENT_SHOWN = 8


def _listing(counts: Counter) -> str:
    items = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))
    shown = ", ".join(f"{k if k is not None else '(none)'} ({n})" for k, n in
                      items[:_PRESENT_SHOWN])  # fmt: skip
    more = len(items) - _PRESENT_SHOWN
    return shown + (f", and {more} more (see --format json)" if more > 0 else "")


def _say_empty(result: ReadResult, data: ReportData, stream: TextIO,
               present: dict[str, Counter] | None = None,
               args: argparse.Namespace | None = None) -> None:  # fmt: skip
    present = present or {}
    found = sum(present.get("env class", Counter()).values()) or result.found
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
            if args is not None and getattr(args, flag, None) is not None and present.get(what):
                print(f"  --{flag} {getattr(args, flag)!r}: {what}es present: "
                      if what == "env class" else
                      f"  --{flag} {getattr(args, flag)!r}: {what}s present: ",
                      _listing(present[what]), sep="", file=stream)  # fmt: skip


def _jaeger_services_hint(args: argparse.Namespace | None) -> str | None:
    """For a Jaeger base URL that gave nothing: the service asked for and those it has."""
    from otel_rollout.report._sources import default_service, is_url, jaeger_services

    if args is None:
        return None
    for source in args.source:
        if is_url(source) and "/api/" not in source:
            services = jaeger_services(source)
            asked = args.service or default_service()
            if services is not None:
                listed = ", ".join(services[:_PRESENT_SHOWN]) or "none"
                return f"asked Jaeger for service {asked!r}; it has: {listed} (--service NAME)"
    return None
