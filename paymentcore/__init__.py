"""paymentcore: a mobile-money payments core you can embed.

Build a core with :meth:`PaymentCore.memory` or :meth:`PaymentCore.sqlite`, then use its services:
``core.collect``, ``core.disburse``, ``core.webhooks``, ``core.operator``. Importing this package
starts nothing and loads no web framework or HTTP client.
"""

from paymentcore.adapters.clock import FakeClock, RandomReferences, SystemClock
from paymentcore.adapters.memory import MemoryStore
from paymentcore.adapters.sandbox import SandboxNetwork
from paymentcore.bootstrap import PaymentCore
from paymentcore.catalogue import Catalogue, StaticExchangeRates
from paymentcore.config import Config
from paymentcore.errors import PaymentError
from paymentcore.idempotency import Reply
from paymentcore.ledger import LedgerInvariantError
from paymentcore.models import (
    ApiKey,
    Balance,
    Collection,
    CollectionStatus,
    Merchant,
    MerchantStatus,
    Payout,
    PayoutLimits,
    PayoutStatus,
    Scope,
    Settings,
    WebhookEndpoint,
)
from paymentcore.operator import CreatedKey
from paymentcore.signing import WebhookVerificationError, verify_webhook

__all__ = [
    "ApiKey",
    "Balance",
    "Catalogue",
    "Collection",
    "CollectionStatus",
    "Config",
    "CreatedKey",
    "FakeClock",
    "LedgerInvariantError",
    "MemoryStore",
    "Merchant",
    "MerchantStatus",
    "PaymentCore",
    "PaymentError",
    "Payout",
    "PayoutLimits",
    "PayoutStatus",
    "RandomReferences",
    "Reply",
    "SandboxNetwork",
    "Scope",
    "Settings",
    "StaticExchangeRates",
    "SystemClock",
    "WebhookEndpoint",
    "WebhookVerificationError",
    "verify_webhook",
]
