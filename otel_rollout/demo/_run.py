"""The demo workload: concurrent trajectories on real skyrl-gym envs, traced."""

from __future__ import annotations

import asyncio
import io
import json
import os
import random
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from otel_rollout._accounting.batch_figures import BatchAnalysis
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._accounting.summary import BreakdownCollector
from otel_rollout._accounting.waits import engine_timings
from otel_rollout._api.context import run_in_executor
from otel_rollout._api.tracer import RolloutTracer
from otel_rollout._setup.config import configure

ENVS = ("gsm8k_multi_turn", "text2sql", "lcb")
SERVICE = "otel-rollout-demo"
#: Where the demo writes (the same folder as configure()'s trace files). Folders written
#: by older versions (``otel-rollout-demo/``) stay readable by ``otel-rollout report``.
OUTPUT_DIR = Path("otel-rollout-output")


def check_envs(envs: tuple[str, ...]) -> tuple[str, ...]:
    """``envs`` if each is one of :data:`ENVS` (at least one); else a ValueError naming
    the unknown ones and the valid names."""
    unknown = [e for e in envs if e not in ENVS]
    if unknown or not envs:
        what = f"unknown env class {', '.join(map(repr, unknown))}" if unknown else "no env class"
        raise ValueError(f"{what}; choose from {', '.join(ENVS)}")
    return envs


def _data(name: str) -> str:
    return resources.files("otel_rollout").joinpath("data", name).read_text(encoding="utf-8")


def gsm8k_tasks() -> list[dict[str, str]]:
    return [json.loads(ln) for ln in _data("gsm8k.jsonl").splitlines() if ln.strip()]


def lcb_tasks() -> list[dict[str, Any]]:
    """Small coding problems with stdin/stdout test cases, a right and a wrong solution."""
    return json.loads(_data("lcb.json"))


def _lcb_action(rng: random.Random, task: dict[str, Any]) -> str:
    code = task["solution"] if rng.random() < 0.6 else task["wrong"]
    return f"<think>Read the input, compute, print.</think>\n```python\n{code}\n```"


def build_sql_db(root: Path) -> tuple[Path, dict[str, Any]]:
    """Create the demo's SQLite database in the layout text2sql wants; returns db_path."""
    spec = json.loads(_data("text2sql.json"))
    db_id = spec["db_id"]
    d = root / "spider" / "database" / db_id
    d.mkdir(parents=True, exist_ok=True)
    f = d / f"{db_id}.sqlite"
    if f.exists():
        f.unlink()
    con = sqlite3.connect(f)
    for stmt in spec["schema"]:
        con.execute(stmt)
    for table, rows in spec["rows"].items():
        marks = ",".join("?" * len(rows[0]))
        con.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
    con.commit()
    con.close()
    return root, spec


@dataclass
class Providers:
    tracer: RolloutTracer
    collector: BreakdownCollector
    trace_file: Path
    shutdown: Any
    #: The handle's export counts (spans exported, dropped by reason).
    export_stats: Any = None
    run_id: str | None = None


def make_providers(output_dir: Path) -> Providers:
    """``otel_rollout.configure(local=True)``; an OTLP JSON lines file is always written."""
    handle = configure(
        local=True,
        output_dir=str(output_dir),
        service_name=os.environ.get("OTEL_SERVICE_NAME", SERVICE),
        summary_stream=io.StringIO(),  # the demo prints its own table
    )
    trace_file = handle.trace_file
    if trace_file is None:  # an OTLP endpoint is configured: keep a file for the report
        from opentelemetry.exporter.otlp.json.file import FileSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        trace_file = output_dir / f"traces-{handle.settings['run_id']}.jsonl"
        trace_file.unlink(missing_ok=True)
        handle.tracer_provider.add_span_processor(BatchSpanProcessor(FileSpanExporter(trace_file)))
    return Providers(handle.tracer, handle.collector, Path(trace_file), handle.shutdown,
                     lambda: handle.export_stats, str(handle.settings["run_id"]))  # fmt: skip


