"""The report as JSON: the ``summarize()`` dict plus counts of what was read and lost
(the keys: docs/demo.md)."""

from __future__ import annotations

import json
from typing import Any

from otel_rollout._accounting.reward import analyses_dict
from otel_rollout.report._aggregate import ReportData
from otel_rollout.report._batches import LOSS_BATCH_FULL, batch_dict
from otel_rollout.report._model import LOSS_INCOMPLETE, ReadResult


def report_dict(data: ReportData, result: ReadResult) -> dict[str, Any]:
    """SkyRL's keys over the trajectories the filters kept, plus what was read and lost,
    and the rewards, batches and steps where there are some."""
    losses = result.all_losses()
    if data.batches.dropped:
        losses[LOSS_BATCH_FULL] = data.batches.dropped
    runs = sorted((str(k), n) for k, n in data.runs.items() if k is not None)
    out: dict[str, Any] = {
        **data.summary(),
        "trajectories": data.count,
        "runs": dict(runs),
        "found": result.found,
        "incomplete": result.losses.get(LOSS_INCOMPLETE, 0),
        "incomplete_trace_ids": list(result.incomplete),
        "losses": dict(sorted(losses.items())),
        "export_losses": result.export_losses,
    }
    if len(data.rewards):
        out["reward_vs_latency"] = analyses_dict(data.rewards.analyses())
    if len(data.batches):
        out["batches"] = [batch_dict(v) for v in data.batches.analyses(result.batches)]
    if len(result.steps):
        from otel_rollout.report._steps import step_dict, step_views

        views = step_views(result.steps, result.batches, data.batches.breakdowns_of())
        out["steps"] = [step_dict(v) for v in views]
    return out


def dumps(data: ReportData, result: ReadResult, changes: list | None = None) -> str:
    out = report_dict(data, result)
    if changes is not None:
        from otel_rollout.report._compare import changes_json

        out["baseline"] = changes_json(changes)
    return json.dumps(out, indent=2, sort_keys=True)
