"""Sustained load through the default pipeline loses nothing: the trace file keeps up.

More spans than the export queue and its burst room hold together (120,000 against
102,048) go through ``configure()``'s default mode as fast as the loop can make them; if
the writer fell behind on average, the queue would fill and spans would be dropped. None
is, every one reaches the file, and ``report`` reads every trajectory back. With no
burst room at all the writer still keeps up (the official encoder did not: it dropped
about 8% of 60,000 spans there). Rates and stalls are measured by
``benchmarks/sustained.py``; no timing is asserted here.
"""

from __future__ import annotations

from otel_rollout import configure
from otel_rollout.report import read_sources

N = 40_000  # two-phase trajectories: 3 spans each


def _run(rollout, n):
    highest = 0
    for i in range(n):
        with rollout.tracer.trajectory(f"t{i}", env="e", model="m") as traj:
            with traj.generate():
                pass
            with traj.env_step():
                pass
        if i % 1000 == 999:
            rollout.collector.drain()  # a training step takes its breakdowns
            highest = max(highest, rollout.export_stats.pending)
    return highest


def test_the_writer_keeps_up_with_a_tight_loop_without_burst_room(tmp_path, monkeypatch):
    # only the 2,048-span queue: a writer slower than the loop, even by a little, fills it
    # (the thread that writes gets the interpreter in turn with the loop's, whatever the
    # machine's load, so this compares their speeds, not a clock)
    monkeypatch.setenv("OTEL_ROLLOUT_TRACE_FILE_BURST_SPANS", "0")
    rollout = configure(local=True, output_dir=tmp_path, metrics_exporter="none",
                        service_name="sustained")  # fmt: skip
    _run(rollout, 20_000)
    assert rollout.shutdown(120)
    stats = rollout.export_stats
    assert stats.dropped == 0, stats
    assert stats.exported == 3 * 20_000


def test_a_long_tight_loop_loses_no_span_and_the_queue_stays_bounded(tmp_path):
    rollout = configure(local=True, output_dir=tmp_path, metrics_exporter="none",
                        service_name="sustained")  # fmt: skip
    s = rollout.settings
    room = s.bsp_max_queue_size + s.trace_file_burst_spans
    assert room < 3 * N  # more than the queue could hide
    highest = _run(rollout, N)
    assert rollout.shutdown(120)
    stats = rollout.export_stats
    assert stats.dropped == 0, stats
    assert stats.exported == 3 * N and stats.pending == 0
    assert highest < room
    res = read_sources([str(p) for p in sorted(tmp_path.rglob("*.jsonl"))])
    assert res.found == N and res.all_losses() == {}
