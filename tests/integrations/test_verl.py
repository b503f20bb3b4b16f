"""verl 0.9.1's own agent loop, instrumented, against the published package.

verl's ``AgentLoopWorker`` runs ``ToolAgentLoop`` samples of 1 to 10 turns with its own
hydra ``ppo_trainer`` config, its own ``LLMServerClient`` and ``GlobalRequestLoadBalancer``
over a stand-in server replica (each generate 25 ms) and a function tool that sleeps
20 ms (run by verl with ``asyncio.to_thread``). Per trajectory our ``llm`` and ``env``
must equal verl's own ``AgentLoopMetrics`` (``generate_sequences``, ``tool_calls``) of the
same run within 1 ms; the bands sum to ``e2e`` in exact nanoseconds and the trace file's
accounting gives the same breakdown. Once more with real Ray actors: verl's
``AgentLoopManager`` on the driver, ``AgentLoopWorker`` actors configured and
instrumented by the setup hooks, their spans over OTLP to a receiver here and their
breakdowns back in the driver's batch.

Without verl (the main venv) these tests skip; ``.ci/steps/40-verl.sh`` runs them in a
venv of their own.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import time

import pytest

import otel_rollout
from otel_rollout import attributes as A
from otel_rollout import summarize
from otel_rollout._accounting.span_tree import SpanRecord, breakdown_from_tree

MOD = "verl.experimental.agent_loop"
SKIP = (
    "verl 0.9.1 is not installed here (.ci/steps/40-verl.sh runs these tests in a venv "
    "of its own: pip install 'otel-rollout[verl]')"
)
GENERATE_S, TOOL_S = 0.025, 0.020
TURNS = (1, 2, 3, 5, 8, 10)
TOLERANCE_S = 0.001
ATTEMPTS = 3
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(otel_rollout.__file__)))
_SUPPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_support")


def test_missing_verl_names_the_extra():
    if importlib.util.find_spec("verl") is not None:
        pytest.skip("verl is installed here")
    from otel_rollout.integrations.verl import VerlInstrumentor

    with pytest.raises(ImportError, match=r"pip install 'otel-rollout\[verl\]'"):
        VerlInstrumentor().instrument(skip_dep_check=True)
    assert not VerlInstrumentor().is_instrumented_by_opentelemetry


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    pytest.importorskip(MOD, reason=SKIP)
    import _verl

    root = tmp_path_factory.mktemp("verl")
    model = _verl.build_model_dir(root)
    tool = _verl.write_tool(root, TOOL_S)
    return {"model": model, "tool": tool, "config": _verl.ppo_config(model, tool)}


@pytest.fixture
def instrumented(setup):
    """A fresh test pipeline, verl instrumented onto it; restored afterwards."""
    from otel_rollout.integrations.verl import VerlInstrumentor
    from otel_rollout.testing import make_test_env

    envs = []

    def make(**options):
        if envs:
            VerlInstrumentor().uninstrument()
            envs[-1].shutdown()
        env = make_test_env(**options)
        VerlInstrumentor().instrument(rollout_tracer=env.tracer)
        envs.append(env)
        return env

    yield make
    VerlInstrumentor().uninstrument()
    envs[-1].shutdown()


def _worker(setup):
    import _verl
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    client = _verl.local_client(setup["config"], setup["model"], GENERATE_S)
    return AgentLoopWorker(setup["config"], client)


def _generate(worker, turns, tracer=None, step=1):
    """verl's worker on one step: inside a batch of ``tracer`` (what the manager opens
    on the driver) when given."""
    import _verl

    data = _verl.prompts(list(turns), step=step)
    if tracer is None:
        return asyncio.run(worker.generate_sequences(data))

    async def step_():
        async with tracer.batch(step):
            return await worker.generate_sequences(data)

    return asyncio.run(step_())


def _worst_miss(bds, metrics) -> float:
    worst = 0.0
    for i, m in enumerate(metrics):
        b = bds[f"{i}_0"]
        worst = max(
            worst,
            abs(b.band("llm") - m["generate_sequences"]),
            abs(b.band("env") - m["tool_calls"]),
        )
    return worst


def _parity_run(setup, make):
    """One run per attempt until our figures are within 1 ms of verl's: a miss from the
    process being descheduled between verl's timer and ours is retried, a systematic
    gap fails every attempt."""
    worker = _worker(setup)
    for attempt in range(ATTEMPTS):
        env = make()
        out = _generate(worker, TURNS, env.tracer)
        metrics = out.meta_info["metrics"]
        bds = {b.trajectory_id: b for b in env.breakdowns}
        if len(bds) == len(TURNS) and _worst_miss(bds, metrics) <= TOLERANCE_S:
            break
        assert attempt < ATTEMPTS - 1, f"worst miss {_worst_miss(bds, metrics):.6f} s"
    return env, out, metrics, bds


def test_per_trajectory_parity_with_verls_timers(setup, instrumented):
    _env, _out, metrics, bds = _parity_run(setup, instrumented)
    assert sorted(bds) == [f"{i}_0" for i in range(len(TURNS))]
    for i, (turns, m) in enumerate(zip(TURNS, metrics, strict=True)):
        b = bds[f"{i}_0"]
        assert b.band("llm") == pytest.approx(m["generate_sequences"], abs=TOLERANCE_S)
        assert b.band("env") == pytest.approx(m["tool_calls"], abs=TOLERANCE_S)
        # the known latencies, so the comparison is not of two zeros
        assert m["generate_sequences"] >= turns * GENERATE_S
        assert m["tool_calls"] >= (turns - 1) * TOOL_S
        assert b.turns == turns and b.env_steps == turns - 1  # a phase per round
        n = b.nanos
        assert n["llm"] + n["env"] + n["env_setup"] + n["env_teardown"] + n["other"] == n["e2e"]
        assert (b.env_queue > 0) == (turns > 1)  # the gather starting each round's calls
        assert b.env_queue <= b.band("env")
        assert b.band("env_setup") == b.band("env_teardown") == 0.0  # verl has no env lifecycle
        assert b.status == A.STATUS_OK and b.env_class == "timed_tools"
        assert b.model == str(setup["model"])


def test_a_thread_switch_beside_verls_timer_moves_neither_figure(setup, instrumented, monkeypatch):
    """A busy process (a Ray actor's threads) can switch threads between our clock's
    reading and verl's timer's, for up to the 5 ms switch interval, at both ends of the
    block: the phase is as long as verl measured it all the same."""
    import codetiming

    start, stop = codetiming.Timer.start, codetiming.Timer.stop

    def late_start(self):  # the switch just before verl's timer starts...
        time.sleep(0.004)
        return start(self)

    def late_reading(self):  # ...and just after it stops, before our reading
        last = stop(self)
        time.sleep(0.004)
        return last

    monkeypatch.setattr(codetiming.Timer, "start", late_start)
    monkeypatch.setattr(codetiming.Timer, "stop", late_reading)
    env = instrumented()
    out = _generate(_worker(setup), (3, 4), env.tracer)
    bds = {b.trajectory_id: b for b in env.breakdowns}
    for i, m in enumerate(out.meta_info["metrics"]):
        b = bds[f"{i}_0"]
        assert m["generate_sequences"] >= (3 + i) * GENERATE_S
        assert b.band("llm") == pytest.approx(
            m["generate_sequences"], abs=TOLERANCE_S
        )  # not 8 ms a turn
        assert b.band("env") == pytest.approx(m["tool_calls"], abs=TOLERANCE_S)
        n = b.nanos
        assert n["llm"] + n["env"] + n["env_setup"] + n["env_teardown"] + n["other"] == n["e2e"]


def test_exact_nanoseconds_with_a_manual_clock(setup, instrumented):
    """Our spans on a manual clock that only the replica (25 ms a generate) and the tool
    (20 ms a call) move, one sample at a time: every band is exact in ns, so the phases
    start and end exactly around verl's awaits and nothing else is counted."""
    import _verl
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    from otel_rollout.testing import ManualClock

    clock = ManualClock()
    env = instrumented(clock=clock)
    config = setup["config"]
    client = _verl.local_client(config, setup["model"], 0.0, lambda: clock.advance(ms=25))
    worker = AgentLoopWorker(config, client)
    _verl.TOOL_HOOKS.append(lambda: clock.advance(ms=20))
    try:
        for turns in (1, 3, 10):
            asyncio.run(worker.generate_sequences(_verl.prompts([turns])))
    finally:
        _verl.TOOL_HOOKS.clear()
    got = [(b.nanos["llm"], b.nanos["env"], b.nanos["other"], b.nanos["e2e"], b.turns)
           for b in env.breakdowns]  # fmt: skip
    ms = 1_000_000
    assert got == [
        (25 * ms * t, 20 * ms * (t - 1), 0, (25 * t + 20 * (t - 1)) * ms, t) for t in (1, 3, 10)
    ]
    assert all(b.env_queue == 0.0 for b in env.breakdowns)  # the clock stood still there


def test_spans_roots_and_attributes(setup, instrumented):
    import _verl

    env, _out, _metrics, bds = _parity_run(setup, instrumented)
    (batch,) = env.spans(A.SPAN_BATCH)
    roots = env.roots()
    assert len(roots) == len(TURNS)
    by_trace = {}
    for span in env.spans():
        by_trace.setdefault(span.context.trace_id, []).append(span)
    bctx = batch.get_span_context()
    for root in roots:
        attrs = root.attributes
        tid = attrs[A.TRAJECTORY_ID]
        i = int(tid.split("_")[0])
        # a root of its own trace, linked to the step's batch span
        assert root.parent is None and root.context.trace_id != bctx.trace_id
        assert [link.context.span_id for link in root.links] == [bctx.span_id]
        assert attrs[A.BATCH_ID] == batch.attributes[A.BATCH_ID] and attrs[A.STEP] == 1
        assert attrs[A.GEN_AI_AGENT_NAME] == "tool_agent" and attrs["verl.sample_index"] == i
        assert attrs["verl.num_turns"] == 2 * TURNS[i]  # verl's count: user + assistant + tool
        spans = by_trace[root.context.trace_id]
        ids = {s.context.span_id: s for s in spans}
        for s in spans:  # every span hangs below this root
            cur = s
            while cur.parent is not None:
                cur = ids[cur.parent.span_id]
            assert cur is root
        # the accounting from the spans alone (a trace file, a backend) agrees exactly
        records = [SpanRecord.from_span(s) for s in spans]
        again, _ = breakdown_from_tree(SpanRecord.from_span(root), records, attrs)
        assert again.nanos == bds[tid].nanos
        generates = [s for s in spans if s.attributes.get(A.PHASE) == A.PHASE_LLM]
        assert len(generates) == TURNS[i]
        for g in generates:
            ga = g.attributes
            assert ga[A.GEN_AI_OPERATION_NAME] == A.OP_TEXT_COMPLETION
            assert ga[A.GEN_AI_REQUEST_MODEL] == str(setup["model"])
            assert ga[A.GEN_AI_USAGE_INPUT_TOKENS] > 0 and ga[A.GEN_AI_USAGE_OUTPUT_TOKENS] > 0
            assert ga[A.GEN_AI_RESPONSE_FINISH_REASONS] == ("completed",)
            assert len(ga[A.VLLM_REQUEST_ID]) == 32  # the id verl gave the engine
            (acquire,) = [s for s in spans if s.parent and s.parent.span_id == g.context.span_id]
            assert acquire.name == "acquire_server"
            assert acquire.attributes["verl.server.id"] == "replica-0"
        tools = [s for s in spans if s.attributes.get(A.GEN_AI_TOOL_NAME) == _verl.TOOL_NAME]
        assert len(tools) == TURNS[i] - 1
        rounds = [s for s in spans if s.name == "tool_calls"]
        assert len(rounds) == TURNS[i] - 1
        for t in tools:  # each call inside its round, its pool wait inside the call
            assert ids[t.parent.span_id].name == "tool_calls"
            waits = [s for s in spans if s.parent and s.parent.span_id == t.context.span_id]
            assert [w.attributes["verl.wait.cause"] for w in waits] == ["pool"]
        gathers = [s for s in spans if s.attributes.get("verl.wait.cause") == "gather"]
        assert len(gathers) <= len(rounds)
        for w in gathers:
            assert w.parent.span_id == root.context.span_id
    # histograms and the tracker keys
    points = env.histogram_points(A.METRIC_DURATION)
    assert sum(p.count for p in points) == len(TURNS)
    llm_points = env.histogram_points(A.METRIC_PHASE_DURATION, **{A.PHASE: A.PHASE_LLM})
    assert sum(p.count for p in llm_points) == len(TURNS)
    assert sum(p.sum for p in llm_points) == pytest.approx(sum(b.band("llm") for b in bds.values()))
    summary = summarize(env.breakdowns)
    for key in ("completion", "llm", "env", "other", "env_queue"):
        assert f"generate/trajectory_time_{key}_mean" in summary
    assert summary["generate/trajectory_time_llm_max"] == max(b.band("llm") for b in bds.values())
    assert batch.attributes[A.BATCH_PREFIX + "trajectories"] == len(TURNS)
    assert batch.attributes[A.BATCH_PREFIX + "wall_time"] >= max(b.e2e for b in bds.values())


def test_single_turn_agent_loop(setup, instrumented):
    import _verl

    env = instrumented()
    worker = _worker(setup)
    data = _verl.prompts([1, 1, 1])
    data.non_tensor_batch["agent_name"][:] = "single_turn_agent"
    out = asyncio.run(worker.generate_sequences(data))  # outside any batch: roots alone
    assert env.spans(A.SPAN_BATCH) == []
    bds = {b.trajectory_id: b for b in env.breakdowns}
    for i, m in enumerate(out.meta_info["metrics"]):
        assert bds[f"{i}_0"].band("llm") == pytest.approx(m["generate_sequences"], abs=TOLERANCE_S)
        assert bds[f"{i}_0"].turns == 1 and bds[f"{i}_0"].band("env") == 0.0


def test_parallel_tool_calls(setup, instrumented):
    """Three calls per round run at once: ``env`` is the round's time (verl's), not the
    sum of the calls'."""
    import _verl
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    extra = ["actor_rollout_ref.rollout.multi_turn.max_parallel_calls=3"]
    config = _verl.ppo_config(setup["model"], setup["tool"], extra=extra)
    worker = AgentLoopWorker(config, _verl.local_client(config, setup["model"], GENERATE_S))
    turns = (2, 4)
    for attempt in range(ATTEMPTS):
        env = instrumented()
        data = _verl.prompts(list(turns), parallel=3)
        out = asyncio.run(worker.generate_sequences(data))
        metrics = out.meta_info["metrics"]
        bds = {b.trajectory_id: b for b in env.breakdowns}
        if _worst_miss(bds, metrics) <= TOLERANCE_S:
            break
        assert attempt < ATTEMPTS - 1, f"worst miss {_worst_miss(bds, metrics):.6f} s"
    calls = [s for s in env.spans() if s.attributes.get(A.GEN_AI_TOOL_NAME) == _verl.TOOL_NAME]
    assert len(calls) == 3 * sum(t - 1 for t in turns)
    for i, t in enumerate(turns):
        b = bds[f"{i}_0"]
        assert b.band("env") == pytest.approx(metrics[i]["tool_calls"], abs=TOLERANCE_S)
        mine = [s for s in calls if s.context.trace_id == int(b.trace_id, 16)]
        assert len(mine) == 3 * (t - 1)
        busy = sum(s.end_time - s.start_time for s in mine) * 1e-9
        assert b.band("env") < busy  # the calls overlapped; counted once
        assert b.band("env") >= (t - 1) * TOOL_S


def test_suppressed_and_uninstrumented_runs_are_untouched(setup, instrumented):
    import verl.experimental.agent_loop.agent_loop as agent_loop
    import verl.experimental.agent_loop.tool_agent_loop as tool_loop
    import verl.tools.function_tool as function_tool
    from opentelemetry.instrumentation.utils import suppress_instrumentation
    from verl.utils.profiler import simple_timer
    from verl.workers.rollout.llm_server import LLMServerClient

    from otel_rollout.integrations.verl import VerlInstrumentor

    originals = {
        "info": agent_loop.get_trajectory_info,
        "generate": LLMServerClient.__dict__["generate"],
        "trace_attr": agent_loop.rollout_trace_attr,
        "dump": agent_loop.AgentLoopMetrics.__dict__.get("model_dump"),
    }
    env = instrumented()
    VerlInstrumentor().instrument(rollout_tracer=env.tracer)  # twice: still one wrapper
    assert tool_loop.simple_timer is not simple_timer
    assert tool_loop.simple_timer.__wrapped__ is simple_timer
    worker = _worker(setup)
    with suppress_instrumentation():
        out = _generate(worker, (2,))
    assert env.spans() == [] and out.meta_info["metrics"][0]["tool_calls"] > 0
    VerlInstrumentor().uninstrument()
    assert tool_loop.simple_timer is simple_timer and agent_loop.simple_timer is simple_timer
    assert agent_loop.get_trajectory_info is originals["info"]
    assert agent_loop.rollout_trace_attr is originals["trace_attr"]
    assert agent_loop.AgentLoopMetrics.__dict__.get("model_dump") is originals["dump"]
    assert LLMServerClient.__dict__["generate"] is originals["generate"]
    assert function_tool.asyncio is asyncio
    _generate(worker, (2,))
    assert env.spans() == []
    VerlInstrumentor().instrument(rollout_tracer=env.tracer)  # the fixture uninstruments


# --- real Ray actors -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(setup):
    ray = pytest.importorskip("ray")
    from otel_rollout._setup import rollout as _rollout
    from otel_rollout.integrations import ray as otel_ray
    from otel_rollout.testing.receiver import OTLPReceiver

    rx = OTLPReceiver().start()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.grpc_endpoint)
        mp.setattr(_rollout, "_global", None)
        base = {
            "env_vars": {
                "PYTHONPATH": os.pathsep.join((_SUPPORT, _CHECKOUT)),
                "OTEL_BSP_SCHEDULE_DELAY": "200",
            },
            "worker_process_setup_hook": "otel_rollout.integrations.verl.instrument_worker",
        }
        runtime_env = otel_ray.runtime_env(base, service_name="verl-worker")
    ray.init(num_cpus=2, include_dashboard=False, runtime_env=runtime_env, log_to_driver=False)
    try:
        yield {"rx": rx, "ray": ray}
    finally:
        ray.shutdown()
        rx.stop()


