"""A misspelled ``OTEL_ROLLOUT_*`` variable is named, with the setting it was likely
meant for, instead of being ignored in silence."""

from __future__ import annotations

import difflib
import os
import warnings
from collections.abc import Iterable

PREFIX = "OTEL_ROLLOUT_"

#: ``OTEL_ROLLOUT_*`` variables read outside the settings table (they are not settings of
#: ``configure()``): report's Jaeger link, Ray's next worker hook.
OTHER_VARIABLES = frozenset({"OTEL_ROLLOUT_JAEGER_URL", "OTEL_ROLLOUT_RAY_NEXT_HOOK"})

#: How alike a name must be to a known one to be taken for its misspelling (difflib's
#: ratio): a variable far from every setting is someone else's, not a typo.
CLOSE_ENOUGH = 0.8

_warned: set[str] = set()


def warn_misspelled(known: Iterable[str], stacklevel: int = 2) -> list[str]:
    """Warn once per process about each ``OTEL_ROLLOUT_*`` variable that is not one of
    ``known`` but close to one; returns the names warned about now."""
    names = set(known) | OTHER_VARIABLES
    said = []
    for var in sorted(os.environ):
        if not var.startswith(PREFIX) or var in names or var in _warned:
            continue
        near = difflib.get_close_matches(var, names, n=1, cutoff=CLOSE_ENOUGH)
        if not near:
            continue
        _warned.add(var)
        said.append(var)
        warnings.warn(
            f"{var} is not a setting of otel-rollout and is ignored; did you mean {near[0]}?",
            stacklevel=stacklevel,
        )
    return said
