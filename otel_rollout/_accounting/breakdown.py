"""The breakdown of one trajectory as a value (:class:`Breakdown`: its bands keyed by the
band registry's names, integer nanoseconds with seconds derived) and :class:`PhaseInterval`.
:mod:`otel_rollout._accounting.compute` computes it.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import repeat
from operator import attrgetter, call
from types import MappingProxyType
from typing import Any, NamedTuple

from otel_rollout import attributes as A
from otel_rollout._bands import DEFAULT_BANDS, BandRegistry

#: Phase intervals a breakdown keeps for the batch analysis; beyond this, the latest.
MAX_INTERVALS = 4096
#: Seconds are ``ns / 1e9`` (see ``compute._PER_S``): they print as their nanoseconds.
_PER_S = 1e9


class PhaseInterval(NamedTuple):
    """One outermost phase span: its phase name and its interval in nanoseconds."""

    phase: str
    start_ns: int
    end_ns: int


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Where one trajectory's time went. Its bands are those of :attr:`bands` (a band
    registry): disjoint, they sum to ``e2e``. Each band's figure is in :attr:`nanos`
    (integer nanoseconds) and, in seconds, :meth:`band` and :attr:`seconds`."""

    trajectory_id: str
    trace_id: str
    #: The trajectory's accounted time in seconds (the root's interval less
    #: ``finish_session``); the bands sum to it.
    e2e: float
    turns: int
    env_steps: int
    status: str = A.STATUS_OK
    env_class: str | None = None
    model: str | None = None
    start_time_ns: int = 0
    end_time_ns: int = 0
    #: Integer nanoseconds: every band of :attr:`bands` by name, plus ``"e2e"``,
    #: ``"env_queue"`` and ``"finish_session"``.
    nanos: Mapping[str, int] = field(default_factory=dict, hash=False, compare=True)
    #: Plain sums of the phase spans of each phased band (what a hand-rolled timer
    #: reports), integer nanoseconds; ``sum - band`` is the concurrency within it.
    sum_nanos: Mapping[str, int] = field(default_factory=dict, hash=False, compare=True)
    #: Low-cardinality attributes of the root (env class, model, status, ...).
    attributes: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=True)
    #: The batch (training step) the trajectory belongs to, when it ran in one.
    batch_id: str | None = None
    #: The policy version that generated it (``Trajectory.set_policy_version``).
    policy_version: int | None = None
    #: The policy version and time at which a trainer consumed it (:meth:`consumed`).
    consumed_version: int | None = None
    consumed_time_ns: int | None = None
    #: Flat ``(band index, start ns, end ns)`` triples (the index into the phased bands
    #: of :attr:`bands`): the outermost phase spans accounted to each band, clipped to the
    #: root, before the overlap priority; at most :data:`MAX_INTERVALS` (the latest
    #: ending). The batch analysis reads them.
    intervals: array = field(default_factory=lambda: array("q"), hash=False, repr=False)
    #: Waiting for an executor thread before env calls (union; a sub-part of the bands).
    env_queue: float = 0.0
    env_queue_sum: float = 0.0
    #: Time in ``finish_session`` phases, outside ``e2e`` (the root's interval is both).
    finish_session: float = 0.0
    #: The trajectory's score (``rollout.trajectory.reward``), when it was set.
    score: float | None = None
    #: The waits of docs/waits.md in seconds (``None`` when not measured), never bands:
    #: ``llm``'s sub-parts from the engine's timings, then the event loop's figures.
    llm_queue: float | None = None
    llm_prefill: float | None = None
    llm_decode: float | None = None
    llm_client: float | None = None
    loop_own: float | None = None
    loop_blocked: float | None = None
    loop_stall: float | None = None
    #: The waits known, in integer nanoseconds, by field name.
    waits_nanos: Mapping[str, int] = field(default_factory=dict, hash=False, compare=True)
    #: The band registry the breakdown was computed with (its bands, in order).
    bands: BandRegistry = DEFAULT_BANDS

    def __reduce__(self) -> tuple[Any, tuple]:
        # The read-only mapping views do not pickle: ship plain dicts (Ray, multiprocessing)
        values = [getattr(self, f) for f in self.__slots__]
        return _unpickle, ([dict(v) if isinstance(v, Mapping) else v for v in values],)

    @property
    def staleness(self) -> int | None:
        """Policy versions between generation and consumption, when both are known."""
        if self.policy_version is None or self.consumed_version is None:
            return None
        return self.consumed_version - self.policy_version

    @property
    def buffer_wait_ns(self) -> int | None:
        """Nanoseconds from the trajectory's end to its consumption, when known."""
        if self.consumed_time_ns is None:
            return None
        return max(0, self.consumed_time_ns - self.end_time_ns)

    @property
    def seconds(self) -> dict[str, float]:
        """Every band's seconds by name, in the registry's order (the remainder last)."""
        nanos = self.nanos
        return {name: nanos[name] / _PER_S for name in self.bands.names}

    def consumed(self, version: int | None, time_ns: int) -> Breakdown:
        """This breakdown, marked consumed by a training step on policy ``version``."""
        return replace(
            self,
            consumed_version=None if version is None else int(version),
            consumed_time_ns=int(time_ns),
        )

    def phase_intervals(self) -> list[PhaseInterval]:
        """:attr:`intervals` as ``(band, start ns, end ns)``."""
        iv, names = self.intervals, self.bands.phased
        return [PhaseInterval(names[iv[i]], iv[i + 1], iv[i + 2]) for i in range(0, len(iv), 3)]

    def band(self, name: str) -> float:
        """The seconds of band ``name`` (a name of :attr:`bands`)."""
        if name not in self.bands:
            self.bands.check(name)
        return self.nanos[name] / _PER_S

    def band_sum(self, name: str) -> float:
        """The plain sum, in seconds, of the phase spans of band ``name`` (a phased band)."""
        if name not in self.sum_nanos:
            self.bands.check(name)
            raise ValueError(f"band {name!r} is the remainder: it has no phase spans to sum")
        return self.sum_nanos[name] / _PER_S

    def as_attributes(self) -> dict[str, Any]:
        """The breakdown as root-span attributes (``rollout.breakdown.*``)."""
        nanos, sums = self.nanos, self.sum_nanos
        keys = _DEFAULT_KEYS if self.bands is DEFAULT_BANDS else _band_keys(self.bands)
        out = {A.BREAKDOWN_E2E: self.e2e}
        for name, key in keys[0]:
            out[key] = nanos[name] / _PER_S
        for name, key in keys[1]:
            out[key] = sums[name] / _PER_S
        out.update(zip(_TAIL_KEYS, _tail_values(self), strict=True))
        waits = _wait_values(self)
        if waits != _NO_WAITS:
            out.update((k, v) for k, v in zip(_WAIT_KEYS, waits, strict=True) if v is not None)
        return out


