"""Event-loop stalls with SkyRL's real generator: env steps run inline versus in a pool.

Runs the published skyrl's ``SkyRLGymGenerator.agent_loop`` (Python >= 3.12) on
``--trajectories`` concurrent trajectories of a gsm8k_multi_turn env whose ``step`` takes
``--step-ms`` (``--work blocking``: the thread blocks and releases the GIL, as a
subprocess, sqlite or I/O call does; ``--work cpu``: pure-Python CPU, which holds the GIL
and so serialises a thread pool too), with an inference engine stand-in answering after
``--engine-ms``, traced by the SkyRL instrumentor. Once with SkyRL's env thread pool
(``max_env_workers=4``), once inline on the event loop (``max_env_workers=0``), alternating
for ``--rounds`` rounds. Prints the mean e2e of each case, its mean ``loop_own`` and
``loop_blocked``, and how much of the e2e difference the trajectories' ``loop_blocked``
accounts for.

    PYTHONPATH=. .venv-skyrl/bin/python benchmarks/loopstall_skyrl.py
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

MOD = "skyrl.train.generators.skyrl_gym_generator"
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
STEP_S = 0.02
WORK = "blocking"


def busy(seconds: float) -> None:
    if WORK == "blocking":  # blocks its thread, releases the GIL (a subprocess, sqlite, I/O)
        time.sleep(seconds)
        return
    end = time.thread_time() + seconds  # pure-Python CPU: holds the GIL, even in a pool
    while time.thread_time() < end:
        pass


def make_env_class():
    from skyrl_gym.envs.gsm8k.multi_turn_env import GSM8kMultiTurnEnv

    class BusyGSM8k(GSM8kMultiTurnEnv):
        def step(self, action):
            busy(STEP_S)
            return super().step(action)

    return BusyGSM8k


def tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tk.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>"],
    )  # fmt: skip
    tok.chat_template = TEMPLATE
    return tok


class Engine:
    """The inference engine stand-in: answers right on the last turn, after a latency."""

    def __init__(self, tok, latency_s: float, turns: int) -> None:
        self.tok, self.latency_s, self.turns = tok, latency_s, turns
        self.count: dict[str, int] = {}

    async def generate(self, input_batch: dict, model: str | None = None) -> dict:
        (session,) = input_batch["session_ids"]
        turn = self.count[session] = self.count.get(session, 0) + 1
        text = "#### 42" if turn >= self.turns else "#### 41"
        ids = [*self.tok.encode(text, add_special_tokens=False), self.tok.eos_token_id]
        await asyncio.sleep(self.latency_s)
        return {"responses": [text], "response_ids": [ids], "stop_reasons": ["stop"],
                "response_logprobs": [[-0.25] * len(ids)]}  # fmt: skip

    async def finish_session(self, session_id: str) -> None:
        return None


def run_case(mod, env, tok, workers: int, n: int, args, round_: int) -> list:
    from skyrl.train.config import GeneratorConfig, SkyRLGymConfig
    from skyrl.train.generators.base import TrajectoryID

    gen = mod.SkyRLGymGenerator(
        GeneratorConfig(max_turns=args.turns), SkyRLGymConfig(max_env_workers=workers),
        Engine(tok, args.engine_ms / 1e3, args.turns), tok, policy_model_name="tiny",
    )  # fmt: skip
    extras = {"reward_spec": {"ground_truth": "42"}, "max_turns": args.turns}

    async def batch():
        return await asyncio.gather(*(
            gen.agent_loop(
                [{"role": "user", "content": "What is 6*7?"}], "busy_gsm8k",
                copy.deepcopy(extras), 16, 1024,
                trajectory_id=TrajectoryID(instance_id=f"r{round_}w{workers}q{i}", repetition_id=0),
            )
            for i in range(n)
        ))  # fmt: skip

    env.collector.drain()
    asyncio.run(batch())
    return env.collector.drain()


def main() -> None:
    global STEP_S, WORK
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=4)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--step-ms", type=float, default=20.0)
    ap.add_argument("--engine-ms", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--work",
        choices=("blocking", "cpu"),
        default="blocking",
        help="env step work: blocking (releases the GIL) or pure-Python CPU",
    )
    args = ap.parse_args()
    STEP_S = args.step_ms / 1e3
    WORK = args.work
    import importlib

    import skyrl_gym

    from otel_rollout.integrations.skyrl import SkyRLInstrumentor
    from otel_rollout.testing import make_test_env

    mod = importlib.import_module(MOD)
    skyrl_gym.register(id="busy_gsm8k", entry_point=make_env_class())
    tok = tokenizer()
    env = make_test_env()
    inst = SkyRLInstrumentor()
    inst.instrument(tracer_provider=env.tracer_provider, meter_provider=env.meter_provider)
    results: dict[str, list] = {"pool": [], "inline": []}
    try:
        run_case(mod, env, tok, 4, args.trajectories, args, -1)  # warm up
        for r in range(args.rounds):
            results["pool"] += run_case(mod, env, tok, 4, args.trajectories, args, r)
            results["inline"] += run_case(mod, env, tok, 0, args.trajectories, args, r)
    finally:
        inst.uninstrument()
    mean = {}
    print(f"{args.trajectories} trajectories x {args.turns} turns, env step {args.step_ms} ms "
          f"({args.work}), engine {args.engine_ms} ms, {args.rounds} rounds:")  # fmt: skip
    for case, bds in results.items():
        m = {k: statistics.mean(getattr(b, k) for b in bds) for k in
             ("e2e", "llm", "env", "loop_own", "loop_blocked")}  # fmt: skip
        mean[case] = m
        print(f"  {case:6s} (max_env_workers={4 if case == 'pool' else 0}): "
              + "  ".join(f"{k} {v * 1e3:6.1f} ms" for k, v in m.items()))  # fmt: skip
    diff = mean["inline"]["e2e"] - mean["pool"]["e2e"]
    extra = mean["inline"]["loop_blocked"] - mean["pool"]["loop_blocked"]
    print(f"  mean e2e difference inline - pool: {diff * 1e3:.1f} ms; "
          f"mean loop_blocked inline - pool: {extra * 1e3:.1f} ms "
          f"({extra / diff:.2f} of the difference)")  # fmt: skip


if __name__ == "__main__":
    main()
