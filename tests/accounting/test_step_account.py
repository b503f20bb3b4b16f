"""The step account in closed form: exact integer nanoseconds, summing to the wall."""

from __future__ import annotations

import random

import pytest

from otel_rollout.accounting import step_account

S = 1_000_000_000_000  # a step's start (ns); offsets below are ns after it
MS = 1_000_000


def _at(*offsets_ms: float) -> list[int]:
    return [S + int(o * MS) for o in offsets_ms]


def test_a_sync_step_splits_into_generation_its_phases_and_the_rest():
    # generation 0-60, run_training 62-92, sync_weights 93-99, wall 100 ms
    gen = [tuple(_at(0, 60))]
    phases = [("run_training", *_at(62, 92)), ("sync_weights", *_at(93, 99))]
    acc = step_account(S, S + 100 * MS, phases, gen, step=12)
    assert dict(acc.parts_ns) == {
        "run_training": 30 * MS,
        "sync_weights": 6 * MS,
        "generation": 60 * MS,
        "other": 4 * MS,
    }
    assert sum(acc.parts_ns.values()) == acc.wall_ns == 100 * MS
    assert acc.step == 12 and acc.frac("generation") == 0.6
    assert acc.phases == ("run_training", "sync_weights")


def test_a_phase_nested_in_another_counts_in_the_outer_one():
    phases = [("update_actor", *_at(10, 50)), ("old_log_prob", *_at(20, 30))]
    acc = step_account(S, S + 60 * MS, phases)
    assert acc.parts_ns["update_actor"] == 40 * MS
    assert acc.parts_ns["old_log_prob"] == 0
    assert acc.phase_sum_ns == {"update_actor": 40 * MS, "old_log_prob": 10 * MS}
    assert acc.parts_ns["other"] == 20 * MS


def test_overlapping_phases_go_to_the_one_that_started_first():
    # a 0-30, b 20-50: b owns only 30-50; same start: the longer one owns the overlap
    acc = step_account(S, S + 50 * MS, [("b", *_at(20, 50)), ("a", *_at(0, 30))])
    assert (acc.parts_ns["a"], acc.parts_ns["b"]) == (30 * MS, 20 * MS)
    acc = step_account(S, S + 50 * MS, [("short", *_at(0, 10)), ("long", *_at(0, 40))])
    assert (acc.parts_ns["long"], acc.parts_ns["short"]) == (40 * MS, 0)


def test_generation_behind_a_phase_is_the_phase_s_exposed_generation_is_the_rest():
    # async: generation runs 0-100 behind wait (0-20) and training (20-70)
    gen = [tuple(_at(0, 100))]
    phases = [("wait_for_generation_buffer", *_at(0, 20)), ("run_training", *_at(20, 70))]
    acc = step_account(S, S + 100 * MS, phases, gen)
    assert acc.parts_ns["generation"] == 30 * MS  # 70-100: nothing else ran
    assert acc.generation_wall_ns == 100 * MS
    assert acc.parts_ns["other"] == 0


def test_overlapping_batches_count_once_and_everything_is_clipped_to_the_step():
    gen = [tuple(_at(-10, 30)), tuple(_at(20, 40)), tuple(_at(90, 120))]
    phases = [("eval", *_at(-5, 5)), ("save_checkpoints", *_at(95, 130))]
    acc = step_account(S, S + 100 * MS, phases, gen)
    assert dict(acc.parts_ns) == {
        "eval": 5 * MS,
        "save_checkpoints": 5 * MS,
        "generation": 35 * MS + 5 * MS,  # 5-40 and 90-95
        "other": 50 * MS,
    }
    assert acc.phase_sum_ns == {"eval": 10 * MS, "save_checkpoints": 35 * MS}  # unclipped


def test_the_timeline_says_who_owned_each_stretch_and_averages_samples_by_part():
    gen = [tuple(_at(0, 50))]
    acc = step_account(S, S + 80 * MS, [("train", *_at(40, 70))], gen)
    assert [(seg.part, seg.start_ns - S, seg.end_ns - S) for seg in acc.timeline] == [
        ("generation", 0, 40 * MS),
        ("train", 40 * MS, 70 * MS),
        ("other", 70 * MS, 80 * MS),
    ]
    assert acc.part_at(S + 45 * MS) == "train" and acc.part_at(S + 80 * MS) is None
    samples = [(S + 10 * MS, 20.0), (S + 30 * MS, 40.0), (S + 50 * MS, 90.0)]
    assert acc.mean_by_part(samples) == {"generation": 30.0, "train": 90.0}


def test_parts_sum_to_the_wall_for_any_intervals():
    rng = random.Random(7)
    for _ in range(300):
        wall = rng.randrange(1, 10_000)
        phases = []
        for _ in range(rng.randrange(0, 8)):
            a = rng.randrange(-500, wall + 500)
            phases.append((rng.choice("abcd"), a, a + rng.randrange(0, 3000)))
        gen = []
        for _ in range(rng.randrange(0, 4)):
            a = rng.randrange(-500, wall + 500)
            gen.append((a, a + rng.randrange(0, 3000)))
        acc = step_account(0, wall, phases, gen)
        assert sum(acc.parts_ns.values()) == wall
        assert all(v >= 0 for v in acc.parts_ns.values())
        assert sum(s.end_ns - s.start_ns for s in acc.timeline) == wall


def test_an_empty_step_is_all_other_and_reversed_intervals_are_refused():
    acc = step_account(S, S + 7)
    assert dict(acc.parts_ns) == {"generation": 0, "other": 7}
    assert step_account(S, S).frac("other") == 0.0
    with pytest.raises(ValueError, match="step ends before it starts"):
        step_account(S, S - 1)
    with pytest.raises(ValueError, match="phase 'x' ends before it starts"):
        step_account(S, S + 10, [("x", S + 5, S + 4)])


def test_the_account_as_tracker_keys_and_span_attributes():
    acc = step_account(S, S + 4 * MS, [("run_training", *_at(1, 4))])
    assert acc.summary() == {
        "step/wall_time": 0.004,
        "step/time/run_training": 0.003,
        "step/frac/run_training": 0.75,
        "step/time/generation": 0.0,
        "step/frac/generation": 0.0,
        "step/time/other": 0.001,
        "step/frac/other": 0.25,
    }
    attrs = acc.as_attributes()
    assert attrs["rollout.step.wall"] == 0.004
    assert attrs["rollout.step.time.run_training"] == 0.003
