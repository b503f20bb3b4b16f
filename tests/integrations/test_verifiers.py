"""verifiers parity against the published verifiers 0.4.0, in real time.

verifiers' own rollout code runs (``Agent.run`` -> ``Rollout.open/step/close``, its
interception server, its eval client) against a stand-in OpenAI-compatible server that
streams (generate 25 ms), with a harness plugin whose tool takes 20 ms and a task whose
setup, finalize and scoring take 30, 10 and 15 ms, for rollouts of 1 to 10 turns at
once. Per rollout, our breakdown must equal verifiers' own ``Trace.timing`` and
``ModelCall.time`` within 1 ms: e2e less the teardown (which verifiers does not time) is
its boot start to its last stage's end, env_setup is boot + setup, llm is agent.model,
env is agent.harness, other is finalize + scoring. Both are measured in the same run; a
run whose worst rollout misses by more (the process descheduled between verifiers' timer
and ours on a loaded machine) is run again, at most three times. The shipped ``bash``
harness is run too, by verifiers' subprocess runtime as a ``uv`` script, its tool calls
running ``sleep`` in that subprocess.

Runs in the venv ``.ci/steps/41-verifiers.sh`` builds; skipped where verifiers is absent.
"""

from __future__ import annotations

import asyncio
import sys
from types import SimpleNamespace

import pytest
from opentelemetry.instrumentation.utils import suppress_instrumentation

from otel_rollout import attributes as A
from otel_rollout import summarize
from otel_rollout.testing import make_test_env

SKIP = (
    "verifiers is not installed here (its tests run in the venv .ci/steps/41-verifiers.sh builds)"
)
TURNS = (1, 3, 5, 7, 10)
GENERATE_S, TOOL_S = 0.025, 0.020
SETUP_S, FINALIZE_S, SCORING_S = 0.030, 0.010, 0.015
TOLERANCE_S = 0.001
ATTEMPTS = 3
KEY_ENV = "OTEL_ROLLOUT_VF_TEST_KEY"


@pytest.fixture(scope="module")
def kit():
    """verifiers, a task of known latencies, and the stand-ins (server, harness)."""
    pytest.importorskip("verifiers.v1", reason=SKIP)
    import verifiers.v1 as vf
    from _verifiers import StandInServer, TimedHarnessConfig

    class TimedTask(vf.Task):
        async def setup(self, trace, runtime):
            await asyncio.sleep(SETUP_S)

        async def finalize(self, trace, runtime):
            await asyncio.sleep(FINALIZE_S)

        @vf.reward
        async def correct(self, trace) -> float:
            await asyncio.sleep(SCORING_S)
            return float(trace.last_reply == "42")

    return SimpleNamespace(
        vf=vf, Task=TimedTask, Server=StandInServer, HarnessConfig=TimedHarnessConfig
    )


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "stand-in")
    test_env = make_test_env()
    yield test_env
    test_env.shutdown()


def agent_for(kit, url):
    from verifiers.v1.clients import EvalClientConfig
    from verifiers.v1.configs.agent import AgentConfig
    from verifiers.v1.runtimes.subprocess import SubprocessConfig

    return kit.vf.Agent(
        AgentConfig(
            model="stand-in",
            harness=kit.HarnessConfig(id="_verifiers", tool_s=TOOL_S),
            runtime=SubprocessConfig(),
            client=EvalClientConfig(base_url=url, api_key_var=KEY_ENV),
        )
    )


def task(kit, turns):
    from verifiers.v1.task import TaskData

    return kit.Task(TaskData(prompt=f"turns={turns}", id=f"t{turns}"))


async def run_rollouts(kit, env, turns=TURNS, *, batch=True):
    """Rollouts of ``turns`` turns, all at once (in a batch), against a fresh server."""
    async with kit.Server(GENERATE_S) as server:
        agent = agent_for(kit, server.url)
        runs = [agent.run(task(kit, n)) for n in turns]
        if not batch:
            return await asyncio.gather(*runs), server, None
        async with env.tracer.batch(step=1) as b:
            traces = await asyncio.gather(*runs)
        return traces, server, b


def instrumented(env):
    from otel_rollout.integrations.verifiers import VerifiersInstrumentor

    inst = VerifiersInstrumentor()
    inst.instrument(
        tracer_provider=env.tracer_provider,
        meter_provider=env.meter_provider,
        processor=env.processor,
    )
    return inst


