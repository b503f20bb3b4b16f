"""vLLM integration: trace_headers, the traced AsyncLLM.generate stream, the provider warning.

The engine is a fake whose ``generate`` has the signature of vLLM 0.33's
``AsyncLLM.generate`` and which, like vLLM's output processor, extracts the
``trace_headers`` it is given with the W3C propagator and starts its ``llm_request`` span
(kind SERVER) in that context. Outputs are vLLM's own ``RequestOutput`` /
``CompletionOutput`` / ``RequestStateStats`` / ``SamplingParams`` when vLLM imports, else
stand-ins with the same fields; the tests that need the real classes skip without vLLM.
"""

from __future__ import annotations

import asyncio
import enum
import gc
import logging
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry import baggage, propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from otel_rollout import attributes as A
from otel_rollout.instrumentation import engine_timings
from otel_rollout.integrations import vllm as V
from otel_rollout.testing import make_test_env

ROOT = Path(__file__).resolve().parents[2]
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")

try:  # vLLM's real types where vLLM imports (it needs torch); stand-ins otherwise
    from vllm.outputs import CompletionOutput, RequestOutput
    from vllm.sampling_params import RequestOutputKind, SamplingParams
    from vllm.v1.metrics.stats import RequestStateStats

    REAL_VLLM = True
except Exception:
    REAL_VLLM = False

    class RequestOutputKind(enum.Enum):  # type: ignore[no-redef]
        CUMULATIVE = 0
        DELTA = 1
        FINAL_ONLY = 2

    @dataclass
    class SamplingParams:  # type: ignore[no-redef]
        n: int = 1
        temperature: float = 1.0
        top_p: float = 1.0
        max_tokens: int | None = 16
        output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE

    @dataclass
    class CompletionOutput:  # type: ignore[no-redef]
        index: int
        text: str
        token_ids: list[int]
        cumulative_logprob: float | None
        logprobs: Any
        routed_experts: Any = None
        finish_reason: str | None = None
        stop_reason: int | str | None = None

    @dataclass
    class RequestStateStats:  # type: ignore[no-redef]
        num_generation_tokens: int = 0
        num_preemptions: int = 0
        arrival_time: float = 0.0
        queued_ts: float = 0.0
        scheduled_ts: float = 0.0
        first_token_ts: float = 0.0
        last_token_ts: float = 0.0
        first_token_latency: float = 0.0

    class RequestOutput:  # type: ignore[no-redef]
        def __init__(
            self,
            request_id,
            prompt,
            prompt_token_ids,
            prompt_logprobs,
            outputs,
            finished,
            metrics=None,
            lora_request=None,
            encoder_prompt=None,
            encoder_prompt_token_ids=None,
            num_cached_tokens=None,
            **kwargs,
        ):
            self.request_id = request_id
            self.prompt = prompt
            self.prompt_token_ids = prompt_token_ids
            self.prompt_logprobs = prompt_logprobs
            self.outputs = outputs
            self.finished = finished
            self.metrics = metrics
            self.num_cached_tokens = num_cached_tokens


def stats(**kw: float) -> RequestStateStats:
    """Engine stats with vLLM's mixed clocks: arrival is wall clock, the rest monotonic."""
    s = RequestStateStats(arrival_time=time.time())
    for k, v in kw.items():
        setattr(s, k, v)
    return s


