"""``otel-rollout report`` groups trajectories by batch: the same figures as online."""

from __future__ import annotations

import io
import json

from _otlp_lines import line as _line
from _otlp_lines import span as _span

from otel_rollout import attributes as A
from otel_rollout import configure
from otel_rollout.cli import main
from otel_rollout.report._batches import BatchView, batch_dict

U = 1_000_000_000
T0 = 1_700_000_000 * U


#: The closed-form batch of test_batch.py with two 1 s trajectories more (seconds after
#: T0), as trace-file spans; its batch span declares 8 slots and starts at -1 s.
KNOWN = [
    ("t0", 0, 4, [("env_setup", 0, 1), ("llm", 1, 3), ("llm", 2, 3), ("env", 3, 4)]),
    ("t1", 0, 5, [("env_setup", 0, 1), ("llm", 1, 4), ("env", 4, 5)]),
    ("t2", 0, 6, [("env_setup", 0, 1), ("llm", 1, 5), ("env", 5, 6)]),
    ("t3", 0, 8, [("env_setup", 0, 1), ("llm", 1, 6), ("env", 6, 7)]),
    ("t4", 1, 12, [("env_setup", 1, 2), ("llm", 2, 7), ("env", 6, 11), ("env_teardown", 11, 12)]),
    ("t5", 0, 1, [("env", 0, 1)]),
    ("t6", 0, 1, [("llm", 0, 1)]),
]


