"""A failure burst below 100% sampling against an OTLP endpoint that stalls, then recovers.

``--trajectories`` trajectories (env setup + generate + root: 3 spans) are in flight at
``--sample-ratio`` when the inference server "goes away" and they all fail together; the
real OTLP receiver (``otel_rollout.testing.receiver``) holds every request meanwhile. Tail
keep keeps every failed trajectory: what does not fit the export queue waits whole in the
release buffer. Printed: the agent loop's time for the burst against the same burst with the
endpoint answering (ratio, same process), the queue and buffer at their fullest, the time
and rate at which the buffer drained once the endpoint recovered, and the losses by reason.

    python benchmarks/kept_release.py [--trajectories 5000] [--sample-ratio 0.01]
        [--release-max-spans 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import time

N_SPANS = 3


def crash(rollout, n: int) -> float:
    """Seconds the agent loop spent from the failure to the last trajectory's end."""
    gone = asyncio.Event()

    async def one(i: int) -> None:
        async with rollout.tracer.trajectory(f"t{i}") as traj:
            async with traj.env_setup():
                pass
            async with traj.generate():
                await gone.wait()
                raise ConnectionError("inference server went away")

    async def main() -> float:
        tasks = [asyncio.create_task(one(i)) for i in range(n)]
        await asyncio.sleep(0)
        t0 = time.perf_counter()
        gone.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        return time.perf_counter() - t0

    return asyncio.run(main())


def run(n: int, ratio: float, stall: bool) -> dict:
    from otel_rollout import configure
    from otel_rollout.testing.receiver import OTLPReceiver

    with OTLPReceiver() as rx:
        rollout = configure(local=True, endpoint=rx.http_endpoint, protocol="http/protobuf",
                            metrics_exporter="none", sample_ratio=ratio)  # fmt: skip
        if stall:
            rx.hold()
        burst_s = crash(rollout, n)
        stats = rollout.export_stats
        out = {"burst_s": burst_s, "pending": stats.pending, "held": stats.held}
        t0 = time.perf_counter()
        rx.release()
        rx.wait_for(lambda r: len(r.spans()) >= n * N_SPANS - rollout.export_stats.dropped,
                    timeout=600)  # fmt: skip
        out["drain_s"] = time.perf_counter() - t0
        rollout.shutdown(timeout_s=60)
        stats = rollout.export_stats
        out["exported"] = stats.exported
        out["received"] = len(rx.spans())
        out["losses"] = {why: k for why, k in stats.losses().items() if k}
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trajectories", type=int, default=5000)
    ap.add_argument("--sample-ratio", type=float, default=0.01)
    ap.add_argument("--release-max-spans", type=int, default=None)
    args = ap.parse_args()
    os.environ["OTEL_EXPORTER_OTLP_TIMEOUT"] = "600000"  # a stalled request waits
    if args.release_max_spans is not None:
        os.environ["OTEL_ROLLOUT_TAIL_KEEP_RELEASE_MAX_SPANS"] = str(args.release_max_spans)
    n, ratio = args.trajectories, args.sample_ratio
    base = run(n, ratio, stall=False)
    held = run(n, ratio, stall=True)
    spans = n * N_SPANS
    print(f"{n} trajectories ({spans} spans) failing at once, sampling {ratio:g}")
    print(f"agent loop, endpoint answering : {base['burst_s'] * 1e3:9.1f} ms")
    print(f"agent loop, endpoint stalled   : {held['burst_s'] * 1e3:9.1f} ms  "
          f"(ratio {held['burst_s'] / base['burst_s']:.2f})")  # fmt: skip
    print(f"at the end of the burst        : {held['pending']} queued, {held['held']} held "
          "in the release buffer")  # fmt: skip
    rate = held["received"] / held["drain_s"] if held["drain_s"] else float("inf")
    print(f"after recovery                 : {held['received']} received in "
          f"{held['drain_s']:.2f} s ({rate:,.0f} spans/s)")  # fmt: skip
    print(f"losses                         : {held['losses'] or 'none'}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS                       : {peak:.0f} MiB")


if __name__ == "__main__":
    main()
