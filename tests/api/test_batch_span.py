"""The batch span: linked trajectory roots, the analysis on the span, its histograms."""

from __future__ import annotations

import asyncio
import contextvars
import subprocess
import sys

import pytest

import otel_rollout
import otel_rollout.accounting
from otel_rollout import analyze_batch, current_batch


def _run_batch(tracer, n=4, **kw):
    with tracer.batch(step=7, attributes={"trainer": "ppo"}, **kw) as batch:
        assert current_batch() is batch
        for i in range(n):
            with tracer.trajectory(f"t{i}", env="e") as t:
                with t.generate():
                    pass
                with t.env_step():
                    pass
    assert current_batch() is None
    return batch


def test_each_trajectory_is_a_new_trace_linked_to_the_batch_span(rollout_env):
    batch = _run_batch(rollout_env.tracer)
    (span,) = rollout_env.spans("batch")
    assert span.attributes["rollout.batch.id"] == batch.batch_id
    assert span.attributes["rollout.step"] == 7 and span.attributes["trainer"] == "ppo"
    assert batch.batch_id.startswith("7-")
    roots = rollout_env.roots()
    assert len(roots) == 4
    assert len({r.context.trace_id for r in roots} | {span.context.trace_id}) == 5
    for root in roots:
        assert root.parent is None
        (link,) = root.links
        assert link.context.span_id == span.context.span_id
        assert link.context.trace_id == span.context.trace_id
        assert link.attributes["rollout.batch.id"] == batch.batch_id
        assert root.attributes["rollout.batch.id"] == batch.batch_id
        assert root.attributes["rollout.step"] == 7
    # phase spans stay in their trajectory's trace
    for gen in rollout_env.spans("generate"):
        assert gen.context.trace_id in {r.context.trace_id for r in roots}


def test_nest_keeps_trajectories_children_of_the_batch_span(rollout_env):
    batch = _run_batch(rollout_env.tracer, nest=True)
    (span,) = rollout_env.spans("batch")
    for root in rollout_env.roots():
        assert root.parent.span_id == span.context.span_id and not root.links
        assert root.attributes["rollout.batch.id"] == batch.batch_id


def test_the_batch_span_carries_the_analysis_of_its_breakdowns(rollout_env):
    batch = _run_batch(rollout_env.tracer, n=5)
    (span,) = rollout_env.spans("batch")
    bds = rollout_env.breakdowns
    assert {b.batch_id for b in bds} == {batch.batch_id}
    assert sorted(b.trajectory_id for b in batch.breakdowns) == [f"t{i}" for i in range(5)]
    expected = analyze_batch(bds, start_ns=span.start_time)
    assert batch.analysis == expected
    assert expected.start_ns == span.start_time and expected.end_ns <= span.end_time
    for key, value in expected.as_attributes().items():
        got = span.attributes[key]
        assert (tuple(got) if isinstance(got, tuple) else got) == (
            tuple(value) if isinstance(value, list) else value
        )
    assert batch.analysis.summary()["generate/batch_wall_time"] == expected.wall_ns * 1e-9
    (dur,) = rollout_env.histogram_points("rollout.batch.duration")
    (drain,) = rollout_env.histogram_points("rollout.batch.drain.duration")
    assert dur.count == 1 and dur.sum == expected.wall_ns * 1e-9
    assert drain.count == 1 and drain.sum == expected.drain_ns * 1e-9
    assert dur.exemplars[0].trace_id == span.context.trace_id


def test_async_batches_overlap_without_mixing_their_trajectories(rollout_env):
    tracer = rollout_env.tracer

    async def one_step(step):
        async with tracer.batch(step=step) as batch:

            async def one(i):
                async with tracer.trajectory(f"s{step}-{i}") as t:
                    with t.generate():
                        await asyncio.sleep(0)

            await asyncio.gather(*(one(i) for i in range(3)))
        return batch

    async def main():
        return await asyncio.gather(one_step(1), one_step(2))

    b1, b2 = asyncio.run(main())
    assert b1.batch_id != b2.batch_id
    assert sorted(b.trajectory_id for b in b1.breakdowns) == ["s1-0", "s1-1", "s1-2"]
    assert sorted(b.trajectory_id for b in b2.breakdowns) == ["s2-0", "s2-1", "s2-2"]
    assert b1.analysis.trajectories == b2.analysis.trajectories == 3


