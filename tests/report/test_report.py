"""``otel-rollout report``: trace files written here, Jaeger and Tempo APIs, filters, bad input.

Trace files are written by the tests themselves, either by hand (exact nanoseconds) or by
``configure()``'s real file pipeline, so nothing here needs skyrl_gym.
"""

from __future__ import annotations

import base64
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from urllib.parse import urlsplit

import pytest
from _otlp_lines import line as _line
from _otlp_lines import span as _span

from otel_rollout import attributes as A
from otel_rollout import configure, summarize
from otel_rollout.cli import main
from otel_rollout.report import (
    RawSpan,
    ReadResult,
    TraceAssembler,
    read_source,
    read_spans_file,
    read_trace_file,
)
from otel_rollout.report._model import (
    LOSS_BAD_LINE,
    LOSS_DUPLICATE,
    LOSS_EVICTED,
    LOSS_INCOMPLETE,
    LOSS_INVERTED,
    LOSS_MISSING_START,
)

T0 = 1_700_000_000_000_000_000  # ns


# --- writing trace files by hand -------------------------------------------------------------


def _trajectory(trace, *, start=T0, e2e=100, phases=(("llm", 10, 40), ("env", 40, 70)),
                env="gsm8k", model="m", traj_id=None):  # fmt: skip
    """Phase spans (offsets in ns from ``start``), then the root: the order a file has."""
    root = trace * 1000
    out = [
        _span(trace, root + i + 1, root, phase, start + s, start + e, **{A.PHASE: phase})
        for i, (phase, s, e) in enumerate(phases)
    ]
    out.append(_span(trace, root, None, "trajectory", start, start + e2e,
                     **{A.TRAJECTORY_ID: traj_id or f"t{trace}", A.ENV_CLASS: env,
                        A.GEN_AI_REQUEST_MODEL: model}))  # fmt: skip
    return out


