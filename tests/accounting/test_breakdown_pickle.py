"""A Breakdown pickled by an older otel-rollout (a Ray worker not yet upgraded) loads."""

from __future__ import annotations

import base64
import pickle

from otel_rollout import Breakdown, compute_breakdown

#: ``pickle.dumps(compute_breakdown(...), protocol=4)`` made by the release before the core
#: moved into layer packages (it names ``otel_rollout._breakdown._rebuild``).
OLD = base64.b64decode(
    "gASVzwEAAAAAAACMF290ZWxfcm9sbG91dC5fYnJlYWtkb3dulIwIX3JlYnVpbGSUk5RdlCiMA3QtN5SMAJRH"
    "PuT4tYjjaPFHPtT4tYjjaPFHPskqc3EQ5FRHPrDG96C17Y5HAAAAAAAAAABHPrDG96C17Y5HPtT4tYjjaPFH"
    "Pskqc3EQ5FRHPrDG96C17Y5HAAAAAAAAAABLAUsBjAJva5SMBWdzbThrlE5LAE0QJ32UKIwDbGxtlE2IE4wD"
    "ZW52lE24C4wJZW52X3NldHVwlE3oA4wMZW52X3RlYXJkb3dulEsAjAVvdGhlcpRN6AOMA2UyZZRNECeMCWVu"
    "dl9xdWV1ZZRLAIwOZmluaXNoX3Nlc3Npb26USwB1fZSMBDMtYWKUTk5OjAVhcnJheZSMFF9hcnJheV9yZWNv"
    "bnN0cnVjdG9ylJOUKIwFYXJyYXmUjAVhcnJheZSTlIwBcZRLDENIAgAAAAAAAAAAAAAAAAAAAOgDAAAAAAAA"
    "AAAAAAAAAADoAwAAAAAAAHAXAAAAAAAAAQAAAAAAAABwFwAAAAAAACgjAAAAAAAAlHSUUpRHAAAAAAAAAABH"
    "AAAAAAAAAABHAAAAAAAAAABOTk5OTk5OTn2UZYWUUpQu"
)


def test_a_breakdown_pickled_by_the_flat_layout_loads_equal_to_a_new_one():
    assert b"otel_rollout._breakdown" in OLD
    old = pickle.loads(OLD)
    assert isinstance(old, Breakdown)
    new = compute_breakdown(
        0, 10_000, [("env_setup", 0, 1_000), ("llm", 1_000, 6_000), ("env", 6_000, 9_000)],
        trajectory_id="t-7", env_class="gsm8k", batch_id="3-ab",
    )  # fmt: skip
    assert old.nanos == new.nanos and old.trajectory_id == "t-7" and old.batch_id == "3-ab"
    assert pickle.loads(pickle.dumps(new)) == new
