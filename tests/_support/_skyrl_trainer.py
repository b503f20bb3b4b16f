"""SkyRL 0.4.0's fully async training loop, run here with its GPU work stood in.

SkyRL ships ``FullyAsyncTrainerSim``: ``FullyAsyncRayPPOTrainer.train()`` as is, with the
training step a sleep (``simulate_training_step_seconds``) and the weight sync a pause /
resume of generation around a sleep (``simulate_weight_sync_seconds``); no models are
built. Generation is real: ``SkyRLGymGenerator`` with SkyRL's ``RemoteInferenceClient``
over HTTP to the stand-in server of ``_skyrl`` (each generate ``generate_s``), on an env
whose steps sleep ``step_s``. The tracker is SkyRL's ``Tracking`` (console backend) with
a logger that keeps what each step logs.

In the published 0.4.0, the simulator's dispatch stub lacks two methods ``train()`` calls
(``get_timing_metrics`` after the weight sync, ``finalize_pending_saves`` at the end); the
subclass here adds them, answering as a dispatch with nothing to report.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from _skyrl import VLLMLikeServer, tiny_tokenizer

ENV_ID = "otel_rollout_step_env"


class KeptLog:
    """A tracker logger keeping each ``log(data, step)`` call."""

    def __init__(self) -> None:
        self.records: list[tuple[int, dict]] = []

    def log(self, data: dict, step: int) -> None:
        self.records.append((step, dict(data)))

    def timings(self, step: int) -> dict[str, float]:
        """The ``timing/*`` of step ``step``'s committing record, by name."""
        found = [
            d for s, d in self.records if s == step and any(k.startswith("timing/") for k in d)
        ]
        assert len(found) == 1, (step, self.records)
        return {k[len("timing/") :]: v for k, v in found[0].items() if k.startswith("timing/")}


class Prompts:
    """A map-style dataset of prompts as SkyRL's ``PromptDataset`` yields them."""

    def __init__(self, n: int) -> None:
        self.items = [
            {
                "prompt": [{"role": "user", "content": f"What is {i}*7?"}],
                "env_class": ENV_ID,
                "env_extras": {"turns": 2},
                "uid": str(i),
            }
            for i in range(n)
        ]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        return self.items[i]

    def collate_fn(self, batch: list) -> list:
        return batch


def register_env(step_s: float) -> None:
    import skyrl_gym
    from skyrl_gym.envs.base_text_env import BaseTextEnv

    class StepEnv(BaseTextEnv):
        """Done after ``extras["turns"]`` steps of ``step_s`` each."""

        def __init__(self, env_config=None, extras=None):
            super().__init__()
            self.turns_wanted = int((extras or {}).get("turns", 1))

        def init(self, prompt):
            return prompt, {}

        def step(self, action):
            time.sleep(step_s)
            self.turns += 1
            done = self.turns >= self.turns_wanted
            obs = [] if done else [{"role": "user", "content": "Again."}]
            return {"observations": obs, "reward": float(done), "done": done, "metadata": {}}

    skyrl_gym.register(id=ENV_ID, entry_point=StepEnv)


def unregister_env() -> None:
    import skyrl_gym

    skyrl_gym.envs.registration.deregister(ENV_ID)


def sim_trainer(
    *,
    steps: int,
    mini_batch: int = 2,
    samples: int = 2,
    staleness: int = 1,
    generate_s: float = 0.02,
    train_s: float = 0.05,
    sync_s: float = 0.02,
) -> tuple[Any, KeptLog, Any]:
    """A ``FullyAsyncTrainerSim`` that runs ``steps`` steps; its kept log; a closer."""
    from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import (
        RemoteInferenceClient,
    )
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.fully_async_trainer_sim import FullyAsyncTrainerSim, _SimDispatch
    from skyrl.train.generators.skyrl_gym_generator import SkyRLGymGenerator
    from skyrl.train.utils.tracking import Tracking

    class Dispatch(_SimDispatch):
        def get_timing_metrics(self) -> dict:
            return {}

        def finalize_pending_saves(self, model: str) -> None:
            pass

    class Sim(FullyAsyncTrainerSim):
        def init_weight_sync_state(self):
            super().init_weight_sync_state()
            self.dispatch = Dispatch(self.inference_engine_client, sync_s)

    cfg = SkyRLTrainConfig()
    t = cfg.trainer
    t.fully_async.enabled = True
    t.fully_async.simulate_training = True
    t.fully_async.simulate_training_step_seconds = train_s
    t.fully_async.simulate_weight_sync_seconds = sync_s
    t.fully_async.max_staleness_steps = staleness
    t.fully_async.num_parallel_generation_workers = mini_batch * (staleness + 1)
    t.train_batch_size = t.policy_mini_batch_size = mini_batch
    t.eval_interval = t.ckpt_interval = t.hf_save_interval = -1
    t.eval_before_train = False
    t.max_training_steps = steps
    t.epochs = 1
    t.algorithm.policy_loss_type = "rollout_is"  # fully async trains on rollout logprobs
    t.enable_ray_gpu_monitor = t.placement.colocate_all = False
    t.resume_mode = "none"
    cfg.generator.inference_engine.enable_ray_prometheus_stats = False  # no Ray cluster
    cfg.data.dataloader.num_workers = 0
    cfg.generator.n_samples_per_prompt = samples
    cfg.generator.batched = False
    cfg.generator.max_turns = 4
    cfg.environment.env_class = ENV_ID

    tok = tiny_tokenizer()
    server = VLLMLikeServer(tok, generate_s=generate_s)
    client = RemoteInferenceClient(
        proxy_url=server.url, server_urls=[server.url], data_parallel_size=1,
        model_name="tiny-policy", tokenizer=tok,
    )  # fmt: skip
    from skyrl.train.config import GeneratorConfig, SkyRLGymConfig

    generator = SkyRLGymGenerator(
        GeneratorConfig(max_turns=4, max_input_length=8192),
        SkyRLGymConfig(max_env_workers=0),
        client,
        tok,
        policy_model_name="tiny-policy",
    )
    tracker = Tracking("otel-rollout-test", "steps", backend="console")
    kept = KeptLog()
    tracker.logger = kept
    trainer = Sim(
        cfg=cfg, tracker=tracker, tokenizer=tok,
        train_dataset=Prompts(mini_batch * (steps + staleness + 2)),
        inference_engine_client=client, generator=generator,
    )  # fmt: skip

    def close() -> None:
        server.close()

    return trainer, kept, SimpleNamespace(close=close, server=server)
