"""The accounting rules of docs/design.md, on the pure breakdown function and on live spans."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_rollout._accounting.span_tree import breakdown_from_tree
from otel_rollout.accounting import SpanRecord, compute_breakdown, outermost_phases
from otel_rollout.attributes import ALL_BANDS, BANDS

MS = 1_000_000


def bd(phases, start=0, end=100 * MS, **kw):
    return compute_breakdown(start, end, phases, **kw)


def test_sequential_loop_assigns_each_phase_its_own_time():
    b = bd(
        [
            ("env_setup", 0, 10 * MS),
            ("llm", 10 * MS, 40 * MS),
            ("env", 40 * MS, 50 * MS),
            ("llm", 50 * MS, 80 * MS),
            ("env", 80 * MS, 90 * MS),
            ("env_teardown", 90 * MS, 95 * MS),
        ]
    )
    assert b.nanos == {
        "llm": 60 * MS,
        "env": 20 * MS,
        "env_setup": 10 * MS,
        "env_teardown": 5 * MS,
        "other": 5 * MS,
        "e2e": 100 * MS,
        "env_queue": 0,
        "finish_session": 0,
    }
    assert (b.turns, b.env_steps) == (2, 2)
    assert b.band("llm") == pytest.approx(0.06)


def test_overlapping_spans_of_one_band_count_their_union_once():
    b = bd([("llm", 10 * MS, 50 * MS), ("llm", 30 * MS, 70 * MS), ("llm", 60 * MS, 65 * MS)])
    assert b.nanos["llm"] == 60 * MS
    assert b.band_sum("llm") == pytest.approx(0.085)  # plain sum shows the concurrency
    assert b.nanos["other"] == 40 * MS


def test_overlap_across_bands_goes_to_the_higher_priority_band():
    b = bd([("env", 0, 50 * MS), ("llm", 30 * MS, 60 * MS), ("env_setup", 0, 10 * MS)])
    assert b.nanos["llm"] == 30 * MS  # llm wins [30, 60)
    assert b.nanos["env"] == 30 * MS  # env keeps [0, 30)
    assert b.nanos["env_setup"] == 0  # fully hidden behind env
    assert b.nanos["other"] == 40 * MS


def test_phases_outside_the_root_are_clipped_to_it():
    b = bd([("env_setup", -20 * MS, 10 * MS), ("llm", 90 * MS, 150 * MS)])
    assert b.nanos["env_setup"] == 10 * MS
    assert b.nanos["llm"] == 10 * MS
    assert b.nanos["other"] == 80 * MS
    assert b.band_sum("env_setup") == pytest.approx(0.03)  # sums are not clipped


def test_phase_entirely_outside_the_root_counts_nothing():
    b = bd([("llm", 200 * MS, 300 * MS)])
    assert b.nanos["llm"] == 0 and b.nanos["other"] == 100 * MS


def test_no_phase_spans_is_all_other():
    b = bd([])
    assert b.nanos["other"] == b.nanos["e2e"] == 100 * MS
    assert (b.turns, b.env_steps) == (0, 0)


def test_custom_phase_is_other_unless_mapped_to_a_band():
    assert bd([("reward", 0, 20 * MS)]).nanos["other"] == 100 * MS
    mapped = bd([("reward", 0, 20 * MS)], bands={"reward": "env"})
    assert mapped.nanos["env"] == 20 * MS


def test_outermost_phase_wins_in_a_span_tree():
    root = SpanRecord(1, None, 0, 100, None)
    step = SpanRecord(2, 1, 10, 60, "env")
    judge_wrapper = SpanRecord(3, 2, 20, 50, None)  # a non-phase span between the two
    judge = SpanRecord(4, 3, 25, 45, "llm")
    gen = SpanRecord(5, 1, 60, 90, "llm")
    phases = outermost_phases(1, [root, step, judge_wrapper, judge, gen])
    assert sorted(phases) == [("env", 10, 60), ("llm", 60, 90)]
    b = compute_breakdown(0, 100, phases)
    assert (b.nanos["env"], b.nanos["llm"], b.turns) == (50, 30, 1)


def test_outermost_phases_ignores_spans_not_under_the_root_and_clips_open_spans():
    root = SpanRecord(1, None, 0, 100, None)
    stranger = SpanRecord(7, 99, 0, 50, "llm")
    open_step = SpanRecord(8, 1, 70, None, "env")
    assert outermost_phases(1, [root, stranger, open_step]) == []
    assert outermost_phases(1, [root, stranger, open_step], end_open_at=100) == [("env", 70, 100)]


def test_a_root_that_names_itself_its_parent_is_not_its_own_phase():
    root = SpanRecord(1, 1, 0, 100, "env")
    step = SpanRecord(2, 1, 10, 60, "env")
    assert outermost_phases(1, [root, step]) == [("env", 10, 60)]


@st.composite
def span_trees(draw):
    start = draw(st.integers(0, 10**6))
    end = start + draw(st.integers(0, 10**6))
    n = draw(st.integers(0, 25))
    records = [SpanRecord(1, None, start, end, None)]
    for i in range(n):
        parent = draw(st.sampled_from([r.span_id for r in records]))
        s = draw(st.integers(start - 1000, end + 1000))
        e = s + draw(st.integers(0, 10**6))
        phase = draw(st.sampled_from([*BANDS, "reward", None]))
        records.append(SpanRecord(i + 2, parent, s, e, phase))
    return start, end, records


@settings(max_examples=300, deadline=None)
@given(span_trees())
def test_bands_are_disjoint_non_negative_and_sum_to_e2e_exactly(tree):
    start, end, records = tree
    b = compute_breakdown(start, end, outermost_phases(1, records))
    assert all(b.nanos[band] >= 0 for band in ALL_BANDS)
    assert sum(b.nanos[band] for band in ALL_BANDS) == end - start == b.nanos["e2e"]
    # disjoint: the bands together never exceed the union of all clipped intervals
    covered = set()
    for phase, s, e in outermost_phases(1, records):
        if phase in BANDS:
            covered.update(range(max(s, start), min(e, end)))
    if end - start <= 10**6 and len(covered) < 200_000:
        assert sum(b.nanos[band] for band in BANDS) == len(covered)


# --- the same rules on live spans through the processor -------------------------------


def test_nested_llm_span_inside_env_step_counts_as_env(rollout_env):
    with rollout_env.tracer.trajectory("t", env="e") as traj, traj.env_step() as step:
        with traj.generate():  # an LLM judge called inside env.step
            pass
        step.set_attribute("judge", True)
    (b,) = rollout_env.breakdowns
    assert b.turns == 0 and b.env_steps == 1
    assert b.nanos["llm"] == 0 and b.nanos["env"] > 0
    (root,) = rollout_env.roots()
    judge = next(s for s in rollout_env.spans("generate"))
    step_span = next(s for s in rollout_env.spans("env_step"))
    assert judge.parent.span_id == step_span.context.span_id
    assert step_span.parent.span_id == root.context.span_id


def test_exception_inside_env_step_is_recorded_and_reraised_unchanged(rollout_env):
    class EnvBroke(RuntimeError):
        pass

    err = EnvBroke("tool crashed")
    with (
        pytest.raises(EnvBroke) as info,
        rollout_env.tracer.trajectory("t") as traj,
        traj.env_step(),
    ):
        raise err
    assert info.value is err
    step = rollout_env.spans("env_step")[0]
    assert step.status.status_code.name == "ERROR"
    assert step.attributes["error.type"].endswith("EnvBroke")
    assert any(e.name == "exception" for e in step.events)
    (b,) = rollout_env.breakdowns
    assert b.status == "error" and b.env_steps == 1
    assert rollout_env.roots()[0].attributes["rollout.trajectory.status"] == "error"


def test_cancelled_trajectory_is_marked_cancelled_and_accounted(rollout_env):
    started = asyncio.Event()

    async def run():
        async with rollout_env.tracer.trajectory("c", env="e") as traj, traj.generate():
            started.set()
            await asyncio.sleep(10)

    async def main():
        task = asyncio.create_task(run())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    (b,) = rollout_env.breakdowns
    assert b.status == "cancelled" and b.turns == 1
    assert sum(b.nanos[band] for band in ALL_BANDS) == b.nanos["e2e"]
    root = rollout_env.roots()[0]
    assert root.attributes["rollout.trajectory.status"] == "cancelled"
    assert root.attributes["error.type"].endswith("CancelledError")


def test_env_queue_counts_in_the_band_of_the_env_call_it_waits_for():
    b = bd(
        [
            ("env_setup", 0, 2 * MS),  # make()
            ("env_queue", 2 * MS, 9 * MS),  # waiting for a thread to run init()
            ("env_setup", 9 * MS, 12 * MS),  # init()
            ("llm", 12 * MS, 40 * MS),
            ("env_queue", 40 * MS, 47 * MS),
            ("env", 47 * MS, 60 * MS),
            ("env_queue", 60 * MS, 61 * MS),
            ("env_teardown", 61 * MS, 65 * MS),
            ("env_queue", 70 * MS, 75 * MS),  # no env call follows: env
        ]
    )
    assert b.nanos["env_setup"] == 12 * MS
    assert b.nanos["env"] == 13 * MS + 7 * MS + 5 * MS
    assert b.nanos["env_teardown"] == 5 * MS
    assert b.nanos["env_queue"] == 20 * MS and b.env_queue_sum == pytest.approx(0.020)
    assert b.band_sum("env") == pytest.approx(0.025) and b.env_steps == 1
    assert sum(b.nanos[x] for x in ALL_BANDS) == b.nanos["e2e"] == 100 * MS


def test_env_queue_moves_with_bands_and_stays_a_sub_part():
    phases = [("env_queue", 10 * MS, 30 * MS), ("env", 30 * MS, 40 * MS)]
    moved = bd(phases, bands={"env_queue": "other"})
    assert moved.nanos["env"] == 10 * MS and moved.nanos["other"] == 90 * MS
    assert moved.nanos["env_queue"] == 20 * MS
    assert bd(phases).nanos["env"] == 30 * MS


def test_overlapping_env_queue_waits_count_their_union_in_the_sub_part():
    b = bd([("env_queue", 0, 20 * MS), ("env_queue", 10 * MS, 30 * MS), ("env", 30 * MS, 31 * MS)])
    assert b.nanos["env_queue"] == 30 * MS and b.env_queue_sum == pytest.approx(0.040)


def test_finish_session_is_outside_the_accounted_time():
    b = bd([("llm", 0, 60 * MS), ("env", 60 * MS, 80 * MS), ("finish_session", 92 * MS, 100 * MS)])
    assert b.nanos["e2e"] == 92 * MS and b.nanos["finish_session"] == 8 * MS
    assert b.nanos["other"] == 12 * MS
    assert sum(b.nanos[x] for x in ALL_BANDS) == b.nanos["e2e"]
    assert b.finish_session == pytest.approx(0.008) and b.e2e == pytest.approx(0.092)
    assert (b.start_time_ns, b.end_time_ns) == (0, 100 * MS)  # the root's own interval
    counted = bd([("finish_session", 92 * MS, 100 * MS)], bands={"finish_session": "other"})
    assert counted.nanos["e2e"] == counted.nanos["other"] == 100 * MS
    assert counted.nanos["finish_session"] == 0


def test_finish_session_overlapping_a_band_is_taken_out_of_that_band():
    b = bd([("env_teardown", 80 * MS, 95 * MS), ("finish_session", 90 * MS, 100 * MS)])
    assert b.nanos["env_teardown"] == 10 * MS and b.nanos["e2e"] == 90 * MS
    assert b.nanos["other"] == 80 * MS


def test_a_breakdown_pickles_and_the_default_bands_travel_by_name():
    import pickle

    b = bd([("env_queue", 0, 5 * MS), ("env", 5 * MS, 9 * MS)], score=0.5)
    data = pickle.dumps(b)
    back = pickle.loads(data)
    assert back == b and back.bands is b.bands and back.score == 0.5
    assert back.nanos == b.nanos and back.sum_nanos == b.sum_nanos
    assert b"Band(" not in data and data.count(b"#4C72B0") == 0  # a reference, not a copy


@pytest.mark.parametrize("seed", range(40))
def test_bands_match_a_nanosecond_by_nanosecond_count(seed):
    # Sequential phases (the common case) and overlapping ones: each nanosecond of the
    # root goes to the first band covering it, else to other; finish_session is outside.
    rng = random.Random(seed)
    kinds = ["llm", "env", "env_setup", "env_teardown", "reward", "finish_session"]
    t, phases = 0, []
    for _ in range(rng.randint(0, 12)):
        s = t + rng.randint(0, 3) if seed % 2 else rng.randint(-5, 60)
        e = s + rng.randint(0, 9)
        phases.append((rng.choice(kinds), s, e))
        t = e
    start, end = 0, max([60, *(e for _, _, e in phases)]) - rng.randint(0, 5)
    b = compute_breakdown(start, end, phases)
    expected = dict.fromkeys(["llm", "env", "env_setup", "env_teardown", "other"], 0)
    outside = 0
    for ns in range(start, end):
        covering = {p for p, s, e in phases if s <= ns < e}
        if "finish_session" in covering:
            outside += 1
            continue
        band = next((x for x in ("llm", "env", "env_setup", "env_teardown") if x in covering),
                    "other")  # fmt: skip
        expected[band] += 1
    assert {k: b.nanos[k] for k in expected} == expected
    assert b.nanos["finish_session"] == outside and b.nanos["e2e"] == end - start - outside


@given(span_trees(), st.booleans())
@settings(max_examples=200, deadline=None)
def test_plain_tuples_give_what_span_records_give(tree, open_at):
    """The report's assembler keeps spans as plain tuples of SpanRecord's fields."""
    _, end, records = tree
    clip = end if open_at else None
    tuples = [tuple(r) for r in records]
    assert outermost_phases(1, tuples, end_open_at=clip) == outermost_phases(
        1, records, end_open_at=clip
    )
    got, phases = breakdown_from_tree(tuples[0], tuples, {})
    want, want_phases = breakdown_from_tree(records[0], records, {})
    assert (got.nanos, phases) == (want.nanos, want_phases)


def test_root_attributes_in_seconds_print_as_their_nanoseconds():
    from otel_rollout.accounting import compute_breakdown

    start = 1_700_000_000_000_000_000
    b = compute_breakdown(start, start + 180_714_361, [("llm", start, start + 80_714_361)],
                          attributes={"rollout.loop.own": 0.0})  # fmt: skip
    attrs = b.as_attributes()
    assert repr(attrs["rollout.breakdown.e2e"]) == "0.180714361"  # not 0.18071436100000002
    assert repr(attrs["rollout.breakdown.llm"]) == "0.080714361"
    assert repr(b.e2e) == "0.180714361" and repr(b.band("other")) == "0.1"
