"""The VerlInstrumentor's cost per trajectory against verl's uninstrumented agent loop.

Runs verl 0.9.1's own ``AgentLoopWorker.generate_sequences`` (``ToolAgentLoop``, its
hydra ``ppo_trainer`` config, ``LLMServerClient`` and ``GlobalRequestLoadBalancer``) on
``--samples`` samples of ``--turns`` turns each, against the stand-in replica of the verl
tests answering after ``--generate-ms`` and a function tool taking ``--tool-ms`` (both 0
by default, so the loop's own work is all there is to time). Rounds alternate between
uninstrumented and instrumented (an in-memory pipeline: the breakdown processor, the
histograms and an in-memory span exporter), ``--rounds`` of each after one warm-up of
each. Prints, for the process's CPU time (all its threads: steadier than wall time on a
shared machine) and for wall time, the median step of each case, their ratio, and the
median of the paired differences (each instrumented step against the uninstrumented
one before it) per step, per trajectory and per turn: what the instrumentation costs
the trainer's process.

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

    def step() -> tuple[float, float]:
        data = _verl.prompts(turns)
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        asyncio.run(worker.generate_sequences(data))
        return time.perf_counter() - t0, time.process_time() - c0

    env = make_test_env()
    times: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
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
    print(
        f"verl 0.9.1 agent loop: {args.samples} samples x {args.turns} turns, "
        f"generate {args.generate_ms:g} ms, tool {args.tool_ms:g} ms, {args.rounds} rounds"
    )
    for k, label in ((1, "CPU time (process)"), (0, "wall time")):
        off = statistics.median(t[k] for t in times["off"])
        on = statistics.median(t[k] for t in times["on"])
        # each instrumented step against the uninstrumented one just before it
        diff = statistics.median(
            b[k] - a[k] for a, b in zip(times["off"], times["on"], strict=True)
        )
        per_traj = diff / args.samples
        print(f"  {label}, medians of a step")
        print(f"    uninstrumented     {off * 1e3:9.2f} ms")
        print(f"    instrumented       {on * 1e3:9.2f} ms   ratio {on / off:.3f}")
        print(f"    paired difference  {diff * 1e3:9.2f} ms")
        print(f"    per trajectory     {per_traj * 1e6:9.1f} us")
        print(f"    per turn           {per_traj / args.turns * 1e6:9.1f} us")
    env.shutdown()


if __name__ == "__main__":
    main()
