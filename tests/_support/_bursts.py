"""Shared by the burst tests: trajectories failing together, and a trace file whose
writes wait at a gate."""

from __future__ import annotations

import asyncio
import threading

from otel_rollout._export.tracefile import RotatingTraceFile


def fail_together(rollout, n: int) -> None:
    """``n`` trajectories in flight fail together (an inference server going away): each
    sets up its env and waits in ``generate`` until all are in flight."""
    gone = asyncio.Event()

    async def one(i: int) -> None:
        async with rollout.tracer.trajectory(f"t{i}") as traj:
            async with traj.env_setup():
                pass
            async with traj.generate():
                await gone.wait()
                raise ConnectionError("inference server went away")

    async def main() -> None:
        tasks = [asyncio.create_task(one(i)) for i in range(n)]
        await asyncio.sleep(0)  # every trajectory is in flight, waiting on the engine
        gone.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, ConnectionError) for r in results)

    asyncio.run(main())


def gate_trace_file(monkeypatch, *, open_: bool) -> threading.Event:
    """The trace file's writes wait while the returned event is clear."""
    go = threading.Event()
    if open_:
        go.set()
    real = RotatingTraceFile.export

    def export(self, spans):
        go.wait(60)
        return real(self, spans)

    monkeypatch.setattr(RotatingTraceFile, "export", export)
    return go
