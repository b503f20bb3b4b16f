"""The step's metrics through configure()'s own pipeline to a real OTLP receiver: the
phase gauge is 1 while the phase runs and 0 after, in the same export as the histograms."""

from __future__ import annotations

import pytest

import otel_rollout
from otel_rollout.testing.receiver import OTLPReceiver

GAUGE = "rollout.step.phase.active"


def _gauge(rx, since):
    """The phase gauge's points of the requests from index ``since`` on, by phase."""
    out = {}
    for req in rx.metric_requests()[since:]:
        for rm in req.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == GAUGE:
                        assert m.WhichOneof("data") == "sum"
                        assert not m.sum.is_monotonic  # a gauge in Prometheus
                        for p in m.sum.data_points:
                            phase = next(
                                a.value.string_value
                                for a in p.attributes
                                if a.key == "rollout.step.phase"
                            )
                            out[phase] = p.as_int
    return out


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_the_phase_gauge_reaches_an_otlp_receiver_with_the_histograms(protocol):
    with OTLPReceiver() as rx:
        endpoint = rx.grpc_endpoint if protocol == "grpc" else rx.http_endpoint
        rollout = otel_rollout.configure(
            local=True, service_name="step-test", endpoint=endpoint, protocol=protocol,
            metric_export_interval_ms=3_600_000, summary_stream=None,
        )  # fmt: skip
        try:
            tracer = rollout.tracer
            with tracer.step(1, trainer="skyrl") as step:
                with step.phase("run_training"):
                    n = len(rx.metric_requests())
                    assert rollout.force_flush(10)
                    assert _gauge(rx, n) == {"run_training": 1}
                with step.phase("sync_weights"):
                    n = len(rx.metric_requests())
                    assert rollout.force_flush(10)
                    assert _gauge(rx, n) == {"run_training": 0, "sync_weights": 1}
                with tracer.batch(), tracer.trajectory("t0", env="e") as traj, traj.generate():
                    pass
            n = len(rx.metric_requests())
            assert rollout.force_flush(10)
            assert _gauge(rx, n) == {"run_training": 0, "sync_weights": 0}
            names = {
                m.name
                for req in rx.metric_requests()[n:]
                for rm in req.resource_metrics
                for sm in rm.scope_metrics
                for m in sm.metrics
            }
            assert {GAUGE, "rollout.step.duration", "rollout.trajectory.duration"} <= names
            (wall,) = rx.metric_points("rollout.step.duration")[-1:]
            assert wall["count"] == 1 and wall["sum"] == step.account.wall_ns / 1e9
            assert wall["exemplars"] == [step.trace_id]
            (step_span,) = [s for s in rx.spans() if s.name == "step"]
            assert step_span.trace_id == step.trace_id and step_span.parent_span_id is None
            assert {s.name for s in rx.spans() if s.parent_span_id == step_span.span_id} == {
                "run_training",
                "sync_weights",
            }
        finally:
            rollout.shutdown()
