"""Export cost: 1% against 100% trace sampling, and an agent loop while the endpoint is down.

Both parts go through ``otel_rollout.configure(local=True, endpoint=...)``, so they measure
what users get: BreakdownProcessor + BatchSpanProcessor + the OTLP gRPC exporter (and the
OTLP metric exporter), with the real in-process ``OTLPReceiver`` as the endpoint.

(a) CPU per trajectory (setup, N turns of generate + env.step, teardown, no sleeps) with
    ``sample_ratio=0.01`` against ``1.0``: the agent thread's CPU, and the whole process's
    CPU until ``force_flush`` returns (export thread and the in-process receiver included).
(b) Wall and CPU time of an asyncio agent loop whose generate/env calls are real sleeps of
    0.5-2 ms, with the endpoint down (a closed port on 127.0.0.1) against up. Runs are
    interleaved (up, down, up, down, ...) and medians printed. Each handle is shut down
    with ``shutdown(timeout_s=...)``; with the endpoint down that returns at its timeout
    while the export thread finishes its retries in the background (its threads are
    daemons and mostly sleep in back-off; they can add a little CPU to later runs).

    python benchmarks/export.py [--trajectories 300] [--loop-trajectories 100] [--turns 10]
                                [--repeats 5] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import random
import socket
import statistics
import threading
import time

import otel_rollout
from otel_rollout.testing.receiver import OTLPReceiver

METRIC_INTERVAL_MS = 500
SHUTDOWN_TIMEOUT_S = 2.0


def closed_port_endpoint() -> str:
    """An endpoint nothing listens on: a port bound once, then released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def setup(endpoint: str, ratio: float) -> otel_rollout.Rollout:
    return otel_rollout.configure(
        local=True,
        endpoint=endpoint,
        sample_ratio=ratio,
        metrics_exporter="otlp",
        metric_export_interval_ms=METRIC_INTERVAL_MS,
        service_name="otel-rollout-bench",
    )


# --- (a) CPU per trajectory, 1% vs 100% sampling ---------------------------------------------
def sync_trajectory(tracer: otel_rollout.RolloutTracer, i: int, turns: int) -> None:
    with tracer.trajectory(f"t{i}", env="bench", model="m") as traj:
        with traj.env_setup():
            pass
        for _ in range(turns):
            with traj.generate() as gen:
                gen.record(input_tokens=100, output_tokens=20, finish_reason="stop")
            with traj.env_step():
                pass
        with traj.env_teardown():
            pass


def cpu_run(rollout: otel_rollout.Rollout, n: int, turns: int, offset: int) -> tuple[float, float]:
    """(agent-thread CPU, process CPU until flushed) per trajectory, in seconds."""
    tracer = rollout.tracer
    rollout.force_flush(timeout_s=10)
    gc.collect()
    p0, t0 = time.process_time(), time.thread_time()
    for i in range(n):
        sync_trajectory(tracer, offset + i, turns)
    thread = time.thread_time() - t0
    rollout.force_flush(timeout_s=30)
    return thread / n, (time.process_time() - p0) / n


def part_a(receiver: OTLPReceiver, n: int, turns: int, repeats: int) -> None:
    spans_per_trajectory = 2 * turns + 3
    handles = {ratio: setup(receiver.grpc_endpoint, ratio) for ratio in (1.0, 0.01)}
    for h in handles.values():  # warm up: connections, caches, first-call costs
        cpu_run(h, min(200, n), turns, offset=0)
    results: dict[float, list[tuple[float, float]]] = {1.0: [], 0.01: []}
    received = {1.0: 0, 0.01: 0}
    for rep in range(repeats):
        for ratio in (1.0, 0.01) if rep % 2 == 0 else (0.01, 1.0):
            before = len(receiver.spans())
            results[ratio].append(cpu_run(handles[ratio], n, turns, offset=(rep + 1) * n))
            received[ratio] += len(receiver.spans()) - before
    for h in handles.values():
        h.shutdown(timeout_s=SHUTDOWN_TIMEOUT_S)
    med = {r: tuple(statistics.median(x[k] for x in v) for k in (0, 1)) for r, v in results.items()}
    expected = repeats * n * spans_per_trajectory
    print(f"(a) CPU per {turns}-turn trajectory, OTLP gRPC to an in-process receiver, "
          f"{n} trajectories x {repeats} runs each (medians)")  # fmt: skip
    for ratio in (1.0, 0.01):
        thread, proc = med[ratio]
        share = 100.0 * received[ratio] / expected
        print(f"    sample {ratio:>5.0%}: agent thread {thread * 1e6:8.1f} us   process "
              f"{proc * 1e6:8.1f} us   spans received {share:5.1f}% of recorded")  # fmt: skip
    print(f"    ratio 1% / 100%: agent thread {med[0.01][0] / med[1.0][0]:6.3f}   "
          f"process {med[0.01][1] / med[1.0][1]:6.3f}")  # fmt: skip


