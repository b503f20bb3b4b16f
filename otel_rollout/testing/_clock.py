"""A clock that moves only when the test moves it, and ids drawn from a seeded generator:
a test states exact durations (``clock.advance(ms=30)``) and asserts exact nanoseconds."""

from __future__ import annotations

import random
import threading

from opentelemetry.sdk.trace.id_generator import IdGenerator

__all__ = ["DeterministicIds", "ManualClock"]

#: 2023-11-14T22:13:20Z: a plausible epoch time, so spans look real in any viewer.
DEFAULT_START_NS = 1_700_000_000_000_000_000


class ManualClock:
    """Nanoseconds since the epoch that stand still until :meth:`advance` moves them; a
    ``clock=`` for :class:`~otel_rollout.RolloutTracer` or ``make_test_env``. ``step_ns``
    moves it that much after each reading, for code that cannot call ``advance()``."""

    def __init__(self, start_ns: int = DEFAULT_START_NS, *, step_ns: int = 0) -> None:
        if start_ns < 0 or step_ns < 0:
            raise ValueError(f"start_ns and step_ns must be >= 0, got {start_ns}, {step_ns}")
        self._now = int(start_ns)
        self._step = int(step_ns)
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            now = self._now
            self._now += self._step
            return now

    @property
    def now_ns(self) -> int:
        """The current reading, without stepping."""
        return self._now

    def advance(self, ns: int = 0, *, us: int = 0, ms: int = 0, s: int = 0) -> int:
        """Move the clock forward (integer units, so sums stay exact); returns the new time."""
        delta = ns + us * 1_000 + ms * 1_000_000 + s * 1_000_000_000
        if delta < 0 or delta != int(delta):
            raise ValueError(f"advance by a whole, non-negative number of ns, got {delta!r}")
        with self._lock:
            self._now += int(delta)
            return self._now


class DeterministicIds(IdGenerator):
    """Trace and span ids from a seeded generator: the same ids on every run, spread over
    their whole range so ratio samplers behave as with random ids."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def generate_span_id(self) -> int:
        with self._lock:
            return self._rng.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        with self._lock:
            return self._rng.getrandbits(128) or 1
