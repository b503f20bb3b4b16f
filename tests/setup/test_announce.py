"""configure() says once, on stderr, where traces and metrics go and how to watch them live;
``OTEL_ROLLOUT_ANNOUNCE=false`` silences it; a local setup says nothing."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _otel_env import clean_otel_env

from otel_rollout._settings.table import resolve
from otel_rollout._setup import config as announce_module
from otel_rollout._setup.config import announce, announce_text


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    clean_otel_env(monkeypatch)
    monkeypatch.setattr(announce_module, "_said", False)


def test_the_trace_file_and_the_top_line_to_watch_it():
    settings = resolve(run_id="r1")
    text = announce_text(settings, Path("out/traces-x-r1.jsonl"))
    assert "run r1: traces -> out/traces-x-r1.jsonl; metrics -> none" in text
    assert "watch it live: otel-rollout top out" in text
    assert "OTEL_ROLLOUT_ANNOUNCE=false" in text
    assert all(len(line) <= 80 for line in text.splitlines()[1:])


def test_otlp_names_the_endpoint_and_top_listen():
    settings = resolve(endpoint="http://collector:4317", run_id="r2")
    text = announce_text(settings, None)
    assert "traces -> OTLP http://collector:4317 (grpc)" in text
    assert "metrics -> OTLP http://collector:4317" in text
    assert "otel-rollout top --listen PORT" in text


def test_said_once_per_process():
    out = io.StringIO()
    settings = resolve()
    assert announce(settings, None, out) is True
    assert announce(settings, None, out) is False
    assert out.getvalue().count("otel-rollout: run ") == 1


def test_a_ray_worker_leaves_it_to_the_driver():
    out = io.StringIO()
    assert announce(resolve(resource_attributes={"ray.worker.id": "w1"}), None, out) is False
    assert out.getvalue() == ""


def test_silenced_by_the_setting(monkeypatch):
    monkeypatch.setenv("OTEL_ROLLOUT_ANNOUNCE", "false")
    out = io.StringIO()
    assert announce(resolve(), None, out) is False
    assert out.getvalue() == ""


def test_global_configure_says_it_on_stderr_and_local_does_not(tmp_path):
    # the global providers can be set once per process: in a process of its own
    script = (
        "import io, otel_rollout\n"
        f"otel_rollout.configure(local=True, output_dir={str(tmp_path / 'l')!r}).shutdown()\n"
        "import sys; print('--- local done', file=sys.stderr)\n"
        f"r = otel_rollout.configure(output_dir={str(tmp_path / 'g')!r}, "
        "summary_stream=io.StringIO())\n"
        "otel_rollout.configure(output_dir='elsewhere')\n"
        "print(r.trace_file)\n"
        "r.shutdown()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120, check=True)  # fmt: skip
    before, after = done.stderr.split("--- local done")
    assert "watch it live" not in before
    trace_file = done.stdout.strip()
    assert f"traces -> {trace_file}" in after
    assert f"otel-rollout top {Path(trace_file).parent}" in after
    assert after.count("watch it live") == 1  # the second configure() says nothing
