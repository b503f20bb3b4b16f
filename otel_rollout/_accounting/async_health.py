"""Async health of a step: what it trained on and what it threw away (docs/step.md).
Each trajectory a step dealt with is one :class:`Fate`; :func:`async_health` sums a step's
fates and buffer-depth samples into :class:`AsyncHealth`, with SkyRL's tracker keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

from otel_rollout import attributes as A


class Fate(NamedTuple):
    """What became of one trajectory at a step."""

    #: ``kept`` (trained on) or ``dropped``.
    outcome: str
    #: Why it was dropped (one of :data:`~otel_rollout.attributes.DROP_REASONS` on metrics).
    reason: str | None = None
    #: The policy version that generated it, and the one that trained on (or dropped) it.
    policy_version: int | None = None
    trained_version: int | None = None
    #: Its end and the moment the step took it (epoch ns), when known.
    end_ns: int | None = None
    taken_ns: int | None = None
    #: Engine (``llm`` band) nanoseconds it cost, when its breakdown is known.
    engine_ns: int | None = None

    @property
    def staleness(self) -> int | None:
        """Policy versions between generation and training, when both are known."""
        if self.policy_version is None or self.trained_version is None:
            return None
        return self.trained_version - self.policy_version

    @property
    def buffer_wait_ns(self) -> int | None:
        """Nanoseconds from its end to the step taking it, when both are known."""
        if self.end_ns is None or self.taken_ns is None:
            return None
        return max(0, self.taken_ns - self.end_ns)


def bounded_reason(reason: object) -> str:
    """A drop reason fit for a metric attribute: a known one, else ``other``."""
    text = str(reason) if reason is not None else A.DROP_OTHER
    return text if text in A.DROP_REASONS else A.DROP_OTHER


@dataclass(frozen=True)
class AsyncHealth:
    """A step's fates and buffer depth, summed."""

    kept: int
    dropped: int
    #: Dropped trajectories per reason (the reasons as given).
    dropped_by_reason: Mapping[str, int]
    #: Staleness and buffer waits of the kept trajectories where known, ascending.
    staleness: tuple[int, ...]
    buffer_wait_ns: tuple[int, ...]
    #: Engine nanoseconds of the kept and of the dropped trajectories (where known).
    engine_kept_ns: int
    engine_dropped_ns: int
    #: ``(time ns, depth)`` samples of the generation buffer in the step, in time order,
    #: and its capacity when declared.
    buffer_depth: tuple[tuple[int, int], ...] = ()
    buffer_capacity: int | None = None

    @property
    def keep_rate(self) -> float | None:
        """kept / (kept + dropped): SkyRL's ``async/keep_rate``; ``None`` without fates."""
        n = self.kept + self.dropped
        return self.kept / n if n else None

    @property
    def wasted_frac(self) -> float | None:
        """Share of the engine time of the step's trajectories spent on dropped ones."""
        total = self.engine_kept_ns + self.engine_dropped_ns
        return self.engine_dropped_ns / total if total else None

    def summary(self, *, prefix: str = "async/") -> dict[str, float]:
        """Tracker keys (docs/step.md), only those known: ``gen_buffer_qsize`` is the depth
        at the step's first sample, as SkyRL's gauge."""
        p = prefix
        out: dict[str, float] = {}
        if self.kept or self.dropped:
            out[f"{p}keep_rate"] = float(self.keep_rate or 0.0)
            out[f"{p}kept"] = float(self.kept)
            out[f"{p}dropped"] = float(self.dropped)
            for reason, n in self.dropped_by_reason.items():
                out[f"{p}dropped/{reason}"] = float(n)
        if self.staleness:
            out[f"{p}staleness_mean"] = sum(self.staleness) / len(self.staleness)
            out[f"{p}staleness_max"] = float(self.staleness[-1])
        if self.buffer_wait_ns:
            waits = self.buffer_wait_ns
            out[f"{p}buffer_wait_time_mean"] = sum(waits) / len(waits) / 1e9
            out[f"{p}buffer_wait_time_max"] = waits[-1] / 1e9
        wasted = self.wasted_frac
        if wasted is not None:
            out[f"{p}wasted_rollout_frac"] = wasted
        if self.buffer_depth:
            depths = [d for _, d in self.buffer_depth]
            out[f"{p}gen_buffer_qsize"] = float(depths[0])
            out[f"{p}gen_buffer_meansize"] = sum(depths) / len(depths)
            out[f"{p}gen_buffer_peaksize"] = float(max(depths))
        if self.buffer_capacity is not None:
            out[f"{p}gen_buffer_maxsize"] = float(self.buffer_capacity)
        return out

    def as_attributes(self) -> dict[str, Any]:
        """The figures as step-span attributes (``rollout.async.*``)."""
        return {
            A.ASYNC_PREFIX + key.replace("/", "."): value
            for key, value in self.summary(prefix="").items()
        }


def async_health(
    fates: Iterable[Fate],
    buffer_depth: Iterable[tuple[int, int]] = (),
    buffer_capacity: int | None = None,
) -> AsyncHealth:
    """Sum one step's fates and buffer-depth samples."""
    kept = dropped = engine_kept = engine_dropped = 0
    reasons: dict[str, int] = {}
    staleness: list[int] = []
    waits: list[int] = []
    for f in fates:
        if f.outcome == A.OUTCOME_DROPPED:
            dropped += 1
            reason = f.reason or A.DROP_OTHER
            reasons[reason] = reasons.get(reason, 0) + 1
            engine_dropped += f.engine_ns or 0
            continue
        kept += 1
        engine_kept += f.engine_ns or 0
        if (s := f.staleness) is not None:
            staleness.append(s)
        if (w := f.buffer_wait_ns) is not None:
            waits.append(w)
    return AsyncHealth(
        kept, dropped, MappingProxyType(reasons), tuple(sorted(staleness)),
        tuple(sorted(waits)), engine_kept, engine_dropped,
        tuple(sorted((int(t), int(d)) for t, d in buffer_depth)),
        None if buffer_capacity is None else int(buffer_capacity),
    )  # fmt: skip
