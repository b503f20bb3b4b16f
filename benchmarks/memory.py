"""Memory per 1,000 trajectories in a long run, in each exporter mode.

    python benchmarks/memory.py                       # 200k trajectories, file, none, otlp
    python benchmarks/memory.py --modes file,none,otlp,otlp-down --trajectories 200000
    python benchmarks/memory.py --mode file --trajectories 10000 --warmup 5000 --json

Each mode runs in a process of its own (``otlp`` sends to a real receiver in the parent,
so the receiver's storage is not counted; ``otlp-down`` sends to a port nobody listens
on, as during a collector outage: every span is dropped and counted). Trajectories run
like a trainer's: a generate and an env step each, the collector drained every 1,000 (a
step). After ``--warmup`` trajectories, the Python heap (``sys.getallocatedblocks()``,
after ``gc.collect()``) and the resident set size are read every ``--window``
trajectories; the figures printed are their growth per 1,000 trajectories after warm-up.
Flat means 0 blocks per 1,000 (a leak of one object per trajectory shows as 1,000 or
more); RSS includes allocator slack and grows in steps, so read it over the whole run.
The bare OpenTelemetry SDK with a batch exporter to the same kind of file is run
alongside as a baseline (``--no-baseline`` skips it).
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _unused_endpoint() -> str:
    """A gRPC endpoint on a local port that nothing listens on: connections are refused."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def measure(mode: str, n: int, warmup: int, window: int, endpoint: str | None) -> dict:
    """Run ``warmup + n`` trajectories in this process; heap and RSS after each window."""
    import otel_rollout

    out_dir = tempfile.mkdtemp(prefix="otel-rollout-memory-")
    kw: dict = {"local": True, "output_dir": out_dir, "summary_stream": io.StringIO()}
    if mode == "none":
        kw["traces_exporter"] = "none"
    elif mode in ("otlp", "otlp-down"):
        if mode == "otlp-down":
            # What waits for the endpoint swings between an empty and a full queue as the
            # exporter gives up on a batch: a small queue keeps the swing small.
            os.environ.setdefault("OTEL_BSP_MAX_QUEUE_SIZE", "64")
            os.environ.setdefault("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "16")
        endpoint = endpoint or _unused_endpoint()
        kw.update(endpoint=endpoint, protocol="grpc", metrics_exporter="none")
    rollout = otel_rollout.configure(**kw)
    tracer = rollout.tracer

    def run(count: int, start: int) -> None:
        for i in range(start, start + count):
            with tracer.trajectory(f"traj-{i}", env="gsm8k", model="qwen3-8b") as traj:
                with traj.generate() as gen:
                    gen.record(input_tokens=212, output_tokens=64)
                with traj.env_step():
                    pass
            if i % 1000 == 999:
                rollout.collector.drain()  # a trainer's step

    # Nothing can be exported with the endpoint down: a flush would only wait its timeout.
    flush_s = 0.5 if mode == "otlp-down" else 10

    def settle() -> tuple[int, int]:
        rollout.force_flush(flush_s)
        gc.collect()
        return sys.getallocatedblocks(), _rss_bytes()

    t0 = time.perf_counter()
    run(warmup, 0)
    blocks0, rss0 = settle()
    points = []
    done = 0
    while done < n:
        count = min(window, n - done)
        run(count, warmup + done)
        done += count
        blocks, rss = settle()
        points.append({"trajectories": done, "blocks": blocks - blocks0, "rss": rss - rss0})
    ok = rollout.shutdown(10)
    stats = rollout.export_stats  # after shutdown: whatever it could not export is counted
    return {
        "mode": mode,
        "points": points,
        "seconds": time.perf_counter() - t0,
        "exported": stats.exported,
        "dropped": stats.dropped,
        "shutdown": ok,
        "collector_dropped": rollout.collector.dropped,
    }


def measure_baseline(n: int, warmup: int, window: int) -> dict:
    """The bare SDK: a TracerProvider, a batch processor, the official OTLP JSON file."""
    from opentelemetry.exporter.otlp.json.file import FileSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    path = Path(tempfile.mkdtemp(prefix="otel-rollout-memory-")) / "bare.jsonl"
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(FileSpanExporter(path)))
    tracer = provider.get_tracer("bare")

    def run(count: int) -> None:
        for _ in range(count):
            with tracer.start_as_current_span("trajectory"):
                with tracer.start_as_current_span("generate"):
                    pass
                with tracer.start_as_current_span("env_step"):
                    pass

    t0 = time.perf_counter()
    run(warmup)
    provider.force_flush()
    gc.collect()
    blocks0, rss0 = sys.getallocatedblocks(), _rss_bytes()
    points, done = [], 0
    while done < n:
        count = min(window, n - done)
        run(count)
        done += count
        provider.force_flush()
        gc.collect()
        points.append({"trajectories": done, "blocks": sys.getallocatedblocks() - blocks0,
                       "rss": _rss_bytes() - rss0})  # fmt: skip
    provider.shutdown()
    return {"mode": "bare-sdk", "points": points, "seconds": time.perf_counter() - t0}


