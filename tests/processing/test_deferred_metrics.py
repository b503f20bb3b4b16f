"""Histogram records wait for the next metric collection, off the agent's thread.

Each trajectory's seven records are made by whichever thread collects (a periodic
reader's, a Prometheus scrape's), by ``force_flush``/``shutdown``, or at once when too
many are waiting; none is lost or counted twice, and exemplars still name the trace.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from otel_rollout import RolloutTracer
from otel_rollout._processing import histograms as histograms_module
from otel_rollout.attributes import METRIC_DURATION, METRIC_IN_FLIGHT, METRIC_PHASE_DURATION
from otel_rollout.sdk import BreakdownProcessor
from otel_rollout.testing import ManualClock, points_in


def make(**processor_options):
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    provider = TracerProvider()
    processor = BreakdownProcessor(meters, **processor_options)
    provider.add_span_processor(processor)
    clock = ManualClock(1_000_000_000)
    tracer = RolloutTracer(provider, processor=processor, clock=clock)
    return SimpleNamespace(
        reader=reader, provider=provider, processor=processor, tracer=tracer, clock=clock
    )


def one(tracer, clock, name):
    with tracer.trajectory(name, env="e", model="m") as traj:
        with traj.generate():
            clock.advance(2_000_000)
        with traj.env_step():
            clock.advance(3_000_000)
    return traj


def durations(reader):
    return {
        p.attributes["rollout.env.class"]: p
        for p in points_in(reader.get_metrics_data(), METRIC_DURATION)
    }


def test_records_wait_for_the_collection_and_are_made_by_the_collecting_thread():
    s = make()
    recorded_on = []
    record = s.processor.histograms._duration.record

    def spy(*args, **kwargs):
        recorded_on.append(threading.current_thread().name)
        return record(*args, **kwargs)

    s.processor.histograms._duration.record = spy
    for i in range(3):
        one(s.tracer, s.clock, f"t{i}")
    assert recorded_on == []  # the agent's thread made no record

    collected = {}
    thread = threading.Thread(
        target=lambda: collected.update(data=s.reader.get_metrics_data()), name="collector"
    )
    thread.start()
    thread.join()
    assert recorded_on == ["collector"] * 3
    (point,) = points_in(collected["data"], METRIC_DURATION)
    assert point.count == 3
    assert point.sum == pytest.approx(3 * 0.005)
    phases = points_in(collected["data"], METRIC_PHASE_DURATION)
    assert {p.attributes["rollout.phase"]: p.count for p in phases} == {
        "llm": 3, "env": 3, "env_setup": 3, "env_teardown": 3, "other": 3,
    }  # fmt: skip
    # a second collection records nothing again (cumulative counts stay at 3)
    assert durations(s.reader)["e"].count == 3
    assert recorded_on == ["collector"] * 3


def test_exemplars_still_carry_the_trace_id_of_each_sampled_trajectory():
    s = make()
    trace_ids = {one(s.tracer, s.clock, f"t{i}").trace_id for i in range(2)}
    point = durations(s.reader)["e"]
    assert {format(e.trace_id, "032x") for e in point.exemplars} <= trace_ids
    assert point.exemplars, "a sampled trajectory's record must keep its exemplar"


def test_the_in_flight_gauge_counts_open_trajectories_per_env_class_at_collection():
    s = make()
    one(s.tracer, s.clock, "ended")
    with s.tracer.trajectory("open", env="e"), s.tracer.trajectory("other", env="f"):
        points = points_in(s.reader.get_metrics_data(), METRIC_IN_FLIGHT)
        assert {p.attributes["rollout.env.class"]: p.value for p in points} == {"e": 1, "f": 1}
    points = points_in(s.reader.get_metrics_data(), METRIC_IN_FLIGHT)
    # a class seen before reads 0, not a series that vanished
    assert {p.attributes["rollout.env.class"]: p.value for p in points} == {"e": 0, "f": 0}


def test_force_flush_and_shutdown_record_what_waits():
    s = make()
    one(s.tracer, s.clock, "a")
    assert s.processor.force_flush() is True
    assert s.processor.record_deferred() == 0  # already recorded by force_flush
    one(s.tracer, s.clock, "b")
    s.provider.shutdown()
    assert s.processor.record_deferred() == 0
    assert durations(s.reader)["e"].count == 2


def test_past_the_bound_records_are_made_at_once_and_none_is_lost(monkeypatch):
    monkeypatch.setattr(histograms_module, "MAX_DEFERRED", 2)
    s = make()
    for i in range(5):
        one(s.tracer, s.clock, f"t{i}")
    assert s.processor.record_deferred() == 2  # two waited, three were recorded at once
    assert durations(s.reader)["e"].count == 5


def test_no_record_waits_when_histograms_are_off():
    s = make(record_metrics=False)
    one(s.tracer, s.clock, "a")
    assert s.processor.record_deferred() == 0
    assert points_in(s.reader.get_metrics_data(), METRIC_DURATION) == []
    assert points_in(s.reader.get_metrics_data(), METRIC_IN_FLIGHT) == []


def test_collections_racing_with_ending_trajectories_lose_and_double_nothing():
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    provider = TracerProvider()
    processor = BreakdownProcessor(meters)
    provider.add_span_processor(processor)
    tracer = RolloutTracer(provider, processor=processor)
    workers, per_worker = 4, 300
    done = threading.Event()

    def agent(w):
        for i in range(per_worker):
            with tracer.trajectory(f"{w}-{i}", env="e") as traj, traj.generate():
                pass

    def collector():
        while not done.is_set():
            reader.get_metrics_data()

    threads = [threading.Thread(target=agent, args=(w,)) for w in range(workers)]
    collecting = threading.Thread(target=collector)
    collecting.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    collecting.join()
    assert durations(reader)["e"].count == workers * per_worker


def test_configure_without_a_metric_reader_keeps_no_records_waiting():
    import otel_rollout

    rollout = otel_rollout.configure(local=True, traces_exporter="none", metrics_exporter="none")
    try:
        for i in range(3):
            with rollout.tracer.trajectory(f"t{i}", env="e"):
                pass
        assert rollout.processor.histograms is None  # nothing to collect them
        assert len(rollout.collector.drain()) == 3  # breakdowns all the same
    finally:
        rollout.shutdown()


def test_configure_with_a_metric_reader_records_at_its_collection():
    import otel_rollout

    rollout = otel_rollout.configure(
        local=True, traces_exporter="none", metrics_exporter="otlp",
        endpoint="http://127.0.0.1:9", metric_export_interval_ms=3_600_000,
    )  # fmt: skip
    try:
        with rollout.tracer.trajectory("t", env="e"):
            pass
        assert rollout.processor.histograms.waiting == 1
        rollout.force_flush(timeout_s=1)  # a collection (its export fails: nothing listens)
        assert rollout.processor.histograms.waiting == 0
    finally:
        rollout.shutdown(timeout_s=1)
