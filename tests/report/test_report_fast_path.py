"""The report's fast reader (typed decoding) gives what the general reader gives, exactly.

Lines from the real file pipeline and odd lines written by hand are read both ways: the
same spans, or the fast reader hands the line to the general one; whole reports agree to
the nanosecond with the fast reader on and off.
"""

from __future__ import annotations

import json
import math

import pytest

from otel_rollout import configure
from otel_rollout.cli import main
from otel_rollout.report import _files
from otel_rollout.report._documents import parse_document
from otel_rollout.report._model import row_of
from otel_rollout.report._otlp_typed import WHOLE_SPAN_KEYS, typed_rows


def _write_run(folder, n=40):
    rollout = configure(local=True, output_dir=folder, metrics_exporter="none",
                        service_name="fast", run_id="r1")  # fmt: skip
    tracer = rollout.tracer
    with tracer.batch(1):
        for i in range(n):
            with tracer.trajectory(f"t{i}", env="e" if i % 2 else "f", model="m") as traj:
                with traj.env_setup():
                    pass
                for _ in range(3):
                    with traj.generate() as gen:
                        gen.record(input_tokens=5, output_tokens=7, finish_reasons=["stop"])
                    with traj.env_step():
                        pass
                traj.set_reward(0.25 * (i % 4))
                if i % 7 == 0:
                    traj.set_status("error")
    rollout.shutdown(10)
    return sorted(folder.rglob("*.jsonl"))


def _general(line):
    return parse_document(json.loads(line), "x")


def _same_rows(rows, spans):
    """The fast reader's rows are the general reader's spans as rows; a row without its
    whole span is one whose attributes the assembler reads no further than the phase."""
    assert len(rows) == len(spans)
    for row, span in zip(rows, spans, strict=True):
        expected = row_of(span)
        assert repr(row[:7]) == repr(expected[:7])  # repr: NaN equals itself this way
        if row[7] is None:
            assert WHOLE_SPAN_KEYS.isdisjoint(span.attributes)
        else:
            assert repr(row[7]) == repr(span)


def test_every_line_of_a_real_trace_file_reads_the_same_both_ways(tmp_path):
    lines = [ln for p in _write_run(tmp_path) for ln in p.read_bytes().splitlines() if ln]
    fast = 0
    for line in lines:
        rows = typed_rows(line)
        if rows is not None:
            fast += 1
            _same_rows(rows, _general(line))
    assert fast >= 1 and sum(len(_general(ln)) for ln in lines) > 40 * 8
    rows = [r for ln in lines for r in typed_rows(ln) or ()]
    assert any(r[7] is None for r in rows) and any(r[7] is not None for r in rows)


def _line(span=None, resource=None, **doc):
    sp = {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331",
          "parentSpanId": "00f067aa0ba902b7", "name": "generate", "kind": 3,
          "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000000000001000",
          "attributes": [{"key": "rollout.phase", "value": {"stringValue": "llm"}}],
          "status": {}}  # fmt: skip
    sp.update(span or {})
    rs = {"resource": resource if resource is not None else {"attributes": [
        {"key": "service.name", "value": {"stringValue": "s"}}]},
        "scopeSpans": [{"scope": {}, "spans": [sp]}]}  # fmt: skip
    return json.dumps({"resourceSpans": [rs], **doc}).encode()


ODD = {
    "ints as numbers": {
        "startTimeUnixNano": 1700000000000000000,
        "attributes": [{"key": "n", "value": {"intValue": 3}}],
    },
    "a value of each kind": {
        "attributes": [
            {"key": "s", "value": {"stringValue": ""}},
            {"key": "i", "value": {"intValue": "-9"}},
            {"key": "d", "value": {"doubleValue": 1.5}},
            {"key": "nan", "value": {"doubleValue": "NaN"}},
            {"key": "b", "value": {"boolValue": False}},
            {"key": "a", "value": {"arrayValue": {"values": [{"intValue": "1"}, {}]}}},
            {"key": "e", "value": {"arrayValue": {}}},
            {"key": "none"},
            {"key": "kv", "value": {"kvlistValue": {"values": []}}},
            {"key": "by", "value": {"bytesValue": "AAE="}},
        ]
    },
    "base64 ids": {
        "traceId": "CvdlGRbNQ92ESOshHIAxnA==",
        "spanId": "t61rcWkgMzE=",
        "parentSpanId": "APBnqguqArc=",
    },
    "upper-case hex": {"traceId": "0AF7651916CD43DD8448EB211C80319C"},
    "no parent, no end, no name": {"parentSpanId": None, "endTimeUnixNano": None, "name": None},
    "an error status": {"status": {"code": 2, "message": "x"}},
    "an error status by name": {"status": {"code": "STATUS_CODE_ERROR"}},
    "a null status": {"status": None},
    "an int64 beyond 64 bits": {
        "attributes": [{"key": "big", "value": {"intValue": "123456789012345678901234567890"}}]
    },
    "a float start": {"startTimeUnixNano": 1.7e18},
    "a bad int": {"endTimeUnixNano": "soon"},
    "a null value": {"attributes": [{"key": "k", "value": None}]},
    "a number as a key": {"attributes": [{"key": 5, "value": {"stringValue": "v"}}]},
    "a string as an int": {"attributes": [{"key": "k", "value": {"boolValue": "yes"}}]},
    "a bad id": {"spanId": "not an id!"},
    "a 0x span id": {"spanId": "0x00f067aa0ba902"},
    "a span id with spaces": {"spanId": "00f067aa 0ba902b"},
    "an upper-case span id": {"spanId": "B7AD6B7169203331"},
    "an unused bad int": {"attributes": [{"key": "n", "value": {"intValue": "many"}}]},
    "an unused bad double": {"attributes": [{"key": "d", "value": {"doubleValue": "x"}}]},
    "a bad int in an array": {
        "attributes": [{"key": "a", "value": {"arrayValue": {"values": [{"intValue": "x"}]}}}]
    },
    "an int with underscores": {"attributes": [{"key": "n", "value": {"intValue": "1_000"}}]},
    "a string zero end": {"endTimeUnixNano": "0"},
    "a phase not a string": {"attributes": [{"key": "rollout.phase", "value": {"intValue": 7}}]},
    "a repeated key": {
        "attributes": [
            {"key": "rollout.phase", "value": {"stringValue": "env"}},
            {"key": "rollout.phase", "value": {"stringValue": "llm"}},
        ]
    },
    "a trajectory root": {
        "parentSpanId": None,
        "attributes": [{"key": "rollout.trajectory.id", "value": {"stringValue": "t"}}],
    },
    "engine timings": {
        "attributes": [{"key": "gen_ai.latency.time_in_queue", "value": {"doubleValue": 0.5}}]
    },
}