def _write(path, *lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _json_report(capsys, *args):
    rc = main(["report", *args, "--format", "json"])
    captured = capsys.readouterr()
    out = json.loads(captured.out) if captured.out.strip() else None
    return rc, out, captured.err


# --- a file from the real pipeline -----------------------------------------------------------


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """A trace file written by configure()'s file pipeline, and its online breakdowns."""
    out = tmp_path_factory.mktemp("real")
    online = []
    rollout = configure(local=True, traces_exporter="file", metrics_exporter="none",
                        output_dir=out, on_breakdown=online.append,
                        summary_stream=io.StringIO())  # fmt: skip
    for i in range(6):
        env = "text2sql" if i % 2 else "gsm8k_multi_turn"
        with rollout.tracer.trajectory(f"t{i}", env=env, model="sim") as traj:
            with traj.env_setup():
                pass
            for _ in range(2):
                with traj.generate():
                    pass
                with traj.env_step():
                    pass
            with traj.env_teardown():
                pass
            if i:  # one trajectory without a reward
                traj.set_reward(i / 4)
    assert rollout.shutdown(timeout_s=10)
    return rollout.trace_file, online


def test_real_trace_file_recomputes_online_breakdowns_to_the_nanosecond(real):
    path, online = real
    got = {t.breakdown.trace_id: t.breakdown for t in read_trace_file(path).trajectories}
    assert set(got) == {b.trace_id for b in online}
    for b in online:
        assert dict(got[b.trace_id].nanos) == dict(b.nanos)
        assert got[b.trace_id].turns == b.turns == 2


def test_report_json_matches_the_online_summary(real, capsys):
    path, online = real
    rc, out, _ = _json_report(capsys, str(path))
    assert rc == 0 and out["trajectories"] == 6 and out["incomplete"] == 0
    assert out["losses"] == {}
    assert out["generate/reward_mean"] == pytest.approx(sum(range(1, 6)) / 4 / 5)
    for k, v in summarize(online).items():
        assert out[k] == pytest.approx(v, abs=1e-12)


def test_filters(real, capsys):
    path, _ = real
    assert _json_report(capsys, str(path), "--env", "text2sql")[1]["trajectories"] == 3
    rc, out, err = _json_report(capsys, str(path), "--model", "nope")
    assert rc == 1 and out["trajectories"] == 0 and out["found"] == 6
    assert "none of the 6 trajectories matches the filters" in err
    late = "2999-01-01T00:00:00"
    assert _json_report(capsys, str(path), "--since", late)[1]["trajectories"] == 0
    assert _json_report(capsys, str(path), "--until", late)[1]["trajectories"] == 6


def test_table_and_pictures(real, capsys, tmp_path):
    pytest.importorskip("rich")
    pytest.importorskip("matplotlib")
    path, _ = real
    assert main(["report", str(path), "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "text2sql" in out and "slowest" in out
    assert (tmp_path / "breakdown.png").exists() and (tmp_path / "breakdown.html").exists()


def test_missing_cli_extra_message(monkeypatch, real):
    import sys

    monkeypatch.setitem(sys.modules, "rich", None)
    with pytest.raises(SystemExit, match=r"otel-rollout\[cli\]"):
        main(["report", str(real[0])])


# --- exact accounting from hand-written files ------------------------------------------------


def test_hand_written_trajectory_in_exact_nanoseconds(tmp_path):
    f = _write(tmp_path / "t.jsonl", _line(_trajectory(1)))
    (t,) = read_trace_file(f).trajectories
    assert dict(t.breakdown.nanos) == {
        "llm": 30, "env": 30, "env_setup": 0, "env_teardown": 0, "other": 40, "e2e": 100,
        "env_queue": 0, "finish_session": 0,
    }  # fmt: skip
    assert t.breakdown.env_class == "gsm8k" and t.breakdown.turns == 1 and t.service == "svc"


def test_band_option_moves_a_custom_phase(tmp_path, capsys):
    f = _write(tmp_path / "t.jsonl",
               _line(_trajectory(1, phases=(("llm", 0, 10), ("reward", 10, 60)))))  # fmt: skip
    _, out, _ = _json_report(capsys, str(f))
    assert out["generate/trajectory_time_other_mean"] == pytest.approx(90e-9)
    _, out, _ = _json_report(capsys, str(f), "--band", "reward=env")
    assert out["generate/trajectory_time_env_mean"] == pytest.approx(50e-9)


# --- several files, globs, rotation ----------------------------------------------------------


def test_several_files_and_a_glob_with_two_matches(tmp_path, capsys):
    a = _write(tmp_path / "traces-a.jsonl", _line(_trajectory(1)))
    b = _write(tmp_path / "traces-b.jsonl", _line(_trajectory(2)), _line(_trajectory(3)))
    assert _json_report(capsys, str(a), str(b))[1]["trajectories"] == 3
    rc, out, _ = _json_report(capsys, str(tmp_path / "traces-*.jsonl"))
    assert rc == 0 and out["trajectories"] == 3


def test_trajectory_split_across_rotated_files_is_put_back_together(tmp_path):
    spans = _trajectory(1)
    _write(tmp_path / "traces-1.jsonl", _line(spans[:-1]))
    _write(tmp_path / "traces-2.jsonl", _line(spans[-1:]))
    from otel_rollout.report import read_sources

    res = read_sources([str(tmp_path / "traces-*.jsonl")])
    (t,) = res.trajectories
    assert t.breakdown.nanos["llm"] == 30 and res.losses == {}


# --- bad input: warned about, counted, never a traceback -------------------------------------


def test_bad_line_in_the_middle_is_skipped_with_file_and_line(tmp_path, capsys):
    f = _write(tmp_path / "t.jsonl", _line(_trajectory(1)), '{"resourceSpans": [{"sco',
               _line(_trajectory(2)))  # fmt: skip
    rc, out, err = _json_report(capsys, str(f))
    assert rc == 0 and out["trajectories"] == 2
    assert f"{f}:2: line skipped: invalid JSON" in err
    assert out["losses"] == {LOSS_BAD_LINE: 1}


def test_batch_line_written_twice_counts_once(tmp_path, capsys):
    line = _line(_trajectory(1, phases=(("llm", 0, 10), ("llm", 20, 30))))
    f = _write(tmp_path / "t.jsonl", line, line)
    _, out, _ = _json_report(capsys, str(f))
    assert out["trajectories"] == 1
    assert out["generate/trajectory_time_llm_mean"] == pytest.approx(20e-9)
    assert out["losses"] == {LOSS_DUPLICATE: 3}
    (t,) = read_trace_file(f).trajectories
    assert t.breakdown.turns == 2


def test_duplicate_phase_span_id_does_not_add_a_turn(tmp_path):
    spans = _trajectory(1)
    f = _write(tmp_path / "t.jsonl", _line([spans[0], *spans]))
    res = read_trace_file(f)
    assert res.trajectories[0].breakdown.turns == 1 and res.losses == {LOSS_DUPLICATE: 1}


def test_impossible_spans_are_rejected_and_counted(tmp_path, capsys):
    no_start = _trajectory(1)
    del no_start[-1]["startTimeUnixNano"]
    inverted = _trajectory(2, phases=(("llm", 50, 10),))
    f = _write(tmp_path / "t.jsonl", _line(no_start), _line(inverted))
    rc, out, _ = _json_report(capsys, str(f))
    # the root without a start is no trajectory (its phases make it incomplete); the
    # inverted phase is dropped and its trajectory counts with no llm time
    assert rc == 0 and out["trajectories"] == 1
    assert out["generate/trajectory_time_llm_max"] == 0.0
    assert out["losses"] == {LOSS_MISSING_START: 1, LOSS_INVERTED: 1, LOSS_INCOMPLETE: 1}
    assert main(["report", str(f)]) == 0
    text = capsys.readouterr().out
    assert "1 spans rejected: end before start" in text
    assert "1 spans rejected: missing start time" in text


def test_band_must_name_a_band(tmp_path, capsys):
    f = _write(tmp_path / "t.jsonl", _line(_trajectory(1)))
    with pytest.raises(SystemExit) as exc:
        main(["report", str(f), "--band", "llm=lllm"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "'lllm' is not a band; expected one of llm, env, env_setup, env_teardown, other" in err
    with pytest.raises(SystemExit):
        main(["report", str(f), "--band", "llm"])


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e300", "-5", "0001-01-01", "yesterday"])
def test_since_must_be_a_time(tmp_path, capsys, value):
    f = _write(tmp_path / "t.jsonl", _line(_trajectory(1)))
    with pytest.raises(SystemExit) as exc:
        main(["report", str(f), "--since", value])
    assert exc.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_empty_file_says_it_holds_no_trajectories(tmp_path, capsys):
    f = _write(tmp_path / "empty.jsonl")
    rc, out, err = _json_report(capsys, str(f))
    assert rc == 1 and out["trajectories"] == 0
    assert "no trajectories in the input" in err
    assert main(["report", str(f)]) == 1
    assert "no trajectories in the input" in capsys.readouterr().out


@pytest.mark.parametrize(
    "doc",
    ['{"resourceSpans": ["x"]}', '{"data": "x"}', '{"data": [1]}', "[1, 2]", '"x"',
     '{"hello": 1}'],
)  # fmt: skip
def test_wrong_shape_lines_are_skipped_with_a_one_line_warning(tmp_path, capsys, doc):
    f = _write(tmp_path / "t.jsonl", doc, _line(_trajectory(1)))
    rc, out, err = _json_report(capsys, str(f))
    assert rc == 0 and out["trajectories"] == 1 and out["losses"] == {LOSS_BAD_LINE: 1}
    (warning,) = err.strip().splitlines()
    assert warning.startswith(f"otel-rollout report: warning: {f}:1: not OTLP")


def test_a_span_that_cannot_be_read_is_rejected_and_the_rest_of_its_line_read(tmp_path, capsys):
    bad = {"traceId": 5, "spanId": "x"}
    doc = json.loads(_line(_trajectory(1)))
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"].insert(0, bad)
    f = _write(tmp_path / "t.jsonl", json.dumps(doc))
    rc, out, _ = _json_report(capsys, str(f))
    assert rc == 0 and out["trajectories"] == 1
    assert out["losses"] == {"spans rejected: unreadable (a bad id or time)": 1}


def test_wrong_shape_json_file_is_a_one_line_error(tmp_path, capsys):
    f = tmp_path / "trace.json"
    f.write_text('{\n  "data": "x"\n}\n')
    rc = main(["report", str(f)])
    err = capsys.readouterr().err
    assert rc == 3 and len(err.strip().splitlines()) == 1 and "not OTLP" in err


def test_unreadable_inputs_exit_3(tmp_path, capsys):
    assert main(["report", str(tmp_path / "missing.jsonl")]) == 3
    assert "missing.jsonl: cannot read" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "nothing-*.jsonl")]) == 3
    assert "no file matches" in capsys.readouterr().err


# --- bounded memory ----------------------------------------------------------------------------


def test_assembler_holds_a_bounded_number_of_spans_whatever_the_input_size():
    result = ReadResult()
    got = []
    asm = TraceAssembler(got.append, result, window_spans=20, max_buffered_spans=100)
    for i in range(1, 2001):
        for doc_span in _trajectory(i, start=T0 + i * 1000):
            (span,) = _spans_of(doc_span)
            asm.add(span)
    asm.finish()
    assert len(got) == 2000 and result.losses == {}
    assert asm.peak_buffered_spans <= 100
    assert all(t.breakdown.nanos["llm"] == 30 for t in got)


def test_a_full_read_buffer_finishes_the_oldest_trace_early_and_counts_it():
    result = ReadResult()
    got = []
    asm = TraceAssembler(got.append, result, window_spans=1000, max_buffered_spans=4)
    other = _span(99, 1, None, "GET /", T0, T0 + 5)  # another service's trace: no loss
    phases = _trajectory(1)[:-1]  # a trajectory whose root never comes
    for doc_span in [other, *phases, *_trajectory(2)]:
        (span,) = _spans_of(doc_span)
        asm.add(span)
    asm.finish()
    assert [t.breakdown.trajectory_id for t in got] == ["t2"]
    assert result.losses == {LOSS_EVICTED: 1, LOSS_INCOMPLETE: 1}


def _spans_of(span_doc) -> list[RawSpan]:
    from otel_rollout.report._documents import spans_from_document

    return spans_from_document(json.loads(_line([span_doc])))


# --- Jaeger and Tempo APIs ---------------------------------------------------------------------


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
                      "processes": {"p1": {"serviceName": "otel-rollout"}}}
                     for t, sp in traces.items()]}  # fmt: skip


