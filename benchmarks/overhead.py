"""Overhead of otel-rollout against a bare SDK TracerProvider, in one process.

Prints the CPU time of a 10-turn trajectory (root + setup + 10 generate + 10 env.step +
teardown) through otel-rollout (RolloutTracer + BreakdownProcessor + histograms) and
through a bare SDK provider, both with the same BatchSpanProcessor, as a ratio; and the
processor's memory per in-flight trajectory (tracemalloc) with 10,000 in flight.

    python benchmarks/overhead.py [--trajectories N]
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind

from otel_rollout import RolloutTracer
from otel_rollout.sdk import BreakdownProcessor

TURNS = 10


class NullExporter(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS


def bare_tree(tracer) -> None:
    """The span tree of ``rollout_tree`` by hand: same spans, kinds and start attributes
    (the GenAI semantic-convention ones included), no accounting and no histograms."""
    tid = "x"
    with tracer.start_as_current_span(
        "trajectory",
        attributes={
            "rollout.trajectory.id": tid,
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.conversation.id": tid,
            "rollout.env.class": "bench",
            "gen_ai.agent.name": "bench",
            "gen_ai.request.model": "m",
        },
    ):
        with tracer.start_as_current_span("env_setup", attributes={"rollout.phase": "env_setup"}):
            pass
        for i in range(TURNS):
            with tracer.start_as_current_span(
                "generate",
                kind=SpanKind.CLIENT,
                attributes={
                    "rollout.phase": "llm",
                    "gen_ai.operation.name": "chat",
                    "gen_ai.conversation.id": tid,
                    "gen_ai.request.model": "m",
                    "rollout.turn": i,
                },
            ):
                pass
            with tracer.start_as_current_span(
                "env_step",
                attributes={
                    "rollout.phase": "env",
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "bench",
                    "gen_ai.tool.type": "function",
                    "gen_ai.conversation.id": tid,
                    "rollout.turn": i,
                },
            ):
                pass
        with tracer.start_as_current_span(
            "env_teardown", attributes={"rollout.phase": "env_teardown"}
        ):
            pass


def rollout_tree(tracer: RolloutTracer) -> None:
    with tracer.trajectory("x", env="bench", model="m") as traj:
        with traj.env_setup():
            pass
        for _ in range(TURNS):
            with traj.generate():
                pass
            with traj.env_step():
                pass
        with traj.env_teardown():
            pass


def cpu_per_call(fn, n: int, then=None) -> float:
    """Process CPU per call of ``fn`` (every thread), ``then()`` included: the metric
    collection that records the histograms of the trajectories that ended."""
    for _ in range(min(200, n)):
        fn()
    if then is not None:
        then()
    gc.collect()
    t0 = time.process_time()
    for _ in range(n):
        fn()
    if then is not None:
        then()
    return (time.process_time() - t0) / n


def bare_setup():
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(NullExporter(), max_queue_size=1 << 16))
    return provider


def rollout_setup(record_metrics: bool = True):
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader])
    provider = TracerProvider()
    provider.add_span_processor(BreakdownProcessor(meter, record_metrics=record_metrics))
    provider.add_span_processor(BatchSpanProcessor(NullExporter(), max_queue_size=1 << 16))
    return provider, reader


def memory_per_in_flight(n: int = 10_000) -> tuple[float, float]:
    """Bytes per in-flight trajectory (halfway through 10 turns): total, and processor state."""

    def fill(tracer: RolloutTracer):
        scopes = []
        for i in range(n):
            scope = tracer.trajectory(f"t{i}", env="bench", model="m")
            traj = scope.__enter__()
            with traj.env_setup():
                pass
            for _ in range(TURNS // 2):
                with traj.generate():
                    pass
                with traj.env_step():
                    pass
            scopes.append(scope)
        return scopes

    def measure(provider) -> float:
        tracer = RolloutTracer(provider)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        scopes = fill(tracer)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        for s in reversed(scopes):
            s.__exit__(None, None, None)
        return (after - before) / n

    import contextvars

    bare = TracerProvider()  # no export processor: keep spans out of a queue
    with_proc = TracerProvider()
    with_proc.add_span_processor(BreakdownProcessor(MeterProvider()))
    total = contextvars.copy_context().run(measure, with_proc)
    baseline = contextvars.copy_context().run(measure, bare)
    return total, total - baseline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trajectories", type=int, default=3000)
    args = parser.parse_args()
    n = args.trajectories

    bare_provider = bare_setup()
    bare_tracer = bare_provider.get_tracer("bench")
    ro_provider, ro_reader = rollout_setup()
    ro_tracer = RolloutTracer(ro_provider)
    nm_provider, _ = rollout_setup(record_metrics=False)
    nm_tracer = RolloutTracer(nm_provider)
    bare_s, ours_s, nm_s = [], [], []
    for _ in range(3):  # interleave to share the machine's noise
        bare_s.append(cpu_per_call(lambda: bare_tree(bare_tracer), n))
        ours_s.append(
            cpu_per_call(lambda: rollout_tree(ro_tracer), n, then=ro_reader.get_metrics_data)
        )
        nm_s.append(cpu_per_call(lambda: rollout_tree(nm_tracer), n))
    bare, ours, no_metrics = min(bare_s), min(ours_s), min(nm_s)
    for p in (bare_provider, ro_provider, nm_provider):
        p.shutdown()
    total, state = memory_per_in_flight()
    print(f"10-turn trajectory, bare SDK + batch export : {bare * 1e6:8.1f} us CPU")
    print(f"10-turn trajectory, otel-rollout + batch    : {ours * 1e6:8.1f} us CPU")
    print(f"10-turn trajectory, otel-rollout no metrics : {no_metrics * 1e6:8.1f} us CPU")
    print(f"ratio otel-rollout / bare SDK               : {ours / bare:8.3f}  (target <= 1.25)")
    print(f"ratio without histograms / bare SDK         : {no_metrics / bare:8.3f}")
    print(f"per in-flight trajectory, processor state   : {state:8.0f} B    (target <= 2048)")
    print(f"per in-flight trajectory, spans + state     : {total:8.0f} B")


if __name__ == "__main__":
    main()
