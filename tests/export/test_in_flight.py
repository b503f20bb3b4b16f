"""The in-flight record: what a snapshot of the processor holds, the log record that
carries it (never a span: trace backends list only real traces), that it is written only
while trajectories run (and once more when they stopped), into the trace file as an OTLP
JSON logs line that ``report`` skips and ``top`` reads, or over OTLP (on by default) as
log records, where a receiver that takes no logs costs one warning; off when the interval
is 0."""

from __future__ import annotations

import json
import logging

import pytest
from _otel_env import clean_otel_env
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource

import otel_rollout
from otel_rollout import attributes as A
from otel_rollout._export.in_flight import (
    COUNT,
    EVENT_NAME,
    TRAJECTORY_IDS,
    InFlightRecorder,
    from_attributes,
    record_attributes,
)
from otel_rollout._export.log_file import EVENT_NAME_ATTRIBUTE, TraceFileLogExporter
from otel_rollout._export.tracefile import RotatingTraceFile
from otel_rollout._processing.breakdown_processor import in_flight
from otel_rollout.live import Ingest, LiveState
from otel_rollout.report import read_trace_file
from otel_rollout.testing import make_test_env
from otel_rollout.testing.receiver import OTLPReceiver


def event_name(record) -> str | None:
    """A record's event name: its own field, or the attribute an SDK before 1.35 has."""
    return getattr(record, "event_name", None) or (record.attributes or {}).get(
        EVENT_NAME_ATTRIBUTE
    )


def file_event_name(record: dict) -> str | None:
    """The same for an OTLP JSON log record in the trace file."""
    attrs = {a["key"]: a["value"] for a in record.get("attributes", ())}
    return record.get("eventName") or attrs.get(EVENT_NAME_ATTRIBUTE, {}).get("stringValue")


class Keep:
    """A log record exporter that keeps what it is given."""

    def __init__(self) -> None:
        self.records: list = []

    def export(self, batch):
        self.records.extend(r.log_record for r in batch)

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


def recorder(snapshot, exporter, resource=None) -> InFlightRecorder:
    provider = LoggerProvider(resource=resource or Resource.create({}), shutdown_on_exit=False)
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    return InFlightRecorder(snapshot, provider, interval_s=3600)


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
    kept = Keep()
    rec = recorder(lambda: in_flight(env.processor), kept)
    assert not rec.write_record()  # nothing runs
    with env.tracer.trajectory("x", env="e") as t, t.generate():
        assert rec.write_record()
    assert rec.write_record()  # count 0: the last ones ended
    assert not rec.write_record()
    assert [event_name(r) for r in kept.records] == [EVENT_NAME, EVENT_NAME]
    assert [r.attributes["rollout.in_flight.count"] for r in kept.records] == [1, 0]
    assert env.span_exporter.get_finished_spans()[-1].name == "trajectory"  # no span of its own
    rec.shutdown()
    assert not rec.write_record()  # after shutdown: never


