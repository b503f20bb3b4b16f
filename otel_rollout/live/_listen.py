"""``otel-rollout top --listen [HOST:]PORT``: an embedded OTLP receiver.

gRPC on PORT and OTLP/HTTP (protobuf or JSON) on PORT+1: the standard 4317/4318 pair
for ``--listen 4317``, so a trainer's ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or a Collector's
exporter) points at it unchanged. Trace requests are turned into OTLP JSON documents
(what a trace file holds) and queued for the screen, bounded: when the screen falls
behind, requests are dropped and counted. Metrics and logs are accepted and ignored, so
a trainer sending them too sees no errors.
"""

from __future__ import annotations

import gzip
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: Requests waiting for the screen at most (each up to a batch of 512 spans).
MAX_QUEUED = 4096


def parse_listen(value: str) -> tuple[str, int]:
    """``[HOST:]PORT`` as (host, port); host defaults to 127.0.0.1 (``0.0.0.0``: all)."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host = "127.0.0.1"
    try:
        n = int(port)
    except ValueError:
        raise ValueError(f"expected [HOST:]PORT, got {value!r}") from None
    if not 0 < n < 65535:
        raise ValueError(f"port must be 1-65534 (HTTP uses PORT+1), got {n}")
    return host.strip("[]") or "127.0.0.1", n


class Listener:
    """The receiver: :meth:`start`, then :meth:`take` the queued documents."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.grpc_port, self.http_port = host, port, port + 1
        self._queue: deque[Any] = deque()
        self._lock = threading.Lock()
        self.received = 0
        self.dropped = 0
        self.error: str | None = None
        self._grpc: Any = None
        self._http: ThreadingHTTPServer | None = None

    def describe(self) -> str:
        if self.error:
            return self.error
        return (f"listening: OTLP gRPC {self.host}:{self.grpc_port}, HTTP "
                f"{self.host}:{self.http_port}; {self.received} requests")  # fmt: skip

    def _put(self, doc: Any) -> None:
        with self._lock:
            self.received += 1
            if len(self._queue) >= MAX_QUEUED:
                self.dropped += 1
                return
            self._queue.append(doc)

    def take(self, deadline: float, clock: Callable[[], float]) -> Iterator[Any]:
        """Queued documents, until none is left or ``deadline`` passes."""
        while clock() < deadline:
            with self._lock:
                if not self._queue:
                    return
                doc = self._queue.popleft()
            yield doc

    def start(self) -> Listener:
        try:
            self._start_grpc()
            self._start_http()
        except Exception as exc:  # a port in use, grpc missing: said on screen
            self.error = f"cannot listen on {self.host}:{self.grpc_port}/{self.http_port}: {exc}"
        return self

    def _start_grpc(self) -> None:
        import grpc
        from google.protobuf.json_format import MessageToDict
        from opentelemetry.proto.collector.metrics.v1 import (
            metrics_service_pb2,
            metrics_service_pb2_grpc,
        )
        from opentelemetry.proto.collector.trace.v1 import (
            trace_service_pb2,
            trace_service_pb2_grpc,
        )

        put = self._put

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                put(MessageToDict(request))
                return trace_service_pb2.ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                return metrics_service_pb2.ExportMetricsServiceResponse()

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                             options=[("grpc.max_receive_message_length", 64 << 20)])  # fmt: skip
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
        if not server.add_insecure_port(f"{self.host}:{self.grpc_port}"):
            raise OSError(f"gRPC port {self.grpc_port} is in use")
        server.start()
        self._grpc = server

    def _start_http(self) -> None:
        import json

        from google.protobuf.json_format import MessageToDict
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        put = self._put

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                try:
                    if self.headers.get("Content-Encoding") == "gzip":
                        body = gzip.decompress(body)
                    json_body = "json" in (self.headers.get("Content-Type") or "")
                    if self.path.rstrip("/") == "/v1/traces":
                        if json_body:
                            put(json.loads(body))
                        else:
                            req = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                            put(MessageToDict(req))
                    elif self.path.rstrip("/") not in ("/v1/metrics", "/v1/logs"):
                        self.send_response(404)
                        self.end_headers()
                        return
                except Exception:
                    self.send_response(400)
                    self.end_headers()
                    return
                reply = b"{}" if json_body else b""
                self.send_response(200)
                self.send_header(
                    "Content-Type", "application/json" if json_body else "application/x-protobuf"
                )
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        ThreadingHTTPServer.allow_reuse_address = True
        self._http = ThreadingHTTPServer((self.host, self.http_port), Handler)
        self._http.daemon_threads = True
        threading.Thread(target=self._http.serve_forever, name="otel-rollout-top-http",
                         daemon=True).start()  # fmt: skip

    def stop(self) -> None:
        if self._grpc is not None:
            self._grpc.stop(grace=None)
            self._grpc = None
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
