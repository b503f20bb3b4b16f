"""What each reader of the SDK's private state (``otel_rollout/_base/sdk_access.py``) saves.

Each case runs the same work twice per round, once through the reader and once through
the public API fallback it has (patched in), alternating, and prints the median CPU time
per span of each and their difference:

* ``hooks``: the breakdown processor's ``on_start`` + ``on_end`` per span (10-turn
  trajectories, no export);
* ``phase``: a phase span's enter and exit through ``RolloutTracer`` (the context
  variable against the API's attach/detach);
* ``encode``: the trace file's encoder per span (fields against properties).

    python benchmarks/sdk_access.py [--trajectories 2000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_rollout import RolloutTracer
from otel_rollout._api import phase_scope
from otel_rollout._base import sdk_access
from otel_rollout._export import otlp_json
from otel_rollout.sdk import BreakdownProcessor

TURNS = 10
SPANS = 2 + 2 * TURNS  # root, env setup, a generate and an env step per turn


def _trajectories(tracer: RolloutTracer, n: int) -> None:
    for i in range(n):
        with tracer.trajectory(f"t{i}", env="bench", model="m") as traj:
            with traj.env_setup():
                pass
            for _ in range(TURNS):
                with traj.generate():
                    pass
                with traj.env_step():
                    pass


@contextmanager
def _public_hooks():
    saved = sdk_access.started, sdk_access.ended, sdk_access.attributes
    sdk_access.started = lambda s: (s.attributes or sdk_access.EMPTY, s.parent,
                                    s.get_span_context(), s.start_time)  # fmt: skip
    sdk_access.ended = lambda s: (s.context.span_id, s.end_time, s.attributes or sdk_access.EMPTY)
    sdk_access.attributes = lambda s: s.attributes or sdk_access.EMPTY
    try:
        yield
    finally:
        sdk_access.started, sdk_access.ended, sdk_access.attributes = saved


@contextmanager
def _public_context():
    saved = phase_scope._OTEL_CONTEXT
    phase_scope._OTEL_CONTEXT = None
    try:
        yield
    finally:
        phase_scope._OTEL_CONTEXT = saved


@contextmanager
def _public_encoder():
    saved = otlp_json.span_fields
    otlp_json.span_fields = sdk_access.public_fields
    try:
        yield
    finally:
        otlp_json.span_fields = saved


def _processor_only(n: int) -> Callable[[], None]:
    provider = TracerProvider()
    processor = BreakdownProcessor(record_metrics=False)
    provider.add_span_processor(processor)
    tracer = RolloutTracer(provider, processor=processor)
    return lambda: _trajectories(tracer, n)


def _encoder(n: int) -> Callable[[], None]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _trajectories(RolloutTracer(provider), n)
    spans = exporter.get_finished_spans()

    def encode() -> None:
        for k in range(0, len(spans), 512):
            otlp_json.encode_spans_line(spans[k : k + 512])

    return encode


def _per_span(work: Callable[[], None], spans: int) -> float:
    start = time.process_time()
    work()
    return (time.process_time() - start) / spans * 1e6


def _case(name: str, work: Callable[[], None], public: Any, spans: int, rounds: int) -> None:
    work()  # warm-up
    fast, slow = [], []
    for _ in range(rounds):
        fast.append(_per_span(work, spans))
        with public():
            slow.append(_per_span(work, spans))
    f, s = statistics.median(fast), statistics.median(slow)
    print(f"{name:<8} reader {f:6.2f} us/span   public API {s:6.2f} us/span   "
          f"saves {s - f:5.2f} us ({(s - f) / s:.0%})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    n, spans = args.trajectories, args.trajectories * SPANS
    _case("hooks", _processor_only(n), _public_hooks, spans, args.rounds)
    _case("phase", _processor_only(n), _public_context, spans, args.rounds)
    _case("encode", _encoder(n), _public_encoder, spans, args.rounds)


if __name__ == "__main__":
    main()