# --- (b) agent loop, endpoint down vs up ------------------------------------------------------
async def agent_loop(tracer, n: int, turns: int, concurrency: int, seed: int) -> None:
    rng = random.Random(seed)
    plans = [[rng.uniform(0.0005, 0.002) for _ in range(2 * turns + 2)] for _ in range(n)]
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        sleeps = iter(plans[i])
        async with gate, tracer.trajectory(f"loop{i}", env="bench", model="m") as traj:
            async with traj.env_setup():
                await asyncio.sleep(next(sleeps))
            for _ in range(turns):
                async with traj.generate() as gen:
                    await asyncio.sleep(next(sleeps))
                    gen.record(input_tokens=100, output_tokens=20, finish_reason="stop")
                async with traj.env_step():
                    await asyncio.sleep(next(sleeps))
            async with traj.env_teardown():
                pass

    await asyncio.gather(*(one(i) for i in range(n)))


def loop_run(endpoint: str, n: int, turns: int, concurrency: int, seed: int):
    rollout = setup(endpoint, 1.0)
    gc.collect()
    w0, c0 = time.perf_counter(), time.process_time()
    asyncio.run(agent_loop(rollout.tracer, n, turns, concurrency, seed))
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    s0 = time.perf_counter()
    finished = rollout.shutdown(timeout_s=SHUTDOWN_TIMEOUT_S)
    return wall, cpu, time.perf_counter() - s0, finished


def part_b(receiver: OTLPReceiver, n: int, turns: int, repeats: int, concurrency: int) -> None:
    cases = {"up": receiver.grpc_endpoint, "down": closed_port_endpoint()}
    loop_run(cases["up"], min(64, n), turns, concurrency, seed=0)  # warm up
    runs: dict[str, list[tuple[float, float, float, bool]]] = {"up": [], "down": []}
    for rep in range(repeats):
        for case in ("up", "down") if rep % 2 == 0 else ("down", "up"):
            runs[case].append(loop_run(cases[case], n, turns, concurrency, seed=rep + 1))
    wall = {c: statistics.median(r[0] for r in v) for c, v in runs.items()}
    cpu = {c: statistics.median(r[1] for r in v) for c, v in runs.items()}
    print(f"(b) asyncio agent loop, {n} trajectories x {turns} turns, {concurrency} concurrent, "
          f"0.5-2 ms sleeps, sample 100%, {repeats} interleaved runs each (medians)")  # fmt: skip
    for case in ("up", "down"):
        worst = max(r[2] for r in runs[case])
        unfinished = sum(not r[3] for r in runs[case])
        print(f"    endpoint {case:<4}: wall {wall[case]:7.3f} s   CPU {cpu[case]:7.3f} s   "
              f"shutdown(timeout_s={SHUTDOWN_TIMEOUT_S:g}) at most {worst:5.2f} s, "
              f"{unfinished}/{len(runs[case])} timed out")  # fmt: skip
    print(f"    ratio down / up: wall {wall['down'] / wall['up']:6.3f}  (target <= 1.05)   "
          f"CPU {cpu['down'] / cpu['up']:6.3f}")  # fmt: skip
    print("    (the up case also pays the in-process receiver decoding every span; export "
          "threads of the down runs retry in the background after their shutdown timeout; "
          f"threads alive now: {threading.active_count()})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trajectories", type=int, default=300,
                        help="trajectories per CPU run, part (a) (default 300)")  # fmt: skip
    parser.add_argument("--loop-trajectories", type=int, default=100,
                        help="trajectories per agent-loop run, part (b) (default 100)")  # fmt: skip
    parser.add_argument("--turns", type=int, default=10, help="turns per trajectory (default 10)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="runs of each case, interleaved (default 5)")  # fmt: skip
    parser.add_argument("--concurrency", type=int, default=4,
                        help="trajectories in flight in the agent loop (default 4: the loop "
                             "waits on its sleeps rather than on the CPU)")  # fmt: skip
    args = parser.parse_args()
    counts = (args.trajectories, args.loop_trajectories, args.repeats, args.concurrency)
    if min(counts) < 1 or args.turns < 0:
        parser.error("trajectories, repeats and concurrency must be >= 1, --turns >= 0")
    # Export failures are the point of (b); keep their log lines off the report.
    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
    logging.getLogger("otel_rollout").setLevel(logging.ERROR)
    t0 = time.perf_counter()
    with OTLPReceiver() as receiver:
        part_a(receiver, args.trajectories, args.turns, args.repeats)
        t1 = time.perf_counter()
        part_b(receiver, args.loop_trajectories, args.turns, args.repeats, args.concurrency)
    print(f"    (part a {t1 - t0:.1f} s, part b {time.perf_counter() - t1:.1f} s)")


if __name__ == "__main__":
    main()
