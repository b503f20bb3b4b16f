"""The rollouts in flight, found by trace id from the interception server's handlers
(which run outside the rollout's context), and the clock pinned to verifiers' timestamps
where a root starts and ends."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from time import time_ns
from typing import Any

from otel_rollout import Generation
from otel_rollout import TrajectoryHandle as Trajectory


def to_ns(seconds: float) -> int:
    """A verifiers timestamp (``time.time()``, epoch seconds) in epoch nanoseconds."""
    return round(seconds * 1_000_000_000)


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
    rollout: Any = None
    harness: str | None = None
    inflight: list[Generation] = field(default_factory=list)
    done: bool = False


class Rollouts:
    """The rollouts in flight of one instrumentor, by trace id, and those whose
    ``open()`` runs before their root starts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_trace: dict[str, RolloutState] = {}
        #: Opening rollouts whose root waits for verifiers' boot start, by trace id.
        self.starting: dict[str, Any] = {}

    def register(self, trace_id: str, state: RolloutState) -> None:
        with self._lock:
            self._by_trace[trace_id] = state

    def lookup(self, trace_id: Any) -> RolloutState | None:
        return self._by_trace.get(trace_id) if isinstance(trace_id, str) else None

    def of(self, rollout: Any) -> RolloutState | None:
        """The state of a verifiers ``Rollout`` (by its trace's id)."""
        return self.lookup(getattr(getattr(rollout, "trace", None), "id", None))

    def unregister(self, trace_id: str, state: RolloutState) -> None:
        with self._lock:
            if self._by_trace.get(trace_id) is state:
                del self._by_trace[trace_id]

    def in_flight(self) -> list[RolloutState]:
        with self._lock:
            return list(self._by_trace.values())

    def clear(self) -> None:
        with self._lock:
            self._by_trace.clear()
            self.starting.clear()
