"""The engine timings a generate span carries, from the ``RequestOutput.metrics`` of each
of the request's samples (docs/vllm.md, ``n > 1``): for one sample vLLM's keys, computed
as vLLM computes them, plus ``gen_ai.latency.e2e`` (arrival to when the finishing output
reached the stream); for ``n > 1`` the request's keys over the samples' union and each
sample's own as ``rollout.vllm.sample.<key>`` arrays."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otel_rollout import attributes as A
from otel_rollout.instrumentation import engine_timings, stages_from_timestamps, union_split

#: vLLM's latency keys, in the order docs/vllm.md lists them.
LATENCY_KEYS = (A.VLLM_TIME_IN_QUEUE, A.VLLM_TIME_TO_FIRST_TOKEN, A.VLLM_E2E,
                A.VLLM_TIME_IN_PREFILL, A.VLLM_TIME_IN_DECODE,
                A.VLLM_TIME_IN_INFERENCE)  # fmt: skip


def live_sample_stats(engine: Any, request_id: Any) -> dict[int, Any]:
    """Each sample's live ``RequestStateStats`` from an in-process engine's output
    processor, by completion index (with ``n > 1`` the stream merges outputs, keeping one
    sample's ``metrics``); read when the stream ends. Any other shape gives ``{}``."""
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
    if any(A.VLLM_TIME_IN_QUEUE in t for t in per.values()):
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
