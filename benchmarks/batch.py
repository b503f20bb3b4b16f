"""Batch analysis cost: ``analyze_batch`` over 10,000 trajectories of one step.

Synthetic breakdowns (setup, N turns of generate + env.step, teardown; long-tailed
generation lengths) are built once; then the analysis and, as the baseline in the same
process, ``summarize()`` (SkyRL's per-batch dict) of the same breakdowns are timed,
interleaved, and their medians printed with the ratio. The target is under 100 ms for
10,000 trajectories of 10 turns.

    python benchmarks/batch.py [--trajectories 10000] [--turns 10] [--repeats 7]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from otel_rollout import analyze_batch, summarize
from otel_rollout.accounting import compute_breakdown

MS = 1_000_000


def synthetic_batch(n: int, turns: int, seed: int = 0) -> list:
    rnd = random.Random(seed)
    t0 = 1_700_000_000 * 10**9
    out = []
    for i in range(n):
        t = start = t0 + rnd.randrange(0, 50 * MS)
        phases = [("env_setup", t, t + (d := rnd.randrange(5, 50) * MS))]
        t += d
        for _ in range(turns):
            gen = int(rnd.paretovariate(1.5) * 20 * MS)  # a long tail of generation lengths
            phases.append(("llm", t, t + gen))
            t += gen
            step = rnd.randrange(1, 30) * MS
            phases.append(("env", t, t + step))
            t += step
        phases.append(("env_teardown", t, t + MS))
        t += MS
        bd = compute_breakdown(
            start, t, phases, trajectory_id=f"t{i}", trace_id=f"{i:032x}", batch_id="bench"
        )
        out.append(bd)
    return out


def timed(fn, *args) -> tuple[float, float]:
    """Wall and CPU seconds of one call (CPU time moves less on a busy machine)."""
    w, c = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - w, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trajectories", type=int, default=10_000)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    bds = synthetic_batch(args.trajectories, args.turns)
    analyze_batch(bds), summarize(bds)  # warm up
    a_times, s_times = [], []
    for _ in range(args.repeats):
        a_times.append(timed(analyze_batch, bds))
        s_times.append(timed(summarize, bds))
    a = statistics.median(t[0] for t in a_times)
    s = statistics.median(t[0] for t in s_times)
    a_cpu = statistics.median(t[1] for t in a_times)
    s_cpu = statistics.median(t[1] for t in s_times)
    result = analyze_batch(bds)
    print(f"trajectories: {args.trajectories}  turns: {args.turns}  repeats: {args.repeats}")
    print(f"analyze_batch: {a * 1e3:.1f} ms wall, {a_cpu * 1e3:.1f} ms CPU (medians; "
          "target < 100 ms)")  # fmt: skip
    print(f"summarize (baseline): {s * 1e3:.1f} ms wall, {s_cpu * 1e3:.1f} ms CPU (medians)")
    print(f"ratio analyze_batch / summarize: {a / s:.2f} wall, {a_cpu / s_cpu:.2f} CPU")
    print(
        f"batch: wall {result.wall_ns / 1e9:.2f} s, {result.capacity} slots "
        f"{result.slots.frac('empty'):.0%} empty, drain {result.drain_ns / 1e9:.2f} s "
        f"({result.drain_frac:.0%}), {len(result.stragglers)} stragglers, llm concurrency "
        f"mean {result.llm_concurrency_mean:.0f} max {result.llm_concurrency_max}"
    )


if __name__ == "__main__":
    main()
