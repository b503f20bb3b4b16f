"""The in-flight record: what a snapshot of the processor holds, the span that carries it,
that it is written only while trajectories run (and once more when they stopped), never
counted among the user's spans, skipped by ``report``, and off when the interval is 0."""

from __future__ import annotations

import json
import time

from _otel_env import clean_otel_env
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

import otel_rollout
from otel_rollout import attributes as A
from otel_rollout._export.in_flight import (
    SPAN_NAME,
    InFlightExporter,
    from_attributes,
    record_attributes,
)
from otel_rollout._processing.in_flight import in_flight
from otel_rollout.report import read_trace_file
from otel_rollout.testing import make_test_env


class Keep(SpanExporter):
    def __init__(self) -> None:
        self.batches: list[list] = []

    def export(self, spans):
        self.batches.append(list(spans))
        return SpanExportResult.SUCCESS


def test_snapshot_counts_every_running_trajectory_and_lists_the_oldest_with_its_phase():
    env = make_test_env()
    tracer, processor = env.tracer, env.processor
    with tracer.trajectory("old", env="a") as t1:
        with t1.env_setup():
            pass
        with t1.generate(), tracer.trajectory("new", env="b") as t2, t2.env_step():
            snap = in_flight(processor, max_listed=1)
            assert snap.count == 2
            assert snap.by_env == {"a": 1, "b": 1}
            assert snap.in_llm_by_env == {"a": 1} and snap.in_llm == 1
            (row,) = snap.listed  # the oldest only
            assert (row.trajectory_id, row.env_class, row.phase) == ("old", "a", "llm")
            assert row.start_ns < row.phase_start_ns
            both = in_flight(processor, max_listed=5)
            assert [r.phase for r in both.listed] == ["llm", "env"]
    assert in_flight(processor).count == 0


def test_record_attributes_read_back_to_the_same_snapshot():
    env = make_test_env()
    with env.tracer.trajectory("x", env="e") as t, t.generate():
        snap = in_flight(env.processor)
    assert from_attributes(snap.time_ns, record_attributes(snap)) == snap
    assert from_attributes(1, {"rollout.in_flight.trace_ids": ("a",)}) is None


def test_records_only_while_trajectories_run_and_a_last_one_when_they_stopped():
    env = make_test_env()
    inner = Keep()
    exporter = InFlightExporter(inner, lambda: in_flight(env.processor), Resource.create({}),
                                interval_s=3600)  # fmt: skip
    assert not exporter.write_record()  # nothing runs
    with env.tracer.trajectory("x", env="e") as t, t.generate():
        assert exporter.write_record()
    assert exporter.write_record()  # count 0: the last ones ended
    assert not exporter.write_record()
    spans = [s for batch in inner.batches for s in batch]
    assert [s.name for s in spans] == [SPAN_NAME, SPAN_NAME]
    assert [s.attributes["rollout.in_flight.count"] for s in spans] == [1, 0]
    assert spans[0].parent is None and spans[0].start_time == spans[0].end_time
    assert spans[0].context.trace_flags.sampled
    exporter.shutdown()
    assert not exporter.write_record()  # after shutdown: never


def test_trace_file_gets_records_that_report_skips_and_export_counts_leave_out(
    tmp_path, monkeypatch
):
    clean_otel_env(monkeypatch)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
    monkeypatch.setenv("OTEL_ROLLOUT_IN_FLIGHT_INTERVAL_S", "0.05")
    rollout = otel_rollout.configure(local=True, output_dir=tmp_path)
    with rollout.tracer.trajectory("t", env="e") as t, t.generate():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and SPAN_NAME.encode() not in (
            rollout.trace_file.read_bytes()
        ):
            time.sleep(0.02)
    rollout.shutdown()
    lines = rollout.trace_file.read_text().splitlines()
    records = [json.loads(x) for x in lines if f'"{SPAN_NAME}"' in x]
    assert records, "no in-flight record in the trace file"
    attrs = {a["key"]: a["value"] for a in
             records[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]}  # fmt: skip
    assert attrs["rollout.in_flight.count"] == {"intValue": "1"}
    assert attrs["rollout.in_flight.trajectory_ids"]["arrayValue"]["values"] == [
        {"stringValue": "t"}
    ]
    assert attrs["rollout.in_flight.phases"]["arrayValue"]["values"] == [{"stringValue": "llm"}]
    res = records[0]["resourceSpans"][0]["resource"]["attributes"]
    assert any(a["key"] == "rollout.run.id" for a in res)
    read = read_trace_file(rollout.trace_file)
    assert read.found == 1 and read.spans == 2  # the root and its generate: records skipped
    assert rollout.export_stats.exported == 2


def test_interval_zero_writes_no_record(tmp_path, monkeypatch):
    clean_otel_env(monkeypatch)
    monkeypatch.setenv("OTEL_ROLLOUT_IN_FLIGHT_INTERVAL_S", "0")
    rollout = otel_rollout.configure(local=True, output_dir=tmp_path)
    with rollout.tracer.trajectory("t") as t, t.generate():
        pass
    rollout.shutdown()
    assert SPAN_NAME not in rollout.trace_file.read_text()
    assert A.TRAJECTORY_ID in rollout.trace_file.read_text()


def test_otlp_default_is_off(monkeypatch):
    clean_otel_env(monkeypatch)
    rollout = otel_rollout.configure(local=True, endpoint="http://127.0.0.1:9")
    try:
        assert rollout.settings.traces_exporter == "otlp"
        assert rollout.settings.in_flight_interval_s == 0
    finally:
        rollout.shutdown(timeout_s=1)


def test_a_forked_child_exports_even_if_the_parent_was_writing_a_record_at_the_fork():
    import os

    inner = Keep()
    exporter = InFlightExporter(inner, lambda: in_flight(make_test_env().processor),
                                Resource.create({}), interval_s=3600)  # fmt: skip
    with exporter._lock:  # the parent's record thread mid-write
        pid = os.fork()
        if pid == 0:  # the child: its export must not wait for the parent's lock
            code = 0 if exporter.export([]) is SpanExportResult.SUCCESS else 1
            os._exit(code)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.02)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise AssertionError("the child's export waited for the parent's lock")
    assert os.waitstatus_to_exitcode(status) == 0
    exporter.shutdown()
