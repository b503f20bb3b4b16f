"""env_queue: the wait for an executor thread, as recorded by ``otel_rollout.run_in_executor``.

Exactness is asserted between the spans and the breakdown (integer nanoseconds); which
call waits is made certain with events, never with sleeps of a given length.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from otel_rollout import current_trajectory, phase, run_in_executor
from otel_rollout._api.context import QueuedCall
from otel_rollout._base.clock import now_ns
from otel_rollout.testing import ManualClock, make_test_env


def one(spans):
    (s,) = spans
    return s


def saturated_pair(env, **kwargs):
    """Two calls on a one-thread pool: the second waits until the first is released."""
    pool = ThreadPoolExecutor(1)
    release = threading.Event()
    second_queued = threading.Event()
    first_done: list[int] = []

    def first():
        second_queued.wait(5)
        release.wait(5)
        first_done.append(now_ns())  # the spans' clock: the wall clock may step meanwhile
        return "first"

    def second():
        return threading.current_thread().name

    async def main():
        async with env.tracer.trajectory("a"):
            t1 = asyncio.ensure_future(run_in_executor(pool, first, **kwargs))
            await asyncio.sleep(0)
            t2 = asyncio.ensure_future(run_in_executor(pool, second, **kwargs))
            await asyncio.sleep(0)  # both submitted
            second_queued.set()
            release.set()
            a, b = await t1, await t2
            return first_done[0], a, b

    try:
        return asyncio.run(main())
    finally:
        pool.shutdown()


def test_wait_for_a_thread_is_an_env_queue_span_before_the_env_step():
    env = make_test_env()
    first_done, first, second = saturated_pair(env, phase="env")
    assert first == "first" and second.startswith("ThreadPoolExecutor")
    root = one(env.roots())
    queues = sorted(env.spans("env_queue"), key=lambda s: s.start_time)
    steps = sorted(env.spans("env_step"), key=lambda s: s.start_time)
    assert len(queues) == len(steps) == 2
    for q, s in zip(queues, steps, strict=True):
        assert q.parent.span_id == s.parent.span_id == root.context.span_id
        assert q.attributes["rollout.phase"] == "env_queue"
        assert q.end_time == s.start_time  # the wait ends where the work starts
    # the second call waited for the whole first call
    assert queues[1].start_time < first_done <= queues[1].end_time
    b = one(env.breakdowns)
    assert b.env_steps == 2 and b.nanos["env_queue"] == sum(
        q.end_time - q.start_time for q in queues
    ) - max(0, queues[0].end_time - queues[1].start_time)
    # env is the union of [submitted, result back] of both calls: SkyRL's env timer
    covered = sorted((q.start_time, s.end_time) for q, s in zip(queues, steps, strict=True))
    union = max(covered[0][1], covered[1][1]) - covered[0][0]
    assert covered[1][0] <= covered[0][1]  # they overlap: both were in flight
    assert b.nanos["env"] == union
    assert b.nanos["other"] == b.nanos["e2e"] - union


def test_bands_can_move_the_wait_out_of_env():
    env = make_test_env(bands={"env_queue": "other"})
    saturated_pair(env, phase="env")
    b = one(env.breakdowns)
    steps = env.spans("env_step")
    assert b.nanos["env_queue"] > 0
    covered = sorted((s.start_time, s.end_time) for s in steps)
    union = max(e for _, e in covered) - covered[0][0]
    if covered[1][0] > covered[0][1]:  # disjoint steps: the second waited for the first
        union = sum(e - s for s, e in covered)
    assert b.nanos["env"] == union


def test_without_a_phase_only_the_wait_is_recorded_and_the_call_keeps_the_context():
    env = make_test_env()
    seen = []

    @phase("env")
    def step():
        seen.append(current_trajectory())

    async def main():
        with ThreadPoolExecutor(1) as pool:
            async with env.tracer.trajectory("x") as traj:
                await run_in_executor(pool, step)
                return traj

    traj = asyncio.run(main())
    assert seen == [traj]
    q, s = one(env.spans("env_queue")), one(env.spans("env_step"))
    assert q.end_time <= s.start_time
    b = one(env.breakdowns)
    assert b.env_steps == 1 and b.nanos["env_queue"] == q.end_time - q.start_time
    assert b.nanos["env"] == (q.end_time - q.start_time) + (s.end_time - s.start_time)


def test_error_in_the_call_is_recorded_once_on_its_phase_and_reraised():
    env = make_test_env()

    def boom():
        raise KeyError("no such row")

    async def main():
        with ThreadPoolExecutor(1) as pool:
            async with env.tracer.trajectory("x"):
                await run_in_executor(pool, boom, phase="env_teardown")

    with pytest.raises(KeyError, match="no such row"):
        asyncio.run(main())
    td = one(env.spans("env_teardown"))
    assert td.status.status_code.name == "ERROR" and td.attributes["error.type"] == "KeyError"
    assert len([e for e in td.events if e.name == "exception"]) == 1
    assert one(env.spans("env_queue")).status.status_code.name == "UNSET"


def test_a_call_cancelled_while_waiting_never_runs_and_its_wait_is_recorded():
    env = make_test_env()
    pool = ThreadPoolExecutor(1)
    release = threading.Event()
    ran = []

    async def main():
        async with env.tracer.trajectory("x"):
            blocker = asyncio.get_running_loop().run_in_executor(pool, release.wait, 5)
            waiting = asyncio.ensure_future(run_in_executor(pool, ran.append, 1, phase="env"))
            await asyncio.sleep(0)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            release.set()
            await blocker

    asyncio.run(main())
    pool.shutdown()
    assert ran == [] and env.spans("env_step") == []
    q = one(env.spans("env_queue"))
    assert q.status.status_code.name == "ERROR"
    assert one(env.breakdowns).nanos["env_queue"] == q.end_time - q.start_time


def test_outside_a_trajectory_nothing_is_recorded():
    env = make_test_env()

    async def main():
        with ThreadPoolExecutor(1) as pool:
            return await run_in_executor(pool, sum, [1, 2], phase="env")

    assert asyncio.run(main()) == 3
    assert env.spans() == []


def test_saturated_pool_on_a_manual_clock_is_exact_in_nanoseconds():
    clock = ManualClock()
    env = make_test_env(clock=clock)
    start = clock.now_ns
    b_submitted, a_done = threading.Event(), threading.Event()

    def a():  # 20 ms of work, while b waits for the only thread
        b_submitted.wait(5)
        clock.advance(ms=20)

    def b():  # 5 ms of work, once a's result is back on the loop
        a_done.wait(5)
        clock.advance(ms=5)

    async def main():
        with ThreadPoolExecutor(1) as pool:
            async with env.tracer.trajectory("x"):
                clock.advance(ms=1)
                first = asyncio.ensure_future(run_in_executor(pool, a, phase="env"))
                await asyncio.sleep(0)
                second = asyncio.ensure_future(run_in_executor(pool, b, phase="env"))
                await asyncio.sleep(0)
                b_submitted.set()
                await first
                a_done.set()
                await second
                clock.advance(ms=1)

    asyncio.run(main())
    ms = 1_000_000
    spans = sorted(
        ((s.name, s.start_time - start, s.end_time - start) for s in env.spans() if s.parent),
        key=lambda x: (x[1], x[0]),
    )
    assert spans == [
        ("env_queue", 1 * ms, 1 * ms),  # a found the thread free
        ("env_queue", 1 * ms, 21 * ms),  # b waited for a
        ("env_step", 1 * ms, 21 * ms),
        ("env_step", 21 * ms, 26 * ms),
    ]
    bd = one(env.breakdowns)
    assert dict(bd.nanos) == {
        "llm": 0, "env": 25 * ms, "env_setup": 0, "env_teardown": 0, "other": 2 * ms,
        "e2e": 27 * ms, "env_queue": 20 * ms, "finish_session": 0,
    }  # fmt: skip
    assert bd.env_queue_sum == pytest.approx(0.020) and bd.band_sum("env") == pytest.approx(0.045)


def test_queued_call_run_on_the_loop_thread_has_no_wait():
    clock = ManualClock()
    env = make_test_env(clock=clock)
    start = clock.now_ns
    with env.tracer.trajectory("x") as traj:
        clock.advance(ms=1)
        call = QueuedCall(traj, traj.env_step)
        clock.advance(ms=1)
        assert call.run(len, "abc") == 3  # inline: on the thread that made the call
        clock.advance(ms=4)
        call.finish()
    s = one(env.spans("env_step"))
    assert env.spans("env_queue") == []
    assert (s.start_time - start, s.end_time - start) == (1_000_000, 6_000_000)
