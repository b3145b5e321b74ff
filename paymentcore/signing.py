"""Webhook signatures: the headers a delivery carries, the signature's form and the freshness window
(defined in ``paymentcore._domain.signing``; the OpenAPI document is built from these)."""

from paymentcore._domain.signing import (
    EVENT_HEADER,
    EVENT_ID_HEADER,
    SIGNATURE_HEADER,
    SIGNATURE_HEX_DIGITS,
    SIGNATURE_SCHEME,
    TIMESTAMP_HEADER,
    TOLERANCE_SECONDS,
    WebhookVerificationError,
    signature,
    verify_webhook,
)

__all__ = [
    "EVENT_HEADER",
    "EVENT_ID_HEADER",
    "SIGNATURE_HEADER",
    "SIGNATURE_HEX_DIGITS",
    "SIGNATURE_SCHEME",
    "TIMESTAMP_HEADER",
    "TOLERANCE_SECONDS",
    "WEBHOOK_HEADERS",
    "WebhookVerificationError",
    "signature",
    "verify_webhook",
]

#: the headers of every webhook delivery, in the order they are described
WEBHOOK_HEADERS = (SIGNATURE_HEADER, TIMESTAMP_HEADER, EVENT_HEADER, EVENT_ID_HEADER)
