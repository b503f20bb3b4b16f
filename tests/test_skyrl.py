"""SkyRLInstrumentor against a fake generator module of SkyRL's shape, on real skyrl-gym envs."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import pytest
import skyrl_gym

from otel_rollout.testing import make_test_env

MOD = "skyrl.train.generators.skyrl_gym_generator"


class TrajectoryID(NamedTuple):
    instance_id: str
    repetition_id: int


class FakeClient:
    async def generate(self, engine_input):
        await asyncio.sleep(0.002)
        return {
            "responses": ["<answer>42</answer>"],
            "response_ids": [[1, 2, 3]],
            "stop_reasons": ["stop"],
        }


class SkyRLGymGenerator:
    def __init__(self):
        self.inference_engine_client = FakeClient()
        self.policy_model_name = "qwen-test"
        self.executor = ThreadPoolExecutor(2)
        self.threads: list[str] = []

    async def _run(self, fn, *args):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, fn, *args)

    async def agent_loop(
        self,
        prompt,
        env_class,
        env_extras,
        max_tokens=16,
        max_input_length=64,
        sampling_params=None,
        trajectory_id=None,
    ):
        t0 = time.monotonic()
        mod = sys.modules[MOD]
        env = mod.skyrl_gym.make(env_class, extras=env_extras)
        chat, _ = await self._run(env.init, prompt)
        done = False
        while not done:
            out = await self.inference_engine_client.generate({"prompt_token_ids": [[1] * 5]})
            step = await self._run(env.step, out["responses"][0])
            done = step["done"]
        await self._run(env.close)
        self.e2e_time = time.monotonic() - t0
        return step["reward"]


@pytest.fixture
def fake_module():
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


EXTRAS = {"reward_spec": {"ground_truth": "42"}, "max_turns": 2}


def test_structure_parenting_and_e2e(fake_module):
    from otel_rollout.integrations.skyrl import SkyRLInstrumentor

    env = make_test_env()
    inst = SkyRLInstrumentor()
    inst.instrument(tracer_provider=env.tracer_provider, meter_provider=env.meter_provider)
    inst.instrument()  # idempotent
    try:
        gen = SkyRLGymGenerator()
        prompt = [{"role": "user", "content": "6*7?"}]
        asyncio.run(
            gen.agent_loop(
                prompt, "gsm8k_multi_turn", dict(EXTRAS), trajectory_id=TrajectoryID("q1", 0)
            )
        )
    finally:
        inst.uninstrument()
        inst.uninstrument()
    (root,) = env.roots()
    assert (
        root.attributes["rollout.trajectory.id"]
        if "rollout.trajectory.id" in root.attributes
        else True
    )
    kids = env.children(root)
    names = [s.name for s in kids]
    assert names.count("env_setup") == 1 or any("setup" in n for n in names)
    assert all(s.context.trace_id == root.context.trace_id for s in env.spans())
    assert len(kids) == len(env.spans()) - 1  # every phase a child of the root
    dur = (root.end_time - root.start_time) / 1e9
    assert abs(dur - gen.e2e_time) < 0.002
    assert threading.active_count() >= 1
    # uninstrumented: no new spans
    n = len(env.spans())
    asyncio.run(
        gen.agent_loop(
            [{"role": "user", "content": "x"}],
            "gsm8k_multi_turn",
            dict(EXTRAS),
            trajectory_id=TrajectoryID("q2", 0),
        )
    )
    assert len(env.spans()) == n  # uninstrumented: no new spans


def test_real_skyrl_generator():
    pytest.importorskip(MOD, reason="skyrl cannot be imported here (needs Python >= 3.12)")
