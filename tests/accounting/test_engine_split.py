"""The engine split of llm time in ``report``: vLLM's ``llm_request`` spans joined to our
generate spans, from a trace file and from a Jaeger query API, exact in nanoseconds."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from otel_rollout import attributes as A
from otel_rollout import summarize
from otel_rollout.report import read_trace_file
from otel_rollout.report._sources import read_source

TRACE = "0af7651916cd43dd8448eb211c80319c"
S = 1_000_000_000
T0 = 1_700_000_000 * S  # microsecond-aligned, so Jaeger's microseconds lose nothing

# (span id, parent, name, start s, end s, attributes, service)
SPANS = [
    (
        1,
        None,
        "trajectory",
        0,
        10,
        {
            A.TRAJECTORY_ID: "t-1",
            A.ENV_CLASS: "gsm8k",
            A.LOOP_OWN_NS: 30_000_000,
            A.LOOP_BLOCKED_NS: 5_000_000,
            A.LOOP_STALL_NS: 20_000_000,
        },
        "rl",
    ),
    # a generate span without timings: vLLM's server span below it is joined to it
    (2, 1, "generate", 1, 3, {A.PHASE: A.PHASE_LLM}, "rl"),
    (
        3,
        2,
        "llm_request",
        1.25,
        2.875,
        {
            A.VLLM_TIME_IN_QUEUE: 0.25,
            A.VLLM_TIME_IN_PREFILL: 0.5,
            A.VLLM_TIME_IN_DECODE: 1.0,
            A.VLLM_E2E: 1.75,
        },
        "vllm",
    ),
    # a generate span with its own timings (the in-process integration wrote them): they
    # win, the engine span under it is not counted twice
    (
        4,
        1,
        "generate",
        5,
        6,
        {
            A.PHASE: A.PHASE_LLM,
            A.VLLM_TIME_IN_QUEUE: 0.125,
            A.VLLM_TIME_IN_PREFILL: 0.125,
            A.VLLM_TIME_IN_DECODE: 0.5,
        },
        "rl",
    ),
    (5, 4, "llm_request", 5.1, 5.9, {A.VLLM_TIME_IN_QUEUE: 9.0}, "vllm"),
    # an LLM judge inside env.step is env time: its engine timings are not llm's
    (6, 1, "env_step", 7, 8, {A.PHASE: A.PHASE_ENV}, "rl"),
    (7, 6, "generate", 7.25, 7.5, {A.PHASE: A.PHASE_LLM}, "rl"),
    (8, 7, "llm_request", 7.25, 7.5, {A.VLLM_TIME_IN_QUEUE: 0.125}, "vllm"),
]
WANT = {
    "llm": 3 * S,
    "llm_queue": 375_000_000,
    "llm_prefill": 625_000_000,
    "llm_decode": 1_500_000_000,
    "llm_client": 3 * S - 2_500_000_000,
}


def _ns(t: float) -> int:
    return T0 + round(t * S)


def _otlp_value(v):
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"stringValue": str(v)}


def _otlp_doc() -> dict:
    by_service: dict[str, list] = {}
    for sid, parent, name, s, e, attrs, service in SPANS:
        span = {
            "traceId": TRACE,
            "spanId": format(sid, "016x"),
            "name": name,
            "startTimeUnixNano": str(_ns(s)),
            "endTimeUnixNano": str(_ns(e)),
            "attributes": [{"key": k, "value": _otlp_value(v)} for k, v in attrs.items()],
        }
        if parent is not None:
            span["parentSpanId"] = format(parent, "016x")
        by_service.setdefault(service, []).append(span)
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": n}}]},
                "scopeSpans": [{"spans": spans}],
            }
            for n, spans in by_service.items()
        ]
    }


def _jaeger_type(v) -> str:
    return "int64" if isinstance(v, int) else "float64" if isinstance(v, float) else "string"


def _jaeger_doc() -> dict:
    spans = []
    for sid, parent, name, s, e, attrs, service in SPANS:
        refs = []
        if parent is not None:
            refs = [{"refType": "CHILD_OF", "traceID": TRACE, "spanID": format(parent, "016x")}]
        spans.append({
            "traceID": TRACE, "spanID": format(sid, "016x"), "operationName": name,
            "references": refs, "startTime": _ns(s) // 1000,
            "duration": (_ns(e) - _ns(s)) // 1000, "processID": service,
            "tags": [
                {"key": k, "type": _jaeger_type(v), "value": v}
                for k, v in attrs.items()
            ],
        })  # fmt: skip
    processes = {p: {"serviceName": p} for p in ("rl", "vllm")}
    return {"data": [{"traceID": TRACE, "spans": spans, "processes": processes}]}


def _check(bd) -> None:
    assert {k: {**bd.nanos, **bd.waits_nanos}[k] for k in WANT} == WANT
    assert sum(bd.nanos[b] for b in A.ALL_BANDS) == bd.nanos["e2e"] == 10 * S
    assert bd.turns == 2
    assert dict(bd.waits_nanos) == {
        **{k: v for k, v in WANT.items() if k != "llm"},
        "loop_own": 30_000_000, "loop_blocked": 5_000_000, "loop_stall": 20_000_000,
    }  # fmt: skip


def test_report_joins_llm_request_spans_from_a_trace_file(tmp_path):
    f = tmp_path / "trace.jsonl"
    f.write_text(json.dumps(_otlp_doc()) + "\n")
    (bd,) = read_trace_file(f).breakdowns
    _check(bd)
    s = summarize([bd])
    assert s["generate/trajectory_time_llm_queue_mean"] == pytest.approx(0.375)
    assert s["generate/trajectory_time_llm_client_max"] == pytest.approx(0.5)


class _Jaeger(BaseHTTPRequestHandler):
    doc: ClassVar[dict] = {}

    def do_GET(self):
        data = json.dumps(_Jaeger.doc).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_report_joins_llm_request_spans_from_jaeger():
    _Jaeger.doc = _jaeger_doc()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Jaeger)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        (bd,) = read_source(url, service="rl").breakdowns
    finally:
        server.shutdown()
        server.server_close()
    _check(bd)


def test_without_engine_spans_the_split_is_unknown(tmp_path):
    doc = _otlp_doc()
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            ss["spans"] = [
                sp
                for sp in ss["spans"]
                if sp["name"] != "llm_request" and sp["spanId"] != format(4, "016x")
            ]
    f = tmp_path / "trace.jsonl"
    f.write_text(json.dumps(doc) + "\n")
    (bd,) = read_trace_file(f).breakdowns
    assert bd.llm_queue is None and "llm_client" not in bd.waits_nanos
    assert "generate/trajectory_time_llm_queue_mean" not in summarize([bd])


def test_report_shows_the_llm_split_and_the_loop_culprits(tmp_path, capsys):
    from otel_rollout.cli import main

    f = tmp_path / "trace.jsonl"
    f.write_text(json.dumps(_otlp_doc()) + "\n")
    assert main(["report", str(f), "--verbose"]) == 0  # the split is among the full tables
    out = capsys.readouterr().out
    assert "llm split" in out and "llm_prefill" in out and "0.625" in out
    assert "top loop culprits" in out and TRACE in out and "0.020" in out
    assert main(["report", str(f), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["generate/trajectory_time_llm_decode_mean"] == pytest.approx(1.5)
    assert doc["generate/trajectory_time_loop_blocked_max"] == pytest.approx(0.005)
