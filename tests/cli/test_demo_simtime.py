"""The demo's simulated clock: timers move it, real threads are still waited for."""

from __future__ import annotations

import asyncio
import threading
import time
import warnings

from otel_rollout.demo._simtime import SimLoop


def test_a_timer_moves_the_clock_not_the_wall():
    async def main() -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(3600)
        return loop.time() - start

    real0 = time.monotonic()
    with asyncio.Runner(loop_factory=lambda: SimLoop(pace=False)) as runner:
        assert runner.run(main()) == 3600
    assert time.monotonic() - real0 < 60


def test_closing_waits_for_the_default_executors_threads_in_real_time():
    # asyncio.run joins the default executor with a 300 s timeout; on simulated time
    # that timeout would pass at once and warn while a thread is still running
    finished = threading.Event()

    def slow() -> None:
        time.sleep(0.3)
        finished.set()

    async def main() -> None:
        asyncio.get_running_loop().run_in_executor(None, slow)  # left running on purpose

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with asyncio.Runner(loop_factory=lambda: SimLoop(pace=False)) as runner:
            runner.run(main())
    assert finished.is_set()
