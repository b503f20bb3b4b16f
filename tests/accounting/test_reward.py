"""Reward against latency: mean reward by e2e decile and by turn count, per env class, in
the summary, the report's JSON and tables, and its picture."""

from __future__ import annotations

import io

import pytest

from otel_rollout import attributes as A
from otel_rollout import summarize
from otel_rollout._accounting.reward import reward_vs_latency
from otel_rollout.accounting import compute_breakdown
from otel_rollout.report._aggregate import ReportData
from otel_rollout.report._json import report_dict
from otel_rollout.report._model import ReadResult

S = 1_000_000_000


def fake(i: int, env: str, reward: float | None, turns: int):
    phases = [(A.PHASE_LLM, 0, 1) for _ in range(turns)]
    return compute_breakdown(
        0, (i + 1) * S, phases, trajectory_id=f"{env}-{i}", env_class=env, score=reward
    )


def batch():
    # gsm8k: the 10 fastest succeed, the 10 slowest fail; 1-3 turns
    out = [fake(i, "gsm8k", 1.0 if i < 10 else 0.0, 1 + i % 3) for i in range(20)]
    out += [fake(i, "sql", 0.5, 2) for i in range(5)]  # fewer than ten: five deciles
    out.append(fake(99, "sql", None, 2))  # no reward: not counted
    return out


def test_mean_reward_by_e2e_decile_and_turns_per_env_class():
    gsm, sql = reward_vs_latency(batch())
    assert (gsm.env_class, gsm.n, sql.env_class, sql.n) == ("gsm8k", 20, "sql", 5)
    assert [b.n for b in gsm.by_e2e_decile] == [2] * 10
    assert [b.mean_reward for b in gsm.by_e2e_decile] == [1.0] * 5 + [0.0] * 5
    assert (gsm.by_e2e_decile[0].e2e_min, gsm.by_e2e_decile[-1].e2e_max) == (1.0, 20.0)
    turns = {b.label: (b.n, b.mean_reward) for b in gsm.by_turns}
    # turns 1: i = 0,3,...,18 (7; 4 succeed); 2: i = 1,4,...,19 (7; 3); 3: i = 2,...,17 (6; 3)
    assert turns == {1: (7, 4 / 7), 2: (7, 3 / 7), 3: (6, 0.5)}
    assert [b.label for b in sql.by_e2e_decile] == [1, 2, 3, 4, 5]


def test_summary_carries_the_per_class_reward_keys_on_request_and_merges_by_recomputing():
    items = batch()
    out = summarize(items, per_class=True)
    assert out["generate/reward_by_e2e_decile/gsm8k/1"] == 1.0
    assert out["generate/reward_by_e2e_decile/gsm8k/10"] == 0.0
    assert out["generate/reward_by_turns/gsm8k/3"] == 0.5
    assert out["generate/reward_mean/gsm8k"] == 0.5
    assert out["generate/reward_mean/sql"] == 0.5
    # two halves summarised together are the summary of the union, not a merge
    assert summarize(items[:13] + items[13:], per_class=True) == out


def test_the_default_keys_do_not_grow_with_the_env_classes():
    items = batch()
    out = summarize(items)
    assert not [k for k in out if k.startswith(("generate/reward_by_", "generate/reward_mean/"))]
    rewarded = [b.score for b in items if b.score is not None]
    assert out["generate/reward_mean"] == sum(rewarded) / len(rewarded)
    many = [fake(i, f"env{i % 20}", 1.0, 1) for i in range(60)]  # twenty env classes
    assert summarize(many).keys() == summarize(many[:3]).keys()
    assert len(summarize(many, per_class=True)) > len(summarize(many)) + 20


def test_no_rewards_no_reward_keys():
    out = summarize([fake(i, "gsm8k", None, 1) for i in range(3)])
    assert not [k for k in out if "reward" in k]


def test_processor_puts_the_reward_on_the_breakdown(rollout_env):
    with rollout_env.tracer.trajectory(env="gsm8k") as t:
        t.set_reward("1.0 (correct)")
    with rollout_env.tracer.trajectory(env="gsm8k") as u:
        pass
    assert (t.breakdown.score, u.breakdown.score) == (1.0, None)
    assert summarize(rollout_env.breakdowns, per_class=True)["generate/reward_mean/gsm8k"] == 1.0
    assert summarize(rollout_env.breakdowns)["generate/reward_mean"] == 1.0


def test_report_json_table_and_picture(tmp_path):
    data = ReportData.of(batch())
    out = report_dict(data, ReadResult())
    assert out["generate/reward_by_e2e_decile/gsm8k/10"] == 0.0
    (gsm, _) = out["reward_vs_latency"]
    assert gsm["env_class"] == "gsm8k" and len(gsm["by_e2e_decile"]) == 10
    rich = pytest.importorskip("rich.console")
    from otel_rollout.report._tables import print_rewards

    buf = io.StringIO()
    print_rewards(rich.Console(file=buf, width=200), data)
    assert "e2e decile" in buf.getvalue() and "1:1.00" in buf.getvalue()
    pytest.importorskip("matplotlib")
    from otel_rollout.report._pictures import draw

    png, page = draw(data, tmp_path)
    assert png.stat().st_size > 0 and page.exists()


def test_shutdown_summary_prints_reward_against_latency(tmp_path):
    import otel_rollout

    out = io.StringIO()
    rollout = otel_rollout.configure(
        local=True, output_dir=tmp_path, metrics_exporter="none", summary_stream=out
    )
    for i in range(20):
        with rollout.tracer.trajectory(env="gsm8k") as t:
            with t.generate():
                pass
            t.set_reward(1.0 if i % 2 else 0.0)
    summary = rollout._summary
    (a,) = summary.reward_analyses()
    assert (a.env_class, a.n, len(a.by_e2e_decile)) == ("gsm8k", 20, 10)
    rollout.shutdown(timeout_s=2)
    text = out.getvalue()
    assert "reward gsm8k: by e2e decile (fastest first)" in text and "by turns 1:0.50" in text


def test_shutdown_summary_reward_reservoir_is_bounded():
    from otel_rollout._setup.rollout import RunningSummary

    summary = RunningSummary(reservoir=50)
    for i in range(300):
        summary(fake(i, "gsm8k", float(i % 2), 1))
    assert summary.rewarded == 300 and len(summary._rewards) == 50
    (a,) = summary.reward_analyses()
    assert a.n == 50
