"""The demo's workload: one trajectory on a real skyrl-gym env, and the latencies of its
env calls (simulated on the demo's own clock, or real); docs/demo.md."""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from otel_rollout._accounting.waits import engine_timings
from otel_rollout._api.context import run_in_executor
from otel_rollout.demo._simtime import SimLoop, SimPool, call_cost

#: Synchronous reward code of gsm8k run on the event loop (seconds per step): it stalls
#: every other trajectory, which loop_own / loop_blocked and the stall events show.
GSM8K_LOOP_WORK_S = 0.008
#: text2sql steps wait for a sandbox this long, in a small thread pool that saturates.
SQL_SANDBOX_S = 0.04
SQL_ENV_WORKERS = 2
#: With the simulated engine: each env call made in a thread (``skyrl_gym.make``,
#: ``env.init``, ``env.close``) takes this long on the demo's clock.
ENV_CALL_S = 0.01
#: With the simulated engine: an lcb step (the sandbox, then the generated code run
#: against the test cases: 50-190 ms measured on a 2-core machine) takes this long.
LCB_STEP_S = 0.12


def _data(name: str) -> str:
    return resources.files("otel_rollout").joinpath("data", name).read_text(encoding="utf-8")


def gsm8k_tasks() -> list[dict[str, str]]:
    return [json.loads(ln) for ln in _data("gsm8k.jsonl").splitlines() if ln.strip()]


def lcb_tasks() -> list[dict[str, Any]]:
    """Small coding problems with stdin/stdout test cases, a right and a wrong solution."""
    return json.loads(_data("lcb.json"))


def build_sql_db(root: Path) -> tuple[Path, dict[str, Any]]:
    """The demo's SQLite database in the layout text2sql wants: its root and its spec."""
    spec = json.loads(_data("text2sql.json"))
    d = root / "spider" / "database" / spec["db_id"]
    d.mkdir(parents=True, exist_ok=True)
    f = d / f"{spec['db_id']}.sqlite"
    f.unlink(missing_ok=True)
    con = sqlite3.connect(f)
    for stmt in spec["schema"]:
        con.execute(stmt)
    for table, rows in spec["rows"].items():
        con.executemany(f"INSERT INTO {table} VALUES ({','.join('?' * len(rows[0]))})", rows)
    con.commit()
    con.close()
    return root, spec


#: What ``_setup`` gives: turns, the env's extras and config, the prompt, the action of
#: each turn (``act(turn)``).
_Setup = tuple[int, dict[str, Any], Any, str, Callable[[int], str]]


def _gsm8k(i: int, rng: random.Random, ctx: dict[str, Any]) -> _Setup:
    task = ctx["gsm8k"][i % len(ctx["gsm8k"])]
    turns = rng.randint(1, 3)

    def act(turn: int) -> str:  # right more often on later turns
        correct = rng.random() < 0.35 + 0.25 * turn
        value = task["answer"] if correct else str(int(float(task["answer"])) + rng.randint(1, 9))
        return f"Let me work through it step by step... so the total is {value}.\n#### {value}"

    extras = {"reward_spec": {"ground_truth": task["answer"]}, "max_turns": turns}
    return turns, extras, None, task["question"], act


def _lcb(i: int, rng: random.Random, ctx: dict[str, Any]) -> _Setup:
    task = ctx["lcb"][i % len(ctx["lcb"])]  # the env runs the code in a subprocess

    def act(turn: int) -> str:
        code = task["solution"] if rng.random() < 0.6 else task["wrong"]
        return f"<think>Read the input, compute, print.</think>\n```python\n{code}\n```"

    extras = {"reward_spec": {"ground_truth": json.dumps(task["tests"])}}
    return 1, extras, None, task["question"], act


def _text2sql(i: int, rng: random.Random, ctx: dict[str, Any]) -> _Setup:
    sql = ctx["sql"]
    task = sql["tasks"][i % len(sql["tasks"])]
    turns = rng.randint(2, 4)

    def act(turn: int) -> str:  # look at the data, then answer (always on the last turn)
        if turn == turns - 1 or (turn > 0 and rng.random() < 0.6):
            query = task["sql"] if rng.random() < 0.8 else task["wrong"]
            return f"<think>The query answers it.</think>\n<solution>{query}</solution>"
        query = task["wrong"] if rng.random() < 0.4 else task["sql"]
        return f"<think>Let me look at the data first.</think>\n<sql>{query}</sql>"

    extras = {"db_id": sql["db_id"], "reward_spec": {"ground_truth": task["sql"]},
              "data": "spider", "max_turns": turns}  # fmt: skip
    prompt = "\n".join(sql["schema"]) + "\n\n" + task["question"]
    return turns, extras, SimpleNamespace(db_path=str(ctx["db_path"])), prompt, act