@dataclass
class DemoResult:
    breakdowns: list[Breakdown]
    trace_file: Path
    rewards: dict[str, float] = field(default_factory=dict)
    errors: int = 0
    #: The step's batch analysis (tail, stragglers, engine demand).
    batch: BatchAnalysis | None = None
    #: Failed trajectories by reason (``KeyError: 'x'``), the count of each.
    failures: dict[str, int] = field(default_factory=dict)
    #: Spans lost on the way out, by reason; spans exported.
    losses: dict[str, int] = field(default_factory=dict)
    exported: int = 0
    run_id: str | None = None


def _gsm8k_action(rng: random.Random, answer: str, turn: int) -> str:
    correct = rng.random() < 0.35 + 0.25 * turn
    value = answer if correct else str(int(float(answer)) + rng.randint(1, 9))
    return f"Let me work through it step by step... so the total is {value}.\n#### {value}"


def _sql_action(rng: random.Random, task: dict[str, str], turn: int, last: bool) -> str:
    if last or (turn > 0 and rng.random() < 0.6):
        sql = task["sql"] if rng.random() < 0.8 else task["wrong"]
        return f"<think>The query answers it.</think>\n<solution>{sql}</solution>"
    sql = task["wrong"] if rng.random() < 0.4 else task["sql"]
    return f"<think>Let me look at the data first.</think>\n<sql>{sql}</sql>"


#: Synchronous reward code of gsm8k run on the event loop (seconds per step): it stalls
#: every other trajectory, which loop_own / loop_blocked and the stall events show.
GSM8K_LOOP_WORK_S = 0.008
#: text2sql steps wait for a sandbox this long, in a small thread pool that saturates.
SQL_SANDBOX_S = 0.04
SQL_ENV_WORKERS = 2


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _sandboxed_step(env: Any, text: str) -> Any:
    time.sleep(SQL_SANDBOX_S)  # a sandbox round trip: the thread waits, the pool is busy
    return env.step(text)


async def _env_step(traj: Any, env: Any, env_class: str, text: str, ctx: dict[str, Any]) -> Any:
    if env_class == "gsm8k_multi_turn":
        with traj.env_step():  # inline on the loop, with its reward code
            step = env.step(text)
            _busy(GSM8K_LOOP_WORK_S)
        return step
    # a saturated pool: the wait for a thread is an env_queue span before the env step
    return await run_in_executor(ctx["env_pool"], _sandboxed_step, env, text, phase="env")


async def _trajectory(
    i: int, env_class: str, prov: Providers, engine: Any, ctx: dict[str, Any], sem, seed: int
) -> float:
    import skyrl_gym

    rng = random.Random(seed * 1_000_003 + i)
    async with sem:
        model = getattr(engine, "model", None)
        async with prov.tracer.trajectory(
            f"{env_class}-{i}", env=env_class, model=model, instance_id=i, repetition_id=0
        ) as traj:
            if env_class == "gsm8k_multi_turn":
                task = ctx["gsm8k"][i % len(ctx["gsm8k"])]
                max_turns = rng.randint(1, 3)
                extras = {"reward_spec": {"ground_truth": task["answer"]}, "max_turns": max_turns}
                env_config = None
                prompt = [{"role": "user", "content": task["question"]}]
            elif env_class == "lcb":  # the env runs the code against its tests in a subprocess
                task = ctx["lcb"][i % len(ctx["lcb"])]
                max_turns = 1
                extras = {"reward_spec": {"ground_truth": json.dumps(task["tests"])}}
                env_config = None
                prompt = [{"role": "user", "content": task["question"]}]
            else:
                task = ctx["sql"]["tasks"][i % len(ctx["sql"]["tasks"])]
                max_turns = rng.randint(2, 4)
                extras = {
                    "db_id": ctx["sql"]["db_id"],
                    "reward_spec": {"ground_truth": task["sql"]},
                    "data": "spider",
                    "max_turns": max_turns,
                }
                env_config = SimpleNamespace(db_path=str(ctx["db_path"]))
                schema = "\n".join(ctx["sql"]["schema"])
                prompt = [{"role": "user", "content": f"{schema}\n\n{task['question']}"}]
            async with traj.env_setup():
                env = await asyncio.to_thread(
                    skyrl_gym.make, env_class, env_config=env_config, extras=extras
                )
                chat, _ = await asyncio.to_thread(env.init, prompt)
                chat = list(chat)
            reward = 0.0
            for turn in range(max_turns):
                if env_class == "gsm8k_multi_turn":
                    action = _gsm8k_action(rng, task["answer"], turn)
                elif env_class == "lcb":
                    action = _lcb_action(rng, task)
                else:
                    action = _sql_action(rng, task, turn, turn == max_turns - 1)
                async with traj.generate(max_tokens=512) as gen:
                    out = await engine.complete(chat, action)
                    if getattr(out, "metrics", None) is not None:  # queue / prefill / decode
                        gen.set_attributes(engine_timings(out.metrics))
                    gen.record(
                        input_tokens=out.input_tokens,
                        output_tokens=out.output_tokens,
                        finish_reason=out.finish_reason,
                        response_model=out.model,
                    )
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


