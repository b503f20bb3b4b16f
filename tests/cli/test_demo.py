"""The demo end to end on real skyrl-gym envs, and the OpenAI engine's traceparent."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

pytest.importorskip("skyrl_gym")
pytest.importorskip("matplotlib")
pytest.importorskip("rich")

from otel_rollout import attributes as A
from otel_rollout.cli import main
from otel_rollout.demo._engine import OpenAIEngine
from otel_rollout.demo._run import run_demo, run_demo_async
from otel_rollout.demo._workload import GSM8K_LOOP_WORK_S
from otel_rollout.report import read_spans_file, read_trace_file


def test_demo_cli_end_to_end(tmp_path, capsys):
    rc = main(["demo", "-n", "8", "--concurrency", "4", "--output-dir", str(tmp_path),
               "--no-progress"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert "gsm8k_multi_turn" in out and "text2sql" in out and "lcb" in out
    assert "batches (seconds; shares of the slots)" in out and "straggler" in out  # batch view
    assert (tmp_path / "batches.html").exists() and (tmp_path / "batch-0.png").exists()
    assert "trace file:" in out and "Jaeger" in out
    # past 80 columns only a long path, whole on a line of its own
    assert all(str(tmp_path) in line for line in out.splitlines() if len(line) > 80)
    assert "trace file:\n  " in out
    assert (tmp_path / "breakdown.png").stat().st_size > 1000
    page = (tmp_path / "breakdown.html").read_text()
    assert "data:image/png;base64," in page and "<table>" in page
    files = list(tmp_path.glob("*.jsonl"))
    assert files
    res = read_trace_file(files[0])
    assert len(res.trajectories) == 8
    assert {t.breakdown.env_class for t in res.trajectories} == {
        "gsm8k_multi_turn", "text2sql", "lcb",
    }  # fmt: skip
    assert len({t.breakdown.batch_id for t in res.trajectories}) == 1


def test_report_equals_online_breakdowns(tmp_path):
    result = asyncio.run(run_demo_async(n=8, concurrency=4, output_dir=tmp_path))
    assert result.errors == 0 and len(result.breakdowns) == 8
    offline = {b.trace_id: b for b in read_trace_file(result.trace_file).breakdowns}
    for b in result.breakdowns:
        o = offline[b.trace_id]
        assert dict(o.nanos) == dict(b.nanos)
        assert (o.turns, o.env_steps, o.env_class, o.model, o.status) == (
            b.turns, b.env_steps, b.env_class, b.model, b.status,
        )  # fmt: skip


def _figures(result):
    return {
        b.trajectory_id: (dict(b.nanos), dict(b.waits_nanos), b.turns, b.env_steps, b.score)
        for b in result.breakdowns
    }


def test_a_seed_gives_the_same_figures_on_every_run(tmp_path):
    first = run_demo(n=12, concurrency=4, seed=3, output_dir=tmp_path / "a")
    again = run_demo(n=12, concurrency=4, seed=3, output_dir=tmp_path / "b")
    other = run_demo(n=12, concurrency=4, seed=4, output_dir=tmp_path / "c")
    assert first.errors == 0 and len(first.breakdowns) == 12
    assert _figures(first) == _figures(again)
    assert _figures(first) != _figures(other)
    assert first.batch.wall_ns == again.batch.wall_ns


def test_simulated_latencies_are_exact_on_the_demos_clock(tmp_path):
    result = run_demo(n=6, concurrency=3, output_dir=tmp_path)
    work_ns = round(GSM8K_LOOP_WORK_S * 1e9)
    for b in result.breakdowns:
        bands = ("llm", "env", "env_setup", "env_teardown", "other")
        assert sum(b.nanos[k] for k in bands) == b.nanos["e2e"]
        if b.env_class == "gsm8k_multi_turn":  # reward code on the loop: 8 ms a step, exactly
            assert b.waits_nanos["loop_own"] == b.env_steps * work_ns


class _Handler(BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert body["messages"]
        _Handler.seen.append(self.headers.get("traceparent", ""))
        data = json.dumps({
            "model": body["model"],
            "choices": [{"message": {"role": "assistant", "content": "#### 72"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 3},
        }).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_openai_engine_propagates_traceparent(tmp_path):
    _Handler.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        engine = OpenAIEngine(f"http://127.0.0.1:{server.server_port}", "tiny")
        result = asyncio.run(
            run_demo_async(n=2, concurrency=2, envs=("gsm8k_multi_turn",), engine=engine,
                           output_dir=tmp_path)
        )  # fmt: skip
    finally:
        server.shutdown()
    assert result.errors == 0 and _Handler.seen
    spans = read_spans_file(result.trace_file)
    gen = {(s.trace_id, format(s.span_id, "016x")) for s in spans if s.name == A.SPAN_GENERATE}
    for tp in _Handler.seen:
        _, trace_id, span_id, _ = tp.split("-")
        assert (trace_id, span_id) in gen
    gens = [s for s in spans if s.name == A.SPAN_GENERATE]
    assert all(s.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 3 for s in gens)


def test_demo_with_an_otlp_endpoint_exports_and_still_writes_the_file(tmp_path, monkeypatch):
    from otel_rollout.testing.receiver import OTLPReceiver

    with OTLPReceiver() as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.grpc_endpoint)
        monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
        result = asyncio.run(run_demo_async(n=4, concurrency=2, output_dir=tmp_path))
        roots = [s for s in rx.spans() if s.name == "trajectory"]
    assert len(roots) == 4
    offline = {b.trace_id: dict(b.nanos) for b in read_trace_file(result.trace_file).breakdowns}
    assert offline == {b.trace_id: dict(b.nanos) for b in result.breakdowns}
    assert {r.trace_id for r in roots} == set(offline)
