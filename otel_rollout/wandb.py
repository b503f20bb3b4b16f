"""Weights & Biases logging of what otel-rollout measures, once per training step.

``log_step`` logs :func:`~otel_rollout.summarize` of the step's trajectories (SkyRL's
``generate/trajectory_time_*`` keys), the batch analysis' summary (tail, stragglers,
engine demand) and the batch timeline, as an image, an HTML panel (hover a row for its
breakdown, click to open its trace), or both::

    import otel_rollout
    from otel_rollout.wandb import log_step

    with otel_rollout.batch(step=step) as batch:
        ...  # the step's rollouts
    log_step(batch, step=step)  # to wandb.run

Install with ``pip install 'otel-rollout[wandb]'``; ``wandb`` is imported when a step is
logged, and the timeline needs ``matplotlib`` for its image.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from otel_rollout._accounting.batch_analysis import analyze_batch
from otel_rollout._accounting.batch_figures import BatchAnalysis
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._accounting.summary import summarize

__all__ = ["TIMELINES", "log_step", "step_figures"]

_HINT = "pip install 'otel-rollout[wandb]'"
#: What ``timeline=`` accepts: an image, an HTML panel, both, or none (``None``).
TIMELINES = ("image", "html", "both", None)
#: The media keys, under the prefix.
TIMELINE_IMAGE_KEY = "batch_timeline"
TIMELINE_HTML_KEY = "batch_timeline_html"


def _wandb() -> Any:
    try:
        import wandb
    except ImportError:
        raise ImportError(f"otel_rollout.wandb needs wandb; install with: {_HINT}") from None
    return wandb


def _analysis_and_breakdowns(
    batch: Any, breakdowns: Iterable[Breakdown] | None
) -> tuple[BatchAnalysis | None, list[Breakdown]]:
    """A :class:`~otel_rollout.Batch` (its analysis and breakdowns), a
    :class:`~otel_rollout.BatchAnalysis`, or nothing (analysed from ``breakdowns``)."""
    bds = list(breakdowns) if breakdowns is not None else None
    if batch is None:
        if not bds:
            return None, bds or []
        return analyze_batch(bds), bds
    if isinstance(batch, BatchAnalysis):
        return batch, bds or []
    analysis = getattr(batch, "analysis", None)
    if bds is None:
        bds = list(getattr(batch, "breakdowns", ()) or ())
    if analysis is None and bds:  # a Batch still open
        analysis = analyze_batch(bds)
    return analysis, bds


def step_figures(
    batch: Any = None,
    breakdowns: Iterable[Breakdown] | None = None,
    *,
    prefix: str = "generate/",
) -> dict[str, float]:
    """The numbers :func:`log_step` logs: ``summarize(breakdowns)`` and the batch's
    ``summary()`` (both with ``prefix``). ``batch`` is a :class:`~otel_rollout.Batch`, a
    :class:`~otel_rollout.BatchAnalysis` or ``None``; ``breakdowns`` default to the
    batch's own."""
    analysis, bds = _analysis_and_breakdowns(batch, breakdowns)
    out = summarize(bds, prefix=prefix)
    if analysis is not None:
        out.update(analysis.summary(prefix=prefix))
    return out


def _timeline_media(
    wandb: Any, analysis: BatchAnalysis, bds: list[Breakdown], step: Any, timeline: str,
    workdir: Path, jaeger_url: str | None,
) -> dict[str, Any]:  # fmt: skip
    from otel_rollout.report._batches import BatchView
    from otel_rollout.report._timeline import batch_svg, draw_batch_png
    from otel_rollout.report._timeline import jaeger_url as _jaeger

    view = BatchView(analysis, step if isinstance(step, int) else None)
    media: dict[str, Any] = {}
    if timeline in ("image", "both"):
        png = draw_batch_png(view, bds, workdir / f"batch-{analysis.batch_id or 'step'}.png")
        media[TIMELINE_IMAGE_KEY] = wandb.Image(str(png), caption=f"batch {view.name}")
    if timeline in ("html", "both"):
        svg = batch_svg(view, bds, _jaeger(jaeger_url))
        media[TIMELINE_HTML_KEY] = wandb.Html(f"<html><body>{svg}</body></html>", inject=False)
    return media


def log_step(
    batch: Any = None,
    breakdowns: Iterable[Breakdown] | None = None,
    *,
    step: int | None = None,
    run: Any = None,
    timeline: str | None = "image",
    prefix: str = "generate/",
    jaeger_url: str | None = None,
    commit: bool | None = None,
) -> dict[str, float]:
    """Log one training step to W&B: :func:`step_figures` and the batch timeline.

    ``batch``: the step's :class:`~otel_rollout.Batch` (``with otel_rollout.batch(...)
    as batch``), its :class:`~otel_rollout.BatchAnalysis`, or ``None`` with
    ``breakdowns`` (e.g. ``rollout.collector.drain()``). ``run`` defaults to
    ``wandb.run``; ``step`` and ``commit`` go to ``run.log``. ``timeline`` is one of
    :data:`TIMELINES`: the image needs matplotlib; the HTML panel links trace ids to the
    Jaeger UI at ``jaeger_url`` (default ``$OTEL_ROLLOUT_JAEGER_URL``, else
    ``http://localhost:16686``). Returns the numbers logged (without the media).
    """
    if timeline not in TIMELINES:
        raise ValueError(f"timeline must be one of {TIMELINES}, got {timeline!r}")
    wandb = _wandb()
    run = run if run is not None else wandb.run
    if run is None:
        raise RuntimeError("no W&B run: call wandb.init() first, or pass run=")
    analysis, bds = _analysis_and_breakdowns(batch, breakdowns)
    figures = summarize(bds, prefix=prefix)
    if analysis is not None:
        figures.update(analysis.summary(prefix=prefix))
    payload: dict[str, Any] = dict(figures)
    with tempfile.TemporaryDirectory(prefix="otel-rollout-wandb-") as tmp:
        if timeline is not None and analysis is not None and bds:
            media = _timeline_media(wandb, analysis, bds, step if step is not None else
                                    getattr(batch, "step", None), timeline, Path(tmp),
                                    jaeger_url)  # fmt: skip
            payload.update({f"{prefix}{k}": v for k, v in media.items()})
        kwargs: dict[str, Any] = {}
        if step is not None:
            kwargs["step"] = step
        if commit is not None:
            kwargs["commit"] = commit
        run.log(payload, **kwargs)  # wandb copies the image into the run before returning
    return figures
