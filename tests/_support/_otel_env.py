"""A test's OpenTelemetry settings are its own: none inherited from the machine running it."""

from __future__ import annotations

import os


def clean_otel_env(monkeypatch) -> None:
    """Unset every ``OTEL_*`` variable (``OTEL_ROLLOUT_*`` included) for this test."""
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)