async def run_demo_async(
    *,
    n: int = 64,
    concurrency: int = 16,
    envs: tuple[str, ...] = ENVS,
    engine: Any = None,
    seed: int = 0,
    output_dir: Path = OUTPUT_DIR,
    on_done: Any = None,
    linger_s: float = 0.0,
) -> DemoResult:
    """Run ``n`` trajectories; ``linger_s`` keeps the providers up that long after the run
    (before shutdown), so a Prometheus pull endpoint can be scraped for the final values.
    ``n`` and ``concurrency`` must be at least 1 and ``envs`` names from :data:`ENVS`
    (ValueError otherwise, before anything runs)."""
    from otel_rollout.demo._engine import SimEngine

    for name, value in (("n", n), ("concurrency", concurrency)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    check_envs(tuple(envs))

    output_dir.mkdir(parents=True, exist_ok=True)
    engine = engine or SimEngine(seed=seed)
    ctx: dict[str, Any] = {"gsm8k": gsm8k_tasks(), "lcb": lcb_tasks()}
    if "text2sql" in envs:
        ctx["db_path"], ctx["sql"] = build_sql_db(output_dir / "sql_data")
    prov = make_providers(output_dir)
    sem = asyncio.Semaphore(concurrency)
    ctx["env_pool"] = ThreadPoolExecutor(SQL_ENV_WORKERS, thread_name_prefix="demo-env")
    failures: dict[str, int] = {}
    rewards: dict[str, list[float]] = {}

    async def one(i: int) -> None:
        env_class = envs[i % len(envs)]
        try:
            r = await _trajectory(i, env_class, prov, engine, ctx, sem, seed)
            rewards.setdefault(env_class, []).append(r)
        except Exception as exc:  # recorded on the span; summarised by reason here
            why = f"{type(exc).__name__}: {exc}"[:120]
            failures[why] = failures.get(why, 0) + 1
        if on_done is not None:
            on_done()

    try:
        async with prov.tracer.batch(step=0) as batch:  # one training step's rollouts
            await asyncio.gather(*(one(i) for i in range(n)))
        await engine.aclose()
        if linger_s > 0:
            await asyncio.sleep(linger_s)
    finally:
        ctx["env_pool"].shutdown(wait=False)
        prov.shutdown()
    mean = {k: sum(v) / len(v) for k, v in rewards.items() if v}
    stats = prov.export_stats() if prov.export_stats is not None else None
    losses = {k: n for k, n in stats.losses().items() if n} if stats is not None else {}
    return DemoResult(prov.collector.drain(), prov.trace_file, mean, sum(failures.values()),
                      batch.analysis, failures, losses,
                      stats.exported if stats is not None else 0, prov.run_id)  # fmt: skip
