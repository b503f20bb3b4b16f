"""The export side of ``configure()``: metric readers and the trace export pipeline,
built from resolved :class:`~otel_rollout._settings.table.Settings`."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import secrets
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter

from otel_rollout._export.guarded import (
    CountingProcessor,
    guarded_metric_exporter,
    guarded_span_processor,
)
from otel_rollout._processing.tailkeep import TailKeepProcessor
from otel_rollout._settings.table import ConfigError, Settings, safe_file_part

if TYPE_CHECKING:
    from socketserver import BaseServer

    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk.metrics.export import MetricReader

    from otel_rollout._accounting.in_flight import InFlight
    from otel_rollout._export.in_flight import InFlightRecorder
    from otel_rollout._export.spill import SpillExporter
    from otel_rollout._export.tracefile import RotatingTraceFile


#: an OTLP protocol, or the Prometheus exporter -> the module it needs
_NEEDS = MappingProxyType({
    "grpc": "opentelemetry.exporter.otlp.proto.grpc",
    "http/protobuf": "opentelemetry.exporter.otlp.proto.http",
    "prometheus": "opentelemetry.exporter.prometheus",
})  # fmt: skip
_warned = False


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package is missing
        return False


def without_missing_exporters(settings: Settings, stacklevel: int = 2) -> Settings:
    """``settings``, with traces going to the trace file and metrics nowhere where the
    exporter they name is not installed (a plain install where the cluster sets
    ``OTEL_EXPORTER_OTLP_ENDPOINT``); warns once per process, naming the extra."""
    global _warned
    changes: dict[str, Any] = {}  # field name -> value, for dataclasses.replace
    missing, instead = [], []
    for signal, fallback, why in (("traces", "file", "traces go to the local trace file"),
                                  ("metrics", "none", "metrics are not exported")):  # fmt: skip
        kind = getattr(settings, f"{signal}_exporter")
        module = _NEEDS.get(getattr(settings, f"{signal}_protocol") if kind == "otlp" else kind)
        if module is not None and not _importable(module):
            missing.append(f"{signal} to {kind}")
            instead.append(why)
            changes[f"{signal}_exporter"] = fallback
    if not changes:
        return settings
    if not _warned:
        _warned = True
        warnings.warn(
            f"otel-rollout: exporting {' and '.join(missing)} needs the [otlp] extra, which "
            f"is not installed (pip install 'otel-rollout[otlp]'); {' and '.join(instead)}",
            stacklevel=stacklevel,
        )
    return dataclasses.replace(settings, **changes)


def otlp_exporter(signal: str, settings: Settings) -> Any:
    """The OTLP exporter of ``signal`` (traces, metrics, logs); a bad endpoint is a
    ConfigError. Logs go where traces go (over HTTP, ``/v1/logs`` beside ``/v1/traces``)."""
    protocol = getattr(settings, f"{'traces' if signal == 'logs' else signal}_protocol")
    endpoint = logs_endpoint(settings) if signal == "logs" else settings.endpoint_for(signal)
    # A short timeout keeps shutdown() and retries bounded while an endpoint is down.
    timeout = settings.otlp_timeout_ms / 1000
    transport = "grpc" if protocol == "grpc" else "http"
    module, name = {"traces": ("trace_exporter", "OTLPSpanExporter"),
                    "metrics": ("metric_exporter", "OTLPMetricExporter"),
                    "logs": ("_log_exporter", "OTLPLogExporter")}[signal]  # fmt: skip
    pkg = importlib.import_module(f"opentelemetry.exporter.otlp.proto.{transport}.{module}")
    cls = getattr(pkg, name)
    try:
        return cls(endpoint=endpoint, timeout=timeout)
    except ValueError as exc:  # e.g. an unparsable URL
        raise ConfigError(f"OTLP {signal} endpoint {endpoint!r} is not accepted: {exc}") from exc


def logs_endpoint(settings: Settings) -> str:
    """Where log records go: the traces endpoint over gRPC; over HTTP, its ``/v1/logs``."""
    url = settings.endpoint_for("traces")
    if settings.traces_protocol == "grpc":
        return url
    return (url.removesuffix("/v1/traces") or url.rstrip("/")) + "/v1/logs"


def metric_readers(settings: Settings) -> tuple[list[MetricReader], list[Any]]:
    """(metric readers, servers to stop after the meter provider shuts down: the caller
    adds its own closers to that list)."""
    kind = settings.metrics_exporter
    if kind in ("otlp", "console"):
        from opentelemetry.sdk.metrics.export import (
            ConsoleMetricExporter,
            PeriodicExportingMetricReader,
        )

        if kind == "console":
            exporter = guarded_metric_exporter(ConsoleMetricExporter(), target="the console")
        else:
            exporter = guarded_metric_exporter(
                otlp_exporter("metrics", settings), target=settings.endpoint_for("metrics")
            )
        interval = settings.metric_export_interval_ms
        return [PeriodicExportingMetricReader(exporter, export_interval_millis=interval)], []
    if kind == "prometheus":
        reader, server = prometheus_reader(settings.prometheus_host, settings.prometheus_port)
        return [reader], [server] if server is not None else []
    return [], []


def prometheus_reader(host: str, port: int) -> tuple[MetricReader, BaseServer | None]:
    """A Prometheus reader on a registry of its own, served on ``host:port``."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=True)
    try:  # not prometheus_client's process-wide REGISTRY: no global state of ours there
        reader = PrometheusMetricReader(registry=registry)
    except TypeError:  # an exporter release without ``registry``
        from prometheus_client import REGISTRY as registry

        reader = PrometheusMetricReader()
    try:
        started = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        warnings.warn(
            f"otel-rollout: cannot serve Prometheus metrics on {host}:{port} ({exc}); they are "
            "recorded but not exposed. Set OTEL_EXPORTER_PROMETHEUS_PORT to a free port.",
            stacklevel=4,
        )
        return reader, None
    # prometheus_client >= 0.17 returns (server, thread); older ones cannot be stopped.
    return reader, started[0] if isinstance(started, tuple) else None


