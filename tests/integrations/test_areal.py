"""AReaL 1.0.4's own rollout path, instrumented, against the published package.

AReaL's ``RemotevLLMEngine`` (its ``WorkflowExecutor``, ``AsyncTaskRunner`` and
staleness manager) drives episodes against a stand-in vLLM server (``/v1/completions``
with token ids; each completion 25 ms) with a byte-level tokenizer built here:
``RLVRWorkflow`` (its reward function in AReaL's process pool, 10 ms), ``MultiTurnWorkflow``
(1 to 5 attempts) and a tool workflow timed with AReaL's own session API (1 to 5 turns,
a 20 ms tool call between model calls, a 10 ms reward). AReaL's ``SessionTracer`` is
configured and writes its ``sessions.jsonl``: per session our ``e2e``, ``llm``, ``env``
and ``reward`` phase must equal its ``total_s``, ``generate_s``, ``toolcall_s`` and
``reward_s`` within 1 ms, accepted, rejected (by ``should_accept_fn``, or a workflow
returning nothing) and failed episodes alike, with AReaL's status and reason on the root.

Without AReaL (the main venv) these tests skip; ``.ci/steps/42-areal.sh`` runs them in a
venv of their own.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import time
from types import SimpleNamespace

import pytest

from otel_rollout import attributes as A

MOD = "areal.infra.workflow_executor"
SKIP = (
    "AReaL 1.0.4 is not installed here (.ci/steps/42-areal.sh runs these tests in a venv "
    "of their own: pip install 'otel-rollout[areal]')"
)
GENERATE_S, TOOL_S, REWARD_S = 0.025, 0.020, 0.010
TOLERANCE_S = 0.001
ATTEMPTS = 3
MS = 1_000_000
#: A known latency is at least this share of itself as AReaL measures it (uvloop's timers
#: fire up to a millisecond early).
EARLY = 0.9


def test_missing_areal_names_the_extra():
    if importlib.util.find_spec("areal") is not None:
        pytest.skip("AReaL is installed here")
    from otel_rollout.integrations.areal import AReaLInstrumentor

    with pytest.raises(ImportError, match=r"pip install 'otel-rollout\[areal\]'"):
        AReaLInstrumentor().instrument(skip_dep_check=True)
    assert not AReaLInstrumentor().is_instrumented_by_opentelemetry


@pytest.fixture(scope="module")
def areal():
    pytest.importorskip(MOD, reason=SKIP)
    import _areal
    from areal.api import AsyncRewardWrapper

    # AReaL's reward process pool forks its worker on first use: start it here, before
    # the engine's threads run (a fork from a process with busy threads can hang).
    assert asyncio.run(AsyncRewardWrapper(_areal.reward)("p", "c", [], [])) == 1.0
    tok = _areal.tiny_tokenizer()
    server = _areal.StandInVLLM(tok, GENERATE_S)
    yield SimpleNamespace(tok=tok, server=server)
    server.close()


@pytest.fixture
def instrumented(areal, tmp_path):
    """A fresh test pipeline with AReaL instrumented onto it, AReaL's session tracer
    writing under tmp_path, and AReaL engines on the stand-in server; all undone after."""
    import _areal
    from areal.api.cli_args import PerfTracerConfig, SessionTracerConfig
    from areal.utils import perf_tracer

    from otel_rollout.integrations.areal import AReaLInstrumentor
    from otel_rollout.testing import make_test_env

    made = SimpleNamespace(envs=[], engines=[], run=0)

    def make(concurrency=4, batch_size=64, **options):
        if made.envs:
            AReaLInstrumentor().uninstrument()
            made.envs[-1].shutdown()
        perf_tracer.reset()
        made.run += 1
        cfg = PerfTracerConfig(
            experiment_name="areal", trial_name=f"run{made.run}", fileroot=str(tmp_path),
            enabled=False, session_tracer=SessionTracerConfig(enabled=True),
        )  # fmt: skip
        perf_tracer.configure(cfg, rank=0)
        env = make_test_env(**options)
        AReaLInstrumentor().instrument(rollout_tracer=env.tracer)
        made.envs.append(env)
        engine = _areal.engine(areal.server.addr, concurrency, batch_size=batch_size)
        made.engines.append(engine)
        return env, engine

    yield make
    AReaLInstrumentor().uninstrument()
    for engine in made.engines:
        engine.destroy()
    if made.envs:
        made.envs[-1].shutdown()
    perf_tracer.reset()


def _sessions() -> dict[int, dict]:
    """AReaL's session records, by session id (flushed from its tracer)."""
    from areal.utils import perf_tracer

    tracer = perf_tracer.get_session_tracer()
    tracer.flush(force=True)
    if not os.path.exists(tracer._output_path):  # no session at all
        return {}
    with open(tracer._output_path) as f:
        return {r["session_id"]: r for r in map(json.loads, f)}


