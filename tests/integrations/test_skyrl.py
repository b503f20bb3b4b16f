"""SkyRLInstrumentor on real skyrl-gym envs, against a generator module of SkyRL's shape.

The published ``skyrl`` needs Python >= 3.12 and a CUDA torch, so the module here mirrors
``skyrl.train.generators.skyrl_gym_generator`` as it is on SkyRL's main branch (0.3.0): the
same ``agent_loop`` signature and call pattern (``skyrl_gym.make`` then ``env.init``, turns of
``inference_engine_client.generate(engine_input, model=...)`` and ``env.step``, ``env.close``,
``finish_session`` in ``finally``, ``e2e_time`` from ``time.monotonic()``), env methods run
through ``_run_in_executor_if_available`` on a real thread pool, and a remote client whose
``_post(url, json, headers)`` makes real HTTP requests to a server in the test.
That module is no installed ``skyrl`` distribution, so these tests instrument with
``skip_dep_check=True`` (as ``opentelemetry-instrument`` does after its own check).

The last tests run against the published ``skyrl`` 0.4.0 where it imports (Python >= 3.12):
a real ``SkyRLGymGenerator`` from SkyRL's config classes, a tokenizer built in the test, and
either a stand-in inference engine or SkyRL's real ``RemoteInferenceClient`` talking HTTP to
a server in the test.
"""

from __future__ import annotations

import asyncio
import copy
import http.client
import importlib.metadata
import json
import pickle
import sys
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple
from uuid import uuid4

import pytest
import skyrl_gym
from _skyrl import VLLMLikeServer, tiny_tokenizer

from otel_rollout._base.clock import now_ns as span_clock  # the clock spans are timed by
from otel_rollout.testing import make_test_env

MOD = "skyrl.train.generators.skyrl_gym_generator"
EXTRAS = {"reward_spec": {"ground_truth": "42"}}


class TrajectoryID(NamedTuple):
    instance_id: str
    repetition_id: int


class EngineServer:
    """A real HTTP server standing in for vLLM: records the headers of every request."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        rx = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                rx.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                turn = body.get("turn", 0)
                answer = "#### 42" if turn >= body.get("answer_at", 0) else "#### 41"
                data = json.dumps({"text": answer, "ids": [1, 2, 3], "stop": "stop"}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class RemoteInferenceClient:
    """SkyRL's remote client shape: ``generate`` fans out to ``_post(url, json, headers)``."""

    def __init__(self, port: int, answer_at: int = 1, fail_at: int | None = None) -> None:
        self.port = port
        self.answer_at = answer_at
        self.fail_at = fail_at
        self.turns: dict[str, int] = {}

    def _request(self, url: str, body: dict, headers: dict) -> dict:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("POST", url, json.dumps(body), headers)
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    async def _post(self, url: str, json: dict, headers: dict | None = None) -> Any:
        return await asyncio.to_thread(self._request, url, json, dict(headers or {}))

    async def generate(self, input_batch: dict, model: str | None = None) -> dict:
        session = input_batch["session_ids"][0]
        turn = self.turns.get(session, 0)
        self.turns[session] = turn + 1
        if self.fail_at is not None and turn >= self.fail_at:
            raise ConnectionError("inference server went away")

        async def single(ids: list[int]) -> dict:
            headers = {"Content-Type": "application/json", "X-Session-ID": session}
            body = {"prompt_token_ids": ids, "turn": turn, "answer_at": self.answer_at}
            return await self._post("/inference/v1/generate", body, headers)  # positional

        outs = await asyncio.gather(*(single(ids) for ids in input_batch["prompt_token_ids"]))
        return {
            "responses": [o["text"] for o in outs],
            "response_ids": [o["ids"] for o in outs],
            "stop_reasons": [o["stop"] for o in outs],
        }

    async def finish_session(self, session_id: str) -> None:
        await self._post("/sessions/finish", {"session_id": session_id})


class AgentLoopOutput:
    e2e_time: float | None = None
    reward: float = 0.0


