"""Batch statistics with SkyRL's keys, always recomputed from per-trajectory values."""

from __future__ import annotations

import logging
import threading
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from otel_rollout import attributes as A
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._accounting.reward import reward_keys, reward_vs_latency
from otel_rollout._base.fork import reset_in_child

_log = logging.getLogger("otel_rollout")

#: SkyRL's name for each band in ``generate/trajectory_time_<name>_<stat>``, with the
#: :class:`Breakdown` field it is computed from; the one place these keys are written.
_KEY_NAMES = (
    ("completion", "e2e"),
    ("llm", A.PHASE_LLM),
    ("env", A.PHASE_ENV),
    ("env_setup", A.PHASE_ENV_SETUP),
    ("env_teardown", A.PHASE_ENV_TEARDOWN),
    ("other", A.BAND_OTHER),
    # sub-parts and time outside completion (SkyRL's e2e_time leaves finish_session out)
    ("env_queue", A.PHASE_ENV_QUEUE),
    ("finish_session", A.PHASE_FINISH_SESSION),
)
#: The ``<name>`` part of SkyRL's keys, in table order (``completion`` is e2e).
SKYRL_KEY_NAMES = tuple(key for key, _ in _KEY_NAMES)


def summarize(breakdowns: Iterable[Breakdown], *, prefix: str = "generate/") -> dict[str, float]:
    """The per-batch dict trainers log (W&B), with SkyRL's key names.

    ``{prefix}trajectory_time_{completion,llm,env,env_setup,env_teardown,other}_{mean,p90,max}``
    (p90 is ``numpy.percentile(x, 90)``), the same statistics of the ``env_queue`` sub-part
    (the wait for an env executor thread, inside the bands) and of ``finish_session`` (outside
    ``completion``), and ``{prefix}frac_time_in_env``, the time-weighted
    ``sum(env) / (sum(llm) + sum(env))``. Where known, the waits have keys of their own:
    ``trajectory_time_{llm_queue,llm_prefill,llm_decode,llm_client,loop_own,loop_blocked,
    loop_stall}_*`` over the trajectories that report them. Statistics are computed from
    the trajectories themselves, so the summary of two batches together is
    ``summarize(a + b)``, never a merge of two summaries. No breakdowns give an empty dict.

    Where rewards are known (``Trajectory.set_reward``), also the mean reward per env
    class by e2e decile and by turn count (:func:`~otel_rollout._accounting.reward.reward_keys`):
    do slow trajectories succeed less?
    """
    items = breakdowns if isinstance(breakdowns, Sequence) else list(breakdowns)
    if not items:
        return {}
    columns = {
        attr: np.fromiter((getattr(b, attr) for b in items), dtype=np.float64, count=len(items))
        for _, attr in _KEY_NAMES
    }
    for name in WAIT_FIELDS:
        if any(getattr(b, name, None) is not None for b in items):
            columns[name] = np.fromiter(
                (np.nan if (v := getattr(b, name, None)) is None else v for b in items),
                dtype=np.float64,
                count=len(items),
            )
    out = summarize_columns(columns, prefix=prefix)
    out.update(reward_keys(reward_vs_latency(items), prefix))
    return out


#: Optional columns of waits (sub-parts of llm, event-loop figures), NaN where unknown.
WAIT_FIELDS = (*A.LLM_SUBPARTS, *A.LOOP_PARTS)


#: The :class:`Breakdown` fields :func:`summarize_columns` reads, one column each.
SUMMARY_FIELDS = tuple(attr for _, attr in _KEY_NAMES)


