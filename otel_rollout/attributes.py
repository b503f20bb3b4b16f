"""Attribute keys, span names, phase and band names: one place, never literals elsewhere."""

from __future__ import annotations

from typing import Final

from otel_rollout._bands import DEFAULT_BANDS

# --- span names (low-cardinality constants; ids go into attributes) -----------------
SPAN_TRAJECTORY: Final = "trajectory"
SPAN_ENV_SETUP: Final = "env_setup"
SPAN_GENERATE: Final = "generate"
SPAN_ENV_STEP: Final = "env_step"
SPAN_ENV_TEARDOWN: Final = "env_teardown"
SPAN_ENV_QUEUE: Final = "env_queue"
#: One training step's batch of trajectories; each trajectory root links to it.
SPAN_BATCH: Final = "batch"

# --- phases and bands -----------------------------------------------------------------
PHASE_LLM: Final = "llm"
PHASE_ENV: Final = "env"
PHASE_ENV_SETUP: Final = "env_setup"
PHASE_ENV_TEARDOWN: Final = "env_teardown"
BAND_OTHER: Final = "other"

#: Bands that phase spans fill, in overlap priority (from the band registry,
#: ``otel_rollout.accounting.DEFAULT_BANDS``): overlapping time goes to the first listed.
BANDS: Final = DEFAULT_BANDS.phased
#: Every band of a breakdown, ``other`` last; these values sum to the trajectory's e2e.
ALL_BANDS: Final = DEFAULT_BANDS.names

#: The wait between submitting env work to an executor and a thread starting it: a
#: sub-part of the breakdown, counted in the band of the env call it waits for.
PHASE_ENV_QUEUE: Final = "env_queue"
#: Releasing the engine's session after the result is final (SkyRL's ``finish_session``):
#: outside the trajectory's accounted time, as SkyRL's ``e2e_time``.
PHASE_FINISH_SESSION: Final = "finish_session"

# --- trajectory (root span) attributes -----------------------------------------------
#: What marks a span as a trajectory root.
TRAJECTORY_ID: Final = "rollout.trajectory.id"
INSTANCE_ID: Final = "rollout.trajectory.instance_id"
REPETITION_ID: Final = "rollout.trajectory.repetition_id"
GROUP_ID: Final = "rollout.trajectory.group_id"
STATUS: Final = "rollout.trajectory.status"
REWARD: Final = "rollout.trajectory.reward"
#: Rewards other than the default one: ``rollout.reward.<name>`` (judges, reward terms).
REWARD_PREFIX: Final = "rollout.reward."
TURNS: Final = "rollout.trajectory.turns"
ENV_STEPS: Final = "rollout.trajectory.env_steps"
ENV_CLASS: Final = "rollout.env.class"
#: On the batch span and on each of its trajectories' roots.
BATCH_ID: Final = "rollout.batch.id"
STEP: Final = "rollout.step"
#: The trajectories a batch may run at once, as declared (``tracer.batch(concurrency=)``).
BATCH_CONCURRENCY: Final = "rollout.batch.concurrency"
POLICY_VERSION: Final = "rollout.policy.version"

STATUS_OK: Final = "ok"
STATUS_ERROR: Final = "error"
STATUS_CANCELLED: Final = "cancelled"
STATUS_TIMEOUT: Final = "timeout"
STATUS_ABORTED: Final = "aborted"
STATUS_TRUNCATED: Final = "truncated"
STATUS_OTHER: Final = "other"
#: The statuses that reach metric attributes; any other becomes ``other`` there (or the
#: known status its text starts with), the text staying on the span as STATUS_DETAIL.
STATUSES: Final = (
    STATUS_OK, STATUS_ERROR, STATUS_CANCELLED, STATUS_TIMEOUT, STATUS_ABORTED,
    STATUS_TRUNCATED, STATUS_OTHER,
)  # fmt: skip
STATUS_DETAIL: Final = "rollout.trajectory.status_detail"

