"""Exit flushing where the interpreter refuses new threads in exit hooks (Python 3.12.0
and 3.12.1: ``can't create new thread at interpreter shutdown``): what a run that never
called ``shutdown()`` traced still reaches its file, within the exit bound."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from otel_rollout.report import read_sources

_RUN = textwrap.dedent(
    """
    import atexit, sys, threading
    import otel_rollout
    if sys.argv[2] == "refuse":  # as 3.12.0/3.12.1 do, whatever this interpreter is
        def refuse(self):
            raise RuntimeError("can't create new thread at interpreter shutdown")
        # registered after configure(): runs before its exit hook (last in, first out)
        register_refusal = lambda: atexit.register(setattr, threading.Thread, "start", refuse)
    else:
        register_refusal = lambda: None
    rollout = otel_rollout.configure(output_dir=sys.argv[1])
    register_refusal()
    for i in range(500):
        with rollout.tracer.trajectory(f"t{i}", env="e") as t, t.generate():
            pass
    """
)


def _run(tmp_path, mode):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=os.getcwd(), OTEL_ROLLOUT_ANNOUNCE="false")
    return subprocess.run([sys.executable, "-c", _RUN, str(tmp_path), mode], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_exit_flushes_where_exit_hooks_cannot_start_threads(tmp_path):
    done = _run(tmp_path, "refuse")
    assert done.returncode == 0, done.stderr
    assert "can't create new thread" not in done.stderr, done.stderr
    assert "otel-rollout: 500 trajectories" in done.stderr  # the summary
    res = read_sources([str(tmp_path / "traces-*.jsonl")], warn=lambda m: None)
    assert len(res.trajectories) == 500 and res.losses == {}


def test_exit_flushes_on_this_interpreter(tmp_path):
    done = _run(tmp_path, "as-is")
    assert done.returncode == 0, done.stderr
    assert "Exception ignored in atexit" not in done.stderr, done.stderr
    assert "otel-rollout: 500 trajectories" in done.stderr
    res = read_sources([str(tmp_path / "traces-*.jsonl")], warn=lambda m: None)
    assert len(res.trajectories) == 500 and res.losses == {}
