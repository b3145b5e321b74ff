"""Every seam between the core and the outside world, on one screen.

Services depend on these protocols only. Adapters implement them: ``MemoryStore`` and ``SqliteStore``
(storage), ``SystemClock`` and ``FakeClock``, ``RandomReferences``, ``SandboxNetwork``,
``HttpxWebhookSender`` and ``StaticExchangeRates``. Nothing here names a database, a framework or a
transport, so a PostgreSQL store or a real network adapter slots in without touching a service.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from contextlib import AbstractContextManager
from decimal import Decimal
from typing import Protocol

import attrs

from paymentcore._models import (
    ApiKey,
    Balance,
    Collection,
    Event,
    IdempotencyRecord,
    LedgerEntry,
    Merchant,
    Payout,
    PayoutLimits,
    Settings,
    WebhookEndpoint,
)

__all__ = [
    "Clock",
    "CollectionRepository",
    "CollectionRequest",
    "CollectionResult",
    "DeliveryResult",
    "DeliveryTarget",
    "ExchangeRates",
    "IdempotencyRepository",
    "KeyRepository",
    "LedgerRepository",
    "LimitsRepository",
    "MerchantRepository",
    "Network",
    "NetworkError",
    "NetworkOutcome",
    "Outbox",
    "PayoutRepository",
    "PayoutRequest",
    "PayoutResult",
    "References",
    "Resolver",
    "SecretBox",
    "SettingsRepository",
    "Store",
    "Transaction",
    "UnitOfWork",
    "WebhookRepository",
    "WebhookSender",
]

# --- time and identifiers -------------------------------------------------------------------------


class Clock(Protocol):
    def now(self) -> int:
        """Milliseconds since the Unix epoch, UTC."""
        ...


class References(Protocol):
    def collection(self, now: int) -> str:
        """A new unguessable collection reference, REQ-<digits>-<suffix>."""
        ...

    def payout(self, now: int) -> str:
        """A new unguessable payout reference, PO-<digits>-<suffix>."""
        ...

    def token(self, prefix: str) -> str:
        """A new unguessable identifier with the given prefix (events, keys, merchants)."""
        ...


# --- storage ------------------------------------------------------------------------------------


# One small repository per aggregate, so a second engine implements a few small things rather than one
# wide one. Which rows the ``due`` and ``spent`` queries select is defined once, in
# ``paymentcore._queries``; an adapter finds those rows, it does not decide which they are.


class SettingsRepository(Protocol):
    def get(self) -> Settings:
        """The platform switches (the defaults until first written)."""
        ...

    def put(self, settings: Settings) -> None: ...


class MerchantRepository(Protocol):
    def get(self, merchant_id: str) -> Merchant | None: ...
    def put(self, merchant: Merchant) -> None:
        """Insert or replace."""
        ...

    def list(self) -> list[Merchant]:
        """Every merchant, oldest first (ties: in the order written)."""
        ...


class KeyRepository(Protocol):
    def get(self, key_id: str) -> ApiKey | None: ...
    def by_hash(self, key_hash: str) -> ApiKey | None: ...
    def put(self, key: ApiKey) -> None:
        """Insert or replace; a replaced hash no longer finds the key."""
        ...


class LimitsRepository(Protocol):
    def get(self, merchant_id: str, currency: str) -> PayoutLimits | None: ...
    def put(self, limits: PayoutLimits) -> None: ...


class CollectionRepository(Protocol):
    def get(self, reference: str) -> Collection | None: ...
    def add(self, collection: Collection) -> None:
        """Insert; raises if the reference exists."""
        ...

    def update(self, collection: Collection) -> None:
        """Replace; raises KeyError if the reference does not exist."""
        ...

    def due(self, now: int, limit: int) -> list[Collection]:
        """Collections for which ``_queries.collection_is_due``, in ``collection_due_order``."""
        ...

    def prompts_since(self, phone: str, since: int) -> int:
        """How many collections sent a prompt to this number at or after ``since``."""
        ...


class PayoutRepository(Protocol):
    def get(self, reference: str) -> Payout | None: ...
    def add(self, payout: Payout) -> None:
        """Insert; raises if the reference exists."""
        ...

    def update(self, payout: Payout) -> None:
        """Replace; raises KeyError if the reference does not exist."""
        ...

    def due(self, now: int, limit: int) -> list[Payout]:
        """Payouts for which ``_queries.payout_is_due``, in ``payout_due_order``."""
        ...

    def spent(self, merchant_id: str, currency: str, since: int) -> int:
        """Sum of the payouts created at or after ``since`` that ``_queries.counts_as_spent``."""
        ...


class LedgerRepository(Protocol):
    def balance(self, merchant_id: str, currency: str) -> Balance:
        """The balance (all zero until first written)."""
        ...

    def balances(self, merchant_id: str) -> list[Balance]:
        """Every written balance of the merchant, by currency."""
        ...

    def put_balance(self, balance: Balance) -> None:
        """Insert or replace; refuses a negative or unbalanced balance."""
        ...

    def append(self, entry: LedgerEntry) -> None:
        """Append to the journal (append-only; raises if the id exists)."""
        ...

    def entries(self, merchant_id: str, currency: str) -> list[LedgerEntry]:
        """The account's journal, oldest first (ties: in the order written)."""
        ...


class WebhookRepository(Protocol):
    def get(self, merchant_id: str) -> WebhookEndpoint | None: ...
    def put(self, endpoint: WebhookEndpoint) -> None: ...


