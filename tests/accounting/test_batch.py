"""The batch analysis: the slot account, drain and stragglers in it, engine demand (the
account itself in every case: tests/accounting/test_slots.py)."""

from __future__ import annotations

import math
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_rollout import analyze_batch
from otel_rollout._accounting.breakdown import MAX_INTERVALS
from otel_rollout.accounting import (
    BatchAccumulator,
    compute_breakdown,
    group_by_batch,
    mark_consumed,
)

U = 1_000_000_000  # one second in ns
T0 = 1_700_000_000 * U  # an epoch time, so nothing relies on starting at zero


def traj(tid, start, end, *phases, batch="b1", version=None):
    """A breakdown from times in whole seconds after T0."""
    return compute_breakdown(
        T0 + start * U,
        T0 + end * U,
        [(p, T0 + s * U, T0 + e * U) for p, s, e in phases],
        trajectory_id=tid,
        trace_id=f"{tid:0>32}",
        batch_id=batch,
        policy_version=version,
    )


def known_batch():
    """Five trajectories whose figures are known in closed form (times in seconds).

    Ends 4, 5, 6, 8, 12; at most five in flight ([1, 4]), so the capacity is 5 and the
    account holds 5 x 12 = 60 slot-seconds: llm 2+3+4+5+5 (t4's env overlapping its
    generate counts as llm), env 1+1+1+1+4, setup 5, teardown 1, other 1 (t3's last
    second) and 26 empty. The last start is at 1 and the first slot is left empty at 4:
    the drain is [4, 12]. Durations 4, 5, 6, 8, 11: none over twice the median (6), so
    no stragglers. Generate unions: t0 [1,3] (two overlapping calls count once), t1
    [1,4], t2 [1,5], t3 [1,6], t4 [2,7]: no generate call in [0, 1] and [7, 12].
    """
    return [
        traj("t0", 0, 4, ("env_setup", 0, 1), ("llm", 1, 3), ("llm", 2, 3), ("env", 3, 4)),
        traj("t1", 0, 5, ("env_setup", 0, 1), ("llm", 1, 4), ("env", 4, 5)),
        traj("t2", 0, 6, ("env_setup", 0, 1), ("llm", 1, 5), ("env", 5, 6)),
        traj("t3", 0, 8, ("env_setup", 0, 1), ("llm", 1, 6), ("env", 6, 7)),
        traj("t4", 1, 12, ("env_setup", 1, 2), ("llm", 2, 7), ("env", 6, 11),
             ("env_teardown", 11, 12)),
    ]  # fmt: skip


def test_a_known_batch_gives_its_closed_form_figures():
    a = analyze_batch(known_batch())
    assert a.batch_id == "b1" and a.trajectories == 5
    assert a.start_ns == T0 and a.end_ns == T0 + 12 * U and a.wall_ns == 12 * U
    assert a.finish_ns == (4 * U, 5 * U, 6 * U, 8 * U, 12 * U)
    sl = a.slots
    assert a.capacity == sl.capacity == 5 and not sl.declared
    assert {k: v // U for k, v in sl.slot_ns.items()} == {
        "llm": 19, "env": 8, "env_setup": 5, "env_teardown": 1, "other": 1, "empty": 26,
    }  # fmt: skip
    assert sl.drain_start_ns == T0 + 4 * U and a.drain_ns == 8 * U and a.drain_frac == 8 / 12
    assert {k: v // U for k, v in sl.drain_slot_ns.items()} == {
        "llm": 6, "env": 7, "env_setup": 0, "env_teardown": 1, "other": 1, "empty": 25,
    }  # fmt: skip
    assert sl.median_duration_ns == 6 * U and a.stragglers == () and a.straggler_cost_ns == 0
    t = [T0 + k * U for k in range(13)]
    assert a.in_generate.times_ns.tolist() == [t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]]
    assert a.in_generate.values.tolist() == [0, 4, 5, 4, 3, 2, 1, 0]
    assert a.in_flight.times_ns.tolist() == [t[0], t[1], t[4], t[5], t[6], t[8], t[12]]
    assert a.in_flight.values.tolist() == [4, 5, 4, 3, 2, 1, 0]
    assert a.in_generate.at(t[2]) == 5 and a.in_generate.at(t[2] - 1) == 4
    assert a.llm_concurrency_max == 5 and a.llm_ns == 19 * U
    assert a.llm_concurrency_mean == 19 / 12  # generate-seconds over the wall
    # below a quarter of the peak (1.25) during [0,1], [6,7] and [7,12]; none in [0,1], [7,12]
    assert a.low_llm_demand_ns == 7 * U and a.low_llm_demand_frac == 7 / 12
    assert a.engine_idle_ns == 6 * U and a.engine_idle_frac == 0.5
    assert a.engine_queue_ns is None  # no engine spans


