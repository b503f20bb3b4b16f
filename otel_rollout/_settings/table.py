"""Every setting of otel-rollout, declared once: :data:`SETTINGS`, resolved by :func:`resolve`.

Each resolves from the ``configure()`` argument, then its variables in the order listed
(``OTEL_ROLLOUT_*`` first), then its default; an empty variable counts as unset. A bad
argument raises :class:`ConfigError`; a bad variable warns and the default is used. The
same table drives the variables Ray workers inherit and docs/configure.md's table.

A new setting: a :class:`Setting` here (after any setting its default reads), a field of
the same name in :class:`Settings`, a ``configure()`` keyword unless ``argument=False``,
then ``python scripts/settings_table.py`` to regenerate the docs' table.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import uuid
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path as _FsPath
from types import FrameType, MappingProxyType
from typing import Any

from otel_rollout import attributes as A
from otel_rollout._settings.kinds import (
    Bool,
    Choice,
    Kind,
    Number,
    Pairs,
    Path,
    SampleRatio,
    Text,
)
from otel_rollout._settings.spelling import warn_misspelled


class ConfigError(ValueError):
    """A setting has a value otel-rollout does not accept."""


def _check_band(phase: str, band: Any) -> None:
    if band not in A.ALL_BANDS:
        raise ValueError(f"{phase}={band}")


TRACES_EXPORTERS = ("otlp", "file", "console", "none")
METRICS_EXPORTERS = ("otlp", "prometheus", "console", "none")
PROTOCOLS = ("grpc", "http/protobuf")
DEFAULT_OUTPUT_DIR = "otel-rollout-output"
_DEFAULT_ENDPOINT = MappingProxyType(
    {"grpc": "http://localhost:4317", "http/protobuf": "http://localhost:4318"}
)


@dataclass(frozen=True)
class Setting:
    """One setting: its name, where it is read from, its default and what it accepts."""

    name: str
    variables: tuple[str, ...]
    kind: Kind
    default: Any  # a value, or a function of the settings resolved before this one
    doc: str
    default_doc: str | None = None  # the default as the docs state it
    argument: bool = True  # a configure() keyword (else a variable only)
    forward: bool = True  # Ray workers inherit the driver's resolved value
    #: another setting whose *argument*, when given, decides this one (its default is
    #: used and its variables are not read): ``protocol=`` beats the per-signal variables
    follows: str | None = None
    #: variables an explicit value of this setting replaces when forwarded
    shadows: tuple[str, ...] = ()
    #: an argument is merged over the variable's value instead of replacing it
    merge: bool = False

    @property
    def variable(self) -> str:
        """The variable a Ray worker receives this setting in."""
        return self.variables[0]

    def default_for(self, resolved: Mapping[str, Any]) -> Any:
        return self.default(resolved) if callable(self.default) else self.default

    def check_argument(self, value: Any) -> Any:
        """``value`` as an argument: normalised, or a :class:`ConfigError`."""
        try:
            return self.kind.from_value(value)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{self.name}={value!r} is not accepted; expected {self.kind.accepted}"
            ) from None


def _signal_endpoint(signal: str) -> Callable[[Mapping[str, Any]], str | None]:
    def default(r: Mapping[str, Any]) -> str | None:
        base = r["endpoint"]
        if base is None:
            return None
        if r[f"{signal}_protocol"] == "http/protobuf":  # the base gets the signal's path
            return base.rstrip("/") + f"/v1/{signal}"
        return base

    return default


SETTINGS: tuple[Setting, ...] = (
    Setting("disabled", ("OTEL_ROLLOUT_DISABLED", "OTEL_SDK_DISABLED"), Bool(), False,
            "a no-op setup with the same API", argument=False),
    Setting("service_name", ("OTEL_ROLLOUT_SERVICE_NAME", "OTEL_SERVICE_NAME"), Text(),
            "otel-rollout", "`service.name` of the resource"),
    Setting("run_id", ("OTEL_ROLLOUT_RUN_ID",), Text(), lambda r: uuid.uuid4().hex[:12],
            "`rollout.run.id`, shared by every process of a run; used as given in the "
            "resource, made safe for the trace file's name", default_doc="random, 12 hex digits"),
    Setting("resource_attributes", ("OTEL_RESOURCE_ATTRIBUTES",),
            # a callable default is called with the settings resolved so far: not ``dict``
            Pairs("key=value pairs (a mapping as an argument)"), lambda _resolved: {},
            "added to (or overriding) the detected resource attributes", default_doc="none",
            merge=True),
    Setting("protocol", ("OTEL_EXPORTER_OTLP_PROTOCOL",), Choice(PROTOCOLS), "grpc",
            "OTLP protocol of both signals",
            shadows=("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")),
    Setting("traces_protocol", ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",), Choice(PROTOCOLS),
            lambda r: r["protocol"], "OTLP protocol of traces", default_doc="`protocol`",
            argument=False, follows="protocol"),
    Setting("metrics_protocol", ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",), Choice(PROTOCOLS),
            lambda r: r["protocol"], "OTLP protocol of metrics", default_doc="`protocol`",
            argument=False, follows="protocol"),
    Setting("endpoint", ("OTEL_EXPORTER_OTLP_ENDPOINT",), Text(), None,
            "OTLP base endpoint of both signals (over HTTP, `/v1/traces` and `/v1/metrics` "
            "are appended)", default_doc="none", forward=False,
            shadows=("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")),
    Setting("traces_endpoint", ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",), Text(),
            _signal_endpoint("traces"), "OTLP traces endpoint, used as given",
            default_doc="`endpoint`", argument=False, follows="endpoint"),
    Setting("metrics_endpoint", ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",), Text(),
            _signal_endpoint("metrics"), "OTLP metrics endpoint, used as given",
            default_doc="`endpoint`", argument=False, follows="endpoint"),
    Setting("traces_exporter", ("OTEL_ROLLOUT_TRACES_EXPORTER", "OTEL_TRACES_EXPORTER"),
            Choice(TRACES_EXPORTERS), lambda r: "otlp" if r["traces_endpoint"] else "file",
            "where traces go", default_doc="`otlp` with a traces endpoint, else `file`"),
    Setting("metrics_exporter", ("OTEL_ROLLOUT_METRICS_EXPORTER", "OTEL_METRICS_EXPORTER"),
            Choice(METRICS_EXPORTERS), lambda r: "otlp" if r["metrics_endpoint"] else "none",
            "where metrics go", default_doc="`otlp` with a metrics endpoint, else `none`"),
    Setting("otlp_timeout_ms", ("OTEL_EXPORTER_OTLP_TIMEOUT",),
            Number(0, low_open=True, integer=True, unit="ms"), 5000,
            "OTLP export timeout; short, so a dead endpoint cannot hold shutdown",
            argument=False),
    Setting("sample_ratio", ("OTEL_ROLLOUT_SAMPLE_RATIO", "OTEL_TRACES_SAMPLER"), SampleRatio(),
            1.0, "share of trajectories exported (`OTEL_TRACES_SAMPLER` with `_ARG` as the "
            "spec says); every one is still measured"),
    Setting("tail_keep_slower_than_s", ("OTEL_ROLLOUT_TAIL_KEEP_SLOWER_THAN_S",),
            Number(0, unit="seconds"), None,
            "below 100% sampling, also keep trajectories slower than this", default_doc="off"),
    Setting("tail_keep_percentile", ("OTEL_ROLLOUT_TAIL_KEEP_PERCENTILE",),
            Number(0, 100, low_open=True, high_open=True, unit="e.g. 99"), None,
            "below 100% sampling, also keep trajectories slower than this running percentile",
            default_doc="off"),
    Setting("bands", ("OTEL_ROLLOUT_BANDS",),
            Pairs("phase=band pairs, band one of " + ", ".join(A.ALL_BANDS), _check_band), None,
            "custom phases counted in a band, e.g. `judge=llm`", default_doc="none"),
    Setting("loop_stalls", ("OTEL_ROLLOUT_LOOP_STALLS",), Bool(), False,
            "time event-loop callbacks (patches asyncio's `Handle._run`): `loop_own`, "
            "`loop_blocked`, stall events and metric (docs/waits.md)"),
    Setting("loop_stall_threshold_ms", ("OTEL_ROLLOUT_LOOP_STALL_THRESHOLD_MS",),
            Number(0, unit="ms"), 5.0, "a loop callback at least this long is a stall",
            argument=False),
    Setting("output_dir", ("OTEL_ROLLOUT_OUTPUT_DIR",), Path(), _FsPath(DEFAULT_OUTPUT_DIR),
            "trace file folder", default_doc=f"`./{DEFAULT_OUTPUT_DIR}`"),
    Setting("trace_file_max_mb", ("OTEL_ROLLOUT_TRACE_FILE_MAX_MB",), Number(0, unit="MiB"),
            128, "the trace file moves on to a new file before it would grow past this size "
            "(0: never for size)"),
    Setting("trace_file_max_age_s", ("OTEL_ROLLOUT_TRACE_FILE_MAX_AGE_S",),
            Number(0, unit="seconds"), 3600, "the trace file moves on to a new file once it "
            "is this old (0: never for age)"),
    Setting("in_flight_interval_s", ("OTEL_ROLLOUT_IN_FLIGHT_INTERVAL_S",),
            Number(0, unit="seconds"), 1.0,
            "while trajectories run, write an in-flight record (the running trajectories, "
            "their phase and start) this often, into the trace file or as OTLP logs, for "
            "`otel-rollout top` (docs/live.md); 0: off", argument=False),
    Setting("in_flight_max_listed", ("OTEL_ROLLOUT_IN_FLIGHT_MAX_LISTED",),
            Number(0, integer=True, unit="trajectories"), 20,
            "running trajectories listed in an in-flight record (the oldest; all are counted)",
            argument=False),
    Setting("announce", ("OTEL_ROLLOUT_ANNOUNCE",), Bool(), True,
            "`configure()` says once, on stderr, where traces and metrics go and how to watch "
            "them live; false: silent", argument=False),
    Setting("gpu_interval_s", ("OTEL_ROLLOUT_GPU_INTERVAL_S",), Number(0, unit="seconds"), 1.0,
            "read each GPU's utilisation and memory through NVML (`hw.gpu.*` gauges; needs "
            "`pip install 'otel-rollout[gpu]'` and an NVIDIA GPU) and sample its utilisation "
            "this often into the step account (docs/step.md); 0: off, nothing is read",
            argument=False),
    Setting("genai_metrics", ("OTEL_ROLLOUT_GENAI_METRICS",), Bool(), False,
            "also record the GenAI client metrics (gen_ai.client.operation.duration, "
            "gen_ai.client.token.usage) for every generate call"),
    Setting("metric_export_interval_ms", ("OTEL_METRIC_EXPORT_INTERVAL",),
            Number(0, low_open=True, integer=True, unit="ms"), 60000,
            "metric export interval (OTLP, console)"),
    Setting("bsp_max_queue_size", ("OTEL_BSP_MAX_QUEUE_SIZE",),
            Number(1, integer=True), 2048, "spans waiting for export; beyond it they are "
            "dropped and counted", argument=False),
    Setting("prometheus_host", ("OTEL_EXPORTER_PROMETHEUS_HOST",), Text(), "127.0.0.1",
            "Prometheus endpoint address", argument=False, forward=False),
    Setting("prometheus_port", ("OTEL_EXPORTER_PROMETHEUS_PORT",),
            Number(1, 65535, integer=True), 9464, "Prometheus endpoint port",
            argument=False, forward=False),
    # Read where they are used, when they are used (from_environment), not by configure():
    Setting("capture_content", (A.CAPTURE_CONTENT_ENV,), Bool(), False,
            "record prompt and completion text (and exception messages) on spans",
            argument=False),
    Setting("capture_max_chars", ("OTEL_ROLLOUT_CAPTURE_MAX_CHARS",),
            Number(0, integer=True), 2000, "captured text is truncated at this length",
            argument=False),
    Setting("semconv_opt_in", (A.SEMCONV_OPT_IN_ENV,), Text(), None,
            f"`{A.SEMCONV_GENAI_LATEST}`: the latest GenAI span names; `{A.SEMCONV_GENAI_DUP}`:"
            " old and new attributes both", default_doc="none", argument=False),
    Setting("max_in_flight", ("OTEL_ROLLOUT_MAX_IN_FLIGHT",),
            Number(1, integer=True, unit="trajectories"), 100_000,
            "trajectories tracked at once; past it the oldest is evicted (never measured, "
            "counted in the summary and `export_stats`)", argument=False),
    Setting("flush_on_signals", ("OTEL_ROLLOUT_FLUSH_ON_SIGNALS",), Bool(), True,
            "the global `configure()` flushes (and prints the summary) on `SIGTERM` and "
            "`SIGHUP` before the process ends as the signal would, or before the handler "
            "set earlier runs (docs/reliability.md)", argument=False),
    Setting("raise_internal_errors", ("OTEL_ROLLOUT_RAISE_INTERNAL_ERRORS",), Bool(), False,
            "internal errors raise instead of being logged once (tests)", argument=False),
)  # fmt: skip

BY_NAME: Mapping[str, Setting] = MappingProxyType({s.name: s for s in SETTINGS})


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What each setting resolved to (``rollout.settings``), made by :func:`resolve`;
    ``sources`` says from where (``"argument"``, a variable's name, or ``"default"``)."""

    disabled: bool
    service_name: str
    run_id: str
    resource_attributes: Mapping[str, Any]
    protocol: str
    traces_protocol: str
    metrics_protocol: str
    endpoint: str | None
    traces_endpoint: str | None
    metrics_endpoint: str | None
    traces_exporter: str
    metrics_exporter: str
    otlp_timeout_ms: int
    sample_ratio: float
    tail_keep_slower_than_s: float | None
    tail_keep_percentile: float | None
    bands: Mapping[str, str] | None
    loop_stalls: bool
    loop_stall_threshold_ms: float
    output_dir: _FsPath
    trace_file_max_mb: float
    trace_file_max_age_s: float
    in_flight_interval_s: float
    in_flight_max_listed: int
    announce: bool
    gpu_interval_s: float
    genai_metrics: bool
    metric_export_interval_ms: int
    bsp_max_queue_size: int
    prometheus_host: str
    prometheus_port: int
    capture_content: bool
    capture_max_chars: int
    semconv_opt_in: str | None
    max_in_flight: int
    flush_on_signals: bool
    raise_internal_errors: bool
    sources: Mapping[str, str] = dataclasses.field(compare=False, repr=False)

    def endpoint_for(self, signal: str) -> str:
        """The URL the OTLP exporter of ``signal`` (traces, metrics) sends to."""
        protocol = getattr(self, f"{signal}_protocol")
        base = _DEFAULT_ENDPOINT[protocol]
        default = base + f"/v1/{signal}" if protocol == "http/protobuf" else base
        return getattr(self, f"{signal}_endpoint") or default


