"""GenAI semantic conventions: agent, inference and tool spans; names under the opt-in;
rewards as evaluation results; the accounting and dashboards unchanged by names."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from opentelemetry import trace
from opentelemetry.trace import SpanKind

import otel_rollout
import otel_rollout.sdk
from otel_rollout import attributes as A
from otel_rollout._base.semconv import bounded_status
from otel_rollout.testing import make_test_env

ROOT = Path(__file__).resolve().parents[2]


def run_one(env, *, agent=None, **gen_kwargs):
    with env.tracer.trajectory("inst-1_0", env="gsm8k", model="qwen3-8b", agent=agent) as t:
        with t.env_setup():
            pass
        with t.generate(**gen_kwargs) as g:
            g.record(
                input_tokens=212,
                output_tokens=31,
                cache_read_input_tokens=128,
                reasoning_output_tokens=7,
                finish_reasons=["stop"],
            )
        with t.env_step(tool_call_id="call-1") as step:
            step.set_reward(0.5)
        with t.env_teardown():
            pass
        t.set_reward(1.0)
    return t


def by_phase(env):
    return {s.attributes.get(A.PHASE, "root"): s for s in env.spans()}


def test_root_is_an_agent_invocation(rollout_env):
    run_one(rollout_env)
    root = by_phase(rollout_env)["root"]
    a = root.attributes
    assert a[A.GEN_AI_OPERATION_NAME] == A.OP_INVOKE_AGENT
    assert a[A.GEN_AI_AGENT_NAME] == "gsm8k"  # the env class when no agent name is given
    assert a[A.GEN_AI_CONVERSATION_ID] == "inst-1_0" == a[A.TRAJECTORY_ID]
    assert a[A.GEN_AI_REQUEST_MODEL] == "qwen3-8b"
    assert root.kind is SpanKind.INTERNAL
    assert root.name == A.SPAN_TRAJECTORY


def test_configured_agent_name_wins_over_the_env_class(rollout_env):
    run_one(rollout_env, agent="math-solver")
    assert by_phase(rollout_env)["root"].attributes[A.GEN_AI_AGENT_NAME] == "math-solver"


def test_generate_span_is_an_inference_client_span(rollout_env):
    run_one(rollout_env, provider="vllm", temperature=0.7, top_p=0.9, max_tokens=256, seed=3)
    gen = by_phase(rollout_env)[A.PHASE_LLM]
    a = gen.attributes
    assert gen.kind is SpanKind.CLIENT and gen.name == A.SPAN_GENERATE
    assert a[A.GEN_AI_OPERATION_NAME] == A.OP_CHAT
    assert a[A.GEN_AI_PROVIDER_NAME] == "vllm"
    assert A.GEN_AI_SYSTEM not in a
    assert a[A.GEN_AI_REQUEST_MODEL] == "qwen3-8b"
    assert a[A.GEN_AI_CONVERSATION_ID] == "inst-1_0"
    assert (a[A.GEN_AI_USAGE_INPUT_TOKENS], a[A.GEN_AI_USAGE_OUTPUT_TOKENS]) == (212, 31)
    assert a[A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 128
    assert a[A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 7
    assert tuple(a[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ("stop",)
    assert a[A.GEN_AI_REQUEST_TEMPERATURE] == 0.7 and a[A.GEN_AI_REQUEST_TOP_P] == 0.9
    assert a[A.GEN_AI_REQUEST_MAX_TOKENS] == 256 and a[A.GEN_AI_REQUEST_SEED] == 3


def test_token_in_token_out_engines_are_text_completion(rollout_env):
    run_one(rollout_env, operation=A.OP_TEXT_COMPLETION)
    gen = by_phase(rollout_env)[A.PHASE_LLM]
    assert gen.attributes[A.GEN_AI_OPERATION_NAME] == A.OP_TEXT_COMPLETION


def test_env_step_is_a_tool_execution(rollout_env):
    run_one(rollout_env)
    step = by_phase(rollout_env)[A.PHASE_ENV]
    a = step.attributes
    assert a[A.GEN_AI_OPERATION_NAME] == A.OP_EXECUTE_TOOL
    assert a[A.GEN_AI_TOOL_NAME] == "gsm8k"
    assert a[A.GEN_AI_TOOL_CALL_ID] == "call-1"
    assert step.kind is SpanKind.INTERNAL and step.name == A.SPAN_ENV_STEP


def test_deprecated_gen_ai_system_only_under_the_compatibility_opt_in(rollout_env, monkeypatch):
    monkeypatch.setenv(A.SEMCONV_OPT_IN_ENV, A.SEMCONV_GENAI_DUP)
    run_one(rollout_env, provider="vllm")
    a = by_phase(rollout_env)[A.PHASE_LLM].attributes
    assert a[A.GEN_AI_SYSTEM] == a[A.GEN_AI_PROVIDER_NAME] == "vllm"


def test_gen_ai_system_keyword_is_read_as_the_provider(rollout_env):
    with rollout_env.tracer.trajectory() as t, t.generate(system="vllm"):
        pass
    a = rollout_env.spans(A.SPAN_GENERATE)[0].attributes
    assert a[A.GEN_AI_PROVIDER_NAME] == "vllm" and A.GEN_AI_SYSTEM not in a


def test_latest_names_follow_the_conventions_under_the_opt_in(rollout_env, monkeypatch):
    monkeypatch.setenv(A.SEMCONV_OPT_IN_ENV, f"http, {A.SEMCONV_GENAI_LATEST}")
    run_one(rollout_env)
    spans = by_phase(rollout_env)
    assert spans["root"].name == "invoke_agent gsm8k"
    assert spans[A.PHASE_LLM].name == "chat qwen3-8b"
    assert spans[A.PHASE_ENV].name == "execute_tool gsm8k"
    assert spans[A.PHASE_ENV_SETUP].name == A.SPAN_ENV_SETUP  # no convention: unchanged


def test_accounting_is_the_same_under_both_names():
    """Same spans at the same (explicit) times, named either way: identical breakdowns."""
    names = {
        "default": (A.SPAN_TRAJECTORY, A.SPAN_GENERATE, A.SPAN_ENV_STEP),
        "latest": ("invoke_agent gsm8k", "chat qwen3-8b", "execute_tool gsm8k"),
    }
    results = {}
    for mode, (root_name, gen_name, step_name) in names.items():
        env = make_test_env()
        tracer = env.tracer_provider.get_tracer("test")
        root = tracer.start_span(root_name, start_time=1_000, attributes={A.TRAJECTORY_ID: "t"})
        ctx = trace.set_span_in_context(root)
        for name, phase, start, end in (
            (gen_name, A.PHASE_LLM, 1_010, 1_030),
            (step_name, A.PHASE_ENV, 1_025, 1_040),
        ):
            span = tracer.start_span(name, ctx, start_time=start, attributes={A.PHASE: phase})
            span.end(end_time=end)
        root.end(end_time=1_100)
        (b,) = env.breakdowns
        results[mode] = dict(b.nanos), b.turns, b.env_steps
    assert results["default"] == results["latest"]
    nanos, turns, steps = results["default"]
    assert (nanos[A.PHASE_LLM], nanos[A.PHASE_ENV], nanos["e2e"], turns, steps) == (
        20,
        10,
        100,
        1,
        1,
    )


def _collector_dimensions() -> set[str]:
    out: set[str] = set()
    for path in (ROOT / "collector-config").glob("*.yaml"):
        cfg = yaml.safe_load(path.read_text())
        for name, conn in (cfg.get("connectors") or {}).items():
            if name.startswith("spanmetrics"):
                out.update(d["name"] for d in (conn or {}).get("dimensions", []))
    return out


def _keys_by_phase(env) -> dict[str, set[str]]:
    return {s.attributes.get(A.PHASE, "root"): set(s.attributes) for s in env.spans()}


def test_spanmetrics_dimensions_are_on_the_same_spans_under_both_modes(monkeypatch):
    dims = _collector_dimensions()
    assert dims, "no spanmetrics dimensions found in collector-config/"
    keys = {}
    for opt_in in ("", A.SEMCONV_GENAI_LATEST):
        monkeypatch.setenv(A.SEMCONV_OPT_IN_ENV, opt_in)
        env = make_test_env()
        run_one(env)
        keys[opt_in] = _keys_by_phase(env)
    assert keys[""] == keys[A.SEMCONV_GENAI_LATEST]  # only the names differ
    for dim in dims:
        assert any(dim in k for k in keys[""].values()), dim
    assert all(A.PHASE in k for p, k in keys[""].items() if p != "root")


def test_dashboard_and_collector_never_key_on_span_names():
    """Span names differ between the modes: nothing downstream may depend on them."""
    dashboard = (ROOT / "deploy/grafana/dashboards/rollout.json").read_text()
    exprs = re.findall(r'"expr":\s*"((?:[^"\\]|\\.)*)"', dashboard)
    assert exprs
    for expr in exprs:
        assert "span_name" not in expr and "span.name" not in expr
        metrics = set(re.findall(r"\b(rollout_[a-z_]+|traces_span_metrics_[a-z_]+)\b", expr))
        assert metrics, expr
        labels = set(re.findall(r"\b([a-z_]+)\s*=~?", expr)) | set(
            re.findall(r"by \(([^)]*)\)", expr)
        )
        for group in labels:
            for label in re.split(r",\s*", group):
                assert label in {"le", "rollout_phase", "rollout_env_class",
                                 "rollout_trajectory_status", "service_name", "job",
                                 "model", "gen_ai_request_model", "rollout_step_phase",
                                 ""}, (label, expr)  # fmt: skip
    for path in (ROOT / "collector-config").glob("*.yaml"):
        text = path.read_text()
        assert "span.name" not in text and "span_name" not in text, path
        assert not re.search(r"\bname:\s*(generate|env_step|trajectory)\b", text), path
    dims = _collector_dimensions()
    assert all(d.startswith("rollout.") for d in dims)


@pytest.mark.parametrize(
    ("given", "bounded"),
    [
        ("ok", "ok"),
        ("timeout after 600s for inst-3", "timeout"),
        ("Cancelled", "cancelled"),
        ("okay", "other"),
        ("max turns reached", "other"),
        (None, "other"),
    ],
)
def test_free_form_statuses_map_to_a_bounded_set(given, bounded):
    assert bounded_status(given) == bounded


def test_status_text_stays_on_the_span_and_never_reaches_metrics(rollout_env):
    with rollout_env.tracer.trajectory(env="gsm8k") as t:
        t.set_status("timeout after 600s for inst-3")
    (root,) = rollout_env.roots()
    assert root.attributes[A.STATUS] == "timeout"
    assert root.attributes[A.STATUS_DETAIL] == "timeout after 600s for inst-3"
    points = rollout_env.metric_points(A.METRIC_DURATION)
    assert {p.attributes[A.STATUS] for p in points} == {"timeout"}
    assert t.breakdown.status == "timeout"


def test_dashboard_is_valid_json():
    json.loads((ROOT / "deploy/grafana/dashboards/rollout.json").read_text())


# --- GenAI client metrics ------------------------------------------------------------------
def test_genai_client_metrics_follow_the_conventions(rollout_env):
    rollout_env.tracer_provider.add_span_processor(
        otel_rollout.sdk.GenAIMetricsProcessor(rollout_env.meter_provider)
    )
    for i in range(3):
        with rollout_env.tracer.trajectory(f"inst-{i}_0", env="gsm8k", model="qwen3-8b") as t:
            with t.generate(provider="vllm") as g:
                g.record(input_tokens=100, output_tokens=10 + i, response_model="qwen3-8b-awq")
            with t.env_step():
                pass
    (duration,) = rollout_env.metric_points(A.METRIC_GENAI_OPERATION_DURATION)
    assert duration.count == 3
    assert tuple(duration.explicit_bounds) == A.GENAI_DURATION_BUCKETS
    assert dict(duration.attributes) == {
        A.GEN_AI_OPERATION_NAME: A.OP_CHAT,
        A.GEN_AI_PROVIDER_NAME: "vllm",
        A.GEN_AI_REQUEST_MODEL: "qwen3-8b",
        A.GEN_AI_RESPONSE_MODEL: "qwen3-8b-awq",
    }  # no ids: no conversation, trajectory or response id
    usage = {
        p.attributes[A.GEN_AI_TOKEN_TYPE]: p
        for p in rollout_env.metric_points(A.METRIC_GENAI_TOKEN_USAGE)
    }
    assert (usage["input"].sum, usage["output"].sum) == (300, 33)
    assert tuple(usage["input"].explicit_bounds) == A.GENAI_TOKEN_BUCKETS
    metrics = rollout_env.metric_reader.get_metrics_data().resource_metrics[0].scope_metrics
    units = {m.name: m.unit for sm in metrics for m in sm.metrics}
    assert units[A.METRIC_GENAI_OPERATION_DURATION] == "s"
    assert units[A.METRIC_GENAI_TOKEN_USAGE] == "{token}"


def test_failed_generate_carries_its_error_type(rollout_env):
    rollout_env.tracer_provider.add_span_processor(
        otel_rollout.sdk.GenAIMetricsProcessor(rollout_env.meter_provider)
    )
    with pytest.raises(TimeoutError), rollout_env.tracer.trajectory() as t, t.generate():
        raise TimeoutError
    (point,) = rollout_env.metric_points(A.METRIC_GENAI_OPERATION_DURATION)
    assert point.attributes[A.ERROR_TYPE] == "TimeoutError"


def test_genai_metrics_are_off_unless_asked(tmp_path, monkeypatch):
    def processors(rollout):
        return [
            type(p).__name__
            for p in rollout.tracer_provider._active_span_processor._span_processors
        ]

    off = otel_rollout.configure(local=True, output_dir=tmp_path, metrics_exporter="none")
    on = otel_rollout.configure(
        local=True, output_dir=tmp_path, metrics_exporter="none", genai_metrics=True
    )
    try:
        assert "GenAIMetricsProcessor" not in processors(off)
        assert "GenAIMetricsProcessor" in processors(on)
    finally:
        off.shutdown()
        on.shutdown()


def test_vllm_recognises_an_open_generate_by_phase_under_either_name(rollout_env, monkeypatch):
    from otel_rollout.integrations.vllm import _stream

    monkeypatch.setenv(A.SEMCONV_OPT_IN_ENV, A.SEMCONV_GENAI_LATEST)
    with rollout_env.tracer.trajectory(model="m") as t, t.generate() as g:
        assert g.span.name == "chat m"
        assert _stream._is_open_generate(g.span)  # no second turn when vLLM runs inside


def test_vllm_requests_carry_the_provider_not_the_deprecated_system(monkeypatch):
    from otel_rollout.integrations.vllm._outputs import request_attributes

    attrs = request_attributes(None, None, None, "m")
    assert attrs[A.GEN_AI_PROVIDER_NAME] == A.PROVIDER_VLLM and A.GEN_AI_SYSTEM not in attrs
    monkeypatch.setenv(A.SEMCONV_OPT_IN_ENV, A.SEMCONV_GENAI_DUP)
    assert request_attributes(None, None, None, "m")[A.GEN_AI_SYSTEM] == A.PROVIDER_VLLM