def test_the_tracker_keys_of_a_known_batch():
    s = analyze_batch(known_batch()).summary()
    assert s == {
        "generate/batch_wall_time": 12.0,
        "generate/batch_capacity": 5.0,
        "generate/batch_slot_frac_llm": 19 / 60,
        "generate/batch_slot_frac_env": 8 / 60,
        "generate/batch_slot_frac_env_setup": 5 / 60,
        "generate/batch_slot_frac_env_teardown": 1 / 60,
        "generate/batch_slot_frac_other": 1 / 60,
        "generate/batch_slot_frac_empty": 26 / 60,
        "generate/batch_drain_time": 8.0,
        "generate/batch_drain_frac": 8 / 12,
        "generate/batch_stragglers": 0.0,
        "generate/batch_straggler_cost_time": 0.0,
        "generate/batch_engine_idle_frac": 0.5,
        "generate/llm_concurrency_mean": 19 / 12,
        "generate/llm_concurrency_max": 5.0,
        "generate/low_llm_demand_frac": 7 / 12,
    }
    assert math.isclose(sum(v for k, v in s.items() if "slot_frac" in k), 1.0)


def test_a_declared_capacity_counts_empty_slots_and_a_straggler_its_cost():
    # with two 1 s trajectories the median is 5 s and t4 (11 s) is slow; they end as t4
    # starts, the last start: the drain is [1, 12]
    bds = [*known_batch(), traj("t5", 0, 1), traj("t6", 0, 1)]
    a = analyze_batch(bds, capacity=8)
    assert a.capacity == 8 and a.slots.declared
    assert a.slots.slot_ns["empty"] == 8 * 12 * U - 36 * U
    assert a.slots.drain_start_ns == T0 + U
    assert [b.trajectory_id for b in a.stragglers] == ["t4"]
    # at the median (5 s, from its start at 1) it would have ended at 6; t3 ends at 8
    assert a.straggler_cost_ns == 4 * U and a.slots.stragglers[0].cost_ns == 4 * U
    s = a.summary()
    assert s["generate/batch_capacity"] == 8.0 and s["generate/batch_stragglers"] == 1.0
    assert s["generate/batch_straggler_cost_time"] == 4.0


