"""Spans lost when many trajectories end together, writing to the local trace file.

``configure()`` in its default mode (no endpoint: the OTLP JSON trace file), 100% sampling.
``--threads`` threads each open their share of ``--trajectories`` trajectories (each with
an env setup, a generate and an env step: 4 spans), wait for each other, and then end them
all at once. Prints the export counts by reason, the breakdowns computed, and what
``otel-rollout report`` reads back from the file.

    python benchmarks/burst.py [--trajectories 10000] [--threads 8] [--queue N]

``--queue``: ``OTEL_BSP_MAX_QUEUE_SIZE`` (default: the variable's, else 2,048): one the
burst does not fit makes it lose spans, to compare the shutdown summary's losses with
those ``report`` reads from the file's loss records.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import resource
import tempfile
import threading
import time

import otel_rollout
from otel_rollout.cli import main as cli_main


def burst(rollout: otel_rollout.Rollout, n: int, threads: int) -> None:
    """``n`` trajectories held open by ``threads`` threads (an event loop each, a task per
    trajectory), then ended together."""
    opened = threading.Barrier(threads)

    def worker(k: int) -> None:
        async def one(i: int, go: asyncio.Event) -> None:
            async with rollout.tracer.trajectory(f"t{i}", env="burst") as traj:
                for phase in (traj.env_setup, traj.generate, traj.env_step):
                    async with phase():
                        pass
                await go.wait()

        async def main() -> None:
            go = asyncio.Event()
            tasks = [asyncio.create_task(one(i, go)) for i in range(k, n, threads)]
            await asyncio.sleep(0)  # every task has opened its trajectory
            opened.wait()  # and so has every other thread's
            go.set()
            await asyncio.gather(*tasks)

        asyncio.run(main())

    workers = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def report(paths: list[str]) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli_main(["report", *paths, "--format", "json"])
    return json.loads(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--queue", type=int, default=None)
    args = parser.parse_args()
    if args.queue is not None:
        os.environ["OTEL_BSP_MAX_QUEUE_SIZE"] = str(args.queue)
    with tempfile.TemporaryDirectory() as folder:
        rollout = otel_rollout.configure(local=True, output_dir=folder, metrics_exporter="none",
                                         sample_ratio=1.0)  # fmt: skip
        started = time.perf_counter()
        burst(rollout, args.trajectories, args.threads)
        ended = time.perf_counter() - started
        breakdowns = len(rollout.collector.drain())
        ok = rollout.shutdown(timeout_s=120)
        stats = rollout.export_stats
        f = rollout.trace_file
        read = report([str(f.parent / f"{f.stem}*{f.suffix}")])
    spans = 4 * args.trajectories
    print(f"{args.trajectories} trajectories ({spans} spans) ended together from "
          f"{args.threads} threads in {ended:.2f} s; shutdown ok: {ok}")  # fmt: skip
    print(
        f"breakdowns: {breakdowns}; exported: {stats.exported}; pending: {stats.pending}; "
        f"lost by reason: {stats.losses()} ({stats.dropped / spans:.1%} of spans)"
    )
    print(f"report: {read['trajectories']} trajectories, {read['incomplete']} incomplete, "
          f"losses {read['losses']}")  # fmt: skip
    same = read.get("export_losses") == {k: v for k, v in stats.losses().items() if v}
    print(f"report's export_losses {read.get('export_losses')} "
          f"{'equal' if same else 'DIFFER FROM'} the summary's")  # fmt: skip
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {peak:.0f} MiB")


if __name__ == "__main__":
    main()
