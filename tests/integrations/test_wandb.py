"""``otel_rollout.wandb.log_step`` against the real wandb in offline mode: the step's
summarize() keys, the batch summary and the timeline (image and HTML) are read back from
the files of the run it wrote."""

from __future__ import annotations

import pytest

wandb = pytest.importorskip("wandb")
pytest.importorskip("matplotlib")

from pathlib import Path  # noqa: E402

from _wandb_records import history  # noqa: E402

from otel_rollout import configure, summarize  # noqa: E402
from otel_rollout.wandb import log_step, step_figures  # noqa: E402


@pytest.fixture
def offline_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    run = wandb.init(project="otel-rollout-test", dir=str(tmp_path),
                     settings=wandb.Settings(console="off", x_disable_stats=True))  # fmt: skip
    yield run
    if wandb.run is not None:
        wandb.finish()


def _step(rollout, step, n):
    with rollout.tracer.batch(step=step) as batch:
        for i in range(n):
            with rollout.tracer.trajectory(f"s{step}-{i}", env="toy") as traj:
                with traj.generate():
                    pass
                with traj.env_step():
                    pass
    return batch


def test_each_step_logs_summarize_the_batch_summary_and_the_timeline(offline_run, tmp_path):
    import io

    rollout = configure(local=True, traces_exporter="none", metrics_exporter="none",
                        summary_stream=io.StringIO())  # fmt: skip
    logged = []
    for step in range(2):
        batch = _step(rollout, step, 4 + step)
        logged.append(log_step(batch, step=step, timeline="both"))
        assert logged[-1] == step_figures(batch)
    rollout.shutdown()
    files, log = Path(offline_run.dir), Path(offline_run.dir).parent / f"run-{offline_run.id}.wandb"
    wandb.finish()
    rows = history(log)  # what the run recorded, read back from its transaction log
    assert [r["_step"] for r in rows] == [0, 1]
    for row, figures in zip(rows, logged, strict=True):
        for key in ("generate/trajectory_time_completion_mean", "generate/frac_time_in_env",
                    "generate/batch_drain_time", "generate/batch_stragglers"):  # fmt: skip
            assert row[key] == pytest.approx(figures[key]), key
    assert logged[-1] == {**summarize(batch.breakdowns), **batch.analysis.summary()}
    last = rows[-1]
    assert last["generate/batch_timeline/_type"] == "image-file"
    assert last["generate/batch_timeline/caption"].endswith("(step 1)")
    assert (files / last["generate/batch_timeline/path"]).stat().st_size > 1000
    assert last["generate/batch_timeline_html/_type"] == "html-file"
    page = (files / last["generate/batch_timeline_html/path"]).read_text()
    assert "<svg" in page and "/trace/" in page and "seconds since the batch started" in page
    assert len(list((files / "media" / "images").rglob("*.png"))) == 2  # one per step


def test_breakdowns_alone_and_no_timeline(offline_run):
    import io

    rollout = configure(local=True, traces_exporter="none", metrics_exporter="none",
                        summary_stream=io.StringIO())  # fmt: skip
    _step(rollout, 0, 3)
    out = log_step(breakdowns=rollout.collector.drain(), timeline=None)
    rollout.shutdown()
    assert out["generate/batch_stragglers"] >= 0 and "generate/trajectory_time_llm_p90" in out
    with pytest.raises(ValueError, match="timeline must be one of"):
        log_step(breakdowns=[], timeline="gif")


def test_without_a_run_it_says_what_to_do(monkeypatch):
    if wandb.run is not None:
        wandb.finish()
    with pytest.raises(RuntimeError, match=r"wandb.init\(\) first"):
        log_step(breakdowns=[])


@pytest.mark.parametrize("batch", [42, "step 3", {"generate/x": 1.0}, [1, 2]])
def test_what_is_not_a_batch_is_a_type_error_naming_what_is_accepted(offline_run, batch):
    with pytest.raises(TypeError, match=r"batch: expected a Batch .*a BatchAnalysis, or None"):
        log_step(batch)
    with pytest.raises(TypeError, match=r"batch: expected"):
        step_figures(batch)


def test_a_collector_is_a_type_error_naming_its_drain(offline_run):
    import io

    rollout = configure(local=True, traces_exporter="none", metrics_exporter="none",
                        summary_stream=io.StringIO())  # fmt: skip
    _step(rollout, 0, 2)
    rollout.collector.drain()  # drained: it would log an empty payload
    for call in (lambda: log_step(rollout.collector),
                 lambda: log_step(breakdowns=rollout.collector)):  # fmt: skip
        with pytest.raises(TypeError, match=r"collector\.drain\(\)"):
            call()
    rollout.shutdown()


@pytest.mark.parametrize("breakdowns", [42, "abc", {"a": 1}, [1.5]])
def test_breakdowns_that_are_not_breakdowns_are_a_type_error(offline_run, breakdowns):
    with pytest.raises(TypeError, match=r"breakdowns: expected"):
        log_step(breakdowns=breakdowns)
