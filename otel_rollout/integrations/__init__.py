"""Integrations with RL trainers and inference engines (optional extras)."""

from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise ImportError naming the exact install line."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(
            f"{module!r} is needed for this integration: pip install 'otel-rollout[{extra}]'"
        ) from err
