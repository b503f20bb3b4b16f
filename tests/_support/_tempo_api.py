"""A stand-in for Tempo (AGPL, not built here) where the Collector's `otlp/tempo` exporter
sends: a real OTLP gRPC receiver that keeps the requests as they arrived, and an HTTP
server answering Tempo's documented query API from them, shaped as Tempo documents it
(docs/sources/tempo/api_docs in Tempo's repository):

- ``GET /api/search?limit=N&start=&end=``: ``{"traces": [{"traceID", "rootServiceName",
  "rootTraceName", "startTimeUnixNano", "durationMs"}], "metrics": {...}}``, trace ids in
  hex without leading zeros, at most ``limit`` traces (default 20, as Tempo's);
- ``GET /api/v2/traces/<traceID>``: ``{"trace": <OTLP JSON>, "status": "COMPLETE"}``, the
  protobuf JSON mapping (ids base64, enums by name, 64-bit integers as strings), 404 for
  an unknown id.

What it cannot show is Tempo's own behaviour (search over blocks, its limits): stated so in
docs/deploy.md.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.trace.v1 import trace_pb2

from otel_rollout.testing.receiver import OTLPReceiver, _free_port


class TempoAPI(OTLPReceiver):
    def __init__(self) -> None:
        super().__init__()
        self.api_port = _free_port()
        # trace id (hex) -> ResourceSpans holding only that trace's spans, in arrival order
        self._traces: dict[str, list[trace_pb2.ResourceSpans]] = {}
        self._api: ThreadingHTTPServer | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def _add_traces(self, req: Any) -> None:
        super()._add_traces(req)
        with self._lock:
            for rs in req.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        one = trace_pb2.ResourceSpans(
                            resource=rs.resource, schema_url=rs.schema_url
                        )
                        one.scope_spans.add(scope=ss.scope, schema_url=ss.schema_url).spans.append(
                            span
                        )
                        self._traces.setdefault(span.trace_id.hex(), []).append(one)

    def _search(self, query: dict[str, list[str]]) -> dict[str, Any]:
        limit = int((query.get("limit") or ["20"])[0])
        out = []
        with self._lock:
            items = list(self._traces.items())
        for tid, batches in items:
            spans = [s for rs in batches for ss in rs.scope_spans for s in ss.spans]
            root = next((s for s in spans if not s.parent_span_id), spans[0])
            service = next(
                (
                    kv.value.string_value
                    for rs in batches
                    for kv in rs.resource.attributes
                    if kv.key == "service.name"
                ),
                "",
            )
            start = min(s.start_time_unix_nano for s in spans)
            end = max(s.end_time_unix_nano for s in spans)
            out.append(
                {
                    "traceID": tid.lstrip("0") or "0",
                    "rootServiceName": service,
                    "rootTraceName": root.name,
                    "startTimeUnixNano": str(start),
                    "durationMs": (end - start) // 1_000_000,
                }
            )
        out.sort(key=lambda t: int(t["startTimeUnixNano"]), reverse=True)
        return {
            "traces": out[:limit],
            "metrics": {"inspectedTraces": len(out), "inspectedBytes": "0", "totalBlocks": 0},
        }

    def _trace(self, tid: str) -> dict[str, Any] | None:
        with self._lock:
            batches = self._traces.get(tid.rjust(32, "0").lower())
            if not batches:
                return None
            trace = trace_pb2.TracesData(resource_spans=batches)
        return {"trace": json_format.MessageToDict(trace), "status": "COMPLETE"}

    def start(self) -> TempoAPI:
        super().start()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                parts = urllib.parse.urlsplit(self.path)
                body: Any = None
                if parts.path == "/api/search":
                    body = api._search(urllib.parse.parse_qs(parts.query))
                elif parts.path.startswith("/api/v2/traces/"):
                    body = api._trace(parts.path.rsplit("/", 1)[1])
                if body is None:
                    self.send_response(404)
                    self.end_headers()
                    self.wfile.write(b"trace not found")
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._api = ThreadingHTTPServer(("127.0.0.1", self.api_port), Handler)
        self._api.daemon_threads = True
        threading.Thread(target=self._api.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        super().stop()
        if self._api is not None:
            self._api.shutdown()
            self._api.server_close()
            self._api = None
