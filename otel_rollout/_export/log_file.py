"""otel-rollout's own log records (the in-flight record, docs/live.md; rewards as
``gen_ai.evaluation.result`` events): made by :func:`emit_event` on any SDK the project
supports, into the trace file as OTLP JSON ``ExportLogsServiceRequest`` lines, or over
OTLP at most one warning.

An OTLP JSON file may hold lines of any signal (the Collector's ``otlpjsonfile`` receiver
reads them all); the log lines are written whole beside the span lines by the same writer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk import _logs as sdk_logs
from opentelemetry.sdk._logs import export as _logs_export

from otel_rollout._export.guarded import _quiet, _quiet_loggers_of
from otel_rollout._export.otlp_json import _attributes, any_value, dumps_line

if TYPE_CHECKING:
    from otel_rollout._export.tracefile import RotatingTraceFile

_log = logging.getLogger("otel_rollout.export")

#: The SDK's base class for log exporters and its result (renamed in SDK 1.39).
_Base: Any = getattr(_logs_export, "LogRecordExporter", None) or _logs_export.LogExporter
_Result: Any = getattr(_logs_export, "LogRecordExportResult", None) or _logs_export.LogExportResult
#: Where an SDK before event names (1.35) puts a record's event name.
EVENT_NAME_ATTRIBUTE = "event.name"
#: After a failed export, the next 2, 4, ... at most this many batches are dropped unsent.
MAX_SKIPPED = 64


def emit_event(logger: Any, name: str, attributes: dict[str, Any], time_ns: int | None = None,
               span: trace.Span | None = None) -> None:  # fmt: skip
    """Emit the event ``name`` (a log record with that event name) on ``logger``, in
    ``span``'s context (the record carries its trace and span ids) when one is given."""
    # SDKs before 1.39 take their own LogRecord, which carries the resource; later ones
    # take the API's and add the logger's resource themselves
    sdk_record = getattr(sdk_logs, "LogRecord", None)
    make: Callable[..., Any]
    if sdk_record is None:
        from opentelemetry._logs import LogRecord

        make = LogRecord
    else:
        make = partial(sdk_record, resource=getattr(logger, "resource", None))
    # a severity, if unspecified: the OTLP log exporter of SDK 1.30 needs one
    make = partial(make, timestamp=time_ns, observed_timestamp=time_ns,
                   severity_number=SeverityNumber.UNSPECIFIED)  # fmt: skip
    try:
        record = make(context=trace.set_span_in_context(span) if span else None,
                      attributes=attributes, event_name=name)  # fmt: skip
    except TypeError:  # an SDK before event names (1.35): the attribute says it
        ctx = (span or trace.INVALID_SPAN).get_span_context()
        record = make(trace_id=ctx.trace_id, span_id=ctx.span_id, trace_flags=ctx.trace_flags,
                      attributes={**attributes, EVENT_NAME_ATTRIBUTE: name})  # fmt: skip
    logger.emit(record)


def _resource_of(item: Any) -> Any:
    # SDK >= 1.39: a ReadableLogRecord holds the resource; before, its log record did
    return getattr(item, "resource", None) or getattr(item.log_record, "resource", None)


def encode_log_record(item: Any) -> dict[str, Any]:
    """One SDK log record as the OTLP JSON ``LogRecord`` object."""
    rec = item.log_record
    out: dict[str, Any] = {}
    if rec.timestamp:
        out["timeUnixNano"] = str(rec.timestamp)
    if rec.observed_timestamp:
        out["observedTimeUnixNano"] = str(rec.observed_timestamp)
    number = getattr(rec.severity_number, "value", None)
    if number:
        out["severityNumber"] = number
    if rec.severity_text:
        out["severityText"] = rec.severity_text
    if rec.body is not None:
        out["body"] = any_value(rec.body)
    attrs = _attributes(rec.attributes)
    if attrs:
        out["attributes"] = attrs
    name = getattr(rec, "event_name", None)
    if name:
        out["eventName"] = name
    if rec.trace_id:
        out["traceId"] = format(rec.trace_id, "032x")
        out["spanId"] = format(rec.span_id, "016x")
        out["flags"] = int(rec.trace_flags or 0)
    return out


def encode_logs_line(batch: Sequence[Any]) -> bytes:
    """``batch`` (SDK log records) as one ``ExportLogsServiceRequest`` JSON line, grouped
    by resource and scope in the order they come."""
    groups: dict[tuple[int, int], tuple[Any, Any, list[dict[str, Any]]]] = {}
    for item in batch:
        res, scope = _resource_of(item), item.instrumentation_scope
        key = (id(res), id(scope))
        if key not in groups:
            groups[key] = (res, scope, [])
        groups[key][2].append(encode_log_record(item))
    resource_logs = []
    for res, scope, records in groups.values():
        attrs = _attributes(getattr(res, "attributes", None))
        scope_doc = {"name": scope.name, "version": scope.version or ""} if scope else {}
        resource_logs.append({
            "resource": {"attributes": attrs} if attrs else {},
            "scopeLogs": [{"scope": scope_doc, "logRecords": records}],
        })  # fmt: skip
    return dumps_line({"resourceLogs": resource_logs})


class TraceFileLogExporter(_Base):
    """Writes log records to a :class:`~.tracefile.RotatingTraceFile`; never raises."""

    def __init__(self, trace_file: RotatingTraceFile) -> None:
        self._file = trace_file

    def export(self, batch: Sequence[Any]) -> Any:
        try:
            ok = self._file.write_line(encode_logs_line(batch))
        except Exception as exc:
            _log.debug("otel-rollout: log records not written to the trace file: %r", exc)
            ok = False
        return _Result.SUCCESS if ok else _Result.FAILURE

    def shutdown(self) -> None:  # the trace file is the span pipeline's to close
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class OTLPLogExporter(_Base):
    """Wraps the OTLP log exporter so that an endpoint without logs (a Collector with no
    logs pipeline answers 404 or UNIMPLEMENTED) or a dead one costs one warning: the
    exporter's own error lines are silenced, and after each failure the next 2, 4, ...
    up to MAX_SKIPPED batches are dropped unsent (a try a minute at one record a
    second), so a failing endpoint is not asked again at shutdown."""

    def __init__(self, inner: Any, target: str) -> None:
        self.inner, self.target = inner, target
        self.failures = self.skip = 0  # failures in a row; batches to drop unsent
        self.warned = False
        _quiet_loggers_of(inner)

    def export(self, batch: Sequence[Any]) -> Any:
        if self.skip:
            self.skip -= 1
            return _Result.FAILURE
        _quiet.on = True
        try:
            result = self.inner.export(batch)
        except Exception:
            result = _Result.FAILURE
        finally:
            _quiet.on = False
        if result == _Result.SUCCESS:
            self.failures = 0
            return result
        self.failures += 1
        self.skip = min(2**self.failures, MAX_SKIPPED)
        if not self.warned:
            self.warned = True
            _log.warning(
                "otel-rollout: log records (the in-flight record, rewards) not accepted by %s: it "
                "takes no logs (a Collector needs a logs pipeline, see collector-config/) "
                "or is down; tried less often from now on, and said only once", self.target,
            )  # fmt: skip
        return result

    def shutdown(self) -> None:
        try:
            self.inner.shutdown()
        except Exception as exc:
            _log.debug("otel-rollout: log exporter shutdown failed: %r", exc)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