def test_breakdowns_gathered_elsewhere_join_the_batch(rollout_env):
    tracer = rollout_env.tracer
    with tracer.batch(step=1, batch_id="gathered") as batch:
        with tracer.trajectory("local"):
            pass
        remote = otel_rollout.accounting.compute_breakdown(
            batch.span.start_time, batch.span.start_time + 10, [], trajectory_id="remote",
            batch_id="gathered",
        )  # fmt: skip
        other = otel_rollout.accounting.compute_breakdown(0, 1, [], batch_id="another batch")
        batch.add([remote, other])
    assert sorted(b.trajectory_id for b in batch.breakdowns) == ["local", "remote"]
    assert batch.analysis.trajectories == 2


def test_a_failing_step_marks_the_batch_span_and_still_analyses(rollout_env):
    tracer = rollout_env.tracer
    with pytest.raises(RuntimeError, match="boom"), tracer.batch(step=2) as batch:
        with tracer.trajectory("a"):
            pass
        raise RuntimeError("boom")
    (span,) = rollout_env.spans("batch")
    assert span.status.is_ok is False and span.attributes["error.type"] == "RuntimeError"
    assert batch.analysis.trajectories == 1


def test_trajectories_outside_a_batch_are_unchanged(rollout_env):
    with rollout_env.tracer.trajectory("alone"):
        pass
    (root,) = rollout_env.roots()
    assert not root.links and "rollout.batch.id" not in root.attributes
    assert rollout_env.breakdowns[0].batch_id is None


def test_policy_version_reaches_the_breakdown(rollout_env):
    with rollout_env.tracer.batch(step=1), rollout_env.tracer.trajectory("v") as t:
        t.set_policy_version(4)
    assert rollout_env.breakdowns[0].policy_version == 4


def test_a_bad_step_is_a_clear_error(rollout_env):
    with pytest.raises(ValueError, match="step must be an int"):
        rollout_env.tracer.batch(step="one")


