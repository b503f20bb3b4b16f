"""``otel-rollout report RUN --baseline OTHER``: differences of means with a bootstrap interval."""

from __future__ import annotations

import json

import numpy as np
import pytest

from otel_rollout import attributes as A
from otel_rollout.cli import main
from otel_rollout.report._compare import bootstrap_diff

U = 1_000_000_000
T0 = 1_700_000_000 * U


def _kv(key, value):
    return {"key": key, "value": {"stringValue": str(value)}}


def _run_file(path, env_s, llm_s):
    """A trajectory per pair: llm then env, in whole seconds (env class ``code``)."""
    spans = []
    for k, (env, llm) in enumerate(zip(env_s, llm_s, strict=True)):
        tid, root, t = format(k + 1, "032x"), format((k + 1) * 10, "016x"), T0 + k * 100 * U
        for i, (p, s, e) in enumerate((("llm", 0, llm), ("env", llm, llm + env))):
            spans.append({"traceId": tid, "spanId": format((k + 1) * 10 + i + 1, "016x"),
                          "parentSpanId": root, "name": p, "startTimeUnixNano": str(t + s * U),
                          "endTimeUnixNano": str(t + e * U),
                          "attributes": [_kv(A.PHASE, p)]})  # fmt: skip
        spans.append({"traceId": tid, "spanId": root, "name": "trajectory",
                      "startTimeUnixNano": str(t), "endTimeUnixNano": str(t + (llm + env) * U),
                      "attributes": [_kv(A.TRAJECTORY_ID, f"t{k}"),
                                     _kv(A.ENV_CLASS, "code")]})  # fmt: skip
    doc = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": spans}]}]}
    path.write_text(json.dumps(doc) + "\n")
    return str(path)


