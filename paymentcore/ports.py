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

from paymentcore.models import (
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


class Transaction(Protocol):
    """One unit of work. Everything written inside commits together or not at all.

    A transaction opened with :meth:`Store.transaction` holds the store's write lock from its first
    statement, so a check made inside it (a balance, a status) still holds when it writes.
    """

    def get_settings(self) -> Settings: ...
    def put_settings(self, settings: Settings) -> None: ...

    def get_merchant(self, merchant_id: str) -> Merchant | None: ...
    def put_merchant(self, merchant: Merchant) -> None: ...
    def list_merchants(self) -> list[Merchant]: ...

    def get_key(self, key_id: str) -> ApiKey | None: ...
    def get_key_by_hash(self, key_hash: str) -> ApiKey | None: ...
    def put_key(self, key: ApiKey) -> None: ...

    def get_limits(self, merchant_id: str, currency: str) -> PayoutLimits | None: ...
    def put_limits(self, limits: PayoutLimits) -> None: ...

    def get_collection(self, reference: str) -> Collection | None: ...
    def insert_collection(self, collection: Collection) -> None: ...
    def update_collection(self, collection: Collection) -> None: ...
    def due_collections(self, now: int, limit: int) -> list[Collection]:
        """Open collections whose next_check_at has come, and unpaid checkouts past expires_at."""
        ...

    def count_prompts(self, phone: str, since: int) -> int:
        """How many collections sent a prompt to this number at or after ``since``."""
        ...

    def get_payout(self, reference: str) -> Payout | None: ...
    def insert_payout(self, payout: Payout) -> None: ...
    def update_payout(self, payout: Payout) -> None: ...
    def due_payouts(self, now: int, limit: int) -> list[Payout]:
        """PENDING payouts not held for review, and SENT payouts, whose next_check_at has come."""
        ...

    def spent(self, merchant_id: str, currency: str, since: int) -> int:
        """Sum of payouts created at or after ``since`` in PENDING, SENT, PAID or FAILED."""
        ...

    def get_balance(self, merchant_id: str, currency: str) -> Balance: ...
    def list_balances(self, merchant_id: str) -> list[Balance]: ...
    def put_balance(self, balance: Balance) -> None: ...
    def append_entry(self, entry: LedgerEntry) -> None: ...
    def list_entries(self, merchant_id: str, currency: str) -> list[LedgerEntry]: ...

    def get_webhook(self, merchant_id: str) -> WebhookEndpoint | None: ...
    def put_webhook(self, endpoint: WebhookEndpoint) -> None: ...

    def insert_event(self, event: Event) -> None: ...
    def get_event(self, event_id: str) -> Event | None: ...
    def update_event(self, event: Event) -> None: ...
    def due_events(self, now: int, limit: int) -> list[Event]:
        """PENDING events whose next_attempt_at has come, oldest first."""
        ...

    def list_events(self, merchant_id: str) -> list[Event]: ...

    def get_idempotency(self, merchant_id: str, key: str) -> IdempotencyRecord | None: ...
    def put_idempotency(self, record: IdempotencyRecord) -> None: ...
    def delete_idempotency(self, merchant_id: str, key: str) -> None: ...
    def purge_idempotency(self, before: int) -> int: ...


class Store(Protocol):
    def transaction(self) -> AbstractContextManager[Transaction]:
        """A write transaction: serialised against every other writer, all or nothing."""
        ...

    def read(self) -> AbstractContextManager[Transaction]:
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
