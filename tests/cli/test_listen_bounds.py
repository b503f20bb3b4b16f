"""The OTLP/HTTP receivers (``top --listen`` and ``otel_rollout.testing``'s) against
hostile and broken clients: a status for every bad body, bounded memory, idle connections
closed, never a traceback."""

from __future__ import annotations

import gzip
import http.client
import socket

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_rollout.live import _listen
from otel_rollout.live._listen import Listener
from otel_rollout.testing.receiver import OTLPReceiver


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def listener(monkeypatch):
    monkeypatch.setattr(_listen, "IDLE_TIMEOUT_S", 0.5)
    lst = Listener("127.0.0.1", _port(), max_body_bytes=1 << 20,
                   max_queued_bytes=64 << 10).start()  # fmt: skip
    assert lst.error is None, lst.error
    yield lst
    lst.stop()


@pytest.fixture
def receiver(monkeypatch):
    from otel_rollout.testing import receiver as module

    monkeypatch.setattr(module, "IDLE_TIMEOUT_S", 0.5)
    with OTLPReceiver() as rec:
        yield rec


def _post(port, body, headers=None, path="/v1/traces"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Content-Type": "application/x-protobuf", **(headers or {})}
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _raw(port, data):
    """Send ``data`` as it is; the status line answered, or b"" if the server closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(data)
        return s.recv(4096).split(b"\r\n", 1)[0]


def _request(spans=1) -> bytes:
    req = ExportTraceServiceRequest()
    scope = req.resource_spans.add().scope_spans.add()
    for i in range(spans):
        sp = scope.spans.add(name=f"s{i}", trace_id=b"\1" * 16, span_id=bytes([1 + i % 250]) * 8)
        sp.start_time_unix_nano, sp.end_time_unix_nano = 1, 2
    return req.SerializeToString()


BOTH = ["listener", "receiver"]


@pytest.mark.parametrize("server", BOTH)
def test_a_gzip_body_inflating_past_the_limit_is_413(server, request):
    srv = request.getfixturevalue(server)
    limit = 1 << 20 if server == "listener" else 64 << 20
    bomb = gzip.compress(b"\0" * (limit + 1), compresslevel=9)
    assert len(bomb) < limit // 100  # small on the wire
    status, _ = _post(srv.http_port, bomb, {"Content-Encoding": "gzip"})
    assert status == 413
    status, _ = _post(srv.http_port, gzip.compress(_request()), {"Content-Encoding": "gzip"})
    assert status == 200  # the receiver goes on


@pytest.mark.parametrize("server", BOTH)
@pytest.mark.parametrize(("length", "status"), [(b"abc", b"400"), (b"-5", b"400"),
                                                 (None, b"411")])  # fmt: skip
def test_a_bad_or_missing_content_length_is_answered(server, request, length, status):
    srv = request.getfixturevalue(server)
    head = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
    if length is not None:
        head += b"Content-Length: " + length + b"\r\n"
    line = _raw(srv.http_port, head + b"\r\n")
    assert line.split(b" ")[1] == status, line


@pytest.mark.parametrize("server", BOTH)
def test_a_body_over_the_limit_is_413_without_reading_it(server, request):
    srv = request.getfixturevalue(server)
    head = (b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Length: "
            + str(1 << 40).encode() + b"\r\n\r\n")  # fmt: skip
    assert _raw(srv.http_port, head).split(b" ")[1] == b"413"


@pytest.mark.parametrize("server", BOTH)
@pytest.mark.parametrize("body", [b"\xff" * 64, b"not protobuf at all", b"\x0a\xff\xff\xff"])
def test_a_garbage_body_is_400_and_the_next_request_is_taken(server, request, body, capfd):
    srv = request.getfixturevalue(server)
    assert _post(srv.http_port, body)[0] == 400
    assert _post(srv.http_port, gzip.compress(body), {"Content-Encoding": "gzip"})[0] == 400
    assert _post(srv.http_port, b"\x1f\x8b not gzip", {"Content-Encoding": "gzip"})[0] == 400
    assert _post(srv.http_port, _request())[0] == 200
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("server", BOTH)
def test_idle_and_stalled_connections_are_closed_quietly(server, request, capfd):
    srv = request.getfixturevalue(server)
    with socket.create_connection(("127.0.0.1", srv.http_port), timeout=30) as idle:
        assert idle.recv(1) == b""  # closed by the server, nothing sent
    with socket.create_connection(("127.0.0.1", srv.http_port), timeout=30) as stalled:
        stalled.sendall(b"POST /v1/traces HTTP/1.1\r\nContent-Length: 100\r\n\r\n0123456789")
        assert stalled.recv(64).startswith(b"HTTP/1.0 408 ")  # the body never came
    assert _post(srv.http_port, _request())[0] == 200
    assert "Traceback" not in capfd.readouterr().err


def test_the_listeners_queue_is_bounded_in_bytes_and_drops_are_counted(listener):
    body = _request(spans=200)  # about 10 KB
    n = 3 * (64 << 10) // len(body)
    for _ in range(n):
        assert _post(listener.http_port, body)[0] == 200
    assert listener.queued_bytes <= 64 << 10
    assert listener.received == n and listener.dropped == n - (64 << 10) // len(body)
    docs = list(listener.take(float("inf"), lambda: 0.0))
    assert len(docs) == n - listener.dropped and listener.queued_bytes == 0
    assert all(len(d["resourceSpans"][0]["scopeSpans"][0]["spans"]) == 200 for d in docs)


def test_the_listener_refuses_json_that_is_not_json(listener):
    headers = {"Content-Type": "application/json"}
    assert _post(listener.http_port, b"{not json", headers)[0] == 400
    assert _post(listener.http_port, b'{"resourceSpans": []}', headers)[0] == 200
    assert listener.refused == 1 and "1 refused" in listener.describe()
