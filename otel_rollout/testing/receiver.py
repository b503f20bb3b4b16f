"""A real OTLP receiver for tests: gRPC and HTTP on 127.0.0.1, decoding real protobufs.

Needs the ``otlp`` extra (grpcio, opentelemetry-proto). Fault knobs let tests play an
endpoint that is slow (``delay_s``), stalled until released (``hold()``/``release()``),
refusing (``refuse``) or without logs (``logs = False``: HTTP 404, gRPC UNIMPLEMENTED, as
a Collector with no logs pipeline), and ``stop()``/``start()`` restart it on the same ports.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from otel_rollout._base.http_body import IDLE_TIMEOUT_S, BodyError, answer, quiet_server, read_body

__all__ = ["OTLPReceiver", "ReceivedLog", "ReceivedSpan"]

_MetricsRequest = metrics_service_pb2.ExportMetricsServiceRequest
_TracesRequest = trace_service_pb2.ExportTraceServiceRequest
_LogsRequest = logs_service_pb2.ExportLogsServiceRequest


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as decoded from an ExportTraceServiceRequest."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    start_ns: int
    end_ns: int
    status_code: int
    attributes: dict[str, Any] = field(default_factory=dict)
    resource: dict[str, Any] = field(default_factory=dict)
    #: Span links as ``(trace id, span id, attributes)``, hex ids.
    links: tuple[tuple[str, str, dict[str, Any]], ...] = ()


@dataclass(frozen=True)
class ReceivedLog:
    """One log record as decoded from an ExportLogsServiceRequest (hex ids, "" if none;
    the event name from the field, or from the ``event.name`` attribute of older SDKs)."""

    event_name: str
    trace_id: str
    span_id: str
    time_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    resource: dict[str, Any] = field(default_factory=dict)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OTLPReceiver:
    """Accepts OTLP traces, metrics and logs over gRPC and HTTP/protobuf and keeps them
    (``requests`` counts the traces and metrics requests, ``log_requests`` the logs')."""

    def __init__(self) -> None:
        self.grpc_port = _free_port()
        self.http_port = _free_port()
        self.delay_s = 0.0
        self.refuse = False
        self.logs = True
        self.requests = 0
        self.log_requests = 0
        self._gate = threading.Event()
        self._gate.set()
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self._metrics: list[_MetricsRequest] = []
        self._logs: list[ReceivedLog] = []
        self._grpc: grpc.Server | None = None
        self._http: ThreadingHTTPServer | None = None

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self) -> OTLPReceiver:
        receiver = self
        # each HTTP path: its request type, what keeps it, its (empty) response, and the
        # gRPC module and service of the same signal
        paths: dict[str, tuple[Any, Callable[[Any], None], Any, Any, str]] = {
            "/v1/traces": (_TracesRequest, self._add_traces,
                           trace_service_pb2.ExportTraceServiceResponse,
                           trace_service_pb2_grpc, "TraceService"),
            "/v1/metrics": (_MetricsRequest, self._add_metrics,
                            metrics_service_pb2.ExportMetricsServiceResponse,
                            metrics_service_pb2_grpc, "MetricsService"),
            "/v1/logs": (_LogsRequest, self._add_logs, logs_service_pb2.ExportLogsServiceResponse,
                         logs_service_pb2_grpc, "LogsService"),
        }  # fmt: skip

        def servicer(base: Any, keep: Callable[[Any], None], response: Any, logs: bool) -> Any:
            class Servicer(base):
                def Export(self, request, context):
                    if not receiver._admit(logs):
                        context.abort(grpc.StatusCode.UNAVAILABLE, "receiver refusing")
                    if logs and not receiver.logs:
                        context.abort(grpc.StatusCode.UNIMPLEMENTED, "no logs pipeline")
                    keep(request)
                    return response()

            return Servicer()

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        for path, (_, keep, response, module, service) in paths.items():
            add = getattr(module, f"add_{service}Servicer_to_server")
            base = getattr(module, f"{service}Servicer")
            add(servicer(base, keep, response, path == "/v1/logs"), server)
        server.add_insecure_port(f"127.0.0.1:{self.grpc_port}")
        server.start()
        self._grpc = server

        class Handler(BaseHTTPRequestHandler):
            timeout = IDLE_TIMEOUT_S  # an idle or stalled client's connection is closed

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                kind = paths.get(self.path)
                try:  # a body that is not a request gets a 4xx, never a traceback
                    body = read_body(self)
                    req = kind[0].FromString(body) if kind is not None else None
                except BodyError as exc:
                    return answer(self, exc.status, str(exc).encode())
                except DecodeError:
                    return answer(self, HTTPStatus.BAD_REQUEST, b"not an OTLP request")
                logs = self.path == "/v1/logs"
                if not receiver._admit(logs):
                    return answer(self, HTTPStatus.SERVICE_UNAVAILABLE)
                if kind is None or (logs and not receiver.logs):
                    return answer(self, HTTPStatus.NOT_FOUND)
                kind[1](req)
                answer(self, HTTPStatus.OK, kind[2]().SerializeToString(),
                       "application/x-protobuf")  # fmt: skip

        server_class = quiet_server(ThreadingHTTPServer)
        server_class.allow_reuse_address = True
        self._http = server_class(("127.0.0.1", self.http_port), Handler)
        self._http.daemon_threads = True
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._gate.set()  # stalled handlers answer, so the servers can stop
        if self._grpc is not None:
            self._grpc.stop(grace=None)
            self._grpc = None
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def __enter__(self) -> OTLPReceiver:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def hold(self) -> None:
        """Stall: requests wait, unanswered, until :meth:`release` (a hung endpoint)."""
        self._gate.clear()

    def release(self) -> None:
        """Answer the stalled requests and stop stalling."""
        self._gate.set()

    def _admit(self, logs: bool = False) -> bool:
        with self._lock:
            if logs:
                self.log_requests += 1
            else:
                self.requests += 1
        self._gate.wait()
        if self.delay_s:
            time.sleep(self.delay_s)
        return not self.refuse

    def _add_traces(self, req: _TracesRequest) -> None:
        out = []
        for rs in req.resource_spans:
            resource = _attrs(rs.resource.attributes)
            for s in (s for ss in rs.scope_spans for s in ss.spans):
                links = tuple((ln.trace_id.hex(), ln.span_id.hex(), _attrs(ln.attributes))
                              for ln in s.links)  # fmt: skip
                out.append(ReceivedSpan(
                    s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex() or None,
                    s.start_time_unix_nano, s.end_time_unix_nano, s.status.code,
                    _attrs(s.attributes), resource, links,
                ))  # fmt: skip
        with self._lock:
            self._spans.extend(out)

    def _add_metrics(self, req: _MetricsRequest) -> None:
        with self._lock:
            self._metrics.append(req)

    def _add_logs(self, req: _LogsRequest) -> None:
        out = []
        for rl in req.resource_logs:
            resource = _attrs(rl.resource.attributes)
            for r in (r for sl in rl.scope_logs for r in sl.log_records):
                attrs = _attrs(r.attributes)
                name = getattr(r, "event_name", "") or attrs.get("event.name", "")
                out.append(ReceivedLog(name, r.trace_id.hex(), r.span_id.hex(),
                                       r.time_unix_nano, attrs, resource))  # fmt: skip
        with self._lock:
            self._logs.extend(out)

    def logs_received(self) -> list[ReceivedLog]:
        """Every log record received, in arrival order."""
        with self._lock:
            return list(self._logs)

    def metric_requests(self) -> list[_MetricsRequest]:
        """Every metrics export request received, in arrival order."""
        with self._lock:
            return list(self._metrics)

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def metric_points(self, name: str) -> list[dict[str, Any]]:
        """Histogram/sum data points of metric ``name`` from every request received, in
        arrival order, each with its ``attributes``, ``resource`` and ``time_ns``."""
        points = []
        for req in self.metric_requests():
            for rm in req.resource_metrics:
                resource = _attrs(rm.resource.attributes)
                for m in (m for sm in rm.scope_metrics for m in sm.metrics if m.name == name):
                    kind = m.WhichOneof("data")
                    for p in getattr(m, kind).data_points if kind else ():
                        point = {"attributes": _attrs(p.attributes), "kind": kind,
                                 "resource": resource, "time_ns": p.time_unix_nano}  # fmt: skip
                        if kind == "histogram":
                            point.update(
                                count=p.count,
                                sum=p.sum,
                                bucket_counts=list(p.bucket_counts),
                                explicit_bounds=list(p.explicit_bounds),
                                exemplars=[e.trace_id.hex() for e in p.exemplars],
                            )
                        else:
                            point["value"] = p.as_double or p.as_int
                        points.append(point)
        return points

    def wait_for(self, predicate: Callable[[OTLPReceiver], bool], timeout: float = 10.0) -> bool:
        """Poll ``predicate(self)`` until it is true or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self):
                return True
            time.sleep(0.05)
        return predicate(self)
