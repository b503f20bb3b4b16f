"""The handles take what users plausibly pass, never raise into the agent loop, never leak
a context, and keep completion text and free-form statuses where they belong."""

from __future__ import annotations

import asyncio
import logging
import math

import pytest
from opentelemetry._logs import _internal as _logs_internal
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs import export as logs_export
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExportResult
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_rollout
from otel_rollout import attributes as A
from otel_rollout._api import phase_scope as _phase_scope
from otel_rollout._base import errors as _errors
from otel_rollout._export.guarded import guarded_metric_exporter
from otel_rollout._export.log_file import EVENT_NAME_ATTRIBUTE
from otel_rollout.testing.receiver import OTLPReceiver


def only(env, name):
    (span,) = env.spans(name)
    return span


# --- what users pass ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "recorded"),
    [(None, None), ("1.0 (correct)", 1.0), ("n/a", None), (math.nan, None), (True, 1.0), (2, 2.0)],
)
def test_set_reward_takes_what_users_pass(rollout_env, value, recorded):
    with rollout_env.tracer.trajectory() as t:
        assert t.set_reward(value) == recorded
    (root,) = rollout_env.roots()
    assert root.attributes.get(A.REWARD) == recorded
    assert len(rollout_env.events(A.EVENT_EVALUATION_RESULT)) == (recorded is not None)
    assert not root.events  # a log record, not a span event


def test_bad_values_warn_once_per_kind(rollout_env, caplog, monkeypatch):
    monkeypatch.setattr(_errors, "_seen", set())
    caplog.set_level(logging.WARNING, logger="otel_rollout")
    for _ in range(3):
        with rollout_env.tracer.trajectory() as t, t.generate() as g:
            t.set_reward("not a number at all")
            g.record(output_tokens="n/a")
    texts = [r.getMessage() for r in caplog.records]
    assert sum("not a number" in m and "reward" in m for m in texts) == 1
    assert sum("output_tokens" in m for m in texts) == 1


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"input_tokens": [212, 198]}, {A.GEN_AI_USAGE_INPUT_TOKENS: 410}),  # n > 1 samples
        ({"output_tokens": math.nan}, {}),
        ({"output_tokens": "n/a"}, {}),
        ({"output_tokens": "17"}, {A.GEN_AI_USAGE_OUTPUT_TOKENS: 17}),
        ({"output_tokens": 12.0}, {A.GEN_AI_USAGE_OUTPUT_TOKENS: 12}),
        ({"output_tokens": -3}, {}),
        ({"finish_reasons": "stop"}, {A.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",)}),
        ({"finish_reasons": ["stop", None, "length"]},
         {A.GEN_AI_RESPONSE_FINISH_REASONS: ("stop", "length")}),
        ({"finish_reason": "length"}, {A.GEN_AI_RESPONSE_FINISH_REASONS: ("length",)}),
        ({"temperature": 0.5, "unknown_keyword": [1, "a"]},
         {A.GEN_AI_REQUEST_TEMPERATURE: 0.5, "unknown_keyword": ("1", "a")}),
    ],
)  # fmt: skip
def test_generation_record_converts_or_drops(rollout_env, kwargs, expected):
    with rollout_env.tracer.trajectory() as t, t.generate() as g:
        g.record(**kwargs)
    attrs = only(rollout_env, A.SPAN_GENERATE).attributes
    for key in (A.GEN_AI_USAGE_INPUT_TOKENS, A.GEN_AI_USAGE_OUTPUT_TOKENS):
        assert attrs.get(key) == expected.get(key)
    for key, value in expected.items():
        got = attrs[key]
        assert (tuple(got) if isinstance(got, tuple | list) else got) == value


def test_numpy_values_are_plain_attributes(rollout_env):
    np = pytest.importorskip("numpy")
    with rollout_env.tracer.trajectory() as t, t.generate(max_tokens=np.int64(64)) as g:
        g.record(input_tokens=np.array([3, 4]), output_tokens=np.int32(5))
        t.set_reward(np.float32(0.25))
    attrs = only(rollout_env, A.SPAN_GENERATE).attributes
    assert attrs[A.GEN_AI_REQUEST_MAX_TOKENS] == 64
    assert (attrs[A.GEN_AI_USAGE_INPUT_TOKENS], attrs[A.GEN_AI_USAGE_OUTPUT_TOKENS]) == (7, 5)
    assert rollout_env.roots()[0].attributes[A.REWARD] == 0.25


