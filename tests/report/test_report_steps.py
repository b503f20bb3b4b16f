"""``otel-rollout report`` reads steps back: the step account recomputed from the step
span, its phase spans and the batch spans equals the online one, also read in parallel;
the verdict's step line fits 80 columns."""

from __future__ import annotations

import json

from _otlp_lines import line as _line
from _otlp_lines import span as _span

import otel_rollout
from otel_rollout import attributes as A
from otel_rollout.cli import main
from otel_rollout.report import read_trace_file
from otel_rollout.report._sources import read_sources
from otel_rollout.report._steps import step_line, step_views

U = 1_000_000_000
T0 = 1_700_000_000 * U


def _step_lines(step, trace, t0):
    """A step [t0, t0 + 10 s]: a batch 0-6 s with one trajectory, run_training 6-9 s,
    sync_weights 8.5-9.5 s (overlapping: 0.5 s of it is run_training's)."""
    sid = trace * 1000
    root = _span(trace, sid, None, "step", t0, t0 + 10 * U,
                 **{A.STEP: step, A.STEP_TRAINER: "ppo", A.STEP_WALL: 10.0})  # fmt: skip
    phases = [
        _span(trace, sid + 1, sid, "run_training", t0 + 6 * U, t0 + 9 * U,
              **{A.STEP_PHASE: "run_training"}),
        _span(trace, sid + 2, sid, "sync_weights", t0 + 17 * U // 2, t0 + 19 * U // 2,
              **{A.STEP_PHASE: "sync_weights"}),
    ]  # fmt: skip
    batch = _span(trace + 1, sid + 3, None, "batch", t0, t0 + 6 * U,
                  **{A.BATCH_ID: f"b{step}", A.STEP: step})  # fmt: skip
    traj = _span(trace + 2, sid + 4, None, "trajectory", t0 + U, t0 + 5 * U,
                 **{A.TRAJECTORY_ID: f"t{step}", A.BATCH_ID: f"b{step}"})  # fmt: skip
    llm = _span(trace + 2, sid + 5, sid + 4, "generate", t0 + U, t0 + 5 * U, **{A.PHASE: "llm"})
    # phases are written before their step ends, the step span last
    return [_line([llm, traj]), _line(phases), _line([batch]), _line([root])]


def _file(path, steps=3):
    lines = []
    for k in range(steps):
        lines += _step_lines(k, 10 * (k + 1), T0 + k * 20 * U)
    path.write_text("".join(x + "\n" for x in lines))
    return path


def test_the_report_gives_each_step_s_account_in_closed_form(tmp_path, capsys):
    assert main(["report", str(_file(tmp_path / "t.jsonl")), "--format", "json"]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    assert [s["step"] for s in steps] == [0, 1, 2]
    for s in steps:
        assert s["wall_ns"] == 10 * U and s["trainer"] == "ppo"
        assert s["parts_ns"] == {
            "generation": 6 * U,
            "run_training": 3 * U,
            "sync_weights": U // 2,
            "other": U // 2,
        }
        assert s["phase_sum_ns"] == {"run_training": 3 * U, "sync_weights": U}
        # the batch's one trajectory held its one slot 1-5 s of the wall: the batch
        # start to its last finish (the slot account's)
        assert s["slots_empty_frac"] == 1 / 5


def test_the_verdict_has_a_step_line(tmp_path, capsys):
    assert main(["report", str(_file(tmp_path / "t.jsonl", steps=1))]) == 0
    out = capsys.readouterr().out.splitlines()
    # the parts by share, as many as fit 80 columns whole, and how many more
    line = "step 0: 10.0 s; generation 60% (slots 20% empty), run_training 30%, +2 more"
    assert line in out


def test_several_steps_name_the_slowest_and_list_the_slowest_five(tmp_path, capsys):
    assert main(["report", str(_file(tmp_path / "t.jsonl", steps=7))]) == 0
    out = capsys.readouterr().out
    assert "slowest step 0 (of 7): 10.0 s; generation 60% (slots 20% empty), +3 more" in out
    assert "steps: 7 (the 5 slowest)" in out
    assert all(len(x) <= 80 for x in out.splitlines())


def test_rotated_files_give_the_steps_of_the_whole_file(tmp_path):
    whole = _file(tmp_path / "all.jsonl", steps=4)
    lines = whole.read_text().splitlines()
    files = []
    for k, (a, b) in enumerate([(0, 5), (5, 11), (11, len(lines))]):  # steps straddle files
        f = tmp_path / f"traces-x_{k:04d}.jsonl"
        f.write_text("".join(x + "\n" for x in lines[a:b]))
        files.append(str(f))
    one = read_sources([str(whole)], warn=lambda m: None)
    rotated = read_sources(files, warn=lambda m: None)
    a = [v.account for v in step_views(one.steps, one.batches)]
    b = [v.account for v in step_views(rotated.steps, rotated.batches)]
    assert len(a) == 4 and a == b


def test_the_offline_account_equals_the_online_one(tmp_path):
    rollout = otel_rollout.configure(local=True, output_dir=tmp_path, summary_stream=None,
                                     traces_exporter="file")  # fmt: skip
    try:
        tracer = rollout.tracer
        with tracer.step(5, trainer="ppo") as step:
            with tracer.batch() as batch, tracer.trajectory("t") as traj, traj.generate():
                pass
            with step.phase("run_training"):
                step.record_phase("inner", step.start_ns, step.start_ns + 1)
            step.consumed(batch)
    finally:
        rollout.shutdown()
    read = read_trace_file(rollout.trace_file)
    (view,) = step_views(read.steps, read.batches)
    assert view.account == step.account
    assert view.health["keep_rate"] == 1.0 and view.health["kept"] == 1.0
    assert step_line([view]).startswith("step 5: ")


def test_the_gpu_figures_a_step_carries_reach_the_json(tmp_path, capsys):
    lines = _step_lines(0, 10, T0)
    doc = json.loads(lines[-1])
    root = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    root["attributes"] += [
        {"key": A.STEP_GPU_UTILIZATION, "value": {"doubleValue": 0.5}},
        {"key": A.STEP_GPU_UTILIZATION + ".run_training", "value": {"doubleValue": 0.9}},
    ]
    lines[-1] = json.dumps(doc)
    path = tmp_path / "t.jsonl"
    path.write_text("".join(x + "\n" for x in lines))
    assert main(["report", str(path), "--format", "json"]) == 0
    (step,) = json.loads(capsys.readouterr().out)["steps"]
    assert step["gpu_utilization"] == 0.5
    assert step["gpu_utilization_by_part"] == {"run_training": 0.9}
