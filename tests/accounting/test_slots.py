"""The slot account: capacity x wall split exactly into bands and empty, drain, stragglers.

Every case is in closed form on whole seconds after an epoch time (``U`` ns each);
docs/batch.md draws each of them.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_rollout import attributes as A
from otel_rollout._accounting.slots import EMPTY, slot_account
from otel_rollout.accounting import compute_breakdown

U = 1_000_000_000
T0 = 1_700_000_000 * U


def traj(tid, start, end, *phases):
    return compute_breakdown(
        T0 + start * U, T0 + end * U, [(p, T0 + s * U, T0 + e * U) for p, s, e in phases],
        trajectory_id=tid, trace_id=f"{tid:0>32}", batch_id="b",
    )  # fmt: skip


def work(tid, start, length):
    """A trajectory generating for 60% of its length, then in its env."""
    gen = start + length * 6 // 10
    return traj(tid, start, start + length, ("llm", start, gen), ("env", gen, start + length))


def secs(parts):
    return {k: v / U for k, v in parts.items() if v}


def exact(account):
    """The account's invariants: its parts sum to capacity x wall (and the drain's to
    capacity x drain), none is negative, the timeline integrates to them."""
    assert sum(account.slot_ns.values()) == account.capacity * account.wall_ns
    assert sum(account.drain_slot_ns.values()) == account.capacity * account.drain_ns
    assert min(account.slot_ns.values()) >= 0 and min(account.overflow_ns.values()) >= 0
    tl = account.timeline
    assert tl.columns == (*account.parts, "overflow")
    assert (tl.counts[:, : len(account.parts)].sum(axis=1) == account.capacity).all()
    assert (tl.counts >= 0).all()
    for part in account.parts:
        assert tl.integral(part, account.start_ns, account.end_ns) == account.slot_ns[part]
    return account


def test_a_one_of_c_runs_4x_longer_the_drain_is_from_the_first_finish_to_its_end():
    bds = [work(f"t{i}", 0, 10) for i in range(3)] + [work("long", 0, 40)]
    a = exact(slot_account(bds, capacity=4))
    assert a.capacity == 4 and a.declared and a.wall_ns == 40 * U
    assert secs(a.slot_ns) == {"llm": 42, "env": 28, EMPTY: 90}  # 3x6 + 24, 3x4 + 16
    assert a.frac(EMPTY) == 90 / 160
    assert a.drain_start_ns == T0 + 10 * U and a.drain_ns == 30 * U and a.drain_frac == 0.75
    assert secs(a.drain_slot_ns) == {"llm": 14, "env": 16, EMPTY: 90}
    assert a.drain_empty_mean == 3.0
    assert a.median_duration_ns == 10 * U
    assert [(s.trajectory_id, s.duration_ns, s.cost_ns) for s in a.stragglers] == [
        ("long", 40 * U, 30 * U)
    ]
    assert a.straggler_cost_ns == 30 * U


def test_b_4c_of_equal_length_fill_every_slot_no_drain_no_straggler():
    bds = [work(f"t{w}{i}", 10 * w, 10) for w in range(4) for i in range(4)]
    for capacity in (4, None):
        a = exact(slot_account(bds, capacity=capacity))
        assert a.capacity == 4 and a.declared is (capacity is not None)
        assert secs(a.slot_ns) == {"llm": 96, "env": 64}
        assert a.slot_ns[EMPTY] == 0 and a.slot_ns[A.BAND_OTHER] == 0
        assert a.drain_start_ns == a.end_ns == T0 + 40 * U and a.drain_ns == 0
        assert a.stragglers == () and a.straggler_cost_ns == 0


def test_c_4c_with_one_long_one_started_last_drains_behind_it():
    bds = [work(f"t{k:02}", 10 * (k // 4), 10) for k in range(15)] + [work("long", 30, 40)]
    a = exact(slot_account(bds, capacity=4))
    assert a.wall_ns == 70 * U
    assert secs(a.slot_ns) == {"llm": 90 + 24, "env": 60 + 16, EMPTY: 90}
    assert a.drain_start_ns == T0 + 40 * U and a.drain_ns == 30 * U
    assert secs(a.drain_slot_ns) == {"llm": 14, "env": 16, EMPTY: 90}
    assert [(s.trajectory_id, s.cost_ns) for s in a.stragglers] == [("long", 30 * U)]


def test_d_more_in_flight_than_declared_is_overflow_reported_apart():
    # started together; by id a and b hold the two slots, c waits until a ends at 10
    bds = [
        traj("a", 0, 10, ("llm", 0, 10)),
        traj("b", 0, 20, ("llm", 0, 5), ("env", 5, 20)),
        traj("c", 0, 30, ("env", 0, 30)),
    ]
    a = exact(slot_account(bds, capacity=2))
    assert a.capacity == 2 and a.peak_in_flight == 3
    assert secs(a.slot_ns) == {"llm": 15, "env": 35, EMPTY: 10}
    assert secs(a.overflow_ns) == {"env": 10} and a.overflow_total_ns == 10 * U
    # every band's trajectory time is in the account or in overflow
    for band in A.ALL_BANDS:
        total = sum(b.nanos[band] for b in bds)
        assert a.slot_ns[band] + a.overflow_ns[band] == total
    tl = a.timeline
    assert ((tl.times_ns - T0) // U).tolist() == [0, 5, 10, 20, 30]
    assert tl.column("overflow").tolist() == [1, 1, 0, 0, 0]
    assert tl.column("env").tolist() == [0, 1, 2, 1, 0]
    assert a.drain_start_ns == T0 + 20 * U and secs(a.drain_slot_ns) == {"env": 10, EMPTY: 10}
    assert a.stragglers == ()  # 30 s is not over twice the median (20 s)
    # undeclared, the capacity is the peak and nothing overflows
    b = exact(slot_account(bds))
    assert b.capacity == 3 and not b.declared and b.overflow_total_ns == 0
    assert secs(b.slot_ns) == {"llm": 15, "env": 45, EMPTY: 30}


def test_e_env_bound_trajectories_show_env_setup_teardown_and_gaps():
    bds = [
        # the generate that overlaps the env step [9, 10] counts as llm (priority)
        traj("t0", 0, 12, ("llm", 0, 2), ("env", 2, 10), ("llm", 9, 12)),
        traj("t1", 0, 13, ("env_setup", 0, 1), ("llm", 1, 3), ("env", 3, 11),
             ("env_teardown", 11, 12)),
    ]  # fmt: skip
    a = exact(slot_account(bds, capacity=2))
    assert secs(a.slot_ns) == {
        "llm": 7, "env": 15, "env_setup": 1, "env_teardown": 1, "other": 1, EMPTY: 1,
    }  # fmt: skip
    assert max(A.ALL_BANDS, key=a.frac) == "env"
    assert a.drain_start_ns == T0 + 12 * U and secs(a.drain_slot_ns) == {"other": 1, EMPTY: 1}


def test_the_batch_start_before_the_first_trajectory_is_empty_ramp():
    bds = [work("t0", 0, 10), work("t1", 2, 10)]
    a = exact(slot_account(bds, capacity=2, start_ns=T0 - 3 * U))
    assert a.wall_ns == 15 * U and secs(a.slot_ns) == {"llm": 12, "env": 8, EMPTY: 10}
    # the last start is at 2, the first slot left empty at 10
    assert a.drain_start_ns == T0 + 10 * U and a.drain_ns == 2 * U


def test_g_the_account_does_not_depend_on_order_and_two_halves_equal_the_union():
    bds = [work(f"t{k:02}", k % 7, 5 + k % 11) for k in range(30)]
    whole = slot_account(bds, capacity=6)
    shuffled = list(bds)
    random.Random(0).shuffle(shuffled)
    assert slot_account(shuffled, capacity=6) == whole
    assert slot_account(shuffled[:13] + shuffled[13:], capacity=6) == whole


def test_an_empty_batch_and_a_bad_capacity():
    a = slot_account([], capacity=4, start_ns=7)
    assert a.capacity == 4 and a.wall_ns == 0 and a.frac(EMPTY) == 0.0 and a.stragglers == ()
    for bad in (0, -1, 2.5, True, "16"):
        with pytest.raises(ValueError, match=f"got {bad!r}"):
            slot_account([work("t", 0, 1)], capacity=bad)
    with pytest.raises(ValueError, match="unknown slot part 'idle'"):
        a.frac("idle")


_BANDS = (*A.BANDS, "tool")  # "tool" is no band: its time is other


@st.composite
def schedules(draw):
    n = draw(st.integers(1, 10))
    out = []
    for i in range(n):
        start = draw(st.integers(0, 40))
        end = start + draw(st.integers(0, 40))
        phases = []
        for _ in range(draw(st.integers(0, 5))):
            s = draw(st.integers(start - 2, end))
            e = draw(st.integers(s, end + 2))
            phases.append((draw(st.sampled_from(_BANDS)), s, e))
        out.append(traj(f"t{i}", start, end, *phases))
    return out


@given(schedules(), st.one_of(st.none(), st.integers(1, 6)), st.integers(0, 5))
@settings(max_examples=300, deadline=None)
def test_the_account_sums_to_capacity_times_wall_for_any_schedule(bds, capacity, before):
    a = exact(slot_account(bds, capacity=capacity, start_ns=T0 - before * U))
    assert a.capacity == (capacity if capacity is not None else a.peak_in_flight)
    for band in A.ALL_BANDS:
        assert a.slot_ns[band] + a.overflow_ns[band] == sum(b.nanos[band] for b in bds)
    assert (a.overflow_total_ns == 0) == (a.timeline.column("overflow") == 0).all()
    assert a.start_ns <= a.drain_start_ns <= a.end_ns
    cost = a.straggler_cost_ns
    assert 0 <= cost <= a.drain_ns and all(0 <= s.cost_ns <= cost for s in a.stragglers)


def test_a_band_added_to_the_registry_is_a_part_of_the_account_and_of_the_keys():
    from otel_rollout import analyze_batch
    from otel_rollout._bands import DEFAULT_BANDS, Band

    judge = DEFAULT_BANDS.with_band(Band("judge", 25, "#DD8452", "judge", "judge", "judge"))

    def judged(tid, start):  # generate 6 s, env 2 s, judge 2 s (its first second is env)
        return compute_breakdown(
            T0 + start * U, T0 + (start + 10) * U,
            [(p, T0 + (start + s) * U, T0 + (start + e) * U)
             for p, s, e in (("llm", 0, 6), ("env", 6, 8), ("judge", 7, 10))],
            trajectory_id=tid, batch_id="b", registry=judge,
        )  # fmt: skip

    a = exact(slot_account([judged("t0", 0), judged("t1", 0)], capacity=3))
    assert a.bands is judge and a.parts == (*judge.names, EMPTY)
    assert secs(a.slot_ns) == {"llm": 12, "env": 4, "judge": 4, EMPTY: 10}
    keys = analyze_batch([judged("t0", 0)], capacity=2).summary()
    assert keys["generate/batch_slot_frac_judge"] == 0.1  # 2 s of 2 slots x 10 s
    with pytest.raises(ValueError, match="share one band registry"):
        slot_account([judged("t0", 0), work("t1", 0, 10)])


def test_intervals_outside_their_trajectory_are_clipped_to_it():
    from array import array
    from dataclasses import replace

    b = work("t0", 0, 10)
    llm = A.BANDS.index("llm")
    stray = replace(b, intervals=array("q", [llm, T0 - 5 * U, T0 + 6 * U, *b.intervals[3:]]))
    a = exact(slot_account([stray, work("t1", 0, 10)], capacity=3))
    assert secs(a.slot_ns) == {"llm": 12, "env": 8, EMPTY: 10}