def test_a_phase_scope_entered_again_opens_a_span_each_time(rollout_env):
    with rollout_env.tracer.trajectory() as t:
        scope = t.generate()
        for _ in range(3):
            with scope as g:
                g.record(output_tokens=1)
    gens = rollout_env.spans(A.SPAN_GENERATE)
    assert [s.attributes[A.TURN] for s in gens] == [0, 1, 2]
    assert t.breakdown.turns == 3


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


def test_an_exception_whose_str_raises_still_ends_phase_and_root(rollout_env):
    with pytest.raises(_Unprintable), rollout_env.tracer.trajectory() as t, t.env_step():
        raise _Unprintable
    step = only(rollout_env, A.SPAN_ENV_STEP)
    (root,) = rollout_env.roots()
    assert step.end_time is not None and root.end_time is not None
    assert step.attributes[A.ERROR_TYPE].endswith("_Unprintable")
    assert root.attributes[A.STATUS] == A.STATUS_ERROR
    assert t.breakdown is not None and t.breakdown.env_steps == 1


# --- named and per-step rewards ------------------------------------------------------------
def evaluations(env):
    """The evaluation events' attributes (less ``event.name``, an SDK before 1.35's)."""
    return [{k: v for k, v in r.attributes.items() if k != EVENT_NAME_ATTRIBUTE}
            for r in env.events(A.EVENT_EVALUATION_RESULT)]  # fmt: skip


def test_several_named_rewards_are_evaluation_results(rollout_env, monkeypatch):
    with rollout_env.tracer.trajectory() as t:
        t.set_reward(1.0, label="correct", explanation="matched 42")
        t.set_reward(0.3, name="judge", label="partial")
    (root,) = rollout_env.roots()
    assert root.attributes[A.REWARD] == 1.0
    assert root.attributes[A.REWARD_PREFIX + "judge"] == 0.3
    assert evaluations(rollout_env) == [
        {
            A.GEN_AI_EVALUATION_NAME: "reward",
            A.GEN_AI_EVALUATION_SCORE_VALUE: 1.0,
            A.GEN_AI_EVALUATION_SCORE_LABEL: "correct",
        },
        {
            A.GEN_AI_EVALUATION_NAME: "judge",
            A.GEN_AI_EVALUATION_SCORE_VALUE: 0.3,
            A.GEN_AI_EVALUATION_SCORE_LABEL: "partial",
        },
    ]  # fmt: skip  (no explanation: content capture is off)


def test_explanations_follow_the_content_capture_opt_in(rollout_env, monkeypatch):
    monkeypatch.setenv(A.CAPTURE_CONTENT_ENV, "true")
    with rollout_env.tracer.trajectory() as t:
        t.set_reward(1.0, explanation="matched 42")
    (event,) = evaluations(rollout_env)
    assert event[A.GEN_AI_EVALUATION_EXPLANATION] == "matched 42"


def test_per_step_reward_on_the_env_step_span(rollout_env):
    with rollout_env.tracer.trajectory() as t:
        for r in (0.0, 1.0):
            with t.env_step() as step:
                step.set_reward(r)
    steps = rollout_env.spans(A.SPAN_ENV_STEP)
    assert [s.attributes[A.STEP_REWARD] for s in steps] == [0.0, 1.0]
    records = rollout_env.events(A.EVENT_EVALUATION_RESULT)
    assert [r.span_id for r in records] == [s.context.span_id for s in steps]
    assert A.REWARD not in rollout_env.roots()[0].attributes


def memory_logs():
    """A logger provider and the SDK's in-memory log exporter it exports to."""
    memory = getattr(logs_export, "InMemoryLogRecordExporter", None)  # renamed in 1.39
    exporter = (memory or logs_export.InMemoryLogExporter)()
    provider = LoggerProvider()
    provider.add_log_record_processor(logs_export.SimpleLogRecordProcessor(exporter))
    return provider, exporter


