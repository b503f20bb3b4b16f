"""The rollouts in flight: one :class:`RolloutState` per verifiers ``Rollout``, found by
its trace id from the interception server's handlers (which run in tasks of their own,
outside the rollout's context)."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from time import time_ns
from typing import Any

from otel_rollout._api.tracer import Generation, Trajectory

#: verifiers' timestamps are ``time.time()`` floats; ours are epoch nanoseconds.
NS = 1_000_000_000


def to_ns(seconds: float) -> int:
    """A verifiers timestamp (epoch seconds, float) in epoch nanoseconds."""
    return round(seconds * NS)


#: Set (in the rollout's own context) while its root ends: the time ``close()`` returned,
#: so the work of recording its phase spans afterwards falls outside the root.
_PINNED: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "otel_rollout_verifiers_end", default=None
)


def pinning(base: Callable[[], int] = time_ns) -> Callable[[], int]:
    """A tracer clock: ``base``, or the time pinned in this context (a root's start at
    verifiers' boot start, its end when ``close()`` returned)."""

    def clock() -> int:
        pinned = _PINNED.get()
        return base() if pinned is None else pinned

    return clock


def pin(time_ns_: int | None) -> None:
    """Pin (or, with ``None``, unpin) the tracer's clock in the current context."""
    _PINNED.set(time_ns_)


@dataclass
class RolloutState:
    """One rollout's trajectory: its root scope and the context it was entered in (so
    it exits there whatever task closes it), and the generate spans in flight."""

    traj: Trajectory
    scope: Any
    context: contextvars.Context
    harness: str | None = None
    inflight: list[Generation] = field(default_factory=list)
    done: bool = False


_LOCK = threading.Lock()
_BY_TRACE: dict[str, RolloutState] = {}
#: Rollouts whose ``open()`` runs and whose root has not started yet, by trace id.
STARTING: dict[str, Any] = {}


def register(trace_id: str, state: RolloutState) -> None:
    with _LOCK:
        _BY_TRACE[trace_id] = state


def lookup(trace_id: Any) -> RolloutState | None:
    if not isinstance(trace_id, str):
        return None
    return _BY_TRACE.get(trace_id)


def unregister(trace_id: str, state: RolloutState) -> None:
    with _LOCK:
        if _BY_TRACE.get(trace_id) is state:
            del _BY_TRACE[trace_id]


def clear() -> None:
    with _LOCK:
        _BY_TRACE.clear()
        STARTING.clear()
