"""``analyze_batch`` with what is not breakdowns: a ``TypeError`` naming what it accepts,
never an empty analysis or an error from deep inside."""

from __future__ import annotations

import pytest

from otel_rollout import BreakdownCollector, analyze_batch
from otel_rollout._accounting.compute import compute_breakdown

T0 = 1_700_000_000 * 10**9


def test_breakdowns_are_analysed():
    bd = compute_breakdown(T0, T0 + 100, [("llm", T0, T0 + 60)])
    assert analyze_batch([bd]).trajectories == 1
    assert analyze_batch(iter([bd, bd])).trajectories == 2  # any iterable
    assert analyze_batch([]).trajectories == 0


@pytest.mark.parametrize("value", [42, "abc", b"abc", {"a": 1}, None, 1.5])
def test_what_is_not_an_iterable_of_breakdowns_is_named(value):
    with pytest.raises(
        TypeError,
        match=r"analyze_batch\(breakdowns\): expected an iterable "
        r"of Breakdown .* got " + type(value).__name__,
    ):
        analyze_batch(value)


@pytest.mark.parametrize("item", [42, "t1", {"e2e": 1.0}, None])
def test_an_item_that_is_not_a_breakdown_is_named(item):
    bd = compute_breakdown(T0, T0 + 100, [])
    with pytest.raises(TypeError, match=r"expected Breakdown items, got " + type(item).__name__):
        analyze_batch([bd, item])


def test_a_collector_is_named_with_its_drain():
    with pytest.raises(
        TypeError,
        match=r"got a collector; pass what it holds: "
        r"collector\.drain\(\)",
    ):
        analyze_batch(BreakdownCollector())
