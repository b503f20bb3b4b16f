"""Processes never share a trace file, and a write that fails never cuts bytes another
writer put in the same file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from _otel_env import clean_otel_env

from otel_rollout import configure
from otel_rollout._setup import pipeline
from otel_rollout.report import read_sources

_WORKER = textwrap.dedent(
    """
    import os, sys, time
    import otel_rollout
    go = sys.argv[2]
    while not os.path.exists(go):  # every worker configures at the same moment
        time.sleep(0.001)
    rollout = otel_rollout.configure(local=True, output_dir=sys.argv[1])
    for i in range(3):
        with rollout.tracer.trajectory(f"{os.getpid()}-{i}", env="e"):
            pass
    rollout.shutdown()
    """
)


def test_processes_of_one_run_started_in_the_same_second_write_files_of_their_own(
    tmp_path, monkeypatch
):
    clean_otel_env(monkeypatch)
    go = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=os.getcwd(), OTEL_ROLLOUT_RUN_ID="run-1")
    argv = [sys.executable, "-c", _WORKER, str(tmp_path / "out"), str(go)]
    workers = [subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL) for _ in range(3)]
    go.touch()
    for w in workers:
        assert w.wait(timeout=120) == 0
    files = sorted((tmp_path / "out").glob("traces-*-run-1-*.jsonl"))
    assert len(files) == 3
    pids = set()
    for f in files:
        ids = {t.breakdown.trajectory_id for t in read_sources([str(f)]).trajectories}
        pid = f.name.split("-run-1-")[1].split("-")[0]
        assert ids == {f"{pid}-{i}" for i in range(3)}, f
        pids.add(int(pid))
    assert pids == {w.pid for w in workers}


def test_two_setups_in_one_second_get_two_files(tmp_path, monkeypatch):
    clean_otel_env(monkeypatch)
    monkeypatch.setattr(pipeline.time, "strftime", lambda fmt: "20260101-000000")
    a = configure(local=True, output_dir=tmp_path, run_id="same")
    b = configure(local=True, output_dir=tmp_path, run_id="same")
    try:
        assert a.trace_file != b.trace_file
        assert str(os.getpid()) in a.trace_file.name
    finally:
        a.shutdown()
        b.shutdown()


# A writer whose write fails (past RLIMIT_FSIZE, as on a full disk) after another
# process appended to the same file: the other process's line stays whole.
_LIMITED = textwrap.dedent(
    """
    import os, resource, signal, sys
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from otel_rollout import RolloutTracer
    from otel_rollout._export.tracefile import RotatingTraceFile

    exporter = RotatingTraceFile(sys.argv[1], max_bytes=None, max_age_s=None)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = RolloutTracer(provider)
    with tracer.trajectory("mine-0", env="e"):
        pass
    print("ready", flush=True)
    sys.stdin.readline()  # the other process appends now
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
    size = os.path.getsize(sys.argv[1])
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 300, hard))
    with tracer.trajectory("mine-1", env="e") as t:  # a line far longer than 300 bytes
        t.span.set_attribute("big", "x" * 20_000)
    print(os.path.getsize(sys.argv[1]) - size, flush=True)
    """
)


def test_a_failed_write_never_cuts_what_another_process_appended(tmp_path):
    path = tmp_path / "shared.jsonl"
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    proc = subprocess.Popen([sys.executable, "-c", _LIMITED, str(path)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    other = subprocess.run(
        [sys.executable, "-c", textwrap.dedent("""
            import sys
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor
            from otel_rollout import RolloutTracer
            from otel_rollout._export.tracefile import RotatingTraceFile
            exporter = RotatingTraceFile(sys.argv[1], max_bytes=None, max_age_s=None)
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            with RolloutTracer(provider).trajectory("other-0", env="e"):
                pass
            exporter.shutdown()
        """), str(path)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert other.returncode == 0, other.stderr
    out, err = proc.communicate("go\n", timeout=120)
    assert proc.returncode == 0, err
    assert "cannot write the trace file" in err  # the limited write did fail
    assert out.strip() == "0"  # and left nothing of itself
    lines = path.read_bytes().splitlines()
    for line in lines:
        json.loads(line)  # every line whole
    ids = {t.breakdown.trajectory_id for t in read_sources([str(path)]).trajectories}
    assert ids == {"mine-0", "other-0"}
