"""An OTLP/HTTP request body read within bounds, for the receivers here (``top --listen``,
``otel_rollout.testing``'s): what a hostile or broken client sends gets an HTTP status
(411, 400, 413, 415, 408; docs/live.md), never a traceback, a dropped connection or
unbounded memory; a gzip body is inflated in steps of at most the limit."""

from __future__ import annotations

import socketserver
import zlib
from http import HTTPStatus
from typing import Any, TypeVar

_Server = TypeVar("_Server", bound=socketserver.BaseServer)

#: The largest body taken, compressed or not (the gRPC receivers' message limit).
MAX_BODY_BYTES = 64 << 20
#: Seconds a connection may sit idle (before its request, or mid-body) before it is closed.
IDLE_TIMEOUT_S = 30.0


class BodyError(Exception):
    """The request cannot be taken: ``status`` says why (4xx)."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


def read_body(handler: Any, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body of ``handler`` (a ``BaseHTTPRequestHandler``), gunzipped where it
    says so, at most ``limit`` bytes either way; :class:`BodyError` otherwise."""
    raw = handler.headers.get("Content-Length")
    if raw is None:
        raise BodyError(HTTPStatus.LENGTH_REQUIRED, "Content-Length is required")
    try:
        length = int(raw)
    except ValueError:
        length = -1
    if length < 0:
        raise BodyError(HTTPStatus.BAD_REQUEST, f"bad Content-Length {raw[:40]!r}")
    if length > limit:
        raise BodyError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {limit} bytes")
    try:
        body = handler.rfile.read(length)
    except TimeoutError:
        raise BodyError(HTTPStatus.REQUEST_TIMEOUT, "the body stopped coming") from None
    if len(body) < length:
        raise BodyError(HTTPStatus.BAD_REQUEST, "body shorter than its Content-Length")
    encoding = (handler.headers.get("Content-Encoding") or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding != "gzip":
        raise BodyError(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, f"Content-Encoding {encoding[:40]!r}")
    return gunzip(body, limit)


def gunzip(body: bytes, limit: int = MAX_BODY_BYTES) -> bytes:
    """``body`` decompressed, at most ``limit`` bytes of it held at any time."""
    inflate = zlib.decompressobj(wbits=31)  # gzip framing
    try:
        out = inflate.decompress(body, limit + 1)
    except zlib.error as exc:
        raise BodyError(HTTPStatus.BAD_REQUEST, f"not gzip: {exc}") from None
    if len(out) > limit or inflate.unconsumed_tail:
        raise BodyError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"inflates past {limit} bytes")
    if not inflate.eof:
        raise BodyError(HTTPStatus.BAD_REQUEST, "gzip body cut short")
    return out


def answer(handler: Any, status: HTTPStatus, body: bytes = b"",
           content_type: str = "text/plain") -> None:  # fmt: skip
    """Send ``status`` with ``body`` and close the connection after it."""
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.send_header("Connection", "close")
    handler.end_headers()
    handler.wfile.write(body)
    handler.close_connection = True


def quiet_server(base: type[_Server]) -> type[_Server]:
    """``base`` (a ``socketserver`` server class) that closes a connection whose handler
    failed without printing a traceback: a client that vanished or timed out mid-request
    is the client's to see, not the terminal's."""

    # a base held in a variable is not a static type for mypy: the subclass is checked here
    class Quiet(base):  # type: ignore[misc,valid-type]
        def handle_error(self, request: Any, client_address: Any) -> None:
            pass

    Quiet.__name__ = Quiet.__qualname__ = f"Quiet{base.__name__}"
    return Quiet