#: Each field's slot setter, in field order (what the frozen ``__init__`` sets one
#: ``object.__setattr__`` at a time: a third of the cost of a breakdown).
_SETTERS = tuple(getattr(Breakdown, name).__set__ for name in Breakdown.__slots__)
_MAPPINGS = ("nanos", "sum_nanos", "attributes", "waits_nanos")


def new_breakdown(*values: Any) -> Breakdown:
    """``Breakdown(*values)``, every field given in order, made faster (one per trajectory)."""
    bd = object.__new__(Breakdown)
    deque(map(call, _SETTERS, repeat(bd), values), maxlen=0)
    return bd


def _unpickle(values: list[Any]) -> Breakdown:
    fields = dict(zip(Breakdown.__slots__, values, strict=True))
    for name in _MAPPINGS:
        fields[name] = MappingProxyType(dict(fields[name]))
    return Breakdown(**fields)


def bands_of(breakdowns: Sequence[Breakdown]) -> BandRegistry:
    """The band registry the breakdowns share (the default for none); a ValueError when
    they do not (their figures and interval codes would mean different bands)."""
    if not breakdowns:
        return DEFAULT_BANDS
    first = breakdowns[0].bands
    for b in breakdowns:
        if b.bands is not first and b.bands != first:
            raise ValueError(
                f"breakdowns of different bands ({', '.join(first.names)} and "
                f"{', '.join(b.bands.names)}): those accounted together must share one band "
                f"registry"
            )
    return first


def _band_keys(bands: BandRegistry) -> tuple[tuple[tuple[str, str], ...], ...]:
    """(name, root attribute) of each band, then of each phased band's plain sum."""
    prefix = A.BREAKDOWN_PREFIX
    return (
        tuple((name, prefix + name) for name in bands.names),
        tuple((name, prefix + name + "_sum") for name in bands.phased),
    )


_DEFAULT_KEYS = _band_keys(DEFAULT_BANDS)
#: The root attributes of :meth:`Breakdown.as_attributes` after the bands, and the fields
#: they hold, in order; read all at once (an attrgetter runs in C: this runs for every
#: trajectory).
_TAIL_FIELDS = (
    (A.BREAKDOWN_ENV_QUEUE, "env_queue"),
    (A.BREAKDOWN_ENV_QUEUE + "_sum", "env_queue_sum"),
    (A.BREAKDOWN_FINISH_SESSION, "finish_session"),
    (A.TURNS, "turns"),
    (A.ENV_STEPS, "env_steps"),
)
_TAIL_KEYS = tuple(key for key, _ in _TAIL_FIELDS)
_tail_values = attrgetter(*(name for _, name in _TAIL_FIELDS))
#: The known waits, as ``rollout.breakdown.<name>`` root attributes (seconds) when set.
_WAIT_NAMES = (*A.LLM_SUBPARTS, *A.LOOP_PARTS)
_WAIT_KEYS = tuple(A.BREAKDOWN_PREFIX + name for name in _WAIT_NAMES)
_wait_values = attrgetter(*_WAIT_NAMES)
_NO_WAITS = (None,) * len(_WAIT_NAMES)