@pytest.mark.parametrize("case", list(ODD))
def test_odd_lines_read_the_same_both_ways(case):
    line = _line(ODD[case])
    try:
        expected = _general(line)
    except Exception as exc:  # the general reader rejects it: so must the fast one
        assert typed_rows(line) is None, exc
        return
    rows = typed_rows(line)
    if rows is not None:
        _same_rows(rows, expected)


@pytest.mark.parametrize("doc", [
    {"batches": []}, {"data": []}, {"trace": {}}, {"result": {}},
])  # fmt: skip
def test_other_documents_go_to_the_general_reader(doc):
    assert typed_rows(_line(**doc)) is None


@pytest.mark.parametrize("line", [
    b"[]", b"not json", b'{"resourceSpans": null}', b'{"resourceSpans": []}',
    b'{"resourceSpans": [{"resource": null, "scopeSpans": []}]}',
    b'{"resourceSpans": [{"resource": {"attributes": [{"key": "rollout.export.lost.queue_full",'
    b' "value": {"intValue": "3"}}]}, "scopeSpans": []}]}',
    b'{"resourceSpans": [{"instrumentationLibrarySpans": [{"spans": []}]}]}',
    "\ufeff{}".encode("utf-16"),
])  # fmt: skip
def test_lines_without_spans_or_odd_go_to_the_general_reader(line):
    assert typed_rows(line) is None


def test_a_nan_double_reads_as_nan():
    line = _line(
        {
            "attributes": [
                {"key": "d", "value": {"doubleValue": "NaN"}},
                {"key": "rollout.trajectory.id", "value": {"stringValue": "t"}},
            ]
        }
    )
    assert math.isnan(typed_rows(line)[0][7].attributes["d"])


def _report(files, capsys):
    assert main(["report", *map(str, files), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_report_is_the_same_to_the_nanosecond_with_the_fast_reader_on_and_off(
    tmp_path, capsys, monkeypatch
):
    files = _write_run(tmp_path, n=60)
    first = files[0].read_bytes().splitlines()[0]
    with files[0].open("ab") as f:  # a bad line and an odd one among the good ones
        f.write(b"not json\n" + _line({"startTimeUnixNano": 1.7e18}) + b"\n")
        f.write(first + b"\n")  # every span again: late ones, or duplicates
        f.write(_line({"endTimeUnixNano": "1600000000000000000"}) + b"\n")  # inverted
        f.write(_line({"endTimeUnixNano": None}) + b"\n")  # no end
    fast = _report(files, capsys)
    monkeypatch.setattr(_files, "typed_rows", lambda line: None)
    general = _report(files, capsys)
    assert fast == general
    assert fast["trajectories"] == 60 and len(fast["losses"]) >= 4, fast["losses"]


def test_a_time_past_2262_is_a_counted_loss_not_a_crash(tmp_path, capsys):
    files = _write_run(tmp_path, n=3)
    root = {
        "spanId": "00f067aa0ba902b7",
        "parentSpanId": "",
        "name": "trajectory",
        "endTimeUnixNano": "1700000000000009000",
        "attributes": [{"key": "rollout.trajectory.id", "value": {"stringValue": "t"}}],
    }
    with files[0].open("ab") as f:  # OTLP times are uint64: past 2**63 - 1 ns is 2262
        f.write(_line({"endTimeUnixNano": "18446744073709551615"}) + b"\n")  # its llm phase
        f.write(_line({"spanId": "00f067aa0ba902b8", "startTimeUnixNano": str(2**63)}) + b"\n")
        f.write(_line(root) + b"\n")  # fmt: skip
    got = _report(files, capsys)
    assert got["trajectories"] == 4
    assert got["losses"]["spans rejected: time past the year 2262"] == 2
