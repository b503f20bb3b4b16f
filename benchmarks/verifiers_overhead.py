"""Per-rollout overhead of the verifiers instrumentor against the uninstrumented loop.

Runs the published verifiers' ``Agent.run`` (its ``Rollout``, interception server and
eval client) on ``--rollouts`` rollouts of ``--turns`` turns each, one after another,
against the stand-in streaming server of the tests (answering at once unless
``--generate-ms``) with the in-process harness of the tests (tool ``--tool-ms``).
Alternates uninstrumented and instrumented (in-memory export, breakdown processor,
histograms) for ``--rounds`` rounds, in this process, and prints the mean wall time per
rollout of each, the difference per rollout and per model call, and their ratio.

    PATH=$VENV/bin:$PATH $VENV/bin/python benchmarks/verifiers_overhead.py

(``$VENV``: the venv ``.ci/steps/41-verifiers.sh`` builds.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "_support"))
KEY_ENV = "OTEL_ROLLOUT_VF_BENCH_KEY"


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rollouts", type=int, default=20, help="rollouts per round (default 20)")
    p.add_argument("--turns", type=int, default=5, help="model calls per rollout (default 5)")
    p.add_argument("--rounds", type=int, default=5, help="rounds of each case (default 5)")
    p.add_argument("--generate-ms", type=float, default=0.0, help="server latency (default 0)")
    p.add_argument("--tool-ms", type=float, default=0.0, help="tool latency (default 0)")
    return p.parse_args()


async def rollouts(args: argparse.Namespace) -> float:
    """Mean wall seconds per rollout, rollouts run one after another."""
    import verifiers.v1 as vf
    from _verifiers import StandInServer, TimedHarnessConfig
    from verifiers.v1.clients import EvalClientConfig
    from verifiers.v1.configs.agent import AgentConfig
    from verifiers.v1.runtimes.subprocess import SubprocessConfig
    from verifiers.v1.task import TaskData

    async with StandInServer(args.generate_ms / 1000) as server:
        agent = vf.Agent(
            AgentConfig(
                model="stand-in",
                harness=TimedHarnessConfig(id="_verifiers", tool_s=args.tool_ms / 1000),
                runtime=SubprocessConfig(),
                client=EvalClientConfig(base_url=server.url, api_key_var=KEY_ENV),
            )
        )
        start = time.perf_counter()
        for i in range(args.rollouts):
            trace = await agent.run(vf.Task(TaskData(prompt=f"turns={args.turns}", id=str(i))))
            if not trace.ok:
                raise SystemExit(f"rollout failed: {trace.errors}")
        return (time.perf_counter() - start) / args.rollouts


def main() -> None:
    args = parse()
    os.environ.setdefault(KEY_ENV, "stand-in")
    import logging

    logging.disable(logging.WARNING)
    from otel_rollout.integrations.verifiers import VerifiersInstrumentor
    from otel_rollout.testing import make_test_env

    asyncio.run(rollouts(args))  # warm-up: imports, first connections
    plain: list[float] = []
    traced: list[float] = []
    for _ in range(args.rounds):
        plain.append(asyncio.run(rollouts(args)))
        env = make_test_env()
        inst = VerifiersInstrumentor()
        inst.instrument(
            tracer_provider=env.tracer_provider,
            meter_provider=env.meter_provider,
            processor=env.processor,
        )
        try:
            traced.append(asyncio.run(rollouts(args)))
        finally:
            inst.uninstrument()
            env.shutdown()
    p, t = statistics.median(plain), statistics.median(traced)
    print(f"verifiers rollouts: {args.rollouts} x {args.rounds} rounds, {args.turns} turns each")
    print(f"  uninstrumented  {p * 1e3:8.2f} ms per rollout (median of rounds)")
    print(f"  instrumented    {t * 1e3:8.2f} ms per rollout")
    print(f"  overhead        {(t - p) * 1e3:8.2f} ms per rollout, "
          f"{(t - p) * 1e6 / args.turns:7.0f} us per model call")  # fmt: skip
    print(f"  ratio           {t / p:8.3f}")


if __name__ == "__main__":
    main()
