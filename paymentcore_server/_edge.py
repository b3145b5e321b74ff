"""The edge every HTTP answer of the server passes: request ids, the JSON and error responses, the
limits on a request's head and body, and the handler of Starlette's own HTTP errors. Shared by the API
(``paymentcore_server.app``, which exports these names too) and the checkout pages
(``paymentcore_server.page``), below both so that neither imports the other for them."""

from __future__ import annotations

import logging
import secrets
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from paymentcore import (
    InvalidRequestError,
    NotFoundError,
    PaymentError,
    RateLimitedError,
    ServerError,
    wire,
)
from paymentcore_server._headers import (
    RATE_LIMIT_LIMIT,
    RATE_LIMIT_REMAINING,
    RATE_LIMIT_RESET,
    RETRY_AFTER_HEADER,
)
from paymentcore_server.errors import BodyTooLargeError, MethodNotAllowedError, status_of

__all__ = [
    "HEADERS_TOO_LARGE",
    "MAX_BODY",
    "MAX_HEADERS",
    "RequestIdMiddleware",
    "error_response",
    "head_size",
    "http_error_handler",
    "json_response",
    "read_body",
    "request_id",
    "send_json",
]

MAX_BODY = 1024 * 1024
#: the request line and headers together: more answers 431 (here, or in ``paymentcore_server._http``
#: when the HTTP parser meets it first)
MAX_HEADERS = 32 * 1024
HEADERS_TOO_LARGE = "The request line and headers are larger than 32 KiB."
log = logging.getLogger("paymentcore.server")


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(wire.dumps(body), status_code=status, headers=headers, media_type="application/json")


def _json_head(status: int, data: bytes, headers: dict[str, str] | None) -> list[tuple[bytes, bytes]]:
    """The header lines ``json_response`` gives, in its order: the given ones, then the length and type."""
    given = (headers or {}).items()
    raw = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in given]
    if not (status < 200 or status in (204, 304)):
        raw.append((b"content-length", str(len(data)).encode()))
    raw.append((b"content-type", b"application/json"))
    return raw


async def send_json(send: Send, body: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
    """What ``json_response(body, status, headers)`` sends, sent straight on the ASGI channel."""
    data = wire.dumps(body).encode()
    head = _json_head(status, data, headers)
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": data})


def request_id(request: Request) -> str:
    return scope_request_id(request.scope)


def scope_request_id(scope: Scope) -> str:
    """The id of the request of ``scope`` (``RequestIdMiddleware`` gives it; made here if it did not)."""
    rid: str = scope.setdefault("state", {}).setdefault("request_id", "req_" + secrets.token_hex(12))
    return rid


def error_reply(scope: Scope, error: PaymentError) -> tuple[dict[str, Any], int, dict[str, str]]:
    """An error's answer: the body in the documented shape (with the request's id), status and headers."""
    body = error.to_dict()
    body["requestId"] = scope_request_id(scope)
    headers = {}
    if isinstance(error, RateLimitedError):
        headers[RETRY_AFTER_HEADER] = str(error.retry_after)
        headers[RATE_LIMIT_LIMIT] = str(error.limit)
        headers[RATE_LIMIT_REMAINING] = "0"
        headers[RATE_LIMIT_RESET] = str(error.retry_after)
    return body, status_of(error), headers


def error_response(request: Request, error: PaymentError) -> Response:
    return json_response(*error_reply(request.scope, error))


def head_size(scope: Scope) -> int:
    """About how many bytes the request line and headers took on the wire."""
    line = len(scope.get("method", "")) + len(scope.get("raw_path") or b"")
    line += len(scope.get("query_string", b"")) + 12  # the spaces, "HTTP/1.1" and CRLF
    return line + sum(len(name) + len(value) + 4 for name, value in scope.get("headers", ()))


class RequestIdMiddleware:
    """Gives every request an id and puts it on every response as X-Request-Id; a request whose line
    and headers pass MAX_HEADERS is answered 431 in the error shape (nothing else runs)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = "req_" + secrets.token_hex(12)
        scope.setdefault("state", {})["request_id"] = rid
        if head_size(scope) > MAX_HEADERS:  # and the connection ends, as the parser's refusal does
            await _send_error(send, 431, "INVALID_REQUEST", HEADERS_TOO_LARGE, rid, close=True)
            return
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", rid.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            log.exception("unhandled error (request %s)", rid)
            if started:
                raise
            await _send_error(send, 500, "SERVER_ERROR", ServerError.default_message, rid)


async def _send_error(
    send: Send, status: int, code: str, message: str, rid: str, *, close: bool = False
) -> None:
    """An error in the documented shape, sent straight on the ASGI channel."""
    body = wire.dumps({"code": code, "message": message, "requestId": rid}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-request-id", rid.encode()),
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def read_body(request: Request) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY:
        raise BodyTooLargeError("The request body is larger than 1 MiB.")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise BodyTooLargeError("The request body is larger than 1 MiB.")
        chunks.append(chunk)
    return b"".join(chunks)


async def http_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error: PaymentError
    if exc.status_code == 404:
        error = NotFoundError("No such path.")
    elif exc.status_code == 405:
        error = MethodNotAllowedError(f"{request.method} is not allowed on this path.")
    else:
        error = InvalidRequestError(str(exc.detail))
    response = error_response(request, error)
    if exc.status_code == 405 and exc.headers and "Allow" in exc.headers:
        response.headers["Allow"] = exc.headers["Allow"]
    return response