def trace_file_path(settings: Settings) -> Path:
    """A new trace file's path, one per process: the start time, the run id (made safe for
    a file name), the pid and a random part, so processes of one run (Ray workers, ranks)
    started in the same second never share a file, even when a pid is reused."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    own = f"{os.getpid()}-{secrets.token_hex(3)}"
    run = safe_file_part(settings.run_id, limit=48)  # the whole name stays under 100
    return Path(settings.output_dir) / f"traces-{stamp}-{run}-{own}.jsonl"


def create_trace_file(path: Path) -> None:
    """Create ``path`` (and its folder); a ConfigError that says which of the two failed."""
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot write trace files to {str(folder)!r} ({exc.strerror or exc}); set "
            "output_dir / OTEL_ROLLOUT_OUTPUT_DIR to a writable folder, or choose another "
            "OTEL_TRACES_EXPORTER (otlp, console, none)"
        ) from exc
    try:
        path.touch(mode=0o644)  # also under umask 000: a trace file is not for all to edit
    except OSError as exc:
        raise ConfigError(
            f"cannot create the trace file {str(path)!r} ({exc.strerror or exc}); check that "
            f"{str(folder)!r} is writable (output_dir / OTEL_ROLLOUT_OUTPUT_DIR)"
        ) from exc


class TracePipeline:
    """The export processors of one ``configure()``: what they count, and the trace file."""

    def __init__(self, settings: Settings, meter_provider: metrics.MeterProvider | None,
                 resource: Resource, in_flight: Callable[[], InFlight]) -> None:  # fmt: skip
        self.settings = settings
        self.meter_provider = meter_provider
        self.resource = resource  # the spans' resource: a trace file's loss records carry it
        self.batch_processors: list[Any] = []  # each has ``.stats`` (the console's too)
        self.trace_file: Path | None = None
        #: the trace file's writer: a forked child's summary names the file it writes
        self.trace_writer: RotatingTraceFile | None = None
        self.in_flight = in_flight  # answers the running trajectories, for the in-flight record
        #: OTLP mode: the exporter that spills what the endpoint fails to a local file
        self.spill: SpillExporter | None = None
        #: our log records' provider (file and OTLP): shut down before the span pipeline,
        #: after the recorder, which writes the in-flight record (when on)
        self.logger_provider: LoggerProvider | None = None
        self.recorder: InFlightRecorder | None = None

    def _tail_keep(self, processor: SpanProcessor) -> SpanProcessor:
        # Below 100% sampling, failed, cancelled and slow trajectories are kept in full.
        s = self.settings
        if s.sample_ratio >= 1.0:
            return processor
        return TailKeepProcessor(processor, slower_than_s=s.tail_keep_slower_than_s,
                                 slower_than_percentile=s.tail_keep_percentile)  # fmt: skip

    def _batch(self, exporter: SpanExporter, target: str, **batch: Any) -> CountingProcessor:
        """The guarded batch processor over ``exporter`` (its ``stats`` count what it
        loses); the caller adds tail keep in front (:meth:`_tail_keep`)."""
        queue = self.settings.bsp_max_queue_size
        processor = guarded_span_processor(exporter, self.meter_provider, target=target,
                                            max_queue_size=queue, **batch)  # fmt: skip
        self.batch_processors.append(processor)
        return processor

    def _trace_file(self) -> RotatingTraceFile:
        """A new trace file (OTLP JSON lines, rotated as the settings say)."""
        from otel_rollout._export.tracefile import RotatingTraceFile

        s = self.settings
        path = trace_file_path(s)
        create_trace_file(path)
        max_bytes = int(min(s.trace_file_max_mb, 2**40) * 2**20)
        return RotatingTraceFile(path, max_bytes=max_bytes, max_age_s=s.trace_file_max_age_s)

    def _state_losses(self, trace_file: RotatingTraceFile, counted: CountingProcessor) -> None:
        """Spans lost before ``trace_file`` are stated in it, for ``otel-rollout report``."""
        resource = getattr(self.resource, "attributes", None)
        trace_file.record_losses(lambda: counted.stats.losses(), resource)

    def _logs(self, log_exporter: Any) -> None:
        """Our log records (the in-flight record, rewards' evaluation events) go to
        ``log_exporter`` in batches; the in-flight record is written periodically when on
        (``in_flight_interval_s``)."""
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

        provider = LoggerProvider(resource=self.resource, shutdown_on_exit=False)
        provider.add_log_record_processor(BatchLogRecordProcessor(log_exporter))
        self.logger_provider = provider
        interval = self.settings.in_flight_interval_s
        if interval:
            from otel_rollout._export.in_flight import InFlightRecorder

            self.recorder = InFlightRecorder(self.in_flight, provider, interval)

    def build(self, span_exporter: SpanExporter | None = None) -> SpanProcessor | None:
        """The span processor to add after the breakdown processor, or None (``none``).

        ``span_exporter``: the OTLP exporter, built earlier so that a bad endpoint is
        reported before anything starts.
        """
        s = self.settings
        if s.traces_exporter == "file":
            exporter = self._trace_file()
            self.trace_file, self.trace_writer = exporter.path, exporter
            counted = self._batch(exporter, str(exporter.path))
            self._state_losses(exporter, counted)
            from otel_rollout._export.log_file import TraceFileLogExporter

            self._logs(TraceFileLogExporter(exporter))
            return self._tail_keep(counted)
        if s.traces_exporter == "otlp":
            from otel_rollout._export.spill import SpillExporter

            target = f"{s.endpoint_for('traces')} ({s.traces_protocol})"
            processors: list[CountingProcessor] = []

            def open_local() -> RotatingTraceFile:  # what the endpoint fails goes to a file
                local = self._trace_file()
                self._state_losses(local, processors[0])
                return local

            self.spill = SpillExporter(span_exporter or otlp_exporter("traces", s), open_local,
                                       target=target)  # fmt: skip
            processors.append(self._batch(self.spill, target))
            from otel_rollout._export.log_file import OTLPLogExporter

            logs_target = f"{logs_endpoint(s)} ({s.traces_protocol})"
            self._logs(OTLPLogExporter(otlp_exporter("logs", s), target=logs_target))
            return self._tail_keep(processors[0])
        if s.traces_exporter == "console":
            from otel_rollout._export.console import ConsoleTreeExporter

            # each trajectory printed as a tree, on stdout, by the batch processor's thread
            console = ConsoleTreeExporter(bands=s.bands)
            return self._tail_keep(self._batch(console, "the console", schedule_delay_millis=200))
        return None
