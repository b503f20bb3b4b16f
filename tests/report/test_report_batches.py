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


#: The closed-form batch of test_batch.py (seconds after T0), as trace-file spans.
KNOWN = [
    ("t0", 0, 4, [("env_setup", 0, 1), ("llm", 1, 3), ("llm", 2, 3), ("env", 3, 4)]),
    ("t1", 0, 5, [("env_setup", 0, 1), ("llm", 1, 4), ("env", 4, 5)]),
    ("t2", 0, 6, [("env_setup", 0, 1), ("llm", 1, 5), ("env", 5, 6)]),
    ("t3", 0, 8, [("env_setup", 0, 1), ("llm", 1, 6), ("env", 6, 7)]),
    ("t4", 1, 12, [("env_setup", 1, 2), ("llm", 2, 7), ("env", 6, 11), ("env_teardown", 11, 12)]),
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
                                  **{A.BATCH_ID: "b-3", A.STEP: 3})]))  # fmt: skip
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _json(capsys, *args):
    assert main(["report", *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_report_gives_the_closed_form_figures_of_a_batch_from_its_batch_span(tmp_path, capsys):
    out = _json(capsys, str(_known_file(tmp_path / "t.jsonl")))
    (b,) = out["batches"]
    assert b["batch_id"] == "b-3" and b["step"] == 3 and b["trajectories"] == 5
    assert b["start_time_unix_nano"] == T0 - U
    assert b["wall_time"] == 13.0 and b["median_finish_time"] == 7.0
    assert b["tail_time"] == 6.0 and b["tail_frac"] == 6 / 13
    assert b["tail_band_frac"] == {
        "llm": 0.125, "env": 0.625, "env_setup": 0.0, "env_teardown": 0.125, "other": 0.125,
    }  # fmt: skip
    assert b["dominant_tail_band"] == "env"
    assert [s["trajectory_id"] for s in b["stragglers"]] == ["t4"]
    assert b["stragglers"][0]["trace_id"] == format(5, "032x")
    assert b["stragglers"][0]["finish_time"] == 13.0 and b["stragglers"][0]["env"] == 4.0
    assert b["llm_concurrency_max"] == 5 and b["llm_concurrency_mean"] == 19 / 13
    assert b["low_llm_demand_frac"] == 8 / 13
    assert b["summary"]["generate/batch_tail_time"] == 6.0


def test_without_its_batch_span_a_batch_starts_at_its_first_trajectory(tmp_path, capsys):
    out = _json(capsys, str(_known_file(tmp_path / "t.jsonl", batch_span=False)))
    (b,) = out["batches"]
    assert b["step"] is None and b["wall_time"] == 12.0 and b["tail_frac"] == 0.5


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
        with tracer.batch(step=step) as batch:
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
    assert "batch step 3: tail 6.00 s of 13.00 s wall (46%), on env 62%, llm 12%" in brief
    assert main(["report", str(path), "--verbose"]) == 0  # the per-batch tables
    text = capsys.readouterr().out
    assert "b-3 (step 3)" in text and "tail spent on: env 62%, llm 12%" in text
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
