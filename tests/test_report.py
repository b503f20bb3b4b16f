"""``otel-rollout report``: files, Jaeger and Tempo APIs, filters, bad input."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from urllib.parse import urlsplit

import pytest

pytest.importorskip("skyrl_gym")

from otel_rollout import _attributes as A
from otel_rollout.cli import main
from otel_rollout.demo._run import run_demo_async
from otel_rollout.report import read_spans_file


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    return asyncio.run(run_demo_async(n=6, concurrency=3, output_dir=out))


def _json_report(capsys, *args):
    rc = main(["report", *args, "--format", "json"])
    captured = capsys.readouterr()
    return rc, (json.loads(captured.out) if rc == 0 else None), captured.err


def test_report_file_json_matches_online_summary(demo, capsys):
    from otel_rollout._summary import summarize

    rc, out, _ = _json_report(capsys, str(demo.trace_file))
    assert rc == 0 and out["trajectories"] == 6 and out["incomplete"] == 0
    online = summarize(demo.breakdowns)
    for k, v in online.items():
        assert out[k] == pytest.approx(v, abs=1e-12)


def test_report_table_and_pictures(demo, capsys, tmp_path):
    assert main(["report", str(demo.trace_file), "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "text2sql" in out and "slowest" in out
    assert (tmp_path / "breakdown.png").exists() and (tmp_path / "breakdown.html").exists()


def test_filters(demo, capsys):
    _, out, _ = _json_report(capsys, str(demo.trace_file), "--env", "text2sql")
    assert out["trajectories"] == 3
    _, out, _ = _json_report(capsys, str(demo.trace_file), "--model", "nope")
    assert out["trajectories"] == 0
    _, out, _ = _json_report(capsys, str(demo.trace_file), "--since", "2999-01-01T00:00:00")
    assert out["trajectories"] == 0
    _, out, _ = _json_report(capsys, str(demo.trace_file), "--until", "2999-01-01T00:00:00")
    assert out["trajectories"] == 6


def test_bad_line_names_file_and_line(tmp_path, demo, capsys):
    lines = demo.trace_file.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(['{"resourceSpans": []}', "{not json", *lines]) + "\n")
    rc, _, err = _json_report(capsys, str(bad))
    assert rc == 2 and f"{bad}:2" in err and "invalid JSON" in err
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text('{"hello": 1}\n')
    rc, _, err = _json_report(capsys, str(wrong))
    assert rc == 2 and f"{wrong}:1" in err and "OTLP" in err
    rc, _, err = _json_report(capsys, str(tmp_path / "missing.jsonl"))
    assert rc == 2 and "missing.jsonl" in err


def test_truncated_last_line_and_incomplete(tmp_path, demo, capsys):
    spans_lines = demo.trace_file.read_text().splitlines()
    # drop every root span: their traces become incomplete, not silently dropped
    docs = [json.loads(ln) for ln in spans_lines]
    roots = set()
    for d in docs:
        for rs in d["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                keep = []
                for sp in ss["spans"]:
                    if any(kv["key"] == A.TRAJECTORY_ID for kv in sp["attributes"]) and (
                        len(roots) < 2
                    ):
                        roots.add(sp["traceId"])
                        continue
                    keep.append(sp)
                ss["spans"] = keep
    # an unrelated service's trace, ignored
    docs.append({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "other"}}]}, "scopeSpans": [{"spans": [
        {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "GET /",
         "startTimeUnixNano": "1", "endTimeUnixNano": "2", "attributes": []}]}]}]})  # fmt: skip
    f = tmp_path / "t.jsonl"
    text = (
        "\n".join(json.dumps(d) for d in docs) + "\n" + spans_lines[0][: len(spans_lines[0]) // 2]
    )
    f.write_text(text)
    with pytest.warns(UserWarning, match="truncated"):
        rc, out, err = _json_report(capsys, str(f))
    assert rc == 0
    assert out["incomplete"] == 2 and out["trajectories"] == 4
    for tid in roots:
        assert tid in err
    rc = main(["report", str(f)])
    assert "2 incomplete" in capsys.readouterr().out


def _jaeger_doc(spans):
    traces = {}
    for s in spans:
        tags = [{"key": k, "type": "string", "value": v} for k, v in s.attributes.items()]
        refs = []
        if s.parent_id is not None:
            refs = [{"refType": "CHILD_OF", "traceID": s.trace_id,
                     "spanID": format(s.parent_id, "016x")}]  # fmt: skip
        traces.setdefault(s.trace_id, []).append({
            "traceID": s.trace_id, "spanID": format(s.span_id, "016x"),
            "operationName": s.name, "references": refs,
            "startTime": s.start_ns // 1000,
            "duration": s.end_ns // 1000 - s.start_ns // 1000,
            "tags": tags, "processID": "p1",
        })  # fmt: skip
    return {"data": [{"traceID": t, "spans": sp,
                      "processes": {"p1": {"serviceName": "otel-rollout-demo"}}}
                     for t, sp in traces.items()]}  # fmt: skip


def _b64(h):
    return base64.b64encode(bytes.fromhex(h)).decode()


class _Backend(BaseHTTPRequestHandler):
    jaeger: ClassVar[dict] = {}
    tempo: ClassVar[dict] = {}

    def do_GET(self):
        path = urlsplit(self.path).path
        if path == "/api/traces":
            body = _Backend.jaeger
        elif path == "/api/search":
            body = {"traces": [{"traceID": t} for t in _Backend.tempo]}
        elif path.startswith("/api/traces/"):
            body = _Backend.tempo[path.rsplit("/", 1)[1]]
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_jaeger_and_tempo_urls(demo, capsys):
    spans = read_spans_file(demo.trace_file)
    _Backend.jaeger = _jaeger_doc(spans)
    tempo = {}
    for d in (json.loads(ln) for ln in demo.trace_file.read_text().splitlines()):
        for rs in d["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for sp in ss["spans"]:
                    sp = dict(sp, traceId=_b64(sp["traceId"]), spanId=_b64(sp["spanId"]))
                    if "parentSpanId" in sp:
                        sp["parentSpanId"] = _b64(sp["parentSpanId"])
                    tid = bytes.fromhex(base64.b64decode(sp["traceId"]).hex()).hex()
                    doc = tempo.setdefault(
                        tid,
                        {"batches": [{"resource": rs["resource"], "scopeSpans": [{"spans": []}]}]},
                    )
                    doc["batches"][0]["scopeSpans"][0]["spans"].append(sp)  # fmt: skip
    _Backend.tempo = tempo
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Backend)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        from otel_rollout.report import read_source

        online = {b.trace_id: b for b in demo.breakdowns}
        jr = read_source(f"{base}/api/traces?service=otel-rollout-demo")
        assert len(jr.breakdowns) == 6
        for b in jr.breakdowns:  # Jaeger keeps microseconds
            o = online[b.trace_id]
            for band in (*A.ALL_BANDS, "e2e"):
                assert b.nanos[band] == pytest.approx(o.nanos[band], abs=5_000)
        tr = read_source(f"{base}/api/search?tags=service.name%3Dotel-rollout-demo")
        assert {b.trace_id: dict(b.nanos) for b in tr.breakdowns} == {
            t: dict(b.nanos) for t, b in online.items()
        }
        rc, out, _ = _json_report(capsys, f"{base}/api/search?limit=20")
        assert rc == 0 and out["trajectories"] == 6
    finally:
        server.shutdown()


def test_missing_cli_extra_message(monkeypatch, demo):
    import sys

    monkeypatch.setitem(sys.modules, "rich", None)
    with pytest.raises(SystemExit, match=r"otel-rollout\[cli\]"):
        main(["report", str(demo.trace_file)])
