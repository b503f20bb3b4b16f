"""``otel-rollout top``: a live view of a running rollout in the terminal.

It reads what a run writes as it goes (its trace files, or OTLP sent to an embedded
receiver), rebuilds each trajectory with the report's assembler and breakdown function,
and shows where time goes, the current batch's tail forming, the last batches'
verdicts and export health, refreshed about once a second (docs/live.md).
"""

from otel_rollout.live._feed import Feed
from otel_rollout.live._ingest import Ingest
from otel_rollout.live._screen import View, render
from otel_rollout.live._sources import Sources
from otel_rollout.live._state import LiveState

__all__ = ["Feed", "Ingest", "LiveState", "Sources", "View", "render"]
