"""The breakdown of one trajectory as a value: :class:`Breakdown` (bands in seconds and
integer nanoseconds, labels, phase intervals for the batch analysis) and
:class:`PhaseInterval`. :mod:`otel_rollout._accounting.compute` computes it; a breakdown pickles
(Ray, multiprocessing) through :func:`_rebuild`, which older pickles name, so it stays here.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from itertools import repeat
from operator import attrgetter, call
from types import MappingProxyType
from typing import Any, NamedTuple

from otel_rollout import attributes as A

#: Phase intervals a breakdown keeps for the batch analysis; beyond this, the latest.
MAX_INTERVALS = 4096


class PhaseInterval(NamedTuple):
    """One outermost phase span: its phase name and its interval in nanoseconds."""

    phase: str
    start_ns: int
    end_ns: int


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Where one trajectory's time went. Bands (seconds) are disjoint and sum to ``e2e``."""

    trajectory_id: str
    trace_id: str
    e2e: float
    llm: float
    env: float
    env_setup: float
    env_teardown: float
    other: float
    #: Plain sums of the phase spans of each band (what a hand-rolled timer reports);
    #: ``sum - band`` is the concurrency within the trajectory.
    llm_sum: float
    env_sum: float
    env_setup_sum: float
    env_teardown_sum: float
    turns: int
    env_steps: int
    status: str = A.STATUS_OK
    env_class: str | None = None
    model: str | None = None
    start_time_ns: int = 0
    end_time_ns: int = 0
    #: The bands in integer nanoseconds, keys of :data:`ALL_BANDS` plus ``"e2e"``,
    #: ``"env_queue"`` and ``"finish_session"``.
    nanos: Mapping[str, int] = field(default_factory=dict, hash=False, compare=True)
    #: Low-cardinality attributes of the root (env class, model, status, ...).
    attributes: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=True)
    #: The batch (training step) the trajectory belongs to, when it ran in one.
    batch_id: str | None = None
    #: The policy version that generated it (``Trajectory.set_policy_version``).
    policy_version: int | None = None
    #: The policy version and time at which a trainer consumed it (:meth:`consumed`).
    consumed_version: int | None = None
    consumed_time_ns: int | None = None
    #: Flat ``(band index in BANDS, start ns, end ns)`` triples: the outermost phase spans
    #: accounted to each band, clipped to the root, before the overlap priority; at most
    #: :data:`MAX_INTERVALS` (the latest ending). The batch analysis reads them.
    intervals: array = field(default_factory=lambda: array("q"), hash=False, repr=False)
    # Fields added later go last: a breakdown pickled by an older version still loads.
    #: Waiting for an executor thread before env calls (union; a sub-part of the bands).
    env_queue: float = 0.0
    env_queue_sum: float = 0.0
    #: Time in ``finish_session`` phases, outside ``e2e`` (the root's interval is both).
    finish_session: float = 0.0
    #: The trajectory's reward (``rollout.trajectory.reward``), when it was set.
    reward: float | None = None
    #: Sub-parts of ``llm`` from the engine's own timings (``None`` when it reported
    #: none): queue, prefill, decode, and the client remainder. Never bands.
    llm_queue: float | None = None
    llm_prefill: float | None = None
    llm_decode: float | None = None
    llm_client: float | None = None
    #: Event-loop time (``None`` when not measured): this trajectory's own callbacks, and
    #: an upper bound on how long others' slow callbacks delayed it. Overlap the bands.
    loop_own: float | None = None
    loop_blocked: float | None = None
    #: Its own time in slow callbacks: the stalls it caused others.
    loop_stall: float | None = None
    #: Those waits that are known, in integer nanoseconds (keys ``llm_queue``...,
    #: ``loop_own``, ``loop_blocked``); apart from ``nanos``, which holds the bands.
    waits_nanos: Mapping[str, int] = field(default_factory=dict, hash=False, compare=True)

    def __reduce__(self) -> tuple[Any, tuple]:
        # The read-only mapping views do not pickle: ship plain dicts (Ray, multiprocessing).
        values = [getattr(self, f) for f in self.__slots__]
        return _rebuild, ([dict(v) if isinstance(v, Mapping) else v for v in values],)

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

    def consumed(self, version: int | None, time_ns: int) -> Breakdown:
        """This breakdown, marked consumed by a training step on policy ``version``."""
        return replace(
            self,
            consumed_version=None if version is None else int(version),
            consumed_time_ns=int(time_ns),
        )

    def phase_intervals(self) -> list[PhaseInterval]:
        """:attr:`intervals` as ``(band, start ns, end ns)``."""
        iv = self.intervals
        return [PhaseInterval(A.BANDS[iv[i]], iv[i + 1], iv[i + 2]) for i in range(0, len(iv), 3)]

    def band(self, name: str) -> float:
        """The seconds of band ``name`` (one of ``llm, env, env_setup, env_teardown, other``)."""
        if name not in _ALL_BANDS_SET:
            raise ValueError(f"unknown band {name!r}; expected one of {', '.join(A.ALL_BANDS)}")
        return getattr(self, name)

    def as_attributes(self) -> dict[str, Any]:
        """The breakdown as root-span attributes (``rollout.breakdown.*``)."""
        out = dict(zip(_ATTRIBUTE_KEYS, _attribute_values(self), strict=True))
        waits = _wait_values(self)
        if waits != _NO_WAITS:
            out.update((k, v) for k, v in zip(_WAIT_KEYS, waits, strict=True) if v is not None)
        return out


