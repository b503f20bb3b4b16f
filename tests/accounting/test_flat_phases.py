"""A sequential loop's breakdown from the sums the processor keeps as phases end is the one
the general rules give."""

from __future__ import annotations

from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from otel_rollout._accounting.compute import root_breakdown, sequential_breakdown
from otel_rollout.attributes import BANDS

MS = 1_000_000
ROOT = {"rollout.trajectory.id": "t", "rollout.env.class": "e", "gen_ai.request.model": "m"}


def both(start: int, end: int, triples: list[tuple[int, int, int]]):
    flat = array("q", [x for t in triples for x in t])
    sums = [0] * len(BANDS)
    for code, s, e in triples:
        sums[code] += e - s
    named = [(BANDS[code], s, e) for code, s, e in triples]
    return (
        sequential_breakdown(start, end, flat, sums, ROOT, trace_id="ab"),
        root_breakdown(start, end, named, ROOT, trace_id="ab"),
    )


def loop(turns: int, gap: int = MS) -> list[tuple[int, int, int]]:
    codes = [2, *[c for _ in range(turns) for c in (0, 1)], 3]
    out, t = [], gap
    for code in codes:
        out.append((code, t, t + 3 * MS))
        t += 3 * MS + gap
    return out


def test_a_ten_turn_loop():
    seq, general = both(0, 100 * MS, loop(10))
    assert seq == general
    assert seq.nanos["llm"] == 30 * MS and seq.turns == 10 and seq.env_steps == 10
    assert sum(seq.nanos[b] for b in (*BANDS, "other")) == seq.nanos["e2e"] == 100 * MS


def test_touching_phases_and_no_phase():
    assert both(0, 100 * MS, loop(3, gap=0))[0] == both(0, 100 * MS, loop(3, gap=0))[1]
    seq, general = both(5, 5 + 7 * MS, [])
    assert seq == general and seq.nanos["other"] == 7 * MS


def test_past_the_interval_limit_the_latest_are_kept():
    seq, general = both(0, 10**6 * MS, loop(2100, gap=0))
    assert seq == general
    assert len(seq.intervals) == len(general.intervals) < 3 * len(loop(2100))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5), st.integers(1, 9)), max_size=40),
    st.integers(0, 5),
    st.integers(0, 20),
)
def test_any_sequential_loop(raw, lead, tail):
    triples, t = [], lead * MS
    for code, gap, length in raw:
        t += gap * MS
        triples.append((code, t, t + length * MS))
        t += length * MS
    seq, general = both(0, t + tail * MS, triples)
    assert seq == general
