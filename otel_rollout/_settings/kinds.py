"""The kinds of value a setting has: read from a variable's text, checked as an argument,
written back as text (for Ray workers)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path as _FsPath
from typing import Any
from urllib.parse import quote, unquote

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def parse_bool(text: str) -> bool:
    """``1/0/true/false/yes/no/on/off`` in any case; anything else is a ValueError."""
    t = text.strip().lower()
    if t not in _TRUE + _FALSE:
        raise ValueError(text)
    return t in _TRUE


def env_flag(name: str, default: bool = False) -> bool:
    """A boolean variable read now; an unset, empty or unreadable one gives ``default``."""
    try:
        return parse_bool(os.environ[name])
    except (KeyError, ValueError):
        return default


class Kind:
    """How a setting's value is read from a variable, checked as an argument, written back."""

    accepted = "a value"

    def from_text(self, text: str, variable: str) -> Any:
        return self.from_value(text)

    def from_value(self, value: Any) -> Any:
        return value  # ValueError or TypeError when not accepted

    def to_text(self, value: Any) -> str:
        return str(value)


class Choice(Kind):
    def __init__(self, options: Iterable[str]) -> None:
        self.options = tuple(options)
        self.accepted = "one of " + ", ".join(self.options)

    def from_text(self, text: str, variable: str) -> str:
        # OTEL_TRACES_EXPORTER may list several exporters; the first one is used
        return self.from_value(text.split(",")[0].strip().lower())

    def from_value(self, value: Any) -> str:
        if value not in self.options:
            raise ValueError(value)
        return value


class Number(Kind):
    """A finite number between ``low`` and ``high`` (each bound open or closed)."""

    def __init__(self, low: float | None = None, high: float | None = None, *,
                 low_open: bool = False, high_open: bool = False, integer: bool = False,
                 unit: str = "") -> None:  # fmt: skip
        self.low, self.high = low, high
        self.low_open, self.high_open, self.integer = low_open, high_open, integer
        what = "an integer" if integer else "a number"
        if low is not None and high is not None:
            lo, hi = ("(" if low_open else "["), (")" if high_open else "]")
            self.accepted = f"{what} in {lo}{_num(low)}, {_num(high)}{hi}"
        elif low is not None:
            self.accepted = f"{what} {'>' if low_open else '>='} {_num(low)}"
        else:
            self.accepted = f"a finite {what.split()[-1]}"
        if unit:
            self.accepted += f" ({unit})"

    def from_text(self, text: str, variable: str) -> float | int:
        return self.from_value(int(text) if self.integer else float(text))

    def from_value(self, value: Any) -> float | int:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(value)
        v = float(value)
        if (
            (self.integer and not v.is_integer())
            or not math.isfinite(v)
            or (self.low is not None and (v <= self.low if self.low_open else v < self.low))
            or (self.high is not None and (v >= self.high if self.high_open else v > self.high))
        ):
            raise ValueError(value)
        return int(v) if self.integer else v

    def to_text(self, value: Any) -> str:
        return _num(value)


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


class Bool(Kind):
    accepted = "true or false (also 1/0, yes/no, on/off, any case)"

    def from_text(self, text: str, variable: str) -> bool:
        return parse_bool(text)

    def from_value(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise TypeError(value)
        return value

    def to_text(self, value: Any) -> str:
        return "true" if value else "false"


class Text(Kind):
    accepted = "a non-empty string"

    def from_text(self, text: str, variable: str) -> str:
        return self.from_value(text.strip())

    def from_value(self, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ValueError(value)
        return value


class Path(Kind):
    accepted = "a folder path"

    def from_value(self, value: Any) -> _FsPath:
        if not isinstance(value, str | os.PathLike) or not str(value).strip():
            raise ValueError(value)
        return _FsPath(value)

    def to_text(self, value: Any) -> str:
        return str(_FsPath(value).expanduser().resolve())


class Pairs(Kind):
    """``key=value,key=value`` (values percent-decoded) or, as an argument, a mapping."""

    def __init__(self, accepted: str = "key=value pairs",
                 check: Callable[[str, Any], None] | None = None) -> None:  # fmt: skip
        self.accepted = accepted
        self.check = check

    def from_text(self, text: str, variable: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for item in text.split(","):
            if not item.strip():
                continue
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise ValueError(item)
            out[key.strip()] = unquote(value.strip())
        return self.from_value(out)

    def from_value(self, value: Any) -> dict[str, Any]:
        if isinstance(value, str):
            return self.from_text(value, "")
        if not isinstance(value, Mapping):
            raise TypeError(value)
        out = {str(k): v for k, v in value.items()}
        if self.check is not None:
            for k, v in out.items():
                self.check(k, v)
        return out

    def to_text(self, value: Any) -> str:
        return ",".join(f"{k}={quote(str(v), safe='')}" for k, v in dict(value).items())


class SampleRatio(Number):
    """A ratio in [0, 1]; from ``OTEL_TRACES_SAMPLER`` (+ ``_ARG``) as the spec defines."""

    _ON = ("always_on", "parentbased_always_on")
    _OFF = ("always_off", "parentbased_always_off")
    _RATIO = ("traceidratio", "parentbased_traceidratio")

    def __init__(self) -> None:
        super().__init__(0, 1)

    def from_text(self, text: str, variable: str) -> float:
        if variable != "OTEL_TRACES_SAMPLER":
            return super().from_text(text, variable)
        sampler = text.strip().lower()
        if sampler in self._ON:
            return 1.0
        if sampler in self._OFF:
            return 0.0
        if sampler not in self._RATIO:
            raise ValueError(
                f"{variable}={text!r} is not supported by otel-rollout (expected always_on, "
                "always_off, traceidratio or their parentbased_ forms)"
            )
        arg = os.environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip() or "1.0"
        try:
            return super().from_text(arg, "OTEL_TRACES_SAMPLER_ARG")
        except ValueError:
            raise ValueError(f"OTEL_TRACES_SAMPLER_ARG={arg!r} is not {self.accepted}") from None
