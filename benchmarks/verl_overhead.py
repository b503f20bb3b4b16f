"""The VerlInstrumentor's cost per trajectory against verl's uninstrumented agent loop.

Runs verl 0.9.1's own ``AgentLoopWorker.generate_sequences`` (``ToolAgentLoop``, its
hydra ``ppo_trainer`` config, ``LLMServerClient`` and ``GlobalRequestLoadBalancer``) on
``--samples`` samples of ``--turns`` turns each, against the stand-in replica of the verl
tests answering after ``--generate-ms`` and a function tool taking ``--tool-ms`` (both 0
by default, so the loop's own work is all there is to time). Rounds alternate between
uninstrumented and instrumented (an in-memory pipeline: the breakdown processor, the
histograms and an in-memory span exporter), ``--rounds`` of each after one warm-up of
each. Prints the median wall time of a step per case, the ratio, and the difference
per trajectory and per turn: with zero latencies the wall time is the loop's CPU time,
so the difference is what the instrumentation costs the trainer's event loop.

    PYTHONPATH=.:tests/_support /work/venvs/verl-<hash>/bin/python benchmarks/verl_overhead.py

(``.ci/steps/40-verl.sh`` builds that venv; ``--help`` for the options.)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "_support"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=16, help="samples per step (16)")
    parser.add_argument("--turns", type=int, default=4, help="turns per sample (4)")
    parser.add_argument("--rounds", type=int, default=7, help="steps timed per case (7)")
    parser.add_argument(
        "--generate-ms", type=float, default=0.0, help="the replica's latency per call (0)"
    )
    parser.add_argument("--tool-ms", type=float, default=0.0, help="the tool's latency (0)")
    args = parser.parse_args()

    import _verl
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    from otel_rollout.integrations.verl import VerlInstrumentor
    from otel_rollout.testing import make_test_env

    root = Path(tempfile.mkdtemp(prefix="verl-overhead-"))
    model = _verl.build_model_dir(root)
    tool = _verl.write_tool(root, args.tool_ms / 1000)
    config = _verl.ppo_config(model, tool)
    client = _verl.local_client(config, model, args.generate_ms / 1000)
    worker = AgentLoopWorker(config, client)
    turns = [args.turns] * args.samples

    def step() -> float:
        data = _verl.prompts(turns)
        gc.collect()
        t0 = time.perf_counter()
        asyncio.run(worker.generate_sequences(data))
        return time.perf_counter() - t0

    env = make_test_env()
    times: dict[str, list[float]] = {"off": [], "on": []}
    instrumentor = VerlInstrumentor()
    for i in range(args.rounds + 1):
        for case in ("off", "on"):
            if case == "on":
                instrumentor.instrument(rollout_tracer=env.tracer)
            try:
                took = step()
            finally:
                if case == "on":
                    instrumentor.uninstrument()
                    env.span_exporter.clear()
                    env.collector.drain()
            if i > 0:  # the first round of each case warms caches up
                times[case].append(took)
    off, on = statistics.median(times["off"]), statistics.median(times["on"])
    per_traj = (on - off) / args.samples
    print(f"verl 0.9.1 agent loop: {args.samples} samples x {args.turns} turns, "
          f"generate {args.generate_ms:g} ms, tool {args.tool_ms:g} ms, "
          f"{args.rounds} rounds")  # fmt: skip
    print(f"  uninstrumented step  {off * 1e3:9.2f} ms (median)")
    print(f"  instrumented step    {on * 1e3:9.2f} ms (median)")
    print(f"  ratio                {on / off:9.3f}")
    print(f"  per trajectory       {per_traj * 1e6:9.1f} us")
    print(f"  per turn             {per_traj / args.turns * 1e6:9.1f} us")
    env.shutdown()


if __name__ == "__main__":
    main()
