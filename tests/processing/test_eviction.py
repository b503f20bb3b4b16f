"""Past the in-flight cap the oldest trajectory is evicted in constant time (never a scan
of every open span under the processor's lock), and every eviction is counted: the
metric, ``export_stats``, the log (with the count) and the shutdown summary."""

from __future__ import annotations

import io
import logging

from _otel_env import clean_otel_env
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from otel_rollout import attributes as A
from otel_rollout import configure
from otel_rollout.sdk import BreakdownProcessor


class _CountingDict(dict):
    """A dict that counts the walks over it."""

    walks = 0

    def __iter__(self):
        type(self).walks += 1
        return super().__iter__()

    def values(self):
        type(self).walks += 1
        return super().values()

    def items(self):
        type(self).walks += 1
        return super().items()

    def keys(self):
        type(self).walks += 1
        return super().keys()


def _leak(tracer, n, first=0):
    """``n`` trajectories whose root and one phase never end (leaked handles)."""
    kept = []
    for i in range(first, first + n):
        root = tracer.start_span("trajectory", attributes={A.TRAJECTORY_ID: f"t{i}"})
        phase = tracer.start_span("llm", context=trace.set_span_in_context(root),
                                  attributes={A.PHASE: A.PHASE_LLM})  # fmt: skip
        kept.append((root, phase))
    return kept


def test_evicting_past_the_cap_never_walks_the_open_spans():
    processor = BreakdownProcessor(max_in_flight=50, record_metrics=False)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    kept = _leak(tracer, 50)
    processor._open = _CountingDict(processor._open)
    _CountingDict.walks = 0
    kept += _leak(tracer, 200, first=50)
    assert _CountingDict.walks == 0
    assert processor.evicted == 200 and processor.in_flight == 50
    assert processor.open_spans == 100  # the 50 tracked roots and their phases: bounded
    # a phase of an evicted trajectory that ends late is ignored
    kept[0][1].end()
    kept[0][0].end()
    assert processor.evicted == 200 and processor.in_flight == 50


def test_evictions_are_counted_in_export_stats_the_log_and_the_summary(
    tmp_path, monkeypatch, caplog
):
    clean_otel_env(monkeypatch)
    monkeypatch.setenv("OTEL_ROLLOUT_MAX_IN_FLIGHT", "5")
    caplog.set_level(logging.WARNING, logger="otel_rollout")
    summary = io.StringIO()
    rollout = configure(local=True, output_dir=tmp_path, summary_stream=summary)
    tracer = rollout.tracer_provider.get_tracer("leaky")
    kept = _leak(tracer, 20)  # 15 evicted
    with rollout.tracer.trajectory("measured", env="e"):
        pass  # one more eviction: 16
    assert rollout.export_stats.trajectories_evicted == 16
    assert rollout.export_stats.dropped == 0  # trajectories, not spans
    logged = [r.getMessage() for r in caplog.records if "evicted so far" in r.getMessage()]
    assert [m.split(" in-flight")[0] for m in logged] == ["otel-rollout: 1", "otel-rollout: 10"]
    assert rollout.shutdown()
    text = summary.getvalue()
    assert "otel-rollout: 1 trajectories (and 16 evicted, not measured)" in text
    assert "16 trajectories evicted before their root ended (16 max_in_flight)" in text
    assert any("16 trajectories evicted" in r.getMessage() for r in caplog.records)
    del kept


def test_eviction_for_age_is_spread_over_the_next_starts():
    processor = BreakdownProcessor(max_in_flight=10_000, max_age_s=1.0, record_metrics=False)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    kept = [tracer.start_span("trajectory", attributes={A.TRAJECTORY_ID: f"t{i}"},
                              start_time=1) for i in range(1000)]  # fmt: skip
    late = 2 * 10**9  # all 1,000 are now past the age limit
    kept.append(tracer.start_span("trajectory", attributes={A.TRAJECTORY_ID: "late"},
                                  start_time=late))  # fmt: skip
    assert processor.evicted == 64  # not 1,000 under the lock at once
    for i in range(15):
        kept.append(tracer.start_span("trajectory", attributes={A.TRAJECTORY_ID: f"l{i}"},
                                      start_time=late))  # fmt: skip
    assert processor.evicted == 1000 and processor.evicted_by_reason == {"max_age": 1000}
