"""Event-loop stall attribution: loop_own / loop_blocked per trajectory, the culprit's
span event, the metric by culprit phase and env class, and where it cannot run."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from otel_rollout import attributes as A
from otel_rollout._processing import loopstall as _loopstall
from otel_rollout._processing.loopstall import configure_loop_stalls

MS = 1_000_000


class Clock:
    """A monotonic clock in ns that only the test's own "work" advances."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def work(self, ns: int) -> None:
        self.now += ns


@pytest.fixture(autouse=True)
def _restore():
    yield
    configure_loop_stalls(
        False, threshold_s=_loopstall.DEFAULT_THRESHOLD_S, clock=time.perf_counter_ns
    )
    _loopstall._CFG.meter_provider = None
    _loopstall._CFG.histogram = None


def busy(seconds: float) -> None:
    """Synchronous CPU work of at least ``seconds`` (wall clock)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def by_id(env) -> dict:
    return {b.trajectory_id: b for b in env.breakdowns}


async def test_own_and_blocked_are_exact_with_an_injected_clock(rollout_env):
    clock = Clock()
    configure_loop_stalls(True, threshold_s=0.005, clock=clock)
    tracer = rollout_env.tracer
    release_b = asyncio.Event()

    async def a():  # three inline env steps of 20 ms of synchronous work each
        async with tracer.trajectory("a", env="inline") as traj:
            for _ in range(3):
                await asyncio.sleep(0)
                with traj.env_step():
                    clock.work(20 * MS)

    async def b():  # short callbacks only (under the threshold): never anyone's stall
        async with tracer.trajectory("b", env="fast"):
            clock.work(1 * MS)
            await release_b.wait()
            clock.work(2 * MS)

    async def outside():  # code of no trajectory stalls the loop once, while a lives
        await asyncio.sleep(0)
        clock.work(7 * MS)

    tb = asyncio.create_task(b())
    await asyncio.sleep(0)  # b has started and waits
    await asyncio.gather(a(), outside())
    release_b.set()
    await tb
    bds = by_id(rollout_env)
    assert bds["a"].waits_nanos["loop_own"] == 60 * MS
    assert bds["a"].waits_nanos["loop_blocked"] == 7 * MS  # the outside stall; b never stalled
    assert bds["b"].waits_nanos["loop_own"] == 3 * MS
    assert bds["b"].waits_nanos["loop_blocked"] == 60 * MS + 7 * MS  # a's stalls and outside's
    # cross-cutting: the bands still sum to e2e
    for bd in bds.values():
        assert sum(bd.nanos[x] for x in A.ALL_BANDS) == bd.nanos["e2e"]
    root_a = next(r for r in rollout_env.roots() if r.attributes[A.TRAJECTORY_ID] == "a")
    assert root_a.attributes[A.LOOP_OWN_NS] == 60 * MS
    assert root_a.attributes[A.LOOP_STALLS] == 3
    assert root_a.attributes[A.LOOP_STALL_NS] == 60 * MS
    assert root_a.attributes["rollout.breakdown.loop_own"] == pytest.approx(0.06)


async def test_a_trajectory_started_inside_a_callback_owns_only_its_part(rollout_env):
    clock = Clock()
    configure_loop_stalls(True, threshold_s=0.005, clock=clock)
    clock.work(4 * MS)  # this callback's time before the trajectory began
    async with rollout_env.tracer.trajectory("t"):
        clock.work(2 * MS)
        await asyncio.sleep(0)
        clock.work(3 * MS)
    clock.work(5 * MS)  # after it ended
    (bd,) = rollout_env.breakdowns
    assert bd.waits_nanos["loop_own"] == 5 * MS and bd.waits_nanos["loop_blocked"] == 0


async def test_a_stall_is_an_event_on_the_culprit_phase_and_a_metric(rollout_env):
    configure_loop_stalls(True, threshold_s=0.005, meter_provider=rollout_env.meter_provider)
    tracer = rollout_env.tracer
    waiting = asyncio.Event()

    async def victim():
        async with tracer.trajectory("victim", env="fast") as traj:
            waiting.set()
            async with traj.generate():
                await asyncio.sleep(0.05)  # its answer is due while the loop is blocked

    async def culprit():
        await waiting.wait()
        async with tracer.trajectory("culprit", env="sync_env") as traj:
            with traj.env_step():
                busy(0.03)  # synchronous work on the loop
            await asyncio.sleep(0)

    await asyncio.gather(victim(), culprit())
    bds = by_id(rollout_env)
    assert bds["culprit"].loop_own >= 0.03
    assert bds["victim"].loop_blocked >= 0.03
    (step,) = rollout_env.spans(A.SPAN_ENV_STEP)
    (event,) = [e for e in step.events if e.name == A.EVENT_LOOP_STALL]
    assert event.attributes[A.LOOP_STALL_DURATION] >= 0.03
    assert event.attributes[A.LOOP_STALL_CULPRIT] == A.PHASE_ENV
    (point,) = rollout_env.histogram_points(
        A.METRIC_LOOP_STALL, **{A.PHASE: A.PHASE_ENV, A.ENV_CLASS: "sync_env"}
    )
    assert point.count == 1 and point.sum >= 0.03


def test_off_by_default_leaves_asyncio_unpatched_unless_configure_asks(tmp_path):
    import subprocess
    import sys

    code = (
        "import asyncio, sys, otel_rollout; run = asyncio.events.Handle._run; "
        "r = otel_rollout.configure(local=True, output_dir=sys.argv[1], loop_stalls=False); "
        "t = r.tracer; ok = asyncio.events.Handle._run is run; "
        "otel_rollout.configure(local=True, output_dir=sys.argv[1], loop_stalls=True).tracer; "
        "asyncio.run(asyncio.sleep(0)); print(ok, asyncio.events.Handle._run is run)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.stdout.split() == ["True", "False"], done.stderr


async def test_off_leaves_loop_figures_unknown(rollout_env):
    configure_loop_stalls(False)
    async with rollout_env.tracer.trajectory("t"):
        await asyncio.sleep(0)
    (bd,) = rollout_env.breakdowns
    assert bd.loop_own is None and bd.loop_blocked is None and "loop_own" not in bd.waits_nanos


def test_outside_an_event_loop_nothing_is_measured(rollout_env):
    with rollout_env.tracer.trajectory("t"):
        pass
    (bd,) = rollout_env.breakdowns
    assert bd.loop_own is None


def test_a_loop_that_cannot_be_timed_is_said_once(rollout_env, monkeypatch, caplog):
    from otel_rollout._base import errors as _errors

    class OtherLoop:  # uvloop's Loop is not an asyncio.BaseEventLoop either
        pass

    _errors.forget_warnings("loopstall:")
    configure_loop_stalls(True)
    monkeypatch.setattr(_loopstall.asyncio, "get_running_loop", lambda: OtherLoop())
    caplog.set_level(logging.WARNING, logger="otel_rollout")
    for _ in range(2):
        with rollout_env.tracer.trajectory("t"):
            pass
    said = [r for r in caplog.records if "not measured" in r.getMessage()]
    assert len(said) == 1 and "OtherLoop" in said[0].getMessage()
    assert all(b.loop_own is None for b in rollout_env.breakdowns)


def test_bad_threshold_is_refused():
    with pytest.raises(ValueError, match="threshold_s"):
        configure_loop_stalls(threshold_s=-1)


# --- the demo shows the waits ------------------------------------------------------------------
def test_demo_shows_loop_stalls_the_engine_split_and_the_same_waits_offline(tmp_path):
    pytest.importorskip("skyrl_gym")
    from otel_rollout.demo._run import run_demo_async
    from otel_rollout.demo._workload import GSM8K_LOOP_WORK_S
    from otel_rollout.report import read_trace_file

    result = asyncio.run(run_demo_async(n=8, concurrency=4, output_dir=tmp_path))
    assert result.errors == 0 and len(result.breakdowns) == 8
    for b in result.breakdowns:
        # the simulator reports queue / prefill / decode for every generate call
        assert b.llm_queue is not None and b.llm_prefill > 0 and b.llm_decode > 0
        if b.env_class == "gsm8k_multi_turn":  # its reward code runs on the loop
            assert b.loop_stall >= b.env_steps * GSM8K_LOOP_WORK_S
    offline = {b.trace_id: b for b in read_trace_file(result.trace_file).breakdowns}
    for b in result.breakdowns:
        assert dict(offline[b.trace_id].waits_nanos) == dict(b.waits_nanos)
