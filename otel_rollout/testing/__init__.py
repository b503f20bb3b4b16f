"""Test helpers and a pytest plugin: local providers with in-memory exporter and reader.

``make_test_env()`` builds a :class:`RolloutTestEnv` without touching global providers;
the ``rollout_env`` fixture gives one per test (real time), ``manual_env`` one on a
:class:`ManualClock` with :class:`DeterministicIds`, for exact-nanosecond assertions.
Under this plugin otel-rollout's internal errors raise instead of being logged, so bugs
surface in tests.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

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
from otel_rollout._processing.breakdown_processor import BreakdownProcessor
from otel_rollout.testing._clock import DeterministicIds, ManualClock

__all__ = [
    "DeterministicIds",
    "ManualClock",
    "RolloutTestEnv",
    "make_test_env",
    "manual_env",
    "metric_points",
    "rollout_env",
]


def metric_points(
    reader: InMemoryMetricReader, name: str, attributes: Mapping[str, Any] | None = None
) -> list[Any]:
    """Data points of metric ``name`` whose attributes include ``attributes``."""
    data = reader.get_metrics_data()
    out: list[Any] = []
    if data is None:
        return out
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name != name:
                    continue
                for point in metric.data.data_points:
                    attrs = dict(point.attributes or {})
                    if attributes and any(attrs.get(k) != v for k, v in attributes.items()):
                        continue
                    out.append(point)
    return out


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
        kwargs: dict[str, Any] = {"resource": self.meter_provider._sdk_config.resource}
        if sampler is not None:
            kwargs["sampler"] = sampler
        if id_generator is not None:
            kwargs["id_generator"] = id_generator
        self.tracer_provider = TracerProvider(**kwargs)
        self.tracer_provider.add_span_processor(self.processor)
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.span_exporter))
        self.tracer = RolloutTracer(
            self.tracer_provider,
            self.meter_provider,
            processor=self.processor,
            clock=clock,
            id_generator=id_generator,
        )

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

    @property
    def breakdowns(self) -> list[Breakdown]:
        """Breakdowns produced so far (not drained)."""
        return self.collector.peek()

    def metric_points(self, name: str, **attributes: Any) -> list[Any]:
        """Data points of metric ``name`` whose attributes include ``attributes``."""
        return metric_points(self.metric_reader, name, attributes)

    def histogram_points(self, name: str, **attributes: Any) -> list[HistogramDataPoint]:
        """Histogram data points of ``name`` (keys with dots: pass ``**{"a.b": v}``)."""
        return [p for p in self.metric_points(name, **attributes) if hasattr(p, "bucket_counts")]

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def make_test_env(**options: Any) -> RolloutTestEnv:
    """A :class:`RolloutTestEnv`; options go to it (``sampler``, ``bands``, ``clock``,
    ``id_generator``, the processor's)."""
    return RolloutTestEnv(**options)


def _bucket_index(bounds: Sequence[float], value: float) -> int:
    """Index of the explicit-bucket histogram bucket holding ``value`` (upper inclusive)."""
    for i, bound in enumerate(bounds):
        if value <= bound:
            return i
    return len(bounds)


try:
    import pytest
except ImportError:  # pragma: no cover - the helpers work without pytest
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture
    def rollout_env() -> Iterator[RolloutTestEnv]:
        """Local providers, an in-memory span exporter and metric reader, and a tracer."""
        env = RolloutTestEnv()
        try:
            yield env
        finally:
            env.shutdown()

    @pytest.fixture
    def manual_env() -> Iterator[RolloutTestEnv]:
        """Like ``rollout_env``, on a :class:`ManualClock` (``manual_env.clock.advance(ms=5)``)
        and :class:`DeterministicIds`: durations are exactly what the test says."""
        env = RolloutTestEnv(clock=ManualClock(), id_generator=DeterministicIds())
        try:
            yield env
        finally:
            env.shutdown()

    def pytest_configure(config: Any) -> None:
        from otel_rollout._base.errors import set_raise_internal_errors

        set_raise_internal_errors(True)
