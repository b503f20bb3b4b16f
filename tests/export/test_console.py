"""Console tree exporter: one indented tree per trajectory, with the processor's breakdown."""

from __future__ import annotations

import asyncio
import contextvars
import io
import logging
import os
import sys
import threading

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.trace import set_span_in_context

from otel_rollout import BreakdownCollector, RolloutTracer
from otel_rollout import attributes as A
from otel_rollout._base.errors import forget_warnings
from otel_rollout._export.console import ConsoleTreeExporter
from otel_rollout._export.console_render import format_duration
from otel_rollout.sdk import BreakdownProcessor


class TtyStream(io.StringIO):
    def isatty(self) -> bool:
        return True


class BrokenStream(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError("stream is gone")


def make(stream=None, **options):
    stream = io.StringIO() if stream is None else stream
    collector = BreakdownCollector()
    provider = TracerProvider()
    processor = BreakdownProcessor(MeterProvider(), on_breakdown=collector)
    provider.add_span_processor(processor)
    exporter = ConsoleTreeExporter(stream=stream, **options)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return RolloutTracer(provider, processor=processor), provider, exporter, stream, collector


async def run_trajectory(tracer, instance_id="i1", turns=2, tokens=12, judge=False):
    async with tracer.trajectory(
        env="gsm8k", model="m", instance_id=instance_id, repetition_id=0
    ) as traj:
        async with traj.env_setup():
            await asyncio.sleep(0.002)
        for _ in range(turns):
            async with traj.generate() as gen:
                await asyncio.sleep(0.003)
                gen.record(input_tokens=tokens, output_tokens=34, finish_reason="stop")
            async with traj.env_step():
                await asyncio.sleep(0.001)
                if judge:
                    async with traj.phase("judge"):
                        await asyncio.sleep(0.001)
        traj.set_reward(0.5)


def depth(line: str) -> int:
    return (len(line) - len(line.lstrip(" "))) // 2


def blocks(text: str) -> list[list[str]]:
    """The output split into trees: each starts at a line with no indentation."""
    out: list[list[str]] = []
    for line in text.splitlines():
        if not line.startswith(" "):
            out.append([])
        out[-1].append(line)
    return out


def breakdown_cell(bd, band: str) -> str:
    value = bd.band(band)
    return f"{band} {format_duration(value)} {100 * value / bd.e2e:.1f}%"


async def test_trajectory_prints_root_then_phases_in_start_order_then_breakdown():
    tracer, _, _, stream, collector = make()
    await run_trajectory(tracer)
    (tree,) = blocks(stream.getvalue())
    root, *phases, breakdown = tree
    assert root.split()[:4] == ["trajectory", "gsm8k", "i1_0", "ok"]
    assert "reward 0.5" in root and "turns 2" in root
    (bd,) = collector.drain()
    assert f"e2e {format_duration(bd.e2e)}" in root
    assert f"trace {bd.trace_id}" in root
    names = [line.split()[0] for line in phases]
    assert names == ["env_setup", "generate", "env_step", "generate", "env_step"]
    assert all(depth(line) == 1 for line in phases)
    assert [line.split()[1] for line in phases] == [
        "[env_setup]", "[llm]", "[env]", "[llm]", "[env]",
    ]  # fmt: skip
    assert "tokens in=12 out=34" in phases[1] and "finish stop" in phases[1]
    assert "tokens" not in phases[2]
    assert breakdown.startswith("  breakdown  ")
    for band in A.ALL_BANDS:
        assert breakdown_cell(bd, band) in breakdown


async def test_offsets_are_from_the_root_start_and_increase_with_start_time():
    tracer, _, _, stream, _ = make()
    await run_trajectory(tracer, turns=3)
    _, *phases, _ = blocks(stream.getvalue())[0]
    offsets = [line.split()[2] for line in phases]
    assert all(o.startswith("+") for o in offsets)

    def seconds(text: str) -> float:
        for unit, scale in (("us", 1e-6), ("ms", 1e-3), ("s", 1.0)):
            if text.endswith(unit):
                return float(text[1 : -len(unit)]) * scale
        raise AssertionError(text)

    values = [seconds(o) for o in offsets]
    assert values == sorted(values) and values[1] >= 0.002  # after the 2 ms env_setup


async def test_nested_spans_are_indented_one_level_deeper_than_their_parent():
    tracer, _, _, stream, collector = make()
    await run_trajectory(tracer, turns=1, judge=True)
    _, *phases, breakdown = blocks(stream.getvalue())[0]
    assert [(line.split()[0], depth(line)) for line in phases] == [
        ("env_setup", 1), ("generate", 1), ("env_step", 1), ("judge", 2),
    ]  # fmt: skip
    (bd,) = collector.drain()
    assert breakdown_cell(bd, "env") in breakdown  # the judge is env time (outermost wins)


def test_breakdown_is_computed_from_the_spans_when_the_root_lacks_it():
    _, provider, _, stream, collector = make()
    sdk = provider.get_tracer("raw")
    # A root ended by plain SDK code: the processor computes a breakdown but cannot write it.
    with sdk.start_as_current_span("trajectory", attributes={A.TRAJECTORY_ID: "raw1"}):
        with sdk.start_as_current_span("generate", attributes={A.PHASE: A.PHASE_LLM}):
            threading.Event().wait(0.003)
        with sdk.start_as_current_span("env_step", attributes={A.PHASE: A.PHASE_ENV}):
            threading.Event().wait(0.002)
    (tree,) = blocks(stream.getvalue())
    assert tree[-1].endswith("(computed from spans)")
    (bd,) = collector.drain()
    for band in A.ALL_BANDS:
        assert breakdown_cell(bd, band) in tree[-1]


def test_a_trace_without_a_trajectory_prints_as_a_plain_tree_when_its_root_ends():
    _, provider, _, stream, _ = make()
    sdk = provider.get_tracer("raw")
    with sdk.start_as_current_span("batch"):
        with sdk.start_as_current_span("load"), sdk.start_as_current_span("read"):
            pass
        assert stream.getvalue() == ""  # buffered until the local root ends
    (tree,) = blocks(stream.getvalue())
    assert tree[0].split()[0] == "batch" and "breakdown" not in stream.getvalue()
    assert [(line.split()[0], depth(line)) for line in tree[1:]] == [("load", 1), ("read", 2)]


def test_a_span_ending_after_its_trajectory_prints_as_a_late_line():
    _, provider, _, stream, _ = make()
    sdk = provider.get_tracer("raw")
    root = sdk.start_span("trajectory", attributes={A.TRAJECTORY_ID: "t-late"})
    straggler = sdk.start_span(
        "env_step", context=set_span_in_context(root), attributes={A.PHASE: A.PHASE_ENV}
    )
    root.end()
    straggler.end()
    tree, late = blocks(stream.getvalue())
    assert tree[0].startswith("trajectory")
    assert len(late) == 1 and late[0].startswith("late (trajectory t-late")
    assert "env_step" in late[0] and "[env]" in late[0]


async def test_no_color_env_var_disables_escapes_on_a_tty(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    tracer, *_, stream, _ = make(TtyStream())
    await run_trajectory(tracer, turns=1)
    assert stream.getvalue() and "\x1b" not in stream.getvalue()


async def test_auto_color_uses_escapes_on_a_tty_unless_no_color_is_set(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "")  # empty counts as unset
    tracer, *_, stream, _ = make(TtyStream())
    await run_trajectory(tracer, turns=1)
    assert "\x1b[" in stream.getvalue()


async def test_auto_color_is_off_for_a_stream_that_is_not_a_tty(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    tracer, *_, stream, _ = make()
    await run_trajectory(tracer, turns=1)
    assert stream.getvalue() and "\x1b" not in stream.getvalue()


async def test_color_true_forces_escapes_and_false_removes_them(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    tracer, *_, forced, _ = make(color=True)
    await run_trajectory(tracer, turns=1)
    assert "\x1b[" in forced.getvalue()
    monkeypatch.delenv("NO_COLOR")
    tracer, *_, plain, _ = make(TtyStream(), color=False)
    await run_trajectory(tracer, turns=1)
    assert "\x1b" not in plain.getvalue()
    assert forced.getvalue().count("\n") == plain.getvalue().count("\n")


async def test_the_default_stream_is_sys_stdout_at_print_time(monkeypatch):
    tracer, provider, _, _, _ = make()
    exporter = ConsoleTreeExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    later = io.StringIO()
    monkeypatch.setattr(sys, "stdout", later)
    await run_trajectory(tracer, turns=1)
    assert later.getvalue().startswith("trajectory  gsm8k  i1_0")


async def test_a_broken_stream_never_raises_and_export_reports_failure(caplog, monkeypatch):
    from otel_rollout._base import errors as _errors

    monkeypatch.setattr(_errors, "_seen", set())  # as in a fresh process
    tracer, provider, exporter, _, collector = make(BrokenStream())
    with caplog.at_level(logging.WARNING, logger="otel_rollout"):
        await run_trajectory(tracer, turns=1)  # spans end without an exception
        await run_trajectory(tracer, instance_id="i2", turns=1)
        sdk = provider.get_tracer("raw")
        span = sdk.start_span("trajectory", attributes={A.TRAJECTORY_ID: "direct"})
        span.end()
        assert exporter.export([span]) is SpanExportResult.FAILURE
    assert len(collector.drain()) == 3  # the trainer's own accounting kept going
    messages = [r.getMessage() for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(messages) == 1  # logged once per process, however many failures


def test_the_buffer_is_bounded_and_the_oldest_trace_prints_partially(caplog):
    tracer, _, exporter, stream, _ = make(max_buffered_spans=5)

    def open_trajectory(i: int):
        scope = tracer.trajectory(f"open{i}", env="gsm8k")
        traj = scope.__enter__()
        for _ in range(3):
            with traj.generate():
                pass
        return scope

    first_ctx, second_ctx = contextvars.copy_context(), contextvars.copy_context()
    with caplog.at_level(logging.WARNING, logger="otel_rollout"):
        first = first_ctx.run(open_trajectory, 0)
        assert stream.getvalue() == "" and exporter.buffered_spans == 3
        second = second_ctx.run(open_trajectory, 1)
    assert exporter.buffered_spans <= 5
    (partial,) = blocks(stream.getvalue())
    assert partial[0].startswith("partial (buffer full): 3 spans")
    assert [line.split()[0] for line in partial[1:]] == ["generate"] * 3
    assert exporter.flushed_spans == 3
    first_ctx.run(first.__exit__, None, None, None)
    second_ctx.run(second.__exit__, None, None, None)
    trees = blocks(stream.getvalue())
    assert [t[0].split()[:3] for t in trees[1:]] == [
        ["trajectory", "gsm8k", "open0"], ["trajectory", "gsm8k", "open1"],
    ]  # fmt: skip
    assert "earlier spans of this trace printed above" in trees[1][1]
    assert [line.split()[0] for line in trees[2][1:-1]] == ["generate"] * 3
    assert exporter.buffered_spans == 0


def test_max_buffered_spans_and_color_are_checked():
    with pytest.raises(ValueError, match="max_buffered_spans must be at least 1, got 0"):
        ConsoleTreeExporter(max_buffered_spans=0)
    with pytest.raises(TypeError, match="color must be True, False or None"):
        ConsoleTreeExporter(color="yes")


async def test_concurrent_trajectories_print_separate_intact_trees():
    tracer, _, _, stream, collector = make()
    await asyncio.gather(
        *(run_trajectory(tracer, f"c{i}", turns=3, tokens=100 + i) for i in range(6))
    )
    trees = blocks(stream.getvalue())
    assert len(trees) == 6
    by_id = {bd.trajectory_id: bd for bd in collector.drain()}
    for tree in trees:
        tid = tree[0].split()[2]
        tokens = {line.split("tokens in=")[1].split()[0] for line in tree if "tokens" in line}
        assert tokens == {str(100 + int(tid[1:].split("_")[0]))}  # only its own spans
        assert len(tree) == 1 + 1 + 2 * 3 + 1
        for band in A.ALL_BANDS:
            assert breakdown_cell(by_id[tid], band) in tree[-1]


def test_trajectories_ended_from_many_threads_print_intact_trees():
    tracer, _, _, stream, _ = make()

    def worker(i: int) -> None:
        for j in range(5):
            with tracer.trajectory(f"w{i}-{j}", env="gsm8k") as traj:
                for _ in range(4):
                    with traj.generate() as gen:
                        gen.record(input_tokens=i)
                    with traj.env_step():
                        pass

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    trees = blocks(stream.getvalue())
    assert len(trees) == 20
    for tree in trees:
        worker_id = tree[0].split()[2][1:].split("-")[0]
        assert len(tree) == 1 + 8 + 1 and tree[-1].startswith("  breakdown")
        assert all(f"tokens in={worker_id} " in line for line in tree if "[llm]" in line)


def test_shutdown_prints_open_trajectories_as_partial_trees():
    tracer, provider, exporter, stream, _ = make()

    def open_trajectory():
        scope = tracer.trajectory("never-ends", env="gsm8k")
        traj = scope.__enter__()
        with traj.env_setup():
            pass
        with traj.generate() as gen:
            gen.record(output_tokens=7)
        traj.env_step().__enter__()  # still open too: not exported, not printed

    contextvars.copy_context().run(open_trajectory)
    assert stream.getvalue() == ""
    provider.shutdown()
    (tree,) = blocks(stream.getvalue())
    assert tree[0].startswith("partial (root not ended at shutdown): 2 spans")
    assert [(line.split()[0], depth(line)) for line in tree[1:]] == [
        ("env_setup", 1), ("generate", 1),
    ]  # fmt: skip
    assert exporter.buffered_spans == 0
    assert exporter.export([]) is SpanExportResult.FAILURE  # after shutdown


async def test_trajectories_under_one_batch_span_print_on_their_own_then_the_batch():
    tracer, provider, _, stream, _ = make()
    with provider.get_tracer("raw").start_as_current_span("batch"):
        await asyncio.gather(run_trajectory(tracer, "b0", turns=1), run_trajectory(tracer, "b1"))
        assert len(blocks(stream.getvalue())) == 2
    first, second, batch = blocks(stream.getvalue())
    assert {first[0].split()[2], second[0].split()[2]} == {"b0_0", "b1_0"}
    assert len(first) + len(second) == (1 + 3 + 1) + (1 + 5 + 1)
    assert batch == [batch[0]] and batch[0].startswith("batch ")


def test_a_pipe_nobody_reads_never_blocks_the_agent_loop(caplog, monkeypatch):
    from otel_rollout import configure

    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "512")
    forget_warnings("console:")
    read_fd, write_fd = os.pipe()
    pipe = os.fdopen(write_fd, "w", buffering=1)
    monkeypatch.setattr(sys, "stdout", pipe)
    reader = None
    try:
        rollout = configure(local=True, traces_exporter="console", metrics_exporter="none",
                            summary_stream=io.StringIO())  # fmt: skip
        done = threading.Event()

        def agent_loop() -> None:  # far more output than a pipe holds (64 KiB)
            for i in range(400):
                with rollout.tracer.trajectory(f"p{i}", env="gsm8k") as traj:
                    for _ in range(4):
                        with traj.generate() as gen:
                            gen.record(input_tokens=10, output_tokens=20, finish_reason="stop")
                        with traj.env_step():
                            pass
            done.set()

        with caplog.at_level(logging.WARNING, logger="otel_rollout"):
            agent = threading.Thread(target=agent_loop, daemon=True)
            agent.start()
            agent.join(120)  # a guard against hanging forever, not a timing assertion
            assert done.is_set(), "the agent loop is stuck writing to the pipe"
        assert rollout.export_stats.dropped_queue_full > 0  # counted, never waited for
        assert rollout.force_flush(timeout_s=0.01) is False  # the stream still takes nothing
        messages = [r.getMessage() for r in caplog.records if "is full" in r.getMessage()]
        assert len(messages) == 1
        assert rollout.shutdown(timeout_s=0.5) is False  # returns: the writer is stuck
        # Someone starts reading: what was queued is written, then nothing is left.
        received = bytearray()

        def drain() -> None:
            while chunk := os.read(read_fd, 1 << 16):
                received.extend(chunk)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        assert rollout.shutdown(timeout_s=60)  # waits again, and now the writer finishes
    finally:
        pipe.close()
        if reader is not None:
            reader.join(60)
        os.close(read_fd)
    trees = blocks(received.decode())
    # whole trees; a trajectory whose root was dropped prints its other spans as a
    # partial tree at shutdown
    assert sum(t[0].startswith("trajectory") for t in trees) > 0
    assert all(t[0].startswith(("trajectory", "partial (root not ended")) for t in trees)


def test_console_stats_reach_the_rollouts_export_stats(monkeypatch):
    from otel_rollout import configure

    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    rollout = configure(local=True, metrics_exporter="none", summary_stream=io.StringIO())
    for i in range(3):
        with rollout.tracer.trajectory(f"s{i}", env="gsm8k") as traj, traj.generate():
            pass
    assert rollout.force_flush()
    stats = rollout.export_stats
    assert (stats.exported, stats.dropped, stats.pending) == (6, 0, 0)
    assert len(blocks(out.getvalue())) == 3
    assert rollout.shutdown(timeout_s=10)