_VARIABLES = frozenset(v for s in SETTINGS for v in s.variables)

_fields = frozenset(f.name for f in dataclasses.fields(Settings)) - {"sources"}
if _fields != set(BY_NAME):  # pragma: no cover - a setting added to one place only
    raise AssertionError(f"Settings fields and SETTINGS differ: {_fields ^ set(BY_NAME)}")


def _env(names: Iterable[str]) -> tuple[str, str] | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return name, value
    return None


def resolve(**arguments: Any) -> Settings:
    """Resolve every setting: argument (not None), variable, default."""
    unknown = sorted(set(arguments) - set(BY_NAME))
    if unknown:
        raise TypeError(f"unknown settings {unknown}; expected some of {sorted(BY_NAME)}")
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for s in SETTINGS:
        arg = arguments.get(s.name)
        found = None
        if not (s.follows and sources.get(s.follows) == "argument"):
            found = _env(s.variables)
        from_env = None
        if found is not None:
            var, text = found
            try:
                from_env = s.kind.from_text(text, var)
            except (TypeError, ValueError, OverflowError) as exc:
                said = str(exc) if str(exc).startswith("OTEL_") else None
                message = said or f"{var}={text!r} is not accepted (expected {s.kind.accepted})"
                if arg is None:
                    message += f"; using {_shown(s.default_for(values))}"
                warnings.warn(message, stacklevel=_stacklevel())
                found = None
        if arg is not None:
            value = s.check_argument(arg)
            if s.merge and from_env:
                value = {**from_env, **value}
            values[s.name], sources[s.name] = value, "argument"
        elif found is not None:
            values[s.name], sources[s.name] = from_env, found[0]
        else:
            values[s.name], sources[s.name] = s.default_for(values), "default"
    warn_misspelled(_VARIABLES, stacklevel=_stacklevel())
    return Settings(**values, sources=sources)


