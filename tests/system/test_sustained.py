"""Sustained load through the default pipeline: every span is accounted for and the
queue stays bounded.

More spans than the export queue holds (120,000 against 2,048) go through
``configure()``'s default mode as fast as the loop can make them. Whether the writer keeps
up depends on the machine (a writer kept off the CPU for the ~25 ms that fills the queue
loses spans, counted); that speed is measured by ``benchmarks/sustained.py``, not here.
What holds on any machine: each span is exported or counted lost, the file holds exactly
the exported ones, the loss is stated in the file, and ``report`` reads it back.
"""

from __future__ import annotations

import json

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


def test_a_long_tight_loop_accounts_for_every_span_and_the_queue_stays_bounded(tmp_path):
    rollout = configure(local=True, output_dir=tmp_path, metrics_exporter="none",
                        service_name="sustained")  # fmt: skip
    room = rollout.settings.bsp_max_queue_size
    assert room < 3 * N  # more than the queue could hide
    highest = _run(rollout, N)
    assert rollout.shutdown(120)
    stats = rollout.export_stats
    assert stats.exported + stats.dropped == 3 * N and stats.pending == 0
    assert stats.dropped == stats.dropped_queue_full  # a slow writer is the only loss
    assert highest <= room  # bounded: full at most, never past it
    files = sorted(str(p) for p in tmp_path.rglob("*.jsonl"))
    roots = spans = 0
    for path in files:
        with open(path) as f:
            for line in f:
                for rs in json.loads(line).get("resourceSpans", ()):
                    for ss in rs["scopeSpans"]:
                        spans += len(ss["spans"])
                        roots += sum(not sp.get("parentSpanId") for sp in ss["spans"])
    assert spans == stats.exported
    res = read_sources(files)
    assert res.found == roots
    assert res.export_losses == ({"queue_full": stats.dropped} if stats.dropped else {})
    if not stats.dropped:
        assert roots == N and res.all_losses() == {}