class Outbox(Protocol):
    def add(self, event: Event) -> None:
        """Insert; raises if the id exists."""
        ...

    def get(self, event_id: str) -> Event | None: ...
    def update(self, event: Event) -> None:
        """Replace; raises KeyError if the id does not exist."""
        ...

    def due(self, now: int, limit: int) -> list[Event]:
        """Events for which ``_queries.event_is_due``, oldest first (ties: in the order written)."""
        ...

    def list(self, merchant_id: str) -> list[Event]:
        """The merchant's events, oldest first (ties: in the order written)."""
        ...


class IdempotencyRepository(Protocol):
    def get(self, merchant_id: str, key: str) -> IdempotencyRecord | None: ...
    def put(self, record: IdempotencyRecord) -> None: ...
    def delete(self, merchant_id: str, key: str) -> None: ...
    def purge(self, before: int) -> int:
        """Delete every record created before ``before``; how many went."""
        ...


class UnitOfWork(Protocol):
    """One unit of work. Everything written inside commits together or not at all.

    A unit of work opened with :meth:`Store.transaction` holds the store's write lock from its first
    statement, so a check made inside it (a balance, a status) still holds when it writes.
    """

    @property
    def settings(self) -> SettingsRepository: ...
    @property
    def merchants(self) -> MerchantRepository: ...
    @property
    def keys(self) -> KeyRepository: ...
    @property
    def limits(self) -> LimitsRepository: ...
    @property
    def collections(self) -> CollectionRepository: ...
    @property
    def payouts(self) -> PayoutRepository: ...
    @property
    def ledger(self) -> LedgerRepository: ...
    @property
    def webhooks(self) -> WebhookRepository: ...
    @property
    def outbox(self) -> Outbox: ...
    @property
    def idempotency(self) -> IdempotencyRepository: ...


#: The unit of work's former name, kept so existing imports and annotations keep working.
Transaction = UnitOfWork


class Store(Protocol):
    def transaction(self) -> AbstractContextManager[UnitOfWork]:
        """A write transaction: serialised against every other writer, all or nothing."""
        ...

    def read(self) -> AbstractContextManager[UnitOfWork]:
        """A read-only view (writing through it is a programming error)."""
        ...

    def close(self) -> None: ...


# --- the mobile money networks --------------------------------------------------------------------


class NetworkOutcome(enum.Enum):
    PENDING = "PENDING"  # no answer yet
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"


@attrs.frozen
class CollectionRequest:
    reference: str
    provider: str
    phone: str | None
    amount: int
    currency: str
    submitted_at: int


@attrs.frozen
class CollectionResult:
    outcome: NetworkOutcome
    failure_category: str | None = None
    failure_reason: str | None = None


@attrs.frozen
class PayoutRequest:
    """``reference`` is also the network's idempotency key: the same reference never pays twice."""

    reference: str
    provider: str
    phone: str
    amount: int
    currency: str
    sent_at: int


@attrs.frozen
class PayoutResult:
    """The network's answer about a payout.

    On send: SUCCESS means accepted (SENT), FAILED means refused. On a status check: PENDING means still
    SENT, SUCCESS means the recipient has it, FAILED means it did not complete.
    """

    outcome: NetworkOutcome
    provider_reference: str | None = None
    reason: str | None = None


class NetworkError(Exception):
    """The network could not be reached or did not answer in time: nothing is known."""


class Network(Protocol):
    def request_collection(self, request: CollectionRequest) -> None:
        """Push the payment prompt (or create the invoice). Raises NetworkError if unreachable."""
        ...

    def collection_status(self, request: CollectionRequest, now: int) -> CollectionResult: ...

    def send_payout(self, request: PayoutRequest) -> PayoutResult:
        """Hand a payout to the network, idempotent on ``request.reference``."""
        ...

    def payout_status(self, request: PayoutRequest, now: int) -> PayoutResult: ...

    def money_moved(self, request: PayoutRequest) -> bool:
        """Resolution: did this payout's money reach the recipient?"""
        ...


# --- exchange rates -----------------------------------------------------------------------------


class ExchangeRates(Protocol):
    def rate(self, source: str, target: str) -> Decimal:
        """Units of ``target`` for one unit of ``source``. Raises KeyError when unknown."""
        ...


# --- webhooks -----------------------------------------------------------------------------------


@attrs.frozen
class DeliveryTarget:
    """A webhook URL after the safety check: the connection goes to ``address``, nowhere else."""

    url: str
    scheme: str
    host: str
    port: int
    target: str  # path and query, as sent on the request line
    address: str  # the checked IP address to connect to


@attrs.frozen
class DeliveryResult:
    status: int | None  # the HTTP status, None when no response came (timeout, refused, ...)
    retry_after: int | None = None  # seconds, from a 429 or 503 Retry-After header
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class WebhookSender(Protocol):
    def send(
        self, target: DeliveryTarget, headers: Mapping[str, str], body: bytes, timeout: float
    ) -> DeliveryResult:
        """POST ``body`` to ``target.address``; never follows a redirect."""
        ...


class Resolver(Protocol):
    def __call__(self, host: str, port: int) -> list[str]:
        """Every IP address the name resolves to (empty when it does not resolve)."""
        ...


class SecretBox(Protocol):
    """Encrypts secrets kept at rest (webhook signing secrets)."""

    def encrypt(self, plaintext: str) -> str: ...
    def decrypt(self, token: str) -> str: ...