def _b64(h):
    return base64.b64encode(bytes.fromhex(h)).decode()


class _Backend(BaseHTTPRequestHandler):
    jaeger: ClassVar[object] = {}
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


@pytest.fixture
def backend():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Backend)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_jaeger_and_tempo_urls(real, backend, capsys):
    path, online_list = real
    _Backend.jaeger = _jaeger_doc(read_spans_file(path))
    tempo = {}
    for d in (json.loads(ln) for ln in path.read_text().splitlines()):
        for rs in d.get("resourceSpans", ()):  # not the log lines (rewards)
            for ss in rs["scopeSpans"]:
                for sp in ss["spans"]:
                    sp = dict(sp, traceId=_b64(sp["traceId"]), spanId=_b64(sp["spanId"]))
                    if "parentSpanId" in sp:
                        sp["parentSpanId"] = _b64(sp["parentSpanId"])
                    tid = base64.b64decode(sp["traceId"]).hex()
                    doc = tempo.setdefault(
                        tid,
                        {"batches": [{"resource": rs["resource"], "scopeSpans": [{"spans": []}]}]},
                    )
                    doc["batches"][0]["scopeSpans"][0]["spans"].append(sp)  # fmt: skip
    _Backend.tempo = tempo
    online = {b.trace_id: b for b in online_list}
    jr = read_source(f"{backend}/api/traces?service=otel-rollout")
    assert len(jr.breakdowns) == 6
    for b in jr.breakdowns:  # Jaeger keeps microseconds
        o = online[b.trace_id]
        for band in (*A.ALL_BANDS, "e2e"):
            assert b.nanos[band] == pytest.approx(o.nanos[band], abs=5_000)
    tr = read_source(f"{backend}/api/search?tags=service.name%3Dotel-rollout")
    assert {b.trace_id: dict(b.nanos) for b in tr.breakdowns} == {
        t: dict(b.nanos) for t, b in online.items()
    }
    rc, out, _ = _json_report(capsys, f"{backend}/api/search?limit=20")
    assert rc == 0 and out["trajectories"] == 6


