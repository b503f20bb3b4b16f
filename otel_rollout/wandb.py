"""Weights & Biases logging of what otel-rollout measures, once per training step
(docs/wandb.md)::

    with otel_rollout.batch(step=step) as batch:
        ...  # the step's rollouts
    otel_rollout.wandb.log_step(batch, step=step)  # to wandb.run

Install with ``pip install 'otel-rollout[wandb]'``; ``wandb`` is imported when a step is
logged, and the timeline needs ``matplotlib`` for its image.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from otel_rollout._accounting.batch_analysis import BatchAnalysis, analyze_batch, breakdown_list
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._accounting.summary import summarize
from otel_rollout._api.batch_span import Batch

__all__ = ["TIMELINES", "log_step", "step_figures"]

#: What ``timeline=`` accepts: an image, an HTML panel, both, or none (``None``).
TIMELINES = ("image", "html", "both", None)


def _analysis_and_breakdowns(
    batch: Any, breakdowns: Iterable[Breakdown] | None
) -> tuple[BatchAnalysis | None, list[Breakdown]]:
    """The batch's analysis and breakdowns; a ``TypeError`` naming what is accepted."""
    if batch is not None and not isinstance(batch, Batch | BatchAnalysis):
        hint = ("breakdowns=collector.drain()" if hasattr(batch, "drain")
                else "a Batch (with otel_rollout.batch(...) as batch), a BatchAnalysis, or "
                     "None with breakdowns=")  # fmt: skip
        raise TypeError(f"batch: expected {hint}; got {type(batch).__name__} {batch!r:.60}")
    if breakdowns is not None:
        bds = breakdown_list(breakdowns, "breakdowns")
    else:
        bds = list(batch.breakdowns) if isinstance(batch, Batch) else []
    if isinstance(batch, BatchAnalysis):
        return batch, bds
    analysis = batch.analysis if isinstance(batch, Batch) else None
    return (analysis or (analyze_batch(bds) if bds else None)), bds  # a Batch still open


def _figures(
    analysis: BatchAnalysis | None, bds: list[Breakdown], prefix: str, per_class: bool
) -> dict[str, float]:
    out = summarize(bds, prefix=prefix, per_class=per_class)
    if analysis is not None:
        out.update(analysis.summary(prefix=prefix))
    return out


def step_figures(
    batch: Any = None,
    breakdowns: Iterable[Breakdown] | None = None,
    *,
    prefix: str = "generate/",
    per_class: bool = False,
) -> dict[str, float]:
    """The numbers :func:`log_step` logs: ``summarize(breakdowns, per_class=per_class)``
    and the batch's ``summary()`` (both with ``prefix``); arguments as :func:`log_step`'s."""
    return _figures(*_analysis_and_breakdowns(batch, breakdowns), prefix, per_class)


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
    per_class: bool = False,
) -> dict[str, float]:
    """Log one training step to W&B: :func:`step_figures` and the batch timeline.

    ``batch``: the step's :class:`~otel_rollout.BatchHandle` (``with otel_rollout.batch(...)
    as batch``), its :class:`~otel_rollout.accounting.BatchAnalysis`, or ``None`` with
    ``breakdowns`` (e.g. ``rollout.collector.drain()``). ``run`` defaults to
    ``wandb.run``; ``step`` and ``commit`` go to ``run.log``. ``timeline`` is one of
    :data:`TIMELINES`: the image needs matplotlib; the HTML panel links trace ids to the
    Jaeger UI at ``jaeger_url`` (default ``$OTEL_ROLLOUT_JAEGER_URL``, else
    ``http://localhost:16686``). ``per_class=True`` adds the keys of each env class
    (reward by e2e decile and by turns): off by default, so the keys of a step do not
    grow with the env classes. Returns the numbers logged (without the media).
    """
    if timeline not in TIMELINES:
        raise ValueError(f"timeline must be one of {TIMELINES}, got {timeline!r}")
    analysis, bds = _analysis_and_breakdowns(batch, breakdowns)  # TypeError before wandb
    try:
        import wandb
    except ImportError:
        raise ImportError(
            "otel_rollout.wandb needs wandb; install with: pip install 'otel-rollout[wandb]'"
        ) from None
    run = run if run is not None else wandb.run
    if run is None:
        raise RuntimeError("no W&B run: call wandb.init() first, or pass run=")
    figures = _figures(analysis, bds, prefix, per_class)
    payload: dict[str, Any] = dict(figures)
    kwargs = {k: v for k, v in (("step", step), ("commit", commit)) if v is not None}
    with tempfile.TemporaryDirectory(prefix="otel-rollout-wandb-") as tmp:
        if timeline is not None and analysis is not None and bds:
            from otel_rollout.report._batches import BatchView
            from otel_rollout.report._timeline import batch_svg, draw_batch_png
            from otel_rollout.report._timeline import jaeger_url as resolve_jaeger_url

            at = step if step is not None else getattr(batch, "step", None)
            view = BatchView(analysis, at if isinstance(at, int) else None)
            if timeline in ("image", "both"):
                png = Path(tmp) / f"batch-{analysis.batch_id or 'step'}.png"
                draw_batch_png(view, bds, png)
                payload[f"{prefix}batch_timeline"] = wandb.Image(
                    str(png), caption=f"batch {view.name}"
                )
            if timeline in ("html", "both"):
                svg = batch_svg(view, bds, resolve_jaeger_url(jaeger_url))
                payload[f"{prefix}batch_timeline_html"] = wandb.Html(
                    f"<html><body>{svg}</body></html>", inject=False
                )
        run.log(payload, **kwargs)  # wandb copies the image into the run before returning
    return figures
