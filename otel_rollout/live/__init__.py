"""``otel-rollout top``: a live view of a running rollout in the terminal (docs/live.md)."""

from otel_rollout.live._ingest import Feed, Ingest
from otel_rollout.live._screen import View, render
from otel_rollout.live._sources import Sources
from otel_rollout.live._state import LiveState

__all__ = ["Feed", "Ingest", "LiveState", "Sources", "View", "render"]
