"""The HTTP status of every error code: the one table (CONTRACT §6)."""

from __future__ import annotations

from paymentcore.errors import BodyTooLargeError, MethodNotAllowedError, PaymentError

STATUS_BY_CODE: dict[str, int] = {
    "INVALID_REQUEST": 400,
    "IDEMPOTENCY_KEY_REQUIRED": 400,
    "IDEMPOTENCY_KEY_TOO_LONG": 400,
    "UNKNOWN_CURRENCY": 400,
    "CURRENCY_MISMATCH": 400,
    "UNKNOWN_PROVIDER": 400,
    "PROVIDER_COUNTRY_MISMATCH": 400,
    "COUNTRY_NOT_SUPPORTED": 400,
    "PHONE_NOT_RECOGNISED": 400,
    "PHONE_PROVIDER_MISMATCH": 400,
    "AMOUNT_TOO_SMALL": 400,
    "AMOUNT_TOO_LARGE": 400,
    "AMOUNT_PRECISION": 400,
    "INSUFFICIENT_BALANCE": 400,
    "UNAUTHORIZED": 401,
    "MERCHANT_NOT_APPROVED": 403,
    "INSUFFICIENT_SCOPE": 403,
    "CAPABILITY_DISABLED": 403,
    "PROVIDER_BLOCKED": 403,
    "PAYOUT_LIMIT_EXCEEDED": 403,
    "PAYOUTS_NOT_CONFIGURED": 403,
    "RECIPIENT_BUSY": 403,
    "NOT_FOUND": 404,
    "IDEMPOTENCY_KEY_REUSED": 409,
    "RATE_LIMITED": 429,
    "SERVER_ERROR": 500,
}


def status_of(error: PaymentError) -> int:
    if isinstance(error, MethodNotAllowedError):
        return 405
    if isinstance(error, BodyTooLargeError):
        return 413
    return STATUS_BY_CODE[error.code]
