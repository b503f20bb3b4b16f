"""Overhead of loop-stall attribution on the agent loop's CPU, in one process.

Runs the same asyncio agent loop (``--concurrency`` trajectories at a time, 10 turns each:
a generate whose engine answers on the next loop iteration, then an env step that yields
once) traced by otel-rollout (RolloutTracer + BreakdownProcessor + histograms + a batch
exporter), with the callback timer off and on, alternating rounds, and prints the CPU time
per trajectory of each and their ratio (median of the rounds). The work per callback is as
small as an agent loop gets, so this is the worst case: real loops (tokenising, HTTP
clients, env code) spend more per callback and the relative cost is lower.

    python benchmarks/loopstall.py [--trajectories N] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from otel_rollout import RolloutTracer
from otel_rollout._processing import loopstall as _loopstall
from otel_rollout.sdk import BreakdownProcessor

TURNS = 10


class NullExporter(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS


async def engine() -> None:
    fut = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(fut.set_result, None)
    await fut


async def trajectory(tracer: RolloutTracer, i: int, sem: asyncio.Semaphore) -> None:
    async with sem, tracer.trajectory(f"t{i}", env="bench", model="m") as traj:
        async with traj.env_setup():
            await asyncio.sleep(0)
        for _ in range(TURNS):
            async with traj.generate():
                await engine()
            async with traj.env_step():
                await asyncio.sleep(0)
        async with traj.env_teardown():
            pass


async def agent_loop(tracer: RolloutTracer, n: int, concurrency: int) -> None:
    sem = asyncio.Semaphore(concurrency)
    await asyncio.gather(*(trajectory(tracer, i, sem) for i in range(n)))


def run(tracer: RolloutTracer, n: int, concurrency: int, on: bool, collect=None) -> float:
    """CPU per trajectory, ``collect()`` included (the metric collection that records the
    histograms of the trajectories that ended)."""
    _loopstall.configure_loop_stalls(on)
    if not on:
        _loopstall._uninstall()
    else:
        _loopstall.prepare()
    gc.collect()
    t0 = time.process_time()
    asyncio.run(agent_loop(tracer, n, concurrency))
    if collect is not None:
        collect()
    return (time.process_time() - t0) / n


def callbacks_per_trajectory(tracer: RolloutTracer, n: int, concurrency: int) -> float:
    """Loop callbacks the agent loop runs per trajectory (counted, timer off)."""
    from asyncio import events

    _loopstall.configure_loop_stalls(False)
    _loopstall._uninstall()
    original = events.Handle._run
    count = 0

    def counting(handle):
        nonlocal count
        count += 1
        return original(handle)

    events.Handle._run = counting
    try:
        asyncio.run(agent_loop(tracer, n, concurrency))
    finally:
        events.Handle._run = original
    return count / n


def cost_per_callback(on: bool, n: int = 200_000) -> float:
    """CPU seconds per no-op callback on a loop inside one trajectory, timer on or off."""

    async def body():
        loop = asyncio.get_running_loop()
        async with RolloutTracer(TracerProvider()).trajectory("c"):
            done = loop.create_future()
            left = [n]

            def tick():
                left[0] -= 1
                if left[0]:
                    loop.call_soon(tick)
                else:
                    done.set_result(None)

            loop.call_soon(tick)
            t0 = time.process_time()
            await done
            return (time.process_time() - t0) / n

    _loopstall.configure_loop_stalls(on)
    if on:
        _loopstall.prepare()
    else:
        _loopstall._uninstall()
    return asyncio.run(body())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    provider = TracerProvider()
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    provider.add_span_processor(BreakdownProcessor(meters))
    provider.add_span_processor(BatchSpanProcessor(NullExporter(), max_queue_size=1 << 16))
    tracer = RolloutTracer(provider, meters)
    collect = reader.get_metrics_data
    run(tracer, 200, args.concurrency, True, collect)  # warm up both paths
    run(tracer, 200, args.concurrency, False, collect)
    off, on = [], []
    for _ in range(args.rounds):
        off.append(run(tracer, args.trajectories, args.concurrency, False, collect))
        on.append(run(tracer, args.trajectories, args.concurrency, True, collect))
    ratios = [b / a for a, b in zip(off, on, strict=True)]
    print(f"agent loop, {TURNS}-turn trajectories, {args.concurrency} at a time:")
    print(f"  loop stalls off: {statistics.median(off) * 1e6:8.1f} us CPU per trajectory")
    print(f"  loop stalls on:  {statistics.median(on) * 1e6:8.1f} us CPU per trajectory")
    print(f"  ratio on/off: {statistics.median(ratios):.3f} (median of {args.rounds} rounds; "
          f"min {min(ratios):.3f}, max {max(ratios):.3f})")  # fmt: skip
    cbs = callbacks_per_trajectory(tracer, 500, args.concurrency)
    per_cb = [cost_per_callback(True) - cost_per_callback(False) for _ in range(args.rounds)]
    added = statistics.median(per_cb)
    print(f"  {cbs:.1f} loop callbacks per trajectory; the timer adds {added * 1e9:.0f} ns "
          f"CPU per callback (median of {args.rounds})")  # fmt: skip
    print(f"  estimated overhead: {cbs * added / statistics.median(off) * 100:.2f}% of the "
          "agent loop's CPU")  # fmt: skip
    _loopstall.configure_loop_stalls(True)
    provider.shutdown()


if __name__ == "__main__":
    main()