def deviations(trace, bd):
    """Seconds between our figures and verifiers' own, per band."""
    tm = trace.timing
    stages = (tm.boot, tm.setup, tm.agent, tm.finalize, tm.scoring)
    elapsed = max(s.end for s in stages if s.end) - tm.boot.start
    return {
        "e2e": (bd.e2e - bd.band("env_teardown")) - elapsed,
        "env_setup": bd.band("env_setup") - (tm.boot.duration + tm.setup.duration),
        "llm": bd.band("llm") - tm.agent.model.duration,
        "env": bd.band("env") - tm.agent.harness.duration,
        "other": bd.band("other") - (tm.finalize.duration + tm.scoring.duration),
    }


def test_each_rollout_equals_verifiers_own_timers(kit):
    worst = None
    for _ in range(ATTEMPTS):
        env = make_test_env()
        inst = instrumented(env)
        try:
            traces, _, _ = asyncio.run(run_rollouts(kit, env))
        finally:
            inst.uninstrument()
        by_id = {b.trajectory_id: b for b in env.breakdowns}
        assert sorted(by_id) == sorted(t.id for t in traces)
        for t in traces:
            assert t.ok, t.errors
        devs = [deviations(t, by_id[t.id]) for t in traces]
        worst = max(abs(v) for d in devs for v in d.values())
        env.shutdown()
        if worst <= TOLERANCE_S:
            break
    assert worst <= TOLERANCE_S, devs
    # the known latencies are in the right bands, whatever the machine's load
    for t in traces:
        bd = by_id[t.id]
        n = len(t.calls)
        assert bd.turns == n == t.num_turns
        assert bd.band("llm") >= n * GENERATE_S
        assert bd.band("env") >= (n - 1) * TOOL_S
        assert bd.band("env_setup") >= SETUP_S
        assert bd.band("other") >= FINALIZE_S + SCORING_S
        assert bd.band("env_teardown") > 0
        assert bd.score == 1.0


def test_an_interaction_of_several_segments_equals_verifiers_own_timers(kit, env):
    """``Agent.interaction``: the caller speaks between segments (its time is the
    harness's, in verifiers' agent span); one trajectory for the whole exchange."""

    async def main():
        async with kit.Server(GENERATE_S) as server:
            agent = agent_for(kit, server.url)
            async with agent.interaction(task(kit, 3)) as exchange:
                await exchange.turn()
                await asyncio.sleep(TOOL_S)  # the caller thinking
                await exchange.turn("And again?")
            return exchange.trace

    worst = None
    for _ in range(ATTEMPTS):
        env.collector.drain()
        inst = instrumented(env)
        try:
            trace = asyncio.run(main())
        finally:
            inst.uninstrument()
        assert trace.ok, trace.errors
        (bd,) = env.collector.peek()
        devs = deviations(trace, bd)
        worst = max(abs(v) for v in devs.values())
        if worst <= TOLERANCE_S:
            break
    assert worst <= TOLERANCE_S, devs
    assert bd.trajectory_id == trace.id
    assert bd.turns == len(trace.calls) == 4  # 3 in the first segment, 1 in the second
    assert trace.stop_condition == "user_closed"


def test_a_failed_rollout_ends_with_its_error(kit, env):
    """The upstream stream ends before its terminal event: verifiers records a
    ``ProviderError`` on the call and fails the rollout; so do we."""

    async def main():
        async with kit.Server(GENERATE_S, cut=True) as server:
            return await agent_for(kit, server.url).run(task(kit, 2))

    inst = instrumented(env)
    try:
        trace = asyncio.run(main())
    finally:
        inst.uninstrument()
    assert not trace.ok
    (root,) = env.roots()
    assert root.attributes[A.STATUS] == A.STATUS_ERROR
    assert trace.errors[-1].type in root.attributes[A.STATUS_DETAIL]
    gens = env.spans(A.SPAN_GENERATE)
    assert len(gens) == len(trace.calls) >= 1
    assert {g.attributes[A.ERROR_TYPE] for g in gens} == {"ProviderError"}
    (bd,) = env.breakdowns
    assert abs(bd.band("llm") - trace.timing.agent.model.duration) <= TOLERANCE_S


