#!/usr/bin/env python3
"""Check on a GPU machine: GPU utilisation and memory read through NVML, and each phase of
a step given its mean GPU utilisation.

It opens NVML the way ``configure()`` does (otel_rollout._processing.gpu.start_gpu, with
in-memory metric reading), samples every --interval seconds, and runs one step of three
phases: ``idle`` (sleep), ``busy`` (matrix products on cuda:0 with torch) and
``idle_again``. It checks that

* every GPU NVML lists has one series of ``hw.gpu.utilization`` (0..1),
  ``hw.gpu.memory.usage`` and ``hw.gpu.memory.limit`` (usage <= limit, limit > 0);
* the step has a mean GPU utilisation for each phase, and ``busy``'s is above both idle
  phases' (the mean is over the machine's GPUs; only cuda:0 is loaded);

and prints the figures and one line: PASS or FAIL with the reasons. Exit status 0 on
PASS, 1 on FAIL, 2 when it cannot run (no nvidia-ml-py, no driver or GPU, no torch with
CUDA).

Needs: otel-rollout with the gpu extra (``pip install 'otel-rollout[gpu]'``), torch with
CUDA, one NVIDIA GPU. Not run in CI.
"""

from __future__ import annotations

import argparse
import sys
import time


def busy(seconds: float) -> None:
    import torch

    a = torch.randn(8192, 8192, device="cuda:0")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(8):
            a = a @ a
            a = a / a.norm()
        torch.cuda.synchronize()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=0.2, help="sampling period, s")
    parser.add_argument("--phase-s", type=float, default=3.0, help="seconds per phase")
    args = parser.parse_args()

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from otel_rollout._processing.gpu import start_gpu
    from otel_rollout.testing import make_test_env

    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    metrics = InMemoryMetricReader()
    setup = start_gpu(args.interval, MeterProvider(metric_readers=[metrics]))
    print(setup.line)
    if setup.sampler is None:
        return 2
    if not cuda:
        print("CANNOT RUN: torch with CUDA is needed to load the GPU")
        setup.shutdown()
        setup.server_close()
        return 2

    env = make_test_env()
    try:
        with env.tracer.step(1, trainer="nvml-check") as step:
            with step.phase("idle"):
                time.sleep(args.phase_s)
            with step.phase("busy"):
                busy(args.phase_s)
            with step.phase("idle_again"):
                time.sleep(args.phase_s)
        data = metrics.get_metrics_data()
    finally:
        setup.shutdown()
        setup.server_close()
        env.shutdown()

    series: dict[str, dict[str, float]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    series.setdefault(m.name, {})[p.attributes["hw.id"]] = p.value
    failures: list[str] = []
    util = series.get("hw.gpu.utilization", {})
    used = series.get("hw.gpu.memory.usage", {})
    limit = series.get("hw.gpu.memory.limit", {})
    n = setup.reader.count if setup.reader is not None else 0
    if not (len(util) == len(used) == len(limit) == n):
        failures.append(f"series per GPU: {len(util)}/{len(used)}/{len(limit)}, GPUs {n}")
    for gpu, value in util.items():
        print(f"  {gpu}: utilization {value:.2f}, memory {used.get(gpu, 0) / 2**30:.1f}"
              f" of {limit.get(gpu, 0) / 2**30:.1f} GiB")  # fmt: skip
        if not 0.0 <= value <= 1.0:
            failures.append(f"{gpu}: utilization {value} outside 0..1")
        if limit.get(gpu, 0) <= 0 or used.get(gpu, 0) > limit.get(gpu, 0):
            failures.append(f"{gpu}: memory {used.get(gpu)} of {limit.get(gpu)}")
    by_part = step.gpu_utilization_by_part or {}
    print("  mean GPU utilisation by phase: "
          + ", ".join(f"{k} {v:.3f}" for k, v in by_part.items()))  # fmt: skip
    missing = {"idle", "busy", "idle_again"} - set(by_part)
    if missing:
        failures.append(f"no samples in {sorted(missing)}")
    elif not by_part["busy"] > max(by_part["idle"], by_part["idle_again"]):
        failures.append("busy is not above both idle phases")
    print("PASS" if not failures else "FAIL: " + "; ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
