"""The HTTP status of an error: the library's one table (``paymentcore.HTTP_STATUS``), plus the two
errors only HTTP has (405 and 413)."""

from __future__ import annotations

from paymentcore import InvalidRequestError, PaymentError

__all__ = [
    "BodyTooLargeError",
    "MethodNotAllowedError",
    "status_of",
]


class MethodNotAllowedError(InvalidRequestError):
    """The path exists but does not accept this HTTP method (INVALID_REQUEST, HTTP 405)."""


class BodyTooLargeError(InvalidRequestError):
    """The request body is larger than the server accepts (INVALID_REQUEST, HTTP 413)."""


def status_of(error: PaymentError) -> int:
    if isinstance(error, MethodNotAllowedError):
        return 405
    if isinstance(error, BodyTooLargeError):
        return 413
    return error.http_status
