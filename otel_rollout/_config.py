"""``configure()``: providers, exporters and the breakdown processor in one call.

Each setting resolves: argument, then ``OTEL_ROLLOUT_*`` variable, then the standard
``OTEL_*`` variable, then a default. An empty variable counts as unset. A bad argument
raises ``ValueError`` naming the value and what is accepted; a bad variable is reported
with a warning naming it, and the default is used.
"""

from __future__ import annotations

import atexit
import os
import socket
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from opentelemetry import metrics, trace

from otel_rollout._export import ExportStats, guarded_batch_processor, guarded_metric_exporter
from otel_rollout._processor import BreakdownProcessor
from otel_rollout._sampling import RecordingRatioSampler
from otel_rollout._summary import SKYRL_KEY_NAMES, BreakdownCollector, summarize
from otel_rollout._tailkeep import TailKeepProcessor
from otel_rollout._tracer import RolloutTracer

TRACES_EXPORTERS = ("otlp", "file", "console", "none")
METRICS_EXPORTERS = ("otlp", "prometheus", "console", "none")
PROTOCOLS = ("grpc", "http/protobuf")
DEFAULT_OUTPUT_DIR = "otel-rollout-output"


class ConfigError(ValueError):
    """A setting has a value otel-rollout does not accept."""


def _env(*names: str) -> tuple[str, str] | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return name, value
    return None


def _choice(arg: str | None, names: tuple[str, ...], accepted: tuple[str, ...], default: str,
            what: str) -> str:  # fmt: skip
    if arg is not None:
        if arg not in accepted:
            raise ConfigError(f"{what}={arg!r} is not accepted; expected one of {accepted}")
        return arg
    found = _env(*names)
    if found is None:
        return default
    name, value = found
    value = value.lower().split(",")[0].strip()
    if value not in accepted:
        warnings.warn(
            f"{name}={value!r} is not accepted (expected one of {accepted}); using {default!r}",
            stacklevel=3,
        )
        return default
    return value


def _ratio(arg: float | None) -> float:
    if arg is not None:
        if isinstance(arg, bool) or not isinstance(arg, int | float) or not 0 <= arg <= 1:
            raise ConfigError(f"sample_ratio={arg!r} is not accepted; expected a number in [0, 1]")
        return float(arg)
    found = _env("OTEL_ROLLOUT_SAMPLE_RATIO")
    if found is None:
        sampler = os.environ.get("OTEL_TRACES_SAMPLER", "").strip().lower()
        if not sampler or sampler in ("always_on", "parentbased_always_on"):
            return 1.0
        if sampler in ("always_off", "parentbased_always_off"):
            return 0.0
        if sampler not in ("traceidratio", "parentbased_traceidratio"):
            warnings.warn(
                f"OTEL_TRACES_SAMPLER={sampler!r} is not supported by otel-rollout (expected "
                "always_on, always_off, traceidratio or their parentbased_ forms); using 1.0",
                stacklevel=3,
            )
            return 1.0
        found = _env("OTEL_TRACES_SAMPLER_ARG") or ("OTEL_TRACES_SAMPLER_ARG", "1.0")
    name, value = found
    try:
        ratio = float(value)
        if not 0 <= ratio <= 1:
            raise ValueError
        return ratio
    except ValueError:
        warnings.warn(f"{name}={value!r} is not a ratio in [0, 1]; using 1.0", stacklevel=3)
        return 1.0


def _float_setting(arg: float | None, name: str, what: str, accepted: str,
                   low: float, high: float | None) -> float | None:  # fmt: skip
    """An optional number: a bad argument raises, a bad variable warns and is ignored."""

    def ok(v: float) -> bool:
        return v >= low if high is None else low < v < high

    if arg is not None:
        if isinstance(arg, bool) or not isinstance(arg, int | float) or not ok(float(arg)):
            raise ConfigError(f"{what}={arg!r} is not accepted: expected {accepted}")
        return float(arg)
    found = _env(name)
    if found is None:
        return None
    try:
        value = float(found[1])
    except ValueError:
        value = float("nan")
    if value != value or not ok(value):
        warnings.warn(f"{name}={found[1]!r} is not accepted (expected {accepted}); ignored",
                      stacklevel=4)  # fmt: skip
        return None
    return value


def _int_env(name: str, default: int) -> int:
    found = _env(name)
    if found is None:
        return default
    try:
        return int(found[1])
    except ValueError:
        warnings.warn(f"{name}={found[1]!r} is not an integer; using {default}", stacklevel=3)
        return default