class SkyRLGymGenerator:
    def __init__(self, client: RemoteInferenceClient, max_env_workers: int = 2) -> None:
        self.inference_engine_client = client
        self.policy_model_name = "qwen3-test"
        self.max_turns = 3
        self.env_executor = ThreadPoolExecutor(max_env_workers) if max_env_workers else None

    async def _run_in_executor_if_available(self, func, *args, **kwargs):
        if (executor := self.env_executor) is not None:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(executor, func, *args, **kwargs)
        return func(*args, **kwargs)

    async def agent_loop(
        self,
        prompt,
        env_class,
        env_extras,
        max_tokens,
        max_input_length,
        sampling_params=None,
        trajectory_id=None,
        cache_salt=None,
    ):
        agent_loop_start_time = time.monotonic()
        start_ns = span_clock()  # the same instant on the spans' clock, for the test
        session_id = (
            f"{trajectory_id.instance_id}_{trajectory_id.repetition_id}"
            if trajectory_id is not None
            else uuid4().hex
        )
        try:
            env_extras["max_turns"] = self.max_turns
            skyrl_gym_mod = sys.modules[MOD].skyrl_gym  # the module global, as SkyRL's code
            env = skyrl_gym_mod.make(env_class, env_config={}, extras=env_extras)
            chat_history = copy.deepcopy(prompt)
            chat_history, _ = await self._run_in_executor_if_available(env.init, chat_history)
            done, reward = False, 0.0
            while not done:
                engine_input = {"prompt_token_ids": [[1] * 5], "session_ids": [session_id],
                                "sampling_params": sampling_params}  # fmt: skip
                engine_output = await self.inference_engine_client.generate(
                    engine_input, model=self.policy_model_name
                )
                output = engine_output["responses"][0]
                step = await self._run_in_executor_if_available(env.step, output)
                reward, done = step["reward"], step["done"]
            env.get_metrics()
            await self._run_in_executor_if_available(env.close)
            out = AgentLoopOutput()
            out.reward = reward
            out.e2e_time = time.monotonic() - agent_loop_start_time
            out.marks = (start_ns, span_clock())
            return out
        finally:
            await self.inference_engine_client.finish_session(session_id)


@pytest.fixture
def skyrl_module():
    names = ["skyrl", "skyrl.train", "skyrl.train.generators", MOD]
    saved = {n: sys.modules.get(n) for n in names}
    for n in names:
        sys.modules[n] = types.ModuleType(n)
    sys.modules[MOD].skyrl_gym = skyrl_gym
    sys.modules[MOD].SkyRLGymGenerator = SkyRLGymGenerator
    yield sys.modules[MOD]
    for n, m in saved.items():
        if m is None:
            sys.modules.pop(n, None)
        else:
            sys.modules[n] = m


@pytest.fixture
def server():
    s = EngineServer()
    yield s
    s.close()


@pytest.fixture
def instrumented(skyrl_module):
    from otel_rollout.integrations.skyrl import SkyRLInstrumentor

    env = make_test_env()
    inst = SkyRLInstrumentor()
    inst.instrument(
        skip_dep_check=True,
        tracer_provider=env.tracer_provider,
        meter_provider=env.meter_provider,
        processor=env.processor,
        logger_provider=env.logger_provider,
    )
    inst.instrument(skip_dep_check=True)  # idempotent: a second call changes nothing
    yield env
    inst.uninstrument()


def loop_once(gen, instance_id, repetition_id=0):
    return gen.agent_loop(
        [{"role": "user", "content": "6*7?"}],
        "gsm8k_multi_turn",
        copy.deepcopy(EXTRAS),
        16,
        64,
        trajectory_id=TrajectoryID(instance_id, repetition_id),
    )


def by_name(spans):
    out: dict[str, list] = {}
    for s in spans:
        out.setdefault(s.name, []).append(s)
    return out


def test_sampling_parameters_are_genai_request_attributes(instrumented, server):
    env = instrumented
    gen = SkyRLGymGenerator(RemoteInferenceClient(server.port, answer_at=0))
    params = {"max_generate_length": 64, "temperature": 0.7, "top_p": 0.9, "top_k": -1}
    asyncio.run(
        gen.agent_loop([{"role": "user", "content": "6*7?"}], "gsm8k_multi_turn",
                       copy.deepcopy(EXTRAS), 16, 64, sampling_params=params,
                       trajectory_id=TrajectoryID("q9", 0))
    )  # fmt: skip
    (g, *_) = [s.attributes for s in env.spans() if s.attributes.get("rollout.phase") == "llm"]
    assert g["gen_ai.request.max_tokens"] == 64 and g["gen_ai.request.temperature"] == 0.7
    assert g["gen_ai.request.top_p"] == 0.9 and g["gen_ai.request.top_k"] == -1


