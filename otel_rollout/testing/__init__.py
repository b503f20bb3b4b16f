"""Test helpers and an opt-in pytest plugin (``pytest_plugins = ["otel_rollout.testing"]``):
local providers with in-memory span and log exporters and a metric reader; under the
plugin otel-rollout's internal errors raise instead of being logged (docs/agent-loop.md,
"Testing your own code").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs import export as logs_export
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import Sampler

from otel_rollout import attributes as A
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._accounting.summary import BreakdownCollector
from otel_rollout._api.tracer import Clock, RolloutTracer
from otel_rollout._export.log_file import EVENT_NAME_ATTRIBUTE
from otel_rollout._processing.breakdown_processor import BreakdownProcessor
from otel_rollout.testing._clock import DeterministicIds, ManualClock

__all__ = [
    "DeterministicIds",
    "ManualClock",
    "RolloutTestEnv",
    "make_test_env",
    "manual_env",
    "rollout_env",
]


def points_in(data: Any, name: str, **attributes: Any) -> list[Any]:
    """Data points of metric ``name`` in collected ``data`` (a ``MetricsData`` or None)
    whose attributes include ``attributes``."""
    return [
        point
        for rm in (data.resource_metrics if data is not None else ())
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == name
        for point in metric.data.data_points
        if all((point.attributes or {}).get(k) == v for k, v in attributes.items())
    ]


class RolloutTestEnv:
    """Local providers wired like production, with everything kept in memory.

    ``clock`` (a :class:`ManualClock`, or any callable returning epoch nanoseconds) times
    the tracer's spans; ``id_generator`` (e.g. :class:`DeterministicIds`) draws trace,
    span and trajectory ids. Both default to the real ones.
    """

    def __init__(
        self,
        *,
        sampler: Sampler | None = None,
        bands: Mapping[str, str] | None = None,
        resource: Resource | None = None,
        clock: Clock | None = None,
        id_generator: IdGenerator | None = None,
        **processor_options: Any,
    ) -> None:
        self.clock = clock
        self.metric_reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(
            metric_readers=[self.metric_reader],
            resource=resource or Resource.create({"service.name": "otel-rollout-test"}),
        )
        self.collector = BreakdownCollector()
        self.processor = BreakdownProcessor(
            self.meter_provider, on_breakdown=self.collector, bands=bands, **processor_options
        )
        self.span_exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider(
            sampler=sampler, resource=self.meter_provider._sdk_config.resource,
            id_generator=id_generator,
        )  # fmt: skip
        self.tracer_provider.add_span_processor(self.processor)
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.span_exporter))
        # the SDK's in-memory log exporter (renamed in 1.39)
        memory = getattr(logs_export, "InMemoryLogRecordExporter", None)
        self.log_exporter = (memory or logs_export.InMemoryLogExporter)()
        self.logger_provider = LoggerProvider(resource=self.meter_provider._sdk_config.resource)
        self.logger_provider.add_log_record_processor(
            logs_export.SimpleLogRecordProcessor(self.log_exporter)
        )
        self.tracer = RolloutTracer(self.tracer_provider, self.meter_provider,
                                    processor=self.processor, clock=clock,
                                    id_generator=id_generator,
                                    logger_provider=self.logger_provider)  # fmt: skip

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        """Finished, exported spans (optionally only those called ``name``), in end order."""
        spans = self.span_exporter.get_finished_spans()
        return [s for s in spans if name is None or s.name == name]

    def roots(self) -> list[ReadableSpan]:
        """Exported trajectory root spans."""
        return [s for s in self.spans() if A.TRAJECTORY_ID in (s.attributes or {})]

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        """Exported spans whose parent is ``parent``."""
        sid = parent.context.span_id
        return [s for s in self.spans() if s.parent is not None and s.parent.span_id == sid]

    def events(self, name: str) -> list[Any]:
        """Log records of event ``name`` (rewards: ``gen_ai.evaluation.result``), in the
        order emitted: each with its ``attributes``, ``trace_id`` and ``span_id``."""
        records = [item.log_record for item in self.log_exporter.get_finished_logs()]
        return [r for r in records if (getattr(r, "event_name", None)
                or (r.attributes or {}).get(EVENT_NAME_ATTRIBUTE)) == name]  # fmt: skip

    @property
    def breakdowns(self) -> list[Breakdown]:
        """Breakdowns produced so far (not drained)."""
        return self.collector.peek()

    def metric_points(self, name: str, **attributes: Any) -> list[Any]:
        """Data points of metric ``name`` whose attributes include ``attributes``, from a
        collection of its own (to read several metrics from one collection:
        ``points_in(env.metric_reader.get_metrics_data(), name)``)."""
        return points_in(self.metric_reader.get_metrics_data(), name, **attributes)

    def histogram_points(self, name: str, **attributes: Any) -> list[HistogramDataPoint]:
        """Histogram data points of ``name`` (keys with dots: pass ``**{"a.b": v}``)."""
        return [p for p in self.metric_points(name, **attributes) if hasattr(p, "bucket_counts")]

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()
        self.logger_provider.shutdown()


def make_test_env(**options: Any) -> RolloutTestEnv:
    """A :class:`RolloutTestEnv`; options go to it (``sampler``, ``bands``, ``clock``,
    ``id_generator``, the processor's)."""
    return RolloutTestEnv(**options)


try:
    import pytest
except ImportError:  # pragma: no cover - the helpers work without pytest
    pytest = None  # type: ignore[assignment]  # a module, or None without it

if pytest is not None:

    @pytest.fixture
    def rollout_env() -> Iterator[RolloutTestEnv]:
        """Local providers, an in-memory span exporter and metric reader, and a tracer."""
        env = RolloutTestEnv()
        yield env
        env.shutdown()

    @pytest.fixture
    def manual_env() -> Iterator[RolloutTestEnv]:
        """Like ``rollout_env``, on a :class:`ManualClock` (``manual_env.clock.advance(ms=5)``)
        and :class:`DeterministicIds`: durations are exactly what the test says."""
        env = RolloutTestEnv(clock=ManualClock(), id_generator=DeterministicIds())
        yield env
        env.shutdown()

    def pytest_configure(config: Any) -> None:
        from otel_rollout._base.errors import set_raise_internal_errors

        set_raise_internal_errors(True)