def test_every_span_is_under_its_root_and_roots_link_to_the_batch(kit, env):
    inst = instrumented(env)
    try:
        traces, _, batch = asyncio.run(run_rollouts(kit, env))
    finally:
        inst.uninstrument()
    roots = {r.attributes[A.TRAJECTORY_ID]: r for r in env.roots()}
    assert sorted(roots) == sorted(t.id for t in traces)
    by_span = {s.context.span_id: s for s in env.spans()}
    (batch_span,) = env.spans(A.SPAN_BATCH)
    for root in roots.values():
        assert root.parent is None
        assert [link.context.span_id for link in root.links] == [batch_span.context.span_id]
        assert root.attributes[A.BATCH_ID] == batch.batch_id
    for span in env.spans():
        if span is batch_span or span.context.span_id in {
            r.context.span_id for r in roots.values()
        }:
            continue
        top = span
        while top.parent is not None:
            top = by_span[top.parent.span_id]
        assert top in roots.values(), span.name
    assert batch.analysis is not None and batch.analysis.trajectories == len(TURNS)


def test_spans_carry_tokens_finish_reasons_tools_and_rewards(kit, env):
    inst = instrumented(env)
    try:
        traces, _, _ = asyncio.run(run_rollouts(kit, env, turns=(3,)))
    finally:
        inst.uninstrument()
    (trace,) = traces
    gens = env.spans(A.SPAN_GENERATE)
    assert [g.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] for g in gens] == [
        ("tool_calls",),
        ("tool_calls",),
        ("stop",),
    ]
    for g in gens:
        assert g.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 11
        assert g.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 3
        assert g.attributes[A.GEN_AI_REQUEST_MODEL] == "stand-in"
    steps = env.spans(A.SPAN_ENV_STEP)
    tools = sorted(s.attributes[A.GEN_AI_TOOL_NAME] for s in steps)
    # launch and exit are the harness's own; the two stretches after a tool call, the tool's
    assert tools == ["_verifiers", "_verifiers", "wait", "wait"]
    (root,) = env.roots()
    assert root.attributes[A.REWARD] == 1.0
    assert root.attributes[A.REWARD_PREFIX + "correct"] == 1.0
    assert root.attributes[A.STATUS] == A.STATUS_OK
    assert root.attributes["verifiers.stop_condition"] == "agent_completed"
    assert root.attributes[A.ENV_CLASS] == "TimedTask"
    assert root.attributes[A.INSTANCE_ID] == "t3"
    assert root.start_time == round(trace.timing.boot.start * 1e9)
    phases = [s.attributes.get(A.PHASE) for s in env.spans() if s is not root]
    assert phases.count("finalize") == phases.count("scoring") == 1
    assert phases.count(A.PHASE_ENV_SETUP) == 2  # boot, setup
    assert phases.count(A.PHASE_ENV_TEARDOWN) == 1


def test_histograms_and_summary_keys_sit_beside_verifiers_own(kit, env):
    inst = instrumented(env)
    try:
        traces, _, batch = asyncio.run(run_rollouts(kit, env))
    finally:
        inst.uninstrument()
    (point,) = env.histogram_points(A.METRIC_DURATION)
    assert point.count == len(TURNS)
    phases = {p.attributes[A.PHASE] for p in env.histogram_points(A.METRIC_PHASE_DURATION)}
    assert phases == set(A.ALL_BANDS)
    summary = {**summarize(batch.breakdowns), **batch.analysis.summary()}
    for key in ("completion", "llm", "env", "env_setup", "env_teardown", "other"):
        for stat in ("mean", "p90", "max"):
            assert f"generate/trajectory_time_{key}_{stat}" in summary
    assert "generate/batch_drain_time" in summary
    # verifiers' own per-run aggregates (prime_runs.metrics.from_episodes): avg_reward
    mean_model = sum(t.timing.agent.model.duration for t in traces) / len(traces)
    assert abs(summary["generate/trajectory_time_llm_mean"] - mean_model) <= TOLERANCE_S


def test_the_generate_spans_traceparent_reaches_the_server(kit, env):
    inst = instrumented(env)
    try:
        _, server, _ = asyncio.run(run_rollouts(kit, env, turns=(2, 3)))
    finally:
        inst.uninstrument()
    sent = sorted(h["traceparent"] for h in server.headers)
    ours = sorted(
        f"00-{g.context.trace_id:032x}-{g.context.span_id:016x}-"
        for g in env.spans(A.SPAN_GENERATE)
    )
    assert len(sent) == len(ours) == 5
    assert [s[:-2] for s in sent] == ours


def test_vf_eval_fan_out_is_a_batch(kit, env):
    from verifiers.v1.cli.eval import runner

    inst = instrumented(env)

    async def main():
        async with kit.Server(GENERATE_S) as server:
            agent = agent_for(kit, server.url)
            return await runner.gather_rollouts(agent.run(task(kit, n)) for n in (1, 2))

    try:
        traces = asyncio.run(main())
    finally:
        inst.uninstrument()
    (batch_span,) = env.spans(A.SPAN_BATCH)
    assert batch_span.attributes["verifiers.batch.source"] == "vf-eval"
    assert batch_span.attributes["rollout.batch.trajectories"] == 2
    assert {r.links[0].context.span_id for r in env.roots()} == {batch_span.context.span_id}
    assert len(traces) == 2


