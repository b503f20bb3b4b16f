"""A small traced rollout on the embedded default: the runnable example of the README."""

from __future__ import annotations

import asyncio
import random
import sys

from otel_rollout._accounting.summary import summarize
from otel_rollout._setup.config import configure


async def _one(tracer, i: int, rng: random.Random) -> None:
    async with tracer.trajectory(f"example-{i}", env="toy", model="sim") as traj:
        async with traj.env_setup():
            await asyncio.sleep(rng.uniform(0.002, 0.01))
        for _ in range(rng.randint(1, 4)):
            async with traj.generate() as gen:
                await asyncio.sleep(rng.uniform(0.005, 0.03))
                gen.record(input_tokens=100, output_tokens=rng.randint(10, 200))
            async with traj.env_step():
                await asyncio.sleep(rng.uniform(0.001, 0.02))
        async with traj.env_teardown():
            await asyncio.sleep(0.001)


def run_example(n: int = 16, seed: int = 0) -> dict[str, float]:
    """Run ``n`` toy trajectories through ``configure(local=True)`` and print the summary.

    Traces go where ``configure()`` sends them: with no OTLP endpoint set, an OTLP JSON
    lines file under ``./otel-rollout-output``.
    """
    rollout = configure(local=True, summary_stream=sys.stdout)
    rng = random.Random(seed)

    async def main() -> None:
        await asyncio.gather(*(_one(rollout.tracer, i, rng) for i in range(n)))

    asyncio.run(main())
    summary = summarize(rollout.collector.drain())
    for key, value in summary.items():
        print(f"{key:48s} {value:.4f}")
    rollout.shutdown()
    return summary
