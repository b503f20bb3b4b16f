"""Metric export that cannot hurt the trainer: never raises, an outage logged twice."""

from __future__ import annotations

import logging
from typing import Any

from otel_rollout._base.quiet import _quiet, _quiet_loggers_of

_metrics_log = logging.getLogger("otel_rollout.export.metrics")


def guarded_metric_exporter(exporter: Any, *, target: str = "the metrics endpoint") -> Any:
    """``exporter`` (a ``MetricExporter``) that never raises and logs an outage twice:
    when it starts and when export resumes (with the number of failed exports), instead
    of the exporter's own error at every interval."""
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

    class _GuardedMetricExporter(MetricExporter):
        def __init__(self) -> None:
            super().__init__(
                preferred_temporality=getattr(exporter, "_preferred_temporality", None),
                preferred_aggregation=getattr(exporter, "_preferred_aggregation", None),
            )
            self.inner = exporter
            self.failing = False
            self.failed = 0  # failed exports since the last success
            _quiet_loggers_of(exporter)

        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kw: Any) -> Any:
            _quiet.on = self.failing
            error = None
            try:
                result = exporter.export(metrics_data, timeout_millis=timeout_millis, **kw)
            except Exception as exc:
                result, error = MetricExportResult.FAILURE, exc
            finally:
                _quiet.on = False
            if result is MetricExportResult.SUCCESS:
                if self.failing:
                    _metrics_log.warning(
                        "otel-rollout: metric export to %s resumed after %d failed exports",
                        target, self.failed,
                    )  # fmt: skip
                self.failing, self.failed = False, 0
                return result
            self.failed += 1
            if not self.failing:
                self.failing = True
                why = f": {type(error).__name__}: {error}" if error is not None else ""
                _metrics_log.warning(
                    "otel-rollout: metric export to %s failed%s; retried every interval and "
                    "logged again only when it recovers",
                    target, why,
                )  # fmt: skip
            return MetricExportResult.FAILURE

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            try:
                return bool(exporter.force_flush(timeout_millis))
            except Exception:
                return False

        def shutdown(self, timeout_millis: float = 30_000, **kw: Any) -> None:
            try:
                exporter.shutdown(timeout_millis=timeout_millis, **kw)
            except Exception as exc:
                _metrics_log.warning("otel-rollout: metric exporter shutdown failed: %s", exc)

    return _GuardedMetricExporter()