def test_the_trace_file_gets_log_lines_that_report_skips_and_top_reads(tmp_path):
    env = make_test_env()
    path = tmp_path / "traces-x.jsonl"
    trace_file = RotatingTraceFile(path)
    resource = Resource.create({"service.instance.id": "p1", "rollout.run.id": "r"})
    rec = recorder(lambda: in_flight(env.processor), TraceFileLogExporter(trace_file), resource)
    with env.tracer.trajectory("t", env="e") as t, t.generate():
        assert rec.write_record()
    trace_file.export(env.span_exporter.get_finished_spans())
    rec.shutdown()  # the last word: none runs now
    trace_file.shutdown()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    logs, _last = [doc for doc in lines if "resourceLogs" in doc]
    (record,) = logs["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
    assert file_event_name(record) == EVENT_NAME
    attrs = {a["key"]: a["value"] for a in record["attributes"]}
    assert attrs["rollout.in_flight.count"] == {"intValue": "1"}
    assert attrs["rollout.in_flight.trajectory_ids"]["arrayValue"]["values"] == [
        {"stringValue": "t"}
    ]
    assert attrs["rollout.in_flight.phases"]["arrayValue"]["values"] == [{"stringValue": "llm"}]
    read = read_trace_file(path)
    assert read.found == 1 and read.spans == 2 and read.losses == {}  # the log line skipped
    ingest = Ingest(LiveState())
    for doc in lines:
        assert ingest.document(doc)
    assert ingest.records == 2
    assert ingest.state.processes["p1"].in_flight.count == 0  # the latest record


def test_configure_writes_the_record_and_counts_it_among_no_spans(tmp_path, monkeypatch):
    clean_otel_env(monkeypatch)
    rollout = otel_rollout.configure(local=True, output_dir=tmp_path)
    with rollout.tracer.trajectory("t", env="e") as t, t.generate():
        assert rollout._recorder.write_record()
    assert rollout.shutdown()
    records = [
        r
        for doc in map(json.loads, rollout.trace_file.read_text().splitlines())
        for rl in doc.get("resourceLogs", ())
        for sl in rl["scopeLogs"]
        for r in sl["logRecords"]
    ]
    assert records and {file_event_name(r) for r in records} == {EVENT_NAME}
    assert rollout.export_stats.exported == 2  # the root and its generate


def test_rewards_go_into_the_trace_file_as_evaluation_events_report_and_top_skip(
    tmp_path, monkeypatch
):
    clean_otel_env(monkeypatch)
    monkeypatch.setenv("OTEL_ROLLOUT_IN_FLIGHT_INTERVAL_S", "0")  # a reward's record only
    rollout = otel_rollout.configure(local=True, output_dir=tmp_path)
    with rollout.tracer.trajectory("t", env="e") as t:
        t.set_reward(1.0, label="correct")
    assert rollout.force_flush()  # the log records too
    assert A.EVENT_EVALUATION_RESULT in rollout.trace_file.read_text()
    assert rollout.shutdown()
    lines = [json.loads(x) for x in rollout.trace_file.read_text().splitlines()]
    (logs,) = [doc for doc in lines if "resourceLogs" in doc]
    (record,) = logs["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
    attrs = {a["key"]: a["value"] for a in record["attributes"]}
    name = record.get("eventName") or attrs["event.name"]["stringValue"]  # SDK < 1.35: attr
    assert name == A.EVENT_EVALUATION_RESULT
    assert record["traceId"] == t.trace_id
    assert record["spanId"] == format(t.span.get_span_context().span_id, "016x")
    assert attrs[A.GEN_AI_EVALUATION_SCORE_VALUE] == {"doubleValue": 1.0}
    read = read_trace_file(rollout.trace_file)
    assert read.found == 1 and read.spans == 1 and read.losses == {}  # the log line skipped
    assert read.trajectories[0].breakdown.score == 1.0  # from the root's attribute
    ingest = Ingest(LiveState())
    for doc in lines:
        assert ingest.document(doc)
    assert ingest.records == 0 and ingest.result.losses == {}  # not an in-flight record


def test_interval_zero_writes_no_record(tmp_path, monkeypatch):
    clean_otel_env(monkeypatch)
    monkeypatch.setenv("OTEL_ROLLOUT_IN_FLIGHT_INTERVAL_S", "0")
    rollout = otel_rollout.configure(local=True, output_dir=tmp_path)
    with rollout.tracer.trajectory("t") as t, t.generate():
        pass
    rollout.shutdown()
    assert EVENT_NAME not in rollout.trace_file.read_text()
    assert A.TRAJECTORY_ID in rollout.trace_file.read_text()


PROTOCOLS = ["grpc", "http/protobuf"]


def _otlp(rx: OTLPReceiver, protocol: str):
    endpoint = rx.grpc_endpoint if protocol == "grpc" else rx.http_endpoint
    return otel_rollout.configure(local=True, endpoint=endpoint, protocol=protocol,
                                  metrics_exporter="none")  # fmt: skip


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_over_otlp_the_record_is_on_and_arrives_as_a_log_record(monkeypatch, protocol):
    clean_otel_env(monkeypatch)
    with OTLPReceiver() as rx:
        rollout = _otlp(rx, protocol)
        assert rollout.settings.in_flight_interval_s == 1.0
        with rollout.tracer.trajectory("t", env="e") as t, t.generate():
            assert rollout._recorder.write_record()
            t.set_reward(1.0)
        assert rollout.shutdown(timeout_s=10)
        (reward,) = [r for r in rx.logs_received() if r.event_name == A.EVENT_EVALUATION_RESULT]
        assert (reward.trace_id, reward.attributes[A.GEN_AI_EVALUATION_SCORE_VALUE]) == (
            t.trace_id,
            1.0,
        )
        records = [r for r in rx.logs_received() if r.event_name == EVENT_NAME]
        assert [r.attributes[COUNT] for r in records][:1] == [1]
        assert records[0].attributes[TRAJECTORY_IDS] == ("t",)
        assert records[0].resource["service.instance.id"]
        assert {s.name for s in rx.spans()} == {"trajectory", "generate"}  # none of its own


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_receiver_without_logs_costs_one_warning_and_is_asked_less_often(
    monkeypatch, caplog, protocol
):
    clean_otel_env(monkeypatch)
    with OTLPReceiver() as rx:
        rx.logs = False  # a Collector with no logs pipeline: 404 / UNIMPLEMENTED
        rollout = _otlp(rx, protocol)
        with rollout.tracer.trajectory("t", env="e") as t, t.generate():
            for _ in range(10):
                rollout._recorder.write_record()
                rollout._logger_provider.force_flush()  # each record a batch of its own
        # tried at the 1st, then after 2 and 4 dropped unsent: the 4th and 9th
        assert rx.log_requests == 3
        assert rollout.shutdown(timeout_s=10)  # the last record: dropped unsent
        assert rx.log_requests == 3
        assert rollout.export_stats.exported == 2  # the spans went all the same
    said = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1, [r.getMessage() for r in said]
    port = rx.grpc_port if protocol == "grpc" else rx.http_port
    assert "takes no logs" in said[0].getMessage() and f":{port}" in said[0].getMessage()


def test_a_dead_logs_endpoint_costs_one_warning(monkeypatch, caplog):
    clean_otel_env(monkeypatch)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "200")
    with OTLPReceiver() as rx:
        pass  # stopped: nothing listens on its ports
    rollout = _otlp(rx, "http/protobuf")
    with rollout.tracer.trajectory("t", env="e") as t, t.generate():
        for _ in range(4):
            rollout._recorder.write_record()
    rollout.shutdown(timeout_s=5)
    logs = [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and "log records" in r.getMessage()]  # fmt: skip
    assert len(logs) == 1 and "is down" in logs[0]
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry.exporter")
                and "logs" in r.getMessage().lower()]  # fmt: skip
