"""What the server tells operators about each request: one record per request, for metrics and logs.

:class:`RequestObserverMiddleware` wraps the app (outside ``RequestIdMiddleware``, so it sees the final
status, the 500 of a crash included) and hands a :class:`RequestRecord` to each of its sinks when the
response is sent: the Prometheus metrics (``paymentcore_server.metrics``) and the request log
(:func:`log_request`, on with ``--log-format json``).

A record names the route by its template (``/v1/disburse/{reference}``), never the raw path, and an
unknown path as ``unmatched``; it holds no query string, header, body, API key or phone number.
:class:`JsonFormatter` writes every log record as one JSON object per line.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import attrs
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "FIELDS_ATTRIBUTE",
    "LOG_FORMATS",
    "METHODS",
    "UNMATCHED",
    "JsonFormatter",
    "RequestObserverMiddleware",
    "RequestRecord",
    "RequestSink",
    "configure_logging",
    "log_request",
    "method_label",
    "route_label",
]

UNMATCHED = "unmatched"
#: Methods kept as they are in labels and logs; any other becomes "other" (bounded cardinality).
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
LOG_FORMATS = ("text", "json")
#: A log record's attribute holding extra JSON fields (``log.info(..., extra={FIELDS_ATTRIBUTE: {...}})``).
FIELDS_ATTRIBUTE = "json_fields"
TEXT_FORMAT = "%(levelname)s %(name)s: %(message)s"

request_log = logging.getLogger("paymentcore.http")


@attrs.frozen
class RequestRecord:
    """One answered request, as operators see it."""

    request_id: str
    method: str  # from METHODS, or "other"
    route: str  # the route's path template, or UNMATCHED
    status: int
    duration: float  # seconds, from the request's arrival to the end of the response
    merchant_id: str | None  # the authenticated merchant, when the request authenticated


RequestSink = Callable[[RequestRecord], None]


def method_label(method: str) -> str:
    return method if method in METHODS else "other"


def route_label(routes: Iterable[BaseRoute], scope: Scope) -> str:
    """The path template of the route that serves ``scope``'s path: the first full match, else the first
    route whose path matches with another method (a 405), else :data:`UNMATCHED`."""
    partial: str | None = None
    for route in routes:
        if not isinstance(route, Route):
            continue
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return route.path
        if match is Match.PARTIAL and partial is None:
            partial = route.path
    return partial if partial is not None else UNMATCHED


class RequestObserverMiddleware:
    """Times each HTTP request and hands its :class:`RequestRecord` to every sink (errors are logged)."""

    def __init__(self, app: ASGIApp, *, routes: Sequence[BaseRoute], sinks: Sequence[RequestSink]) -> None:
        self.app = app
        self.routes = routes  # the app's live route list: routes added later are seen
        self.sinks = tuple(sinks)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.sinks:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        route = route_label(self.routes, scope)
        status = 500
        request_id = ""

        async def watch(message: Message) -> None:
            nonlocal status, request_id
            if message["type"] == "http.response.start":
                status = int(message["status"])
                for name, value in message.get("headers", []):
                    if name.lower() == b"x-request-id":
                        request_id = value.decode("latin-1")
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            state = scope.get("state") or {}
            merchant = state.get("merchant_id")
            record = RequestRecord(
                request_id=request_id or str(state.get("request_id", "")),
                method=method_label(str(scope.get("method", ""))),
                route=route,
                status=status,
                duration=time.perf_counter() - started,
                merchant_id=merchant if isinstance(merchant, str) else None,
            )
            for sink in self.sinks:
                try:
                    sink(record)
                except Exception:
                    logging.getLogger("paymentcore.server").exception("a request sink failed")


def log_request(record: RequestRecord) -> None:
    """The request log line (logger ``paymentcore.http``, INFO): id, method, route, status, duration."""
    fields: dict[str, Any] = {
        "requestId": record.request_id,
        "method": record.method,
        "route": record.route,
        "status": record.status,
        "durationMs": round(record.duration * 1000, 3),
    }
    if record.merchant_id is not None:
        fields["merchantId"] = record.merchant_id
    request_log.info(
        "%s %s %s %.1fms %s",
        record.method,
        record.route,
        record.status,
        record.duration * 1000,
        record.request_id,
        extra={FIELDS_ATTRIBUTE: fields},
    )


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message``, the record's extra fields
    (``FIELDS_ATTRIBUTE``) and ``exception`` when there is one. The request line's ``message`` is
    ``request``; its fields say the rest."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, FIELDS_ATTRIBUTE, None)
        message = "request" if record.name == request_log.name and fields else record.getMessage()
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")[:-6] + "Z",
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure_logging(log_format: str) -> None:
    """Log INFO and above on stderr: ``text`` as the server always has, or ``json`` one object a line."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}")
    if log_format == "text":
        logging.basicConfig(level=logging.INFO, format=TEXT_FORMAT)
        return
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
