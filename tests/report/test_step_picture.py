"""The step picture and the samples it draws: buffer depth and GPU utilisation go onto the
step span as bounded series and come back from the trace file; ``report --output-dir``
draws steps.png."""

from __future__ import annotations

import pytest

from otel_rollout import attributes as A
from otel_rollout._accounting.step_account import MAX_POINTS, series_attributes, series_of
from otel_rollout.report import read_trace_file
from otel_rollout.report._step_picture import part_colours, write_step_picture
from otel_rollout.report._steps import step_views


def test_a_series_survives_the_span_and_is_thinned_to_its_bound():
    start = 10**18
    samples = [(start + 5 * i, i % 7) for i in range(1000)]
    attrs = series_attributes("buffer_depth", samples, start)
    back = series_of("buffer_depth", attrs, start)
    assert len(back) == MAX_POINTS
    assert back[0] == (start, 0.0) and back[-1] == (start + 5 * 999, float(999 % 7))
    assert all(isinstance(v, int) for v in attrs["rollout.step.series.buffer_depth.value"])
    short = [(start + 1, 0.5), (start + 9, 0.25)]
    assert series_of("g", series_attributes("g", short, start), start) == short
    assert series_attributes("g", [], start) == {} and series_of("g", {}, start) == []


def test_the_picture_is_drawn_from_the_trace_file(tmp_path):
    pytest.importorskip("matplotlib")
    import otel_rollout

    rollout = otel_rollout.configure(local=True, output_dir=tmp_path, summary_stream=None,
                                     traces_exporter="file")  # fmt: skip
    try:
        tracer = rollout.tracer
        for n in range(2):
            with tracer.step(n) as step:
                step.set_buffer(3, capacity=8)
                with tracer.batch(), tracer.trajectory(f"t{n}") as traj, traj.generate():
                    pass
                step.set_buffer(1)
                with step.phase("run_training"):
                    pass
    finally:
        rollout.shutdown()
    read = read_trace_file(rollout.trace_file)
    views = step_views(read.steps, read.batches)
    assert [v.account.step for v in views] == [0, 1]
    assert [d for _, d in views[1].series[A.SERIES_BUFFER_DEPTH]] == [3.0, 1.0]
    assert part_colours(views).keys() == {"generation", "other", "run_training"}
    path = write_step_picture(views, {}, tmp_path / "out")
    assert path.name == "steps.png" and path.stat().st_size > 1000