def _known_file(path, *, batch_span=True):
    lines = []
    for k, (tid, start, end, phases) in enumerate(KNOWN):
        trace, root = k + 1, (k + 1) * 100
        spans = [
            _span(trace, root + i + 1, root, p, T0 + s * U, T0 + e * U, **{A.PHASE: p})
            for i, (p, s, e) in enumerate(phases)
        ]
        spans.append(_span(trace, root, None, "trajectory", T0 + start * U, T0 + end * U,
                           **{A.TRAJECTORY_ID: tid, A.ENV_CLASS: "code", A.BATCH_ID: "b-3",
                              A.STEP: 3}))  # fmt: skip
        lines.append(_line(spans))
    if batch_span:  # the step started a second before its first trajectory
        lines.append(_line([_span(99, 9900, None, "batch", T0 - U, T0 + 12 * U + 5,
                                  **{A.BATCH_ID: "b-3", A.STEP: 3,
                                     A.BATCH_CONCURRENCY: 8})]))  # fmt: skip
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _json(capsys, *args):
    assert main(["report", *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_report_gives_the_closed_form_figures_of_a_batch_from_its_batch_span(tmp_path, capsys):
    out = _json(capsys, str(_known_file(tmp_path / "t.jsonl")))
    (b,) = out["batches"]
    assert b["batch_id"] == "b-3" and b["step"] == 3 and b["trajectories"] == 7
    assert b["start_time_unix_nano"] == T0 - U and b["wall_time"] == 13.0
    # 8 declared slots over 13 s; 36 s of trajectory time, t4's env under its generate
    assert b["capacity"] == 8 and b["capacity_declared"] is True
    assert b["slot_time"] == {
        "llm": 20.0, "env": 9.0, "env_setup": 5.0, "env_teardown": 1.0, "other": 1.0,
        "empty": 68.0,
    }  # fmt: skip
    # t5 and t6 end as t4, the last, starts: the drain is [1, 12] (2 s after the start)
    assert b["drain_start_time"] == 2.0 and b["drain_time"] == 11.0 and b["drain_frac"] == 11 / 13
    # durations 1, 1, 4, 5, 6, 8, 11: t4 runs over twice the median (5 s); at the median
    # it would have ended at 6, and t3 at 8: it cost 4 s
    assert [s["trajectory_id"] for s in b["stragglers"]] == ["t4"]
    (s,) = b["stragglers"]
    assert s["trace_id"] == format(5, "032x") and s["finish_time"] == 13.0
    assert s["duration"] == 11.0 and s["cost_time"] == 4.0 and s["env"] == 4.0
    assert b["median_duration"] == 5.0 and b["straggler_cost_time"] == 4.0
    assert b["llm_concurrency_max"] == 5 and b["llm_concurrency_mean"] == 20 / 13
    assert b["engine_idle_frac"] == 6 / 13  # no generate call in [-1, 0] and [7, 12]
    assert b["summary"]["generate/batch_slot_frac_empty"] == 68 / 104
    assert b["summary"]["generate/batch_capacity"] == 8.0


def test_the_report_of_a_trace_file_is_the_online_account_to_the_nanosecond(tmp_path):
    from otel_rollout import analyze_batch
    from otel_rollout.accounting import compute_breakdown
    from otel_rollout.report import read_sources
    from otel_rollout.report._aggregate import ReportData

    data = ReportData()
    result = read_sources([str(_known_file(tmp_path / "t.jsonl"))], emit=data.add)
    (view,) = data.batches.analyses(result.batches)
    online = analyze_batch(
        [compute_breakdown(T0 + a * U, T0 + b * U, [(p, T0 + s * U, T0 + e * U)
                                                    for p, s, e in phases], trajectory_id=tid)
         for tid, a, b, phases in KNOWN],
        start_ns=T0 - U, capacity=8,
    )  # fmt: skip
    got, want = view.analysis.slots, online.slots
    assert got.slot_ns == want.slot_ns and got.drain_slot_ns == want.drain_slot_ns
    assert got.timeline == want.timeline and got.drain_start_ns == want.drain_start_ns
    assert [(s.trajectory_id, s.cost_ns) for s in got.stragglers] == [("t4", 4 * U)]
    assert [(s.trajectory_id, s.cost_ns) for s in want.stragglers] == [("t4", 4 * U)]
    assert view.analysis.engine_idle_ns == online.engine_idle_ns == 6 * U


def test_without_its_batch_span_a_batch_starts_at_its_first_trajectory(tmp_path, capsys):
    out = _json(capsys, str(_known_file(tmp_path / "t.jsonl", batch_span=False)))
    (b,) = out["batches"]
    assert b["step"] is None and b["wall_time"] == 12.0
    assert b["capacity"] == 6 and b["capacity_declared"] is False  # the peak in flight


def test_trajectories_without_a_batch_give_no_batch_view(tmp_path, capsys):
    spans = [_span(1, 1, None, "trajectory", T0, T0 + U, **{A.TRAJECTORY_ID: "x"})]
    (tmp_path / "t.jsonl").write_text(_line(spans) + "\n")
    assert "batches" not in _json(capsys, str(tmp_path / "t.jsonl"))


def test_report_and_the_batch_span_agree_on_a_real_run(tmp_path, capsys):
    rollout = configure(local=True, traces_exporter="file", metrics_exporter="none",
                        output_dir=tmp_path, summary_stream=io.StringIO())  # fmt: skip
    tracer = rollout.tracer
    views = []
    for step in (1, 2):
        with tracer.batch(step=step, concurrency=7 if step == 1 else None) as batch:
            for i in range(7):
                with tracer.trajectory(f"s{step}-{i}", env="gsm8k") as traj:
                    with traj.env_setup():
                        pass
                    for _ in range(i % 3 + 1):
                        with traj.generate():
                            pass
                        with traj.env_step():
                            pass
        views.append(BatchView(batch.analysis, step))
    assert rollout.shutdown(timeout_s=10)
    out = _json(capsys, str(rollout.trace_file))
    assert out["batches"] == [json.loads(json.dumps(batch_dict(v))) for v in views]


def test_batch_tables_fit_an_80_column_terminal(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    path = _known_file(tmp_path / "t.jsonl")
    assert main(["report", str(path)]) == 0
    brief = capsys.readouterr().out
    assert (
        "batch 3: slots 19% generating, 9% in env, 65% empty (drain 11.0 s, 1 straggler)\n" in brief
    )
    assert main(["report", str(path), "--verbose"]) == 0  # the per-batch tables
    text = capsys.readouterr().out
    assert "b-3 (step 3)" in text
    assert "8 slots (declared): 19% generating, 9% in env, 5% in setup, 65% empty\n" in text
    assert "drain 11.00 s (85% of wall): 22% generating, 9% in env, 66% empty\n" in text
    # 58 of the drain's 88 slot-seconds are empty
    assert "5.3 of 8 slots empty on average in the drain\n" in text
    assert format(5, "032x") in text  # the straggler's trace id, unbroken
    assert max(len(line) for line in text.splitlines()) <= 80


def test_batch_timelines_link_trace_ids_to_jaeger(tmp_path, capsys, monkeypatch):
    path = _known_file(tmp_path / "t.jsonl")
    out = tmp_path / "pics"
    assert main(["report", str(path), "--output-dir", str(out)]) == 0
    page = (out / "batches.html").read_text()
    assert (out / "batch-0.png").stat().st_size > 0
    assert f'href="http://localhost:16686/trace/{format(5, "032x")}"' in page
    assert "<title>t4 (code): finish 13.000 s, e2e 11.000 s; llm 5.000" in page  # hover
    monkeypatch.setenv("OTEL_ROLLOUT_JAEGER_URL", "http://jaeger.example:16686/")
    assert main(["report", str(path), "--output-dir", str(out)]) == 0
    assert "http://jaeger.example:16686/trace/" in (out / "batches.html").read_text()
    assert main(["report", str(path), "--output-dir", str(out), "--jaeger-url", "http://j"]) == 0
    assert 'href="http://j/trace/' in (out / "batches.html").read_text()
