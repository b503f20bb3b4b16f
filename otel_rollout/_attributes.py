"""Attribute keys, span names, phase and band names: one place, never literals elsewhere."""

from __future__ import annotations

from typing import Final

# --- span names (low-cardinality constants; ids go into attributes) -----------------
SPAN_TRAJECTORY: Final = "trajectory"
SPAN_ENV_SETUP: Final = "env_setup"
SPAN_GENERATE: Final = "generate"
SPAN_ENV_STEP: Final = "env_step"
SPAN_ENV_TEARDOWN: Final = "env_teardown"

# --- phases and bands -----------------------------------------------------------------
PHASE_LLM: Final = "llm"
PHASE_ENV: Final = "env"
PHASE_ENV_SETUP: Final = "env_setup"
PHASE_ENV_TEARDOWN: Final = "env_teardown"
BAND_OTHER: Final = "other"

#: Bands that phase spans fill, in the priority that resolves overlaps across bands:
#: where spans of two bands overlap in time, the time goes to the band listed first.
#: Engine time comes first, so ``env`` only holds env time not hidden behind a generate.
BANDS: Final = (PHASE_LLM, PHASE_ENV, PHASE_ENV_SETUP, PHASE_ENV_TEARDOWN)
#: Every band of a breakdown, ``other`` last; these values sum to the trajectory's e2e.
ALL_BANDS: Final = (*BANDS, BAND_OTHER)

# --- trajectory (root span) attributes -----------------------------------------------
#: Present on every trajectory root span; it is what marks a span as a trajectory root.
TRAJECTORY_ID: Final = "rollout.trajectory.id"
INSTANCE_ID: Final = "rollout.trajectory.instance_id"
REPETITION_ID: Final = "rollout.trajectory.repetition_id"
GROUP_ID: Final = "rollout.trajectory.group_id"
STATUS: Final = "rollout.trajectory.status"
REWARD: Final = "rollout.trajectory.reward"
TURNS: Final = "rollout.trajectory.turns"
ENV_STEPS: Final = "rollout.trajectory.env_steps"
ENV_CLASS: Final = "rollout.env.class"

STATUS_OK: Final = "ok"
STATUS_ERROR: Final = "error"
STATUS_CANCELLED: Final = "cancelled"

#: Breakdown written onto the root span: ``rollout.breakdown.<band>`` (seconds, disjoint
#: bands summing to e2e) and ``rollout.breakdown.<band>_sum`` (plain sums of phase spans).
BREAKDOWN_PREFIX: Final = "rollout.breakdown."
BREAKDOWN_E2E: Final = "rollout.breakdown.e2e"

# --- phase span attributes ---------------------------------------------------------------
PHASE: Final = "rollout.phase"
TURN: Final = "rollout.turn"

# --- GenAI semantic conventions --------------------------------------------------------
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_SYSTEM: Final = "gen_ai.system"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P: Final = "gen_ai.request.top_p"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
ERROR_TYPE: Final = "error.type"

#: Env var that opts in to prompt/completion capture (GenAI instrumentation convention).
CAPTURE_CONTENT_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

# --- metrics ---------------------------------------------------------------------------
METRIC_DURATION: Final = "rollout.trajectory.duration"
METRIC_PHASE_DURATION: Final = "rollout.trajectory.phase.duration"
METRIC_TURNS: Final = "rollout.trajectory.turns"
METRIC_EVICTED: Final = "rollout.processor.evicted"
EVICTION_REASON: Final = "rollout.eviction.reason"
METRIC_EXPORT_DROPPED: Final = "rollout.export.dropped"
EXPORT_REASON: Final = "rollout.export.reason"

#: Seconds-based buckets that reach hours: agentic trajectories can run for a long time.
DURATION_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0,
    120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0,
)  # fmt: skip
TURN_BUCKETS: Final = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128, 256)

# --- vLLM: its own span keys (``vllm.tracing.utils.SpanAttributes``) -------------------
#: vLLM's ``llm_request`` span carries these; the vLLM integration writes them on our
#: ``generate`` span too, computed the same way from ``RequestOutput.metrics``.
VLLM_SPAN_LLM_REQUEST: Final = "llm_request"
VLLM_REQUEST_ID: Final = "gen_ai.request.id"
VLLM_REQUEST_N: Final = "gen_ai.request.n"
VLLM_TIME_IN_QUEUE: Final = "gen_ai.latency.time_in_queue"
VLLM_TIME_TO_FIRST_TOKEN: Final = "gen_ai.latency.time_to_first_token"
VLLM_TIME_IN_PREFILL: Final = "gen_ai.latency.time_in_model_prefill"
VLLM_TIME_IN_DECODE: Final = "gen_ai.latency.time_in_model_decode"
VLLM_TIME_IN_INFERENCE: Final = "gen_ai.latency.time_in_model_inference"
VLLM_E2E: Final = "gen_ai.latency.e2e"
VLLM_NUM_PREEMPTIONS: Final = "vllm.request.num_preemptions"
#: Resource attribute vLLM puts on the tracer provider it builds (``init_tracer``).
VLLM_RESOURCE_KEY: Final = "vllm.instrumenting_module_name"
#: GenAI semantic convention: prompt tokens served from the (prefix) cache.
GEN_AI_USAGE_CACHE_READ: Final = "gen_ai.usage.cache_read.input_tokens"
#: True when the consumer closed a stream before the engine's final output.
GENERATE_CLOSED_EARLY: Final = "rollout.generate.closed_early"
