"""RecordingRatioSampler: histograms count every trajectory, only a ratio is exported."""

from __future__ import annotations

import pytest

from otel_rollout import RecordingRatioSampler
from otel_rollout.testing import make_test_env


def test_ratio_exports_some_traces_while_metrics_count_all():
    env = make_test_env(sampler=RecordingRatioSampler(0.1))
    for i in range(500):
        with env.tracer.trajectory(f"t{i}", env="e") as traj:
            with traj.generate():
                pass
            with traj.env_step():
                pass
    (dur,) = env.histogram_points("rollout.trajectory.duration")
    assert dur.count == 500
    for band in ("llm", "env", "other"):
        (p,) = env.histogram_points("rollout.trajectory.phase.duration", **{"rollout.phase": band})
        assert p.count == 500
    roots = env.roots()
    assert 25 <= len(roots) <= 80  # binomial(500, 0.1): mean 50, sd 6.7
    # children follow their root: every exported trace is whole, nothing else is exported
    exported_traces = {r.context.trace_id for r in roots}
    assert {s.context.trace_id for s in env.spans()} == exported_traces
    assert len(env.spans()) == 3 * len(roots)
    assert len(env.breakdowns) == 500 and all(b.turns == 1 for b in env.breakdowns)


def test_ratio_one_and_zero_are_all_and_nothing():
    for ratio, expected in ((1.0, 20), (0.0, 0)):
        env = make_test_env(sampler=RecordingRatioSampler(ratio))
        for _ in range(20):
            with env.tracer.trajectory():
                pass
        assert len(env.roots()) == expected
        assert len(env.breakdowns) == 20


@pytest.mark.parametrize("bad", [-0.1, 1.5, "0.5", None])
def test_bad_ratio_names_the_value(bad):
    with pytest.raises(ValueError, match=r"in \[0, 1\], got"):
        RecordingRatioSampler(bad)
