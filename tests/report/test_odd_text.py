"""Ids and env classes that are not valid text (a lone surrogate) or that the stream
cannot encode are printed escaped, never as a traceback: in report's tables, the console
tree and the shutdown summary."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from _otel_env import clean_otel_env

from otel_rollout import configure
from otel_rollout._base.text import printable

ODD_ID = "traj-\ud800-1"
ODD_ENV = "env-\udcff"


@pytest.fixture
def odd_trace_file(tmp_path, monkeypatch):
    clean_otel_env(monkeypatch)
    summary = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # strict, like a log file
    rollout = configure(local=True, output_dir=tmp_path, summary_stream=summary)
    for i in range(3):
        with rollout.tracer.trajectory(f"{ODD_ID}{i}", env=ODD_ENV) as t, t.generate():
            t.set_reward(1.0)
    assert rollout.shutdown()
    summary.flush()
    text = summary.buffer.getvalue().decode("utf-8")
    assert "otel-rollout: 3 trajectories" in text
    assert "reward env-\\udcff:" in text  # escaped in the summary
    return rollout.trace_file


@pytest.mark.parametrize("args", [[], ["-v"], ["--format", "json"]])
def test_report_prints_odd_ids_escaped(odd_trace_file, args):
    env = dict(os.environ, PYTHONIOENCODING="utf-8")  # strict, whatever the locale
    done = subprocess.run(
        [sys.executable, "-m", "otel_rollout.cli", "report", str(odd_trace_file), *args],
        capture_output=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")[-3000:]
    out = done.stdout.decode("utf-8")  # valid UTF-8 throughout
    if args == ["--format", "json"]:
        assert json.loads(out)["found"] == 3
    else:
        assert "env-\\udcff" in out


def test_the_console_tree_escapes_what_its_stream_cannot_encode(monkeypatch):
    clean_otel_env(monkeypatch)
    stream = io.TextIOWrapper(io.BytesIO(), encoding="ascii")  # a C-locale terminal
    monkeypatch.setattr(sys, "stdout", stream)
    rollout = configure(local=True, traces_exporter="console")
    with rollout.tracer.trajectory(ODD_ID, env="café") as t, t.generate():
        pass
    assert rollout.shutdown()
    stream.flush()
    out = stream.buffer.getvalue().decode("ascii")
    assert "traj-\\ud800-1" in out and "caf\\xe9" in out


def test_printable_keeps_valid_text_as_it_is():
    text = "gsm8k-é-✓"
    assert printable(text) is text
    assert printable("a\ud800b") == "a\\ud800b"
    assert printable("é", "ascii") == "\\xe9"
