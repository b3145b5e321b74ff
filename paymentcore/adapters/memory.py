"""MemoryStore: the storage port in process memory, for tests and embedding.

A unit of work holds the store's lock and writes into an overlay that is merged only on commit, so an
exception anywhere inside leaves nothing behind, exactly as a rolled-back SQL transaction would. Which
rows ``due`` and ``spent`` select is decided by the predicates of ``paymentcore._queries``.
"""

from __future__ import annotations

import builtins
import copy
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

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
from paymentcore._queries import (
    collection_due_order,
    collection_is_due,
    counts_as_spent,
    event_is_due,
    payout_due_order,
    payout_is_due,
)

__all__ = [
    "MemoryStore",
    "MemoryTransaction",
]

_DELETED = object()


class _Tables:
    """The store's tables as one unit of work sees them: its own writes over the committed rows."""

    def __init__(self, tables: dict[str, dict[Any, Any]], *, writable: bool) -> None:
        self._tables = tables
        self._overlay: dict[str, dict[Any, Any]] = {}
        self._writable = writable

    def get(self, table: str, key: Any) -> Any:
        overlay = self._overlay.get(table)
        if overlay is not None and key in overlay:
            value = overlay[key]
            return None if value is _DELETED else value
        return self._tables.get(table, {}).get(key)

    def put(self, table: str, key: Any, value: Any) -> None:
        if not self._writable:
            raise RuntimeError("write through a read-only transaction")
        self._overlay.setdefault(table, {})[key] = value

    def delete(self, table: str, key: Any) -> None:
        self.put(table, key, _DELETED)

    def values(self, table: str) -> Iterator[Any]:
        overlay = self._overlay.get(table, {})
        for key, value in self._tables.get(table, {}).items():
            if key not in overlay:
                yield value
        for value in overlay.values():
            if value is not _DELETED:
                yield value

    def insert(self, table: str, key: Any, value: Any) -> None:
        if self.get(table, key) is not None:
            raise KeyError(f"{table} {key!r} exists")
        self.put(table, key, value)

    def update(self, table: str, key: Any, value: Any) -> None:
        if self.get(table, key) is None:
            raise KeyError(f"{table} {key!r} does not exist")
        self.put(table, key, value)

    def commit(self) -> None:
        for table, rows in self._overlay.items():
            target = self._tables.setdefault(table, {})
            for key, value in rows.items():
                if value is _DELETED:
                    target.pop(key, None)
                else:
                    target[key] = value
        self._overlay = {}


class _Repository:
    def __init__(self, tables: _Tables) -> None:
        self._t = tables


# --- settings, merchants, keys, limits -----------------------------------------------------------


class _Settings(_Repository):
    def get(self) -> Settings:
        settings: Settings | None = self._t.get("settings", "platform")
        return settings if settings is not None else Settings()

    def put(self, settings: Settings) -> None:
        self._t.put("settings", "platform", settings)


class _Merchants(_Repository):
    def get(self, merchant_id: str) -> Merchant | None:
        merchant: Merchant | None = self._t.get("merchants", merchant_id)
        return merchant

    def put(self, merchant: Merchant) -> None:
        self._t.put("merchants", merchant.id, merchant)

    def list(self) -> builtins.list[Merchant]:
        return sorted(self._t.values("merchants"), key=lambda m: m.created_at)  # ties: insertion order


class _Keys(_Repository):
    def get(self, key_id: str) -> ApiKey | None:
        key: ApiKey | None = self._t.get("keys", key_id)
        return key

    def by_hash(self, key_hash: str) -> ApiKey | None:
        key_id = self._t.get("key_hashes", key_hash)
        return None if key_id is None else self.get(key_id)

    def put(self, key: ApiKey) -> None:
        old = self.get(key.id)
        if old is not None and old.key_hash != key.key_hash:
            self._t.delete("key_hashes", old.key_hash)
        self._t.put("keys", key.id, key)
        self._t.put("key_hashes", key.key_hash, key.id)


class _Limits(_Repository):
    def get(self, merchant_id: str, currency: str) -> PayoutLimits | None:
        limits: PayoutLimits | None = self._t.get("limits", (merchant_id, currency))
        return limits

    def put(self, limits: PayoutLimits) -> None:
        self._t.put("limits", (limits.merchant_id, limits.currency), limits)


# --- collections and payouts ---------------------------------------------------------------------


class _Collections(_Repository):
    def get(self, reference: str) -> Collection | None:
        collection: Collection | None = self._t.get("collections", reference)
        return collection

    def add(self, collection: Collection) -> None:
        self._t.insert("collections", collection.reference, collection)

    def update(self, collection: Collection) -> None:
        self._t.update("collections", collection.reference, collection)

    def due(self, now: int, limit: int) -> list[Collection]:
        due = [c for c in self._t.values("collections") if collection_is_due(c, now)]
        due.sort(key=collection_due_order)
        return due[:limit]

    def prompts_since(self, phone: str, since: int) -> int:
        return sum(
            1
            for c in self._t.values("collections")
            if c.phone == phone and c.submitted_at is not None and c.submitted_at >= since
        )


