"""Per-rollout overhead of the verifiers instrumentor against the uninstrumented loop.

Runs the published verifiers' ``Agent.run`` (its ``Rollout``, interception server and
eval client) on ``--rollouts`` rollouts of ``--turns`` turns each, one after another,
against the stand-in streaming server of the tests (answering at once unless
``--generate-ms``) with the in-process harness of the tests (tool ``--tool-ms``).
Alternates uninstrumented, instrumented (in-memory export, breakdown processor,
histograms, loop-stall attribution on: the default) and instrumented with loop-stall
attribution off, for ``--rounds`` rounds, in this process, and prints the wall and
process CPU time per rollout of each (medians of rounds), the overheads and ratios.
Wall time on a loaded machine is noisy; process CPU time less so.

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


async def rollouts(args: argparse.Namespace) -> tuple[float, float]:
    """Mean wall and process CPU seconds per rollout, rollouts run one after another
    through one entered agent (one interception server for them all)."""
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
        async with agent:
            start, cpu = time.perf_counter(), time.process_time()
            for i in range(args.rollouts):
                task = vf.Task(TaskData(prompt=f"turns={args.turns}", id=str(i)))
                trace = await agent.run(task)
                if not trace.ok:
                    raise SystemExit(f"rollout failed: {trace.errors}")
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        return wall / args.rollouts, cpu / args.rollouts


def main() -> None:
    args = parse()
    os.environ.setdefault(KEY_ENV, "stand-in")
    import logging

    logging.disable(logging.WARNING)
    from otel_rollout.integrations.verifiers import VerifiersInstrumentor
    from otel_rollout.testing import make_test_env

    asyncio.run(rollouts(args))  # warm-up: imports, first connections
    from otel_rollout.sdk import configure_loop_stalls

    plain: list[tuple[float, float]] = []
    traced: list[tuple[float, float]] = []
    no_stalls: list[tuple[float, float]] = []
    for _ in range(args.rounds):
        plain.append(asyncio.run(rollouts(args)))
        for stalls, runs in ((True, traced), (False, no_stalls)):
            configure_loop_stalls(stalls)
            env = make_test_env()
            inst = VerifiersInstrumentor()
            inst.instrument(
                tracer_provider=env.tracer_provider,
                meter_provider=env.meter_provider,
                processor=env.processor,
            )
            try:
                runs.append(asyncio.run(rollouts(args)))
            finally:
                inst.uninstrument()
                env.shutdown()
    configure_loop_stalls(True)
    print(f"verifiers rollouts: {args.rollouts} x {args.rounds} rounds, {args.turns} turns each")
    print("                   wall ms/rollout   CPU ms/rollout   (medians of rounds)")
    medians = []
    cases = (("uninstrumented", plain), ("instrumented", traced), ("  no loop stalls", no_stalls))
    for label, runs in cases:
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        medians.append((wall, cpu))
        print(f"  {label:15s} {wall * 1e3:12.2f} {cpu * 1e3:16.2f}")
    (pw, pc), *rest = medians
    for label, (tw, tc) in zip(("instrumented", "  no loop stalls"), rest, strict=True):
        print(f"  overhead, {label.strip():16s} {(tw - pw) * 1e3:8.2f} ms wall "
              f"({tw / pw:.3f}x), {(tc - pc) * 1e3:6.2f} ms CPU ({tc / pc:.3f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
