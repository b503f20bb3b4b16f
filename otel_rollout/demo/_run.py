"""The demo workload: concurrent trajectories on real skyrl-gym envs, traced."""

from __future__ import annotations

import asyncio
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_rollout._accounting.batch_analysis import BatchAnalysis
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._api.tracer import RolloutTracer
from otel_rollout._settings.table import DEFAULT_OUTPUT_DIR
from otel_rollout._setup.config import configure
from otel_rollout.demo import ENVS
from otel_rollout.demo._engine import SimEngine
from otel_rollout.demo._simtime import SimLoop
from otel_rollout.demo._workload import build_sql_db, gsm8k_tasks, lcb_tasks, trajectory, use_timing

#: The stand-in training phase's length, as a share of the rollouts' wall.
TRAINING_SHARE = 0.25
#: Breakdowns let gather in configure()'s collector: the batch keeps every one (the result
#: is the batch's), so the collector is emptied long before its limit would warn.
_COLLECTOR_SPAN = 1024


@dataclass
class DemoResult:
    breakdowns: list[Breakdown]
    trace_file: Path
    rewards: dict[str, float] = field(default_factory=dict)
    errors: int = 0
    batch: BatchAnalysis | None = None
    #: Failed trajectories by reason (``KeyError: 'x'``), the count of each.
    failures: dict[str, int] = field(default_factory=dict)
    #: Spans lost on the way out, by reason; spans exported.
    losses: dict[str, int] = field(default_factory=dict)
    exported: int = 0
    run_id: str | None = None
    #: Stopped early (Ctrl-C): (trajectories started, trajectories asked for).
    interrupted: tuple[int, int] | None = None


async def run_demo_async(
    *,
    n: int = 64,
    concurrency: int = 16,
    envs: tuple[str, ...] = ENVS,
    engine: Any = None,
    seed: int = 0,
    output_dir: Path = Path(DEFAULT_OUTPUT_DIR),
    on_done: Any = None,
    linger_s: float = 0.0,
) -> DemoResult:
    """Run ``n`` trajectories, ``concurrency`` at a time (workers take the next one as they
    finish one, so memory does not grow with ``n``); ``linger_s`` keeps the providers up
    that long after the run, so a Prometheus pull endpoint can be scraped for the final
    values. Cancelled (Ctrl-C), it stops the trajectories in flight (their spans end as
    cancelled) and returns what ran, with ``interrupted`` set."""
    output_dir.mkdir(parents=True, exist_ok=True)
    engine = engine or SimEngine(seed=seed)
    ctx: dict[str, Any] = {"gsm8k": gsm8k_tasks(), "lcb": lcb_tasks()}
    if "text2sql" in envs:
        ctx["db_path"], ctx["sql"] = build_sql_db(output_dir / "sql_data")
    handle = configure(
        local=True,
        output_dir=str(output_dir),
        service_name=os.environ.get("OTEL_SERVICE_NAME", "otel-rollout-demo"),
        loop_stalls=True,  # the demo shows event-loop stalls (opt-in)
        summary_stream=io.StringIO(),  # the demo prints its own table
    )
    run_id = str(handle.settings.run_id)
    trace_file = handle.trace_file
    if trace_file is None:  # an OTLP endpoint is configured: keep a file for the report
        from opentelemetry.exporter.otlp.json.file import FileSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        trace_file = output_dir / f"traces-{run_id}.jsonl"
        trace_file.unlink(missing_ok=True)
        handle.tracer_provider.add_span_processor(BatchSpanProcessor(FileSpanExporter(trace_file)))
    loop = asyncio.get_running_loop()
    tracer = handle.tracer
    if isinstance(loop, SimLoop):  # spans on the demo's clock
        tracer = RolloutTracer(handle.tracer_provider, handle.meter_provider,
                               processor=handle.processor, clock=loop.clock_ns)  # fmt: skip
    undo = use_timing(ctx, concurrency)
    failures: dict[str, int] = {}
    rewards: dict[str, list[float]] = {}  # env class: [sum, count]
    todo = iter(range(n))
    started = 0

    async def worker() -> None:
        nonlocal started
        for i in todo:
            started += 1
            env_class = envs[i % len(envs)]
            try:
                r = await trajectory(i, env_class, tracer, engine, ctx, seed)
                total = rewards.setdefault(env_class, [0.0, 0])
                total[0] += r
                total[1] += 1
            except Exception as exc:  # recorded on the span; summarised by reason here
                why = f"{type(exc).__name__}: {exc}"[:120]
                failures[why] = failures.get(why, 0) + 1
            if len(handle.collector) >= _COLLECTOR_SPAN:  # the batch holds them
                handle.collector.drain()
            if on_done is not None:
                on_done()

    interrupted = False
    try:
        async with tracer.step(0, trainer="demo") as step:  # one training step
            slots = min(concurrency, n)  # what the batch may run at once
            async with tracer.batch(step=0, concurrency=slots) as batch:  # linked to it
                try:
                    await asyncio.gather(*(worker() for _ in range(slots)))
                except asyncio.CancelledError:
                    interrupted = True
                    asyncio.current_task().uncancel()  # type: ignore[union-attr]  # a task
            if not interrupted:
                # A stand-in for the training the demo does not do, so the step account
                # and the phase gauge show a phase.
                a, start = batch.analysis, getattr(batch.span, "start_time", None)
                wall_s = max(0, a.end_ns - start) / 1e9 if a and start else 0.0
                async with step.phase("run_training", **{"demo.simulated": True}):
                    await asyncio.sleep(min(TRAINING_SHARE * wall_s, 3.0))
        if not interrupted:
            await engine.aclose()
            if linger_s > 0:
                await asyncio.sleep(linger_s)
    finally:
        undo()
        handle.shutdown()
    stats = handle.export_stats
    handle.collector.drain()
    return DemoResult(
        list(batch.breakdowns), Path(trace_file),
        {k: total / count for k, (total, count) in rewards.items() if count},
        sum(failures.values()), batch.analysis, failures,
        {k: c for k, c in stats.losses().items() if c} if stats is not None else {},
        stats.exported if stats is not None else 0, run_id,
        (started, n) if interrupted else None,
    )  # fmt: skip


def run_demo(*, engine: Any = None, pace: bool = False, **kwargs: Any) -> DemoResult:
    """:func:`run_demo_async` in a new event loop: with the simulated engine (the
    default) on the demo's own clock (:class:`SimLoop`), so a seed gives the same
    figures on every run; ``pace`` also keeps it to real time. Any other engine runs on
    a plain loop, in real time."""
    if engine is not None and not isinstance(engine, SimEngine):
        return asyncio.run(run_demo_async(engine=engine, **kwargs))
    with asyncio.Runner(loop_factory=lambda: SimLoop(pace=pace)) as runner:
        return runner.run(run_demo_async(engine=engine, **kwargs))