def test_vf_eval_declares_its_max_concurrent_as_the_batch_capacity(kit, env):
    import contextlib

    from verifiers.v1.cli.eval import runner
    from verifiers.v1.clients import EvalClientConfig
    from verifiers.v1.types import SamplingConfig

    class Serving:  # the env's serving block, as the runner enters it
        @contextlib.asynccontextmanager
        async def serving(self):
            yield

    inst = instrumented(env)

    async def main(max_concurrent):
        async with kit.Server(GENERATE_S) as server:
            agent = agent_for(kit, server.url)
            client = EvalClientConfig(base_url=server.url, api_key_var=KEY_ENV)
            config = SimpleNamespace(client=client, model="stand-in", sampling=SamplingConfig(),
                                     max_concurrent=max_concurrent)  # fmt: skip
            async with runner._in_process(Serving(), config, None, None):
                return await runner.gather_rollouts(agent.run(task(kit, n)) for n in (1, 2))

    try:
        asyncio.run(main(3))
        asyncio.run(main(None))  # unbounded: the peak in flight
    finally:
        inst.uninstrument()
    declared, peak = env.spans(A.SPAN_BATCH)
    assert declared.attributes[A.BATCH_CONCURRENCY] == 3
    assert declared.attributes["rollout.batch.capacity"] == 3
    assert A.BATCH_CONCURRENCY not in peak.attributes
    assert peak.attributes["rollout.batch.capacity"] == 2


def test_uninstrument_restores_verifiers(kit, env):
    from verifiers.v1.cli.eval import runner
    from verifiers.v1.clients.eval import EvalClient
    from verifiers.v1.interception.server import InterceptionServer
    from verifiers.v1.rollout import Rollout
    from verifiers.v1.trace import Trace

    targets = [(Rollout, n) for n in ("open", "step", "close", "abort")] + [
        (Trace, "notify"), (InterceptionServer, "record_call"),
        (EvalClient, "relay"), (EvalClient, "get_response"),
    ]  # fmt: skip
    before = [cls.__dict__[name] for cls, name in targets]
    gather, serving = runner.gather_rollouts, runner._in_process
    inst = instrumented(env)
    assert Rollout.__dict__["open"] is not before[0]
    inst.instrument()  # idempotent
    inst.uninstrument()
    assert [cls.__dict__[name] for cls, name in targets] == before
    assert runner.gather_rollouts is gather and runner._in_process is serving
    asyncio.run(run_rollouts(kit, env, turns=(1,), batch=False))
    assert env.roots() == []


def test_uninstrumenting_mid_rollout_ends_its_trajectory(kit, env):
    inst = instrumented(env)

    class Uninstrumenting(kit.Task):
        async def setup(self, trace, runtime):
            inst.uninstrument()  # mid-setup: the rest of the rollout is not traced

    async def main():
        async with kit.Server(GENERATE_S) as server:
            agent = agent_for(kit, server.url)
            return await agent.run(Uninstrumenting(task(kit, 2).data))

    trace = asyncio.run(main())
    assert trace.ok
    (root,) = env.roots()
    assert root.attributes[A.STATUS] == "aborted"
    assert root.start_time == round(trace.timing.boot.start * 1e9)
    assert env.spans(A.SPAN_GENERATE) == []
    boot, setup = sorted(env.spans(A.SPAN_ENV_SETUP), key=lambda s: s.start_time)
    assert boot.attributes["verifiers.stage"] == "boot"
    assert setup.end_time == root.end_time  # still running: it ends with the root
    assert env.spans(A.SPAN_ENV_TEARDOWN) == []


def test_instrumenting_twice_traces_each_rollout_once(kit, env):
    inst = instrumented(env)
    inst.instrument(tracer_provider=env.tracer_provider, processor=env.processor)
    try:
        asyncio.run(run_rollouts(kit, env, turns=(2,), batch=False))
    finally:
        inst.uninstrument()
    assert len(env.roots()) == 1
    assert len(env.spans(A.SPAN_GENERATE)) == 2