def summarize_columns(columns: Mapping[str, Any], *, prefix: str = "generate/") -> dict[str, float]:
    """:func:`summarize` from columns of seconds, one per field of :data:`SUMMARY_FIELDS`
    (``e2e``, the bands), for callers that keep numbers rather than breakdowns."""
    out: dict[str, float] = {}
    sums: dict[str, float] = {}
    for key, attr in _KEY_NAMES:
        values = np.asarray(columns[attr], dtype=np.float64)
        if values.size == 0:
            return {}
        out[f"{prefix}trajectory_time_{key}_mean"] = float(np.mean(values))
        out[f"{prefix}trajectory_time_{key}_p90"] = float(np.percentile(values, 90))
        out[f"{prefix}trajectory_time_{key}_max"] = float(np.max(values))
        sums[attr] = float(np.sum(values))
    denom = sums[A.PHASE_LLM] + sums[A.PHASE_ENV]
    out[f"{prefix}frac_time_in_env"] = sums[A.PHASE_ENV] / denom if denom > 0 else 0.0
    # Waits (llm sub-parts, event-loop figures): over the trajectories that have them
    # (optional columns; NaN where a trajectory has none).
    for name in WAIT_FIELDS:
        column = columns.get(name)
        if column is None:
            continue
        values = np.asarray(column, dtype=np.float64)
        values = values[~np.isnan(values)]
        if values.size:
            out[f"{prefix}trajectory_time_{name}_mean"] = float(np.mean(values))
            out[f"{prefix}trajectory_time_{name}_p90"] = float(np.percentile(values, 90))
            out[f"{prefix}trajectory_time_{name}_max"] = float(np.max(values))
    return out


def group_by(
    breakdowns: Iterable[Breakdown], key: str | Callable[[Breakdown], Any] = "env_class"
) -> dict[Any, list[Breakdown]]:
    """Breakdowns grouped by an attribute name of :class:`Breakdown` or a function."""
    fn = key if callable(key) else (lambda b: getattr(b, key))
    groups: dict[Any, list[Breakdown]] = {}
    for b in breakdowns:
        groups.setdefault(fn(b), []).append(b)
    return groups


#: Breakdowns a collector keeps by default: several steps of a large run (a breakdown is
#: about 1.6 KB with 20 phases, so about 80 MB if nothing ever drains it).
DEFAULT_MAXLEN = 50_000


class BreakdownCollector:
    """A thread-safe sink for :class:`BreakdownProcessor`: keeps breakdowns until drained.

    Pass it as ``on_breakdown``; each training step, ``summarize(collector.drain())``. At
    most ``maxlen`` breakdowns are kept (default :data:`DEFAULT_MAXLEN`); beyond that the
    oldest are dropped, counted in ``dropped``, and a warning is logged the first time.
    """

    def __init__(self, maxlen: int | None = DEFAULT_MAXLEN) -> None:
        if maxlen is not None and maxlen < 1:
            raise ValueError(f"maxlen must be at least 1 or None, got {maxlen!r}")
        self._items: deque[Breakdown] = deque()
        self._maxlen = maxlen
        self._lock = threading.Lock()
        self.dropped = 0
        reset_in_child(self, BreakdownCollector._reset)

    def _reset(self) -> None:
        """In a forked child: the parent's breakdowns are the parent's to report."""
        self._lock = threading.Lock()
        self._items = deque()
        self.dropped = 0

    def __call__(self, breakdown: Breakdown) -> None:
        with self._lock:
            if self._maxlen is not None and len(self._items) >= self._maxlen:
                self._items.popleft()
                self.dropped += 1
                first = self.dropped == 1
            else:
                first = False
            self._items.append(breakdown)
        if first:
            _log.warning(
                "otel-rollout: a BreakdownCollector holds its maximum of %d breakdowns; the "
                "oldest are dropped from now on (counted in its .dropped). Drain it each step "
                "(summarize(collector.drain())) or give it a larger maxlen.",
                self._maxlen,
            )

    def __len__(self) -> int:
        return len(self._items)

    def extend(self, breakdowns: Iterable[Breakdown]) -> None:
        """Add breakdowns gathered elsewhere (other workers) to this collector."""
        for b in breakdowns:
            self(b)

    def drain(self) -> list[Breakdown]:
        """Every breakdown collected since the last drain, oldest first; empties the sink."""
        with self._lock:
            items = list(self._items)
            self._items.clear()
        return items

    def peek(self) -> list[Breakdown]:
        """The breakdowns collected so far, without removing them."""
        with self._lock:
            return list(self._items)

    def summarize(self, *, prefix: str = "generate/") -> dict[str, float]:
        """Deprecated (it also empties the collector): ``summarize(collector.drain())``."""
        warnings.warn(
            "BreakdownCollector.summarize() is deprecated (it empties the collector); use "
            "otel_rollout.summarize(collector.drain())",
            DeprecationWarning,
            stacklevel=2,
        )
        return summarize(self.drain(), prefix=prefix)
