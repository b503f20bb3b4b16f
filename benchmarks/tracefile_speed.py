"""Trace-file encoding speed: spans per CPU second, ours against the official encoders.

The spans are those of real 10-turn trajectories (23 spans each, the breakdown on the
root) made through ``RolloutTracer`` and ``BreakdownProcessor``; they are encoded in
batches of 512 (the batch span processor's size) by:

- the official OTLP JSON encoder (``opentelemetry-exporter-otlp-json-common``'s
  ``encode_spans`` + ``to_dict`` + ``json.dumps``: what the trace file used before),
- the official protobuf encoder (``opentelemetry-exporter-otlp-proto-common``, what the
  OTLP gRPC/HTTP exporters send), and
- the trace file's own (``otel_rollout._export.otlp_json.encode_spans_line``).

CPU time of this process only (``time.process_time``), so the figure is per core and
hardly moves with the machine's load. The two JSON outputs are checked equal once parsed.

    python benchmarks/tracefile_speed.py [--trajectories 200] [--seconds 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def trajectory_spans(n: int) -> list:
    """The finished spans of ``n`` 10-turn trajectories through otel-rollout."""
    sys.path.insert(0, str(Path(__file__).parent))
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from overhead import rollout_tree

    from otel_rollout import RolloutTracer
    from otel_rollout.sdk import BreakdownProcessor

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    processor = BreakdownProcessor(record_metrics=False)
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = RolloutTracer(provider, processor=processor)
    for _ in range(n):
        rollout_tree(tracer)
    return list(exporter.get_finished_spans())


def _official_json(batch):
    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans

    return (json.dumps(encode_spans(batch).to_dict(), separators=(",", ":")) + "\n").encode()


def _official_proto(batch):
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return encode_spans(batch).SerializeToString()


def _ours(batch):
    from otel_rollout._export.otlp_json import encode_spans_line

    return encode_spans_line(batch)


def rate(encode, batches, seconds: float) -> float:
    """Spans encoded per CPU second."""
    encode(batches[0])  # imports, caches
    n, start = 0, time.process_time()
    while time.process_time() - start < seconds:
        for b in batches:
            encode(b)
            n += len(b)
    return n / (time.process_time() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--trajectories",
        type=int,
        default=200,
        help="trajectories whose spans are encoded (default 200)",
    )
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="CPU seconds per encoder (default 3)"
    )
    args = parser.parse_args()
    spans = trajectory_spans(args.trajectories)
    batches = [spans[i : i + 512] for i in range(0, len(spans), 512)]
    if json.loads(_ours(batches[0])) != json.loads(_official_json(batches[0])):
        print("the two JSON encodings differ", file=sys.stderr)
        return 1
    rates = {
        "official OTLP JSON (encode_spans + json.dumps)": rate(
            _official_json, batches, args.seconds
        ),
        "official OTLP protobuf (gRPC/HTTP exporters)": rate(
            _official_proto, batches, args.seconds
        ),
        "otel-rollout trace file (otlp_json + orjson)": rate(_ours, batches, args.seconds),
    }
    print(f"{len(spans)} spans, batches of 512; spans per CPU second:")
    for label, r in rates.items():
        print(f"  {label:<48} {r / 1e3:8.1f} k")
    ours = rates["otel-rollout trace file (otlp_json + orjson)"]
    print(f"  {'ratio trace file / official JSON':<48} {ours / next(iter(rates.values())):8.2f} x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