#: ``rollout.breakdown.<band>`` (seconds, disjoint bands summing to e2e) and
#: ``rollout.breakdown.<band>_sum`` (plain sums of phase spans), on the root span.
BREAKDOWN_PREFIX: Final = "rollout.breakdown."
BREAKDOWN_E2E: Final = "rollout.breakdown.e2e"
BREAKDOWN_ENV_QUEUE: Final = "rollout.breakdown.env_queue"
BREAKDOWN_FINISH_SESSION: Final = "rollout.breakdown.finish_session"
#: The batch analysis on the batch span: ``rollout.batch.<figure>``.
BATCH_PREFIX: Final = "rollout.batch."

# --- phase span attributes ---------------------------------------------------------------
PHASE: Final = "rollout.phase"
TURN: Final = "rollout.turn"
STEP_REWARD: Final = "rollout.step.reward"

# --- GenAI semantic conventions (Development status; docs/semconv.md) -------------------
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
#: Deprecated for ``gen_ai.provider.name``; written only under ``gen_ai/dup``.
GEN_AI_SYSTEM: Final = "gen_ai.system"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_AGENT_ID: Final = "gen_ai.agent.id"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P: Final = "gen_ai.request.top_p"
GEN_AI_REQUEST_TOP_K: Final = "gen_ai.request.top_k"
GEN_AI_REQUEST_SEED: Final = "gen_ai.request.seed"
GEN_AI_REQUEST_FREQUENCY_PENALTY: Final = "gen_ai.request.frequency_penalty"
GEN_AI_REQUEST_PRESENCE_PENALTY: Final = "gen_ai.request.presence_penalty"
GEN_AI_REQUEST_STOP_SEQUENCES: Final = "gen_ai.request.stop_sequences"
GEN_AI_REQUEST_CHOICE_COUNT: Final = "gen_ai.request.choice.count"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
#: Part of ``input_tokens``.
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
#: Part of ``output_tokens``.
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
ERROR_TYPE: Final = "error.type"

OP_INVOKE_AGENT: Final = "invoke_agent"
OP_CHAT: Final = "chat"
OP_TEXT_COMPLETION: Final = "text_completion"
OP_EXECUTE_TOOL: Final = "execute_tool"
#: Not a well-known value of the conventions, which allow custom ones.
PROVIDER_VLLM: Final = "vllm"
#: An env step's tool type: the env runs in the agent's process.
TOOL_TYPE_FUNCTION: Final = "function"

#: The event recorded for each reward.
EVENT_EVALUATION_RESULT: Final = "gen_ai.evaluation.result"
GEN_AI_EVALUATION_NAME: Final = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_VALUE: Final = "gen_ai.evaluation.score.value"
GEN_AI_EVALUATION_SCORE_LABEL: Final = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_EXPLANATION: Final = "gen_ai.evaluation.explanation"
#: The default evaluation name of ``set_reward``.
REWARD_NAME: Final = "reward"

#: A comma-separated list: ``gen_ai_latest_experimental`` switches span names to the
#: GenAI conventions'; ``gen_ai/dup`` also writes the deprecated attributes.
SEMCONV_OPT_IN_ENV: Final = "OTEL_SEMCONV_STABILITY_OPT_IN"
SEMCONV_GENAI_LATEST: Final = "gen_ai_latest_experimental"
SEMCONV_GENAI_DUP: Final = "gen_ai/dup"
#: Opts in to prompt/completion capture.
CAPTURE_CONTENT_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

