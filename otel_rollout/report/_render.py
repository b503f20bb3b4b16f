"""What ``demo`` and ``report`` print on a terminal, in order: notices, the verdict (at most
five lines), then the tables; ``verbose`` adds the per-band, wait, loop, reward and
per-batch tables. Every table fits an 80-column terminal and long lists are capped."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from otel_rollout import attributes as A
from otel_rollout._accounting.summary import summarize_columns
from otel_rollout.report._aggregate import ReportData
from otel_rollout.report._verdict import verdict

#: Rows of a table before "and N more (see --format json)".
ROWS_SHOWN = 10
#: Short headers of the bands in the compact table.
_SHORT = {"llm": "llm", "env": "env", "env_setup": "setup", "env_teardown": "tdown",
          "other": "other"}  # fmt: skip


def runs_notice(data: ReportData) -> str | None:
    """One line when the input holds several runs (by ``rollout.run.id``)."""
    runs = [r for r in data.runs if r is not None]
    if len(runs) < 2:
        return None
    how = "split by run" if data.by == "run" else "pooled; --by run splits them"
    return f"note: the input holds {len(runs)} runs ({how})"


def print_compact(console: Any, data: ReportData, title: str) -> None:
    """A row per group: n, mean and p90 of e2e, each band's share of the mean e2e."""
    from rich import box
    from rich.table import Table

    t = Table(title=f"{title}  (e2e in seconds; bands as share of e2e)", box=box.SIMPLE_HEAD,
              padding=(0, 1), pad_edge=False)  # fmt: skip
    t.add_column(data.group_label, overflow="fold", ratio=1)
    t.add_column("n", justify="right", no_wrap=True)
    t.add_column("mean", justify="right", no_wrap=True)
    t.add_column("p90", justify="right", no_wrap=True)
    for band in A.ALL_BANDS:
        t.add_column(_SHORT[band], justify="right", no_wrap=True)
    groups = data.groups()
    for name, n, columns in groups[:ROWS_SHOWN]:
        s = summarize_columns(columns, prefix="")
        e2e = s["trajectory_time_completion_mean"]
        shares = [
            f"{100 * float(columns[band].mean()) / e2e:.0f}%" if e2e > 0 else "-"
            for band in A.ALL_BANDS
        ]
        t.add_row(name, str(n), f"{e2e:.3f}", f"{s['trajectory_time_completion_p90']:.3f}",
                  *shares)  # fmt: skip
    console.print(t)
    if len(groups) > ROWS_SHOWN:
        console.print(f"and {len(groups) - ROWS_SHOWN} more (see --format json)")


def print_verdict(console: Any, lines: list[str]) -> None:
    for i, line in enumerate(lines):
        console.print(line, style="bold" if i == 0 else None, markup=False, highlight=False)


def show(
    console: Any,
    data: ReportData,
    *,
    title: str,
    batch_spans: Mapping[str, Any] | None = None,
    out_dir: Path | None = None,
    jaeger_url: str | None = None,
    verbose: bool = False,
    failures: Mapping[str, int] | None = None,
    losses: Mapping[str, int] | None = None,
    exported: int | None = None,
    more: str = "more tables: --verbose; every figure: --format json",
) -> None:
    """The verdict, then the tables (``verbose``: all of them), then the pictures' paths."""
    from otel_rollout.report._batches import print_batch, print_batches_overview
    from otel_rollout.report._tables import print_rewards, print_slowest, print_table, print_waits

    views = data.batches.analyses(batch_spans or {}) if len(data.batches) else []
    notice = runs_notice(data)
    if notice:
        console.print(notice, style="yellow", markup=False, highlight=False)
    fails = dict(data.failures) if failures is None else dict(failures)
    if data.count:
        print_verdict(console, verdict(data.groups(), views, data.slowest(), failures=fails,
                                       losses=losses or {}, exported=exported))  # fmt: skip
        console.print()
    if not data.count:
        return
    if verbose:
        print_table(console, data, title)
    else:
        print_compact(console, data, title)
    print_slowest(console, data)
    if verbose:
        print_rewards(console, data)
        print_waits(console, data)
    if views:
        print_batches_overview(console, views, ROWS_SHOWN)
        if verbose:
            from otel_rollout.report._batches import TABLES_SHOWN

            shown = sorted(views, key=lambda v: -v.analysis.tail_ns)[:TABLES_SHOWN]
            for v in sorted(shown, key=lambda v: v.analysis.start_ns):
                print_batch(console, v)
    if out_dir is not None:
        from otel_rollout.report._pictures import draw

        png, page = draw(data, out_dir, jaeger_url=jaeger_url)
        console.print(f"pictures: {png}  {page}", markup=False, highlight=False)
        if views:
            from otel_rollout.report._timeline import write_batch_pages

            pngs, page = write_batch_pages(views, data.batches.breakdowns_of(), out_dir,
                                           jaeger_url)  # fmt: skip
            console.print(f"batch timelines: {page}  ({len(pngs)} PNG)", markup=False,
                          highlight=False)  # fmt: skip
    if not verbose and more:
        console.print(more, style="dim", markup=False, highlight=False)