class FakeAsyncLLM:
    """``generate`` with vLLM 0.33's signature; its llm_request span is parented like vLLM's."""

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        tokens: int = 3,
        n: int = 1,
        otlp_traces_endpoint: str | None = "http://collector:4317",
        fail_after: int | None = None,
        step_s: float = 0.0,
        clock: tuple[float, float, float, float] = (100.0, 100.25, 100.5, 0.125),
    ) -> None:
        self.tracer = trace.get_tracer("vllm.llm_engine", tracer_provider=tracer_provider)
        self.observability_config = SimpleNamespace(otlp_traces_endpoint=otlp_traces_endpoint)
        self.model_config = SimpleNamespace(model="/models/tiny", served_model_name="tiny-qwen")
        self.tokens = tokens
        self.n = n
        self.fail_after = fail_after
        self.step_s = step_s
        # engine-core monotonic times: queued, scheduled, first token, then per token
        self.clock = clock
        self.metrics: list[Any] = []
        self.received: list[Any] = []
        self.aborted: list[str] = []
        self.calls = 0

    async def generate(
        self,
        prompt: Any,
        sampling_params: SamplingParams,
        request_id: str,
        *,
        prompt_text: str | None = None,
        lora_request: Any = None,
        tokenization_kwargs: dict[str, Any] | None = None,
        trace_headers: dict[str, str] | None = None,
        priority: int = 0,
        data_parallel_rank: int | None = None,
        session_id: str | None = None,
        kv_hints: Any = None,
        reasoning_ended: bool | None = None,
        reasoning_parser_kwargs: dict[str, Any] | None = None,
    ):
        self.calls += 1
        self.received.append(trace_headers)
        # vllm.tracing.otel.extract_trace_context: W3C only, and only when headers exist.
        ctx = TraceContextTextMapPropagator().extract(trace_headers) if trace_headers else None
        span = self.tracer.start_span("llm_request", context=ctx, kind=SpanKind.SERVER)
        delta = sampling_params.output_kind == RequestOutputKind.DELTA
        queued, scheduled, first, per_token = self.clock
        metrics = stats(queued_ts=queued, scheduled_ts=scheduled, num_generation_tokens=0)
        self.metrics.append(metrics)
        ids = {i: [] for i in range(self.n)}
        try:
            for step in range(self.tokens):
                if self.fail_after is not None and step >= self.fail_after:
                    raise RuntimeError("engine exploded")
                await asyncio.sleep(self.step_s)
                last = step == self.tokens - 1
                if step == 0:
                    metrics.first_token_ts = first
                    metrics.first_token_latency = 0.6
                metrics.last_token_ts = first + per_token * step
                outs = []
                for i in range(self.n):
                    ids[i].append(10 * i + step)
                    outs.append(
                        CompletionOutput(
                            index=i,
                            text="x" if delta else "x" * (step + 1),
                            token_ids=[ids[i][-1]] if delta else list(ids[i]),
                            cumulative_logprob=None,
                            logprobs=None,
                            finish_reason=("length" if i else "stop") if last else None,
                        )
                    )
                if sampling_params.output_kind == RequestOutputKind.FINAL_ONLY and not last:
                    continue
                yield RequestOutput(
                    request_id=request_id,
                    prompt=prompt if isinstance(prompt, str) else None,
                    prompt_token_ids=[1, 2, 3, 4, 5],
                    prompt_logprobs=None,
                    outputs=outs,
                    finished=last,
                    metrics=metrics,
                    num_cached_tokens=2,
                )
        except (asyncio.CancelledError, GeneratorExit):
            self.aborted.append(request_id)  # AsyncLLM.generate aborts the request here
            raise
        finally:
            span.end()


async def consume(engine: Any, *args: Any, **kwargs: Any) -> list[Any]:
    return [out async for out in engine.generate(*args, **kwargs)]


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


@pytest.fixture(autouse=True)
def _fresh_warnings():
    V._reset_warnings()
    yield
    V._reset_warnings()


# --- trace_headers ---
def test_trace_headers_name_the_current_span_and_extract_to_a_child(rollout_env):
    tracer = rollout_env.tracer_provider.get_tracer("t")
    with tracer.start_as_current_span("outer") as span:
        headers = V.trace_headers()
    sc = span.get_span_context()
    m = TRACEPARENT.match(headers["traceparent"])
    assert m, headers
    assert m.group(1) == format(sc.trace_id, "032x")
    assert m.group(2) == format(sc.span_id, "016x")
    assert int(m.group(3), 16) & 1  # the sampled flag travels
    # the receiving side: the standard W3C extraction yields a parent for a child span
    ctx = propagate.extract(headers)
    child = tracer.start_span("llm_request", context=ctx)
    child.end()
    assert child.parent.span_id == sc.span_id
    assert child.context.trace_id == sc.trace_id
    # an explicit context wins over the current one
    assert V.trace_headers(trace.set_span_in_context(span)) == headers
    assert V.trace_headers() == {}  # no span: nothing


class _CustomOnly(TextMapPropagator):
    def extract(self, carrier, context=None, getter=None):
        return context or Context()

    def inject(self, carrier, context=None, setter=None):
        span = trace.get_current_span(context)
        if span.get_span_context().is_valid:
            carrier["x-custom-trace"] = format(span.get_span_context().trace_id, "032x")

    @property
    def fields(self):
        return {"x-custom-trace"}


def test_trace_headers_always_w3c_plus_the_global_propagators_fields(rollout_env):
    old = propagate.get_global_textmap()
    propagate.set_global_textmap(CompositePropagator([_CustomOnly()]))
    try:
        tracer = rollout_env.tracer_provider.get_tracer("t")
        ctx = baggage.set_baggage("k", "v")
        with tracer.start_as_current_span("outer", context=ctx) as span:
            headers = V.trace_headers()
    finally:
        propagate.set_global_textmap(old)
    tid = format(span.get_span_context().trace_id, "032x")
    assert headers["x-custom-trace"] == tid
    assert TRACEPARENT.match(headers["traceparent"]).group(1) == tid
    assert "baggage" not in headers  # the global propagator (custom only) decides that