# --- metrics ---------------------------------------------------------------------------
METRIC_DURATION: Final = "rollout.trajectory.duration"
METRIC_PHASE_DURATION: Final = "rollout.trajectory.phase.duration"
METRIC_TURNS: Final = "rollout.trajectory.turns"
METRIC_BATCH_DURATION: Final = "rollout.batch.duration"
METRIC_BATCH_DRAIN_DURATION: Final = "rollout.batch.drain.duration"
METRIC_EVICTED: Final = "rollout.processor.evicted"
METRIC_IN_FLIGHT: Final = "rollout.processor.in_flight"
EVICTION_REASON: Final = "rollout.eviction.reason"
METRIC_EXPORT_DROPPED: Final = "rollout.export.dropped"
EXPORT_REASON: Final = "rollout.export.reason"
#: The trace file's loss record (a resource with no spans): one writer's cumulative count
#: of spans lost before the file, per reason (``rollout.export.lost.queue_full``...).
EXPORT_LOST_PREFIX: Final = "rollout.export.lost."
#: Which trace-file writer (one per process and ``configure()``) counted a loss record.
EXPORT_WRITER_ID: Final = "rollout.export.writer.id"

#: Seconds; they reach hours, as agentic trajectories can.
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
#: On the tracer provider vLLM builds (``init_tracer``).
VLLM_RESOURCE_KEY: Final = "vllm.instrumenting_module_name"
#: The consumer closed a stream before the engine's final output.
GENERATE_CLOSED_EARLY: Final = "rollout.generate.closed_early"
#: ``n > 1``: how many samples' timings the generate span holds, and each sample's own
#: ``gen_ai.latency.*`` value by completion index under the prefix plus the key's last
#: part (``rollout.vllm.sample.time_in_queue``); the plain keys hold the union.
VLLM_SAMPLES_TIMED: Final = "rollout.vllm.samples_timed"
VLLM_SAMPLE_PREFIX: Final = "rollout.vllm.sample."

# --- GenAI client metrics (conventions' names, units and bucket advice) -------------------
METRIC_GENAI_OPERATION_DURATION: Final = "gen_ai.client.operation.duration"
METRIC_GENAI_TOKEN_USAGE: Final = "gen_ai.client.token.usage"
GEN_AI_TOKEN_TYPE: Final = "gen_ai.token.type"
TOKEN_TYPE_INPUT: Final = "input"
TOKEN_TYPE_OUTPUT: Final = "output"
GENAI_DURATION_BUCKETS: Final = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
GENAI_TOKEN_BUCKETS: Final = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip

# --- waits: the engine's share of llm time, event-loop stalls --------------------------
#: Sub-parts of the ``llm`` band from the engine's own per-request timings; never bands.
LLM_QUEUE: Final = "llm_queue"
LLM_PREFILL: Final = "llm_prefill"
LLM_DECODE: Final = "llm_decode"
LLM_CLIENT: Final = "llm_client"
LLM_SUBPARTS: Final = (LLM_QUEUE, LLM_PREFILL, LLM_DECODE, LLM_CLIENT)
#: Event-loop time per trajectory; cross-cutting (they overlap bands), never bands.
#: ``loop_stall`` is own time in slow callbacks (the stalls this trajectory caused).
LOOP_OWN: Final = "loop_own"
LOOP_BLOCKED: Final = "loop_blocked"
LOOP_STALL: Final = "loop_stall"
LOOP_PARTS: Final = (LOOP_OWN, LOOP_BLOCKED, LOOP_STALL)
#: Root attributes of the loop-stall monitor, integer nanoseconds / counts.
LOOP_OWN_NS: Final = "rollout.loop.own_ns"
LOOP_BLOCKED_NS: Final = "rollout.loop.blocked_ns"
LOOP_STALL_NS: Final = "rollout.loop.stall_ns"
LOOP_STALLS: Final = "rollout.loop.stalls"
#: Span event on the culprit's phase (or root) for one callback above the threshold.
EVENT_LOOP_STALL: Final = "rollout.loop.stall"
LOOP_STALL_DURATION: Final = "rollout.loop.stall.duration"
LOOP_STALL_CULPRIT: Final = "rollout.loop.stall.culprit"
#: Culprit of a stall outside any phase / outside any trajectory.
CULPRIT_NO_PHASE: Final = "none"
CULPRIT_OUTSIDE: Final = "outside"
METRIC_LOOP_STALL: Final = "rollout.loop.stall.duration"

