"""Does ``otel-rollout top`` keep up with a fast run? Its ingest rate on one core.

Writes a trace file through ``configure()`` (10-turn trajectories in batches of 256,
in-flight records on), then reads it the way ``top`` does (tail, parse, assemble,
breakdown, live state, one screen render a second of input) and, as the baseline in the
same process, the way ``report`` does (``read_sources``). Prints trajectories per CPU
second for both and the ratio of top's rate to the target of 1,000 trajectories/s.

    python benchmarks/top_ingest.py [--trajectories 5000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

TURNS = 10
BATCH = 256
TARGET = 1000.0


def write(folder: Path, n: int) -> Path:
    os.environ["OTEL_ROLLOUT_IN_FLIGHT_INTERVAL_S"] = "0.05"
    import otel_rollout

    r = otel_rollout.configure(local=True, output_dir=folder, service_name="bench")
    tr = r.tracer
    done = 0
    step = 0
    while done < n:
        with tr.batch(step=step):
            for _ in range(min(BATCH, n - done)):
                with tr.trajectory(env="bench" if done % 2 else "other", model="m") as t:
                    with t.env_setup():
                        pass
                    for _ in range(TURNS):
                        with t.generate() as g:
                            g.record(input_tokens=512, output_tokens=128, finish_reasons="stop")
                        with t.env_step():
                            pass
                    with t.env_teardown():
                        pass
                done += 1
        step += 1
    r.shutdown()
    return r.trace_file


def read_top(folder: Path) -> tuple[float, int, int]:
    from rich.console import Console

    from otel_rollout.live import Feed, Ingest, LiveState, Sources, View, render

    feed = Feed(Ingest(LiveState()), Sources.of([str(folder)]))
    console = Console(file=open(os.devnull, "w"), width=80, height=24)  # noqa: SIM115
    t0 = time.process_time()
    frames = 0
    while True:
        feed.poll(budget_s=1.0)
        feed.ingest.state.tick()
        console.print(render(feed.ingest.state, View(), 80, 24))
        frames += 1
        if feed.caught_up:
            break
    return time.process_time() - t0, feed.ingest.state.finished, frames


def read_report(folder: Path) -> tuple[float, int]:
    from otel_rollout.report import read_sources

    found = []
    t0 = time.process_time()
    read_sources([str(folder / "*.jsonl")], emit=lambda t: found.append(1))
    return time.process_time() - t0, len(found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectories", type=int, default=5000, help="trajectories written")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = write(folder, args.trajectories)
        size = sum(p.stat().st_size for p in folder.glob("*.jsonl"))
        cpu_top, n_top, frames = read_top(folder)
        cpu_rep, n_rep = read_report(folder)
    if n_top != n_rep or n_top != args.trajectories:
        print(f"top read {n_top}, report {n_rep}, of {args.trajectories}", file=sys.stderr)
        return 1
    rate_top, rate_rep = n_top / cpu_top, n_rep / cpu_rep
    print(f"trace file: {size / 2**20:.1f} MiB, {n_top} trajectories of {2 * TURNS + 3} spans "
          f"({path.name})")  # fmt: skip
    print(f"top ingest (tail, parse, assemble, state, {frames} renders): "
          f"{rate_top:8.0f} trajectories/CPU s")  # fmt: skip
    print(f"report read (baseline, same file)                : {rate_rep:8.0f} trajectories/CPU s")
    print(f"ratio top / report                               : {rate_top / rate_rep:8.3f}")
    print(f"ratio top / target of {TARGET:.0f} trajectories/s        : {rate_top / TARGET:8.3f}"
          f"  ({'keeps up' if rate_top >= TARGET else 'falls behind'} on one core)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
