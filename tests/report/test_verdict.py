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
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_the_verdict_leads_with_the_slots_in_at_most_seven_lines_of_80_columns(tmp_path):
    from otel_rollout.report import read_sources
    from otel_rollout.report._aggregate import ReportData

    data = ReportData()
    result = read_sources([str(_batch_file(tmp_path / "t.jsonl", long_ids=True))], emit=data.add)
    lines = verdict(data.groups(), data.batches.analyses(result.batches), data.slowest(),
                    failures={"RuntimeError: " + "x" * 200: 2}, losses={"timeout": 1})  # fmt: skip
    assert len(lines) == 6 and all(len(ln) <= 80 for ln in lines)
    # 31 slots (the peak in flight) over 35 s: 80 s generating, 156 s in env; the last
    # start is at 3 s and a slot is left empty at 4 s; four 32 s trajectories (median 3 s)
    assert (
        lines[0]
        == "batch 0: slots 7% generating, 14% in env, 78% empty (drain 31.0 s, 4 stragglers)"
    )
    assert lines[1].startswith("engine: idle ") and "of 31 slots generating" in lines[1]
    assert lines[2].startswith("env-bound: env")
    # all four at the median would have ended at 6 s: 29 s of the step
    assert lines[3].startswith("stragglers: 4, costing 29.00 s of step time; slowest: a_r")
    assert lines[3].endswith("-0036, 32.00 s")  # the id shortened in its middle
    assert lines[4].startswith("failed: 2 trajectories") and lines[5] == "losses: 1 timeout"


def test_no_verdict_line_cuts_a_number_or_an_id_at_80_columns():
    from otel_rollout._base.text import mid

    assert mid("gsm8k_multi_turn-45", 15) == "gsm8k_m…turn-45"
    assert mid("short", 15) == "short"
    line = failure_line({"E: " + "y" * 90: 123_456, "F": 7, "G": 8})
    assert len(line) <= 80 and line.startswith("failed: 123471 trajectories: ")
    lost = {f"reason number {i}": 1_000_000 + i for i in range(8)}
    line = loss_line(lost)
    assert len(line) <= 80 and line.endswith(" more)") and "1000007 reason number 7" in line


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
    assert lines[0].startswith("batch 0: slots "), lines[:7]
    blank = lines.index("")
    assert blank <= 7  # the verdict: at most seven lines, then the tables
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
    assert re.match(r"batch 0: slots \d+% generating", lines[0]), lines[:8]
    assert re.match(r"engine: idle \d+% of wall; ", lines[1]), lines[:8]
    assert lines.index("") <= 7
    # what may run past 80 columns is a path or a command, left whole for copy and paste
    wide = [ln for ln in lines if len(ln) > 80]
    out = str(tmp_path / "out")
    assert all(ln.lstrip().startswith((out, "otel-rollout report ")) for ln in wide), wide
    text = "\n".join(lines)
    assert "export: no spans lost" in text and "-p 4317:4317 -p 4318:4318" in text
    # report on the demo's trace file reaches the same verdict
    (trace_file,) = (tmp_path / "out").glob("traces-*.jsonl")
    again = _on_a_terminal(80, "report", str(trace_file))
    assert again[:3] == lines[:3]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(1, 10**6), min_size=1, max_size=6),  # durations, ms
    st.text(alphabet="abcdefghij_-0123456789", min_size=1, max_size=120),  # ids
    st.one_of(st.none(), st.integers(0, 10**9)),  # step
    st.integers(1, 3),  # batches
)
def test_the_verdict_lines_fit_80_columns_whole_for_any_batches(durations, ident, step, k):
    from otel_rollout import analyze_batch
    from otel_rollout.accounting import compute_breakdown
    from otel_rollout.report._batches import BatchView
    from otel_rollout.report._verdict import engine_line, slot_line, straggler_line

    ms = 1_000_000
    views = []
    for b in range(k):
        bds = [
            compute_breakdown(T0, T0 + d * ms, [("llm", T0, T0 + d * ms // 2)],
                              trajectory_id=f"{ident}-{i}", batch_id=f"{ident}{b}")
            for i, d in enumerate(durations)
        ]  # fmt: skip
        views.append(BatchView(analyze_batch(bds), step))
    slowest = max(bds, key=lambda b: b.e2e)
    lines = slot_line(views), engine_line(views), straggler_line(views, [SimpleNamespace(
        breakdown=slowest)])  # fmt: skip
    assert all(len(line) <= 80 for line in lines), lines
    # the numbers are whole: the slowest's duration, and its id's index after any "…"
    assert f", {slowest.e2e:.2f} s" in lines[2]
    assert f"-{len(durations) - 1}," in lines[2] or slowest.trajectory_id.endswith(
        lines[2].split("slowest: ")[1].split(",")[0].split("…")[-1]
    )