class _Payouts(_Repository):
    def get(self, reference: str) -> Payout | None:
        payout: Payout | None = self._t.get("payouts", reference)
        return payout

    def add(self, payout: Payout) -> None:
        self._t.insert("payouts", payout.reference, payout)

    def update(self, payout: Payout) -> None:
        self._t.update("payouts", payout.reference, payout)

    def due(self, now: int, limit: int) -> list[Payout]:
        due = [p for p in self._t.values("payouts") if payout_is_due(p, now)]
        due.sort(key=payout_due_order)
        return due[:limit]

    def spent(self, merchant_id: str, currency: str, since: int) -> int:
        return sum(
            p.amount
            for p in self._t.values("payouts")
            if p.merchant_id == merchant_id
            and p.currency == currency
            and p.created_at >= since
            and counts_as_spent(p)
        )


# --- the ledger ------------------------------------------------------------------------------------


class _Ledger(_Repository):
    def balance(self, merchant_id: str, currency: str) -> Balance:
        balance: Balance | None = self._t.get("balances", (merchant_id, currency))
        return balance if balance is not None else Balance(merchant_id=merchant_id, currency=currency)

    def balances(self, merchant_id: str) -> list[Balance]:
        return sorted(
            (b for b in self._t.values("balances") if b.merchant_id == merchant_id), key=lambda b: b.currency
        )

    def put_balance(self, balance: Balance) -> None:
        # the same promises as SqliteStore's CHECK constraints
        if balance.available < 0 or balance.reserved < 0 or balance.paid_out < 0:
            raise ValueError(f"negative balance refused: {balance}")
        if balance.credited != balance.available + balance.reserved + balance.paid_out:
            raise ValueError(f"unbalanced balance refused: {balance}")
        self._t.put("balances", (balance.merchant_id, balance.currency), balance)

    def append(self, entry: LedgerEntry) -> None:
        self._t.insert("entries", entry.id, entry)

    def entries(self, merchant_id: str, currency: str) -> list[LedgerEntry]:
        entries = [
            e for e in self._t.values("entries") if e.merchant_id == merchant_id and e.currency == currency
        ]
        entries.sort(key=lambda e: e.created_at)
        return entries


# --- webhooks, the outbox, idempotency -------------------------------------------------------------


class _Webhooks(_Repository):
    def get(self, merchant_id: str) -> WebhookEndpoint | None:
        endpoint: WebhookEndpoint | None = self._t.get("webhooks", merchant_id)
        return endpoint

    def put(self, endpoint: WebhookEndpoint) -> None:
        self._t.put("webhooks", endpoint.merchant_id, endpoint)


class _Outbox(_Repository):
    def add(self, event: Event) -> None:
        self._t.insert("events", event.id, attrs.evolve(event, data=copy.deepcopy(event.data)))

    def get(self, event_id: str) -> Event | None:
        event: Event | None = self._t.get("events", event_id)
        return event

    def update(self, event: Event) -> None:
        self._t.update("events", event.id, event)

    def due(self, now: int, limit: int) -> list[Event]:
        due = [e for e in self._t.values("events") if event_is_due(e, now)]
        due.sort(key=lambda e: e.created_at)  # stable: insertion order within a millisecond
        return due[:limit]

    def list(self, merchant_id: str) -> builtins.list[Event]:
        events = [e for e in self._t.values("events") if e.merchant_id == merchant_id]
        events.sort(key=lambda e: e.created_at)
        return events


class _Idempotency(_Repository):
    def get(self, merchant_id: str, key: str) -> IdempotencyRecord | None:
        record: IdempotencyRecord | None = self._t.get("idempotency", (merchant_id, key))
        return record

    def put(self, record: IdempotencyRecord) -> None:
        self._t.put("idempotency", (record.merchant_id, record.key), record)

    def delete(self, merchant_id: str, key: str) -> None:
        self._t.delete("idempotency", (merchant_id, key))

    def purge(self, before: int) -> int:
        old = [r for r in self._t.values("idempotency") if r.created_at < before]
        for record in old:
            self.delete(record.merchant_id, record.key)
        return len(old)


class MemoryTransaction:
    """One unit of work over the store's tables: the ten repositories of ``ports.UnitOfWork``."""

    def __init__(self, tables: dict[str, dict[Any, Any]], *, writable: bool) -> None:
        self._tables = _Tables(tables, writable=writable)
        self.settings = _Settings(self._tables)
        self.merchants = _Merchants(self._tables)
        self.keys = _Keys(self._tables)
        self.limits = _Limits(self._tables)
        self.collections = _Collections(self._tables)
        self.payouts = _Payouts(self._tables)
        self.ledger = _Ledger(self._tables)
        self.webhooks = _Webhooks(self._tables)
        self.outbox = _Outbox(self._tables)
        self.idempotency = _Idempotency(self._tables)

    def commit(self) -> None:
        self._tables.commit()


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
