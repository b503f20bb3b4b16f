"""A step's cost: ``tracer.step`` with N macro-phases, against a trajectory with one
generate call (the unit every rollout already pays), in the same process, on the same
pipeline (a local test env: in-memory exporter and reader).

The two are timed interleaved; their medians per call and the ratio are printed. A step
happens once per training step, its phases a handful of times: the figure says what one
phase costs next to one trajectory.

    python benchmarks/step.py [--phases 10] [--calls 500] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

from otel_rollout.testing import make_test_env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases", type=int, default=10)
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    env = make_test_env()
    tracer = env.tracer

    def step(phases: int) -> None:
        with tracer.step(1, trainer="bench") as s:
            for i in range(phases):
                with s.phase(f"phase_{i % 5}"):
                    pass

    def trajectory() -> None:
        with tracer.trajectory("t", env="bench") as traj, traj.generate():
            pass

    times: dict[str, list[float]] = {"step": [], "bare": [], "trajectory": []}
    runs = (("step", lambda: step(args.phases)), ("bare", lambda: step(0)),
            ("trajectory", trajectory))  # fmt: skip
    for _ in range(args.repeats):
        for name, fn in runs:
            t0 = time.perf_counter()
            for _ in range(args.calls):
                fn()
            times[name].append((time.perf_counter() - t0) / args.calls)
            env.span_exporter.clear()
    step_s, bare_s, traj_s = (statistics.median(times[k]) for k in ("step", "bare", "trajectory"))
    phase_s = (step_s - bare_s) / max(args.phases, 1)
    print(f"step with {args.phases} phases: {step_s * 1e6:8.1f} us")
    print(f"step, no phase:         {bare_s * 1e6:8.1f} us")
    print(f"trajectory, 1 generate: {traj_s * 1e6:8.1f} us (baseline)")
    print(f"a phase: {phase_s * 1e6:.1f} us, {phase_s / traj_s:.2f}x a trajectory; "
          f"a step without phases: {bare_s / traj_s:.2f}x")  # fmt: skip
    env.shutdown()


if __name__ == "__main__":
    main()