# --- the traced stream inside a trajectory ---
async def test_generate_span_in_trajectory_parents_vllms_llm_request(rollout_env):
    engine = V.wrap_generate(FakeAsyncLLM(rollout_env.tracer_provider))
    sp = SamplingParams(max_tokens=64, temperature=0.5, top_p=0.9)
    async with rollout_env.tracer.trajectory(env="gsm8k", model="qwen-test") as traj:
        outs = await consume(engine, "2+2?", sp, "req-1")
        outs2 = await consume(engine, "and 3+3?", sp, request_id="req-2")
    assert len(outs) == len(outs2) == 3
    (root,) = rollout_env.roots()
    gens = rollout_env.spans(A.SPAN_GENERATE)
    assert [s.parent.span_id for s in gens] == [root.context.span_id] * 2
    g = gens[0]
    a = attrs(g)
    assert a[A.PHASE] == A.PHASE_LLM and a[A.TURN] == 0 and attrs(gens[1])[A.TURN] == 1
    assert a[A.GEN_AI_REQUEST_MODEL] == "qwen-test"  # the trajectory's model wins
    assert a[A.GEN_AI_OPERATION_NAME] == "text_completion" and a[A.GEN_AI_PROVIDER_NAME] == "vllm"
    assert A.GEN_AI_SYSTEM not in a  # the deprecated name only under the opt-in
    assert a[A.GEN_AI_REQUEST_MAX_TOKENS] == 64
    assert a[A.GEN_AI_REQUEST_TEMPERATURE] == 0.5 and a[A.GEN_AI_REQUEST_TOP_P] == 0.9
    assert a[A.VLLM_REQUEST_ID] == "req-1"
    assert a[A.GEN_AI_USAGE_INPUT_TOKENS] == 5
    assert a[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 3
    assert a[A.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert a[A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 2
    assert g.status.status_code is StatusCode.UNSET and A.GENERATE_CLOSED_EARLY not in a
    # the header the engine got names the generate span, and extracts to its child
    tp = engine.received[0]["traceparent"]
    m = TRACEPARENT.match(tp)
    assert m.group(1) == traj.trace_id == format(g.context.trace_id, "032x")
    assert m.group(2) == format(g.context.span_id, "016x")
    reqs = rollout_env.spans("llm_request")
    assert [r.parent.span_id for r in reqs] == [s.context.span_id for s in gens]
    assert all(r.context.trace_id == root.context.trace_id for r in reqs)
    # the generate span is not left current in the caller's context between items
    assert trace.get_current_span() is trace.INVALID_SPAN
    bd = rollout_env.breakdowns[0]
    assert bd.turns == 2 and bd.band("llm") > 0


async def test_inside_an_open_generate_phase_the_call_reuses_it(rollout_env):
    # The user's traj.generate() block (or the SkyRL instrumentor around its client)
    # already is the call: no second span, no second turn, headers name the outer span.
    engine = V.wrap_generate(FakeAsyncLLM(rollout_env.tracer_provider))
    async with rollout_env.tracer.trajectory(env="gsm8k", model="qwen-test") as traj:
        for turn in range(2):
            async with traj.generate():
                outs = await consume(engine, f"turn {turn}", SamplingParams(), f"r{turn}")
    assert len(outs) == 3
    gens = rollout_env.spans(A.SPAN_GENERATE)
    assert len(gens) == 2 and [attrs(g)[A.TURN] for g in gens] == [0, 1]
    assert attrs(gens[0])[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 3  # usage recorded on the outer
    m = TRACEPARENT.match(engine.received[0]["traceparent"])
    assert m.group(2) == format(gens[0].context.span_id, "016x")
    reqs = rollout_env.spans("llm_request")
    assert [r.parent.span_id for r in reqs] == [g.context.span_id for g in gens]
    assert rollout_env.breakdowns[0].turns == 2


async def test_generate_span_current_context_not_leaked_between_items(rollout_env):
    engine = V.wrap_generate(FakeAsyncLLM(rollout_env.tracer_provider, tokens=3))
    async with rollout_env.tracer.trajectory() as traj:
        seen = []
        async for _ in engine.generate("p", SamplingParams(), "r"):
            seen.append(trace.get_current_span())
    assert all(s is traj.span for s in seen)


async def test_callers_headers_are_merged_ours_replace_w3c(rollout_env):
    fake = FakeAsyncLLM(rollout_env.tracer_provider)
    engine = V.wrap_generate(fake)
    other = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    caller = {"Traceparent": other, "tracestate": "x=1", "x-request-source": "grader"}
    async with rollout_env.tracer.trajectory():
        await consume(engine, "p", SamplingParams(), "r", trace_headers=caller)
    got = fake.received[0]
    (g,) = rollout_env.spans(A.SPAN_GENERATE)
    assert got["x-request-source"] == "grader"
    assert "Traceparent" not in got and "tracestate" not in got
    assert TRACEPARENT.match(got["traceparent"]).group(2) == format(g.context.span_id, "016x")
    assert caller["Traceparent"] == other  # the caller's dict is not modified


async def test_engine_model_and_n_when_trajectory_has_no_model(rollout_env):
    fake = FakeAsyncLLM(rollout_env.tracer_provider, n=2)
    engine = V.wrap_generate(fake)
    async with rollout_env.tracer.trajectory():
        await consume(engine, "p", SamplingParams(n=2), "r")
    a = attrs(rollout_env.spans(A.SPAN_GENERATE)[0])
    assert a[A.GEN_AI_REQUEST_MODEL] == "tiny-qwen"
    assert a[A.VLLM_REQUEST_N] == 2
    assert a[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 6  # sum over the two completions
    assert a[A.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop", "length")  # by index


@pytest.mark.parametrize("kind", ["CUMULATIVE", "DELTA", "FINAL_ONLY"])
async def test_output_tokens_in_each_output_kind(rollout_env, kind):
    engine = V.wrap_generate(FakeAsyncLLM(rollout_env.tracer_provider, tokens=4, n=2))
    sp = SamplingParams(n=2, output_kind=getattr(RequestOutputKind, kind))
    async with rollout_env.tracer.trajectory():
        outs = await consume(engine, "p", sp, "r")
    assert len(outs) == (1 if kind == "FINAL_ONLY" else 4)
    a = attrs(rollout_env.spans(A.SPAN_GENERATE)[0])
    assert a[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 8
    assert a[A.GEN_AI_USAGE_INPUT_TOKENS] == 5


async def test_engine_timings_use_one_clock_at_a_time(rollout_env):
    engine = V.wrap_generate(FakeAsyncLLM(rollout_env.tracer_provider, tokens=3))
    async with rollout_env.tracer.trajectory():
        await consume(engine, "p", SamplingParams(), "r")
    a = attrs(rollout_env.spans(A.SPAN_GENERATE)[0])
    assert a[A.VLLM_TIME_IN_QUEUE] == pytest.approx(0.25)
    assert a[A.VLLM_TIME_IN_PREFILL] == pytest.approx(0.25)
    assert a[A.VLLM_TIME_IN_DECODE] == pytest.approx(0.25)
    assert a[A.VLLM_TIME_IN_INFERENCE] == pytest.approx(0.5)
    assert a[A.VLLM_TIME_TO_FIRST_TOKEN] == pytest.approx(0.6)
    # arrival (wall clock, ~1.8e9) is never mixed with the monotonic timestamps
    latencies = [v for k, v in a.items() if k.startswith("gen_ai.latency.")]
    assert latencies and all(0 <= v < 10 for v in latencies)


def test_engine_timings_skip_unreached_timestamps():
    # aborted while queued: scheduled/first/last still 0.0 -> nothing but what is known
    s = stats(queued_ts=5000.0)
    assert engine_timings(s) == {}
    s = stats(queued_ts=5000.0, scheduled_ts=5001.5, num_preemptions=2)
    assert engine_timings(s) == {A.VLLM_TIME_IN_QUEUE: 1.5, A.VLLM_NUM_PREEMPTIONS: 2}
    assert engine_timings(None) == {}
    assert engine_timings(SimpleNamespace(arrival_time=time.time())) == {}


async def test_positional_trace_headers_of_an_older_signature(rollout_env):
    class OldEngine:
        def __init__(self):
            self.inner = FakeAsyncLLM(rollout_env.tracer_provider)

        def generate(self, prompt, sampling_params, request_id, lora_request=None,
                     trace_headers=None, priority=0):  # fmt: skip
            return self.inner.generate(prompt, sampling_params, request_id,
                                       trace_headers=trace_headers)  # fmt: skip

    old = OldEngine()
    V.wrap_generate(old)
    async with rollout_env.tracer.trajectory():
        await consume(old, "p", SamplingParams(), "r", None, {"x-a": "1"}, 0)
    got = old.inner.received[0]
    assert got["x-a"] == "1" and TRACEPARENT.match(got["traceparent"])


# --- early exit, cancellation, errors ---
async def test_consumer_closing_early_ends_span_and_aborts(rollout_env):
    fake = FakeAsyncLLM(rollout_env.tracer_provider, tokens=5)
    engine = V.wrap_generate(fake)
    async with rollout_env.tracer.trajectory() as traj:
        stream = engine.generate("p", SamplingParams(), "r-early")
        async for _ in stream:
            break
        await stream.aclose()
    (g,) = rollout_env.spans(A.SPAN_GENERATE)
    a = attrs(g)
    assert a[A.GENERATE_CLOSED_EARLY] is True
    assert g.status.status_code is StatusCode.UNSET  # the consumer's choice, not an error
    assert a[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 1
    assert A.GEN_AI_RESPONSE_FINISH_REASONS not in a
    assert fake.aborted == ["r-early"]  # the engine's stream was closed, not left to GC
    assert rollout_env.spans("llm_request")[0].end_time <= g.end_time
    assert traj.status == A.STATUS_OK


async def test_stream_dropped_without_aclose_still_ends_span(rollout_env):
    fake = FakeAsyncLLM(rollout_env.tracer_provider, tokens=5)
    engine = V.wrap_generate(fake)
    async with rollout_env.tracer.trajectory():
        stream = engine.generate("p", SamplingParams(), "r-gc")
        await stream.__anext__()
        del stream
        gc.collect()
        for _ in range(5):  # the loop's async-generator finalizer runs aclose() in a task
            await asyncio.sleep(0)
    (g,) = rollout_env.spans(A.SPAN_GENERATE)
    assert attrs(g)[A.GENERATE_CLOSED_EARLY] is True
    assert fake.aborted == ["r-gc"]


async def test_break_after_final_output_is_not_early(rollout_env):
    engine = V.wrap_generate(FakeAsyncLLM(rollout_env.tracer_provider, tokens=2))
    async with rollout_env.tracer.trajectory():
        stream = engine.generate("p", SamplingParams(), "r")
        async for out in stream:
            if out.finished:
                break
        await stream.aclose()
    a = attrs(rollout_env.spans(A.SPAN_GENERATE)[0])
    assert A.GENERATE_CLOSED_EARLY not in a and a[A.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)


async def test_cancelled_task_records_cancellation(rollout_env):
    fake = FakeAsyncLLM(rollout_env.tracer_provider, tokens=50, step_s=0.01)
    engine = V.wrap_generate(fake)

    async def rollout():
        async with rollout_env.tracer.trajectory():
            await consume(engine, "p", SamplingParams(), "r-cancel")

    task = asyncio.create_task(rollout())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (g,) = rollout_env.spans(A.SPAN_GENERATE)
    assert g.status.status_code is StatusCode.ERROR
    assert attrs(g)[A.ERROR_TYPE].endswith("CancelledError")
    assert g.end_time is not None
    assert fake.aborted == ["r-cancel"]
    (root,) = rollout_env.roots()
    assert attrs(root)[A.STATUS] == A.STATUS_CANCELLED


async def test_engine_error_is_recorded_and_reraised(rollout_env):
    engine = V.wrap_generate(FakeAsyncLLM(rollout_env.tracer_provider, fail_after=1))
    with pytest.raises(RuntimeError, match="exploded"):
        async with rollout_env.tracer.trajectory():
            await consume(engine, "p", SamplingParams(), "r")
    (g,) = rollout_env.spans(A.SPAN_GENERATE)
    assert g.status.status_code is StatusCode.ERROR
    assert attrs(g)[A.ERROR_TYPE] == "RuntimeError"
    assert attrs(g)[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 1  # what streamed before the error


# --- outside a trajectory ---
async def test_outside_a_trajectory_passes_through(rollout_env):
    fake = FakeAsyncLLM(rollout_env.tracer_provider)
    engine = V.wrap_generate(fake, tracer_provider=rollout_env.tracer_provider)
    outs = await consume(engine, "p", SamplingParams(), "r")
    assert len(outs) == 3
    assert fake.received == [None]
    assert rollout_env.spans(A.SPAN_GENERATE) == []


async def test_standalone_span_outside_a_trajectory(rollout_env):
    fake = FakeAsyncLLM(rollout_env.tracer_provider)
    engine = V.wrap_generate(fake, tracer_provider=rollout_env.tracer_provider, standalone=True)
    await consume(engine, "p", SamplingParams(), "r1")
    tracer = rollout_env.tracer_provider.get_tracer("t")
    with tracer.start_as_current_span("caller") as caller:
        pass  # ended; its id still travels in headers given explicitly
    await consume(engine, "p", SamplingParams(), "r2", trace_headers=V.trace_headers(
        trace.set_span_in_context(caller)))  # fmt: skip
    g1, g2 = rollout_env.spans(A.SPAN_GENERATE)
    assert g1.kind is SpanKind.CLIENT and g1.parent is None
    assert A.PHASE not in attrs(g1)
    assert attrs(g1)[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 3
    assert g2.parent.span_id == caller.context.span_id  # the caller's traceparent parents it
    reqs = rollout_env.spans("llm_request")
    assert [r.parent.span_id for r in reqs] == [g1.context.span_id, g2.context.span_id]
    assert rollout_env.breakdowns == []


async def test_engine_without_tracing_gets_no_headers_and_one_hint(rollout_env, caplog):
    fake = FakeAsyncLLM(rollout_env.tracer_provider, otlp_traces_endpoint=None)
    engine = V.wrap_generate(fake)
    caplog.set_level(logging.INFO, logger="otel_rollout")
    async with rollout_env.tracer.trajectory():
        await consume(engine, "p", SamplingParams(), "r1")
        await consume(engine, "p", SamplingParams(), "r2", trace_headers={"x": "1"})
    assert fake.received == [None, {"x": "1"}]  # vLLM would drop them and warn
    hints = [r for r in caplog.records if "--otlp-traces-endpoint" in r.getMessage()]
    assert len(hints) == 1 and hints[0].levelno == logging.INFO
    assert len(rollout_env.spans(A.SPAN_GENERATE)) == 2


# --- vLLM's global provider ---
def vllm_like_provider() -> TracerProvider:
    """What vllm.tracing.otel.init_otel_tracer builds (resource attributes included)."""
    return TracerProvider(
        resource=Resource.create(
            {"vllm.instrumenting_module_name": "vllm.llm_engine", "vllm.process_id": "1"}
        )
    )


@pytest.fixture
def vllm_global(monkeypatch):
    """vLLM's in-process tracing: its provider global, its endpoint written to os.environ."""
    provider = vllm_like_provider()
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://vllm-collector:4317")
    yield provider
    provider.shutdown()


async def test_warns_once_when_vllm_owns_the_global_provider(rollout_env, vllm_global, caplog):
    caplog.set_level(logging.WARNING, logger="otel_rollout")
    engine = V.wrap_generate(FakeAsyncLLM(rollout_env.tracer_provider))
    for _ in range(3):
        async with rollout_env.tracer.trajectory():
            await consume(engine, "p", SamplingParams(), "r")
    warns = [r for r in caplog.records if "vLLM's in-process tracing" in r.getMessage()]
    assert len(warns) == 1
    msg = warns[0].getMessage()
    assert "http://vllm-collector:4317" in msg
    assert "different provider" in msg and "--otlp-traces-endpoint" in msg
    assert "otel_rollout.configure()" in msg
    # nothing fought: the global provider is still vLLM's, our spans still ours
    assert trace.get_tracer_provider() is vllm_global
    assert len(rollout_env.spans(A.SPAN_GENERATE)) == 3


def test_warning_when_our_spans_would_go_to_vllms_provider(vllm_global):
    msg = V.vllm_provider_warning(trace.get_tracer("x"))
    assert msg is not None and "no BreakdownProcessor" in msg
    other = TracerProvider().get_tracer("x")
    assert "different provider" in V.vllm_provider_warning(other)


def test_no_warning_when_the_global_provider_is_not_vllms(rollout_env):
    assert V.vllm_provider_warning(rollout_env.tracer_provider.get_tracer("x")) is None


# --- instrumentor ---
async def test_instrumentor_idempotent_and_restores(rollout_env):
    original = FakeAsyncLLM.__dict__["generate"]
    inst = V.VLLMInstrumentor()
    try:
        inst.instrument(engine_classes=[FakeAsyncLLM], tracer_provider=rollout_env.tracer_provider)
        wrapped = FakeAsyncLLM.__dict__["generate"]
        inst.instrument(engine_classes=[FakeAsyncLLM])  # a no-op: already instrumented
        assert V.VLLMInstrumentor() is inst
        assert FakeAsyncLLM.__dict__["generate"] is wrapped
        engine = FakeAsyncLLM(rollout_env.tracer_provider)
        V.wrap_generate(engine)  # instance wrap over class wrap: still one span per call
        V.wrap_generate(engine)
        async with rollout_env.tracer.trajectory():
            await consume(engine, "p", SamplingParams(), "r")
            await consume(FakeAsyncLLM(rollout_env.tracer_provider), "p", SamplingParams(), "s")
        gens = rollout_env.spans(A.SPAN_GENERATE)
        assert len(gens) == 2 and len(rollout_env.spans("llm_request")) == 2
        assert engine.received[0]["traceparent"]
        V.unwrap_generate(engine)
        assert "generate" not in engine.__dict__
    finally:
        inst.uninstrument()
        inst.uninstrument()
    assert FakeAsyncLLM.__dict__["generate"] is original
    assert not inst.is_instrumented_by_opentelemetry
    engine = FakeAsyncLLM(rollout_env.tracer_provider)
    async with rollout_env.tracer.trajectory():
        await consume(engine, "p", SamplingParams(), "r")
    assert len(rollout_env.spans(A.SPAN_GENERATE)) == 2  # no new generate span
    assert engine.received == [None]


async def test_instrumented_subclass_without_own_generate_is_restored():
    class Sub(FakeAsyncLLM):
        pass

    env = make_test_env()
    inst = V.VLLMInstrumentor()
    try:
        inst.instrument(engine_classes=[Sub, Sub])
        assert "generate" in Sub.__dict__
        async with env.tracer.trajectory():
            await consume(Sub(env.tracer_provider), "p", SamplingParams(), "r")
        assert len(env.spans(A.SPAN_GENERATE)) == 1
    finally:
        inst.uninstrument()
        env.shutdown()
    assert "generate" not in Sub.__dict__


def test_instrumentor_without_vllm_names_the_extra():
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"otel-rollout\[vllm\]"):
            V._vllm_engine_classes()
    else:
        pytest.skip("vllm is installed here; the missing-vllm message is not reachable")


# --- vLLM's real types ---
async def test_real_vllm_types(rollout_env):
    pytest.importorskip(
        "vllm", reason="vllm (with torch) is not installed here: real RequestOutput not checked"
    )
    from vllm.v1.engine.async_llm import AsyncLLM

    assert REAL_VLLM
    # the fake's signature is AsyncLLM.generate's (names, kinds, order)
    import inspect

    real = [(p.name, p.kind) for p in inspect.signature(AsyncLLM.generate).parameters.values()]
    fake = [(p.name, p.kind) for p in inspect.signature(FakeAsyncLLM.generate).parameters.values()]
    assert fake == real
    engine = V.wrap_generate(FakeAsyncLLM(rollout_env.tracer_provider, n=2))
    sp = SamplingParams(n=2, max_tokens=7, output_kind=RequestOutputKind.DELTA)
    async with rollout_env.tracer.trajectory():
        outs = await consume(engine, "p", sp, "r")
    assert all(isinstance(o, RequestOutput) for o in outs)
    a = attrs(rollout_env.spans(A.SPAN_GENERATE)[0])
    assert a[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 6 and a[A.GEN_AI_REQUEST_MAX_TOKENS] == 7
    assert a[A.VLLM_TIME_IN_QUEUE] == pytest.approx(0.25)


def test_real_vllm_extracts_our_traceparent(rollout_env):
    pytest.importorskip("vllm", reason="vllm is not installed here: its extraction not checked")
    from vllm.tracing.otel import extract_trace_context
    from vllm.tracing.utils import extract_trace_headers

    tracer = rollout_env.tracer_provider.get_tracer("t")
    with tracer.start_as_current_span("generate") as span:
        headers = V.trace_headers()
    ctx = extract_trace_context(extract_trace_headers(headers))
    assert trace.get_current_span(ctx).get_span_context().span_id == span.context.span_id


_ORDER_SCRIPT = r"""
import asyncio, json, logging, sys, time
from types import SimpleNamespace
from opentelemetry import trace
from vllm.tracing import SpanKind, extract_trace_context, init_tracer, instrument_manual
from otel_rollout.integrations.vllm import wrap_generate
from otel_rollout.testing import make_test_env
from otel_rollout.testing.receiver import OTLPReceiver

order = sys.argv[1]
receiver = OTLPReceiver().start()
env = make_test_env()
logs = []
class Capture(logging.Handler):
    def emit(self, record):
        logs.append(record.getMessage())
logging.getLogger("otel_rollout").addHandler(Capture())
if order == "ours-first":
    trace.set_tracer_provider(env.tracer_provider)
init_tracer("vllm.llm_engine", receiver.grpc_endpoint)  # what AsyncLLM.__init__ does

class Engine:  # the output processor's side of a request, with vLLM's own functions
    observability_config = SimpleNamespace(otlp_traces_endpoint=receiver.grpc_endpoint)
    async def generate(self, prompt, sampling_params, request_id, *, trace_headers=None):
        arrival = time.time_ns()
        await asyncio.sleep(0.01)
        instrument_manual(span_name="llm_request", start_time=arrival,
                          context=extract_trace_context(trace_headers), kind=SpanKind.SERVER)
        c = SimpleNamespace(index=0, token_ids=[7], finish_reason="stop", text="")
        yield SimpleNamespace(prompt_token_ids=[1, 2], outputs=[c], finished=True)

async def main():
    engine = wrap_generate(Engine())
    async with env.tracer.trajectory():
        async for _ in engine.generate("p", SimpleNamespace(n=1), "r1"):
            pass
asyncio.run(main())
trace.get_tracer_provider().force_flush()
(gen,) = env.spans("generate")
if order == "ours-first":
    reqs = [[format(s.context.trace_id, "032x"), format(s.parent.span_id, "016x")]
            for s in env.spans("llm_request")]
else:
    receiver.wait_for(lambda r: any(s.name == "llm_request" for s in r.spans()), 10)
    reqs = [[s.trace_id, s.parent_span_id] for s in receiver.spans() if s.name == "llm_request"]
receiver.stop()
print(json.dumps({
    "gen": [format(gen.context.trace_id, "032x"), format(gen.context.span_id, "016x")],
    "reqs": reqs,
    "warned": [m for m in logs if "vLLM's in-process tracing" in m],
}))
"""


@pytest.mark.parametrize("order", ["ours-first", "vllm-first"])
def test_real_vllm_tracer_init_order(order):
    """vLLM's own init_tracer, extract_trace_context and instrument_manual, both orders."""
    pytest.importorskip("vllm", reason="vllm is not installed here: its tracer setup not run")
    import json
    import os

    proc = subprocess.run(
        [sys.executable, "-c", _ORDER_SCRIPT, order],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["reqs"] == [out["gen"]]  # vLLM's llm_request is the generate span's child
    if order == "ours-first":
        assert out["warned"] == []  # vLLM's spans ride otel-rollout's provider: one pipeline
    else:
        assert len(out["warned"]) == 1 and "different provider" in out["warned"][0]


# --- the GPU check script ---
def test_gpu_check_script_help_runs_without_vllm():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "vllm_gpu_check.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--otlp-traces-endpoint" in proc.stdout and "PASS" in proc.stdout


# --- suppression, registration ---
async def test_suppressed_instrumentation_passes_calls_through_untouched(rollout_env):
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    engine = V.wrap_generate(FakeAsyncLLM(rollout_env.tracer_provider), standalone=True)
    async with rollout_env.tracer.trajectory():
        with suppress_instrumentation():
            outs = await consume(engine, "p", SamplingParams(), "r")
        await consume(engine, "p", SamplingParams(), "s")
    assert len(outs) == 3
    assert engine.received[0] is None  # no trace_headers added while suppressed
    assert engine.received[1]["traceparent"]
    assert len(rollout_env.spans(A.SPAN_GENERATE)) == 1


def test_instrumentor_is_registered_under_the_opentelemetry_entry_point():
    import importlib
    import tomllib

    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    target = eps["opentelemetry_instrumentor"]["vllm"]
    module, _, name = target.partition(":")
    assert getattr(importlib.import_module(module), name) is V.VLLMInstrumentor
    assert V.VLLMInstrumentor().instrumentation_dependencies()  # checked by auto-instrument


def test_public_names_import_as_before():
    for name in (
        "VLLMInstrumentor", "trace_headers", "unwrap_generate", "vllm_provider_warning",
        "wrap_generate", "W3C_HEADERS",
    ):  # fmt: skip
        assert hasattr(V, name), name
    # the toolkit's and the vocabulary's names are public there only
    for name in ("engine_timings", "VLLM_TIME_IN_QUEUE", "CLOSED_EARLY", "OPERATION"):
        assert not hasattr(V, name), name


# --- the engine split of llm time ---
async def test_breakdown_splits_llm_into_queue_prefill_decode_and_client(rollout_env):
    # engine times 1 ms queue, 2 ms prefill, 4 ms decode per call; each call sleeps 12 ms,
    # so the client remainder is positive whatever the machine's load
    clock = (10.0, 10.001, 10.003, 0.002)
    engine = V.wrap_generate(FakeAsyncLLM(rollout_env.tracer_provider, step_s=0.004, clock=clock))
    async with rollout_env.tracer.trajectory(env="gsm8k"):
        for turn in range(2):
            await consume(engine, f"turn {turn}", SamplingParams(), f"r{turn}")
    (bd,) = rollout_env.breakdowns
    want = [0, 0, 0]
    for m in engine.metrics:  # the RequestOutput.metrics the stream carried
        want[0] += round((m.scheduled_ts - m.queued_ts) * 1e9)
        want[1] += round((m.first_token_ts - m.scheduled_ts) * 1e9)
        want[2] += round((m.last_token_ts - m.first_token_ts) * 1e9)
    n, w = bd.nanos, bd.waits_nanos
    assert [w["llm_queue"], w["llm_prefill"], w["llm_decode"]] == want
    assert w["llm_client"] == n["llm"] - sum(want) > 0
    assert bd.llm_queue == pytest.approx(0.002) and bd.llm_decode == pytest.approx(0.008)
    # sub-parts never change the bands
    assert sum(n[b] for b in A.ALL_BANDS) == n["e2e"]
    root = rollout_env.spans(A.SPAN_TRAJECTORY)[0]
    assert attrs(root)["rollout.breakdown.llm_queue"] == bd.llm_queue


async def test_no_engine_timings_leave_the_split_unknown(rollout_env):
    async with rollout_env.tracer.trajectory() as traj, traj.generate():
        pass
    (bd,) = rollout_env.breakdowns
    assert bd.llm_queue is None and bd.llm_client is None and "llm_queue" not in bd.waits_nanos
