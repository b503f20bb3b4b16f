"""``configure()``: providers, exporters and the breakdown processor in one call.

The settings are declared and resolved in :mod:`otel_rollout._settings.table` (argument, then
``OTEL_ROLLOUT_*`` variable, then the standard ``OTEL_*`` variable, then a default; a
bad argument raises :class:`ConfigError`, a bad variable warns). The resource comes from
:mod:`otel_rollout._setup.resource`, the exporters from :mod:`otel_rollout._setup.pipeline`, and the
handle is :class:`otel_rollout._setup.rollout.Rollout`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from opentelemetry import metrics, trace
from opentelemetry._logs import NoOpLoggerProvider

from otel_rollout._accounting.in_flight import InFlight
from otel_rollout._accounting.summary import BreakdownCollector
from otel_rollout._api.step_context import latest_open
from otel_rollout._api.tracer import RolloutTracer
from otel_rollout._processing.breakdown_processor import BreakdownProcessor, in_flight
from otel_rollout._processing.genai_metrics import GenAIMetricsProcessor
from otel_rollout._processing.gpu import start_gpu
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
from otel_rollout._setup.pipeline import (
    TracePipeline,
    metric_readers,
    otlp_exporter,
    without_missing_exporters,
)
from otel_rollout._setup.resource import build_resource
from otel_rollout._setup.rollout import (
    EXIT_TIMEOUT_S,
    Rollout,
    RunningSummary,
    _global_lock,
    _set_global,
    _stop_providers,
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
    loop_stalls: bool | None = None,
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
        # after the pipeline's own fork hooks: the threads they restart leave signals alone
        preemption.keep_off_threads_forks_restart()
        return rollout

    if local:
        return build()
    with _global_lock:
        existing = get_rollout()
        if existing is not None:
            warnings.warn("otel_rollout.configure() was already called; this call changes "
                          "nothing", stacklevel=2)  # fmt: skip
            return existing
        with preemption.kept_off_new_threads():  # its threads leave signals to the main one
            rollout = build()
        rollout.is_global = True
        announce(rollout.settings, rollout.trace_file, gpu=rollout.gpu)
        trace.set_tracer_provider(rollout.tracer_provider)
        metrics.set_meter_provider(rollout.meter_provider)
        _set_global(rollout)
        if rollout.settings.flush_on_signals and not rollout.settings.disabled:
            flush_on_signals()  # SIGTERM, SIGHUP: flush and summarise, then end as they would
        return rollout


# --- The one line the global configure() says on stderr (docs/configure.md) -------------------
# Once per process; not in Ray workers (the driver says it), nor with OTEL_ROLLOUT_ANNOUNCE=false.

_said = False  # read and set under configure()'s lock


def announce_text(settings: Any, trace_file: Path | None, gpu: str | None = None) -> str:
    """The lines to say for ``settings`` (resolved), the trace file, if any, and what is
    read of the GPUs (``gpu``, one line), if given."""
    t = settings.traces_exporter
    if t == "file" and trace_file is not None:
        traces = f"traces -> {trace_file}"
        watch = f"otel-rollout top {trace_file.parent}"
    elif t == "otlp":
        traces = f"traces -> OTLP {settings.endpoint_for('traces')} ({settings.traces_protocol})"
        watch = "otel-rollout top --listen PORT, with the traces sent there"
    else:
        traces, watch = f"traces -> {t}", None
    m = settings.metrics_exporter
    if m == "otlp":
        metrics = f"OTLP {settings.endpoint_for('metrics')}"
    elif m == "prometheus":
        metrics = f"Prometheus http://{settings.prometheus_host}:{settings.prometheus_port}/metrics"
    else:
        metrics = m
    lines = [f"otel-rollout: run {settings.run_id}: {traces}; metrics -> {metrics}"]
    if watch is not None:
        lines.append(f"otel-rollout: watch it live: {watch}")
    if gpu:
        lines.append(f"otel-rollout: {gpu}")
    lines.append("otel-rollout: (OTEL_ROLLOUT_ANNOUNCE=false silences these lines)")
    return "\n".join(lines) + "\n"


def announce(
    settings: Any, trace_file: Path | None, stream: TextIO | None = None, *, gpu: str | None = None
) -> bool:
    """Say :func:`announce_text` on stderr, the first time in this process; True if said."""
    global _said
    if not settings.announce or settings.disabled:
        return False
    if "ray.worker.id" in (settings.resource_attributes or {}):
        return False  # a Ray worker (the setup hook's configure()): the driver said it
    if _said:
        return False
    _said = True
    try:
        (stream or sys.stderr).write(announce_text(settings, trace_file, gpu))
    except Exception:  # a closed stderr must not stop the run
        return False
    return True


def _in_flight(processor: BreakdownProcessor, max_listed: int) -> InFlight:
    """The in-flight snapshot: the processor's running trajectories, and the training step
    open in the process with the phase it is in (``otel-rollout top`` shows it)."""
    snap = in_flight(processor, max_listed)
    step = latest_open()
    return snap if step is None else dataclasses.replace(snap, step=step.open_step())


def _build(settings: Settings, *, on_breakdown: Callable[[Any], Any] | None,
           summary_stream: TextIO | None) -> Rollout:  # fmt: skip
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    collector = BreakdownCollector()
    if settings.disabled:
        noop_t, noop_m = trace.NoOpTracerProvider(), metrics.NoOpMeterProvider()
        tracer = RolloutTracer(noop_t, noop_m, logger_provider=NoOpLoggerProvider())
        return Rollout(noop_t, noop_m, tracer, collector, None, settings=settings)

    settings = without_missing_exporters(settings, stacklevel=5)
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

    snapshot = partial(_in_flight, processor, settings.in_flight_max_listed)
    pipeline = TracePipeline(settings, meter_provider, resource, snapshot)
    try:
        export = pipeline.build(span_exporter)
    except ConfigError:
        _stop_providers(None, meter_provider, closers)
        raise
    if export is not None:
        tracer_provider.add_span_processor(export)
    gpu = start_gpu(settings.gpu_interval_s, meter_provider)
    closers.append(gpu)
    summary = None
    # A summary at shutdown, whichever exporter: what was measured and where spans went.
    if settings.traces_exporter != "none":
        summary = RunningSummary()
        processor.add_sink(summary)
        summary_stream = summary_stream or sys.stderr
    rollout = Rollout(tracer_provider, meter_provider,
                      RolloutTracer(tracer_provider, meter_provider, processor=processor,
                                    logger_provider=pipeline.logger_provider),
                      collector, processor,
                      pipeline.trace_file, settings=settings, summary_stream=summary_stream,
                      _summary=summary, _export=pipeline.batch_processors,
                      _trace_writer=pipeline.trace_writer, _spill=pipeline.spill,
                      _recorder=pipeline.recorder, _logger_provider=pipeline.logger_provider,
                      _closers=closers, gpu=gpu.line)  # fmt: skip
    register_for_exit(rollout)  # a no-op at exit if the user already shut it down
    return rollout