def _compare(capsys, tmp_path):
    llm = list(range(1, 11))
    base = _run_file(tmp_path / "base.jsonl", [1] * 10, llm)
    run = _run_file(tmp_path / "run.jsonl", [2] * 10, llm)
    assert main(["report", run, "--baseline", base, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    return {c["band"]: c for c in out["baseline"]}


def test_a_shift_in_one_band_is_beyond_noise_and_an_unchanged_band_is_not(capsys, tmp_path):
    by_band = _compare(capsys, tmp_path)
    env = by_band["env"]
    assert (env["mean_baseline"], env["mean_run"], env["diff"]) == (1.0, 2.0, 1.0)
    assert (env["ci_low"], env["ci_high"]) == (1.0, 1.0) and env["beyond_noise"]
    assert (env["p90_baseline"], env["p90_run"]) == (1.0, 2.0)
    llm = by_band["llm"]
    assert llm["diff"] == 0.0 and llm["ci_low"] < 0 < llm["ci_high"]
    assert not llm["beyond_noise"]
    assert llm["p90_baseline"] == llm["p90_run"] == float(np.percentile(range(1, 11), 90))
    e2e = by_band["e2e"]
    # e2e moved by the same second, but within the llm band's spread: not beyond noise
    assert e2e["diff"] == 1.0 and e2e["ci_low"] < 0 < e2e["ci_high"] and not e2e["beyond_noise"]
    assert e2e["n_run"] == e2e["n_baseline"] == 10


def test_the_interval_is_seeded_and_the_same_every_time(capsys, tmp_path):
    assert _compare(capsys, tmp_path) == _compare(capsys, tmp_path)
    x, y = np.arange(50.0), np.arange(50.0) + 3
    assert bootstrap_diff(x, y) == bootstrap_diff(x, y)
    low, high = bootstrap_diff(x, y)
    assert low < 3 < high


def test_the_comparison_table_fits_80_columns(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    llm = list(range(1, 11))
    base = _run_file(tmp_path / "base.jsonl", [1] * 10, llm)
    run = _run_file(tmp_path / "run.jsonl", [2] * 10, llm)
    assert main(["report", run, "--baseline", base]) == 0
    text = capsys.readouterr().out
    assert "code: run (n=10) against baseline (n=10)" in text
    env_row = next(ln for ln in text.splitlines() if ln.strip().startswith("env ") and "[" in ln)
    assert "+1.000" in env_row and env_row.rstrip().endswith("*")
    assert max(len(line) for line in text.splitlines()) <= 80


# --- a comparison that does not cry wolf -------------------------------------------------------

ENVS = ("gsm8k_multi_turn", "text2sql", "lcb")


def _draw(rng, n, shift=None):
    """Per env class, columns of seconds shaped like the demo's: lognormal llm and env,
    small setup/teardown/other, e2e their sum; ``shift=(env, band, factor)`` scales one."""
    out = {}
    for k, env in enumerate(ENVS):
        cols = {
            "llm": rng.lognormal(np.log(0.4 + 0.1 * k), 0.3, n),
            "env": rng.lognormal(np.log(0.2 + 0.1 * k), 0.6, n),
            "env_setup": rng.lognormal(np.log(0.02), 0.8, n),
            "env_teardown": rng.lognormal(np.log(0.002), 0.8, n),
            "other": rng.lognormal(np.log(0.001), 0.5, n),
            "env_queue": rng.lognormal(np.log(0.05), 1.0, n) * (k > 0),
            "finish_session": np.zeros(n),
        }
        if shift is not None and shift[0] == env:
            cols[shift[1]] = cols[shift[1]] * shift[2]
        cols["e2e"] = sum(cols[b] for b in ("llm", "env", "env_setup", "env_teardown", "other"))
        out[env] = cols
    return out


def test_two_runs_from_one_distribution_are_marked_in_at_most_5_percent_of_seeds():
    from otel_rollout.report._compare import compare_columns

    marked_runs = 0
    comparisons = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        changes = compare_columns(_draw(rng, 40), _draw(rng, 40), resamples=0)
        comparisons = len(changes)
        marked_runs += any(c.marked for c in changes)
    assert comparisons == 3 * 7 - 1  # every band used, gsm8k has no env_queue
    assert marked_runs <= 10  # at least 95% of the seeds: no mark at all


def test_a_ten_percent_shift_of_one_band_is_marked_in_most_seeds():
    from otel_rollout.report._compare import compare_columns

    hits = others = 0
    for seed in range(50):
        rng = np.random.default_rng(1000 + seed)
        base = _draw(rng, 400)
        run = _draw(rng, 400, shift=("text2sql", "llm", 1.10))
        changes = {(c.env_class, c.band): c for c in compare_columns(base, run, resamples=0)}
        hits += changes[("text2sql", "llm")].marked
        others += sum(c.marked for key, c in changes.items() if key[0] != "text2sql")
    assert hits >= 40  # most of them
    assert others <= 3  # the env classes left alone stay quiet


def test_a_tiny_difference_is_never_marked_however_sure():
    from otel_rollout.report._compare import compare_columns, practically_large

    base = {"e": {b: np.full(100, 1.0) for b in ("e2e", "llm", "env", "env_setup",
                                                  "env_teardown", "other", "env_queue",
                                                  "finish_session")}}  # fmt: skip
    run = {"e": {b: c + (0.01 if b == "llm" else 0.0) for b, c in base["e"].items()}}
    (llm,) = [c for c in compare_columns(base, run, resamples=0) if c.band == "llm"]
    assert llm.p_adjusted == 0.0 and not llm.marked  # certain, but 1% of the mean
    assert not practically_large(0.0009, 0.001) and practically_large(0.05, 1.0)
    assert not practically_large(0.049, 1.0)


def test_holm_and_the_t_test_against_known_values():
    from otel_rollout.report._compare import betainc, holm, welch_p

    assert holm([0.01, 0.04, 0.03, float("nan")])[:3] == pytest.approx([0.03, 0.06, 0.06])
    assert abs(betainc(5.0, 0.5, 10 / 14) - 0.07339) < 1e-4  # t = 2, 10 degrees of freedom
    x = np.array([1.0, 2.0, 3.0, 4.0])
    assert welch_p(x, x) == pytest.approx(1.0) and np.isnan(welch_p(x[:1], x))
    assert welch_p(np.ones(3), np.ones(3) * 2) == 0.0


# --- the answer first --------------------------------------------------------------------------
def test_the_answer_leads_in_one_line_then_the_bands(capsys, tmp_path, monkeypatch):
    pytest.importorskip("skyrl_gym")
    from otel_rollout.demo._run import run_demo

    base = run_demo(n=8, concurrency=4, seed=0, output_dir=tmp_path / "base").trace_file
    run = run_demo(n=8, concurrency=4, seed=1, output_dir=tmp_path / "run").trace_file
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["report", str(run), "--baseline", str(base)]) == 0
    lines = capsys.readouterr().out.splitlines()
    first = lines[0]
    assert first.startswith("vs baseline: ") and len(first) <= 80
    assert " traj/s (" in first and ", batch wall " in first and ", drain " in first
    assert "against baseline" in lines[2]  # the per-band tables come next
    assert [line for line in lines if len(line) > 80] == []


def test_without_batch_spans_the_first_line_says_so(capsys, tmp_path):
    llm = list(range(1, 11))
    base = _run_file(tmp_path / "base.jsonl", [1] * 10, llm)
    run = _run_file(tmp_path / "run.jsonl", [2] * 10, llm)
    assert main(["report", run, "--baseline", base]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == "vs baseline: no batch spans in either run; the bands per env class below"


def test_the_headline_drops_the_figures_before_it_passes_80_columns():
    from types import SimpleNamespace

    from otel_rollout.report._compare import headline

    def view(n, wall_s, drain_s):
        a = SimpleNamespace(trajectories=n, wall_ns=int(wall_s * 1e9), drain_ns=int(drain_s * 1e9))
        return SimpleNamespace(analysis=a)

    short = headline([view(64, 4.0, 1.0)], [view(64, 2.0, 1.5)])
    assert short == (
        "vs baseline: 32.0 traj/s (+100%), batch wall 2.00 s (-50%), drain 1.50 s (+50%)"
    )
    huge = headline([view(10**9, 4000.0, 1000.0)], [view(10**9, 2000.0, 1500.0)])
    assert huge == "vs baseline: throughput +100%, batch wall -50%, drain +50%"