def test_a_span_tempo_answers_that_cannot_be_read_is_rejected_alone(backend, capsys):
    doc = json.loads(_line(_trajectory(1)))
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"].insert(0, {"traceId": 5, "spanId": "?"})
    _Backend.tempo = {format(1, "032x"): {"batches": doc["resourceSpans"]}}
    rc, out, _ = _json_report(capsys, f"{backend}/api/search?limit=20")
    assert rc == 0 and out["trajectories"] == 1
    assert out["losses"] == {"spans rejected: unreadable (a bad id or time)": 1}


@pytest.mark.parametrize("answer", [{"data": "x"}, {"data": [{"spans": "x"}]}, [1], "x"])
def test_wrong_shape_from_a_jaeger_url_is_a_one_line_error(backend, capsys, answer):
    _Backend.jaeger = answer
    rc = main(["report", f"{backend}/api/traces?service=x"])
    err = capsys.readouterr().err
    assert rc == 3 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"otel-rollout report: {backend}/api/traces?service=x: not OTLP")


def test_unreachable_backend_is_a_one_line_error(capsys):
    rc = main(["report", "http://127.0.0.1:9/api/traces?service=x"])
    err = capsys.readouterr().err
    assert rc == 3 and "request failed" in err and len(err.strip().splitlines()) == 1