def _ours(env) -> dict[int, SimpleNamespace]:
    """Our figures per AReaL session: the root, its breakdown, its phase sums."""
    bds = {b.trace_id: b for b in env.breakdowns}
    spans = env.spans()
    out = {}
    for root in env.roots():
        tid = root.context.trace_id
        mine = [s for s in spans if s.context.trace_id == tid and s is not root]

        def total(name, mine=mine):
            return sum(s.end_time - s.start_time for s in mine if s.name == name) / 1e9

        b = bds[format(tid, "032x")]
        out[root.attributes["areal.session.id"]] = SimpleNamespace(
            root=root,
            b=b,
            spans=mine,
            reward=total("reward"),
            llm=b.sum_nanos["llm"] / 1e9,
            env=b.sum_nanos["env"] / 1e9,
        )
    return out


def _misses(ours, records) -> list[float]:
    """Per session: |ours - AReaL's| for total, generate, toolcall and reward."""
    misses = []
    for sid, r in records.items():
        o = ours[sid]
        misses += [
            abs(o.b.e2e - r["total_s"]),
            abs(o.llm - r.get("generate_s", 0.0)),
            abs(o.env - r.get("toolcall_s", 0.0)),
            abs(o.reward - r.get("reward_s", 0.0)),
        ]
    return misses


def _parity_run(make, run):
    """``run(engine)`` once per attempt until every figure is within 1 ms of AReaL's: a
    miss from the process being descheduled between AReaL's clock and ours is retried, a
    systematic gap fails every attempt."""
    for attempt in range(ATTEMPTS):
        env, engine = make()
        result = run(engine)
        records, ours = _sessions(), _ours(env)
        worst = max(_misses(ours, records), default=0.0)
        if sorted(ours) == sorted(records) and worst <= TOLERANCE_S:
            return env, result, records, ours
        why = f"sessions {sorted(records)}, ours {sorted(ours)}, worst miss {worst:.6f} s"
        assert attempt < ATTEMPTS - 1, why


# The tool workflow: 1 to 5 turns accepted; rejected by should_accept_fn; no trajectory
# (rejected: returned_none); failed after its first model call.
TOOL_SPECS = [
    *({"turns": t, "tool_s": TOOL_S, "reward_s": REWARD_S} for t in (1, 2, 3, 4, 5)),
    {"turns": 2, "tool_s": TOOL_S, "reward_s": REWARD_S, "accept": False},
    {"turns": 3, "tool_s": TOOL_S, "reward_s": REWARD_S, "none": True},
    {"turns": 2, "tool_s": TOOL_S, "reward_s": REWARD_S, "fail": True},
]
EXPECTED = [("accepted", None)] * 5 + [
    ("rejected", "rejected"), ("rejected", "returned_none"), ("failed", "workflow_exception"),
]  # fmt: skip


def _submit_and_wait(areal, specs, clock=None):
    import _areal

    def run(engine):
        wf = _areal.tool_workflow(areal.tok, clock)
        ids = [engine.submit(p, workflow=wf, should_accept_fn=_areal.accept)
               for p in _areal.prompts(specs)]  # fmt: skip
        engine.wait(len(ids), timeout=120)
        return ids

    return run


def test_per_session_parity_with_areals_session_tracer(areal, instrumented):
    _, task_ids, records, ours = _parity_run(instrumented, _submit_and_wait(areal, TOOL_SPECS))
    by_task = {r["task_id"]: r for r in records.values()}
    assert sorted(by_task) == sorted(task_ids)
    for task_id, spec, (status, reason) in zip(task_ids, TOOL_SPECS, EXPECTED, strict=True):
        r = by_task[task_id]
        o = ours[r["session_id"]]
        attrs = o.root.attributes
        assert (r["status"], r.get("reason")) == (status, reason)
        assert attrs["areal.session.status"] == status
        assert attrs.get("areal.session.reason") == reason
        assert attrs["areal.task.id"] == task_id and attrs[A.TRAJECTORY_ID] == f"{task_id}_0"
        turns = 1 if spec.get("fail") else spec["turns"]
        # the known latencies, so the comparison is not of two zeros
        assert r["generate_s"] >= turns * GENERATE_S * EARLY
        assert o.llm == pytest.approx(r["generate_s"], abs=TOLERANCE_S)
        assert o.b.e2e == pytest.approx(r["total_s"], abs=TOLERANCE_S)
        if spec.get("fail"):
            assert "reward_s" not in r and o.reward == 0.0 and o.b.status == A.STATUS_ERROR
            continue
        assert o.b.status == A.STATUS_OK
        assert r["reward_s"] >= REWARD_S * EARLY
        assert o.reward == pytest.approx(r["reward_s"], abs=TOLERANCE_S)
        if turns > 1:
            assert r["toolcall_s"] >= (turns - 1) * TOOL_S * EARLY
            assert o.env == pytest.approx(r["toolcall_s"], abs=TOLERANCE_S)
        else:
            assert "toolcall_s" not in r and o.env == 0.0
        assert o.b.turns == turns and o.b.env_steps == turns - 1
        n = o.b.nanos
        assert n["llm"] + n["env"] + n["env_setup"] + n["env_teardown"] + n["other"] == n["e2e"]


