"""The attribute values the readers compute with, checked as a span is read back: a value
the accounting cannot take is dropped and counted per key (docs/demo.md, the hostile
input table); the rest of the span is kept."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from otel_rollout import attributes as A
from otel_rollout.report._model import LOSS_ODD_VALUE, MAX_TIME_NS


def _number(v: Any) -> bool:
    """A finite int or float that a float holds."""
    if v.__class__ is float:
        return math.isfinite(v)
    if v.__class__ is int:
        return abs(v) <= 1 << 1023
    return False


def _integer(v: Any) -> bool:
    """What ``int()`` takes and gives a 64-bit figure from: an int, a finite float, a text
    of digits."""
    if v.__class__ is str:
        try:
            v = int(v)
        except ValueError:
            return False
    elif v.__class__ is float:
        if not math.isfinite(v):
            return False
    elif v.__class__ is not int:
        return False
    return abs(v) <= MAX_TIME_NS


def _seconds(v: Any) -> bool:
    """A duration in seconds that nanoseconds hold: finite, not negative."""
    return _number(v) and 0 <= v * 1e9 <= MAX_TIME_NS


def _nanoseconds(v: Any) -> bool:
    return v.__class__ is int and 0 <= v <= MAX_TIME_NS


def _text(v: Any) -> bool:
    return isinstance(v, str)


def _offsets(v: Any) -> bool:
    """A step series' sample times: whole nanoseconds from the step's start."""
    return v.__class__ is tuple and all(x.__class__ is int and abs(x) <= MAX_TIME_NS for x in v)


def _samples(v: Any) -> bool:
    return v.__class__ is tuple and all(_number(x) for x in v)


def _number_or_text(v: Any) -> bool:
    return isinstance(v, str) or _number(v)


#: The keys the readers compute with, and what each accepts.
CHECKS: Mapping[str, Callable[[Any], bool]] = MappingProxyType({
    A.TRAJECTORY_ID: _text,
    A.ENV_CLASS: _text,
    A.GEN_AI_REQUEST_MODEL: _text,
    A.REWARD: _number,
    A.POLICY_VERSION: _integer,
    A.STEP: _integer,
    A.VLLM_TIME_IN_QUEUE: _seconds,
    A.VLLM_TIME_IN_PREFILL: _seconds,
    A.VLLM_TIME_IN_DECODE: _seconds,
    A.LOOP_OWN_NS: _nanoseconds,
    A.LOOP_BLOCKED_NS: _nanoseconds,
    A.LOOP_STALL_NS: _nanoseconds,
})  # fmt: skip


_KEYS = frozenset(CHECKS)
#: A step span's keys read by prefix (samples per part, health), and what each takes.
_STEP_PREFIXES = (
    (A.STEP_SERIES_PREFIX, None),  # by the key's end: see _step_check
    (A.STEP_GPU_UTILIZATION, _number),
    (A.ASYNC_PREFIX, _number_or_text),
)
_STARTS = tuple(prefix for prefix, _ in _STEP_PREFIXES)


def _step_check(key: str) -> Callable[[Any], bool]:
    if key.startswith(A.STEP_SERIES_PREFIX):
        return _offsets if key.endswith(".offset_ns") else _samples
    return next(check for prefix, check in _STEP_PREFIXES[1:] if key.startswith(prefix))


def drop_odd_values(attributes: dict[str, Any], lose: Callable[[str], object]) -> None:
    """Remove from ``attributes`` each value of :data:`CHECKS` (and of a step span's
    prefixed keys) its check refuses (None stays), calling ``lose`` for each."""
    for key in _KEYS.intersection(attributes):
        value = attributes[key]
        if value is not None and not CHECKS[key](value):
            if key == A.TRAJECTORY_ID:  # still a root: its id as text
                attributes[key] = repr(value)
            else:
                del attributes[key]
            lose(LOSS_ODD_VALUE + key)
    if A.STEP_WALL in attributes:  # a step span: its samples and async health too
        for key in [k for k in attributes if k.startswith(_STARTS)]:
            value = attributes[key]
            if value is not None and not _step_check(key)(value):
                del attributes[key]
                lose(LOSS_ODD_VALUE + key)
