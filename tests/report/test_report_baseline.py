"""``otel-rollout report RUN --baseline OTHER``: differences of means with a bootstrap interval."""

from __future__ import annotations

import json

import numpy as np

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