def test_ray_workers_join_the_drivers_batch(setup, instrumented, cluster):
    import _verl
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager
    from verl.workers.rollout.llm_server import LLMServerClient
    from verl.workers.rollout.router import GlobalRequestLoadBalancer

    ray, rx = cluster["ray"], cluster["rx"]
    env = instrumented()
    turns = (1, 2, 4, 3)
    config = _verl.ppo_config(setup["model"], setup["tool"], num_workers=2)
    server = ray.remote(_verl.StandInServer).remote(str(setup["model"]), GENERATE_S)
    balancer = ray.remote(GlobalRequestLoadBalancer).remote(servers={"replica-0": server})
    client = LLMServerClient(config, load_balancer_handle=balancer)
    manager = AgentLoopManager.create(config, client)
    out = manager.generate_sequences(_verl.prompts(list(turns), step=3))
    timing = out.meta_info["timing"]
    (batch,) = env.spans(A.SPAN_BATCH)
    bid = batch.attributes[A.BATCH_ID]
    assert batch.attributes[A.STEP] == 3
    # every worker's trajectories came back into the driver's batch
    assert batch.attributes[A.BATCH_PREFIX + "trajectories"] == len(turns)
    llm = [timing[f"rollout/trajectory_time_llm_{s}"] for s in ("mean", "max")]
    verl_llm = [timing[f"agent_loop/generate_sequences/{s}"] for s in ("mean", "max")]
    assert llm == pytest.approx(verl_llm, abs=TOLERANCE_S)
    env_ = [timing[f"rollout/trajectory_time_env_{s}"] for s in ("mean", "max")]
    verl_env = [timing[f"agent_loop/tool_calls/{s}"] for s in ("mean", "max")]
    assert env_ == pytest.approx(verl_env, abs=TOLERANCE_S)
    assert timing["rollout/batch_wall_time"] > 0
    # the workers' roots, over OTLP: linked to the driver's batch span, two processes
    bctx = batch.get_span_context()

    def roots(r):
        return [s for s in r.spans() if A.TRAJECTORY_ID in s.attributes]

    assert rx.wait_for(lambda r: len(roots(r)) >= len(turns), timeout=30)
    got = roots(rx)
    assert {s.attributes[A.BATCH_ID] for s in got} == {bid}
    for s in got:
        assert s.links == ((format(bctx.trace_id, "032x"), format(bctx.span_id, "016x"),
                            {A.BATCH_ID: bid}),)  # fmt: skip
        assert s.resource["service.name"] == "verl-worker"
    assert len({s.resource.get("ray.worker.id") for s in got}) == 2
    ray.kill(server)
    ray.kill(balancer)
