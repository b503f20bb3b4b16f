"""What ``demo`` and ``report`` print on a terminal, in order: notices, the verdict (at most
seven lines), then the tables; ``verbose`` adds the per-band, wait, loop, reward and
per-batch tables."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from otel_rollout.report._aggregate import ReportData
from otel_rollout.report._model import BatchSpan
from otel_rollout.report._verdict import verdict


def _say(console: Any, line: str, **kw: Any) -> None:
    console.print(line, markup=False, highlight=False, **kw)


def show(
    console: Any,
    data: ReportData,
    *,
    title: str,
    batch_spans: Mapping[str, BatchSpan] | None = None,
    out_dir: Path | None = None,
    jaeger_url: str | None = None,
    verbose: bool = False,
    failures: Mapping[str, int] | None = None,
    losses: Mapping[str, int] | None = None,
    exported: int | None = None,
    more: str = "more tables: --verbose; every figure: --format json",
    steps: Any = None,
) -> None:
    """The verdict, then the tables (``verbose``: all of them), then the pictures' paths.
    ``steps``: the step spans read (``ReadResult.steps``)."""
    from otel_rollout.report._batches import longest_drains, print_batch, print_batches_overview
    from otel_rollout.report._steps import print_steps, step_views
    from otel_rollout.report._tables import (
        ROWS_SHOWN,
        print_compact,
        print_rewards,
        print_slowest,
        print_table,
        print_waits,
    )

    views = data.batches.analyses(batch_spans or {}) if len(data.batches) else []
    steps = step_views(steps, batch_spans, data.batches.breakdowns_of())
    runs = [r for r in data.runs if r is not None]
    if len(runs) > 1:  # several runs (by ``rollout.run.id``)
        how = "split by run" if data.by == "run" else "pooled; --by run splits them"
        _say(console, f"note: the input holds {len(runs)} runs ({how})", style="yellow")
    if not data.count:
        return
    fails = dict(data.failures) if failures is None else dict(failures)
    lines = verdict(data.groups(), views, data.slowest(), failures=fails, losses=losses or {},
                    exported=exported, steps=steps, bands=data.bands)  # fmt: skip
    for i, line in enumerate(lines):
        _say(console, line, style="bold" if i == 0 else None)
    console.print()
    (print_table if verbose else print_compact)(console, data, title)
    print_slowest(console, data)
    print_steps(console, steps)
    if verbose:
        print_rewards(console, data)
        print_waits(console, data)
    if views:
        print_batches_overview(console, views, ROWS_SHOWN)
        if verbose:
            for v in longest_drains(views):
                print_batch(console, v)
    if out_dir is not None:
        from otel_rollout.report._pictures import draw

        png, page = draw(data, out_dir, jaeger_url=jaeger_url)
        _say(console, f"pictures: {png}  {page}")
        if steps:
            from otel_rollout.report._step_picture import write_step_picture

            picture = write_step_picture(steps, data.batches.breakdowns_of(), out_dir)
            _say(console, f"step picture: {picture}")
        if views:
            from otel_rollout.report._timeline import write_batch_pages

            pngs, index = write_batch_pages(views, data.batches.breakdowns_of(), out_dir,
                                            jaeger_url)  # fmt: skip
            _say(console, f"batch timelines: {index}  ({len(pngs)} PNG)")
    if not verbose and more:
        _say(console, more, style="dim")