def test_rollout_batch_is_a_batch_and_rlvr_is_at_parity(areal, instrumented):
    """``RLVRWorkflow`` (reward in AReaL's process pool) by ``rollout_batch``, in groups
    of two (``GroupedRolloutWorkflow``): two sessions a task, two trajectories."""
    import _areal
    from areal.workflow.rlvr import RLVRWorkflow

    def run(engine):
        wf = RLVRWorkflow(_areal.reward, _areal.gconfig(), areal.tok)
        data = _areal.prompts([{"reward_s": REWARD_S}] * 3)
        return engine.rollout_batch(data, workflow=wf, group_size=2)

    env, out, records, ours = _parity_run(lambda: instrumented(concurrency=2), run)
    assert len(out) == 3 and len(records) == 6
    (batch,) = env.spans(A.SPAN_BATCH)
    assert batch.attributes["areal.call"] == "rollout_batch"
    assert batch.attributes["areal.max_concurrent_rollouts"] == 2
    assert batch.attributes["rollout.batch.capacity"] == 2  # the slot account's capacity
    slots = [v for k, v in batch.attributes.items() if k.startswith("rollout.batch.slot.")]
    assert slots and sum(slots) == pytest.approx(1.0)  # the slot account is whole
    assert batch.attributes["rollout.batch.trajectories"] == 6
    bctx = batch.get_span_context()
    groups: dict[int, list[str]] = {}
    for o in ours.values():
        root, attrs = o.root, o.root.attributes
        assert root.parent is None and [link.context.span_id for link in root.links] == [
            bctx.span_id
        ]
        assert attrs[A.BATCH_ID] == batch.attributes[A.BATCH_ID]
        assert attrs[A.ENV_CLASS] == "RLVRWorkflow" and attrs[A.POLICY_VERSION] == 0
        groups.setdefault(attrs[A.GROUP_ID], []).append(attrs[A.TRAJECTORY_ID])
        assert o.reward >= REWARD_S * EARLY and o.b.turns == 1
    assert sorted(map(sorted, groups.values())) == [[f"{t}_0", f"{t}_1"] for t in range(3)]


