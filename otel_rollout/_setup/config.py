"""``configure()``: providers, exporters and the breakdown processor in one call.

The settings are declared and resolved in :mod:`otel_rollout._settings.table` (argument, then
``OTEL_ROLLOUT_*`` variable, then the standard ``OTEL_*`` variable, then a default; a
bad argument raises :class:`ConfigError`, a bad variable warns). The resource comes from
:mod:`otel_rollout._setup.resource`, the exporters from :mod:`otel_rollout._setup.pipeline`, and the
handle is :class:`otel_rollout._setup.rollout.Rollout`.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, TextIO

from opentelemetry import metrics, trace

from otel_rollout._accounting.summary import BreakdownCollector
from otel_rollout._api.tracer import RolloutTracer
from otel_rollout._processing.breakdown_processor import BreakdownProcessor
from otel_rollout._processing.genai_metrics import GenAIMetricsProcessor
from otel_rollout._processing.in_flight import in_flight
from otel_rollout._processing.loopstall import configure_loop_stalls
from otel_rollout._processing.sampling import RecordingRatioSampler
from otel_rollout._settings.table import (
    BY_NAME,
    DEFAULT_OUTPUT_DIR,
    METRICS_EXPORTERS,
    PROTOCOLS,
    TRACES_EXPORTERS,
    ConfigError,
    Settings,
    resolve,
)
from otel_rollout._setup import preemption
from otel_rollout._setup.announce import announce
from otel_rollout._setup.pipeline import TracePipeline, metric_readers, otlp_exporter
from otel_rollout._setup.resource import build_resource
from otel_rollout._setup.rollout import (
    EXIT_TIMEOUT_S,
    Rollout,
    RunningSummary,
    _global_lock,
    _set_global,
    flush_on_signals,
    get_rollout,
    register_for_exit,
)

__all__ = [
    "DEFAULT_OUTPUT_DIR",
    "EXIT_TIMEOUT_S",
    "METRICS_EXPORTERS",
    "PROTOCOLS",
    "TRACES_EXPORTERS",
    "ConfigError",
    "Rollout",
    "configure",
    "get_rollout",
]


def configure(
    *,
    service_name: str | None = None,
    local: bool = False,
    run_id: str | None = None,
    traces_exporter: str | None = None,
    metrics_exporter: str | None = None,
    endpoint: str | None = None,
    protocol: str | None = None,
    sample_ratio: float | None = None,
    tail_keep_slower_than_s: float | None = None,
    tail_keep_percentile: float | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    trace_file_max_mb: float | None = None,
    trace_file_max_age_s: float | None = None,
    metric_export_interval_ms: int | None = None,
    genai_metrics: bool | None = None,
    resource_attributes: Mapping[str, Any] | None = None,
    bands: Mapping[str, str] | None = None,
    on_breakdown: Callable[[Any], Any] | None = None,
    summary_stream: TextIO | None = None,
) -> Rollout:
    """Set up tracing and metrics for a rollout job; returns a :class:`Rollout`.

    With ``local=False`` (the default) the global providers are set, once: a second call
    warns and returns the first setup unchanged (:func:`otel_rollout.get_rollout` returns
    it). ``local=True`` touches no global state. With no OTLP endpoint configured, traces
    go to an OTLP JSON lines file under ``output_dir`` (``OTEL_ROLLOUT_OUTPUT_DIR``,
    default ``./otel-rollout-output``) and a short summary prints at shutdown (also with
    the console exporter). The settings are listed in docs/configure.md.
    """

    given = locals()  # the keywords: those named in the settings table are settings

    def build() -> Rollout:
        settings = resolve(**{k: v for k, v in given.items() if k in BY_NAME})
        rollout = _build(settings, on_breakdown=on_breakdown, summary_stream=summary_stream)
        preemption.keep_off_threads_forks_restart()  # after the pipeline's own fork hooks
        return rollout

    if local:
        return build()
    with _global_lock:
        existing = get_rollout()
        if existing is not None:
            warnings.warn(
                "otel_rollout.configure() was already called; this call changes nothing",
                stacklevel=2,
            )
            return existing
        with preemption.kept_off_new_threads():  # its threads leave signals to the main one
            rollout = build()
        rollout.is_global = True
        announce(rollout.settings, rollout.trace_file)
        trace.set_tracer_provider(rollout.tracer_provider)
        metrics.set_meter_provider(rollout.meter_provider)
        _set_global(rollout)
        if rollout.settings.flush_on_signals and not rollout.settings.disabled:
            flush_on_signals()  # SIGTERM, SIGHUP: flush and summarise, then end as they would
        return rollout


def _build(settings: Settings, *, on_breakdown: Callable[[Any], Any] | None,
           summary_stream: TextIO | None) -> Rollout:  # fmt: skip
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    collector = BreakdownCollector()
    if settings.disabled:
        noop_t, noop_m = trace.NoOpTracerProvider(), metrics.NoOpMeterProvider()
        return Rollout(noop_t, noop_m, RolloutTracer(noop_t, noop_m), collector, None,
                       settings=settings)  # fmt: skip

    resource = build_resource(settings)
    # Built first: a bad endpoint is reported before anything is started.
    span_exporter = (
        otlp_exporter("traces", settings) if settings.traces_exporter == "otlp" else None
    )
    readers, closers = metric_readers(settings)
    # Our own exit hook shuts both down within a timeout (the SDK's would warn on a second
    # shutdown after the user's, and has no overall bound).
    meter_provider = MeterProvider(metric_readers=readers, resource=resource,
                                   shutdown_on_exit=False)  # fmt: skip
    sinks: list[Callable[[Any], Any]] = [collector]
    if on_breakdown is not None:
        sinks.append(on_breakdown)
    # No reader (metrics exporter "none"): histogram records would go nowhere.
    processor = BreakdownProcessor(meter_provider, on_breakdown=sinks, bands=settings.bands,
                                   record_metrics=bool(readers),
                                   max_in_flight=settings.max_in_flight)  # fmt: skip
    configure_loop_stalls(settings.loop_stalls, threshold_s=settings.loop_stall_threshold_ms / 1e3,
                          meter_provider=meter_provider)  # fmt: skip
    tracer_provider = TracerProvider(resource=resource,
                                     sampler=RecordingRatioSampler(settings.sample_ratio),
                                     shutdown_on_exit=False)  # fmt: skip
    tracer_provider.add_span_processor(processor)
    if settings.genai_metrics:
        tracer_provider.add_span_processor(GenAIMetricsProcessor(meter_provider))

    pipeline = TracePipeline(settings, meter_provider, resource)
    pipeline.in_flight = partial(in_flight, processor, settings.in_flight_max_listed)
    try:
        export = pipeline.build(span_exporter)
    except ConfigError:
        meter_provider.shutdown()
        for server in closers:
            server.shutdown()
            server.server_close()
        raise
    if export is not None:
        tracer_provider.add_span_processor(export)
    summary = None
    # The embedded default (a trace file) and the console exporter: a summary at shutdown.
    if pipeline.trace_file is not None or settings.traces_exporter == "console":
        summary = RunningSummary()
        processor.add_sink(summary)
        summary_stream = summary_stream or sys.stderr
    rollout = Rollout(tracer_provider, meter_provider,
                      RolloutTracer(tracer_provider, meter_provider, processor=processor),
                      collector, processor,
                      pipeline.trace_file, settings=settings, summary_stream=summary_stream,
                      _summary=summary, _export=pipeline.batch_processors,
                      _trace_writer=pipeline.trace_writer,
                      _closers=closers)  # fmt: skip
    register_for_exit(rollout)  # a no-op at exit if the user already shut it down
    return rollout


def __getattr__(name: str) -> Any:
    if name == "_global":  # the global handle's old home, read by older integrations
        return get_rollout()
    raise AttributeError(name)