def _shown(value: Any) -> str:
    return "none" if value is None else repr(str(value) if isinstance(value, _FsPath) else value)


def _stacklevel() -> int:
    """Point a warning at the first frame outside otel-rollout (the user's configure call)."""
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("otel_rollout"):
        frame, level = frame.f_back, level + 1
    return level


_warned: set[tuple[str, str]] = set()


def from_environment(name: str) -> Any:
    """One setting from its variables (or its default), for code that reads it at use time
    without a ``configure()``; a bad variable warns once and gives the default."""
    s = BY_NAME[name]
    if callable(s.default) or s.follows:
        return getattr(resolve(), name)
    found = _env(s.variables)
    if found is None:
        return s.default
    try:
        return s.kind.from_text(found[1], found[0])
    except (TypeError, ValueError, OverflowError):
        if found not in _warned:
            _warned.add(found)
            warnings.warn(
                f"{found[0]}={found[1]!r} is not accepted (expected {s.kind.accepted}); "
                f"using {_shown(s.default)}",
                stacklevel=_stacklevel(),
            )
        return s.default


def forwarded_variables(settings: Settings) -> dict[str, str]:
    """The variables that make another process resolve what ``settings`` resolved."""
    out: dict[str, str] = {}
    for s in SETTINGS:
        value = getattr(settings, s.name)
        if not s.forward or value is None:
            continue
        if s.name == "resource_attributes":  # one per process, never shared
            value = {k: v for k, v in value.items() if k != "service.instance.id"}
            if not value:
                continue
        out[s.variable] = s.kind.to_text(value)
    return out


