"""The engine split of a request whose samples run side by side (``n > 1``): each moment
of the samples' union counts once, as decode over prefill over queue; exact in ns."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_rollout import attributes as A
from otel_rollout._accounting.waits import (
    stages_before_end,
    stages_from_timestamps,
    union_split,
)
from otel_rollout.integrations.vllm._samples import request_timings
from otel_rollout.report import read_trace_file

MS = 1_000_000


def test_one_sample_is_its_own_split():
    assert union_split([[(0, 3), (3, 10), (10, 30)]]) == (3, 7, 20)


def test_two_overlapping_samples_count_each_moment_once():
    # sample a: queue 0-2, prefill 2-5, decode 5-20; sample b: queue 0-4, prefill 4-6,
    # decode 6-25. Moments 0-2 queue; 2-5 prefill (a); 5-25 decode (a or b decodes)
    a = [(0, 2), (2, 5), (5, 20)]
    b = [(0, 4), (4, 6), (6, 25)]
    assert union_split([a, b]) == (2, 3, 20)
    assert sum(union_split([a, b])) == 25  # the union's length: never beyond the call


def test_a_gap_between_samples_counts_nothing():
    assert union_split([[(0, 1), (1, 2), (2, 3)], [(10, 11), (11, 12), (12, 14)]]) == (2, 2, 3)


def test_unreached_stages_are_ignored():
    assert union_split([[(0, 5), None, None], [(0, 2), (2, 3), (3, 4)]]) == (3, 1, 1)
    assert union_split([]) == (0, 0, 0)
    assert stages_from_timestamps(1.0, 0.0, 0.0, 0.0) == [None, None, None]


@given(
    st.lists(
        st.tuples(*(st.integers(0, 1000) for _ in range(4))).map(lambda t: sorted(t)),
        min_size=1,
        max_size=6,
    )
)
def test_the_split_is_the_union_and_bounded_by_each_sample(raw):
    samples = [[(q, s), (s, f), (f, last)] for q, s, f, last in raw]
    q, p, d = union_split(samples)
    covered = set()
    for qq, _, _, last in raw:
        covered.update(range(qq, last))
    assert q + p + d == len(covered)
    assert d >= max(last - f for _, _, f, last in raw)  # decode of every sample is decode
    assert q + p + d <= sum(last - qq for qq, _, _, last in raw)


def stats(q: float, s: float, f: float, last: float, arrival: float = 1e9) -> SimpleNamespace:
    return SimpleNamespace(
        arrival_time=arrival, queued_ts=q, scheduled_ts=s, first_token_ts=f,
        last_token_ts=last, first_token_latency=f - q + 0.5, num_preemptions=0,
    )  # fmt: skip


def test_generate_span_keys_for_two_samples():
    samples = {0: stats(100.0, 100.25, 100.5, 101.0), 1: stats(100.0, 100.375, 100.625, 101.5)}
    done = {0: 1e9 + 1.25, 1: 1e9 + 1.75}
    out = request_timings(samples, done, samples[1])
    assert out[A.VLLM_SAMPLES_TIMED] == 2
    assert out[A.VLLM_TIME_IN_QUEUE] == 0.25  # 100.0-100.25, before any sample ran
    assert out[A.VLLM_TIME_IN_PREFILL] == 0.25  # 100.25-100.5, sample 0 prefilling
    assert out[A.VLLM_TIME_IN_DECODE] == 1.0  # 100.5-101.5, someone decoding
    assert out[A.VLLM_TIME_IN_INFERENCE] == 1.25
    assert out[A.VLLM_E2E] == pytest.approx(1.75) and out[A.VLLM_TIME_TO_FIRST_TOKEN] == 1.0
    assert out[A.VLLM_SAMPLE_PREFIX + "time_in_queue"] == [0.25, 0.375]
    assert out[A.VLLM_SAMPLE_PREFIX + "time_in_model_decode"] == [0.5, 0.875]
    assert out[A.VLLM_SAMPLE_PREFIX + "e2e"] == pytest.approx([1.25, 1.75])


def test_generate_span_keys_for_one_sample_are_vllms():
    m = stats(100.0, 100.25, 100.5, 101.0)
    out = request_timings({0: m}, {0: 1e9 + 1.25}, m)
    assert out == {
        A.VLLM_TIME_IN_QUEUE: 0.25, A.VLLM_TIME_IN_PREFILL: 0.25, A.VLLM_TIME_IN_DECODE: 0.5,
        A.VLLM_TIME_IN_INFERENCE: 0.75, A.VLLM_TIME_TO_FIRST_TOKEN: 1.0, A.VLLM_E2E: 1.25,
    }  # fmt: skip


def test_report_joins_every_samples_llm_request_by_the_union(tmp_path):
    # a server's two llm_request spans (n=2) under one generate span, each sample's stages
    # laid back from its span's end; the union is exact in ns
    t0 = 1_700_000_000_000_000_000
    spans = [
        ("01", None, "trajectory", 0, 100 * MS, {A.TRAJECTORY_ID: "t"}),
        ("02", "01", "generate", 10 * MS, 90 * MS, {A.PHASE: A.PHASE_LLM}),
        # ends at 80 ms: decode 70-80, prefill 60-70, queue 50-60
        ("03", "02", "llm_request", 20 * MS, 80 * MS,
         {A.VLLM_TIME_IN_QUEUE: 0.01, A.VLLM_TIME_IN_PREFILL: 0.01, A.VLLM_TIME_IN_DECODE: 0.01}),
        # ends at 85 ms: decode 65-85, prefill 62-65, queue 50-62
        ("04", "02", "llm_request", 20 * MS, 85 * MS,
         {A.VLLM_TIME_IN_QUEUE: 0.012, A.VLLM_TIME_IN_PREFILL: 0.003,
          A.VLLM_TIME_IN_DECODE: 0.02}),
    ]  # fmt: skip
    for end, part in ((80 * MS, (10 * MS,) * 3), (85 * MS, (12 * MS, 3 * MS, 20 * MS))):
        assert stages_before_end(end, *part)[2][1] == end
    doc = {
        "resourceSpans": [{
            "resource": {"attributes": []},
            "scopeSpans": [{"spans": [{
                "traceId": "ab" * 16, "spanId": sid.rjust(16, "0"), "name": name,
                **({"parentSpanId": parent.rjust(16, "0")} if parent else {}),
                "startTimeUnixNano": str(t0 + s), "endTimeUnixNano": str(t0 + e),
                "attributes": [
                    {"key": k, "value": {"doubleValue": v} if isinstance(v, float)
                     else {"stringValue": v}} for k, v in a.items()
                ],
            } for sid, parent, name, s, e, a in spans]}],
        }]
    }  # fmt: skip
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps(doc) + "\n")
    (bd,) = read_trace_file(f).breakdowns
    w = bd.waits_nanos
    # 50-60 queue; 60-65 prefill (sample 0 60-70 but sample 1 decodes from 65); 65-85 decode
    assert (w["llm_queue"], w["llm_prefill"], w["llm_decode"]) == (10 * MS, 5 * MS, 20 * MS)
    assert w["llm_client"] == 80 * MS - 35 * MS
