"""A forked child starts with none of the parent's process state: it exports and counts
its own spans and trajectories only (a real fork, a real OTLP receiver)."""

from __future__ import annotations

import json
import os
import time

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from otel_rollout import BreakdownCollector, RolloutTracer
from otel_rollout import attributes as A
from otel_rollout._export.guarded import guarded_span_processor
from otel_rollout._setup.rollout import RunningSummary
from otel_rollout.sdk import BreakdownProcessor
from otel_rollout.testing.receiver import OTLPReceiver

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def in_child(fn, after_fork=None) -> dict:
    """Fork; run ``fn()`` in the child and return the JSON-able dict it returns.
    ``after_fork()`` runs in the parent once the child exists."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running the parent's exit hooks
        code = 1
        try:
            os.close(read)
            os.write(write, json.dumps(fn()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    if after_fork is not None:
        after_fork()
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return json.loads(b"".join(chunks))


def pipeline(rx: OTLPReceiver, queue: int):
    exporter = OTLPSpanExporter(endpoint=rx.http_endpoint + "/v1/traces", timeout=10)
    export = guarded_span_processor(
        exporter, max_queue_size=queue, max_export_batch_size=queue, schedule_delay_millis=1
    )
    collector = BreakdownCollector()
    processor = BreakdownProcessor(MeterProvider(), on_breakdown=collector)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    provider.add_span_processor(export)
    return RolloutTracer(provider, processor=processor), export, processor, collector, provider


def run(tracer, tid: str) -> None:
    with tracer.trajectory(tid) as traj, traj.generate():
        pass


def test_a_child_forked_while_the_parents_queue_is_full_still_exports():
    with OTLPReceiver() as rx:
        rx.hold()  # the endpoint hangs: the parent's queue fills up
        tracer, export, _, _, provider = pipeline(rx, queue=8)
        run(tracer, "parent-0")
        # the export thread's first request has reached the receiver and waits there (on
        # a loaded machine the thread may not have run yet: the queue would fill first)
        assert rx.wait_for(lambda r: r.requests >= 1)
        deadline = time.monotonic() + 10
        while export.stats.dropped_queue_full == 0 and time.monotonic() < deadline:
            run(tracer, "parent-more")
        assert export.stats.pending == 8 and export.stats.dropped_queue_full > 0

        def child() -> dict:
            run(tracer, "child-0")
            flushed = export.force_flush(10_000)
            s = export.stats
            return {"flushed": flushed, "exported": s.exported, "pending": s.pending,
                    "dropped": s.dropped}  # fmt: skip

        # the child's requests (and the parent's) are answered once the child exists: the
        # fork finds the parent's export thread waiting for its answer, not taking or
        # putting back a pooled connection under urllib3's lock, which a child would find
        # held for ever (fork copies no thread to let it go)
        got = in_child(child, after_fork=rx.release)
        assert got == {"flushed": True, "exported": 2, "pending": 0, "dropped": 0}
        mine = lambda r: [s for s in r.spans() if s.trace_id and s.attributes.get(  # noqa: E731
            A.TRAJECTORY_ID) == "child-0"]  # fmt: skip
        assert rx.wait_for(lambda r: len(mine(r)) == 1)
        provider.shutdown()


def test_a_child_has_none_of_the_parents_trajectories_breakdowns_or_summary():
    with OTLPReceiver() as rx:
        tracer, _, processor, collector, provider = pipeline(rx, queue=64)
        summary = RunningSummary()
        processor.add_sink(summary)
        for i in range(3):
            run(tracer, f"parent-{i}")
        open_scope = tracer.trajectory("in-flight-at-fork")
        open_scope.__enter__()
        assert processor.in_flight == 1 and len(collector) == 3 and summary.count == 3
        assert processor.histograms.waiting == 3  # records wait for a collection

        def child() -> dict:
            state = [processor.in_flight, processor.open_spans, len(collector), summary.count,
                     processor.histograms.waiting]  # fmt: skip
            run(tracer, "child-0")
            return {"at_fork": state, "breakdowns": [b.trajectory_id for b in collector.drain()],
                    "summary": summary.count, "waiting": processor.histograms.waiting}  # fmt: skip

        got = in_child(child)
        assert got == {"at_fork": [0, 0, 0, 0, 0], "breakdowns": ["child-0"], "summary": 1,
                       "waiting": 1}  # fmt: skip
        assert processor.histograms.waiting == 3  # the parent's records are still its own
        open_scope.__exit__(None, None, None)  # the parent's own state is untouched
        assert [b.trajectory_id for b in collector.drain()][-1] == "in-flight-at-fork"
        provider.shutdown()


def test_a_child_has_none_of_the_parents_tail_keep_buffer():
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_rollout.sdk import RecordingRatioSampler, TailKeepProcessor

    exporter = InMemorySpanExporter()
    keep = TailKeepProcessor(SimpleSpanProcessor(exporter))
    provider = TracerProvider(sampler=RecordingRatioSampler(0.0))
    provider.add_span_processor(keep)
    tracer = RolloutTracer(provider)
    scope = tracer.trajectory("open-at-fork")
    traj = scope.__enter__()
    with traj.generate():
        pass
    assert keep.buffered_spans == 1

    def child() -> dict:
        return {"buffered": keep.buffered_spans}

    assert in_child(child) == {"buffered": 0}
    scope.__exit__(None, None, None)
    assert keep.buffered_spans == 0


def test_a_child_sends_none_of_the_parents_metrics(tmp_path, monkeypatch):
    """The SDK restarts the periodic metric export in a forked child, whose meter provider
    holds the parent's cumulative histograms (under a new service.instance.id since SDK
    1.45): sent from the child, the parent's trajectories would count twice."""
    import otel_rollout

    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    with OTLPReceiver() as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.http_endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        # an interval that never comes in this test: every export below is asked for
        rollout = otel_rollout.configure(output_dir=tmp_path, metric_export_interval_ms=600_000)
        try:
            run(rollout.tracer, "parent")

            def child() -> dict:
                run(rollout.tracer, "child")  # its own trajectory: its spans only go out
                return {
                    "metrics": rollout.meter_provider.force_flush(10_000),
                    "spans": rollout.force_flush(10),
                }

            assert in_child(child) == {"metrics": True, "spans": True}
            assert rollout.meter_provider.force_flush(10_000)
            parent = rollout.tracer_provider.resource.attributes
        finally:
            rollout.shutdown()
        points = rx.metric_points(A.METRIC_DURATION)
        spans = rx.spans()
    assert points, "the parent's export arrived"
    ids = {p["resource"]["service.instance.id"] for p in points}
    assert ids == {parent["service.instance.id"]}, ids
    assert [p["count"] for p in points][-1] == 1  # the parent's one trajectory, once
    assert {s.attributes.get(A.TRAJECTORY_ID) for s in spans if s.name == "trajectory"} == {
        "parent",
        "child",
    }
