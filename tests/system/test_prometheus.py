"""The histograms through a real Prometheus server: PromQL agrees with the breakdowns.

A subprocess (so prometheus_client's global registry and HTTP server stay out of this
process) runs trajectories with controlled sleeps through ``otel_rollout.configure`` with
the Prometheus exporter, writes its breakdowns and ``summarize()`` as JSON, and keeps
serving until killed. Prometheus scrapes it every second.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import numpy as np
from _prom import Prometheus, prometheus, python

from otel_rollout.attributes import DURATION_BUCKETS

__all__ = ["prometheus"]  # the fixture, imported from _prom

N = 20
#: 16 short env steps and 4 long ones: the p90 rank lands among the long ones, in a bucket
#: of its own (0.25-0.5 s), far from the short ones (0.05-0.1 s) and from the llm phases.
SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys, time
    import otel_rollout

    N = int(sys.argv[1])
    rollout = otel_rollout.configure(local=True, metrics_exporter="prometheus",
                                     traces_exporter="none")

    async def one(i):
        env_s = 0.4 if i % 5 == 4 else 0.07
        async with rollout.tracer.trajectory(env="sleepy", model="m", instance_id=i,
                                             repetition_id=0) as traj:
            async with traj.env_setup():
                await asyncio.sleep(0.01)
            for _ in range(2):
                async with traj.generate() as gen:
                    await asyncio.sleep(0.015)
                    gen.record(input_tokens=10, output_tokens=5)
                async with traj.env_step():
                    await asyncio.sleep(env_s / 2)
            async with traj.env_teardown():
                await asyncio.sleep(0.002)

    async def main():
        await asyncio.gather(*(one(i) for i in range(N)))

    asyncio.run(main())
    bds = rollout.collector.drain()
    out = {"env": [b.band("env") for b in bds], "llm": [b.band("llm") for b in bds],
           "summary": otel_rollout.summarize(bds)}
    with open("breakdowns.json.tmp", "w") as f:
        json.dump(out, f)
    import os
    os.replace("breakdowns.json.tmp", "breakdowns.json")
    time.sleep(120)  # keep serving; the test kills us once Prometheus has scraped
    """
)


def _bucket(value: float) -> tuple[float, float]:
    lo = 0.0
    for hi in DURATION_BUCKETS:
        if value <= hi:
            return lo, hi
        lo = hi
    return lo, float("inf")


def _run_target(prom: Prometheus, tmp_path: Path) -> dict:
    script = tmp_path / "target.py"
    script.write_text(SCRIPT)
    child = prom.spawn([python(), str(script), str(N)], cwd=tmp_path)
    out = tmp_path / "breakdowns.json"
    deadline = time.monotonic() + 30
    while not out.exists():
        assert child.poll() is None, f"target failed:\n{child.stdout.read()}"
        assert time.monotonic() < deadline, "target did not finish its trajectories in 30 s"
        time.sleep(0.1)
    data = json.loads(out.read_text())
    assert len(data["env"]) == N
    # The final values are in Prometheus, and one more scrape after that.
    prom.wait_for("sum(rollout_trajectory_duration_seconds_count)", lambda v: v == N)
    prom.wait_scrapes(1)
    return data


def test_promql_p90_and_frac_time_in_env_match_the_breakdowns(
    prometheus: Prometheus, tmp_path: Path
) -> None:
    data = _run_target(prometheus, tmp_path)

    true_p90 = float(np.percentile(data["env"], 90))
    assert abs(true_p90 - data["summary"]["generate/trajectory_time_env_p90"]) < 1e-9
    lo, hi = _bucket(true_p90)
    prom_p90 = prometheus.scalar(
        "histogram_quantile(0.9, sum by (le) "
        '(rollout_trajectory_phase_duration_seconds_bucket{rollout_phase="env"}))'
    )
    assert lo <= prom_p90 <= hi, (
        f"PromQL p90 {prom_p90} is outside the bucket ({lo}, {hi}] of the true p90 {true_p90}"
    )
    # And it is not the llm band's bucket: the label selects the right series.
    assert _bucket(float(np.percentile(data["llm"], 90))) != (lo, hi)

    frac = prometheus.scalar(
        'sum(rollout_trajectory_phase_duration_seconds_sum{rollout_phase="env"}) / '
        'sum(rollout_trajectory_phase_duration_seconds_sum{rollout_phase=~"llm|env"})'
    )
    want = data["summary"]["generate/frac_time_in_env"]
    assert abs(frac - want) <= 1e-6 * abs(want), f"PromQL {frac} != summarize() {want}"

    count = prometheus.scalar(
        'sum(rollout_trajectory_phase_duration_seconds_count{rollout_phase="env"})'
    )
    assert count == N
