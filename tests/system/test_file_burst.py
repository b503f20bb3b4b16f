"""Trajectories ending together in trace-file mode (the default, no endpoint) at 100%
sampling: a queue sized for the burst (``OTEL_BSP_MAX_QUEUE_SIZE``) holds it, so the file
has every trajectory whole once the writer catches up; past the queue, every lost span is
counted by reason, in the stats and in the file. Real components: ``configure()``, the
trace file, ``otel-rollout report`` on it."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import threading

import pytest
from _bursts import gate_trace_file
from _otel_env import clean_otel_env

import otel_rollout
from otel_rollout.cli import main as cli_main

THREADS = 4
N = 3000  # trajectories, four spans each: far more than the 2,048-span queue
SPANS = 4 * N


@pytest.fixture
def env(monkeypatch):
    clean_otel_env(monkeypatch)


@pytest.fixture
def slow_disk(monkeypatch):
    """The trace file's writes wait until ``set()``: the burst ends before any is written."""
    return gate_trace_file(monkeypatch, open_=False)


def burst(rollout: otel_rollout.Rollout) -> None:
    """``N`` trajectories, open at once on ``THREADS`` threads' event loops, end together."""
    opened = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        async def one(i: int, go: asyncio.Event) -> None:
            async with rollout.tracer.trajectory(f"t{i}", env="burst") as traj:
                for phase in (traj.env_setup, traj.generate, traj.env_step):
                    async with phase():
                        pass
                await go.wait()

        async def main() -> None:
            go = asyncio.Event()
            tasks = [asyncio.create_task(one(i, go)) for i in range(k, N, THREADS)]
            await asyncio.sleep(0)  # each task has opened its trajectory
            opened.wait()  # so has every other thread
            go.set()
            await asyncio.gather(*tasks)

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    workers = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors


def report(rollout: otel_rollout.Rollout) -> dict:
    f = rollout.trace_file
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli_main(["report", str(f.parent / f"{f.stem}*{f.suffix}"), "--format", "json"]) == 0
    return json.loads(out.getvalue())


def spans_in_files(rollout: otel_rollout.Rollout) -> int:
    f = rollout.trace_file
    n = 0
    for path in f.parent.glob(f"{f.stem}*{f.suffix}"):
        for line in path.read_text().splitlines():
            # the in-flight records (docs/live.md) are log lines, not the run's spans
            for rs in json.loads(line).get("resourceSpans", ()):
                n += sum(len(ss["spans"]) for ss in rs["scopeSpans"])
    return n


def configure(tmp_path) -> otel_rollout.Rollout:
    return otel_rollout.configure(local=True, output_dir=tmp_path, metrics_exporter="none",
                                  sample_ratio=1.0, summary_stream=io.StringIO())  # fmt: skip


def test_a_burst_the_queue_holds_reaches_the_trace_file_whole(
    env, slow_disk, tmp_path, monkeypatch
):
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", str(SPANS + 1000))
    rollout = configure(tmp_path)
    burst(rollout)
    breakdowns = len(rollout.collector.drain())
    stats = rollout.export_stats
    assert stats.dropped == 0  # queued while the file is not written, none dropped
    slow_disk.set()
    assert rollout.shutdown(timeout_s=60)
    stats = rollout.export_stats
    assert (stats.exported, stats.dropped, stats.pending, stats.in_flight) == (SPANS, 0, 0, 0)
    assert spans_in_files(rollout) == SPANS
    read = report(rollout)
    assert (breakdowns, read["trajectories"], read["incomplete"]) == (N, N, 0)
    assert read["losses"] == {}


def test_past_the_queue_every_lost_span_is_counted_by_reason(env, slow_disk, tmp_path):
    rollout = configure(tmp_path)  # the 2,048-span queue
    burst(rollout)
    lost = rollout.export_stats.dropped_queue_full
    assert lost >= SPANS - 2048 - 512  # at most one batch had left the queue for the writer
    slow_disk.set()
    assert rollout.shutdown(timeout_s=60)
    stats = rollout.export_stats
    assert stats.losses() == {"queue_full": lost, "export_failed": 0, "after_shutdown": 0,
                              "shutdown_timeout": 0, "kept_overflow": 0}  # fmt: skip
    assert (stats.exported + stats.dropped, stats.pending, stats.in_flight) == (SPANS, 0, 0)
    assert spans_in_files(rollout) == stats.exported  # the file holds what was counted
