"""Trajectories exported over real OTLP (gRPC and HTTP) to a real receiver."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_rollout import BreakdownCollector, RolloutTracer
from otel_rollout.sdk import BreakdownProcessor
from otel_rollout.testing.receiver import OTLPReceiver

N = 20


def exporters(protocol, rx):
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return (
            OTLPSpanExporter(endpoint=rx.grpc_endpoint, insecure=True),
            OTLPMetricExporter(endpoint=rx.grpc_endpoint, insecure=True),
        )
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return (
        OTLPSpanExporter(endpoint=rx.http_endpoint + "/v1/traces"),
        OTLPMetricExporter(endpoint=rx.http_endpoint + "/v1/metrics"),
    )


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_trajectories_arrive_with_their_tree_breakdown_and_histograms(protocol):
    with OTLPReceiver() as rx:
        span_exporter, metric_exporter = exporters(protocol, rx)
        resource = Resource.create({"service.name": "otlp-test"})
        reader = PeriodicExportingMetricReader(metric_exporter, export_interval_millis=60_000)
        meter_provider = MeterProvider(metric_readers=[reader], resource=resource)
        collector = BreakdownCollector()
        provider = TracerProvider(resource=resource)
        processor = BreakdownProcessor(meter_provider, on_breakdown=collector)
        provider.add_span_processor(processor)
        provider.add_span_processor(BatchSpanProcessor(span_exporter))
        tracer = RolloutTracer(provider, meter_provider, processor=processor)
        for i in range(N):
            with tracer.trajectory(f"t{i}", env="gsm8k", model="m") as traj:
                with traj.env_setup():
                    pass
                for _ in range(i % 3 + 1):
                    with traj.generate() as gen:
                        gen.record(input_tokens=7, output_tokens=3)
                    with traj.env_step():
                        pass
        provider.force_flush()
        provider.shutdown()
        meter_provider.shutdown()  # one final export of the cumulative points

        spans = rx.spans()
        roots = [s for s in spans if s.name == "trajectory"]
        assert len(roots) == N and all(s.resource["service.name"] == "otlp-test" for s in spans)
        breakdowns = {b.trace_id: b for b in collector.drain()}
        for root in roots:
            kids = [s for s in spans if s.parent_span_id == root.span_id]
            turns = int(root.attributes["rollout.trajectory.id"][1:]) % 3 + 1
            assert [k.name for k in sorted(kids, key=lambda k: k.start_ns)] == ["env_setup"] + [
                "generate",
                "env_step",
            ] * turns
            assert all(k.trace_id == root.trace_id for k in kids)
            b = breakdowns[root.trace_id]
            assert root.attributes["rollout.breakdown.llm"] == b.band("llm")
            assert root.attributes["rollout.breakdown.other"] == b.band("other")
            assert root.attributes["rollout.trajectory.turns"] == turns
            assert root.end_ns - root.start_ns == b.nanos["e2e"]
        assert len(spans) == sum(1 + 1 + 2 * (i % 3 + 1) for i in range(N))
        (dur,) = rx.metric_points("rollout.trajectory.duration")
        assert dur["count"] == N
        phase_points = rx.metric_points("rollout.trajectory.phase.duration")
        assert sorted(p["attributes"]["rollout.phase"] for p in phase_points) == sorted(
            ["llm", "env", "env_setup", "env_teardown", "other"]
        )
        assert all(p["count"] == N for p in phase_points)
        env = next(p for p in phase_points if p["attributes"]["rollout.phase"] == "env")
        assert env["sum"] == pytest.approx(sum(b.band("env") for b in breakdowns.values()))
        assert set(dur["exemplars"]) <= set(breakdowns)


def test_endpoint_down_then_back_loses_no_breakdown_and_export_resumes():
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    rx = OTLPReceiver()  # not started yet: the port refuses connections
    collector = BreakdownCollector()
    provider = TracerProvider()
    processor = BreakdownProcessor(MeterProvider(), on_breakdown=collector)
    provider.add_span_processor(processor)
    provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(endpoint=rx.grpc_endpoint, insecure=True, timeout=1),
            schedule_delay_millis=50,
        )
    )
    tracer = RolloutTracer(provider, processor=processor)

    def run(prefix, n):
        for i in range(n):
            with tracer.trajectory(f"{prefix}{i}") as traj, traj.generate():
                pass

    run("down", 30)  # no exception reaches the loop while nobody listens
    provider.force_flush(timeout_millis=3000)
    assert len(collector.drain()) == 30
    with rx:
        # gRPC reconnects with backoff, so keep the loop running until export resumes;
        # the deadline only bounds a failing test.
        import time

        deadline, sent = time.monotonic() + 60, 0
        while time.monotonic() < deadline:
            run(f"up{sent}-", 1)
            sent += 1
            provider.force_flush(timeout_millis=2000)
            if any(s.name == "trajectory" for s in rx.spans()):
                break
        ids = {s.attributes["rollout.trajectory.id"] for s in rx.spans() if s.name == "trajectory"}
        assert ids and all(i.startswith("up") for i in ids)
    provider.shutdown()
    assert len(collector.drain()) == sent
