"""RecordingRatioSampler: histograms count every trajectory, only a ratio is exported."""

from __future__ import annotations

import pytest

from otel_rollout.sdk import RecordingRatioSampler
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


def test_configured_ratio_over_otlp_counts_all_and_keeps_every_failed_and_slow(monkeypatch):
    from otel_rollout import RolloutTracer, configure
    from otel_rollout.testing import ManualClock
    from otel_rollout.testing.receiver import OTLPReceiver

    for name in (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_TRACES_SAMPLER",
        "OTEL_SDK_DISABLED",
        "OTEL_ROLLOUT_SAMPLE_RATIO",
        "OTEL_TRACES_EXPORTER",
        "OTEL_METRICS_EXPORTER",
    ):
        monkeypatch.delenv(name, raising=False)
    failed = {i for i in range(500) if i % 50 == 7}
    slow = {i for i in range(500) if i % 50 == 31}
    with OTLPReceiver() as rx:
        rollout = configure(
            local=True,
            endpoint=rx.grpc_endpoint,
            sample_ratio=0.1,
            tail_keep_slower_than_s=0.04,
            metric_export_interval_ms=60_000,
        )
        # the configured pipeline, timed by a manual clock: only the slow ones take 50 ms
        clock = ManualClock(step_ns=1_000)
        tracer = RolloutTracer(rollout.tracer_provider, processor=rollout.processor, clock=clock)
        for i in range(500):
            try:
                with tracer.trajectory(f"t{i}", env="e") as traj:
                    with traj.generate():
                        if i in slow:
                            clock.advance(ms=50)
                    with traj.env_step():
                        if i in failed:
                            raise RuntimeError("tool crashed")
            except RuntimeError:
                pass
        assert rollout.shutdown(timeout_s=10)
        by_status = {
            p["attributes"]["rollout.trajectory.status"]: p["count"]
            for p in rx.metric_points("rollout.trajectory.duration")
        }
        assert by_status == {"ok": 490, "error": 10}  # every trajectory in the histogram
        spans = rx.spans()
        roots = {s.attributes["rollout.trajectory.id"]: s for s in spans if s.name == "trajectory"}
        kept = {int(k[1:]) for k in roots}
        assert failed | slow <= kept  # every failed and every slow one, sampled or not
        assert 25 <= len(kept - failed - slow) <= 80  # the ratio's ~48 of the other 480
        for root in roots.values():  # each exported trajectory whole: root + 2 phases
            kids = [s for s in spans if s.parent_span_id == root.span_id]
            assert sorted(s.name for s in kids) == ["env_step", "generate"]
        assert len(spans) == 3 * len(roots)
