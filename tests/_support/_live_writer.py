"""A configure()d rollout for the terminal test, run as its own process:

    python _live_writer.py OUTPUT_DIR STEPS N STRAGGLER_S

Each step is a batch of N trajectories on threads; trajectory 0 is a straggler whose
generate call takes STRAGGLER_S, the others take 50 ms. Prints the trace file's path.
"""

from __future__ import annotations

import contextvars
import os
import sys
import threading
import time

os.environ.setdefault("OTEL_BSP_SCHEDULE_DELAY", "100")
os.environ.setdefault("OTEL_BLRP_SCHEDULE_DELAY", "100")
os.environ.setdefault("OTEL_ROLLOUT_IN_FLIGHT_INTERVAL_S", "0.2")

import otel_rollout


def main() -> None:
    out, steps, n, slow = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    rollout = otel_rollout.configure(output_dir=out, service_name="terminal-test")
    tracer = rollout.tracer

    def one(i: int) -> None:
        with tracer.trajectory(f"s{i:02d}", env="math" if i % 2 else "code") as t:
            with t.env_setup():
                time.sleep(0.01)
            with t.generate():
                time.sleep(slow if i == 0 else 0.05)
            with t.env_step():
                time.sleep(0.01)

    for step in range(steps):
        with tracer.batch(step=step):
            threads = [threading.Thread(target=contextvars.copy_context().run, args=(one, i))
                       for i in range(n)]  # fmt: skip
            for th in threads:
                th.start()
            for th in threads:
                th.join()
    rollout.shutdown()
    print(rollout.trace_file, flush=True)


if __name__ == "__main__":
    main()
