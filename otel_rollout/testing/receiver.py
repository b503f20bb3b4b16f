"""A real OTLP receiver for tests: gRPC and HTTP on 127.0.0.1, decoding real protobufs.

Needs the ``otlp`` extra (grpcio, opentelemetry-proto). Fault knobs let tests play an
endpoint that is slow (``delay_s``), stalled until released (``hold()``/``release()``) or
refusing (``refuse``), and ``stop()``/``start()`` restart it on the same ports.
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["OTLPReceiver", "ReceivedSpan"]


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OTLPReceiver:
    """Accepts OTLP traces and metrics over gRPC and HTTP/protobuf and keeps them."""

    def __init__(self) -> None:
        self.grpc_port = _free_port()
        self.http_port = _free_port()
        self.delay_s = 0.0
        self.refuse = False
        self.requests = 0
        self._gate = threading.Event()
        self._gate.set()
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self._metrics: list[metrics_service_pb2.ExportMetricsServiceRequest] = []
        self._grpc: grpc.Server | None = None
        self._http: ThreadingHTTPServer | None = None

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    # --- lifecycle -----------------------------------------------------------------------
    def start(self) -> OTLPReceiver:
        receiver = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):
                if not receiver._admit():
                    context.abort(grpc.StatusCode.UNAVAILABLE, "receiver refusing")
                receiver._add_traces(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request, context):
                if not receiver._admit():
                    context.abort(grpc.StatusCode.UNAVAILABLE, "receiver refusing")
                receiver._add_metrics(request)
                return metrics_service_pb2.ExportMetricsServiceResponse()

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
        server.add_insecure_port(f"127.0.0.1:{self.grpc_port}")
        server.start()
        self._grpc = server

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if not receiver._admit():
                    self.send_response(503)
                    self.end_headers()
                    return
                if self.path == "/v1/traces":
                    req = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                    receiver._add_traces(req)
                    reply = trace_service_pb2.ExportTraceServiceResponse()
                elif self.path == "/v1/metrics":
                    req = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
                    receiver._add_metrics(req)
                    reply = metrics_service_pb2.ExportMetricsServiceResponse()
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = reply.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        ThreadingHTTPServer.allow_reuse_address = True
        self._http = ThreadingHTTPServer(("127.0.0.1", self.http_port), Handler)
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

    # --- data ----------------------------------------------------------------------------
    def _admit(self) -> bool:
        with self._lock:
            self.requests += 1
        self._gate.wait()
        if self.delay_s:
            time.sleep(self.delay_s)
        return not self.refuse

    def _add_traces(self, req: trace_service_pb2.ExportTraceServiceRequest) -> None:
        out = []
        for rs in req.resource_spans:
            resource = _attrs(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    out.append(
                        ReceivedSpan(
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex() or None,
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            status_code=s.status.code,
                            attributes=_attrs(s.attributes),
                            resource=resource,
                            links=tuple(
                                (ln.trace_id.hex(), ln.span_id.hex(), _attrs(ln.attributes))
                                for ln in s.links
                            ),
                        )
                    )
        with self._lock:
            self._spans.extend(out)

    def _add_metrics(self, req: metrics_service_pb2.ExportMetricsServiceRequest) -> None:
        with self._lock:
            self._metrics.append(req)

    def metric_requests(self) -> list[metrics_service_pb2.ExportMetricsServiceRequest]:
        """Every metrics export request received, in arrival order."""
        with self._lock:
            return list(self._metrics)

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def metric_points(self, name: str) -> list[dict[str, Any]]:
        """Histogram/sum data points of metric ``name`` from every request received, in
        arrival order, each with its ``attributes``, ``resource`` and ``time_ns``."""
        with self._lock:
            requests = list(self._metrics)
        points = []
        for req in requests:
            for rm in req.resource_metrics:
                resource = _attrs(rm.resource.attributes)
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        if m.name != name:
                            continue
                        kind = m.WhichOneof("data")
                        for p in getattr(m, kind).data_points:
                            point = {
                                "attributes": _attrs(p.attributes),
                                "kind": kind,
                                "resource": resource,
                                "time_ns": p.time_unix_nano,
                            }
                            if kind in ("histogram",):
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
