"""The verdict comes first and everything fits the terminal: at most five lines that say what
bound the run, the tail, the stragglers and the losses; tables measured on a real terminal
(a pseudo-terminal of 80 and of 200 columns); pictures with legends; HTML that links."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios

import numpy as np
import pytest

from otel_rollout import attributes as A
from otel_rollout.report._verdict import bound_line, failure_line, loss_line, verdict

U = 1_000_000_000
T0 = 1_700_000_000 * U


def _kv(key, value):
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": str(value)}}


def _batch_file(path, n=40, *, long_ids=False):
    """One batch of ``n`` trajectories (llm then env, in whole seconds), the last few slow
    in env: an env-bound tail. Long trajectory ids and env classes test the folding."""
    spans = []
    batch_root = 7_000_000
    spans_batch = {"traceId": format(999, "032x"), "spanId": format(batch_root, "016x"),
                   "name": "batch", "startTimeUnixNano": str(T0),
                   "endTimeUnixNano": str(T0 + 100 * U),
                   "attributes": [_kv(A.BATCH_ID, "b-0"), _kv(A.STEP, 0)]}  # fmt: skip
    for k in range(n):
        slow = k >= n - 4
        llm, env = 2, (30 if slow else 1)
        tid, root = format(k + 1, "032x"), (k + 1) * 10
        t = T0 + (k % 4) * U
        env_class = "a_rather_long_environment_class_name" if long_ids else "code"
        traj_id = f"{env_class}-trajectory-number-{k:04d}" if long_ids else f"t{k}"
        for i, (p, s, e) in enumerate((("llm", 0, llm), ("env", llm, llm + env))):
            spans.append({"traceId": tid, "spanId": format(root + i + 1, "016x"),
                          "parentSpanId": format(root, "016x"), "name": p,
                          "startTimeUnixNano": str(t + s * U), "endTimeUnixNano": str(t + e * U),
                          "attributes": [_kv(A.PHASE, p)]})  # fmt: skip
        spans.append({"traceId": tid, "spanId": format(root, "016x"), "name": "trajectory",
                      "startTimeUnixNano": str(t), "endTimeUnixNano": str(t + (llm + env) * U),
                      "attributes": [_kv(A.TRAJECTORY_ID, traj_id), _kv(A.ENV_CLASS, env_class),
                                     _kv(A.BATCH_ID, "b-0"), _kv(A.STEP, 0)]})  # fmt: skip
    spans.append(spans_batch)
    doc = {"resourceSpans": [{"resource": {"attributes": [_kv("service.name", "svc")]},
                              "scopeSpans": [{"spans": spans}]}]}  # fmt: skip
    path.write_text(json.dumps(doc) + "\n")
    return path


# --- the verdict as pure functions -------------------------------------------------------------


def _groups(**bands):
    cols = {b: np.asarray(v, dtype=float) for b, v in bands.items()}
    for b in ("llm", "env", "env_setup", "env_teardown", "other", "env_queue"):
        cols.setdefault(b, np.zeros(len(cols["e2e"])))
    return [("x", len(cols["e2e"]), cols)]


@pytest.mark.parametrize(
    ("bands", "says"),
    [
        ({"e2e": [10, 10], "llm": [8, 6], "env": [2, 4]}, "engine-bound: llm 70%"),
        ({"e2e": [10], "llm": [2], "env": [8], "env_queue": [4]},
         "env-bound: env 80% of trajectory time (engine 20%); env_queue is 50% of env"),
        ({"e2e": [10], "llm": [2], "env_setup": [5], "env_teardown": [1], "env": [2]},
         "setup-bound: env_setup+env_teardown 60%"),
        ({"e2e": [10], "llm": [2], "other": [8]}, "bookkeeping-bound: other 80%"),
    ],
)  # fmt: skip
def test_the_first_line_names_what_bound_the_run(bands, says):
    assert bound_line(_groups(**bands)).startswith(says)


def test_failures_and_losses_in_one_line_each():
    assert failure_line({}) is None
    line = failure_line({"KeyError: 'x'": 1, "TimeoutError: ": 5, "a": 1, "b": 1})
    assert line.startswith("failed: 8 trajectories: TimeoutError:  (5); KeyError: 'x' (1)")
    assert line.endswith("2 more reasons")
    assert loss_line({}, 12) == "export: no spans lost (12 exported)"
    assert loss_line({"queue_full": 3, "timeout": 9}) == "losses: 9 timeout, 3 queue_full"


def test_the_verdict_is_at_most_five_lines_of_80_columns(tmp_path):
    from otel_rollout.report import read_sources
    from otel_rollout.report._aggregate import ReportData

    data = ReportData()
    result = read_sources([str(_batch_file(tmp_path / "t.jsonl", long_ids=True))], emit=data.add)
    lines = verdict(data.groups(), data.batches.analyses(result.batches), data.slowest(),
                    failures={"RuntimeError: " + "x" * 200: 2}, losses={"timeout": 1})  # fmt: skip
    assert len(lines) == 5 and all(len(ln) <= 80 for ln in lines)
    assert lines[0].startswith("env-bound: env")
    assert lines[1].startswith("batch step 0: tail ") and "on env" in lines[1]
    assert lines[2].startswith("stragglers: 4 after the p90 finish; slowest:")
    assert lines[3].startswith("failed: 2 trajectories") and lines[4] == "losses: 1 timeout"


# --- on a real terminal ------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def _on_a_terminal(columns: int, *args: str) -> list[str]:
    """``otel-rollout ARGS`` on a pseudo-terminal ``columns`` wide (no COLUMNS variable:
    the width is the terminal's), its output lines without escape codes."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen([sys.executable, "-m", "otel_rollout.cli", *args], stdin=slave,
                            stdout=slave, stderr=slave, env=env, close_fds=True)  # fmt: skip
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            proc.kill()
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    text = _ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))
    return [ln.rstrip("\r") for ln in text.replace("\r\n", "\n").split("\n")]