def per_thousand(result: dict, key: str, first: int | None = None) -> float:
    """Growth of ``key`` per 1,000 trajectories from point ``first`` (the end of warm-up
    when None) to the last point."""
    points = result["points"]
    start_n, start_v = (0, 0) if first is None else (points[first]["trajectories"],
                                                     points[first][key])  # fmt: skip
    span = points[-1]["trajectories"] - start_n
    return (points[-1][key] - start_v) / (span / 1000) if span else 0.0


def _child(args: argparse.Namespace) -> None:
    if args.mode == "bare-sdk":
        result = measure_baseline(args.trajectories, args.warmup, args.window)
    else:
        result = measure(args.mode, args.trajectories, args.warmup, args.window, args.endpoint)
    print(json.dumps(result))


def start_mode(mode: str, n: int, warmup: int, window: int,
               endpoint: str | None = None) -> subprocess.Popen:  # fmt: skip
    """Start one mode in a fresh process; :func:`result_of` waits for its result."""
    cmd = [sys.executable, __file__, "--mode", mode, "--trajectories", str(n), "--warmup",
           str(warmup), "--window", str(window), "--json"]  # fmt: skip
    if endpoint:
        cmd += ["--endpoint", endpoint]
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)  # fmt: skip


def result_of(proc: subprocess.Popen, timeout_s: float | None = None) -> dict:
    out, err = proc.communicate(timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(proc.args[2:4])} run failed:\n{err}")
    return json.loads(out.strip().splitlines()[-1])


def run_mode(mode: str, n: int, warmup: int, window: int, endpoint: str | None = None) -> dict:
    """Run one mode in a fresh process; returns its result."""
    return result_of(start_mode(mode, n, warmup, window, endpoint))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--modes",
        default="file,none,otlp",
        help="comma-separated: file, none, otlp, otlp-down (default file,none,otlp)",
    )
    p.add_argument("--mode", help=argparse.SUPPRESS)
    p.add_argument("--trajectories", type=int, default=200_000, help="measured, after warm-up")
    p.add_argument(
        "--warmup", type=int, default=10_000, help="trajectories before the first reading"
    )
    p.add_argument("--window", type=int, default=10_000, help="trajectories between readings")
    p.add_argument("--endpoint", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-baseline", action="store_true", help="skip the bare SDK run")
    args = p.parse_args()
    if args.json:
        _child(args)
        return
    modes = [m for m in args.modes.split(",") if m]
    if not args.no_baseline:
        modes.append("bare-sdk")
    receiver = None
    if "otlp" in modes:
        from otel_rollout.testing.receiver import OTLPReceiver

        receiver = OTLPReceiver().start()
    print(f"{args.trajectories} trajectories after {args.warmup} of warm-up, per 1,000:")
    try:
        for mode in modes:
            endpoint = receiver.grpc_endpoint if receiver and mode == "otlp" else None
            r = run_mode(mode, args.trajectories, args.warmup, args.window, endpoint)
            blocks = per_thousand(r, "blocks")
            rss = per_thousand(r, "rss")
            extra = ""
            if "exported" in r:
                extra = f"  exported {r['exported']} spans, dropped {r['dropped']}"
            print(f"  {mode:<9} heap {blocks:8.1f} blocks  RSS {rss:10.0f} bytes  "
                  f"({r['seconds']:.0f} s){extra}")  # fmt: skip
    finally:
        if receiver is not None:
            receiver.stop()


if __name__ == "__main__":
    main()