def test_a_reward_is_a_log_record_in_its_spans_context():
    """The evaluation event is a log record with the event name (an ``event.name``
    attribute on SDKs before 1.35), on the tracer's logger provider, carrying the trace
    and span ids of the span the reward is on; the span itself has no event."""
    logger_provider, exporter = memory_logs()
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    tracer = otel_rollout.RolloutTracer(tracer_provider, logger_provider=logger_provider)
    with tracer.trajectory("t") as t:
        t.set_reward(1.0, label="correct")
        with t.env_step() as step:
            step.set_reward(0.5, name="format")
    root, step_span = (
        next(s for s in spans.get_finished_spans() if s.name == n)
        for n in ("trajectory", "env_step")
    )
    assert root.attributes[A.REWARD] == 1.0 and not root.events
    assert step_span.attributes[A.REWARD_PREFIX + "format"] == 0.5 and not step_span.events
    records = [item.log_record for item in exporter.get_finished_logs()]
    assert len(records) == 2
    for record, span, attrs in zip(records, (root, step_span), (
        {A.GEN_AI_EVALUATION_NAME: "reward", A.GEN_AI_EVALUATION_SCORE_VALUE: 1.0,
         A.GEN_AI_EVALUATION_SCORE_LABEL: "correct"},
        {A.GEN_AI_EVALUATION_NAME: "format", A.GEN_AI_EVALUATION_SCORE_VALUE: 0.5},
    ), strict=True):  # fmt: skip
        name = getattr(record, "event_name", None) or record.attributes[EVENT_NAME_ATTRIBUTE]
        assert name == A.EVENT_EVALUATION_RESULT
        assert {k: v for k, v in record.attributes.items() if k != EVENT_NAME_ATTRIBUTE} == attrs
        assert (record.trace_id, record.span_id) == (span.context.trace_id, span.context.span_id)
        assert record.timestamp is not None
    tracer_provider.shutdown()
    logger_provider.shutdown()


def test_without_a_logger_provider_rewards_go_to_the_global_one(monkeypatch):
    provider, exporter = memory_logs()
    monkeypatch.setattr(_logs_internal, "_LOGGER_PROVIDER", provider)
    tracer = otel_rollout.RolloutTracer(TracerProvider())
    with tracer.trajectory("t") as t, t.env_step() as step:
        t.set_reward(1.0)
        step.set_reward(0.5)
        otel_rollout.PhaseHandle(step.span).set_reward(0.25)  # a handle made from a span
    scores = [r.log_record.attributes[A.GEN_AI_EVALUATION_SCORE_VALUE]
              for r in exporter.get_finished_logs()]  # fmt: skip
    assert scores == [1.0, 0.5, 0.25]
    provider.shutdown()


# --- context leaks -----------------------------------------------------------------------------
def test_breaking_out_of_an_async_generator_leaves_no_dead_current_trajectory(rollout_env, caplog):
    caplog.set_level(logging.ERROR)

    async def rollouts():
        async with rollout_env.tracer.trajectory("abandoned") as t:
            async with t.generate():
                pass
            yield 1
            yield 2

    async def main():
        agen = rollouts()
        async for _ in agen:
            break
        del agen  # the event loop closes it, in a task of its own
        for _ in range(3):
            await asyncio.sleep(0)
        seen = otel_rollout.current_trajectory()
        async with rollout_env.tracer.trajectory("next"):
            pass
        return seen

    seen = asyncio.run(main())
    assert seen is None
    roots = {s.attributes[A.TRAJECTORY_ID]: s for s in rollout_env.roots()}
    assert set(roots) == {"abandoned", "next"}
    assert roots["next"].parent is None  # its own trace, not a child of the dead one
    assert roots["next"].context.trace_id != roots["abandoned"].context.trace_id
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_keyboard_interrupt_in_library_code_leaves_nothing_in_flight(rollout_env, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt), rollout_env.tracer.trajectory() as t:
        monkeypatch.setattr(_phase_scope, "_record_exception", interrupted)
        with t.env_step():
            raise ValueError("env failed")
    monkeypatch.undo()
    assert rollout_env.processor.in_flight == 0
    assert only(rollout_env, A.SPAN_ENV_STEP).end_time is not None
    assert len(rollout_env.roots()) == 1 and rollout_env.breakdowns


def test_keyboard_interrupt_while_ending_the_root_still_ends_it(rollout_env, monkeypatch):
    monkeypatch.setattr(
        rollout_env.processor, "finish", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt)
    )
    with pytest.raises(KeyboardInterrupt), rollout_env.tracer.trajectory():
        pass
    assert rollout_env.processor.in_flight == 0
    assert len(rollout_env.roots()) == 1 and len(rollout_env.breakdowns) == 1
    assert otel_rollout.current_trajectory() is None


def test_a_shared_module_level_phase_keeps_both_concurrent_spans(rollout_env):
    llm = otel_rollout.phase("llm")

    async def one(i, gate):
        async with rollout_env.tracer.trajectory(f"t{i}"), llm:
            await gate.wait()

    async def main():
        gate = asyncio.Event()
        tasks = [asyncio.create_task(one(i, gate)) for i in range(2)]
        for _ in range(10):  # every task reaches its gate: loop turns, not time
            await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    gens = rollout_env.spans(A.SPAN_GENERATE)
    assert len(gens) == 2
    roots = {s.context.span_id for s in rollout_env.roots()}
    assert {g.parent.span_id for g in gens} == roots
    assert all(b.turns == 1 for b in rollout_env.breakdowns)


