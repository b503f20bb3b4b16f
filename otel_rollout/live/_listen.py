"""``otel-rollout top --listen [HOST:]PORT``: an embedded OTLP receiver, gRPC on PORT and
OTLP/HTTP on PORT+1 (docs/live.md); requests are queued as received, bounded in bytes."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent import futures
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from otel_rollout._base.http_body import (
    IDLE_TIMEOUT_S,
    MAX_BODY_BYTES,
    BodyError,
    answer,
    quiet_server,
    read_body,
)

#: Bytes of requests waiting for the screen at most (as received: protobuf or JSON).
MAX_QUEUED_BYTES = 64 << 20
#: Requests waiting for the screen at most, whatever their size.
MAX_QUEUED = 4096


def loads(raw: bytes | str) -> Any:
    """JSON with orjson, or the standard parser for what orjson refuses and ``report``
    reads (a lone surrogate in an id)."""
    try:
        return orjson.loads(raw)
    except (ValueError, TypeError, RecursionError):
        return json.loads(raw)


def parse_listen(value: str) -> tuple[str, int]:
    """``[HOST:]PORT`` as (host, port); host defaults to 127.0.0.1 (``0.0.0.0``: all)."""
    host, _, port = value.rpartition(":")
    try:
        n = int(port)
    except ValueError:
        raise ValueError(f"expected [HOST:]PORT, got {value!r}") from None
    if not 0 < n < 65535:
        raise ValueError(f"port must be 1-65534 (HTTP uses PORT+1), got {n}")
    return host.strip("[]") or "127.0.0.1", n


class Listener:
    """The receiver: :meth:`start`, then :meth:`take` the queued documents."""

    def __init__(self, host: str, port: int, *, max_queued_bytes: int = MAX_QUEUED_BYTES,
                 max_body_bytes: int = MAX_BODY_BYTES) -> None:  # fmt: skip
        self.host, self.grpc_port, self.http_port = host, port, port + 1
        self.max_queued_bytes, self.max_body_bytes = max_queued_bytes, max_body_bytes
        #: (request as received, how to read it, its bytes)
        self._queue: deque[tuple[Any, Callable[[Any], Any], int]] = deque()
        self._lock = threading.Lock()
        self.queued_bytes = self.received = self.dropped = 0
        self.refused = 0  # bodies answered 4xx
        self.error: str | None = None
        self._grpc: Any = None
        self._http: ThreadingHTTPServer | None = None

    def describe(self) -> str:
        refused = f", {self.refused} refused" if self.refused else ""
        where = f"gRPC {self.host}:{self.grpc_port}, HTTP {self.host}:{self.http_port}"
        return self.error or f"listening: OTLP {where}; {self.received} requests{refused}"

    def _put(self, request: Any, read: Callable[[Any], Any], size: int) -> None:
        with self._lock:
            self.received += 1
            if len(self._queue) >= MAX_QUEUED or self.queued_bytes + size > self.max_queued_bytes:
                self.dropped += 1
                return
            self._queue.append((request, read, size))
            self.queued_bytes += size

    def take(self, deadline: float, clock: Callable[[], float]) -> Iterator[Any]:
        """Queued documents (OTLP JSON shape) until none is left or ``deadline`` passes;
        one that cannot be read is None (the ingest counts it)."""
        while clock() < deadline:
            with self._lock:
                if not self._queue:
                    return
                request, read, size = self._queue.popleft()
                self.queued_bytes -= size
            try:
                yield read(request)
            except Exception:  # checked when received: only a reader's own fault is left
                yield None

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
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2 as logs
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc as logs_grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as metrics
        from opentelemetry.proto.collector.metrics.v1 import (
            metrics_service_pb2_grpc as metrics_grpc,
        )
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as traces
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as traces_grpc

        put = self._put

        class Traces(traces_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                put(request, MessageToDict, request.ByteSize())
                return traces.ExportTraceServiceResponse()

        class Logs(logs_grpc.LogsServiceServicer):  # the in-flight records
            def Export(self, request: Any, context: Any) -> Any:
                put(request, MessageToDict, request.ByteSize())
                return logs.ExportLogsServiceResponse()

        class Metrics(metrics_grpc.MetricsServiceServicer):  # accepted, ignored
            def Export(self, request: Any, context: Any) -> Any:
                return metrics.ExportMetricsServiceResponse()

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                             options=[("grpc.max_receive_message_length",
                                       self.max_body_bytes)])  # fmt: skip
        traces_grpc.add_TraceServiceServicer_to_server(Traces(), server)
        logs_grpc.add_LogsServiceServicer_to_server(Logs(), server)
        metrics_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
        if not server.add_insecure_port(f"{self.host}:{self.grpc_port}"):
            raise OSError(f"gRPC port {self.grpc_port} is in use")
        server.start()
        self._grpc = server

    def _start_http(self) -> None:
        from google.protobuf.json_format import MessageToDict
        from google.protobuf.message import Message
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        listener = self
        types: dict[str, type[Message]] = {
            "/v1/traces": trace_service_pb2.ExportTraceServiceRequest,
            "/v1/logs": logs_service_pb2.ExportLogsServiceRequest,
        }

        class Handler(BaseHTTPRequestHandler):
            timeout = IDLE_TIMEOUT_S  # an idle or stalled client's connection is closed

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                path = self.path.rstrip("/")
                as_json = "json" in (self.headers.get("Content-Type") or "")
                status, reply = HTTPStatus.OK, b"{}" if as_json else b""
                try:
                    body = read_body(self, listener.max_body_bytes)
                    kind = types.get(path)
                    if kind is not None and as_json:  # a bad body is refused, not queued
                        loads(body)
                        listener._put(body, loads, len(body))
                    elif kind is not None:
                        listener._put(kind.FromString(body), MessageToDict, len(body))
                    elif path != "/v1/metrics":
                        status, reply = HTTPStatus.NOT_FOUND, b""
                except BodyError as exc:
                    status, reply = exc.status, str(exc).encode()
                except Exception:  # not JSON, not an OTLP request
                    status, reply = HTTPStatus.BAD_REQUEST, b"not an OTLP trace or logs request"
                if status >= 400 and status != HTTPStatus.NOT_FOUND:
                    listener.refused += 1
                ok_type = "application/json" if as_json else "application/x-protobuf"
                answer(self, status, reply, ok_type if status == HTTPStatus.OK else "text/plain")

        server = quiet_server(ThreadingHTTPServer)
        server.allow_reuse_address = True
        self._http = server((self.host, self.http_port), Handler)
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
