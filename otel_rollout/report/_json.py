"""The report as JSON: the ``summarize()`` dict plus counts of what was read."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from otel_rollout._breakdown import Breakdown
from otel_rollout._summary import summarize
from otel_rollout.report._model import ReadResult


def report_dict(result: ReadResult, bds: Sequence[Breakdown]) -> dict[str, Any]:
    """SkyRL's keys over ``bds`` (the trajectories kept by the filters) and the counts."""
    out: dict[str, Any] = summarize(bds)
    out["trajectories"] = len(bds)
    out["incomplete"] = len(result.incomplete)
    return out


def dumps(result: ReadResult, bds: Sequence[Breakdown]) -> str:
    return json.dumps(report_dict(result, bds), indent=2, sort_keys=True)