def test_one_trajectory_tree_parented_across_executor_threads(instrumented, server):
    env = instrumented
    gen = SkyRLGymGenerator(RemoteInferenceClient(server.port, answer_at=1))
    result = asyncio.run(loop_once(gen, "q1", 3))
    assert result.reward == 1.0
    assert gen.env_executor._threads  # the env calls ran in the pool
    (root,) = env.roots()
    a = root.attributes
    assert a["rollout.trajectory.instance_id"] == "q1"
    assert a["rollout.trajectory.repetition_id"] == 3
    assert a["rollout.env.class"] == "gsm8k_multi_turn"
    assert a["gen_ai.request.model"] == "qwen3-test"
    assert a["rollout.trajectory.status"] == "ok"
    kids = env.children(root)
    assert len(kids) == len(env.spans()) - 1  # every phase is a direct child of the root
    names = by_name(kids)
    # two turns: the first answer is wrong, the second right; make() then init() in the
    # pool: an env_setup span each, with the wait for a thread between them
    assert {k: len(v) for k, v in names.items()} == {
        "env_setup": 2, "env_queue": 4, "generate": 2, "env_step": 2, "env_teardown": 1,
        "finish_session": 1,
    }  # fmt: skip
    make, init = sorted(names["env_setup"], key=lambda s: s.start_time)
    queues = sorted(names["env_queue"], key=lambda s: s.start_time)
    first_generate = min(s.start_time for s in names["generate"])
    assert make.end_time == queues[0].start_time and queues[0].end_time == init.start_time
    assert init.end_time <= first_generate  # make + init, then the first turn
    calls = sorted(names["env_step"] + names["env_teardown"], key=lambda s: s.start_time)
    assert [q.end_time for q in queues[1:]] == [c.start_time for c in calls]
    g = names["generate"][0].attributes
    assert g["rollout.phase"] == "llm" and g["gen_ai.usage.input_tokens"] == 5
    assert g["gen_ai.operation.name"] == "text_completion"  # token ids in, token ids out
    assert g["gen_ai.usage.output_tokens"] == 3
    assert g["gen_ai.response.finish_reasons"] == ("stop",)
    # env.step's reward on each step span: wrong, then right
    steps = sorted(names["env_step"], key=lambda s: s.start_time)
    first, second = (s.attributes["rollout.step.reward"] for s in steps)
    assert first < 1.0 and second == 1.0 == result.reward
    # and each an evaluation event: a log record in the step span's context
    records = env.events("gen_ai.evaluation.result")
    assert [r.span_id for r in records] == [s.context.span_id for s in steps]
    (b,) = env.breakdowns
    assert b.turns == 2 and b.env_steps == 2 and b.band("env_setup") > 0
    # SkyRL's e2e_time and the breakdown's e2e measure the same interval: the root less
    # the finish_session call in agent_loop's finally, a phase outside the accounted time.
    (finish,) = names["finish_session"]
    skyrl_start, skyrl_end = result.marks
    assert root.start_time <= skyrl_start and skyrl_end <= finish.start_time
    assert b.nanos["finish_session"] == finish.end_time - finish.start_time
    assert b.nanos["e2e"] == root.end_time - root.start_time - b.nanos["finish_session"]


