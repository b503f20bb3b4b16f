"""The optional C extension (``otel_rollout._speedups``): the report's hot loops.

Built by ``pip install`` where a C compiler is found. Where it is missing, was built from
another version of its source (its ``API`` number differs), or ``OTEL_ROLLOUT_PURE_PYTHON``
is set to anything but 0, :func:`speedups` answers None and the same loops run in Python
with the same figures.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

#: The ``API`` number of the ``_speedups.c`` this Python source goes with.
API = 1


def speedups() -> ModuleType | None:
    """The extension module, or None: run the Python loops."""
    if os.environ.get("OTEL_ROLLOUT_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:  # by name: a C module imports nothing of this package, and the import checker,
        # seeing no source for it, would take it for the package itself
        _speedups = importlib.import_module("otel_rollout._speedups")
    except ImportError:  # not built here
        return None
    return _speedups if getattr(_speedups, "API", None) == API else None
