"""The engine timings a generate span carries, from the ``RequestOutput.metrics`` of each
of the request's samples.

vLLM runs the ``n`` samples of a request as requests of their own: each streamed
``RequestOutput`` carries the ``RequestStateStats`` of the sample it came from (with
``n > 1`` the outputs of different samples interleave), and vLLM makes one
``llm_request`` span per sample. On our generate span:

- ``n == 1`` (or one sample's stats seen): vLLM's keys, computed as vLLM computes them
  for its ``llm_request`` span (:func:`~otel_rollout._accounting.waits.engine_timings`),
  plus ``gen_ai.latency.e2e``.
- ``n > 1``: the plain ``gen_ai.latency.*`` keys are the request's: queue, prefill and
  decode of the samples' union (:mod:`otel_rollout._accounting.engine_union`), inference
  = prefill + decode, time to first token the earliest sample's, e2e the last sample's;
  each sample's own values are ``rollout.vllm.sample.<key>`` arrays by completion index
  (those every timed sample has), and ``rollout.vllm.samples_timed`` says how many
  samples' stats were found: every sample's from an in-process engine
  (:func:`live_sample_stats`); from the outputs alone, only those of samples whose
  outputs came unmerged (vLLM merges outputs waiting for the consumer, and in
  ``FINAL_ONLY`` mode hands out one aggregated output with one sample's stats).

``gen_ai.latency.e2e``: vLLM's is the wall-clock time from the request's arrival to the
output-processing step that finished it; ``RequestStateStats`` does not keep that
moment, so ours is arrival to when the finishing output reached the stream: the same
start, an end later by the hand-over to the consumer (microseconds to milliseconds).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otel_rollout import attributes as A
from otel_rollout.instrumentation import engine_timings, stages_from_timestamps, union_split

#: vLLM's latency keys, in the order docs/vllm.md lists them.
LATENCY_KEYS = (
    A.VLLM_TIME_IN_QUEUE,
    A.VLLM_TIME_TO_FIRST_TOKEN,
    A.VLLM_E2E,
    A.VLLM_TIME_IN_PREFILL,
    A.VLLM_TIME_IN_DECODE,
    A.VLLM_TIME_IN_INFERENCE,
)


def live_sample_stats(engine: Any, request_id: Any) -> dict[int, Any]:
    """Each sample's live ``RequestStateStats`` from an in-process engine, by completion
    index, while the request runs; empty when the engine does not show them.

    With ``n > 1`` the stream alone cannot tell every sample's stats: vLLM merges the
    outputs the consumer has not picked up yet into one ``RequestOutput`` that keeps
    the first one's ``metrics``. The engine's output processor holds each sample's state
    (``external_req_ids`` maps the request id to the samples' internal ids); the stats
    objects are the ones vLLM's ``llm_request`` spans are made from, and they are
    read when the stream ends, final by then. Duck-typed: any other shape gives ``{}``.
    """
    processor = getattr(engine, "output_processor", None)
    ids = getattr(processor, "external_req_ids", None)
    states = getattr(processor, "request_states", None)
    if request_id is None or not isinstance(ids, Mapping) or not isinstance(states, Mapping):
        return {}
    out: dict[int, Any] = {}
    for internal in ids.get(str(request_id)) or ():
        state = states.get(internal)
        index = getattr(state, "request_index", None)
        stats = getattr(state, "stats", None)
        if isinstance(index, int) and stats is not None:
            out[index] = stats
    return out


def _ts(metrics: Any, name: str) -> float:
    value = getattr(metrics, name, None)
    return float(value) if isinstance(value, int | float) else 0.0


def sample_timings(metrics: Any, done_wall: float | None) -> dict[str, float | int]:
    """One sample's keys: :func:`engine_timings` plus e2e (arrival to ``done_wall``, both
    the frontend's wall clock)."""
    out = engine_timings(metrics)
    arrival = _ts(metrics, "arrival_time")
    if done_wall is not None and arrival > 0.0 and done_wall >= arrival:
        out[A.VLLM_E2E] = done_wall - arrival
    return out


def request_timings(
    samples: Mapping[int, Any], done_wall: Mapping[int, float], last: Any
) -> dict[str, Any]:
    """The generate span's engine attributes from each sample's stats (by completion
    index), the wall-clock moment each sample's final output was seen, and ``last``
    (the last ``metrics`` seen, for outputs that name no completion)."""
    if len(samples) <= 1:
        metrics = next(iter(samples.values())) if samples else last
        if metrics is None:
            return {}
        done = max(done_wall.values()) if done_wall else None
        return sample_timings(metrics, done)
    per = {i: sample_timings(m, done_wall.get(i)) for i, m in sorted(samples.items())}
    out: dict[str, Any] = {A.VLLM_SAMPLES_TIMED: len(per)}
    queue, prefill, decode = union_split(
        stages_from_timestamps(
            _ts(m, "queued_ts"), _ts(m, "scheduled_ts"),
            _ts(m, "first_token_ts"), _ts(m, "last_token_ts"),
        )
        for _, m in sorted(samples.items())
    )  # fmt: skip
    reached = [t for t in per.values() if A.VLLM_TIME_IN_QUEUE in t]
    if reached:
        out[A.VLLM_TIME_IN_QUEUE] = queue
    if any(A.VLLM_TIME_IN_PREFILL in t for t in per.values()):
        out[A.VLLM_TIME_IN_PREFILL] = prefill
        out[A.VLLM_TIME_IN_INFERENCE] = prefill + decode
    if any(A.VLLM_TIME_IN_DECODE in t for t in per.values()):
        out[A.VLLM_TIME_IN_DECODE] = decode
    ttft = [t[A.VLLM_TIME_TO_FIRST_TOKEN] for t in per.values() if A.VLLM_TIME_TO_FIRST_TOKEN in t]
    if ttft:
        out[A.VLLM_TIME_TO_FIRST_TOKEN] = min(ttft)
    e2e = [t[A.VLLM_E2E] for t in per.values() if A.VLLM_E2E in t]
    if e2e:
        out[A.VLLM_E2E] = max(e2e)
    preempted = sum(int(t.get(A.VLLM_NUM_PREEMPTIONS, 0)) for t in per.values())
    if preempted:
        out[A.VLLM_NUM_PREEMPTIONS] = preempted
    for key in LATENCY_KEYS:
        if all(key in t for t in per.values()):
            suffix = key.rsplit(".", 1)[1]
            out[A.VLLM_SAMPLE_PREFIX + suffix] = [float(t[key]) for t in per.values()]
    return out