def test_generate_requests_carry_the_generate_spans_traceparent(instrumented, server):
    env = instrumented
    gen = SkyRLGymGenerator(RemoteInferenceClient(server.port, answer_at=2))
    asyncio.run(loop_once(gen, "q7"))
    generates = [s for s in env.spans() if s.name == "generate"]
    sent = [h for path, h in server.requests if path == "/inference/v1/generate"]
    assert len(sent) == len(generates) == 3
    expected = {(f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in generates}
    parsed = [h["traceparent"].split("-") for h in sent]
    assert {(p[1], p[2]) for p in parsed} == expected
    assert all(p[0] == "00" and int(p[3], 16) & 1 for p in parsed)  # W3C, sampled
    assert all(h["x-session-id"] == "q7_0" for h in sent)  # the caller's headers kept


def test_concurrent_trajectories_stay_separate_on_a_shared_pool(instrumented, server):
    env = instrumented
    gen = SkyRLGymGenerator(RemoteInferenceClient(server.port, answer_at=1), max_env_workers=2)

    async def batch():
        return await asyncio.gather(*(loop_once(gen, f"p{i}", i % 2) for i in range(8)))

    results = asyncio.run(batch())
    assert all(r.reward == 1.0 for r in results)
    roots = env.roots()
    assert len(roots) == 8 and len({r.context.trace_id for r in roots}) == 8
    for root in roots:
        kids = env.children(root)
        assert sorted(s.name for s in kids) == sorted(
            ["env_setup", "env_setup", "generate", "generate", "env_step", "env_step",
             "env_teardown", "finish_session", "env_queue", "env_queue", "env_queue",
             "env_queue"]
        )  # fmt: skip
        assert all(s.context.trace_id == root.context.trace_id for s in kids)
    assert len(env.spans()) == 8 * 13


def test_inline_envs_without_an_executor(instrumented, server):
    env = instrumented
    gen = SkyRLGymGenerator(RemoteInferenceClient(server.port, answer_at=0), max_env_workers=0)
    asyncio.run(loop_once(gen, "inline"))
    (root,) = env.roots()
    assert sorted(s.name for s in env.children(root)) == [
        "env_setup", "env_step", "env_teardown", "finish_session", "generate",
    ]  # fmt: skip


def test_engine_failure_marks_the_trajectory_and_reraises(instrumented, server):
    env = instrumented
    gen = SkyRLGymGenerator(RemoteInferenceClient(server.port, answer_at=5, fail_at=1))
    with pytest.raises(ConnectionError, match="went away"):
        asyncio.run(loop_once(gen, "bad"))
    (root,) = env.roots()
    assert root.attributes["rollout.trajectory.status"] == "error"
    failed = [
        s for s in env.spans() if s.name == "generate" and s.status.status_code.name == "ERROR"
    ]
    assert len(failed) == 1 and failed[0].attributes["error.type"] == "ConnectionError"
    assert len(env.breakdowns) == 1 and env.breakdowns[0].status == "error"


def test_unknown_env_class_ends_env_setup_with_the_error(instrumented, server):
    env = instrumented
    gen = SkyRLGymGenerator(RemoteInferenceClient(server.port))
    with pytest.raises(Exception) as info:
        asyncio.run(
            gen.agent_loop([], "no_such_env", {}, 16, 64, trajectory_id=TrajectoryID("x", 0))
        )
    (setup,) = [s for s in env.spans() if s.name == "env_setup"]
    assert setup.status.status_code.name == "ERROR"
    assert setup.attributes["error.type"].endswith(type(info.value).__name__)
    (root,) = env.roots()
    assert root.attributes["rollout.trajectory.status"] == "error"


def test_uninstrument_restores_skyrl(skyrl_module, server):
    from otel_rollout.integrations.skyrl import SkyRLInstrumentor

    env = make_test_env()
    originals = {
        (cls, name): cls.__dict__[name]
        for cls, name in [
            (SkyRLGymGenerator, "agent_loop"),
            (RemoteInferenceClient, "generate"),
            (RemoteInferenceClient, "finish_session"),
            (RemoteInferenceClient, "_post"),
        ]
    }
    inst = SkyRLInstrumentor()
    inst.instrument(
        skip_dep_check=True,
        tracer_provider=env.tracer_provider,
        meter_provider=env.meter_provider,
        processor=env.processor,
    )
    try:  # the instrumentor is a singleton: a failure here must not leak into other tests
        assert skyrl_module.skyrl_gym is not skyrl_gym
        client = RemoteInferenceClient(server.port, answer_at=0)
        asyncio.run(loop_once(SkyRLGymGenerator(client), "during"))
        assert len(env.roots()) == 1
        # wrapped on the classes, nothing on the instance: the client still pickles
        assert all(cls.__dict__[name] is not fn for (cls, name), fn in originals.items())
        assert set(vars(client)) == {"port", "answer_at", "fail_at", "turns"}
        assert pickle.loads(pickle.dumps(client)).port == server.port
    finally:
        inst.uninstrument()
    inst.uninstrument()
    assert all(cls.__dict__[name] is fn for (cls, name), fn in originals.items())
    assert skyrl_module.skyrl_gym is skyrl_gym
    n = len(env.spans())
    gen = SkyRLGymGenerator(RemoteInferenceClient(server.port, answer_at=0))
    asyncio.run(loop_once(gen, "after"))
    assert len(env.spans()) == n  # no new spans


def test_registered_as_an_opentelemetry_instrumentor():
    from otel_rollout.integrations.skyrl import SkyRLInstrumentor

    eps = importlib.metadata.entry_points(group="opentelemetry_instrumentor")
    (ep,) = [e for e in eps if e.name == "skyrl"]
    assert ep.load() is SkyRLInstrumentor


def test_real_skyrl_generator_has_the_shape_the_instrumentor_wraps():
    mod = pytest.importorskip(MOD, reason=SKIP_REAL)
    import inspect

    from otel_rollout.integrations.skyrl import SkyRLInstrumentor

    cls = mod.SkyRLGymGenerator
    params = inspect.signature(cls.agent_loop).parameters
    assert {"prompt", "env_class", "env_extras", "trajectory_id"} <= set(params)
    assert mod.skyrl_gym is skyrl_gym and hasattr(cls, "_run_in_executor_if_available")
    env = make_test_env()
    inst = SkyRLInstrumentor()
    inst.instrument(skip_dep_check=True, tracer_provider=env.tracer_provider)
    try:
        assert hasattr(cls.__dict__["agent_loop"], "__wrapped__")
    finally:
        inst.uninstrument()
    assert not hasattr(cls.__dict__["agent_loop"], "__wrapped__")


# The published skyrl (0.4.0: Python >= 3.12) itself: a real SkyRLGymGenerator built from
# SkyRL's own config classes, a byte-level tokenizer built here (no download), real
# skyrl-gym envs in SkyRL's env thread pool. The only stand-in is the inference engine.
SKIP_REAL = "skyrl cannot be imported here (the published skyrl 0.4.0 needs Python >= 3.12)"
REMOTE_MOD = "skyrl.backends.skyrl_train.inference_servers.remote_inference_client"


class FakeInferenceEngine:
    """Stands in for the GPU inference engine: SkyRL's InferenceEngineOutput, per session."""

    def __init__(self, tokenizer, answer_at: dict[str, int], finish_s: float = 0.005) -> None:
        self.tok = tokenizer
        self.answer_at = answer_at  # instance_id -> the turn that answers "#### 42"
        self.finish_s = finish_s
        self.turns: dict[str, int] = {}
        self.calls: list[tuple[str, int, str | None]] = []  # session, prompt tokens, model
        self.finished: list[str] = []

    async def generate(self, input_batch: dict, model: str | None = None) -> dict:
        (session,) = input_batch["session_ids"]
        (prompt_ids,) = input_batch["prompt_token_ids"]
        turn = self.turns[session] = self.turns.get(session, 0) + 1
        self.calls.append((session, len(prompt_ids), model))
        instance = session.rsplit("_", 1)[0]
        text = "#### 42" if turn >= self.answer_at[instance] else "#### 41"
        ids = [*self.tok.encode(text, add_special_tokens=False), self.tok.eos_token_id]
        await asyncio.sleep(0.002)
        return {
            "responses": [text],
            "response_ids": [ids],
            "stop_reasons": ["stop"],
            "response_logprobs": [[-0.25] * len(ids)],
        }

    async def finish_session(self, session_id: str) -> None:
        await asyncio.sleep(self.finish_s)  # outside SkyRL's e2e_time: must be subtracted
        self.finished.append(session_id)


def real_generator(mod, client, tokenizer, max_env_workers: int = 2):
    from skyrl.train.config import GeneratorConfig, SkyRLGymConfig

    return mod.SkyRLGymGenerator(
        GeneratorConfig(max_turns=3),
        SkyRLGymConfig(max_env_workers=max_env_workers),
        client,
        tokenizer,
        policy_model_name="tiny-policy",
    )


def real_loop(mod, gen, instance_id: str, repetition_id: int = 0):
    from skyrl.train.generators.base import TrajectoryID

    return gen.agent_loop(
        [{"role": "user", "content": "What is 6*7?"}],
        "gsm8k_multi_turn",
        copy.deepcopy(EXTRAS),
        16,
        1024,
        trajectory_id=TrajectoryID(instance_id=instance_id, repetition_id=repetition_id),
    )


def test_real_skyrl_generator_agent_loop(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    mod = pytest.importorskip(MOD, reason=SKIP_REAL)
    remote = pytest.importorskip(REMOTE_MOD, reason=SKIP_REAL)
    from otel_rollout.integrations.skyrl import SkyRLInstrumentor

    cls = mod.SkyRLGymGenerator
    original = cls.__dict__["agent_loop"]
    original_post = remote.RemoteGenerateClient.__dict__["_post"]
    assert mod.skyrl_gym is skyrl_gym  # the module global agent_loop calls make() on
    tok = tiny_tokenizer()
    turns = {"q1": 1, "q2": 2, "q3": 3}  # each answers right on that turn
    engine = FakeInferenceEngine(tok, turns)
    gen = real_generator(mod, engine, tok)

    env = make_test_env()
    inst = SkyRLInstrumentor()
    inst.instrument(
        skip_dep_check=True,
        tracer_provider=env.tracer_provider,
        meter_provider=env.meter_provider,
        processor=env.processor,
    )
    try:
        assert mod.skyrl_gym is not skyrl_gym

        async def batch():
            loops = (real_loop(mod, gen, i, rep) for rep, i in enumerate(turns))
            return await asyncio.gather(*loops)

        outputs = dict(zip(turns, asyncio.run(batch()), strict=True))
    finally:
        inst.uninstrument()

    assert gen.env_executor is not None and gen.env_executor._threads  # SkyRL's env pool ran
    for instance, out in outputs.items():
        assert out.env_metrics == {"steps": turns[instance]} and out.stop_reason == "stop"
        assert out.reward[-1] == 1.0 and out.e2e_time > 0
    assert sorted(engine.finished) == ["q1_0", "q2_1", "q3_2"]
    assert {m for _, _, m in engine.calls} == {"tiny-policy"}

    roots = env.roots()
    assert len(roots) == 3 and len({r.context.trace_id for r in roots}) == 3
    spans_per_root = 0
    for root in roots:
        a = root.attributes
        instance = a["rollout.trajectory.instance_id"]
        n = turns[instance]
        assert a["rollout.trajectory.repetition_id"] == list(turns).index(instance)
        assert a["rollout.env.class"] == "gsm8k_multi_turn"
        assert a["gen_ai.request.model"] == "tiny-policy"
        assert a["rollout.trajectory.status"] == "ok"
        in_trace = [s for s in env.spans() if s.context.trace_id == root.context.trace_id]
        kids = env.children(root)
        assert len(kids) == len(in_trace) - 1  # every other span of the trace: a direct child
        names = by_name(kids)
        assert {k: len(v) for k, v in names.items()} == {
            "env_setup": 2, "env_queue": n + 2, "generate": n, "env_step": n, "env_teardown": 1,
            "finish_session": 1,
        }  # fmt: skip
        spans_per_root += len(kids) + 1
        assert max(s.end_time for s in names["env_setup"]) <= min(
            s.start_time for s in names["generate"]
        )
        prompt_lens = [
            p
            for s, p, _ in engine.calls
            if s == f"{instance}_{a['rollout.trajectory.repetition_id']}"
        ]
        gens = sorted(names["generate"], key=lambda s: s.start_time)
        assert [g.attributes["gen_ai.usage.input_tokens"] for g in gens] == prompt_lens
        assert all(g.attributes["gen_ai.usage.output_tokens"] == 8 for g in gens)  # "#### 4x"+EOS
        (finish,) = names["finish_session"]
        root_s = (root.end_time - root.start_time) / 1e9
        finish_s = (finish.end_time - finish.start_time) / 1e9
        e2e = outputs[instance].e2e_time
        assert finish_s >= engine.finish_s
        # the breakdown's e2e is the root less finish_session; it contains SkyRL's e2e_time
        # (tight comparisons, rerun when descheduled: tests/integrations/test_skyrl_parity.py)
        (b,) = [b for b in env.breakdowns if b.trace_id == f"{root.context.trace_id:032x}"]
        assert b.e2e == pytest.approx(root_s - finish_s, abs=1e-9)
        assert e2e - 1e-4 <= b.e2e < e2e + engine.finish_s, (instance, b.e2e, e2e)
    assert len(env.spans()) == spans_per_root

    # uninstrument restores SkyRL: agent_loop, skyrl_gym, RemoteGenerateClient._post
    assert cls.__dict__["agent_loop"] is original
    assert mod.skyrl_gym is skyrl_gym
    assert remote.RemoteGenerateClient.__dict__["_post"] is original_post
    before = len(env.spans())
    asyncio.run(real_loop(mod, gen, "q1", 9))
    assert len(env.spans()) == before


def test_real_remote_inference_client_generate_requests_carry_traceparent(monkeypatch):
    # skyrl 0.4's RemoteInferenceClient.generate posts through RemoteGenerateClient._post,
    # not its own _post (as 0.3 did): the traceparent must reach that request too.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    mod = pytest.importorskip(MOD, reason=SKIP_REAL)
    remote = pytest.importorskip(REMOTE_MOD, reason=SKIP_REAL)
    from otel_rollout.integrations.skyrl import SkyRLInstrumentor

    tok = tiny_tokenizer()
    server = VLLMLikeServer(tok)
    client = remote.RemoteInferenceClient(
        proxy_url=server.url, server_urls=[server.url], data_parallel_size=1,
        model_name="tiny-policy", tokenizer=tok,
    )  # fmt: skip
    gen = real_generator(mod, client, tok)
    env = make_test_env()
    inst = SkyRLInstrumentor()
    inst.instrument(
        skip_dep_check=True,
        tracer_provider=env.tracer_provider,
        meter_provider=env.meter_provider,
        processor=env.processor,
    )
    try:

        async def batch():
            return await asyncio.gather(real_loop(mod, gen, "r1"), real_loop(mod, gen, "r2"))

        outs = asyncio.run(batch())
        # SkyRL ships its client to other processes: instrumented, it still pickles.
        assert pickle.loads(pickle.dumps(client)) is not None
    finally:
        inst.uninstrument()
        server.close()
    assert all(o.env_metrics == {"steps": 1} and o.reward[-1] == 1.0 for o in outs)
    generates = [s for s in env.spans() if s.name == "generate"]
    sent = [h for path, h in server.requests if path == "/inference/v1/generate"]
    assert len(sent) == len(generates) == 2
    expected = {(f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in generates}
    parsed = [h["traceparent"].split("-") for h in sent]
    assert {(p[1], p[2]) for p in parsed} == expected
    assert sorted(h["x-session-id"] for h in sent) == ["r1_0", "r2_0"]  # SkyRL's headers kept
    finished = sorted(p for p, _ in server.requests if p.startswith("/finish_session"))
    assert finished == ["/finish_session?session_id=r1_0", "/finish_session?session_id=r2_0"]
    assert len(env.roots()) == 2


def test_trajectories_under_the_users_step_span_are_roots_linked_to_it(instrumented, server):
    env = instrumented
    gen = SkyRLGymGenerator(RemoteInferenceClient(server.port, answer_at=1))
    step_tracer = env.tracer_provider.get_tracer("trainer")

    async def step():
        with step_tracer.start_as_current_span("train_step") as span:
            await asyncio.gather(loop_once(gen, "q1"), loop_once(gen, "q2"))
        return span

    span = asyncio.run(step())
    ctx = span.get_span_context()
    roots = env.roots()
    assert len(roots) == 2 and len({r.context.trace_id for r in roots}) == 2
    for root in roots:
        assert root.parent is None and root.context.trace_id != ctx.trace_id
        (link,) = root.links
        assert link.context.span_id == ctx.span_id
        assert root.attributes["rollout.batch.id"] == format(ctx.span_id, "016x")
    assert {b.batch_id for b in env.breakdowns} == {format(ctx.span_id, "016x")}


def test_suppressed_instrumentation_leaves_the_agent_loop_untraced(instrumented, server):
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    env = instrumented
    gen = SkyRLGymGenerator(RemoteInferenceClient(server.port, answer_at=0))
    with suppress_instrumentation():
        result = asyncio.run(loop_once(gen, "quiet"))
    assert result.reward == 1.0  # SkyRL's own result, unchanged
    assert env.spans() == [] and env.breakdowns == []
    assert all("traceparent" not in headers for _, headers in server.requests)
    asyncio.run(loop_once(gen, "traced"))  # and traced again once suppression ends
    assert len(env.roots()) == 1


# --- a plain install, and clients the class patch cannot reach ---------------------------------
def test_without_skyrl_the_error_names_the_package_and_its_python(monkeypatch):
    from otel_rollout.integrations.skyrl import SkyRLInstrumentor

    monkeypatch.setitem(sys.modules, MOD, None)  # as when skyrl is not installed
    with pytest.raises(ImportError) as exc:
        SkyRLInstrumentor().instrument(skip_dep_check=True)
    message = str(exc.value)
    assert "pip install skyrl 'otel-rollout[skyrl]'" in message
    assert "Python 3.12 or later" in message and MOD in message


def test_without_skyrl_instrument_logs_what_to_install(monkeypatch, caplog):
    import contextlib

    from otel_rollout.instrumentation import forget_warnings
    from otel_rollout.integrations.skyrl import SkyRLInstrumentor

    forget_warnings("skyrl-missing")
    monkeypatch.setitem(sys.modules, "skyrl", None)  # as when skyrl is not installed
    monkeypatch.setitem(sys.modules, MOD, None)
    with contextlib.suppress(ImportError):  # where the distribution is there after all
        SkyRLInstrumentor().instrument()
    assert "pip install skyrl 'otel-rollout[skyrl]' (skyrl needs Python 3.12" in caplog.text


def _instance_generate_client(port: int) -> RemoteInferenceClient:
    import functools

    client = RemoteInferenceClient(port, answer_at=2)
    # the instance's own attribute shadows the class's method, as a partial or mock does
    client.generate = functools.partial(RemoteInferenceClient.generate, client)
    return client


def test_a_generate_that_is_the_instances_own_gets_spans_and_traceparent(instrumented, server):
    env = instrumented
    client = _instance_generate_client(server.port)
    asyncio.run(loop_once(SkyRLGymGenerator(client), "q8"))
    generates = [s for s in env.spans() if s.name == "generate"]
    sent = [h for path, h in server.requests if path == "/inference/v1/generate"]
    assert len(generates) == len(sent) == 3
    assert {h["traceparent"].split("-")[2] for h in sent} == {
        f"{s.context.span_id:016x}" for s in generates
    }
    # SkyRL pickles its clients: the copy carries the plain partial again
    copy_ = pickle.loads(pickle.dumps(client))
    assert type(copy_.generate).__name__ == "partial"


def test_a_mock_generate_gets_its_generate_spans(instrumented, server):
    from unittest.mock import AsyncMock

    env = instrumented
    client = RemoteInferenceClient(server.port)
    answer = {"responses": ["#### 42"], "response_ids": [[1]], "stop_reasons": ["stop"]}
    client.generate = mock = AsyncMock(return_value=answer)
    asyncio.run(loop_once(SkyRLGymGenerator(client), "q9"))
    assert mock.await_count == 1
    assert [s.name for s in env.spans()].count("generate") == 1


def test_uninstrument_puts_the_instances_own_generate_back(skyrl_module, server):
    from otel_rollout.integrations.skyrl import SkyRLInstrumentor

    env = make_test_env()
    inst = SkyRLInstrumentor()
    inst.instrument(skip_dep_check=True, tracer_provider=env.tracer_provider,
                    meter_provider=env.meter_provider, processor=env.processor)  # fmt: skip
    client = _instance_generate_client(server.port)
    original = client.generate
    asyncio.run(loop_once(SkyRLGymGenerator(client), "q10"))
    assert client.generate is not original
    inst.uninstrument()
    assert client.generate is original
