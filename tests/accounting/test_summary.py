"""summarize(): SkyRL's keys, numpy-exact statistics, merge by concatenation."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from otel_rollout import BreakdownCollector, summarize
from otel_rollout.accounting import compute_breakdown, group_by

MS = 1_000_000
BANDS = {"completion": "e2e", "llm": "llm", "env": "env", "env_setup": "env_setup",
         "env_teardown": "env_teardown", "other": "other", "env_queue": "env_queue",
         "finish_session": "finish_session"}  # fmt: skip


def random_breakdowns(n, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t, phases = 0, [("env_setup", 0, rng.randint(1, 9) * MS)]
        t = phases[0][2]
        for _ in range(rng.randint(1, 4)):
            d = rng.randint(1, 50) * MS
            phases.append(("llm", t, t + d))
            t += d
            d = rng.randint(1, 30) * MS
            phases.append(("env", t, t + d))
            t += d
        phases.append(("env_teardown", t, t + MS))
        end = t + MS + rng.randint(0, 5) * MS
        out.append(compute_breakdown(0, end, phases, trajectory_id=str(i), env_class="e"))
    return out


def test_summary_equals_a_numpy_reference():
    bds = random_breakdowns(37, 1)
    got = summarize(bds)
    for key, attr in BANDS.items():
        x = np.array([b.band(attr) if attr in b.bands else getattr(b, attr) for b in bds])
        assert got[f"generate/trajectory_time_{key}_mean"] == np.mean(x)
        assert got[f"generate/trajectory_time_{key}_p90"] == np.percentile(x, 90)
        assert got[f"generate/trajectory_time_{key}_max"] == np.max(x)
    env = np.sum([b.band("env") for b in bds])
    llm = np.sum([b.band("llm") for b in bds])
    assert got["generate/frac_time_in_env"] == pytest.approx(env / (llm + env), rel=1e-12)
    assert len(got) == 8 * 3 + 1


def test_summary_of_merged_batches_is_the_summary_of_their_union():
    a, b = random_breakdowns(20, 2), random_breakdowns(13, 3)
    sink = BreakdownCollector()
    sink.extend(a)
    first = sink.drain()
    sink.extend(b)
    merged = summarize(first + sink.drain())
    assert merged == summarize(a + b)
    p90_a = summarize(a)["generate/trajectory_time_llm_p90"]
    p90_b = summarize(b)["generate/trajectory_time_llm_p90"]
    assert merged["generate/trajectory_time_llm_p90"] != p90_a + p90_b


def test_empty_input_gives_the_same_keys_each_saying_no_data():
    one = summarize([compute_breakdown(0, 10, [], trajectory_id="t")])
    empty = summarize(BreakdownCollector().drain())
    assert set(empty) == set(one) and all(math.isnan(v) for v in empty.values())


def test_frac_time_in_env_is_zero_without_llm_or_env_time():
    assert summarize([compute_breakdown(0, MS, [])])["generate/frac_time_in_env"] == 0.0


def test_collector_is_bounded_and_counts_what_it_dropped():
    sink = BreakdownCollector(maxlen=5)
    sink.extend(random_breakdowns(8, 4))
    assert len(sink) == 5 and sink.dropped == 3
    assert [b.trajectory_id for b in sink.drain()] == ["3", "4", "5", "6", "7"]
    assert len(sink) == 0
    with pytest.raises(ValueError, match="maxlen"):
        BreakdownCollector(maxlen=0)


def test_a_full_collector_warns_once_and_its_default_cap_is_bounded(caplog):
    from otel_rollout._accounting.summary import DEFAULT_MAXLEN

    assert BreakdownCollector()._maxlen == DEFAULT_MAXLEN <= 100_000
    sink = BreakdownCollector(maxlen=2)
    with caplog.at_level("WARNING", logger="otel_rollout"):
        sink.extend(random_breakdowns(6, 5))
    warned = [r for r in caplog.records if "holds its maximum of 2" in r.getMessage()]
    assert len(warned) == 1 and sink.dropped == 4


def test_running_summary_is_exact_within_its_reservoir_and_bounded_beyond():
    from otel_rollout._setup.rollout import RunningSummary

    items = random_breakdowns(300, 6)
    small = RunningSummary(reservoir=1000)
    for b in items:
        small(b)
    ref = summarize(items)
    figures = small.figures()
    for key in BANDS:
        for stat in ("mean", "p90", "max"):
            want = ref[f"generate/trajectory_time_{key}_{stat}"]
            assert figures[key][stat] == pytest.approx(want, rel=1e-12), (key, stat)
    assert figures["frac_time_in_env"]["value"] == pytest.approx(ref["generate/frac_time_in_env"])

    bounded = RunningSummary(reservoir=50)
    for b in items:
        bounded(b)
    assert bounded.count == 300 and not bounded.exact and len(bounded._sample) == 50
    figures = bounded.figures()  # means and maxima stay exact past the reservoir
    assert figures["llm"]["mean"] == pytest.approx(ref["generate/trajectory_time_llm_mean"])
    assert figures["completion"]["max"] == ref["generate/trajectory_time_completion_max"]


def test_group_by_env_class_and_prefix():
    bds = random_breakdowns(3, 5)
    assert list(group_by(bds)) == ["e"]
    assert "skyrl/frac_time_in_env" in summarize(bds, prefix="skyrl/")
