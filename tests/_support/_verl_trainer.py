"""verl 0.9.1's ``RayPPOTrainer.fit()`` run here, its GPU work stood in.

``fit()`` runs as published; the trainer is made without ``__init__`` (which builds Ray
worker groups) and given what ``fit()`` reads: verl's own hydra ``ppo_trainer`` config,
a data loader of prompt batches, and stand-ins for the calls that run on GPUs: the agent
loop's ``generate_sequences`` (sleeps, then answers tensors shaped as verl's agent loop
does), ``_compute_old_log_prob``, ``_update_actor``, the weight update and
``_validate`` (each a sleep). Rewards, advantages (GRPO), the metrics and the tracker
(console) are verl's own code on those tensors.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

PROMPT, RESPONSE = 4, 6


def fit_config(extra: tuple[str, ...] = ()) -> Any:
    import os

    import verl.trainer.config as cfg_pkg
    from hydra import compose, initialize_config_dir

    config_dir = os.path.dirname(os.path.abspath(cfg_pkg.__file__))
    overrides = [
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.n=2",
        "trainer.total_epochs=1",
        "trainer.val_before_train=false",
        "trainer.save_freq=-1",
        "trainer.balance_batch=false",
        "trainer.critic_warmup=0",
        "trainer.logger=[console]",
        "critic.enable=false",
        *extra,
    ]
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def fit_trainer(
    *,
    steps: int,
    prompts: int = 2,
    gen_s: float = 0.03,
    old_log_prob_s: float = 0.01,
    update_s: float = 0.02,
    sync_s: float = 0.01,
    test_s: float = 0.005,
    test_freq: int = 2,
) -> Any:
    """A ``RayPPOTrainer`` whose ``fit()`` runs ``steps`` steps of ``prompts`` prompts."""
    import numpy as np
    import torch
    from verl.protocol import DataProto
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    config = fit_config((f"trainer.test_freq={test_freq}",))
    n = int(config.actor_rollout_ref.rollout.n)

    def batch_dict() -> dict:
        raw = np.empty(prompts, dtype=object)
        raw[:] = [[{"role": "user", "content": f"q{i}"}] for i in range(prompts)]
        return {
            "dummy_tensor": torch.zeros(prompts, 1, dtype=torch.uint8),
            "raw_prompt": raw,
            "data_source": np.array(["stand_in"] * prompts, dtype=object),
        }

    def generate_sequences(gen_batch: Any) -> Any:
        time.sleep(gen_s)
        b = len(gen_batch)
        prompt = torch.randint(1, 100, (b, PROMPT))
        response = torch.randint(1, 100, (b, RESPONSE))
        mask = torch.ones(b, PROMPT + RESPONSE, dtype=torch.long)
        scores = torch.zeros(b, RESPONSE)
        scores[:, -1] = torch.arange(b, dtype=torch.float32) % 2  # rewards that vary
        mm = np.empty(b, dtype=object)
        mm[:] = [{} for _ in range(b)]
        return DataProto.from_dict(
            tensors={
                "prompts": prompt,
                "responses": response,
                "response_mask": torch.ones(b, RESPONSE, dtype=torch.long),
                "input_ids": torch.cat([prompt, response], dim=-1),
                "attention_mask": mask,
                "position_ids": torch.arange(PROMPT + RESPONSE).expand(b, -1).clone(),
                "rm_scores": scores,
            },
            non_tensors={"multi_modal_inputs": mm},
            meta_info={"timing": {}},
        )

    def old_log_prob(batch: Any) -> tuple[Any, float]:
        time.sleep(old_log_prob_s)
        b = len(batch)
        out = DataProto.from_dict(
            tensors={"old_log_probs": torch.zeros(b, RESPONSE), "entropys": torch.ones(b, RESPONSE)}
        )
        return out, 0.0

    def update_actor(batch: Any) -> Any:
        time.sleep(update_s)
        return DataProto(meta_info={"metrics": {"actor/pg_loss": [0.0]}})

    def validate(merged: bool = False) -> dict:
        time.sleep(test_s)
        return {"val-core/stand_in/reward/mean@1": 0.5}

    t = object.__new__(RayPPOTrainer)
    t.config = config
    t._init_dump_executor()
    t._load_checkpoint = lambda: None
    t.checkpoint_manager = SimpleNamespace(
        update_weights=lambda step: time.sleep(sync_s), sleep_replicas=lambda: None
    )
    t.train_dataloader = [batch_dict() for _ in range(steps)]
    t.total_training_steps = steps
    t.actor_rollout_wg = SimpleNamespace()
    t.async_rollout_manager = SimpleNamespace(generate_sequences=generate_sequences)
    t.use_rm = t.use_reference_policy = t.use_critic = False
    t.reward_loop_manager = None
    t._compute_old_log_prob = old_log_prob
    t._update_actor = update_actor
    t._validate = validate
    t.resource_pool_manager = SimpleNamespace(get_n_gpus=lambda: 1)
    t.train_dataset = SimpleNamespace()
    t.llm_server_manager = None
    assert n >= 1
    return t
