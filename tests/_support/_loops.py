"""The report's hot loops run in C (``otel_rollout._speedups``) where it is built, else in
Python: tests of those loops run both ways with :func:`use`."""

from __future__ import annotations

import pytest

from otel_rollout._accounting import span_tree
from otel_rollout._base.compiled import speedups
from otel_rollout.report import _assemble, _otlp_typed

#: The C extension, where it is built here (else None: no C compiler when installed).
_speedups = speedups()

#: The ways the loops run: a fixture's params.
MODES = ("C", "python")


def use(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the loops run ``mode``'s way for a test (skips "C" where it is not built)."""
    if mode == "python":
        monkeypatch.setattr(_otlp_typed, "_span_rows", None)
        monkeypatch.setattr(_otlp_typed, "_attributes", _otlp_typed._kv_attrs)
        monkeypatch.setattr(span_tree, "_compiled", None)
        monkeypatch.setattr(_assemble, "_add_run", None)
    elif _speedups is None or _otlp_typed._span_rows is None:
        pytest.skip("otel_rollout._speedups is not built here (no C compiler)")
