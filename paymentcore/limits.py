"""The bounds the library enforces on its arguments, and the header an idempotency key travels in, under
the names the server and its OpenAPI document read them by (each defined once, where it is enforced:
the field lengths and a checkout's lifetime in ``paymentcore._domain.limits``)."""

from paymentcore._domain.limits import (
    DEFAULT_CHECKOUT_MINUTES,
    IDEMPOTENCY_HEADER,
    MAX_CHECKOUT_MINUTES,
    MAX_DESCRIPTION_LENGTH,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    MAX_MERCHANT_REFERENCE_LENGTH,
    MAX_PHONE_LENGTH,
    MAX_RECIPIENT_NAME_LENGTH,
    MIN_CHECKOUT_MINUTES,
)
from paymentcore._domain.pages import DEFAULT_LIMIT as DEFAULT_PAGE_LIMIT
from paymentcore._domain.pages import MAX_LIMIT as MAX_PAGE_LIMIT
from paymentcore._services.disburse import MAX_BATCH_ITEMS
from paymentcore._services.urlsafety import MAX_URL_LENGTH

__all__ = [
    "DEFAULT_CHECKOUT_MINUTES",
    "DEFAULT_PAGE_LIMIT",
    "IDEMPOTENCY_HEADER",
    "MAX_BATCH_ITEMS",
    "MAX_CHECKOUT_MINUTES",
    "MAX_DESCRIPTION_LENGTH",
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "MAX_MERCHANT_REFERENCE_LENGTH",
    "MAX_PAGE_LIMIT",
    "MAX_PHONE_LENGTH",
    "MAX_RECIPIENT_NAME_LENGTH",
    "MAX_URL_LENGTH",
    "MIN_CHECKOUT_MINUTES",
]
