"""Spans lost before they reach the trace file are stated in it (loss records), and
``otel-rollout report`` on the file gives the same losses as the shutdown summary: real
``configure()`` in trace-file mode, a writer held so the queue overflows, files rotated
mid-run; and the reader on its own: two writers, rotation, repeated records."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json

import pytest
from _bursts import gate_trace_file
from _otel_env import clean_otel_env
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

import otel_rollout
from otel_rollout import attributes as A
from otel_rollout._export.tracefile import RotatingTraceFile, loss_record
from otel_rollout.cli import main as cli_main
from otel_rollout.report import read_sources


@pytest.fixture
def env(monkeypatch):
    clean_otel_env(monkeypatch)
    # a small queue: holding the writer overflows it
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "200")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "50")


@pytest.fixture
def gate(monkeypatch):
    """The trace file's writes wait while the gate is closed (``clear()``)."""
    return gate_trace_file(monkeypatch, open_=True)


async def trajectories(rollout: otel_rollout.Rollout, n: int) -> None:
    for i in range(n):
        async with rollout.tracer.trajectory(f"t{i}", env="losses") as traj, traj.generate():
            pass


def report_json(pattern: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["report", pattern, "--format", "json"]) == 0
    return json.loads(out.getvalue())


def test_report_states_the_losses_of_the_shutdown_summary(env, gate, tmp_path):
    summary = io.StringIO()
    rollout = otel_rollout.configure(local=True, output_dir=tmp_path, metrics_exporter="none",
                                     sample_ratio=1.0, summary_stream=summary,
                                     trace_file_max_mb=0.05)  # fmt: skip
    # Two overflows, the writer catching up between them and files rotating throughout.
    for _ in range(2):
        gate.clear()
        asyncio.run(trajectories(rollout, 300))
        assert rollout.export_stats.dropped_queue_full > 0
        gate.set()
        assert rollout.force_flush(timeout_s=60)
    lost_before_shutdown = rollout.export_stats.dropped
    assert rollout.shutdown(timeout_s=60)
    stats = rollout.export_stats
    assert stats.dropped == lost_before_shutdown  # none at shutdown itself
    expected = {why: n for why, n in stats.losses().items() if n}
    assert set(expected) == {"queue_full"}
    assert f"{stats.dropped} spans were not exported ({stats.dropped_queue_full} queue_full)" in (
        summary.getvalue()
    )

    f = rollout.trace_file
    files = sorted(f.parent.glob(f"{f.stem}*{f.suffix}"))
    assert len(files) > 2  # rotated mid-run
    records = 0
    for path in files:
        for line in path.read_text().splitlines():
            # every line, loss records included, is an OTLP ExportTraceServiceRequest
            json_format.Parse(line, ExportTraceServiceRequest())
            records += '"scopeSpans":[]' in line
    assert records >= len(files)  # each rotated file states the losses so far

    read = report_json(str(f.parent / f"{f.stem}*{f.suffix}"))
    assert read["export_losses"] == expected
    prefixed = {f"spans lost before the file: {why}": n for why, n in expected.items()}
    # where an overflow began between a trajectory's generate span and its root (the
    # writer took an odd number of spans before it was held), that trajectory has no root
    incomplete = "incomplete trajectories (no root span)"
    assert read["losses"].pop(incomplete, 0) <= 2  # one per overflow at most
    assert read["losses"] == prefixed
    # the file holds exactly the spans counted exported (the in-flight records, written
    # while trajectories run past its interval on a loaded machine, are log lines)
    spans = sum(
        len(ss["spans"])
        for path in files
        for line in path.read_text().splitlines()
        for rs in json.loads(line).get("resourceSpans", ())
        for ss in rs["scopeSpans"]
    )
    assert spans == stats.exported


def test_report_text_output_states_the_losses(env, gate, tmp_path, capsys):
    rollout = otel_rollout.configure(local=True, output_dir=tmp_path, metrics_exporter="none",
                                     sample_ratio=1.0, summary_stream=io.StringIO())  # fmt: skip
    gate.clear()
    asyncio.run(trajectories(rollout, 300))
    gate.set()
    assert rollout.shutdown(timeout_s=60)
    lost = rollout.export_stats.dropped_queue_full
    assert lost > 0
    capsys.readouterr()
    assert cli_main(["report", str(rollout.trace_file)]) == 0
    assert f"{lost} spans lost before the file: queue_full" in capsys.readouterr().out