def test_generate_spans_carry_the_request_and_the_traceparent(areal, instrumented):
    import _areal

    env, engine = instrumented()
    seen = len(areal.server.headers)
    wf = _areal.tool_workflow(areal.tok)
    engine.rollout_batch(_areal.prompts([{"turns": 2, "tool_s": 0.0}]), workflow=wf)
    sent = {h["traceparent"] for h in areal.server.headers[seen:]}
    generates = [s for s in env.spans() if s.attributes.get(A.PHASE) == A.PHASE_LLM]
    assert len(generates) == 2
    assert sent == {
        f"00-{g.context.trace_id:032x}-{g.context.span_id:016x}-{int(g.context.trace_flags):02x}"
        for g in generates
    }
    for g in generates:
        ga = g.attributes
        assert ga[A.GEN_AI_OPERATION_NAME] == A.OP_TEXT_COMPLETION
        assert ga[A.GEN_AI_USAGE_INPUT_TOKENS] > 0 and ga[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 8
        assert ga[A.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
        assert ga[A.GEN_AI_RESPONSE_ID].startswith("cmpl-")
        assert len(ga["areal.request.id"]) == 32 and ga["areal.http.calls"] == 1
        assert ga[A.GEN_AI_REQUEST_MAX_TOKENS] == 16


def test_multi_turn_workflow_without_sessions(areal, instrumented):
    """``MultiTurnWorkflow`` registers no session (AReaL's tracer has no record of it):
    the trajectory opens at its first model call, one ``generate`` per attempt."""
    import _areal
    from areal.workflow.multi_turn import MultiTurnWorkflow

    env, engine = instrumented()
    wf = MultiTurnWorkflow(_areal.reward, _areal.gconfig(), areal.tok, max_turns=5,
                           turn_discount=1.0)  # fmt: skip
    engine.rollout_batch(_areal.prompts([{"turns": t} for t in (1, 2, 3, 4, 5)]), workflow=wf)
    assert _sessions() == {}
    got = sorted((b.turns, b.env_class) for b in env.breakdowns)
    assert got == [(t, "MultiTurnWorkflow") for t in (1, 2, 3, 4, 5)]
    for b in env.breakdowns:
        assert b.band("llm") >= b.turns * GENERATE_S * EARLY and b.band("env") == 0.0


def test_exact_nanoseconds_with_a_manual_clock(areal, instrumented):
    """Our spans on a manual clock that only the server (25 ms a completion), the tool
    (20 ms) and the reward (10 ms) move, one episode at a time: every figure is exact."""
    from otel_rollout.testing import ManualClock

    clock = ManualClock()
    env, engine = instrumented(concurrency=1, clock=clock)
    areal.server.on_generate = lambda: clock.advance(ms=25)
    try:
        for turns in (1, 3, 5):
            spec = {"turns": turns, "tool_s": 0.020, "reward_s": 0.010}
            _submit_and_wait(areal, [spec], clock)(engine)
    finally:
        areal.server.on_generate = None
    rewards = {}
    for o in _ours(env).values():
        rewards[o.b.trajectory_id] = o.reward
    got = [(b.nanos["llm"], b.nanos["env"], b.nanos["other"], b.nanos["e2e"], b.turns)
           for b in env.breakdowns]  # fmt: skip
    assert got == [
        (25 * MS * t, 20 * MS * (t - 1), 10 * MS, (25 * t + 20 * (t - 1) + 10) * MS, t)
        for t in (1, 3, 5)
    ]
    assert set(rewards.values()) == {0.010}


def test_instrument_is_idempotent_and_uninstrument_restores(areal, instrumented):
    import _areal
    from areal.infra.async_task_runner import AsyncTaskRunner
    from areal.infra.remote_inf_engine import RemoteInfEngine
    from areal.utils import perf_tracer

    from otel_rollout.integrations.areal import AReaLInstrumentor

    env, engine = instrumented()
    AReaLInstrumentor().instrument(rollout_tracer=env.tracer)  # again: a no-op
    wf = _areal.tool_workflow(areal.tok)
    engine.rollout_batch(_areal.prompts([{"turns": 2}]), workflow=wf)
    assert len(env.roots()) == 1 and len(env.spans(A.SPAN_GENERATE)) == 2
    AReaLInstrumentor().uninstrument()
    for owner, name in ((AsyncTaskRunner, "submit"), (RemoteInfEngine, "agenerate"),
                        (perf_tracer, "register_session")):  # fmt: skip
        assert not hasattr(getattr(owner, name), "__wrapped__"), name
    engine.rollout_batch(_areal.prompts([{"turns": 2}]), workflow=wf)
    assert len(env.roots()) == 1  # nothing new
    AReaLInstrumentor().instrument(rollout_tracer=env.tracer)  # the fixture's undo


def test_instrumenting_an_engine_already_initialized(areal, instrumented):
    import _areal

    from otel_rollout.integrations.areal import AReaLInstrumentor

    env, _ = instrumented()
    AReaLInstrumentor().uninstrument()
    engine = _areal.engine(areal.server.addr, 2, batch_size=8)
    try:
        AReaLInstrumentor().instrument(rollout_tracer=env.tracer)
        engine.rollout_batch(
            _areal.prompts([{"turns": 2}]), workflow=_areal.tool_workflow(areal.tok)
        )
        assert [b.turns for b in env.breakdowns] == [2]
    finally:
        engine.destroy()


def test_suppressed_submissions_are_not_traced(areal, instrumented):
    import _areal
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    env, engine = instrumented()
    wf = _areal.tool_workflow(areal.tok)
    with suppress_instrumentation():
        engine.rollout_batch(_areal.prompts([{"turns": 1}]), workflow=wf)
    assert env.spans() == []
    engine.rollout_batch(_areal.prompts([{"turns": 1}]), workflow=wf)
    assert len(env.roots()) == 1


def test_a_step_keeps_and_drops_episodes_as_areal_decided(areal, instrumented):
    """While a step is current, the results the trainer takes from AReaL's executor are
    the step's kept episodes (staleness against the engine's weight version), and the
    episodes AReaL did not accept are dropped by it with AReaL's reason."""
    import _areal

    env, engine = instrumented()
    wf = _areal.tool_workflow(areal.tok)
    specs = [{"turns": 2}, {"turns": 1}, {"turns": 1, "accept": False},
             {"turns": 1, "none": True}, {"turns": 1, "fail": True}]  # fmt: skip
    engine.set_version(1)
    with env.tracer.step(1, trainer="areal", policy_version=1) as step:
        for p in _areal.prompts(specs):
            engine.submit(p, workflow=wf, should_accept_fn=_areal.accept)
        assert len([r for r in engine.wait(len(specs), timeout=120) if r is not None]) == 2
    h = step.health
    assert (h.kept, h.dropped) == (2, 3) and h.keep_rate == pytest.approx(0.4)
    assert dict(h.dropped_by_reason) == {"filtered": 2, "workflow_exception": 1}
    assert h.staleness == (0, 0)
    assert 0.0 < h.wasted_frac < 1.0  # the dropped episodes' engine time
    links = {lk.attributes[A.LINK_TYPE] for lk in env.spans("step")[0].links}
    assert links == {A.LINK_TRAINED_ON, A.LINK_DROPPED}

    # generated at version 1, trained on at version 3: staleness 2
    manager = engine.workflow_executor.staleness_manager
    accepted = manager.get_stats().accepted
    engine.submit(_areal.prompts([{"turns": 1}])[0], workflow=wf)
    deadline = time.monotonic() + 120
    while manager.get_stats().accepted == accepted:  # finished, not yet taken
        assert time.monotonic() < deadline
        time.sleep(0.01)
    engine.set_version(3)
    with env.tracer.step(2, trainer="areal", policy_version=3) as step:
        engine.wait(1, timeout=120)
    assert (step.health.kept, step.health.dropped, step.health.staleness) == (1, 0, (2,))


def test_ppo_trainer_loop_is_steps_with_areals_phases(areal, instrumented):
    """AReaL's own ``PPOTrainer.train`` loop, unchanged, for two steps of two episodes
    (``prepare_batch``), the GPU work stood in for (advantages 5 ms, PPO update 30 ms,
    weight update 10 ms): a step per iteration, each ``record_timing`` block a phase as
    long as AReaL's ``timeperf/*`` figure, the episodes kept by the step that trained on
    them."""
    import _areal
    from areal.utils import stats_tracker

    pytest.importorskip("areal.trainer.rl_trainer", reason="AReaL's trainer needs its loggers")
    env, engine = instrumented(concurrency=2, batch_size=2)
    trainer = _areal.ppo_trainer(
        engine, _areal.prompts([{"turns": 1}] * 4), batch_size=2, steps=2,
        advantage_s=0.005, train_s=0.030, update_s=0.010,
    )  # fmt: skip
    stats = stats_tracker.DEFAULT_TRACKER.stats
    before = {k: len(v) for k, v in stats.items() if k.startswith("timeperf/")}
    trainer.train(workflow=_areal.tool_workflow(areal.tok))
    steps = sorted(env.spans("step"), key=lambda s: s.attributes[A.STEP])
    assert [s.attributes[A.STEP] for s in steps] == [0, 1]
    assert [s.attributes[A.POLICY_VERSION] for s in steps] == [0, 1]
    assert {s.attributes["rollout.step.trainer"] for s in steps} == {"areal"}
    names = ["rollout", "compute_advantage", "train_step", "update_weights", "save",
             "checkpoint_for_recover", "eval", "clear_batches"]  # fmt: skip
    for i, step in enumerate(steps):
        phases = {s.name: s for s in env.children(step)}
        assert sorted(phases) == sorted(names)
        for name in names:
            areal_s = stats[f"timeperf/{name}"][before.get(f"timeperf/{name}", 0) + i]
            ours = phases[name].end_time - phases[name].start_time
            assert ours == pytest.approx(areal_s * 1e9, abs=1_000)  # 1 us: rounding only
        assert phases["train_step"].end_time - phases["train_step"].start_time >= 30 * MS * EARLY
        # the step's batch: prepare_batch inside its rollout phase, linked to it
        assert step.attributes["rollout.async.kept"] == 2
        assert step.attributes["rollout.async.staleness_max"] == 0
    batches = env.spans(A.SPAN_BATCH)
    assert sorted(b.attributes[A.STEP] for b in batches) == [0, 1]
