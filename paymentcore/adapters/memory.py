"""MemoryStore: the storage port in process memory, for tests and embedding.

A transaction holds the store's lock and writes into an overlay that is merged only on commit, so an
exception anywhere inside leaves nothing behind, exactly as a rolled-back SQL transaction would.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs

from paymentcore.models import (
    ApiKey,
    Balance,
    Collection,
    CollectionStatus,
    DeliveryStatus,
    Event,
    IdempotencyRecord,
    LedgerEntry,
    Merchant,
    Payout,
    PayoutLimits,
    PayoutStatus,
    Settings,
    WebhookEndpoint,
)

_DELETED = object()


def _due_at(collection: Collection) -> int:
    if collection.next_check_at is None:
        return collection.expires_at
    return min(collection.expires_at, collection.next_check_at)


_SPENT_STATUSES = (PayoutStatus.PENDING, PayoutStatus.SENT, PayoutStatus.PAID, PayoutStatus.FAILED)


class MemoryTransaction:
    def __init__(self, tables: dict[str, dict[Any, Any]], *, writable: bool) -> None:
        self._tables = tables
        self._overlay: dict[str, dict[Any, Any]] = {}
        self._writable = writable

    # --- generic table access --------------------------------------------------------------------

    def _get(self, table: str, key: Any) -> Any:
        overlay = self._overlay.get(table)
        if overlay is not None and key in overlay:
            value = overlay[key]
            return None if value is _DELETED else value
        return self._tables.get(table, {}).get(key)

    def _put(self, table: str, key: Any, value: Any) -> None:
        if not self._writable:
            raise RuntimeError("write through a read-only transaction")
        self._overlay.setdefault(table, {})[key] = value

    def _values(self, table: str) -> Iterator[Any]:
        overlay = self._overlay.get(table, {})
        for key, value in self._tables.get(table, {}).items():
            if key not in overlay:
                yield value
        for value in overlay.values():
            if value is not _DELETED:
                yield value

    def _insert(self, table: str, key: Any, value: Any) -> None:
        if self._get(table, key) is not None:
            raise KeyError(f"{table} {key!r} exists")
        self._put(table, key, value)

    def _update(self, table: str, key: Any, value: Any) -> None:
        if self._get(table, key) is None:
            raise KeyError(f"{table} {key!r} does not exist")
        self._put(table, key, value)

    def commit(self) -> None:
        for table, rows in self._overlay.items():
            target = self._tables.setdefault(table, {})
            for key, value in rows.items():
                if value is _DELETED:
                    target.pop(key, None)
                else:
                    target[key] = value
        self._overlay = {}

    # --- settings, merchants, keys, limits -------------------------------------------------------

    def get_settings(self) -> Settings:
        settings: Settings | None = self._get("settings", "platform")
        return settings if settings is not None else Settings()

    def put_settings(self, settings: Settings) -> None:
        self._put("settings", "platform", settings)

    def get_merchant(self, merchant_id: str) -> Merchant | None:
        merchant: Merchant | None = self._get("merchants", merchant_id)
        return merchant

    def put_merchant(self, merchant: Merchant) -> None:
        self._put("merchants", merchant.id, merchant)

    def list_merchants(self) -> list[Merchant]:
        return sorted(self._values("merchants"), key=lambda m: m.created_at)  # ties: insertion order

    def get_key(self, key_id: str) -> ApiKey | None:
        key: ApiKey | None = self._get("keys", key_id)
        return key

    def get_key_by_hash(self, key_hash: str) -> ApiKey | None:
        key_id = self._get("key_hashes", key_hash)
        return None if key_id is None else self.get_key(key_id)

    def put_key(self, key: ApiKey) -> None:
        old = self.get_key(key.id)
        if old is not None and old.key_hash != key.key_hash:
            self._put("key_hashes", old.key_hash, _DELETED)
        self._put("keys", key.id, key)
        self._put("key_hashes", key.key_hash, key.id)

    def get_limits(self, merchant_id: str, currency: str) -> PayoutLimits | None:
        limits: PayoutLimits | None = self._get("limits", (merchant_id, currency))
        return limits

    def put_limits(self, limits: PayoutLimits) -> None:
        self._put("limits", (limits.merchant_id, limits.currency), limits)

    # --- collections -----------------------------------------------------------------------------

    def get_collection(self, reference: str) -> Collection | None:
        collection: Collection | None = self._get("collections", reference)
        return collection

    def insert_collection(self, collection: Collection) -> None:
        self._insert("collections", collection.reference, collection)

    def update_collection(self, collection: Collection) -> None:
        self._update("collections", collection.reference, collection)

    def due_collections(self, now: int, limit: int) -> list[Collection]:
        due = [
            c
            for c in self._values("collections")
            if c.status in (CollectionStatus.PENDING, CollectionStatus.PROCESSING)
            and (
                (c.submitted_at is None and c.status is CollectionStatus.PENDING and c.expires_at <= now)
                or (c.next_check_at is not None and c.next_check_at <= now)
            )
        ]
        due.sort(key=lambda c: (_due_at(c), c.reference))
        return due[:limit]

    def count_prompts(self, phone: str, since: int) -> int:
        return sum(
            1
            for c in self._values("collections")
            if c.phone == phone and c.submitted_at is not None and c.submitted_at >= since
        )

    # --- payouts ---------------------------------------------------------------------------------

    def get_payout(self, reference: str) -> Payout | None:
        payout: Payout | None = self._get("payouts", reference)
        return payout

    def insert_payout(self, payout: Payout) -> None:
        self._insert("payouts", payout.reference, payout)

    def update_payout(self, payout: Payout) -> None:
        self._update("payouts", payout.reference, payout)

    def due_payouts(self, now: int, limit: int) -> list[Payout]:
        due = [
            p
            for p in self._values("payouts")
            if p.next_check_at is not None
            and p.next_check_at <= now
            and (
                (p.status is PayoutStatus.PENDING and not p.awaiting_review) or p.status is PayoutStatus.SENT
            )
        ]
        due.sort(key=lambda p: (p.next_check_at, p.reference))
        return due[:limit]

    def spent(self, merchant_id: str, currency: str, since: int) -> int:
        return sum(
            p.amount
            for p in self._values("payouts")
            if p.merchant_id == merchant_id
            and p.currency == currency
            and p.created_at >= since
            and p.status in _SPENT_STATUSES
        )

    # --- ledger ----------------------------------------------------------------------------------

    def get_balance(self, merchant_id: str, currency: str) -> Balance:
        balance: Balance | None = self._get("balances", (merchant_id, currency))
        return balance if balance is not None else Balance(merchant_id=merchant_id, currency=currency)

    def list_balances(self, merchant_id: str) -> list[Balance]:
        return sorted(
            (b for b in self._values("balances") if b.merchant_id == merchant_id), key=lambda b: b.currency
        )

    def put_balance(self, balance: Balance) -> None:
        # the same promises as SqliteStore's CHECK constraints
        if balance.available < 0 or balance.reserved < 0 or balance.paid_out < 0:
            raise ValueError(f"negative balance refused: {balance}")
        if balance.credited != balance.available + balance.reserved + balance.paid_out:
            raise ValueError(f"unbalanced balance refused: {balance}")
        self._put("balances", (balance.merchant_id, balance.currency), balance)

    def append_entry(self, entry: LedgerEntry) -> None:
        self._insert("entries", entry.id, entry)

    def list_entries(self, merchant_id: str, currency: str) -> list[LedgerEntry]:
        entries = [
            e for e in self._values("entries") if e.merchant_id == merchant_id and e.currency == currency
        ]
        entries.sort(key=lambda e: e.created_at)
        return entries

    # --- webhooks and the outbox -----------------------------------------------------------------

    def get_webhook(self, merchant_id: str) -> WebhookEndpoint | None:
        endpoint: WebhookEndpoint | None = self._get("webhooks", merchant_id)
        return endpoint

    def put_webhook(self, endpoint: WebhookEndpoint) -> None:
        self._put("webhooks", endpoint.merchant_id, endpoint)

    def insert_event(self, event: Event) -> None:
        self._insert("events", event.id, attrs.evolve(event, data=copy.deepcopy(event.data)))

    def get_event(self, event_id: str) -> Event | None:
        event: Event | None = self._get("events", event_id)
        return event

    def update_event(self, event: Event) -> None:
        self._update("events", event.id, event)

    def due_events(self, now: int, limit: int) -> list[Event]:
        due = [
            e
            for e in self._values("events")
            if e.status is DeliveryStatus.PENDING and e.next_attempt_at <= now
        ]
        due.sort(key=lambda e: e.created_at)  # stable: insertion order within a millisecond
        return due[:limit]

    def list_events(self, merchant_id: str) -> list[Event]:
        events = [e for e in self._values("events") if e.merchant_id == merchant_id]
        events.sort(key=lambda e: e.created_at)
        return events

    # --- idempotency -----------------------------------------------------------------------------

    def get_idempotency(self, merchant_id: str, key: str) -> IdempotencyRecord | None:
        record: IdempotencyRecord | None = self._get("idempotency", (merchant_id, key))
        return record

    def put_idempotency(self, record: IdempotencyRecord) -> None:
        self._put("idempotency", (record.merchant_id, record.key), record)

    def delete_idempotency(self, merchant_id: str, key: str) -> None:
        self._put("idempotency", (merchant_id, key), _DELETED)

    def purge_idempotency(self, before: int) -> int:
        old = [r for r in self._values("idempotency") if r.created_at < before]
        for record in old:
            self.delete_idempotency(record.merchant_id, record.key)
        return len(old)


class MemoryStore:
    """The storage port in memory. Thread-safe: one transaction at a time."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._tables: dict[str, dict[Any, Any]] = {}

    @contextmanager
    def transaction(self) -> Iterator[MemoryTransaction]:
        with self._lock:
            tx = MemoryTransaction(self._tables, writable=True)
            yield tx
            tx.commit()

    @contextmanager
    def read(self) -> Iterator[MemoryTransaction]:
        with self._lock:
            yield MemoryTransaction(self._tables, writable=False)

    def close(self) -> None:
        pass
