"""A snapshot of the trajectories a :class:`BreakdownProcessor` is tracking now.

The processor already knows every running trajectory (its root started, not yet ended)
and every open span below it with its outermost phase. :func:`in_flight` copies those
two maps under the processor's lock (two C-level copies, no per-span work) and builds an
:class:`~otel_rollout._accounting.in_flight.InFlight` outside it, so a snapshot costs the
hot path nothing but a short wait for the lock once per snapshot.
"""

from __future__ import annotations

import heapq
from typing import Any

from otel_rollout import attributes as A
from otel_rollout._accounting.in_flight import InFlight, OpenTrajectory
from otel_rollout._base.clock import now_ns as clock_now_ns

#: Trajectories listed by default (the oldest: the tail forming); all are counted.
DEFAULT_MAX_LISTED = 20


def in_flight(processor: Any, max_listed: int = DEFAULT_MAX_LISTED,
              now_ns: int | None = None) -> InFlight:  # fmt: skip
    """The trajectories ``processor`` tracks now: counted per env class, the oldest
    ``max_listed`` listed with the phase each is in (the latest-started open one)."""
    with processor._lock:  # same package: the processor's own state, read, not changed
        trajs = list(processor._trajs.values())
        opened = list(processor._open.values())
    now = clock_now_ns() if now_ns is None else now_ns
    # root span id -> (phase, its start) of the latest-started open outermost phase
    current: dict[int, tuple[str, int]] = {}
    in_llm: set[int] = set()
    for traj, phase, top_start in opened:
        if top_start is None:
            continue
        rid = traj.root_id
        if phase == A.PHASE_LLM:
            in_llm.add(rid)
        seen = current.get(rid)
        if seen is None or top_start >= seen[1]:
            current[rid] = (str(phase), top_start)
    by_env: dict[str, int] = {}
    llm_by_env: dict[str, int] = {}
    for t in trajs:
        env = _text(t.attrs.get(A.ENV_CLASS))
        by_env[env] = by_env.get(env, 0) + 1
        if t.root_id in in_llm:
            llm_by_env[env] = llm_by_env.get(env, 0) + 1
    oldest = heapq.nsmallest(max(0, max_listed), trajs, key=lambda t: t.start_ns)
    listed = []
    for t in oldest:
        phase, phase_start = current.get(t.root_id, ("", 0))
        attrs = t.attrs
        listed.append(OpenTrajectory(
            format(t.trace_id, "032x"), _text(attrs.get(A.TRAJECTORY_ID)),
            _text(attrs.get(A.ENV_CLASS)), _text(attrs.get(A.BATCH_ID)), t.start_ns,
            phase, phase_start,
        ))  # fmt: skip
    return InFlight(now, len(trajs), by_env, llm_by_env, tuple(listed))


def _text(value: Any) -> str:
    return "" if value is None else str(value)