def test_no_loss_no_record(env, tmp_path):
    rollout = otel_rollout.configure(local=True, output_dir=tmp_path, metrics_exporter="none",
                                     sample_ratio=1.0, summary_stream=io.StringIO())  # fmt: skip
    asyncio.run(trajectories(rollout, 20))
    assert rollout.shutdown(timeout_s=60)
    assert rollout.export_stats.dropped == 0
    text = rollout.trace_file.read_text()
    assert A.EXPORT_LOST_PREFIX not in text
    assert report_json(str(rollout.trace_file))["export_losses"] == {}


def _span_line(trace: int) -> str:
    tid = f"{trace:032x}"
    attrs = [{"key": A.TRAJECTORY_ID, "value": {"stringValue": f"t{trace}"}}]
    root = {"traceId": tid, "spanId": f"{trace:016x}", "name": "trajectory",
            "startTimeUnixNano": "1000", "endTimeUnixNano": "2000",
            "attributes": attrs}  # fmt: skip
    return json.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                          "scopeSpans": [{"spans": [root]}]}]})  # fmt: skip


def _record(writer: str | None, **losses: int) -> str:
    identity = {"service.instance.id": "inst", "process.pid": 7, "rollout.run.id": "run"}
    if writer is not None:
        identity[A.EXPORT_WRITER_ID] = writer
    return loss_record(identity, losses).decode().rstrip("\n")


def test_reader_keeps_each_writers_latest_counts_and_sums_writers(tmp_path):
    first = tmp_path / "traces-x.jsonl"
    second = tmp_path / "traces-x_0001.jsonl"
    first.write_text("\n".join([
        _span_line(1),
        _record("w1", queue_full=5),
        _record("w2", queue_full=1),
        _span_line(2),
        _record("w1", queue_full=9, export_failed=1),
        _span_line(2),  # a batch written twice: the reader's own duplicate count
    ]) + "\n")  # fmt: skip
    second.write_text("\n".join([
        _record("w1", queue_full=9, export_failed=1),  # the new file states them again
        _record("w2", queue_full=3),
        _record("w2", queue_full=3),  # a repeated record
        _record(None, after_shutdown=2),  # a writer without an id: its resource's identity
        _record(None, after_shutdown=4),
        _span_line(3),
    ]) + "\n")  # fmt: skip
    expected = {"after_shutdown": 4, "export_failed": 1, "queue_full": 12}
    result = read_sources([str(tmp_path / "traces-x*.jsonl")])
    assert result.export_losses == expected
    assert result.found == 3
    assert result.losses == {"duplicate spans ignored": 1}
    # read in the other order (the rotated file first): the latest counts still win
    result = read_sources([str(second), str(first)])
    assert result.export_losses == expected

    read = report_json(str(tmp_path / "traces-x*.jsonl"))
    assert read["export_losses"] == expected
    assert read["losses"] == {
        "duplicate spans ignored": 1,
        "spans lost before the file: after_shutdown": 4,
        "spans lost before the file: export_failed": 1,
        "spans lost before the file: queue_full": 12,
    }


def test_a_loss_record_is_written_when_the_counts_change(tmp_path):
    losses = {"queue_full": 0}
    writer = RotatingTraceFile(tmp_path / "t.jsonl")
    writer.record_losses(lambda: dict(losses), {"service.name": "s"})
    assert writer.force_flush()
    assert (tmp_path / "t.jsonl").read_text() == ""  # nothing lost, nothing written
    losses["queue_full"] = 3
    assert writer.force_flush()
    assert writer.force_flush()  # unchanged: not written again
    losses["queue_full"] = 5
    writer.shutdown()
    result = read_sources([str(tmp_path / "t.jsonl")], warn=pytest.fail)
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert len(lines) == 2
    assert result.export_losses == {"queue_full": 5}
    resource = json.loads(lines[0])["resourceSpans"][0]["resource"]["attributes"]
    keys = {kv["key"] for kv in resource}
    assert {"service.name", "process.pid", A.EXPORT_WRITER_ID,
            A.EXPORT_LOST_PREFIX + "queue_full"} <= keys  # fmt: skip
