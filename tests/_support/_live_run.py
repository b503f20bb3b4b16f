"""A configure()d rollout whose trajectories wait on gates, for the live view's tests.

Each batch starts ``n`` trajectories on threads (the batch's context carried to each);
every trajectory does an env_setup, then waits inside a generate call until its gate
opens, then an env step. The test opens gates one by one, so it decides which
trajectories are still running (the tail) when it looks at the screen.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import otel_rollout


class GatedRun:
    def __init__(self, rollout: Any, n: int, envs: tuple[str, ...] = ("math", "code")) -> None:
        self.rollout = rollout
        self.n = n
        self.envs = envs
        self.gates = [threading.Event() for _ in range(n)]
        self.started = [threading.Event() for _ in range(n)]
        self.ids = [f"t{i:02d}" for i in range(n)]
        self._threads: list[threading.Thread] = []
        self._batch: Any = None

    def _one(self, i: int) -> None:
        tracer = self.rollout.tracer
        with tracer.trajectory(self.ids[i], env=self.envs[i % len(self.envs)]) as t:
            with t.env_setup():
                time.sleep(0.002)
            with t.generate():
                self.started[i].set()
                self.gates[i].wait(60)
            with t.env_step():
                time.sleep(0.002)

    @contextmanager
    def batch(self, step: int, nest: bool = False) -> Iterator[GatedRun]:
        """Start the batch's trajectories; on exit wait for them, then end the batch."""
        with self.rollout.tracer.batch(step=step, nest=nest) as b:
            self._batch = b
            self._threads = [
                threading.Thread(target=contextvars.copy_context().run, args=(self._one, i))
                for i in range(self.n)
            ]
            for th in self._threads:
                th.start()
            for ev in self.started:
                ev.wait(30)
            try:
                yield self
            finally:
                for g in self.gates:
                    g.set()
                for th in self._threads:
                    th.join(30)

    def release(self, *indices: int) -> None:
        for i in indices:
            self.gates[i].set()


def configure_file_run(tmp_path: Any, monkeypatch: Any, **kw: Any) -> Any:
    """A local configure() writing its trace file under ``tmp_path``, spans and in-flight
    records reaching the file within ~0.1 s."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.setenv("OTEL_BLRP_SCHEDULE_DELAY", "50")
    monkeypatch.setenv("OTEL_ROLLOUT_IN_FLIGHT_INTERVAL_S", "0.1")
    return otel_rollout.configure(local=True, output_dir=tmp_path, service_name="live-test",
                                  **kw)  # fmt: skip
