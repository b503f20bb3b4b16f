"""Integrations with RL trainers and inference engines (optional extras)."""

from __future__ import annotations

from otel_rollout.instrumentation import require

__all__ = ["require"]