@pytest.mark.parametrize("columns", [80, 200])
def test_report_on_a_real_terminal_leads_with_the_verdict_and_fits(tmp_path, columns):
    pytest.importorskip("rich")
    path = _batch_file(tmp_path / "t.jsonl", long_ids=True)
    lines = _on_a_terminal(columns, "report", str(path))
    assert lines[0].startswith("env-bound: env"), lines[:6]
    blank = lines.index("")
    assert blank <= 5  # the verdict: at most five lines, then the tables
    assert max(len(ln) for ln in lines) <= columns
    text = "\n".join(lines)
    assert format(40, "032x") in text  # the slowest trajectory's trace id, unbroken
    assert "more tables: --verbose" in text
    if columns == 200:  # wide enough: ids are not folded
        assert "a_rather_long_environment_class_name-trajectory-number-0039" in text
    verbose = _on_a_terminal(columns, "report", str(path), "--verbose")
    assert max(len(ln) for ln in verbose) <= columns
    assert any("straggler" in ln for ln in verbose) and any("frac env" in ln for ln in verbose)


# --- pictures and pages ------------------------------------------------------------------------


def test_every_panel_has_a_legend_and_env_queue_is_drawn_as_waiting_in_env(tmp_path):
    pytest.importorskip("matplotlib")
    from otel_rollout.report import read_sources
    from otel_rollout.report._aggregate import ReportData
    from otel_rollout.report._pictures import COLORS, _phase_style, figure

    data = ReportData()
    read_sources([str(_batch_file(tmp_path / "t.jsonl"))], emit=data.add)
    fig = figure(data)
    assert fig.axes and all(ax.get_legend() is not None for ax in fig.axes)
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert "env_queue (waiting for a thread, counted in env)" in labels
    queue = _phase_style("env_queue")
    assert queue["facecolor"] == COLORS["env"] and queue["hatch"]
    assert _phase_style("reward") == {"color": COLORS["other"]}
    assert _phase_style("llm") == {"color": COLORS["llm"]}


def test_html_pages_link_trace_ids_keep_tables_unwrapped_and_have_a_time_axis(tmp_path):
    pytest.importorskip("matplotlib")
    from otel_rollout.cli import main

    path = _batch_file(tmp_path / "t.jsonl")
    out = tmp_path / "pics"
    assert main(["report", str(path), "--output-dir", str(out), "--jaeger-url", "http://j"]) == 0
    page = (out / "breakdown.html").read_text()
    assert f'href="http://j/trace/{format(40, "032x")}"' in page
    assert "white-space:nowrap" in page and 'class="scroll"' in page
    batches = (out / "batches.html").read_text()
    ticks = re.findall(r'<text x="[0-9.]+" y="[0-9.]+" text-anchor="middle">([0-9.]+)</text>',
                       batches)  # fmt: skip
    assert len(ticks) >= 3 and ticks[0] == "0"
    assert "seconds since the batch started" in batches and "white-space:nowrap" in batches


def test_incomplete_trace_ids_are_capped_on_the_terminal_and_all_in_json(tmp_path, capsys):
    from otel_rollout.cli import main

    path = _batch_file(tmp_path / "t.jsonl", n=8)
    orphans = [{"traceId": format(10_000 + k, "032x"), "spanId": format(k + 1, "016x"),
                "parentSpanId": format(99, "016x"), "name": "llm",
                "startTimeUnixNano": str(T0), "endTimeUnixNano": str(T0 + U),
                "attributes": [_kv(A.PHASE, "llm")]} for k in range(30)]  # fmt: skip
    doc = {"resourceSpans": [{"resource": {"attributes": []},
                              "scopeSpans": [{"spans": orphans}]}]}  # fmt: skip
    with path.open("a") as f:
        f.write(json.dumps(doc) + "\n")
    assert main(["report", str(path)]) == 0
    brief = capsys.readouterr().out
    assert "30 incomplete trajectories (no root span)" in brief
    assert format(10_000, "032x") not in brief
    assert main(["report", str(path), "--verbose"]) == 0
    verbose = capsys.readouterr().out
    assert sum(format(10_000 + k, "032x") in verbose for k in range(30)) == 10
    assert "and 20 more (see --format json)" in verbose
    assert main(["report", str(path), "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert len(json.loads(captured.out)["incomplete_trace_ids"]) == 30
    assert len(captured.err.strip().splitlines()) == 1 and "30 incomplete" in captured.err


def test_the_demo_on_an_80_column_terminal_leads_with_the_verdict(tmp_path):
    pytest.importorskip("skyrl_gym")
    pytest.importorskip("matplotlib")
    lines = _on_a_terminal(80, "demo", "-n", "6", "--concurrency", "3", "--no-progress",
                           "--output-dir", str(tmp_path / "out"))  # fmt: skip
    assert re.match(r"(engine|env|setup|bookkeeping)-bound: ", lines[0]), lines[:8]
    assert lines.index("") <= 5
    # what may run past 80 columns is a path or a command, left whole for copy and paste
    wide = [ln for ln in lines if len(ln) > 80]
    assert all(ln.startswith(("trace file: ", "  otel-rollout report ")) for ln in wide), wide
    text = "\n".join(lines)
    assert "export: no spans lost" in text and "-p 4317:4317 -p 4318:4318" in text
    # report on the demo's trace file reaches the same verdict
    (trace_file,) = (tmp_path / "out").glob("traces-*.jsonl")
    again = _on_a_terminal(80, "report", str(trace_file))
    assert again[:3] == lines[:3]