@dataclass
class Rollout:
    """What :func:`configure` set up. ``shutdown()`` flushes and stops, within a timeout."""

    tracer_provider: Any
    meter_provider: Any
    tracer: RolloutTracer
    collector: BreakdownCollector
    processor: BreakdownProcessor | None
    trace_file: Path | None = None
    is_global: bool = False
    settings: dict[str, Any] = field(default_factory=dict)
    summary_stream: TextIO | None = None
    _summary: list = field(default_factory=list, repr=False)
    _export: list = field(default_factory=list, repr=False)
    _closers: list = field(default_factory=list, repr=False)
    _shutdown_worker: threading.Thread | None = field(default=None, repr=False)
    _shutdown_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def export_stats(self) -> ExportStats:
        """Spans exported, dropped (queue full, export failed) and pending, all pipelines."""
        total = ExportStats()
        for p in self._export:
            s = p.stats
            total.exported += s.exported
            total.dropped_queue_full += s.dropped_queue_full
            total.dropped_export_failed += s.dropped_export_failed
            total.pending += s.pending
        return total

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        ms = int(timeout_s * 1000)
        ok = True
        for p in (self.tracer_provider, self.meter_provider):
            fn = getattr(p, "force_flush", None)
            if fn is not None:
                ok = bool(fn(ms)) and ok
        return ok

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Stop exporting; returns False when the exporters did not finish in time.

        Called again (or at interpreter exit, which configure() arranges), it only waits
        for the first call's work, up to ``timeout_s``.
        """
        with self._shutdown_lock:
            worker = self._shutdown_worker
            first = worker is None
            if first:
                worker = self._shutdown_worker = threading.Thread(
                    target=self._stop, name="otel-rollout-shutdown", daemon=True
                )
                worker.start()
        worker.join(timeout_s)
        if first:
            self._print_summary()
        return not worker.is_alive()

    def __enter__(self) -> Rollout:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def _stop(self) -> None:
        for p in (self.tracer_provider, self.meter_provider):
            fn = getattr(p, "shutdown", None)
            if fn is not None:
                fn()
        for server in self._closers:  # the port is free again for the next configure()
            server.shutdown()
            server.server_close()

    def _print_summary(self) -> None:
        if self.summary_stream is not None and self._summary:
            s = summarize(self._summary)
            out = self.summary_stream
            print(f"otel-rollout: {len(self._summary)} trajectories", file=out)
            for band in SKYRL_KEY_NAMES:
                mean = s[f"generate/trajectory_time_{band}_mean"]
                p90 = s[f"generate/trajectory_time_{band}_p90"]
                print(f"  {band:<13} mean {mean:8.3f}s  p90 {p90:8.3f}s", file=out)
            print(f"  frac_time_in_env {s['generate/frac_time_in_env']:.3f}", file=out)
            if self.trace_file is not None:
                print(f"  traces: {self.trace_file}", file=out)


#: How long interpreter exit waits for a Rollout nobody shut down to flush.
EXIT_TIMEOUT_S = 5.0

_global_lock = threading.Lock()
_global: Rollout | None = None


def configure(
    *,
    service_name: str | None = None,
    local: bool = False,
    traces_exporter: str | None = None,
    metrics_exporter: str | None = None,
    endpoint: str | None = None,
    protocol: str | None = None,
    sample_ratio: float | None = None,
    tail_keep_slower_than_s: float | None = None,
    tail_keep_percentile: float | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    metric_export_interval_ms: int | None = None,
    resource_attributes: Mapping[str, Any] | None = None,
    bands: Mapping[str, str] | None = None,
    on_breakdown: Callable[[Any], Any] | None = None,
    summary_stream: TextIO | None = None,
) -> Rollout:
    """Set up tracing and metrics for a rollout job; returns a :class:`Rollout`.

    With ``local=False`` (the default) the global providers are set, once: a second call
    warns and returns the first setup unchanged. ``local=True`` touches no global state.
    With no OTLP endpoint configured, traces go to an OTLP JSON lines file under
    ``output_dir`` (``OTEL_ROLLOUT_OUTPUT_DIR``, default ``./otel-rollout-output``) and a
    short summary prints at shutdown.
    """
    global _global
    if not local:
        with _global_lock:
            if _global is not None:
                warnings.warn(
                    "otel_rollout.configure() was already called; this call changes nothing",
                    stacklevel=2,
                )
                return _global
            _global = _build(locals())
            _global.is_global = True
            trace.set_tracer_provider(_global.tracer_provider)
            metrics.set_meter_provider(_global.meter_provider)
            return _global
    return _build(locals())


def _build(opts: dict[str, Any]) -> Rollout:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    collector = BreakdownCollector()
    disabled = _env("OTEL_ROLLOUT_DISABLED", "OTEL_SDK_DISABLED")
    if disabled is not None and disabled[1].lower() == "true":
        noop_t, noop_m = trace.NoOpTracerProvider(), metrics.NoOpMeterProvider()
        return Rollout(noop_t, noop_m, RolloutTracer(noop_t, noop_m), collector, None,
                       settings={"disabled": True})  # fmt: skip

    has_endpoint = opts["endpoint"] is not None or _env(
        "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )
    traces_exporter = _choice(opts["traces_exporter"],
                              ("OTEL_ROLLOUT_TRACES_EXPORTER", "OTEL_TRACES_EXPORTER"),
                              TRACES_EXPORTERS, "otlp" if has_endpoint else "file",
                              "traces_exporter")  # fmt: skip
    metrics_exporter = _choice(opts["metrics_exporter"],
                               ("OTEL_ROLLOUT_METRICS_EXPORTER", "OTEL_METRICS_EXPORTER"),
                               METRICS_EXPORTERS, "otlp" if has_endpoint else "none",
                               "metrics_exporter")  # fmt: skip
    protocol = _choice(opts["protocol"],
                       ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"),
                       PROTOCOLS, "grpc", "protocol")  # fmt: skip
    ratio = _ratio(opts["sample_ratio"])
    name = opts["service_name"]
    if name is None:
        found = _env("OTEL_ROLLOUT_SERVICE_NAME", "OTEL_SERVICE_NAME")
        name = found[1] if found else "otel-rollout"
    run_id = (_env("OTEL_ROLLOUT_RUN_ID") or ("", uuid.uuid4().hex[:12]))[1]
    attrs = {"service.name": name, "rollout.run.id": run_id, "host.name": socket.gethostname(),
             "process.pid": os.getpid()}  # fmt: skip
    if "service.instance.id=" not in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        # Unique per process, so cumulative series of workers that share a service name
        # do not collide in the metrics backend.
        attrs["service.instance.id"] = uuid.uuid4().hex
    if "ray" in sys.modules:  # under Ray: node, worker and job ids (never imports Ray)
        from otel_rollout.integrations.ray import resource_attributes as ray_attributes

        attrs.update(ray_attributes())
    attrs.update(opts["resource_attributes"] or {})
    resource = Resource.create(attrs)  # also merges OTEL_RESOURCE_ATTRIBUTES

    # Built first: a bad endpoint is reported before anything is started.
    span_exporter = (
        _otlp_exporter("traces", protocol, opts["endpoint"]) if traces_exporter == "otlp" else None
    )
    readers = []
    closers: list[Any] = []  # servers to stop after the providers shut down
    interval = opts["metric_export_interval_ms"] or _int_env("OTEL_METRIC_EXPORT_INTERVAL", 60000)
    if metrics_exporter in ("otlp", "console"):
        from opentelemetry.sdk.metrics.export import (
            ConsoleMetricExporter,
            PeriodicExportingMetricReader,
        )

        exporter = (
            ConsoleMetricExporter()
            if metrics_exporter == "console"
            else _otlp_exporter("metrics", protocol, opts["endpoint"])
        )
        if metrics_exporter == "otlp":
            exporter = guarded_metric_exporter(exporter, target=opts["endpoint"] or "OTLP")
        readers.append(PeriodicExportingMetricReader(exporter, export_interval_millis=interval))
    elif metrics_exporter == "prometheus":
        reader, server = _prometheus_reader()
        readers.append(reader)
        if server is not None:
            closers.append(server)
    # Our own exit hook shuts both down within a timeout (the SDK's would warn on a second
    # shutdown after the user's, and has no overall bound).
    meter_provider = MeterProvider(metric_readers=readers, resource=resource,
                                   shutdown_on_exit=False)  # fmt: skip

    stream = opts["summary_stream"]
    sinks: list[Callable[[Any], Any]] = [collector]
    if opts["on_breakdown"] is not None:
        sinks.append(opts["on_breakdown"])
    summary: list = []
    processor = BreakdownProcessor(meter_provider, on_breakdown=sinks, bands=opts["bands"])
    tracer_provider = TracerProvider(resource=resource, sampler=RecordingRatioSampler(ratio),
                                     shutdown_on_exit=False)  # fmt: skip
    tracer_provider.add_span_processor(processor)
    slow = _float_setting(
        opts["tail_keep_slower_than_s"],
        "OTEL_ROLLOUT_TAIL_KEEP_SLOWER_THAN_S",
        "tail_keep_slower_than_s",
        "a number of seconds >= 0",
        0.0,
        None,
    )
    pct = _float_setting(
        opts["tail_keep_percentile"],
        "OTEL_ROLLOUT_TAIL_KEEP_PERCENTILE",
        "tail_keep_percentile",
        "a percentile in (0, 100), e.g. 99",
        0.0,
        100.0,
    )
    export_processors: list[Any] = []

    def export(exporter: Any, target: str) -> Any:
        processor = guarded_batch_processor(exporter, meter_provider, target=target)
        export_processors.append(processor)
        # Below 100% sampling, failed, cancelled and slow trajectories are kept in full.
        if ratio >= 1.0:
            return processor
        return TailKeepProcessor(processor, slower_than_s=slow, slower_than_percentile=pct)

    trace_file = None
    if traces_exporter == "file":
        from opentelemetry.exporter.otlp.json.file import FileSpanExporter

        out_dir = Path(
            opts["output_dir"] or (_env("OTEL_ROLLOUT_OUTPUT_DIR") or ("", DEFAULT_OUTPUT_DIR))[1]
        )
        trace_file = out_dir / f"traces-{time.strftime('%Y%m%d-%H%M%S')}-{run_id}.jsonl"
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            trace_file.touch()
        except OSError as exc:
            meter_provider.shutdown()
            for server in closers:
                server.shutdown()
                server.server_close()
            raise ConfigError(
                f"cannot write trace files to {str(out_dir)!r} ({exc.strerror or exc}); set "
                "output_dir / OTEL_ROLLOUT_OUTPUT_DIR to a writable folder, or choose another "
                "OTEL_TRACES_EXPORTER (otlp, console, none)"
            ) from exc
        tracer_provider.add_span_processor(export(FileSpanExporter(trace_file), str(trace_file)))
        processor.add_sink(summary.append)
        stream = stream or sys.stderr
    elif traces_exporter == "otlp":
        exporter = span_exporter
        target = (
            opts["endpoint"]
            or (
                _env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
                or ("", "the default")
            )[1]
        )
        tracer_provider.add_span_processor(export(exporter, f"{target} ({protocol})"))
    elif traces_exporter == "console":
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        from otel_rollout._console import ConsoleTreeExporter

        # Each trajectory prints as an indented tree with its breakdown, on stdout.
        console = SimpleSpanProcessor(ConsoleTreeExporter(bands=opts["bands"]))
        if ratio < 1.0:
            console = TailKeepProcessor(console, slower_than_s=slow, slower_than_percentile=pct)
        tracer_provider.add_span_processor(console)
    settings = {"traces_exporter": traces_exporter, "metrics_exporter": metrics_exporter,
                "protocol": protocol, "sample_ratio": ratio, "tail_keep_slower_than_s": slow,
                "tail_keep_percentile": pct, "endpoint": opts["endpoint"],
                "service_name": name, "run_id": run_id}  # fmt: skip
    rollout = Rollout(tracer_provider, meter_provider,
                      RolloutTracer(tracer_provider, meter_provider), collector, processor,
                      trace_file, settings=settings, summary_stream=stream, _summary=summary,
                      _export=export_processors, _closers=closers)  # fmt: skip
    atexit.register(rollout.shutdown, EXIT_TIMEOUT_S)  # a no-op if the user already did
    return rollout


def _prometheus_reader() -> tuple[Any, Any]:
    """A Prometheus reader on a registry of its own, served on the configured port."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry, start_http_server

    port = _int_env("OTEL_EXPORTER_PROMETHEUS_PORT", 9464)
    host = (_env("OTEL_EXPORTER_PROMETHEUS_HOST") or ("", "127.0.0.1"))[1]
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


def _otlp_exporter(signal: str, protocol: str, endpoint: str | None) -> Any:
    """The OTLP exporter of ``signal`` (traces, metrics); a bad endpoint is a ConfigError."""
    # A short timeout keeps shutdown() and retries bounded while an endpoint is down.
    timeout = _int_env("OTEL_EXPORTER_OTLP_TIMEOUT", 5000) / 1000
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        if endpoint:
            endpoint = endpoint.rstrip("/") + f"/v1/{signal}"
    cls = OTLPSpanExporter if signal == "traces" else OTLPMetricExporter
    try:
        return cls(endpoint=endpoint, timeout=timeout)
    except ValueError as exc:  # e.g. an unparsable URL
        shown = endpoint or "from OTEL_EXPORTER_OTLP_*ENDPOINT"
        raise ConfigError(f"OTLP {signal} endpoint {shown!r} is not accepted: {exc}") from exc
