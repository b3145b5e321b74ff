"""Every seam between the core and the outside world, on one screen.

Services depend on these protocols only. Adapters implement them: ``MemoryStore``, ``SqliteStore`` and
``PostgresStore`` (storage), ``SystemClock`` and ``FakeClock``, ``RandomReferences``, ``SandboxNetwork``,
``HttpWebhookSender`` and ``StaticExchangeRates``. Nothing here names a database, a framework or a
transport, so another storage engine or a real network adapter slots in without touching a service.
"""

from __future__ import annotations

import builtins
import enum
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from decimal import Decimal
from typing import Protocol

import attrs

from paymentcore._domain.models import (
    ApiKey,
    Balance,
    BatchTally,
    Collection,
    CollectionStatus,
    Delivery,
    DeliveryStatus,
    Event,
    IdempotencyRecord,
    LedgerEntry,
    Merchant,
    Payout,
    PayoutBatch,
    PayoutLimits,
    PayoutStatus,
    Settings,
    StoredAuditEntry,
    StoredOperator,
    StoredSession,
    WebhookEndpoint,
)

__all__ = [
    "AuditRepository",
    "BatchRepository",
    "Clock",
    "CollectionRepository",
    "CollectionRequest",
    "CollectionResult",
    "CurrencyTotal",
    "DeliveryRepository",
    "DeliveryResult",
    "DeliveryTarget",
    "DueRef",
    "ExchangeRates",
    "GlancingStore",
    "IdempotencyRepository",
    "KeyLookup",
    "KeyRepository",
    "LeaseRepository",
    "LedgerRepository",
    "LimitsRepository",
    "MerchantRepository",
    "Network",
    "NetworkError",
    "NetworkOutcome",
    "OperatorRepository",
    "Outbox",
    "PartitionedStore",
    "PayoutInputs",
    "PayoutRepository",
    "PayoutRequest",
    "PayoutResult",
    "RateRepository",
    "References",
    "Resolver",
    "SecretBox",
    "SessionRepository",
    "SettingsRepository",
    "SkippingStore",
    "Store",
    "StoreReadOnlyError",
    "StoreUnavailableError",
    "Tally",
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
# ``paymentcore._domain.queries``; an adapter finds those rows, it does not decide which they are.
#
# The ``page`` methods list one merchant's records newest first: by ``created_at`` descending, ties
# the last written first (the reverse of the order ``entries``/``list`` give), so a list is a stable
# total order that new records only ever enter at its head. ``after`` names the item the previous page
# ended with (a reference or an id): the page holds the items that follow it in that order, whatever the
# item's own status is now, so a filter never loses the caller's place. ``None`` answers an ``after``
# that is not one of the merchant's items (in that list); filters combine with AND.


@attrs.frozen
class Tally:
    """Records grouped for the operator's overview: those created in the ``bucket``-th span of ``width``
    ms from ``since`` (``tally(since, until, width)``), in ``currency``, now in ``status`` (the status
    enum's value): how many, and their amounts summed (minor units)."""

    bucket: int
    currency: str
    status: str
    count: int
    amount: int


@attrs.frozen
class DueRef:
    """An item of work listed by ``due_refs``: its key (a reference, an event id), its lane
    (``_queries.payout_lane``, ``collection_lane``, ``event_lane``) and its merchant; what a worker
    needs to plan its claims, without the record itself, which the claim reads."""

    key: str
    lane: str
    merchant: str


@attrs.frozen
class CurrencyTotal:
    """How many records of one currency a filter selects, and their amounts summed (minor units)."""

    currency: str
    count: int
    amount: int


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


@attrs.frozen
class KeyLookup:
    """An API key found by its hash, with its merchant (None when it has none) and the switches, read
    together (one statement on the SQL stores)."""

    key: ApiKey
    merchant: Merchant | None
    settings: Settings


@attrs.frozen
class PayoutInputs:
    """What creating a payout reads, in one statement on the SQL stores: the switches, the merchant
    (None when there is none), its limits in the currency (None when unset), what it paid out in the
    currency since the start of each rolling window (None when that window has no limit), its
    available balance in the currency (None when it has no balance there), and the answer kept for
    the idempotency key asked with them (None when none was asked, or none is kept)."""

    settings: Settings
    merchant: Merchant | None
    limits: PayoutLimits | None
    spent_day: int | None
    spent_week: int | None
    available: int | None = None
    kept: IdempotencyRecord | None = None


class KeyRepository(Protocol):
    def get(self, key_id: str) -> ApiKey | None: ...
    def by_hash(self, key_hash: str) -> ApiKey | None: ...
    def lookup(self, key_hash: str) -> KeyLookup | None:
        """The key of ``key_hash`` with its merchant and the switches (None: no such key)."""
        ...

    def put(self, key: ApiKey) -> None:
        """Insert or replace; a replaced hash no longer finds the key."""
        ...

    def list(self, merchant_id: str) -> list[ApiKey]:
        """The merchant's keys, oldest first (ties: in the order written), revoked ones included."""
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

    def due(self, now: int, limit: int, *, per_lane: int | None = None) -> list[Collection]:
        """Collections for which ``_queries.collection_is_due``, in ``collection_due_order``; with
        ``per_lane``, at most that many of each lane (``collection_lane``), taken in turns
        (``_queries.in_turns``)."""
        ...

    def due_refs(self, now: int, limit: int, *, per_lane: int | None = None) -> list[DueRef]:
        """What ``due`` lists, in its order, as references (the worker's listing)."""
        ...

    def count_due(self, now: int) -> int:
        """How many collections ``due`` would list without a limit."""
        ...

    def prompts_since(self, phone: str, since: int) -> int:
        """How many collections sent a prompt to this number at or after ``since``."""
        ...

    def oldest_due(self, now: int) -> int | None:
        """The earliest ``_queries.collection_due_since`` of the collections ``due`` would list (None
        when none is due)."""
        ...

    def tally(self, since: int, until: int, width: int) -> builtins.list[Tally]:
        """The collections created at or after ``since`` and before ``until``, grouped by span of
        ``width`` ms from ``since``, requested currency and status (amounts: the requested amounts)."""
        ...

    def queue(
        self,
        *,
        limit: int,
        after: str | None = None,
        merchant_id: str | None = None,
        currency: str | None = None,
        status: CollectionStatus | None = None,
        created_from: int | None = None,
        created_before: int | None = None,
    ) -> builtins.list[Collection] | None:
        """Every merchant's collections, oldest first (by ``created_at``, ties in the order written),
        after the collection ``after`` (None when ``after`` is no collection), at most ``limit``; only
        those of ``merchant_id``, requested in ``currency``, in ``status``, created at or after
        ``created_from`` and before ``created_before``, when given."""
        ...

    def page(
        self,
        merchant_id: str,
        *,
        limit: int,
        after: str | None = None,
        status: CollectionStatus | None = None,
        merchant_reference: str | None = None,
    ) -> list[Collection] | None:
        """At most ``limit`` of the merchant's collections, newest first, after the collection ``after``."""
        ...


class PayoutRepository(Protocol):
    def get(self, reference: str) -> Payout | None: ...
    def get_many(self, references: Sequence[str]) -> dict[str, Payout]:
        """The payouts of ``references`` that exist, read in one statement (locked, as ``get`` locks, in
        a write transaction); a ``get`` of one of them later in the same transaction reads nothing."""
        ...

    def add(self, payout: Payout) -> None:
        """Insert; raises if the reference exists."""
        ...

    def add_many(self, payouts: builtins.list[Payout]) -> None:
        """Insert each, in order (one statement where the engine allows); raises if a reference exists."""
        ...

    def update(self, payout: Payout) -> None:
        """Replace; raises KeyError if the reference does not exist."""
        ...

    def due(self, now: int, limit: int, *, per_lane: int | None = None) -> list[Payout]:
        """Payouts for which ``_queries.payout_is_due``, in ``_queries.payouts_in_due_order`` (a round
        over the merchants with work); with ``per_lane``, only the first that many of each lane
        (``payout_lane``) in that order (``_queries.at_most_per_lane``)."""
        ...

    def due_refs(self, now: int, limit: int, *, per_lane: int | None = None) -> list[DueRef]:
        """What ``due`` lists, in its order, as references (the worker's listing)."""
        ...

    def count_due(self, now: int) -> int:
        """How many payouts ``due`` would list without a limit."""
        ...

    def oldest_due(self, now: int) -> int | None:
        """The earliest ``next_check_at`` of the payouts ``due`` would list (None when none is due)."""
        ...

    def tally(self, since: int, until: int, width: int) -> builtins.list[Tally]:
        """The payouts created at or after ``since`` and before ``until``, grouped by span of ``width``
        ms from ``since``, currency and status."""
        ...

    def totals(
        self,
        *,
        status: PayoutStatus | None = None,
        awaiting_review: bool | None = None,
        unresolved: bool | None = None,
    ) -> builtins.list[CurrencyTotal]:
        """Per currency (in code order), how many payouts ``queue`` selects with these filters, and
        their amounts summed."""
        ...

    def spent(self, merchant_id: str, currency: str, since: int) -> int:
        """Sum of the payouts created at or after ``since`` that ``_queries.counts_as_spent``."""
        ...

    def inputs(
        self,
        merchant_id: str,
        currency: str | None,
        *,
        day_since: int,
        week_since: int,
        idempotency_key: str | None = None,
    ) -> PayoutInputs:
        """What a new payout of ``merchant_id`` in ``currency`` is checked against (no currency: the
        switches and the merchant only); the spends are ``spent`` since ``day_since`` and
        ``week_since``, read only for a window that has a limit; with ``idempotency_key``, the answer
        kept for it (``IdempotencyRepository.get``), read in the same statement."""
        ...

    def inputs_later(
        self,
        merchant_id: str,
        currency: str | None,
        *,
        day_since: int,
        week_since: int,
        idempotency_key: str | None = None,
    ) -> Callable[[], PayoutInputs]:
        """:meth:`inputs`, asked now and read when the answer is called: a store that sends several
        statements in one query (PostgreSQL) keeps the read and sends it with the next read whose
        answer is needed, so both cost one round trip."""
        ...

    def page(
        self,
        merchant_id: str,
        *,
        limit: int,
        after: str | None = None,
        status: PayoutStatus | None = None,
        merchant_reference: str | None = None,
        batch_id: str | None = None,
    ) -> list[Payout] | None:
        """At most ``limit`` of the merchant's payouts, newest first, after the payout ``after``; only
        those of the bulk request ``batch_id`` when given."""
        ...

    def in_batch(self, batch_id: str, *, after: int | None, limit: int) -> builtins.list[Payout]:
        """At most ``limit`` of the batch's payouts, by ``batch_index``, those after ``after`` only."""
        ...

    def batch_tally(self, batch_id: str) -> builtins.list[BatchTally]:
        """The batch's payouts counted and summed per status and currency (only the pairs that occur,
        in no particular order)."""
        ...

    def batch_open(self, batch_id: str) -> int:
        """How many of the batch's payouts are in ``_queries.BATCH_OPEN_STATUSES``."""
        ...

    def queue(
        self,
        *,
        limit: int,
        after: str | None = None,
        merchant_id: str | None = None,
        status: PayoutStatus | None = None,
        awaiting_review: bool | None = None,
        unresolved: bool | None = None,
        currency: str | None = None,
        created_from: int | None = None,
        created_before: int | None = None,
    ) -> builtins.list[Payout] | None:
        """Every merchant's payouts as an operator's work queue: oldest first (by ``created_at``, ties in
        the order written), after the payout ``after`` (None when ``after`` is no payout), at most
        ``limit``; only those of ``merchant_id``, in ``status``, with that ``awaiting_review``,
        (``unresolved``) whose reservation is (not) yet resolved, in ``currency``, and created at or
        after ``created_from`` and before ``created_before``, when given."""
        ...


class BatchRepository(Protocol):
    """Bulk payout requests (their payouts are in ``payouts``, with ``batch_id``)."""

    def add(self, batch: PayoutBatch) -> None:
        """Insert; raises if the id exists."""
        ...

    def get(self, batch_id: str) -> PayoutBatch | None: ...
    def update(self, batch: PayoutBatch) -> None:
        """Replace; raises KeyError if the id does not exist."""
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

    def move(
        self,
        merchant_id: str,
        currency: str,
        *,
        available: int = 0,
        reserved: int = 0,
        paid_out: int = 0,
        credited: int = 0,
    ) -> Balance | None:
        """Add these amounts to the balance in one conditional step (never read, then written).

        A missing balance counts as zeros and is created. Returns the new balance, or None, writing
        nothing, when one of available, reserved or paid out would go below zero. The amounts must
        keep ``credited = available + reserved + paid_out``.
        """
        ...

    def shift(
        self, merchant_id: str, currency: str, *, available: int = 0, reserved: int = 0, paid_out: int = 0
    ) -> bool:
        """:meth:`move` of money the balance holds between its accounts (a reservation paid out or
        released; the amounts sum to zero), whose new balance nobody
        reads: False, writing nothing, when an account would go below zero or the balance is missing.
        A store may check it with the unit's end instead, answering True at once (PostgreSQL: sent with
        the unit's other statements and checked in the server, so a batch of them waits for no answer
        each); a shift refused there raises KeyError and nothing of the unit is written."""
        ...

    def append(self, entry: LedgerEntry) -> None:
        """Append to the journal (append-only; raises if the id exists)."""
        ...

    def append_many(self, entries: list[LedgerEntry]) -> None:
        """Append each, in order (one statement where the engine allows)."""
        ...

    def entries(self, merchant_id: str, currency: str) -> list[LedgerEntry]:
        """The account's journal, oldest first (ties: in the order written)."""
        ...

    def page(
        self, merchant_id: str, currency: str, *, limit: int, after: str | None = None
    ) -> list[LedgerEntry] | None:
        """At most ``limit`` entries of the account's journal, newest first, after the entry ``after``."""
        ...


class WebhookRepository(Protocol):
    def get(self, merchant_id: str) -> WebhookEndpoint | None:
        """The merchant's endpoint (None: none registered); read once per transaction."""
        ...

    def get_many(self, merchant_ids: Sequence[str]) -> dict[str, WebhookEndpoint]:
        """The endpoints of those merchants that have one, read in one statement; a ``get`` of any of
        ``merchant_ids`` later in the same transaction reads nothing."""
        ...

    def put(self, endpoint: WebhookEndpoint) -> None: ...
    def count_troubled(self) -> tuple[int, int]:
        """(failing, disabled): how many active endpoints ``_queries.endpoint_is_troubled`` (their
        last events failed), and how many are disabled."""
        ...

    def troubled(self, limit: int) -> list[WebhookEndpoint]:
        """At most ``limit`` endpoints that ``_queries.endpoint_is_troubled``, in
        ``_queries.endpoint_trouble_order`` (the worst first)."""
        ...


class Outbox(Protocol):
    def add(self, event: Event) -> None:
        """Insert; raises if the id exists."""
        ...

    def add_to_deliver(self, event: Event) -> None:
        """Insert ``event`` (PENDING) to be delivered, or, when its merchant has no active webhook
        endpoint at this moment, as SKIPPED with the error ``models.NO_ENDPOINT`` (never sent later):
        decided by the store with the insert, in one statement, so an event nobody listens for costs
        no worker's round. Raises if the id exists."""
        ...

    def get(self, event_id: str) -> Event | None: ...
    def get_many(self, event_ids: Sequence[str]) -> dict[str, Event]:
        """The events of ``event_ids`` that exist, read in one statement (locked, as ``get`` locks, in
        a write transaction); a ``get`` of one of them later in the same transaction reads nothing."""
        ...

    def update(self, event: Event) -> None:
        """Replace; raises KeyError if the id does not exist."""
        ...

    def due(self, now: int, limit: int, *, per_lane: int | None = None) -> list[Event]:
        """Events for which ``_queries.event_is_due``, oldest first (ties: in the order written); with
        ``per_lane``, at most that many of each lane (``event_lane``), taken in turns
        (``_queries.in_turns``)."""
        ...

    def due_refs(self, now: int, limit: int, *, per_lane: int | None = None) -> list[DueRef]:
        """What ``due`` lists, in its order, as references (the worker's listing)."""
        ...

    def defer(self, merchant_id: str, until: int) -> int:
        """Move every PENDING event of the merchant due before ``until`` to ``until`` (the endpoint did
        not answer: its other events wait for its next attempt); returns how many moved."""
        ...

    def count_due(self, now: int) -> int:
        """How many events ``due`` would list without a limit."""
        ...

    def oldest_due(self, now: int) -> int | None:
        """The earliest ``next_attempt_at`` of the events ``due`` would list (None when none is due)."""
        ...

    def list(self, merchant_id: str) -> list[Event]:
        """The merchant's events, oldest first (ties: in the order written)."""
        ...

    def page(
        self,
        merchant_id: str,
        *,
        limit: int,
        after: str | None = None,
        event_type: str | None = None,
        statuses: frozenset[DeliveryStatus] | None = None,
    ) -> builtins.list[Event] | None:
        """At most ``limit`` of the merchant's events, newest first, after the event ``after``; only
        those of ``event_type`` and with a status in ``statuses`` when given."""
        ...

    def resends_due(self, now: int, limit: int) -> builtins.list[Event]:
        """Events whose ``resend_at`` is set and at or before ``now``, the earliest ``resend_at`` first
        (ties: in the order written)."""
        ...


class DeliveryRepository(Protocol):
    """The delivery attempts of events: written with each attempt's outcome, never changed."""

    def add(self, delivery: Delivery) -> None:
        """Insert; raises if the id exists."""
        ...

    def list(self, event_id: str) -> list[Delivery]:
        """The event's attempts, oldest first (ties: in the order written)."""
        ...


class OperatorRepository(Protocol):
    """The people who may sign in to the console (``paymentcore._services.audit.StoredOperator``)."""

    def get(self, operator_id: str) -> StoredOperator | None: ...
    def by_hash(self, token_hash: str) -> StoredOperator | None: ...
    def put(self, operator: StoredOperator) -> None:
        """Insert or replace."""
        ...

    def list(self) -> list[StoredOperator]:
        """Every operator, oldest first (ties: in the order written)."""
        ...


class SessionRepository(Protocol):
    """Signed-in console sessions, shared by every server process on the store."""

    def by_hash(self, token_hash: str) -> StoredSession | None: ...
    def put(self, session: StoredSession) -> None:
        """Insert or replace."""
        ...

    def delete(self, session_id: str) -> None:
        """Remove the session, if any."""
        ...

    def end_all(self, operator_id: str) -> int:
        """Remove every session of the operator; how many went."""
        ...

    def purge(self, *, seen_before: int, created_before: int) -> int:
        """Remove every session last seen before ``seen_before`` or created before ``created_before``."""
        ...


class AuditRepository(Protocol):
    """The audit trail: append-only (the SQL stores refuse UPDATE and DELETE of it)."""

    def add(self, entry: StoredAuditEntry) -> None:
        """Append; raises if the id exists."""
        ...

    def page(
        self, *, limit: int, after: str | None = None, subject: str | None = None
    ) -> list[StoredAuditEntry] | None:
        """At most ``limit`` entries, newest first (ties: the last written first), after the entry
        ``after`` (None when ``after`` is no entry); only those about ``subject`` when given."""
        ...


class IdempotencyRepository(Protocol):
    def get(self, merchant_id: str, key: str) -> IdempotencyRecord | None: ...
    def put(self, record: IdempotencyRecord) -> None: ...
    def delete(self, merchant_id: str, key: str) -> None: ...
    def purge(self, before: int) -> int:
        """Delete every record created before ``before``; how many went."""
        ...


class LeaseRepository(Protocol):
    """Which items of background work a worker holds now (``paymentcore._services.work.Runner`` keeps them).

    A lease is taken with the claim and dropped with the recorded outcome; a worker that dies in between
    leaves it to run out. Counting the leases that have not run out tells how much work is in flight in
    every process on the store.
    """

    def take(self, kind: str, key: str, until: int) -> None:
        """Insert or replace the lease on ``key`` (of ``kind``: collections, payouts, deliveries)."""
        ...

    def drop(self, kind: str, key: str) -> None:
        """Remove the lease, if any."""
        ...

    def take_many(self, kind: str, leases: Sequence[tuple[str, int]]) -> None:
        """:meth:`take` for each ``(key, until)``, in one statement where the store can (each key once)."""
        ...

    def drop_many(self, kind: str, keys: Sequence[str]) -> None:
        """:meth:`drop` for each key, in one statement where the store can."""
        ...

    def held(self, kind: str, now: int) -> int:
        """How many leases of ``kind`` run past ``now``."""
        ...

    def purge(self, before: int) -> int:
        """Delete every lease that ran out before ``before``; how many went."""
        ...


class RateRepository(Protocol):
    """Per-key request counters, shared by every process on the store (the per-key rate limits).

    Requests are counted in buckets: the bucket of width ``width`` ms that holds ``at`` starts at
    ``at - at % width``. Which buckets make a window, and what a count allows, is decided by
    ``paymentcore._services.access.RateLimiter``; the store keeps and sums the counts. In a write unit
    of work, :meth:`buckets` also holds the key's counters until the unit of work ends, so two processes
    counting one key take turns (a unit of work that counts requests uses no other repository).
    """

    def buckets(self, key_id: str, width: int, since: int) -> list[tuple[int, int]]:
        """(start, count) of the key's buckets of ``width`` starting at or after ``since``, oldest first."""
        ...

    def spans(
        self, key_ids: Sequence[str], spans: Sequence[tuple[int, int]]
    ) -> dict[str, list[list[tuple[int, int]]]]:
        """For each of ``key_ids``, :meth:`buckets` for each ``(width, since)`` of ``spans`` (distinct
        widths), in one read; in a write unit of work it holds every one of those keys' counters."""
        ...

    def add(self, key_id: str, width: int, start: int, hits: int = 1) -> None:
        """Count ``hits`` more requests in the key's bucket of ``width`` starting at ``start``."""
        ...

    def add_many(self, counts: Sequence[tuple[str, int, int, int]]) -> None:
        """:meth:`add` for each ``(key_id, width, start, hits)``, in one statement where the store can."""
        ...

    def purge(self, before: int) -> int:
        """Delete every bucket that starts before ``before``; how many went."""
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
    def batches(self) -> BatchRepository: ...
    @property
    def ledger(self) -> LedgerRepository: ...
    @property
    def webhooks(self) -> WebhookRepository: ...
    @property
    def outbox(self) -> Outbox: ...
    @property
    def deliveries(self) -> DeliveryRepository: ...
    @property
    def idempotency(self) -> IdempotencyRepository: ...
    @property
    def leases(self) -> LeaseRepository: ...
    @property
    def rates(self) -> RateRepository: ...
    @property
    def operators(self) -> OperatorRepository: ...
    @property
    def sessions(self) -> SessionRepository: ...
    @property
    def audit(self) -> AuditRepository: ...


#: The unit of work's former name, kept so existing imports and annotations keep working.
Transaction = UnitOfWork


class Store(Protocol):
    def transaction(self) -> AbstractContextManager[UnitOfWork]:
        """A write transaction: serialised against every other writer, all or nothing."""
        ...

    def read(self) -> AbstractContextManager[UnitOfWork]:
        """A read-only view (writing through it is a programming error)."""
        ...

    def ping(self, timeout: float = 0.5) -> None:
        """Run a trivial read on the database and check that it takes writes, giving up after about
        ``timeout`` seconds.

        Raises :class:`StoreUnavailableError` when the database cannot be reached (a missing file,
        a lock held past ``timeout``, a broken connection), :class:`StoreReadOnlyError` when it answers
        but cannot be written (a read-only file, a read-only server); never waits for a writer longer
        than that, and never holds the write lock for more than an instant.
        """
        ...

    def close(self) -> None: ...


class GlancingStore(Store, Protocol):
    """A store whose reads of independent facts need no snapshot of their own (PostgreSQL's, SQLite's)."""

    def glance(self) -> AbstractContextManager[UnitOfWork]:
        """A read whose statements need not agree with each other: each sees the database as of its own
        start. It opens no transaction, so a lookup of one statement (an API key with its merchant, a
        payout by reference) costs one round trip on PostgreSQL, not a BEGIN and a ROLLBACK besides.
        Writing through it is a programming error, as through :meth:`Store.read`."""
        ...


class PartitionedStore(Store, Protocol):
    """A store whose writers of different merchants need not wait for each other (PostgreSQL's).

    The services open a merchant's write transaction with ``transaction_for(merchant_id)`` when the
    store offers it (``store.transaction()`` otherwise). Inside it, what belongs to that merchant (its
    idempotency keys, limits, spend, webhook endpoint) is serialised against that merchant's other
    writers and against :meth:`Store.transaction` (which still excludes every writer); rows that a
    worker and an operator may both touch are locked row by row, balances move by conditional updates.
    """

    def transaction_for(self, merchant_id: str) -> AbstractContextManager[UnitOfWork]:
        """A write transaction on ``merchant_id``'s partition: all or nothing, like ``transaction``."""
        ...

    def transaction_for_many(self, merchant_ids: Sequence[str]) -> AbstractContextManager[UnitOfWork]:
        """A write transaction on the partitions of several merchants at once (a worker's batch),
        waiting for their writers and whole-store writers only."""
        ...


class SkippingStore(PartitionedStore, Protocol):
    """A partitioned store whose workers' claims pass over the items others hold (PostgreSQL's)."""

    def transaction_for_claims(self) -> AbstractContextManager[UnitOfWork]:
        """A write transaction for a worker's claim: it takes no merchant's partition, and its reads for
        update of its items (payouts, collections, events) pass over the rows another unit holds
        (``FOR UPDATE SKIP LOCKED``) as if they were not there. A claim changes only its items' rows and
        their leases, never money; so it never waits for a merchant's API requests or another worker's
        batch, and an item another unit holds is left to it."""
        ...


class StoreUnavailableError(Exception):
    """The store could not run a query (see :meth:`Store.ping`)."""


class StoreReadOnlyError(StoreUnavailableError):
    """The store answers but cannot be written: a read-only file, a read-only database server."""


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
    """The network's answer about a collection. ``check_after_ms``, on a PENDING answer: when the network
    expects to know more, in ms from now (as HTTP's Retry-After); the worker then asks again no sooner
    than that (nor sooner than its poll interval, nor later than the prompt's timeout). None: unknown."""

    outcome: NetworkOutcome
    failure_category: str | None = None
    failure_reason: str | None = None
    check_after_ms: int | None = None


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
    SENT, SUCCESS means the recipient has it, FAILED means it did not complete. ``check_after_ms``, on a
    PENDING answer: when the network expects to know more, in ms from now (as HTTP's Retry-After); the
    worker then asks again no sooner than that, nor sooner than its poll interval. None: unknown.
    """

    outcome: NetworkOutcome
    provider_reference: str | None = None
    reason: str | None = None
    check_after_ms: int | None = None


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
    # False when the request never left (no connection to the endpoint came free in time): it is not
    # an attempt, nothing is recorded against the endpoint, and the event is tried again
    attempted: bool = True

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