def test_suppressed_instrumentation_records_nothing(kit, env):
    inst = instrumented(env)
    try:
        with suppress_instrumentation():
            traces, server, _ = asyncio.run(run_rollouts(kit, env, turns=(2,), batch=False))
    finally:
        inst.uninstrument()
    assert traces[0].ok
    assert env.spans() == []
    assert all("traceparent" not in h for h in server.headers)


def test_without_verifiers_the_error_names_the_install_line(monkeypatch):
    pytest.importorskip("wrapt", reason="the verifiers extra's wrapt is not installed")
    pytest.importorskip("opentelemetry.instrumentation", reason="no opentelemetry-instrumentation")
    from otel_rollout.integrations.verifiers import VerifiersInstrumentor

    monkeypatch.setitem(sys.modules, "verifiers.v1.rollout", None)
    with pytest.raises(ImportError, match=r"pip install 'otel-rollout\[verifiers\]'"):
        VerifiersInstrumentor().instrument(skip_dep_check=True)


def test_the_shipped_bash_harness_in_a_subprocess_equals_verifiers_own_timers(kit, env):
    """verifiers' own bash harness, run by its subprocess runtime as a ``uv`` script:
    the model's tool calls run ``sleep`` in that subprocess."""
    import shutil

    from verifiers.v1.clients import EvalClientConfig
    from verifiers.v1.configs.agent import AgentConfig
    from verifiers.v1.runtimes.subprocess import SubprocessConfig
    from verifiers.v1.utils.loaders import harness_config_type

    if shutil.which("uv") is None:
        pytest.skip("no `uv` on PATH: verifiers' subprocess runtime runs its harness with it")
    sleep_s = 0.05

    async def main():
        arguments = f'{{"command": "sleep {sleep_s}"}}'
        async with kit.Server(GENERATE_S, tool="bash", arguments=arguments) as server:
            agent = kit.vf.Agent(
                AgentConfig(
                    model="stand-in",
                    harness=harness_config_type("bash")(id="bash"),
                    runtime=SubprocessConfig(),
                    client=EvalClientConfig(base_url=server.url, api_key_var=KEY_ENV),
                )
            )
            return await agent.run(task(kit, 3)), server

    worst = None
    for _ in range(ATTEMPTS):
        env.collector.drain()
        inst = instrumented(env)
        try:
            trace, server = asyncio.run(main())
        finally:
            inst.uninstrument()
        assert trace.ok, trace.errors
        (bd,) = [b for b in env.breakdowns if b.trajectory_id == trace.id]
        devs = deviations(trace, bd)
        worst = max(abs(v) for v in devs.values())
        if worst <= TOLERANCE_S:
            break
    assert worst <= TOLERANCE_S, devs
    assert bd.turns == 3
    tool_steps = [
        s for s in env.spans(A.SPAN_ENV_STEP)
        if s.attributes[A.GEN_AI_TOOL_NAME] == "bash"
        and s.context.trace_id == int(bd.trace_id, 16)
    ]  # fmt: skip
    assert len(tool_steps) >= 2  # the stretches after the two tool calls (and launch, exit)
    gens = [g for g in env.spans(A.SPAN_GENERATE) if g.context.trace_id == int(bd.trace_id, 16)]
    sent = sorted(h["traceparent"][:-3] for h in server.headers)
    assert sent == sorted(f"00-{g.context.trace_id:032x}-{g.context.span_id:016x}" for g in gens)


def test_a_configured_pipeline_finishes_the_roots_through_its_tracer(kit, tmp_path, monkeypatch):
    """``instrument(rollout_tracer=rollout.tracer)`` of a ``configure(local=True)``
    pipeline: its breakdown processor finishes the roots, verifiers' clock times them."""
    from otel_rollout import configure
    from otel_rollout.integrations.verifiers import VerifiersInstrumentor

    monkeypatch.setenv(KEY_ENV, "stand-in")
    got = []
    rollout = configure(
        local=True,
        traces_exporter="none",
        metrics_exporter="none",
        output_dir=tmp_path,
        on_breakdown=got.append,
        summary_stream=None,
    )
    inst = VerifiersInstrumentor()
    inst.instrument(rollout_tracer=rollout.tracer)

    async def main():
        async with kit.Server(GENERATE_S) as server:
            return await agent_for(kit, server.url).run(task(kit, 2))

    try:
        trace = asyncio.run(main())
    finally:
        inst.uninstrument()
        rollout.shutdown()
    (bd,) = got
    assert bd.trajectory_id == trace.id
    assert abs(bd.band("llm") - trace.timing.agent.model.duration) <= TOLERANCE_S
    assert bd.start_time_ns == round(trace.timing.boot.start * 1e9)