def variable_for(name: str, value: Any) -> tuple[str, str, tuple[str, ...]]:
    """(variable, text, variables it replaces) for an explicit setting ``name=value``;
    a bad value is a :class:`ConfigError`."""
    if name not in BY_NAME:
        raise TypeError(f"unknown setting {name!r}; expected one of {sorted(BY_NAME)}")
    s = BY_NAME[name]
    return s.variable, s.kind.to_text(s.check_argument(value)), s.shadows


def safe_file_part(text: str, limit: int = 64) -> str:
    """``text`` usable in a file name: unsafe characters replaced, long ones shortened
    (with a hash of the whole, so two long run ids still differ)."""
    out = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "run"
    if len(out) > limit:
        import hashlib

        digest = hashlib.sha1(text.encode()).hexdigest()[:8]
        out = out[: limit - 9].rstrip("._-") + "-" + digest
    return out


TABLE_START = "<!-- settings table: generated by scripts/settings_table.py -->"
TABLE_END = "<!-- end of settings table -->"


def markdown_table() -> str:
    """The settings table of docs/configure.md."""
    rows = ["| name | variables | accepted | default | what |", "|---|---|---|---|---|"]
    for s in SETTINGS:
        name = f"`{s.name}`" + ("" if s.argument else " (variable only)")
        variables = ", ".join(f"`{v}`" for v in s.variables)
        if s.default_doc is not None:
            default = s.default_doc
        elif isinstance(s.default, str):
            default = f"`{s.default}`"
        else:
            default = f"{s.default}".lower() if isinstance(s.default, bool) else f"{s.default}"
        rows.append(f"| {name} | {variables} | {s.kind.accepted} | {default} | {s.doc} |")
    return "\n".join(rows)


def replace_table(text: str) -> str:
    """``text`` with the table between its markers regenerated."""
    start, end = text.index(TABLE_START), text.index(TABLE_END)
    return text[: start + len(TABLE_START)] + "\n" + markdown_table() + "\n" + text[end:]


def documented_table(text: str) -> str:
    """The table between the markers of a document (for the test that compares them)."""
    start, end = text.index(TABLE_START), text.index(TABLE_END)
    return text[start + len(TABLE_START) : end].strip()
