"""The report as JSON: the ``summarize()`` dict plus counts of what was read and lost."""

from __future__ import annotations

import json
from typing import Any

from otel_rollout._accounting.reward import analyses_dict
from otel_rollout.report._aggregate import ReportData
from otel_rollout.report._batches import LOSS_BATCH_FULL, batch_dict
from otel_rollout.report._model import LOSS_INCOMPLETE, ReadResult


def report_dict(data: ReportData, result: ReadResult) -> dict[str, Any]:
    """SkyRL's keys over the trajectories in ``data`` (those the filters kept), plus
    ``trajectories``, ``runs`` (trajectories per ``rollout.run.id``), ``found`` (before
    filters), ``incomplete`` (and the first 1,000 of
    their ids, ``incomplete_trace_ids``), ``losses`` per reason and
    ``export_losses``: spans the writers counted lost before the file, per reason;
    with rewards, ``reward_vs_latency``: mean reward by e2e decile and by turn count per
    env class; with batch ids, ``batches``: each batch's figures (:func:`batch_dict`)."""
    out: dict[str, Any] = data.summary()
    out["trajectories"] = data.count
    # trajectories per writer run (rollout.run.id), when the writers named their run
    out["runs"] = {str(k): n for k, n in sorted(data.runs.items(), key=lambda kv: str(kv[0]))
                   if k is not None}  # fmt: skip
    out["found"] = result.found
    out["incomplete"] = result.losses.get(LOSS_INCOMPLETE, 0)
    #: the first MAX_LISTED of them (the terminal shows ten, with --verbose)
    out["incomplete_trace_ids"] = list(result.incomplete)
    losses = result.all_losses()
    if data.batches.dropped:
        losses[LOSS_BATCH_FULL] = data.batches.dropped
    out["losses"] = dict(sorted(losses.items()))
    # the writers' own count of spans lost before the file (export_losses by reason)
    out["export_losses"] = result.export_losses
    if len(data.rewards):
        out["reward_vs_latency"] = analyses_dict(data.rewards.analyses())
    if len(data.batches):
        out["batches"] = [batch_dict(v) for v in data.batches.analyses(result.batches)]
    return out


def dumps(data: ReportData, result: ReadResult, extra: dict[str, Any] | None = None) -> str:
    return json.dumps({**report_dict(data, result), **(extra or {})}, indent=2, sort_keys=True)
