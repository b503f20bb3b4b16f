"""Event-loop stall attribution on the published skyrl (Python >= 3.12): env steps run
inline on the loop are their own loop time and block the other trajectories."""

from __future__ import annotations

import asyncio
import time

import pytest


def test_real_skyrl_inline_env_steps_are_own_time_and_block_the_others(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from test_skyrl import EXTRAS, MOD, SKIP_REAL, tiny_tokenizer

    mod = pytest.importorskip(MOD, reason=SKIP_REAL)
    import copy

    import skyrl_gym
    from skyrl.train.config import GeneratorConfig, SkyRLGymConfig
    from skyrl.train.generators.base import TrajectoryID
    from skyrl_gym.envs.gsm8k.multi_turn_env import GSM8kMultiTurnEnv

    from otel_rollout.integrations.skyrl import SkyRLInstrumentor
    from otel_rollout.sdk import configure_loop_stalls
    from otel_rollout.testing import make_test_env

    step_s, turns, n = 0.02, 2, 3

    class BusyEnv(GSM8kMultiTurnEnv):
        def step(self, action):
            end = time.thread_time() + step_s  # 20 ms of CPU, as a real env step burns
            while time.thread_time() < end:
                pass
            return super().step(action)

    class Engine:
        def __init__(self, tok):
            self.tok = tok

        async def generate(self, input_batch, model=None):
            ids = [*self.tok.encode("#### 41", add_special_tokens=False), self.tok.eos_token_id]
            await asyncio.sleep(0.005)
            return {"responses": ["#### 41"], "response_ids": [ids], "stop_reasons": ["stop"],
                    "response_logprobs": [[-0.25] * len(ids)]}  # fmt: skip

        async def finish_session(self, session_id):
            return None

    skyrl_gym.register(id="busy_gsm8k_test", entry_point=BusyEnv)
    tok = tiny_tokenizer()
    gen = mod.SkyRLGymGenerator(
        GeneratorConfig(max_turns=turns), SkyRLGymConfig(max_env_workers=0), Engine(tok), tok,
        policy_model_name="tiny",
    )  # fmt: skip
    env = make_test_env()
    configure_loop_stalls(True)
    inst = SkyRLInstrumentor()
    inst.instrument(
        tracer_provider=env.tracer_provider,
        meter_provider=env.meter_provider,
        processor=env.processor,
    )
    try:

        async def batch():
            extras = {**copy.deepcopy(EXTRAS), "max_turns": turns}
            return await asyncio.gather(*(
                gen.agent_loop([{"role": "user", "content": "6*7?"}], "busy_gsm8k_test",
                               copy.deepcopy(extras), 16, 1024,
                               trajectory_id=TrajectoryID(instance_id=f"q{i}", repetition_id=0))
                for i in range(n)
            ))  # fmt: skip

        asyncio.run(batch())
    finally:
        inst.uninstrument()
        configure_loop_stalls(False)
        skyrl_gym.envs.registration.deregister("busy_gsm8k_test")
    bds = env.breakdowns
    assert len(bds) == n and all(b.env_steps == turns for b in bds)
    for b in bds:  # every inline env step is the trajectory's own time on the loop
        assert b.loop_own >= turns * step_s
    # Every root starts before any env step runs, so the trajectory that ends last was
    # blocked by every env step of the others.
    last = max(bds, key=lambda b: b.end_time_ns)
    assert last.loop_blocked >= (n - 1) * turns * step_s
