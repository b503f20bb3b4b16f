"""What users plausibly pass to the handles, made into attribute values without raising.

Each function converts what is meaningful and drops the rest with a warning logged once
per kind of bad value (telemetry never raises into the agent loop).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from otel_rollout._base.errors import warn_once

_NUMBER = re.compile(r"\s*[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def _drop(what: str, value: Any, why: str) -> None:
    warn_once(f"coerce:{what}:{why}", "otel-rollout: %s %s (%s); not recorded (reported once "
              "per kind)", what, _safe_repr(value), why)  # fmt: skip


def _safe_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


def _number(value: Any) -> float | None:
    """A float from a number, a numpy scalar, or a string that starts with one."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str | bytes):
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        match = _NUMBER.match(text)
        return float(match.group()) if match else None
    try:
        return float(value)  # numpy scalars, Decimal, 0-d arrays, torch scalars
    except Exception:
        return None


def to_score(value: Any, what: str = "reward") -> float | None:
    """A finite float, or ``None`` (dropped with a warning): ``"1.0 (correct)"`` -> 1.0."""
    if value is None:
        _drop(what, value, "None")
        return None
    number = _number(value)
    if number is None:
        _drop(what, value, "not a number")
        return None
    if not math.isfinite(number):
        _drop(what, value, "not finite")
        return None
    return number


def to_count(value: Any, what: str) -> int | None:
    """A token count: an int, the sum of a list of them (n > 1 samples), or ``None``."""
    if value is None:
        return None
    if isinstance(value, list | tuple) or (
        not isinstance(value, str | bytes | dict) and _is_array(value)
    ):
        total = 0
        for item in value:
            count = to_count(item, what)
            if count is None:
                return None
            total += count
        return total
    if isinstance(value, bool):
        _drop(what, value, "a bool, not a count")
        return None
    number = value if isinstance(value, int) else to_score(value, what)
    if number is not None and number < 0:
        _drop(what, value, "negative")
        return None
    return None if number is None else round(number)


def _is_array(value: Any) -> bool:
    return hasattr(value, "__len__") and hasattr(value, "__iter__") and not hasattr(value, "keys")


def to_strings(value: Any, what: str) -> tuple[str, ...] | None:
    """A tuple of strings: a lone string is one item (``"stop"`` -> ``("stop",)``)."""
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, bytes):
        return (value.decode(errors="replace"),)
    if isinstance(value, Iterable) and not isinstance(value, dict):
        try:
            return tuple(_text(v) for v in value if v is not None)
        except Exception:
            _drop(what, value, "not iterable")
            return None
    return (_text(value),)


def _text(value: Any) -> str:
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__}>"


def to_text(value: Any, what: str) -> str | None:
    """A string attribute value, or ``None``."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return _text(value)


def to_attribute(value: Any) -> Any:
    """A valid OpenTelemetry attribute value for ``value``, or ``None`` to skip it."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list | tuple):
        items = [v for v in value if v is not None]
        kinds = {type(v) for v in items}
        if len(kinds) <= 1 and kinds <= {str, bool, int, float}:
            return tuple(items)
        return tuple(_text(v) for v in items)
    number = _number(value) if not isinstance(value, bytes) else None
    if number is not None and not isinstance(value, str):
        return int(number) if number.is_integer() and "int" in type(value).__name__ else number
    return _text(value)
