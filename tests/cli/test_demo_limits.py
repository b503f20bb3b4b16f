"""The demo at its limits: any -n in bounded memory, Ctrl-C, bad output folders, bad
options."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("skyrl_gym")
pytest.importorskip("matplotlib")
pytest.importorskip("rich")

from otel_rollout import attributes as A
from otel_rollout.cli import main
from otel_rollout.demo._run import run_demo, run_demo_async


def test_tasks_alive_stay_at_the_concurrency_for_any_n(tmp_path):
    alive: list[int] = []

    async def run():
        def count():
            alive.append(len(asyncio.all_tasks()))

        return await run_demo_async(n=40, concurrency=4, output_dir=tmp_path, on_done=count)

    result = asyncio.run(run())
    assert len(result.breakdowns) == 40
    # the main task, four workers and the engine's loop at most: none made up front
    assert max(alive) <= 6


def test_ctrl_c_stops_the_run_and_returns_what_ran(tmp_path):
    # Ctrl-C as a terminal delivers it: Python's own handler, whatever an earlier test left
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    done = []

    def interrupt_at_five():
        done.append(1)
        if len(done) == 5:
            signal.raise_signal(signal.SIGINT)

    try:
        result = run_demo(
            n=1_000_000, concurrency=4, output_dir=tmp_path, on_done=interrupt_at_five
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    started, asked = result.interrupted
    assert asked == 1_000_000 and 5 <= started < 20
    statuses = [b.status for b in result.breakdowns]
    assert len(statuses) == started  # every trajectory started has ended and is there
    assert statuses.count(A.STATUS_CANCELLED) == started - len(done)
    assert result.batch is not None and result.batch.trajectories == started


def test_ctrl_c_in_the_cli_is_one_line_and_the_partial_summary(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, OTEL_BSP_SCHEDULE_DELAY="50")
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_rollout.cli", "demo", "-n", "10000000", "--no-progress",
         "--output-dir", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        while not any(f.stat().st_size for f in out.glob("traces-*.jsonl")):  # running
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert "Traceback" not in stderr and "Traceback" not in stdout
    first = stdout.splitlines()[0]
    assert first.startswith("interrupted after ") and "of 10,000,000 trajectories" in first
    assert "trace file:" in stdout and "env class" in stdout
    assert not list(out.glob("*.png"))  # no pictures on the way out


def test_an_output_dir_that_cannot_be_written_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(SystemExit) as exc:
        main(["demo", "-n", "1", "--output-dir", str(blocker / "out"), "--no-progress"])
    message = str(exc.value.code)
    assert message.startswith("otel-rollout: cannot write to --output-dir ")
    assert str(blocker / "out") in message and "\n" not in message


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon"])
def test_a_linger_that_is_not_seconds_is_refused(value, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--linger", value, "--output-dir", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--linger" in err and value in err
    assert not list(tmp_path.iterdir())  # refused before anything ran


def test_every_trajectory_is_in_the_result_and_the_collector_never_fills(
    tmp_path, monkeypatch, caplog
):
    import otel_rollout.demo._run as demo_run
    from otel_rollout._accounting.summary import BreakdownCollector

    monkeypatch.setattr(BreakdownCollector.__init__, "__defaults__", (5,))  # a small limit
    monkeypatch.setattr(demo_run, "_COLLECTOR_SPAN", 4)
    result = run_demo(n=12, concurrency=2, output_dir=tmp_path)
    assert len(result.breakdowns) == 12
    assert "holds its maximum" not in caplog.text