def test_module_level_batch_uses_the_global_providers(tmp_path):
    code = """
import io
import otel_rollout
r = otel_rollout.configure(output_dir=OUTDIR, summary_stream=io.StringIO())
with otel_rollout.batch(step=3) as b:
    for i in range(3):
        with otel_rollout.trajectory(f"g{i}") as t, t.generate():
            pass
assert b.analysis.trajectories == 3, b.analysis
assert {x.batch_id for x in r.collector.drain()} == {b.batch_id}
r.shutdown()
print("ok")
""".replace("OUTDIR", repr(str(tmp_path)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_without_an_sdk_a_batch_is_harmless():
    with otel_rollout.batch(step=1) as b, otel_rollout.trajectory("x") as t:
        pass
    assert t.breakdown is None and b.analysis.trajectories == 0
    assert all(v != v for v in b.analysis.summary().values())  # NaN: no data


def test_online_figures_are_exact_on_the_manual_clock(manual_env):
    """The closed-form batch of test_batch.py, run live: every figure in exact ns."""
    tracer, clock = manual_env.tracer, manual_env.clock
    U = 1_000_000_000
    t0 = clock.advance()
    # (trajectory, start s, end s, [(phase, start s, end s)]): finishes 4, 5, 6, 8, 12
    plan = [
        ("t0", 0, 4, [("env_setup", 0, 1), ("llm", 1, 3), ("env", 3, 4)]),
        ("t1", 0, 5, [("env_setup", 0, 1), ("llm", 1, 4), ("env", 4, 5)]),
        ("t2", 0, 6, [("env_setup", 0, 1), ("llm", 1, 5), ("env", 5, 6)]),
        ("t3", 0, 8, [("env_setup", 0, 1), ("llm", 1, 6), ("env", 6, 7)]),
        ("t4", 1, 12, [("env_setup", 1, 2), ("llm", 2, 7), ("env", 7, 11),
                       ("env_teardown", 11, 12)]),
    ]  # fmt: skip
    # every start and end as an event, replayed in time order on the manual clock; each
    # trajectory enters and exits its scopes in a context of its own, as a task would
    order = {2: 0, 3: 1, 0: 2, 1: 3}  # at one instant: phase ends, ends, starts, phase starts
    events = []
    for tid, start, end, phases in plan:
        events += [(start, 0, tid, None), (end, 3, tid, None)]
        events += [ev for p, s, e in phases for ev in ((s, 1, tid, p), (e, 2, tid, p))]
    with tracer.batch(step=3, concurrency=5) as batch:
        ctxs = {tid: contextvars.copy_context() for tid, *_ in plan}
        scopes = {tid: tracer.trajectory(tid, env="code") for tid, *_ in plan}
        handles, open_phases = {}, {}
        for when, kind, tid, p in sorted(events, key=lambda ev: (ev[0], order[ev[1]])):
            clock.advance(t0 + when * U - clock())
            run = ctxs[tid].run
            if kind == 0:
                handles[tid] = run(scopes[tid].__enter__)
            elif kind == 1:
                h = handles[tid]
                scope = {"llm": h.generate, "env": h.env_step, "env_setup": h.env_setup,
                         "env_teardown": h.env_teardown}[p]()  # fmt: skip
                run(scope.__enter__)
                open_phases[(tid, p)] = scope
            elif kind == 2:
                run(open_phases.pop((tid, p)).__exit__, None, None, None)
            else:
                run(scopes[tid].__exit__, None, None, None)
        clock.advance(s=1)
    a = batch.analysis
    assert a.start_ns == t0 and a.wall_ns == 12 * U and a.capacity == 5
    # tests/accounting/test_batch.py's known batch, to the nanosecond
    assert dict(a.slots.slot_ns) == {
        "llm": 19 * U, "env": 8 * U, "env_setup": 5 * U, "env_teardown": U, "other": U,
        "empty": 26 * U,
    }  # fmt: skip
    assert a.drain_ns == 8 * U and a.stragglers == () and a.engine_idle_ns == 6 * U
    assert a.in_generate.values.tolist() == [0, 4, 5, 4, 3, 2, 1, 0]
    assert a.llm_concurrency_mean == 19 / 12 and a.low_llm_demand_ns == 7 * U
    (span,) = manual_env.spans("batch")
    assert span.start_time == t0 and span.end_time == t0 + 13 * U
    assert span.attributes["rollout.batch.concurrency"] == 5
    assert span.attributes["rollout.batch.capacity"] == 5
    assert span.attributes["rollout.batch.slot.empty_frac"] == 26 / 60
    assert span.attributes["rollout.batch.drain_time"] == 8.0
    assert span.attributes["rollout.batch.engine_idle_frac"] == 0.5


def test_a_breakdown_added_again_after_delivery_counts_once(rollout_env):
    tracer = rollout_env.tracer
    with tracer.batch(step=1) as batch:
        for i in range(3):
            with tracer.trajectory(f"t{i}"):
                pass
        batch.add(rollout_env.breakdowns)  # e.g. a gather that also saw this process's
    assert batch.analysis.trajectories == 3 and len(batch.breakdowns) == 3


def test_a_batch_refuses_a_concurrency_that_is_no_count_of_trajectories(rollout_env):
    for bad in (0, -4, 2.5, "16", True):
        with pytest.raises(ValueError, match=f"concurrency must be .* got {bad!r}"):
            rollout_env.tracer.batch(step=1, concurrency=bad)
