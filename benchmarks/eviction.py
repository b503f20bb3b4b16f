"""What a trajectory start costs once the breakdown processor is at its in-flight cap.

Past ``max_in_flight`` every new trajectory evicts the oldest one. With leaked handles
(trajectories whose root never ends, each with a phase still open) that eviction must
stay as cheap as a start below the cap, and must not hold the processor's lock long:
this prints the cost of a start at the cap as a multiple of a start far below it, in
this process, with the same spans (1.0: no dearer).

    python benchmarks/eviction.py [--in-flight 100000] [--starts 2000]
"""

from __future__ import annotations

import argparse
import time

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from otel_rollout import attributes as A
from otel_rollout.sdk import BreakdownProcessor


def _leak(tracer, n: int, first: int) -> list:
    """``n`` trajectories whose root and one phase never end (handles leaked)."""
    kept = []
    for i in range(first, first + n):
        root = tracer.start_span("trajectory", attributes={A.TRAJECTORY_ID: f"t{i}"})
        ctx = trace.set_span_in_context(root)
        kept.append((root, tracer.start_span("llm", context=ctx,
                                             attributes={A.PHASE: A.PHASE_LLM})))  # fmt: skip
    return kept


def per_start(in_flight: int, starts: int, cap: int) -> float:
    """Seconds a start costs with ``in_flight`` trajectories already open (cap ``cap``)."""
    processor = BreakdownProcessor(max_in_flight=cap, record_metrics=False)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("bench")
    kept = _leak(tracer, in_flight, 0)
    t0 = time.perf_counter()
    kept += _leak(tracer, starts, in_flight)
    took = time.perf_counter() - t0
    assert processor.in_flight <= cap
    return took / starts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--in-flight",
        type=int,
        default=100_000,
        help="trajectories open when the timed starts begin (the cap)",
    )
    parser.add_argument("--starts", type=int, default=2000, help="starts timed")
    args = parser.parse_args()  # fmt: skip
    base = per_start(100, args.starts, args.in_flight)
    at_cap = per_start(args.in_flight, args.starts, args.in_flight)
    print(f"start below the cap: {base * 1e6:8.1f} us")
    print(f"start at the cap ({args.in_flight} in flight, each evicting one): "
          f"{at_cap * 1e6:8.1f} us")  # fmt: skip
    print(f"ratio: {at_cap / base:.2f}")


if __name__ == "__main__":
    main()