def test_the_engine_queue_is_summed_where_the_engine_reported_it():
    from otel_rollout._accounting.compute import with_waits

    bds = known_batch()
    bds[0] = with_waits(bds[0], (U // 2, U // 4, U // 4), None)
    bds[2] = with_waits(bds[2], (3 * U, 0, U), None)
    a = analyze_batch(bds)
    assert a.engine_queue_ns == 3 * U + U // 2
    assert a.as_attributes()["rollout.batch.engine_queue_time"] == 3.5


def test_the_batch_start_can_precede_the_first_trajectory():
    a = analyze_batch(known_batch(), start_ns=T0 - 2 * U)
    assert a.wall_ns == 14 * U and a.finish_ns[0] == 6 * U and a.drain_ns == 8 * U
    assert a.slots.slot_ns["empty"] == (26 + 10) * U  # two more seconds of 5 empty slots
    assert a.in_generate.times_ns[0] == T0 - 2 * U and a.low_llm_demand_ns == 9 * U
    assert a.engine_idle_ns == 8 * U


def test_an_even_count_takes_the_mean_of_the_middle_durations_rounded_down():
    bds = [traj(f"t{i}", 0, end) for i, end in enumerate((2, 3, 4))]
    bds.append(compute_breakdown(T0, T0 + 4 * U + 1, [], trajectory_id="odd", batch_id="b1"))
    a = analyze_batch(bds)  # durations 2, 3, 4, 4 s + 1 ns
    assert a.slots.median_duration_ns == (3 * U + 4 * U) // 2


def test_an_empty_batch_has_the_same_keys_each_saying_no_data():
    a = analyze_batch([], start_ns=5)
    assert a.trajectories == 0 and a.wall_ns == 0
    assert set(a.summary()) == set(analyze_batch([traj("a", 0, 3)]).summary())
    assert all(math.isnan(v) for v in a.summary().values())


def test_no_generate_calls_mean_no_peak_and_no_low_demand():
    a = analyze_batch([traj("a", 0, 3, ("env", 0, 3)), traj("b", 0, 1)])
    assert a.llm_concurrency_max == 0 and a.low_llm_demand_frac == 0.0
    assert a.engine_idle_frac == 1.0
    assert {k: v // U for k, v in a.slots.slot_ns.items() if v} == {
        "env": 3,
        "other": 1,
        "empty": 2,
    }


def test_breakdowns_carry_their_batch_and_intervals_through_pickle():
    b = known_batch()[4]
    assert b.batch_id == "b1" and b.start_time_ns == T0 + U and b.end_time_ns == T0 + 12 * U
    assert [tuple(p) for p in b.phase_intervals()][:2] == [
        ("env_setup", T0 + U, T0 + 2 * U),
        ("llm", T0 + 2 * U, T0 + 7 * U),
    ]
    again = pickle.loads(pickle.dumps(b))
    assert again == b and again.intervals == b.intervals
    assert analyze_batch(pickle.loads(pickle.dumps(known_batch()))) == analyze_batch(known_batch())


def test_a_breakdown_keeps_a_bounded_number_of_intervals_the_latest():
    n = MAX_INTERVALS + 10
    phases = [("llm", 2 * i, 2 * i + 1) for i in range(n)]
    b = compute_breakdown(0, 2 * n, phases)
    assert len(b.intervals) == 3 * MAX_INTERVALS
    assert b.phase_intervals()[0].start_ns == 20 and b.phase_intervals()[-1].end_ns == 2 * n - 1
    assert b.nanos["llm"] == n  # the breakdown itself still counts every phase


def test_staleness_and_buffer_wait_at_consumption():
    bds = [traj("a", 0, 4, version=3), traj("b", 0, 6, version=5), traj("c", 0, 8)]
    used = mark_consumed(bds, 6, T0 + 10 * U)
    assert [b.staleness for b in used] == [3, 1, None]
    assert [b.buffer_wait_ns for b in used] == [6 * U, 4 * U, 2 * U]
    a = analyze_batch(used)
    assert a.staleness == (1, 3) and a.buffer_wait_ns == (2 * U, 4 * U, 6 * U)
    s = a.summary()
    assert s["generate/policy_staleness_mean"] == 2.0
    assert s["generate/policy_staleness_max"] == 3.0
    assert s["generate/buffer_wait_time_mean"] == 4.0
    assert s["generate/buffer_wait_time_max"] == 6.0


def test_the_accumulator_is_bounded_and_counts_what_it_left_out():
    acc = BatchAccumulator("b1", max_trajectories=3)
    acc.extend(known_batch())
    assert len(acc) == 3 and acc.dropped == 2
    with pytest.raises(ValueError, match="max_trajectories"):
        BatchAccumulator(max_trajectories=0)


def test_group_by_batch_skips_breakdowns_without_one():
    bds = [traj("a", 0, 1, batch="x"), traj("b", 0, 1, batch=None), traj("c", 0, 2, batch="y")]
    assert {k: [b.trajectory_id for b in v] for k, v in group_by_batch(bds).items()} == {
        "x": ["a"],
        "y": ["c"],
    }


# --- properties ------------------------------------------------------------------------

_phase = st.tuples(
    st.sampled_from(["llm", "env", "env_setup", "env_teardown", "reward"]),
    st.integers(0, 60),
    st.integers(0, 30),
)


@st.composite
def _trajectory(draw, tid):
    start = draw(st.integers(0, 40))
    length = draw(st.integers(0, 60))
    phases = [(p, start + s, start + s + d) for p, s, d in draw(st.lists(_phase, max_size=6))]
    return traj(tid, start, start + length, *phases)


@st.composite
def _batch(draw, prefix):
    n = draw(st.integers(1, 12))
    return [draw(_trajectory(f"{prefix}{i}")) for i in range(n)]


@settings(max_examples=60, deadline=None)
@given(_batch("a"), st.randoms(use_true_random=False))
def test_the_analysis_does_not_depend_on_the_order_of_breakdowns(bds, rnd):
    shuffled = list(bds)
    rnd.shuffle(shuffled)
    assert analyze_batch(shuffled) == analyze_batch(bds)


@settings(max_examples=60, deadline=None)
@given(_batch("a"), _batch("b"))
def test_merging_two_batches_gives_the_analysis_of_their_union(a, b):
    left = BatchAccumulator("b1")
    left.extend(a)
    right = BatchAccumulator("b1")
    right.extend(b)
    assert left.merge(right).analysis() == analyze_batch(b + a)


@settings(max_examples=60, deadline=None)
@given(_batch("a"))
def test_the_slots_sum_to_capacity_times_wall_and_the_demand_is_bounded(bds):
    a = analyze_batch(bds)
    assert sum(a.slots.slot_ns.values()) == a.capacity * a.wall_ns
    assert all(v >= 0 for v in a.slots.slot_ns.values())
    assert 0 <= a.llm_concurrency_max <= max(a.in_flight.values)
    assert a.in_generate.values[-1] == 0 and a.in_flight.values[-1] == 0
    assert 0 <= a.low_llm_demand_ns <= a.wall_ns and 0 <= a.engine_idle_ns <= a.wall_ns
    assert all(b.end_time_ns > a.slots.drain_start_ns for b in a.stragglers)
