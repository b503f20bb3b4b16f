"""The trace file: whole lines only, rotation by size and by age, read back as one stream."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_rollout import RolloutTracer
from otel_rollout._export.tracefile import RotatingTraceFile, rotated_path
from otel_rollout.report import read_sources
from otel_rollout.sdk import BreakdownProcessor


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _tracer(exporter):
    provider = TracerProvider()
    online = []
    processor = BreakdownProcessor(on_breakdown=online.append, record_metrics=False)
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return RolloutTracer(provider, processor=processor), online


def _run(tracer, n, start=0):
    for i in range(start, start + n):
        with tracer.trajectory(f"t{i}", env="e") as traj:
            with traj.generate():
                pass
            with traj.env_step():
                pass


def _lines(path):
    return path.read_bytes().split(b"\n")


def test_rotates_by_size_and_the_files_read_back_as_one_stream(tmp_path):
    exporter = RotatingTraceFile(tmp_path / "traces-x.jsonl", max_bytes=3000, max_age_s=None)
    tracer, online = _tracer(exporter)
    _run(tracer, 20)
    exporter.shutdown()
    assert len(exporter.paths) > 3
    assert exporter.paths == [rotated_path(tmp_path / "traces-x.jsonl", i)
                              for i in range(len(exporter.paths))]  # fmt: skip
    assert sorted(tmp_path.glob("traces-x*.jsonl")) == exporter.paths  # name order = writing
    for p in exporter.paths:
        data = p.read_bytes()
        assert data.endswith(b"\n") and len(data) <= 3000
        for line in data.splitlines():
            json.loads(line)
    res = read_sources([str(tmp_path / "traces-x*.jsonl")])
    assert res.losses == {}
    assert {t.breakdown.trace_id: dict(t.breakdown.nanos) for t in res.trajectories} == {
        b.trace_id: dict(b.nanos) for b in online
    }


def test_rotates_by_age(tmp_path):
    clock = _Clock()
    exporter = RotatingTraceFile(tmp_path / "t.jsonl", max_bytes=None, max_age_s=60, clock=clock)
    tracer, _ = _tracer(exporter)
    _run(tracer, 2)
    clock.now = 59.0
    _run(tracer, 1, start=2)
    assert len(exporter.paths) == 1
    clock.now = 60.0
    _run(tracer, 1, start=3)
    assert [p.name for p in exporter.paths] == ["t.jsonl", "t_0001.jsonl"]
    exporter.shutdown()


def test_defaults_and_bad_values():
    with pytest.raises(ValueError, match="max_bytes"):
        RotatingTraceFile("/nonexistent/x.jsonl", max_bytes=-1)
    with pytest.raises(ValueError, match="max_age_s"):
        RotatingTraceFile("/nonexistent/x.jsonl", max_age_s=float("nan"))


def test_appending_after_a_truncated_last_line_starts_a_new_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"resourceSpans": [{"scopeSp')  # a crash in the middle of a line
    exporter = RotatingTraceFile(path, max_bytes=None, max_age_s=None)
    tracer, _ = _tracer(exporter)
    _run(tracer, 1)
    exporter.shutdown()
    lines = _lines(path)
    assert lines[0] == b'{"resourceSpans": [{"scopeSp' and lines[-1] == b""
    for line in lines[1:-1]:
        json.loads(line)
    res = read_sources([str(path)], warn=lambda m: None)
    assert len(res.trajectories) == 1


_FULL_DISK = textwrap.dedent(
    """
    import os, resource, signal, sys
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from otel_rollout import RolloutTracer
    from otel_rollout._export.tracefile import RotatingTraceFile

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    limit = int(sys.argv[2])
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    exporter = RotatingTraceFile(sys.argv[1], max_bytes=None, max_age_s=None)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = RolloutTracer(provider)
    for i in range(200):
        with tracer.trajectory(f"t{i}", env="e") as traj:
            with traj.generate():
                pass
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # space again
    with tracer.trajectory("after", env="e"):
        pass
    exporter.shutdown()
    """
)


def test_a_full_disk_leaves_no_partial_line_in_the_middle(tmp_path):
    path = tmp_path / "t.jsonl"
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    proc = subprocess.run([sys.executable, "-c", _FULL_DISK, str(path), "5000"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("cannot write the trace file") == 1  # once per outage
    assert "writing the trace file again" in proc.stderr
    data = path.read_bytes()
    assert data.endswith(b"\n")
    docs = [json.loads(line) for line in data.splitlines()]  # every line is whole
    names = {
        kv["value"]["stringValue"]
        for d in docs
        for rs in d["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
        for kv in s["attributes"]
        if kv["key"] == "rollout.trajectory.id"
    }
    assert "after" in names and len(data) > 5000


_KILLED = textwrap.dedent(
    """
    import sys
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from otel_rollout import RolloutTracer
    from otel_rollout._export.tracefile import RotatingTraceFile

    exporter = RotatingTraceFile(sys.argv[1], max_bytes=None, max_age_s=None)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = RolloutTracer(provider)
    big = "x" * 200_000
    i = 0
    while True:
        with tracer.trajectory(f"t{i}", env="e") as traj:
            traj.span.set_attribute("big", big)
        i += 1
        if i == 20:
            print("ready", flush=True)
    """
)


def test_a_killed_process_leaves_at_most_one_truncated_last_line(tmp_path):
    path = tmp_path / "t.jsonl"
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, str(path)], env=env,
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "ready"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    lines = path.read_bytes().split(b"\n")
    for line in lines[:-1]:
        json.loads(line)
    res = read_sources([str(path)], warn=lambda m: None)
    assert len(res.trajectories) >= 20
    assert sum(res.losses.values()) <= 1


def test_configure_rotates_its_trace_file_as_the_variables_say(tmp_path, monkeypatch):
    import io

    from otel_rollout import configure

    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                 "OTEL_TRACES_EXPORTER", "OTEL_ROLLOUT_TRACES_EXPORTER"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_ROLLOUT_TRACE_FILE_MAX_MB", "0.002")  # about 2 KB
    summary = io.StringIO()
    rollout = configure(local=True, output_dir=tmp_path, summary_stream=summary)
    for i in range(20):
        _run(rollout.tracer, 1, start=i)
        assert rollout.force_flush()  # one batch a line
    assert rollout.shutdown(timeout_s=10)
    first = rollout.trace_file
    files = sorted(tmp_path.glob(f"{first.stem}*.jsonl"))
    assert files[0] == first and len(files) > 2
    assert f"traces: {tmp_path / first.stem}*.jsonl ({len(files)} files)" in summary.getvalue()
    res = read_sources([str(p) for p in files])
    assert len(res.trajectories) == 20 and res.losses == {}


def test_a_forked_child_writes_its_own_files(tmp_path):
    path = tmp_path / "traces-x.jsonl"
    exporter = RotatingTraceFile(path, max_bytes=None, max_age_s=None)
    tracer, _ = _tracer(exporter)
    _run(tracer, 1)
    pid = os.fork()
    if pid == 0:  # the child: trace, export, leave without running the parent's handlers
        code = 1
        try:
            _run(tracer, 2, start=100)
            code = 0 if exporter.path.name.startswith(f"traces-x-{os.getpid()}-") else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    _run(tracer, 1, start=1)
    exporter.shutdown()
    (child,) = tmp_path.glob(f"traces-x-{pid}-*.jsonl")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, child.name])
    parent_ids = {t.breakdown.trajectory_id for t in read_sources([str(path)]).trajectories}
    child_ids = {t.breakdown.trajectory_id for t in read_sources([str(child)]).trajectories}
    assert parent_ids == {"t0", "t1"} and child_ids == {"t100", "t101"}


@pytest.mark.parametrize("how", ["deleted", "moved away"])
def test_a_trace_file_deleted_or_moved_away_while_written_is_written_again(tmp_path, how):
    path = tmp_path / "traces-x.jsonl"
    exporter = RotatingTraceFile(path, max_bytes=None, max_age_s=None)
    tracer, _ = _tracer(exporter)
    _run(tracer, 1)
    if how == "deleted":
        path.unlink()
    else:
        path.rename(tmp_path / "old.jsonl")
    _run(tracer, 1, start=1)
    exporter.shutdown()
    ids = {t.breakdown.trajectory_id for t in read_sources([str(path)]).trajectories}
    assert ids == {"t1"}


def test_the_trace_file_is_not_writable_by_all_even_under_umask_000(tmp_path, monkeypatch):
    from otel_rollout import configure

    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                 "OTEL_TRACES_EXPORTER", "OTEL_ROLLOUT_TRACES_EXPORTER"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    old = os.umask(0)
    try:
        rollout = configure(local=True, output_dir=tmp_path, summary_stream=None)
    finally:
        os.umask(old)
    assert rollout.shutdown(timeout_s=10)
    assert rollout.trace_file.stat().st_mode & 0o777 == 0o644
