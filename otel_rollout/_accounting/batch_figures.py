"""The figures of one batch: :class:`BatchAnalysis` (defined in
:mod:`otel_rollout._accounting.batch_analysis`, which computes them), :class:`StepFunction` for its
counts over time, and their forms as experiment-tracker keys and batch-span attributes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from otel_rollout import attributes as A
from otel_rollout._accounting.breakdown import Breakdown

_NS = 1e-9
#: Straggler trace ids written onto the batch span (the rest are in the analysis).
MAX_STRAGGLER_IDS = 32


class StepFunction:
    """A count over time: ``values[i]`` holds from ``times_ns[i]`` to the next time (the
    last one to the batch's end). Both are int64 numpy arrays."""

    __slots__ = ("times_ns", "values")

    def __init__(self, times_ns: Any, values: Any) -> None:
        self.times_ns = np.asarray(times_ns, dtype=np.int64)
        self.values = np.asarray(values, dtype=np.int64)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StepFunction):
            return NotImplemented
        return np.array_equal(self.times_ns, other.times_ns) and np.array_equal(
            self.values, other.values
        )

    __hash__ = None  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self.times_ns)

    def __repr__(self) -> str:
        return f"StepFunction({len(self)} steps, max {self.max()})"

    def max(self) -> int:
        return int(self.values.max()) if len(self.values) else 0

    def at(self, t_ns: int) -> int:
        """The value at time ``t_ns`` (0 before the first time)."""
        i = int(np.searchsorted(self.times_ns, t_ns, "right")) - 1
        return int(self.values[i]) if i >= 0 else 0


@dataclass(frozen=True, eq=True)
class BatchAnalysis:
    """The figures of one batch; :mod:`otel_rollout._accounting.batch_analysis` defines them."""

    batch_id: str | None
    trajectories: int
    start_ns: int
    end_ns: int
    wall_ns: int
    #: Finish times (end - batch start), ascending.
    finish_ns: tuple[int, ...]
    median_finish_ns: int
    p90_finish_ns: float
    tail_ns: int
    tail_frac: float
    #: Trajectories finishing after the 90th percentile, by finish time.
    stragglers: tuple[Breakdown, ...]
    #: Trajectory-nanoseconds of the trajectories still running in the tail interval.
    tail_running_ns: int
    #: Those nanoseconds per band (keys :data:`ALL_BANDS`), and as fractions of them.
    tail_band_ns: Mapping[str, int] = field(default_factory=dict)
    tail_band_frac: Mapping[str, float] = field(default_factory=dict)
    #: The band holding most of the tail, ``None`` when there is no tail.
    dominant_tail_band: str | None = None
    in_flight: StepFunction = field(default_factory=lambda: StepFunction((), ()))
    in_generate: StepFunction = field(default_factory=lambda: StepFunction((), ()))
    llm_concurrency_mean: float = 0.0
    llm_concurrency_max: int = 0
    low_llm_demand_ns: int = 0
    low_llm_demand_frac: float = 0.0
    #: Policy versions between generation and consumption, and nanoseconds waited in the
    #: buffer, over the trajectories where they are known (async trainers).
    staleness: tuple[int, ...] = ()
    buffer_wait_ns: tuple[int, ...] = ()

    @property
    def median_finish_time_ns(self) -> int:
        """Absolute time (unix ns) of the median finish: where the tail starts."""
        return self.start_ns + self.median_finish_ns

    def summary(self, *, prefix: str = "generate/") -> dict[str, float]:
        """Per-batch keys for an experiment tracker, beside :func:`summarize`'s.

        ``{prefix}batch_wall_time``, ``batch_median_finish_time``, ``batch_tail_time``
        (seconds), ``batch_tail_frac``, ``batch_tail_{band}_frac`` for each band,
        ``batch_stragglers`` (count), ``llm_concurrency_mean``, ``llm_concurrency_max``,
        ``low_llm_demand_frac``; with policy versions recorded, also
        ``policy_staleness_{mean,max}`` and ``buffer_wait_time_{mean,max}`` (seconds).
        An empty batch gives an empty dict.
        """
        if not self.trajectories:
            return {}
        p = prefix
        out: dict[str, float] = {
            f"{p}batch_wall_time": self.wall_ns * _NS,
            f"{p}batch_median_finish_time": self.median_finish_ns * _NS,
            f"{p}batch_tail_time": self.tail_ns * _NS,
            f"{p}batch_tail_frac": self.tail_frac,
        }
        for band in A.ALL_BANDS:
            out[f"{p}batch_tail_{band}_frac"] = self.tail_band_frac.get(band, 0.0)
        out[f"{p}batch_stragglers"] = float(len(self.stragglers))
        out[f"{p}llm_concurrency_mean"] = self.llm_concurrency_mean
        out[f"{p}llm_concurrency_max"] = float(self.llm_concurrency_max)
        out[f"{p}low_llm_demand_frac"] = self.low_llm_demand_frac
        if self.staleness:
            out[f"{p}policy_staleness_mean"] = float(np.mean(self.staleness))
            out[f"{p}policy_staleness_max"] = float(max(self.staleness))
        if self.buffer_wait_ns:
            out[f"{p}buffer_wait_time_mean"] = float(np.mean(self.buffer_wait_ns)) * _NS
            out[f"{p}buffer_wait_time_max"] = max(self.buffer_wait_ns) * _NS
        return out

    def as_attributes(self) -> dict[str, Any]:
        """The figures as batch-span attributes (``rollout.batch.*``, seconds)."""
        P = A.BATCH_PREFIX
        out: dict[str, Any] = {
            P + "trajectories": self.trajectories,
            P + "wall_time": self.wall_ns * _NS,
            P + "median_finish_time": self.median_finish_ns * _NS,
            P + "tail_time": self.tail_ns * _NS,
            P + "tail_frac": self.tail_frac,
            P + "stragglers": len(self.stragglers),
            P + "llm_concurrency.mean": self.llm_concurrency_mean,
            P + "llm_concurrency.max": self.llm_concurrency_max,
            P + "low_llm_demand_frac": self.low_llm_demand_frac,
        }
        for band in A.ALL_BANDS:
            out[f"{P}tail.{band}_frac"] = self.tail_band_frac.get(band, 0.0)
        if self.dominant_tail_band is not None:
            out[P + "tail.dominant_band"] = self.dominant_tail_band
        if self.stragglers:
            ids = [b.trace_id for b in self.stragglers[-MAX_STRAGGLER_IDS:]]
            out[P + "straggler_trace_ids"] = ids
        return out