def test_a_shared_scope_object_in_two_tasks_ends_each_tasks_span(rollout_env):
    async def main():
        async with rollout_env.tracer.trajectory() as t:
            scope = t.env_step()
            gates = [asyncio.Event(), asyncio.Event()]

            async def use(i):
                async with scope as step:
                    step.set_attribute("which", i)
                    await gates[i].wait()

            tasks = [asyncio.create_task(use(i)) for i in range(2)]
            for _ in range(10):  # every task reaches its gate: loop turns, not time
                await asyncio.sleep(0)
            gates[0].set()  # the first task exits first
            await tasks[0]
            assert [s.attributes["which"] for s in rollout_env.spans(A.SPAN_ENV_STEP)] == [0]
            gates[1].set()
            await tasks[1]

    asyncio.run(main())
    assert [s.attributes["which"] for s in rollout_env.spans(A.SPAN_ENV_STEP)] == [0, 1]


# --- hygiene -------------------------------------------------------------------------------------
SECRET = "the completion text: 42 apples"


def _exported_text(env) -> str:
    parts = []
    for span in env.spans():
        parts.append(repr(dict(span.attributes)))
        parts.append(str(span.status.description))
        parts.extend(repr(dict(e.attributes)) for e in span.events)
    return "\n".join(parts)


def test_exception_messages_reach_spans_only_with_capture_on(rollout_env, monkeypatch):
    with pytest.raises(ValueError), rollout_env.tracer.trajectory() as t, t.generate():
        raise ValueError(SECRET)
    text = _exported_text(rollout_env)
    assert SECRET not in text and "ValueError" in text
    monkeypatch.setenv(A.CAPTURE_CONTENT_ENV, "true")
    with pytest.raises(ValueError), rollout_env.tracer.trajectory() as t, t.generate():
        raise ValueError(SECRET)
    assert SECRET in _exported_text(rollout_env)


def test_a_failed_batch_keeps_the_message_off_its_span(rollout_env):
    with pytest.raises(ValueError), rollout_env.tracer.batch(step=1):
        with rollout_env.tracer.trajectory():
            pass
        raise ValueError(SECRET)
    text = _exported_text(rollout_env)
    assert SECRET not in text and "ValueError" in text


def test_metric_export_outage_is_logged_when_it_starts_and_when_it_ends(caplog):
    caplog.set_level(logging.DEBUG)
    reader = InMemoryMetricReader()
    MeterProvider(metric_readers=[reader]).get_meter("t").create_counter("c").add(1)
    data = reader.get_metrics_data()
    rx = OTLPReceiver()  # not started yet: the endpoint is down
    exporter = guarded_metric_exporter(
        OTLPMetricExporter(endpoint=f"{rx.http_endpoint}/v1/metrics", timeout=2), target="rx"
    )
    try:
        first = [exporter.export(data) for _ in range(1)]
        n_first = len([r for r in caplog.records if r.levelno >= logging.WARNING])
        rest = [exporter.export(data) for _ in range(5)]
        n_rest = len([r for r in caplog.records if r.levelno >= logging.WARNING])
        assert set(first + rest) == {MetricExportResult.FAILURE}
        assert n_first >= 1 and n_rest == n_first  # nothing more during the outage
        rx.start()
        assert exporter.export(data) is MetricExportResult.SUCCESS
        resumed = [r.getMessage() for r in caplog.records if "resumed" in r.getMessage()]
        assert resumed == ["otel-rollout: metric export to rx resumed after 6 failed exports"]
    finally:
        rx.stop()
        exporter.shutdown()


def test_a_phase_opened_while_another_trajectorys_phase_is_current_stays_in_its_own_trace(
    rollout_env,
):
    tracer = rollout_env.tracer
    with (
        tracer.trajectory("one") as t1,
        tracer.trajectory("two") as t2,
        t1.generate(),
        t2.env_step(),
    ):
        pass
    spans = {s.name: s for s in rollout_env.spans()}
    roots = {s.attributes[A.TRAJECTORY_ID]: s for s in rollout_env.spans(A.SPAN_TRAJECTORY)}
    step = spans[A.SPAN_ENV_STEP]
    assert step.context.trace_id == roots["two"].context.trace_id
    assert step.parent.span_id == roots["two"].context.span_id
