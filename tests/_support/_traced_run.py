"""A traced run in its own process, exporting over OTLP where OTEL_EXPORTER_OTLP_ENDPOINT
points (tests/system/test_backends*.py start it against the real Collector).

    python tests/_support/_traced_run.py demo N CONCURRENCY OUTDIR
        The demo workload (run_demo_async: skyrl-gym envs, simulated engine). Writes
        OUTDIR/online.json: the online breakdowns, and the path of the local trace file.
    python tests/_support/_traced_run.py toy OUTDIR
        One configure()d run that goes on while the test acts on the backends: each stdin
        line "N FAIL_EVERY" runs N short trajectories (every FAIL_EVERY-th raises, so its
        trajectory ends with status error; 0: none fail), flushes, and answers with one
        JSON line of their breakdowns (and writes one in-flight record while they run).
        "exit" shuts down.

Every span also goes to OUTDIR's OTLP JSON lines file: what the process emitted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
from pathlib import Path
from typing import Any


def _bd(b: Any) -> dict[str, Any]:
    return {
        "trajectory_id": b.trajectory_id,
        "trace_id": b.trace_id,
        "status": b.status,
        "env_class": b.env_class,
        "start_time_ns": b.start_time_ns,
        "end_time_ns": b.end_time_ns,
        "nanos": dict(b.nanos),
        "batch_id": b.batch_id,
    }


def demo(n: int, concurrency: int, out: Path) -> None:
    from otel_rollout.demo._run import run_demo_async

    result = asyncio.run(run_demo_async(n=n, concurrency=concurrency, output_dir=out))
    doc = {
        "breakdowns": [_bd(b) for b in result.breakdowns],
        "trace_file": str(result.trace_file),
        "errors": result.errors,
    }
    (out / "online.json").write_text(json.dumps(doc))


class Failure(RuntimeError):
    pass


async def _toy(tracer: Any, i: int, fail: bool, rng: random.Random) -> None:
    async with tracer.trajectory(f"toy-{i}", env="toy", model="sim") as traj:
        async with traj.env_setup():
            await asyncio.sleep(rng.uniform(0.001, 0.005))
        for _ in range(rng.randint(1, 3)):
            async with traj.generate() as gen:
                await asyncio.sleep(rng.uniform(0.002, 0.01))
                gen.record(input_tokens=10, output_tokens=rng.randint(1, 50))
            async with traj.env_step():
                await asyncio.sleep(rng.uniform(0.001, 0.005))
        if fail:
            raise Failure(f"toy-{i} failed on purpose")
        async with traj.env_teardown():
            await asyncio.sleep(0.001)


def toy(out: Path) -> None:
    from opentelemetry.exporter.otlp.json.file import FileSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from otel_rollout import configure

    rollout = configure(local=True, service_name="otel-rollout-toy", metric_export_interval_ms=1000)
    rollout.tracer_provider.add_span_processor(
        BatchSpanProcessor(FileSpanExporter(out / "emitted.jsonl"))
    )
    rng = random.Random(7)
    start = 0
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "exit":
            break
        n, fail_every = int(words[0]), int(words[1])

        async def batch(first: int = start, n: int = n, fail_every: int = fail_every) -> None:
            async def one(i: int) -> None:
                with contextlib.suppress(Failure):  # the trajectory ended with status error
                    await _toy(rollout.tracer, i, bool(fail_every) and i % fail_every == 0, rng)

            tasks = [asyncio.ensure_future(one(i)) for i in range(first, first + n)]
            await asyncio.sleep(0)  # each has started its trajectory
            rollout._recorder.write_record()  # an in-flight record (OTLP logs) while they run
            await asyncio.gather(*tasks)

        asyncio.run(batch())
        start += n
        rollout.force_flush()
        bds = [_bd(b) for b in rollout.collector.drain()]
        print(json.dumps({"breakdowns": bds}), flush=True)
    rollout.shutdown()


if __name__ == "__main__":
    if sys.argv[1] == "demo":
        demo(int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
    else:
        toy(Path(sys.argv[2]))
