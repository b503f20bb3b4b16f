"""BoundedCall: the caller waits at most its timeout; runs never pile up."""

from __future__ import annotations

import threading

from otel_rollout._base.bounded import BoundedCall


def test_a_call_that_runs_out_of_time_returns_false_and_the_next_waits_for_it():
    gate = threading.Event()
    runs: list[float] = []

    def flush(timeout_s: float) -> bool:
        runs.append(timeout_s)
        return gate.wait(30)

    call = BoundedCall(flush, "test-flush")
    assert call(0.05) is False  # blocked: the caller gets control back
    assert call(0.05) is False  # still the same run: no second one started meanwhile
    assert len(runs) == 1
    gate.set()
    # the earlier run ends, then this call makes its own, for what ended since
    assert call(30) is True
    assert len(runs) == 2 and 0 < runs[1] <= 30


def test_the_result_and_failures_come_back_as_a_bool():
    assert BoundedCall(lambda t: 1, "t")(5) is True
    assert BoundedCall(lambda t: None, "t")(5) is False

    def broken(timeout_s: float) -> bool:
        raise RuntimeError("exporter bug")

    assert BoundedCall(broken, "t")(5) is False  # never raises into the caller
