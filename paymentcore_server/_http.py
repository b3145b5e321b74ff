"""What ``paymentcore serve`` answers to a request its HTTP parser refuses, before the app sees it.

uvicorn's parsers refuse a request whose line and headers are too large, or that is not HTTP at all,
with ``400 text/plain "Invalid HTTP request received."``, without ``X-Request-Id``; and h11 refuses
oversized headers only when they arrive in pieces (one read of up to 256 KiB is parsed whatever its
size). The protocols here answer in the documented error shape instead, with a request id in the
body and in ``X-Request-Id``: 431 when the request line and headers pass ``MAX_HEADERS``, 400 for
anything else the parser refuses. Headers that arrive whole are measured by the app
(``RequestIdMiddleware``), so the limit is the same however the bytes arrive.

:func:`http_protocol` picks the parser as uvicorn's ``auto`` does: httptools when it is installed
(the ``bench`` extra), h11 otherwise.
"""

from __future__ import annotations

import asyncio
import http
import logging
import secrets
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from paymentcore import wire
from paymentcore_server._edge import HEADERS_TOO_LARGE

__all__ = ["H11", "NOT_HTTP", "http_protocol", "new_request_id", "refusal"]

log = logging.getLogger("paymentcore.server")
NOT_HTTP = "The request is not valid HTTP."


def new_request_id() -> str:
    return "req_" + secrets.token_hex(12)


def refusal(status: int, message: str) -> bytes:
    """A whole HTTP/1.1 answer in the documented error shape (INVALID_REQUEST), closing the connection."""
    rid = new_request_id()
    log.warning("refused before the app (%d %s, request %s)", status, message, rid)
    body = wire.dumps({"code": "INVALID_REQUEST", "message": message, "requestId": rid}).encode()
    head = (
        f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        f"x-request-id: {rid}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class H11(H11Protocol):
    """uvicorn's h11 protocol, refusing in the documented shape. h11 raises its error for oversized
    headers while the unparsed bytes pass ``h11_max_incomplete_event_size`` (``MAX_HEADERS``): the
    buffer's length tells that refusal from the others."""

    def send_400_response(self, msg: str) -> None:
        limit = self.config.h11_max_incomplete_event_size or 0
        too_large = bool(limit) and len(self.conn.trailing_data[0]) > limit
        status, message = (431, HEADERS_TOO_LARGE) if too_large else (400, NOT_HTTP)
        self.transport.write(refusal(status, message))
        self.transport.close()


def _httptools_protocol(limit: int) -> type[asyncio.Protocol] | None:
    """uvicorn's httptools protocol, counting the request line and headers as they are parsed (llhttp
    sets no limit of its own) and refusing in the documented shape; None without httptools."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return None

    class HttpTools(HttpToolsProtocol):
        head_bytes = 0
        too_large = False
        raw_head = 0  # bytes received since the request began, while its headers are not complete
        head_done = False

        def data_received(self, data: bytes) -> None:
            # llhttp reports a header only once its line is complete: a header that never ends would
            # be buffered without limit, so the raw bytes of an unfinished head are counted too
            if not self.head_done:
                self.raw_head += len(data)
            super().data_received(data)
            if not self.head_done and self.raw_head > limit and not self.transport.is_closing():
                self.too_large = True
                self.send_400_response("request headers too large")

        def on_headers_complete(self) -> None:
            self.head_done = True
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self.head_done = False
            self.raw_head = 0

        def _count(self, size: int) -> None:
            self.head_bytes += size
            if self.head_bytes > limit:
                self.too_large = True
                raise ValueError("request headers too large")  # the parser's error: send_400_response

        def on_message_begin(self) -> None:
            self.head_bytes = 0
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            self._count(len(url) + 16)  # the method, the version and the line's own bytes
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count(len(name) + len(value) + 4)
            super().on_header(name, value)

        def send_400_response(self, msg: str) -> None:
            status, message = (431, HEADERS_TOO_LARGE) if self.too_large else (400, NOT_HTTP)
            self.transport.write(refusal(status, message))
            self.transport.close()

    return HttpTools


def http_protocol(limit: int) -> type[asyncio.Protocol]:
    """The protocol class for ``uvicorn.run(http=...)``: httptools' when installed, else h11's (with
    ``h11_max_incomplete_event_size=limit``)."""
    found: Any = _httptools_protocol(limit)
    return found if found is not None else H11
