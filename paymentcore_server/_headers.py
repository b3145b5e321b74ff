"""The names of the HTTP headers the server reads and writes, each written once: the server's code and
its OpenAPI document (``paymentcore_server.openapi``) both use these. The idempotency key's header is the
library's (``paymentcore.limits``), which its HTTP client sends too."""

from __future__ import annotations

from paymentcore.limits import IDEMPOTENCY_HEADER

__all__ = [
    "IDEMPOTENCY_HEADER",
    "RATE_LIMIT_HEADERS",
    "RATE_LIMIT_LIMIT",
    "RATE_LIMIT_REMAINING",
    "RATE_LIMIT_RESET",
    "REQUEST_ID_HEADER",
    "RETRY_AFTER_HEADER",
]

REQUEST_ID_HEADER = "X-Request-Id"
RETRY_AFTER_HEADER = "Retry-After"
RATE_LIMIT_LIMIT = "X-RateLimit-Limit"
RATE_LIMIT_REMAINING = "X-RateLimit-Remaining"
RATE_LIMIT_RESET = "X-RateLimit-Reset"
RATE_LIMIT_HEADERS = (RATE_LIMIT_LIMIT, RATE_LIMIT_REMAINING, RATE_LIMIT_RESET)
