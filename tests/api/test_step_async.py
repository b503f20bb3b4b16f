"""Async health: what a step trained on and threw away, its staleness, buffer wait and
wasted rollout, on the step span, its links and the metrics."""

from __future__ import annotations

import pytest

from otel_rollout.testing import points_in

MS = 1_000_000


def _generate(env, tid, version, llm_ms):
    with env.tracer.trajectory(tid, env="e") as traj:
        traj.set_policy_version(version)
        with traj.generate():
            env.clock.advance(ms=llm_ms)
    return traj


def test_consumed_trajectories_carry_staleness_and_buffer_wait(manual_env):
    env = manual_env
    old = _generate(env, "old", 1, 10)
    new = _generate(env, "new", 3, 30)
    env.clock.advance(ms=5)
    with env.tracer.step(7, policy_version=3) as step:
        marked = step.consumed([old, new])
    assert [(b.trajectory_id, b.staleness) for b in marked] == [("old", 2), ("new", 0)]
    assert [b.buffer_wait_ns for b in marked] == [35 * MS, 5 * MS]
    health = step.health
    assert (health.kept, health.dropped, health.staleness) == (2, 0, (0, 2))
    assert health.buffer_wait_ns == (5 * MS, 35 * MS)
    (span,) = env.spans("step")
    assert span.attributes["rollout.async.keep_rate"] == 1.0
    assert span.attributes["rollout.async.staleness_max"] == 2.0
    roots = {r.attributes["rollout.trajectory.id"]: r for r in env.roots()}
    links = {link.context.span_id: dict(link.attributes) for link in span.links}
    assert links[roots["old"].context.span_id] == {
        "rollout.link.type": "trained_on",
        "rollout.policy.staleness": 2,
        "rollout.buffer.wait": 0.035,
    }
    points = env.histogram_points("rollout.trajectory.staleness")
    assert sum(p.count for p in points) == 2 and sum(p.sum for p in points) == 2
    (wait,) = env.histogram_points("rollout.trajectory.buffer.duration")
    assert wait.count == 2 and wait.sum == pytest.approx(0.04, abs=0, rel=1e-12)


def test_dropped_trajectories_give_the_keep_rate_and_the_wasted_rollout(manual_env):
    env = manual_env
    kept = [_generate(env, f"k{i}", 2, 10) for i in range(3)]
    zero_var = _generate(env, "z", 2, 30)
    with env.tracer.step(3, policy_version=2) as step:
        step.consumed(kept)
        step.dropped(zero_var, "zero_variance")
    health = step.health
    assert health.keep_rate == 0.75  # SkyRL's async/keep_rate: 3 / (3 + 1)
    assert health.engine_kept_ns == 30 * MS and health.engine_dropped_ns == 30 * MS
    assert health.wasted_frac == 0.5
    summary = health.summary()
    assert summary["async/keep_rate"] == 0.75
    assert summary["async/dropped/zero_variance"] == 1.0
    assert summary["async/wasted_rollout_frac"] == 0.5
    points = env.metric_points("rollout.trajectory.outcomes")
    attrs = [(p.attributes, p.value) for p in points]
    counts = {(a["rollout.trajectory.outcome"], a.get("rollout.drop.reason")): v for a, v in attrs}
    assert counts == {("kept", None): 3, ("dropped", "zero_variance"): 1}


def test_an_unknown_drop_reason_is_other_on_metrics_and_kept_on_the_link(manual_env):
    traj = _generate(manual_env, "t", 1, 1)
    with manual_env.tracer.step(1) as step:
        step.dropped(traj, "reward model timed out")
    (point,) = manual_env.metric_points("rollout.trajectory.outcomes")
    assert point.attributes["rollout.drop.reason"] == "other"
    (link,) = manual_env.spans("step")[0].links
    assert link.attributes["rollout.drop.reason"] == "reward model timed out"
    assert step.health.dropped_by_reason == {"reward model timed out": 1}


def test_a_whole_batch_is_consumed_with_one_link(manual_env):
    env = manual_env
    with env.tracer.batch(1) as batch:
        for i in range(3):
            _generate(env, f"t{i}", 0, 5)
    with env.tracer.step(2, policy_version=1) as step:
        marked = step.consumed(batch)
    assert len(marked) == 3 and {b.staleness for b in marked} == {1}
    (link,) = env.spans("step")[0].links
    assert link.context.span_id == env.spans("batch")[0].context.span_id
    assert link.attributes["rollout.batch.id"] == batch.batch_id
    assert link.attributes["rollout.policy.staleness"] == 1


def test_a_trajectory_dropped_while_open_carries_its_fate_on_its_root(manual_env):
    env = manual_env
    with env.tracer.step(4, policy_version=9) as step, env.tracer.trajectory("t") as traj:
        traj.set_policy_version(5)
        step.dropped(traj, "stale")
    (root,) = env.roots()
    assert root.attributes["rollout.trajectory.outcome"] == "dropped"
    assert root.attributes["rollout.drop.reason"] == "stale"
    assert root.attributes["rollout.policy.staleness"] == 4
    assert root.attributes["rollout.policy.trained_version"] == 9


def test_buffer_depth_samples_go_to_the_gauge_and_the_step(manual_env):
    with manual_env.tracer.step(1) as step:
        step.set_buffer(4, capacity=16)
        manual_env.clock.advance(ms=1)
        step.set_buffer(9)
    # one collection for both: SDK 1.30 reports a gauge set once only in the
    # collection after the set
    data = manual_env.metric_reader.get_metrics_data()
    (depth,) = points_in(data, "rollout.buffer.depth")
    (cap,) = points_in(data, "rollout.buffer.capacity")
    assert (depth.value, cap.value) == (9, 16)
    summary = step.health.summary()
    assert summary["async/gen_buffer_qsize"] == 4.0  # at the step's start, as SkyRL's
    assert summary["async/gen_buffer_peaksize"] == 9.0
    assert summary["async/gen_buffer_maxsize"] == 16.0


def test_what_a_step_cannot_take_is_refused(manual_env):
    with manual_env.tracer.step(1) as step:
        with pytest.raises(TypeError, match="batch handle, trajectory handles, breakdowns"):
            step.consumed(42)
        with pytest.raises(ValueError, match="zero_variance"):
            step.dropped([], "")


def test_background_generation_counts_only_where_no_phase_ran(manual_env):
    env = manual_env
    scope = env.tracer.batch(0)
    scope.__enter__()  # a generation loop opened before the step, still running
    try:
        env.clock.advance(ms=10)
        with env.tracer.step(1) as step:
            with step.phase("wait_for_generation_buffer"):
                env.clock.advance(ms=20)
            with step.phase("run_training"):
                env.clock.advance(ms=50)
            env.clock.advance(ms=30)
    finally:
        scope.__exit__(None, None, None)
    assert dict(step.account.parts_ns) == {
        "wait_for_generation_buffer": 20 * MS,
        "run_training": 50 * MS,
        "generation": 30 * MS,
        "other": 0,
    }
