"""The bounds the services enforce on a merchant's text fields and on a hosted checkout's lifetime, the
header an idempotency key travels in, and the webhook delivery defaults the API's texts quote.

Each is written once, here: the services check against these names, ``paymentcore.Config`` takes its
defaults from them, and the server's OpenAPI document states them through the public
``paymentcore.limits`` and ``paymentcore.config``.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "DEFAULT_AUTO_DISABLE_AFTER",
    "DEFAULT_CHECKOUT_MINUTES",
    "DEFAULT_WEBHOOK_TIMEOUT_SECONDS",
    "IDEMPOTENCY_HEADER",
    "MAX_CHECKOUT_MINUTES",
    "MAX_DESCRIPTION_LENGTH",
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "MAX_MERCHANT_REFERENCE_LENGTH",
    "MAX_PHONE_LENGTH",
    "MAX_RECIPIENT_NAME_LENGTH",
    "MIN_CHECKOUT_MINUTES",
]

# --- a merchant's text fields, in characters ---------------------------------------------------------

#: the merchant's own identifier of a collection or payout (``merchant_reference``, alias ``reference``)
MAX_MERCHANT_REFERENCE_LENGTH: Final = 120
#: a collection's description, shown to the payer
MAX_DESCRIPTION_LENGTH: Final = 200
#: a payout's phone number as typed, before the catalogue reads it
MAX_PHONE_LENGTH: Final = 32
#: who a payout pays
MAX_RECIPIENT_NAME_LENGTH: Final = 120

# --- a hosted checkout's lifetime (``expires_in_minutes``) ------------------------------------------

MIN_CHECKOUT_MINUTES: Final = 1
MAX_CHECKOUT_MINUTES: Final = 10_080  # a week
DEFAULT_CHECKOUT_MINUTES: Final = 60

# --- idempotency ---------------------------------------------------------------------------------

#: the HTTP header carrying a request's idempotency key (the server reads it, the HTTP client sends it)
IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
#: the longest Idempotency-Key taken (IDEMPOTENCY_KEY_TOO_LONG beyond)
MAX_IDEMPOTENCY_KEY_LENGTH: Final = 200

# --- webhook deliveries (the defaults of ``Config.webhook_timeout`` and ``auto_disable_after``) -----

#: an attempt the endpoint has not answered within this many seconds is a failed attempt
DEFAULT_WEBHOOK_TIMEOUT_SECONDS: Final = 10.0
#: this many consecutive failed events disable an endpoint
DEFAULT_AUTO_DISABLE_AFTER: Final = 10
