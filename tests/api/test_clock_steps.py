"""A wall-clock step (NTP stepping a drifted clock) moves timestamps, never durations:
trajectory and batch durations come from the monotonic clock, anchored to the wall clock
once; and ``report`` names a root that ends before it starts for what it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from otel_rollout.report import read_sources
from otel_rollout.report._model import LOSS_INCOMPLETE, LOSS_INVERTED_ROOT

_STEPPED = textwrap.dedent(
    """
    import json, sys, time
    real = time.time_ns
    step = [0]
    time.time_ns = lambda: real() + step[0]  # the wall clock, as the kernel would step it
    import otel_rollout
    rollout = otel_rollout.configure(local=True, output_dir=sys.argv[1])
    tracer, jump = rollout.tracer, int(sys.argv[2])
    with tracer.batch(step=1) as batch:
        with tracer.trajectory("stepped", env="e") as t:
            with t.generate():
                time.sleep(0.05)
            step[0] += jump  # mid-trajectory
            with t.env_step():
                time.sleep(0.05)
    rollout.shutdown()
    b = t.breakdown
    print(json.dumps({"e2e": b.e2e, "llm": b.band("llm"), "env": b.band("env"),
                      "batch_wall": batch.analysis.wall_ns / 1e9 if batch.analysis else None}))
    """
)


@pytest.mark.parametrize("jump_s", [-10, 3600])
def test_a_wall_clock_step_mid_trajectory_changes_no_duration(tmp_path, jump_s):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=os.getcwd(), OTEL_ROLLOUT_ANNOUNCE="false")
    done = subprocess.run([sys.executable, "-c", _STEPPED, str(tmp_path), str(jump_s * 10**9)],
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    online = json.loads(done.stdout.strip().splitlines()[-1])
    assert 0.1 <= online["e2e"] < 5 and 0.05 <= online["llm"] < 5 and 0.05 <= online["env"] < 5
    if online["batch_wall"] is not None:
        assert 0.1 <= online["batch_wall"] < 5
    res = read_sources([str(tmp_path / "traces-*.jsonl")], warn=lambda m: None)
    (t,) = res.trajectories
    assert t.breakdown.e2e == pytest.approx(online["e2e"])  # report agrees


def _span(span_id, start, end, attrs, parent=None):
    out = {
        "traceId": "ab" * 16, "spanId": span_id, "name": "x",
        "startTimeUnixNano": str(start), "endTimeUnixNano": str(end),
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()],
    }  # fmt: skip
    if parent:
        out["parentSpanId"] = parent
    return out


def test_report_names_a_root_that_ends_before_it_starts(tmp_path):
    root = _span("01" * 8, 2_000, 1_000, {"rollout.trajectory.id": "t"})
    phase = _span("02" * 8, 1_000, 1_500, {"rollout.phase": "llm"}, parent="01" * 8)
    doc = {"resourceSpans": [{"resource": {"attributes": []},
                              "scopeSpans": [{"spans": [phase, root]}]}]}  # fmt: skip
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps(doc) + "\n")
    res = read_sources([str(f)], warn=lambda m: None)
    assert res.trajectories == []
    assert res.losses == {LOSS_INVERTED_ROOT: 1}  # not "incomplete (no root span)"
    assert LOSS_INCOMPLETE not in res.losses
