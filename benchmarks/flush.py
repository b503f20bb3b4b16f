"""How long ``force_flush(timeout)`` holds the caller while the endpoint stalls or is down.

A trainer that flushes at the end of each step must get its thread back within the
timeout it asked for. Each case runs otel-rollout (``configure()``, OTLP gRPC) and, as
the baseline, the bare SDK (a ``BatchSpanProcessor`` over the OTLP gRPC exporter) against
the same endpoint, in this process, and prints the seconds each flush took as a multiple
of its timeout (1.0 or less: within it).

    python benchmarks/flush.py [--trajectories 20] [--timeout 0.5] [--delay 3]

Cases: ``stalled``, a real receiver (``otel_rollout.testing.receiver``) that takes
``--delay`` seconds per export request; ``refused``, a local port nobody listens on.
Queues of 64 spans in batches of 16, as in ``tests/system/test_faults.py``; 3 spans a trajectory;
the exporter's own timeout is the SDK's default (``OTEL_EXPORTER_OTLP_TIMEOUT``, 10 s).
"""

from __future__ import annotations

import argparse
import io
import os
import socket
import time

os.environ.setdefault("OTEL_BSP_MAX_QUEUE_SIZE", "64")
os.environ.setdefault("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "16")
os.environ.setdefault("OTEL_BSP_SCHEDULE_DELAY", "20")

import otel_rollout
from otel_rollout.testing.receiver import OTLPReceiver


def _refused_endpoint() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def ours(endpoint: str, n: int, timeout_s: float) -> tuple[float, bool]:
    rollout = otel_rollout.configure(
        local=True, endpoint=endpoint, protocol="grpc", metrics_exporter="none",
        summary_stream=io.StringIO(),
    )  # fmt: skip
    for i in range(n):
        with rollout.tracer.trajectory(f"t{i}", env="bench") as traj:
            with traj.generate():
                pass
            with traj.env_step():
                pass
    t0 = time.perf_counter()
    ok = rollout.force_flush(timeout_s)
    took = time.perf_counter() - t0
    rollout.shutdown(0.1)
    return took, ok


def bare(endpoint: str, n: int, timeout_s: float) -> tuple[float, bool]:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(shutdown_on_exit=False)
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    for _ in range(n):
        with tracer.start_as_current_span("trajectory"):
            with tracer.start_as_current_span("generate"):
                pass
            with tracer.start_as_current_span("env_step"):
                pass
    t0 = time.perf_counter()
    ok = provider.force_flush(int(timeout_s * 1000))
    return time.perf_counter() - t0, ok


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trajectories", type=int, default=20, help="3 spans each (default 20)")
    p.add_argument(
        "--timeout", type=float, default=0.5, help="force_flush timeout, seconds (default 0.5)"
    )
    p.add_argument(
        "--delay", type=float, default=3.0, help="stalled receiver, s per request (default 3)"
    )
    args = p.parse_args()
    rx = OTLPReceiver().start()
    try:
        cases = {"stalled": rx.grpc_endpoint, "refused": _refused_endpoint()}
        print(f"force_flush({args.timeout}) after {args.trajectories} trajectories: "
              "seconds taken / timeout")  # fmt: skip
        for case, endpoint in cases.items():
            rx.delay_s = args.delay
            row = []
            for name, fn in (("bare SDK", bare), ("otel-rollout", ours)):
                took, ok = fn(endpoint, args.trajectories, args.timeout)
                row.append(took)
                print(f"  {case:<8} {name:<13} {took:7.2f} s  {took / args.timeout:6.1f}x  "
                      f"returned {ok}", flush=True)  # fmt: skip
            print(f"  {case:<8} otel-rollout / bare SDK: {row[1] / row[0]:.3f}")
            rx.delay_s = 0.0
    finally:
        rx.delay_s = 0.0
        rx.stop()


if __name__ == "__main__":
    main()
