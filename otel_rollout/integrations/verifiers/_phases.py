"""A finished rollout's phase spans, timed by verifiers' own clock (docs/verifiers.md):
boot and setup (``env_setup``), the agent span less its model calls (``env``), finalize
and scoring (phases of their own), and the teardown verifiers does not time."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from otel_rollout.instrumentation import internal_error
from otel_rollout.integrations.verifiers._state import RolloutState, to_ns

#: The ``Trace.timing`` stage a phase span stands for (``boot``, ``setup``, ``agent``...).
STAGE = "verifiers.stage"
#: The harness (its plugin id) that ran the rollout.
HARNESS = "verifiers.harness"
#: What stopped the rollout (``Trace.stop_condition``: ``agent_completed``, ``max_turns``...).
STOP_CONDITION = "verifiers.stop_condition"
#: Phases of verifiers' own with no band of ours: ``other`` unless the processor's
#: ``bands`` maps them (``bands={"finalize": "env_teardown"}``).
PHASE_FINALIZE = "finalize"
PHASE_SCORING = "scoring"
STAGE_BOOT, STAGE_SETUP, STAGE_AGENT = "boot", "setup", "agent"
STAGE_TEARDOWN = "teardown"


def _span(timespan: Any, open_end: int | None = None) -> tuple[int, int] | None:
    """A verifiers ``TimeSpan`` that started, in epoch nanoseconds; one still running
    (an aborted rollout's stage) ends at ``open_end``, as verifiers' ``close()`` ends
    its unfinished stages."""
    start = getattr(timespan, "start", 0.0) or 0.0
    end = getattr(timespan, "end", 0.0) or 0.0
    stop = to_ns(end) if end else open_end
    if not start or stop is None:
        return None
    s = to_ns(start)
    return s, max(s, stop)


def _union(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            if e > merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
        else:
            merged.append((s, e))
    return merged


def _tools_of(trace: Any, call: Any) -> list[Any]:
    """The tool calls of the reply a model call committed (what the harness ran next)."""
    node = getattr(call, "node", None)
    nodes = getattr(trace, "nodes", None) or []
    if node is None or not 0 <= node < len(nodes):
        return []
    return list(getattr(nodes[node].message, "tool_calls", None) or [])


def _harness_gaps(state: RolloutState, trace: Any, agent: tuple[int, int]) -> None:
    """``env`` spans over the agent span less the model calls: verifiers' harness time.

    Each stretch starts at the agent's start or where a model call ended and ends where
    the next began (or at the agent's end); after a reply with tool calls it is an
    ``execute_tool`` of those tools, else of the harness itself (launch, exit)."""
    a0, a1 = agent
    calls = []
    for call in getattr(trace, "calls", None) or []:
        span = _span(getattr(call, "time", None))
        if span is not None and span[1] > a0 and span[0] < a1:
            calls.append((max(span[0], a0), min(span[1], a1), call))
    by_end = {e: call for _, e, call in calls}
    cursor = a0
    for s, e in [*_union((s, e) for s, e, _ in calls), (a1, a1)]:
        if s > cursor:
            after = by_end.get(cursor)
            tools = _tools_of(trace, after) if after is not None else []
            names = sorted({str(getattr(t, "name", "")) for t in tools} - {""})
            attrs: dict[str, Any] = {STAGE: STAGE_AGENT}
            attrs["tool"] = ",".join(names) if names else (state.harness or "harness")
            if len(tools) == 1 and getattr(tools[0], "id", None):
                attrs["tool_call_id"] = str(tools[0].id)
            step = state.traj.env_step(**attrs).start(start_time=cursor)
            step.end(s)
        cursor = max(cursor, e)


def record_phases(state: RolloutState, trace: Any, end_ns: int) -> None:
    """Every phase span of a finished rollout from verifiers' own timestamps, and the
    teardown after them (harness cleanup, runtime stop) up to ``end_ns``; a stage still
    running (abort, instrumentation removed) ends at ``end_ns``, with no teardown."""
    traj = state.traj
    try:
        timing = trace.timing
        for stage, opener in (
            (STAGE_BOOT, traj.env_setup),
            (STAGE_SETUP, traj.env_setup),
            (PHASE_FINALIZE, lambda **kw: traj.phase(PHASE_FINALIZE, **kw)),
            (PHASE_SCORING, lambda **kw: traj.phase(PHASE_SCORING, **kw)),
        ):
            span = _span(getattr(timing, stage), end_ns)
            if span is not None:
                opener(**{STAGE: stage}).start(start_time=span[0]).end(span[1])
        agent = _span(timing.agent, end_ns)
        if agent is not None:
            _harness_gaps(state, trace, agent)
        stages = (timing.boot, timing.setup, timing.agent, timing.finalize, timing.scoring)
        ends = [to_ns(s.end) for s in stages if getattr(s, "end", 0.0)]
        running = any(getattr(s, "start", 0.0) and not getattr(s, "end", 0.0) for s in stages)
        if ends and end_ns > max(ends) and not running:
            traj.env_teardown(**{STAGE: STAGE_TEARDOWN}).start(start_time=max(ends)).end(end_ns)
    except Exception as exc:  # verifiers' trace changed shape: report once, end the root
        internal_error("verifiers phases", exc)
