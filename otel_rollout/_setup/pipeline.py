"""The export side of ``configure()``: metric readers and the trace export pipeline,
built from resolved :class:`~otel_rollout._settings.table.Settings`."""

from __future__ import annotations

import os
import secrets
import time
import warnings
from pathlib import Path
from typing import Any

from otel_rollout._export.guarded import guarded_batch_processor, guarded_metric_exporter
from otel_rollout._processing.tailkeep import TailKeepProcessor
from otel_rollout._settings.table import ConfigError, Settings, safe_file_part

#: Export-queue room reserved for spans tail keep releases. None now: kept traces that do
#: not fit the queue wait whole in a release buffer of their own
#: (``tail_keep_release_max_spans``) and move in as the queue drains.
KEPT_RESERVE = 0
#: Default export-queue room beyond ``OTEL_BSP_MAX_QUEUE_SIZE`` for any span, in
#: trace-file mode (``trace_file_burst_spans``): a local file keeps up on average but not
#: with thousands of trajectories ending at once (the writer shares the interpreter with
#: the agent threads). Bounded, so a full or hung disk drops and counts spans instead of
#: holding memory without end or blocking ends.
FILE_BURST_RESERVE = 100_000


def otlp_exporter(signal: str, settings: Settings) -> Any:
    """The OTLP exporter of ``signal`` (traces, metrics); a bad endpoint is a ConfigError."""
    protocol = getattr(settings, f"{signal}_protocol")
    endpoint = settings.endpoint_for(signal)
    # A short timeout keeps shutdown() and retries bounded while an endpoint is down.
    timeout = settings.otlp_timeout_ms / 1000
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    cls = OTLPSpanExporter if signal == "traces" else OTLPMetricExporter
    try:
        return cls(endpoint=endpoint, timeout=timeout)
    except ValueError as exc:  # e.g. an unparsable URL
        raise ConfigError(f"OTLP {signal} endpoint {endpoint!r} is not accepted: {exc}") from exc


def metric_readers(settings: Settings) -> tuple[list[Any], list[Any]]:
    """(metric readers, servers to stop after the meter provider shuts down)."""
    kind = settings.metrics_exporter
    if kind in ("otlp", "console"):
        from opentelemetry.sdk.metrics.export import (
            ConsoleMetricExporter,
            PeriodicExportingMetricReader,
        )

        if kind == "console":
            exporter = ConsoleMetricExporter()
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


def prometheus_reader(host: str, port: int) -> tuple[Any, Any]:
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
        path.touch()
    except OSError as exc:
        raise ConfigError(
            f"cannot create the trace file {str(path)!r} ({exc.strerror or exc}); check that "
            f"{str(folder)!r} is writable (output_dir / OTEL_ROLLOUT_OUTPUT_DIR)"
        ) from exc


class TracePipeline:
    """The export processors of one ``configure()``: what they count, and the trace file."""

    def __init__(self, settings: Settings, meter_provider: Any, resource: Any = None) -> None:
        self.settings = settings
        self.meter_provider = meter_provider
        self.resource = resource  # the spans' resource: a trace file's loss records carry it
        self.batch_processors: list[Any] = []  # each has ``.stats``
        self.trace_file: Path | None = None
        #: the trace file's writer: a forked child's summary names the file it writes
        self.trace_writer: Any = None
        #: answers the running trajectories, for the in-flight record (set by configure())
        self.in_flight: Any = None

    def _tail_keep(self, processor: Any) -> Any:
        # Below 100% sampling, failed, cancelled and slow trajectories are kept in full.
        s = self.settings
        if s.sample_ratio >= 1.0:
            return processor
        return TailKeepProcessor(processor, slower_than_s=s.tail_keep_slower_than_s,
                                 slower_than_percentile=s.tail_keep_percentile)  # fmt: skip

    def _batch(self, exporter: Any, target: str, burst_reserve: int = 0) -> Any:
        """The guarded batch processor over ``exporter`` (its ``stats`` count what it
        loses); the caller adds tail keep in front (:meth:`_tail_keep`)."""
        processor = guarded_batch_processor(
            exporter,
            self.meter_provider,
            target=target,
            max_queue_size=self.settings.bsp_max_queue_size + burst_reserve,
            kept_reserve=KEPT_RESERVE if self.settings.sample_ratio < 1.0 else 0,
            # what tail keep releases at once (a burst of failures) waits for room there
            kept_release=(
                self.settings.tail_keep_release_max_spans
                if self.settings.sample_ratio < 1.0
                else None
            ),
        )
        self.batch_processors.append(processor)
        return processor

    def _with_in_flight(self, exporter: Any) -> Any:
        """``exporter``, writing an in-flight record periodically when that is on."""
        interval = self.settings.in_flight_interval_s
        if not interval or self.in_flight is None:
            return exporter
        from otel_rollout._export.in_flight import InFlightExporter

        return InFlightExporter(exporter, self.in_flight, self.resource, interval)

    def build(self, span_exporter: Any = None) -> Any | None:
        """The span processor to add after the breakdown processor, or None (``none``).

        ``span_exporter``: the OTLP exporter, built earlier so that a bad endpoint is
        reported before anything starts.
        """
        s = self.settings
        if s.traces_exporter == "file":
            from otel_rollout._export.tracefile import RotatingTraceFile

            path = trace_file_path(s)
            create_trace_file(path)
            self.trace_file = path
            max_bytes = int(min(s.trace_file_max_mb, 2**40) * 2**20)
            exporter = RotatingTraceFile(path, max_bytes=max_bytes,
                                         max_age_s=s.trace_file_max_age_s)  # fmt: skip
            self.trace_writer = exporter
            exporter = self._with_in_flight(exporter)
            counted = self._batch(exporter, str(path), burst_reserve=s.trace_file_burst_spans)
            # spans lost before the file are stated in it, for ``otel-rollout report``
            resource = getattr(self.resource, "attributes", None)
            exporter.record_losses(lambda: counted.stats.losses(), resource)
            return self._tail_keep(counted)
        if s.traces_exporter == "otlp":
            exporter = span_exporter or otlp_exporter("traces", s)
            exporter = self._with_in_flight(exporter)
            target = f"{s.endpoint_for('traces')} ({s.traces_protocol})"
            return self._tail_keep(self._batch(exporter, target))
        if s.traces_exporter == "console":
            from otel_rollout._export.console import ConsoleSpanProcessor, ConsoleTreeExporter

            # Each trajectory prints as an indented tree with its breakdown, on stdout.
            console = ConsoleTreeExporter(bands=s.bands)
            self.batch_processors.append(console)  # its stats: printed, dropped, queued
            return self._tail_keep(ConsoleSpanProcessor(console))
        return None
