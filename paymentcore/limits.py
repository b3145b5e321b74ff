"""The bounds the library enforces on its arguments, under the names the server and its OpenAPI
document read them by (each defined once, where it is enforced)."""

from paymentcore._domain.pages import DEFAULT_LIMIT as DEFAULT_PAGE_LIMIT
from paymentcore._domain.pages import MAX_LIMIT as MAX_PAGE_LIMIT
from paymentcore._services.disburse import MAX_BATCH_ITEMS
from paymentcore._services.idempotency import MAX_KEY_LENGTH as MAX_IDEMPOTENCY_KEY_LENGTH
from paymentcore._services.urlsafety import MAX_URL_LENGTH

__all__ = [
    "DEFAULT_PAGE_LIMIT",
    "MAX_BATCH_ITEMS",
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "MAX_PAGE_LIMIT",
    "MAX_URL_LENGTH",
]
