"""What the in-flight record costs: per record, and per trajectory at a given rate.

The record is written on a thread of its own once per interval (1 s by default with the
trace file); the agent threads pay nothing per span, only a wait for the processor's
lock while the record copies its two maps. This measures, in one process, with ``K``
trajectories running (each inside a generate call):

* the CPU of one record (snapshot, log record, OTLP JSON encoding, the write to a trace
  file),
* how long it holds the processor's lock (what an agent thread may wait, once a record),
* the baseline: the CPU of one 10-turn trajectory through the same tracer and processor
  (histograms on, batch export to a null exporter), measured here too;

and prints, for a run finishing ``R`` trajectories a second with ``K`` running, the
records' CPU per trajectory as a share of that baseline (the README's figures are per
trajectory: a share under 0.02 keeps them within 2%).

    python benchmarks/in_flight.py [--trajectories 2000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from overhead import NullExporter, rollout_tree

from otel_rollout import RolloutTracer
from otel_rollout._export.in_flight import MAX_CPU_SHARE, InFlightRecorder
from otel_rollout._export.log_file import TraceFileLogExporter
from otel_rollout._export.tracefile import RotatingTraceFile
from otel_rollout._processing.breakdown_processor import DEFAULT_MAX_LISTED, in_flight
from otel_rollout.sdk import BreakdownProcessor

RUNNING = (100, 1000, 10000)
RATES = (10, 100, 1000)
RECORDS = 20


def setup() -> tuple[RolloutTracer, BreakdownProcessor, MeterProvider]:
    provider = TracerProvider()
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    processor = BreakdownProcessor(meters)
    provider.add_span_processor(processor)
    provider.add_span_processor(
        BatchSpanProcessor(NullExporter(), schedule_delay_millis=600_000, max_queue_size=1 << 20)
    )
    return RolloutTracer(provider, processor=processor), processor, meters


def trajectory_cpu_us(n: int) -> float:
    tracer, _, _ = setup()
    for _ in range(50):
        rollout_tree(tracer)
    t0 = time.process_time()
    for _ in range(n):
        rollout_tree(tracer)
    return (time.process_time() - t0) / n * 1e6


def record_cost(k: int, folder: Path) -> tuple[float, float]:
    """(CPU us of one record, us the processor's lock is held) with ``k`` running."""
    tracer, processor, _ = setup()
    with ExitStack() as stack:
        for i in range(k):
            t = stack.enter_context(tracer.trajectory(f"t{i}", env=f"env{i % 4}"))
            stack.enter_context(t.generate())
        provider = LoggerProvider(resource=Resource.create({}), shutdown_on_exit=False)
        trace_file = RotatingTraceFile(folder / f"in-flight-{k}.jsonl")
        provider.add_log_record_processor(
            SimpleLogRecordProcessor(TraceFileLogExporter(trace_file))
        )
        exporter = InFlightRecorder(
            lambda: in_flight(processor, DEFAULT_MAX_LISTED), provider, interval_s=3600
        )
        exporter.write_record()
        t0 = time.process_time()
        for _ in range(RECORDS):
            exporter.write_record()
        cpu = (time.process_time() - t0) / RECORDS * 1e6
        t0 = time.perf_counter()
        for _ in range(RECORDS):
            with processor._lock:
                list(processor._trajs.values())
                list(processor._open.values())
        held = (time.perf_counter() - t0) / RECORDS * 1e6
        exporter.shutdown()
    return cpu, held


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectories", type=int, default=2000,
                        help="trajectories timed for the baseline")  # fmt: skip
    args = parser.parse_args()
    base = trajectory_cpu_us(args.trajectories)
    print(f"baseline: one 10-turn trajectory, otel-rollout + histograms: {base:8.1f} us CPU")
    with tempfile.TemporaryDirectory() as tmp:
        costs = {k: record_cost(k, Path(tmp)) for k in RUNNING}
    for k, (cpu, held) in costs.items():
        share = min(cpu / 1e6, MAX_CPU_SHARE)
        print(f"one record, {k:>6} running: {cpu:9.1f} us CPU, lock held {held:7.1f} us, "
              f"{100 * share:.2f}% of a core")  # fmt: skip
    print("records' CPU per trajectory / baseline (one record a second, at most 1% of a core):")
    print("  running \\ finished/s " + "".join(f"{r:>10}" for r in RATES))
    for k, (cpu, _) in costs.items():
        per_s = min(cpu, MAX_CPU_SHARE * 1e6)
        print(f"  {k:>20} " + "".join(f"{per_s / r / base:10.4f}" for r in RATES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