# --- the training step (docs/step.md) ----------------------------------------------------
#: A training step's span, the root of its own trace; under ``gen_ai_latest_experimental``
#: named as the proposed RL conventions' loop iteration, ``rl.loop``.
SPAN_STEP: Final = "step"
SPAN_STEP_LATEST: Final = "rl.loop"
STEP_TRAINER: Final = "rollout.step.trainer"
#: The trainer's own name of a phase (``run_training``, ``sync_weights``, ``gen``...).
STEP_PHASE: Final = "rollout.step.phase"
#: The step account: its wall, and ``rollout.step.time.<part>`` per part (phase names,
#: ``generation``, ``other``), seconds, summing to the wall.
STEP_WALL: Final = "rollout.step.wall"
STEP_TIME_PREFIX: Final = "rollout.step.time."
#: The GPUs' mean utilisation (0..1) over the step, and
#: ``rollout.step.gpu.utilization.<part>`` per part of its account.
STEP_GPU_UTILIZATION: Final = "rollout.step.gpu.utilization"
STEP_PART_GENERATION: Final = "generation"
STEP_PART_OTHER: Final = "other"
#: On a span link: a batch ``generated_by`` the step it ran in; a step ``trained_on`` a
#: batch or trajectory.
LINK_TYPE: Final = "rollout.link.type"
LINK_GENERATED_BY: Final = "generated_by"
LINK_TRAINED_ON: Final = "trained_on"
LINK_DROPPED: Final = "dropped"
#: Async health: the policy version that trained on a trajectory, versions between
#: generation and training, seconds between its end and its consumption.
POLICY_TRAINED_VERSION: Final = "rollout.policy.trained_version"
POLICY_STALENESS: Final = "rollout.policy.staleness"
BUFFER_WAIT: Final = "rollout.buffer.wait"
OUTCOME: Final = "rollout.trajectory.outcome"
OUTCOME_KEPT: Final = "kept"
OUTCOME_DROPPED: Final = "dropped"
DROP_REASON: Final = "rollout.drop.reason"
DROP_ZERO_VARIANCE: Final = "zero_variance"
DROP_STALE: Final = "stale"
DROP_FILTERED: Final = "filtered"
DROP_TRUNCATED: Final = "truncated"
DROP_ABORTED: Final = "aborted"
DROP_OTHER: Final = "other"
#: The reasons that reach metric attributes; any other becomes ``other`` there.
DROP_REASONS: Final = (
    DROP_ZERO_VARIANCE, DROP_STALE, DROP_FILTERED, DROP_TRUNCATED, DROP_ABORTED, DROP_OTHER,
)  # fmt: skip
#: ``rollout.step.series.<name>.offset_ns`` (from the step's start) and ``.value``.
STEP_SERIES_PREFIX: Final = "rollout.step.series."
SERIES_BUFFER_DEPTH: Final = "buffer_depth"
SERIES_GPU_UTILIZATION: Final = "gpu_utilization"
ASYNC_PREFIX: Final = "rollout.async."

METRIC_STEP_DURATION: Final = "rollout.step.duration"
METRIC_STEP_PART_DURATION: Final = "rollout.step.phase.duration"
#: 1 while a phase is active, 0 after: Prometheus joins GPU metrics to it by phase.
METRIC_STEP_PHASE_ACTIVE: Final = "rollout.step.phase.active"
METRIC_STALENESS: Final = "rollout.trajectory.staleness"
METRIC_BUFFER_WAIT: Final = "rollout.trajectory.buffer.duration"
METRIC_OUTCOMES: Final = "rollout.trajectory.outcomes"
#: Trajectories (or groups) waiting in an async trainer's generation buffer, and its size.
METRIC_BUFFER_DEPTH: Final = "rollout.buffer.depth"
METRIC_BUFFER_CAPACITY: Final = "rollout.buffer.capacity"
STALENESS_BUCKETS: Final = (0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 64)