_ALL_BANDS_SET = frozenset(A.ALL_BANDS)
#: Each field's slot setter, in field order (what the frozen ``__init__`` sets one
#: ``object.__setattr__`` at a time: a third of the cost of a breakdown).
_SETTERS = tuple(getattr(Breakdown, name).__set__ for name in Breakdown.__slots__)


def new_breakdown(*values: Any) -> Breakdown:
    """``Breakdown(*values)`` with every field given, in field order: the same value,
    made faster (the report and the processor make one per trajectory)."""
    if len(values) != len(_SETTERS):
        raise TypeError(f"new_breakdown takes {len(_SETTERS)} values, got {len(values)}")
    bd = object.__new__(Breakdown)
    deque(map(call, _SETTERS, repeat(bd), values), maxlen=0)
    return bd


def _rebuild(values: list[Any]) -> Breakdown:
    fields = dict(zip(Breakdown.__slots__, values, strict=False))  # older: fewer fields
    fields["nanos"] = MappingProxyType(dict(fields["nanos"]))
    fields["attributes"] = MappingProxyType(dict(fields["attributes"]))
    if "waits_nanos" in fields:
        fields["waits_nanos"] = MappingProxyType(dict(fields["waits_nanos"]))
    return Breakdown(**fields)


#: The root attributes of :meth:`Breakdown.as_attributes` and the fields they hold, in
#: order; read all at once (an attrgetter runs in C: this runs for every trajectory).
_ATTRIBUTE_FIELDS = (
    (A.BREAKDOWN_E2E, "e2e"),
    *((A.BREAKDOWN_PREFIX + band, band) for band in A.ALL_BANDS),
    *((A.BREAKDOWN_PREFIX + band + "_sum", band + "_sum") for band in A.BANDS),
    (A.BREAKDOWN_ENV_QUEUE, "env_queue"),
    (A.BREAKDOWN_ENV_QUEUE + "_sum", "env_queue_sum"),
    (A.BREAKDOWN_FINISH_SESSION, "finish_session"),
    (A.TURNS, "turns"),
    (A.ENV_STEPS, "env_steps"),
)
_ATTRIBUTE_KEYS = tuple(key for key, _ in _ATTRIBUTE_FIELDS)
_attribute_values = attrgetter(*(name for _, name in _ATTRIBUTE_FIELDS))
#: The known waits, as ``rollout.breakdown.<name>`` root attributes (seconds) when set.
_WAIT_NAMES = (*A.LLM_SUBPARTS, *A.LOOP_PARTS)
_WAIT_KEYS = tuple(A.BREAKDOWN_PREFIX + name for name in _WAIT_NAMES)
_wait_values = attrgetter(*_WAIT_NAMES)
_NO_WAITS = (None,) * len(_WAIT_NAMES)
