"""The report's breakdown of a sequential loop (the fast path: sums, no general rules) is
the one the general rules give, to the nanosecond, and every other trace still goes the
general way."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_rollout._accounting import span_tree
from otel_rollout._accounting.compute import root_breakdown
from otel_rollout._accounting.span_tree import outermost_phases
from otel_rollout.report._assemble import breakdowns_from_spans
from otel_rollout.report._model import RawSpan

MS = 1_000_000
#: Where the root starts (a span starting at 0 is read as having no start time).
T0 = 1_700_000_000 * 10**9
ROOT_ATTRS = {"rollout.trajectory.id": "t", "rollout.env.class": "e", "gen_ai.request.model": "m"}
NAMES = ("llm", "env", "env_setup", "env_teardown", "env_queue", "finish_session", "reward")


def _spans(start, end, phases, nested=()):
    """A root ``[start, end]`` with ``phases`` (name, start, end) below it, in that order,
    then ``nested`` phases below the first phase; times from :data:`T0`."""
    root = RawSpan("ab" * 16, 1, None, "trajectory", T0 + start, T0 + end, dict(ROOT_ATTRS))
    kids = [RawSpan("ab" * 16, 10 + i, 1, n, T0 + s, T0 + e, {"rollout.phase": n})
            for i, (n, s, e) in enumerate(phases)]  # fmt: skip
    kids += [RawSpan("ab" * 16, 100 + i, 10, n, T0 + s, T0 + e, {"rollout.phase": n})
             for i, (n, s, e) in enumerate(nested)]  # fmt: skip
    return [*kids, root]


def _report(spans):
    result = breakdowns_from_spans(spans)
    assert result.found == 1
    return result.trajectories[0]


def _general(start, end, spans):
    tree = [(s.span_id, s.parent_id, s.start_ns, s.end_ns, s.attributes.get("rollout.phase"))
            for s in spans]  # fmt: skip
    phases = outermost_phases(1, tree, end_open_at=T0 + end)
    return root_breakdown(T0 + start, T0 + end, phases, ROOT_ATTRS, trace_id="ab" * 16)


def _loop(turns, gap=MS):
    names = ["env_setup", *[n for _ in range(turns) for n in ("llm", "env")], "env_teardown"]
    out, t = [], gap
    for n in names:
        out.append((n, t, t + 3 * MS))
        t += 3 * MS + gap
    return out, t


def test_a_ten_turn_loop_takes_the_fast_path(monkeypatch):
    phases, end = _loop(10)
    expected = _general(0, end, _spans(0, end, phases))

    def general_rules(*args, **kwargs):
        raise AssertionError("a sequential loop went the general way")

    monkeypatch.setattr(span_tree, "root_breakdown", general_rules)
    got = _report(_spans(0, end, phases))
    assert got.breakdown == expected
    assert got.breakdown.nanos["llm"] == 30 * MS and got.breakdown.turns == 10
    assert [p.phase for p in got.phases] == [n for n, _, _ in phases]


@pytest.mark.parametrize(
    "phases",
    [
        [("llm", 0, 5 * MS), ("env", 4 * MS, 8 * MS)],  # overlapping
        [("env", 6 * MS, 8 * MS), ("llm", 0, 5 * MS)],  # ended out of start order
        [("llm", MS, MS), ("env", 2 * MS, 3 * MS)],  # an empty phase
        [("reward", MS, 2 * MS), ("env", 2 * MS, 3 * MS)],  # not a band
        [("llm", -MS, 2 * MS)],  # starts before the root
        [("llm", MS, 20 * MS)],  # ends after the root
    ],
)
def test_what_is_not_a_sequential_loop_goes_the_general_way(phases, monkeypatch):
    expected = _general(0, 10 * MS, _spans(0, 10 * MS, phases))
    calls = []
    general = span_tree.root_breakdown

    def counted(*args, **kwargs):
        calls.append(1)
        return general(*args, **kwargs)

    monkeypatch.setattr(span_tree, "root_breakdown", counted)
    assert _report(_spans(0, 10 * MS, phases)).breakdown == expected
    assert calls == [1]


_interval = st.tuples(st.sampled_from(NAMES), st.integers(-5, 105), st.integers(0, 20))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_interval, max_size=8),
    st.lists(_interval, max_size=3),
    st.booleans(),
    st.integers(80, 110),
)
def test_any_trace_gives_the_general_figures(raw, nested, sequential, end):
    """Random phases (nested ones too), or a sequential loop made of them: the report's
    breakdown is the general rules' one."""
    phases, t = [], 0
    for name, s, length in raw:
        if sequential:
            name = NAMES[hash(name) % 4]
            s, t = t + s % 4, t + s % 4 + length + 1
            phases.append((name, s * MS, t * MS))
        else:
            phases.append((name, s * MS, (s + length) * MS))
    nest = [(n, s * MS, (s + length) * MS) for n, s, length in nested]
    spans = _spans(0, end * MS, phases, nest if phases else ())
    assert _report(spans).breakdown == _general(0, end * MS, spans)
