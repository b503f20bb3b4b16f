"""The processor's flat phase triples give the breakdown the named phases give."""

from __future__ import annotations

from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from otel_rollout._accounting.compute import _sequential, root_breakdown
from otel_rollout.attributes import BANDS

MS = 1_000_000
ROOT = {"rollout.trajectory.id": "t", "rollout.env.class": "e", "gen_ai.request.model": "m"}


def both(start: int, end: int, triples: list[tuple[int, int, int]], **kw):
    flat = array("q", [x for t in triples for x in t])
    named = [(BANDS[code], s, e) for code, s, e in triples]
    return root_breakdown(start, end, flat, ROOT, **kw), root_breakdown(
        start, end, named, ROOT, **kw
    )


def sequential(n: int, *, gap: int = MS) -> list[tuple[int, int, int]]:
    out, t = [], 0
    for i in range(n):
        out.append((i % 2 if 0 < i < n - 1 else (2 if i == 0 else 3), t, t + 3 * MS))
        t += 3 * MS + gap
    return out


def test_a_sequential_loop_is_summed_exactly():
    triples = sequential(22)
    assert _sequential(0, 100 * MS, array("q", [x for t in triples for x in t])) is not None
    flat, named = both(0, 100 * MS, triples)
    assert flat == named
    assert flat.nanos["llm"] == 10 * 3 * MS and flat.turns == 10 and flat.env_steps == 10
    assert sum(flat.nanos[b] for b in (*BANDS, "other")) == flat.nanos["e2e"] == 100 * MS


def test_the_flat_phases_are_copied_not_kept():
    triples = sequential(4)
    flat = array("q", [x for t in triples for x in t])
    bd = root_breakdown(0, 100 * MS, flat, ROOT)
    flat.extend((0, 90 * MS, 95 * MS))
    assert len(bd.intervals) == 12


def test_overlap_clipping_zero_length_and_bands_take_the_general_rules():
    cases = [
        [(0, 0, 10 * MS), (1, 5 * MS, 20 * MS)],  # overlap: llm first
        [(0, -5 * MS, 10 * MS)],  # starts before the root
        [(1, 90 * MS, 120 * MS)],  # ends after it
        [(0, 10 * MS, 10 * MS), (1, 20 * MS, 30 * MS)],  # zero length
        [],
    ]
    for triples in cases:
        flat, named = both(0, 100 * MS, triples)
        assert flat == named, triples
    flat, named = both(0, 100 * MS, sequential(6), bands={"env": "llm"})
    assert flat == named and flat.nanos["env"] == 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(-20, 120), st.integers(0, 40)), max_size=30),
    st.integers(0, 50),
    st.integers(50, 110),
)
def test_any_phases_give_the_same_breakdown(raw, start, end):
    triples = [(code, s * MS, (s + d) * MS) for code, s, d in raw]
    flat, named = both(start * MS, end * MS, triples)
    assert flat == named