_SETUP = {"gsm8k_multi_turn": _gsm8k, "lcb": _lcb, "text2sql": _text2sql}


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _sandboxed_step(env: Any, text: str) -> Any:
    time.sleep(SQL_SANDBOX_S)  # a sandbox round trip: the thread waits, the pool is busy
    return env.step(text)


def _step(env: Any, text: str) -> Any:
    return env.step(text)


async def _env_step(traj: Any, env: Any, env_class: str, text: str, ctx: dict[str, Any]) -> Any:
    if env_class == "gsm8k_multi_turn":
        with traj.env_step():  # inline on the loop, with its reward code
            step = env.step(text)
            ctx["busy"](GSM8K_LOOP_WORK_S)
        return step
    # a saturated pool: the wait for a thread is an env_queue span before the env step
    token = call_cost.set(LCB_STEP_S if env_class == "lcb" else None)
    try:
        return await run_in_executor(ctx["env_pool"], ctx["sandboxed"], env, text, phase="env")
    finally:
        call_cost.reset(token)


def use_timing(ctx: dict[str, Any], concurrency: int) -> Callable[[], None]:
    """Fill ``ctx`` with the demo's latencies: simulated on a :class:`SimLoop` (the
    env pool's threads, the sandbox, env calls and reward code take their nominal time
    on its clock), else real (threads, sleeps, a busy loop). Returns what undoes it."""
    from otel_rollout._processing import loopstall

    loop = asyncio.get_running_loop()
    if not isinstance(loop, SimLoop):
        ctx["env_pool"] = ThreadPoolExecutor(SQL_ENV_WORKERS, thread_name_prefix="demo-env")
        ctx["busy"], ctx["sandboxed"] = _busy, _sandboxed_step
        return lambda: ctx["env_pool"].shutdown(wait=False)
    ctx["env_pool"] = SimPool(loop, SQL_ENV_WORKERS, SQL_SANDBOX_S)
    ctx["busy"], ctx["sandboxed"] = loop.spend, _step
    loop.set_default_executor(SimPool(loop, concurrency * 2, ENV_CALL_S))  # asyncio.to_thread
    previous = loopstall._CFG.clock
    loopstall.configure_loop_stalls(clock=loop.monotonic_ns)

    def undo() -> None:
        loopstall.configure_loop_stalls(clock=previous)
        ctx["env_pool"].shutdown(wait=False)

    return undo


async def trajectory(
    i: int, env_class: str, tracer: Any, engine: Any, ctx: dict[str, Any], seed: int
) -> float:
    """Trajectory ``i`` on a new ``env_class`` env; its reward."""
    import skyrl_gym

    rng = random.Random(seed * 1_000_003 + i)
    model = getattr(engine, "model", None)
    async with tracer.trajectory(
        f"{env_class}-{i}", env=env_class, model=model, instance_id=i, repetition_id=0
    ) as traj:
        turns, extras, env_config, prompt, act = _SETUP[env_class](i, rng, ctx)
        async with traj.env_setup():
            env = await asyncio.to_thread(
                skyrl_gym.make, env_class, env_config=env_config, extras=extras
            )
            chat, _ = await asyncio.to_thread(env.init, [{"role": "user", "content": prompt}])
            chat = list(chat)
        reward = 0.0
        for turn in range(turns):
            action = act(turn)
            async with traj.generate(max_tokens=512) as gen:
                out = await engine.complete(chat, action)
                if out.metrics is not None:  # queue / prefill / decode
                    gen.set_attributes(engine_timings(out.metrics))
                gen.record(input_tokens=out.input_tokens, output_tokens=out.output_tokens,
                           finish_reason=out.finish_reason, response_model=out.model)  # fmt: skip
            chat.append({"role": "assistant", "content": out.text})
            step = await _env_step(traj, env, env_class, out.text, ctx)
            reward += float(step["reward"])
            chat.extend(step["observations"])
            if step["done"]:
                break
        async with traj.env_teardown():
            await asyncio.to_thread(env.close)
        traj.set_reward(reward)
        return reward
