"""What a newcomer meets in the first hour: arguments checked with the valid values shown,
failures summarised by reason, hints that work for the protocol in use, one output folder,
--help with defaults, folders and several runs read as such, filters that say what is there."""

from __future__ import annotations

import asyncio
import io
import json
import logging

import pytest

from otel_rollout import attributes as A
from otel_rollout import configure
from otel_rollout.cli import DEMO_ENVS, build_parser, main
from otel_rollout.demo._hints import jaeger_hint, protocol, report_command
from otel_rollout.testing import make_test_env

# --- demo arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--concurrency", "0", "-n", "4"], "--concurrency: must be at least 1, got 0"),
        (["-n", "0"], "-n/--trajectories: must be at least 1, got 0"),
        (["-n", "-3"], "must be at least 1, got -3"),
        (["-n", "four"], "not an integer: 'four'"),
    ],
)
def test_demo_counts_below_one_are_refused_before_anything_runs(args, says, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", *args, "--output-dir", str(tmp_path / "out")])
    assert exc.value.code == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # no trace file for report to pick up


def test_a_mistyped_env_is_refused_and_the_error_lists_the_valid_ones(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--envs", "gsm8k,lcb", "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "unknown env class 'gsm8k'" in err and ",".join(DEMO_ENVS) in err


def test_failed_trajectories_are_summarised_by_reason(tmp_path):
    pytest.importorskip("skyrl_gym")
    from otel_rollout.demo._engine import SimEngine
    from otel_rollout.demo._run import run_demo_async
    from otel_rollout.report._verdict import failure_line

    class Broken(SimEngine):
        async def complete(self, chat, action):
            raise RuntimeError("engine went away")

    result = asyncio.run(run_demo_async(n=3, concurrency=2, envs=("gsm8k_multi_turn",),
                                        engine=Broken(seed=0), output_dir=tmp_path))  # fmt: skip
    assert result.errors == 3 and result.failures == {"RuntimeError: engine went away": 3}
    assert failure_line(result.failures) == (
        "failed: 3 trajectories: RuntimeError: engine went away (3)"
    )


# --- hints -------------------------------------------------------------------------------------


def test_the_jaeger_hint_publishes_both_ports_and_exports_over_grpc_by_default():
    lines = jaeger_hint({})
    text = "\n".join(lines)
    assert "-p 4317:4317 -p 4318:4318" in text
    grpc = text.index("OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4317")
    http = text.index("OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318")
    assert grpc < http and "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf" in text
    assert max(len(line) for line in lines) <= 80
    # the hint's default is configure()'s
    rollout = configure(local=True, traces_exporter="none", metrics_exporter="none")
    assert rollout.settings.protocol == protocol({}) == "grpc"
    rollout.shutdown()


def test_the_jaeger_hint_follows_the_protocol_in_use():
    text = "\n".join(jaeger_hint({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}))
    assert "4318" in text and "http://localhost:4317" not in text
    text = "\n".join(jaeger_hint({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json",
                                  "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}))  # fmt: skip
    assert "(http/json, in use)" in text
    set_ = jaeger_hint({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"})
    assert set_ == ["spans exported over OTLP (grpc) to http://collector:4317; the file is a copy"]


def test_the_report_command_is_one_short_line_for_this_run(tmp_path):
    import fnmatch
    from pathlib import Path

    # configure()'s files name the process too: the glob keeps the run only
    name = "traces-20261206-044753-88ea2a29dc2f-30195-2130ba.jsonl"
    cmd = report_command(Path("otel-rollout-output") / name)
    assert cmd == "otel-rollout report otel-rollout-output/traces-*-88ea2a29dc2f-*.jsonl"
    assert len("  " + cmd) <= 80
    rotated = "otel-rollout-output/" + name.replace(".jsonl", "_0001.jsonl")
    assert fnmatch.fnmatch(rotated, cmd.split()[-1])


# --- --help and the output folder --------------------------------------------------------------


def _help(command: str) -> str:
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices[command]  # the subcommand's parser
    return sub.format_help()


def test_help_shows_defaults(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    demo = _help("demo")
    for default in ("(default: 64)", "(default: 16)", "(default: otel-rollout-output)",
                    "(default: 0)", f"(default: {','.join(DEMO_ENVS)})",
                    "(default: sim)"):  # fmt: skip
        assert default in demo, default
    report = _help("report")
    assert "(default: env)" in report and "(default: table)" in report
    assert "(default: None)" not in report + demo


def test_demo_and_configure_share_one_default_folder():
    import inspect

    from otel_rollout._settings.table import DEFAULT_OUTPUT_DIR
    from otel_rollout.demo._run import run_demo_async

    demo_default = build_parser().parse_args(["demo"]).output_dir
    run_default = inspect.signature(run_demo_async).parameters["output_dir"].default
    assert str(demo_default) == str(run_default) == str(DEFAULT_OUTPUT_DIR)


# --- report inputs: folders, several runs, filters ---------------------------------------------


def _run(out, run_id, n, env="gsm8k_multi_turn"):
    rollout = configure(local=True, traces_exporter="file", metrics_exporter="none",
                        output_dir=out, run_id=run_id, summary_stream=io.StringIO())  # fmt: skip
    for i in range(n):
        with rollout.tracer.trajectory(f"{run_id}-{i}", env=env, model="sim") as traj:
            with traj.generate():
                pass
            with traj.env_step():
                pass
    assert rollout.shutdown(timeout_s=10)
    return rollout.trace_file


def test_a_folder_is_read_for_its_trace_files(tmp_path, capsys):
    trace_file = _run(tmp_path, "one", 3)
    rc = main(["report", str(tmp_path), "--format", "json"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["trajectories"] == 3
    old = tmp_path / "otel-rollout-demo"  # the folder older demos wrote
    old.mkdir()
    (old / trace_file.name).write_bytes(trace_file.read_bytes())
    (old / "breakdown.html").write_text("<html></html>")  # not a trace file: not read
    assert main(["report", str(old), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["trajectories"] == 3
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty)]) == 3
    err = capsys.readouterr().err
    assert "a folder with no trace files (traces-*.jsonl" in err and "Is a directory" not in err


def test_several_runs_are_said_and_grouped_by_run_on_request(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    _run(tmp_path, "first", 2)
    _run(tmp_path, "second", 3)
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "note: the input holds 2 runs (pooled; --by run splits them)"
    assert main(["report", str(tmp_path), "--by", "run"]) == 0
    out = capsys.readouterr().out
    rows = {ln.split()[0]: ln.split()[1] for ln in out.splitlines() if ln.strip()
            and ln.split()[0] in ("first", "second")}  # fmt: skip
    assert rows == {"first": "2", "second": "3"}
    assert " run " in next(ln for ln in out.splitlines() if "mean" in ln and "p90" in ln) + " "
    assert main(["report", str(tmp_path), "--by", "run", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == {"first": 2, "second": 3}


def test_a_filter_matching_nothing_lists_what_is_there(tmp_path, capsys):
    _run(tmp_path, "r", 2, env="gsm8k_multi_turn")
    _run(tmp_path, "s", 1, env="text2sql")
    assert main(["report", str(tmp_path), "--env", "gsm8k"]) == 1  # as for no trajectories
    out = capsys.readouterr().out
    assert "none of the 3 trajectories matches the filters" in out
    assert "--env 'gsm8k': env classes present: gsm8k_multi_turn (2), text2sql (1)" in out
    assert main(["report", str(tmp_path), "--service", "nope", "--format", "json"]) == 1
    err = capsys.readouterr().err
    assert "services present: otel-rollout (3)" in err


def test_jaeger_sources_default_to_configures_service_name(monkeypatch):
    from otel_rollout.report._sources import _jaeger_url, default_service

    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_ROLLOUT_SERVICE_NAME", raising=False)
    rollout = configure(local=True, traces_exporter="none", metrics_exporter="none")
    assert default_service() == rollout.settings.service_name == "otel-rollout"
    rollout.shutdown()
    assert "query.service_name=otel-rollout&" in _jaeger_url("http://j:16686", None, 0, 1)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "trainer")
    assert "query.service_name=trainer&" in _jaeger_url("http://j:16686", None, 0, 1)
    assert "query.service_name=x&" in _jaeger_url("http://j:16686", "x", 0, 1)


# --- the console exporter and OpenAI's token names ---------------------------------------------


def test_the_console_exporter_prints_the_shutdown_summary(capsys):
    summary = io.StringIO()
    rollout = configure(local=True, traces_exporter="console", metrics_exporter="none",
                        summary_stream=summary)  # fmt: skip
    with rollout.tracer.trajectory("c1", env="toy") as traj, traj.generate():
        pass
    assert rollout.shutdown(timeout_s=10)
    text = summary.getvalue()
    assert "otel-rollout: 1 trajectories" in text and "frac_time_in_env" in text
    assert "c1" in capsys.readouterr().out  # the tree itself went to stdout


def test_openai_usage_names_become_genai_usage(caplog):
    h = make_test_env()
    with h.tracer.trajectory("t", env="e") as traj:
        with traj.generate() as gen:
            gen.record(prompt_tokens=10, completion_tokens=5, total_tokens=15)
        with traj.generate() as gen, caplog.at_level(logging.WARNING):
            gen.record(prompt_tokens=3, completion_tokens=4, total_tokens=99)
        with traj.generate() as gen, caplog.at_level(logging.WARNING):
            gen.record(prompt_tokens=1, completion_tokens=1, total_tokens=7)  # not again
    gens = sorted((s for s in h.spans() if s.attributes.get(A.PHASE) == "llm"),
                  key=lambda s: s.start_time)  # fmt: skip
    h.shutdown()
    first, second, _ = gens
    assert first.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 10
    assert first.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 5
    assert second.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 3
    for s in gens:
        assert not {"prompt_tokens", "completion_tokens", "total_tokens"} & set(s.attributes)
    warned = [r for r in caplog.records if "total_tokens" in r.getMessage()]
    assert len(warned) == 1 and "99 is not input + output (3 + 4)" in warned[0].getMessage()


def test_a_tempo_base_url_searches_configures_service_name(monkeypatch, capsys):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs, urlsplit

    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_ROLLOUT_SERVICE_NAME", raising=False)
    asked = []

    class Tempo(BaseHTTPRequestHandler):
        def do_GET(self):
            parts = urlsplit(self.path)
            if parts.path == "/api/echo":
                body = b"echo"
            elif parts.path == "/api/search":
                asked.append(parse_qs(parts.query))
                body = b'{"traces": []}'
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Tempo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        assert main(["report", base, "--since", "1700000000", "--until", "1700000100"]) == 1
        assert asked[-1]["tags"] == ["service.name=otel-rollout"]
        assert (asked[-1]["start"], asked[-1]["end"]) == (["1700000000"], ["1700000100"])
        assert main(["report", base, "--service", "trainer", "--format", "json"]) == 1
        assert asked[-1]["tags"] == ["service.name=trainer"]
    finally:
        server.shutdown()
        server.server_close()
    assert "no trajectories in the input" in capsys.readouterr().out


def test_report_summarises_failed_trajectories_by_reason(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    rollout = configure(local=True, traces_exporter="file", metrics_exporter="none",
                        output_dir=tmp_path, summary_stream=io.StringIO())  # fmt: skip
    for i, exc in enumerate((KeyError("gsm8k"), KeyError("x"), TimeoutError(), None)):
        try:
            with rollout.tracer.trajectory(f"t{i}", env="e") as traj, traj.generate():
                if exc is not None:
                    raise exc
        except (KeyError, TimeoutError):
            pass
    assert rollout.shutdown(timeout_s=10)
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "failed: 3 trajectories: error: KeyError (2); error: TimeoutError (1)" in out


def test_by_run_and_baseline_together_are_refused_in_one_line(tmp_path, capsys):
    trace_file = _run(tmp_path, "one", 1)
    assert main(["report", str(trace_file), "--by", "run", "--baseline", str(trace_file)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "does not go with --by run" in err
