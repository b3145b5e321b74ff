"""MemoryStore: the storage port in process memory, for tests and embedding.

A unit of work holds the store's lock and writes into an overlay that is merged only on commit, so an
exception anywhere inside leaves nothing behind, exactly as a rolled-back SQL transaction would. Which
rows ``due`` and ``spent`` select is decided by the predicates of ``paymentcore._domain.queries``.
"""

from __future__ import annotations

import builtins
import copy
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import attrs

from paymentcore._domain.models import (
    EVENT_FIXED,
    NO_ENDPOINT,
    PAYOUT_FIXED,
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
    check_fixed,
)
from paymentcore._domain.queries import (
    BATCH_OPEN_STATUSES,
    at_most_per_lane,
    collection_due_order,
    collection_due_since,
    collection_is_due,
    collection_lane,
    counts_as_spent,
    endpoint_is_troubled,
    endpoint_listens,
    endpoint_trouble_order,
    event_is_due,
    event_lane,
    in_turns,
    payout_is_due,
    payout_lane,
    payouts_in_due_order,
)
from paymentcore.ports import CurrencyTotal, DueRef, KeyLookup, PayoutInputs, StoreUnavailableError, Tally

__all__ = [
    "MemoryStore",
    "MemoryTransaction",
]

_DELETED = object()
R = TypeVar("R")


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
        for _, value in self.items(table):
            yield value

    def items(self, table: str) -> Iterator[tuple[Any, Any]]:
        overlay = self._overlay.get(table, {})
        for key, value in self._tables.get(table, {}).items():
            if key not in overlay:
                yield key, value
        for key, value in overlay.items():
            if value is not _DELETED:
                yield key, value

    def in_order(self, table: str) -> Iterator[Any]:
        """The rows in the order they were first written (an update keeps a row's place)."""
        overlay = self._overlay.get(table, {})
        committed = self._tables.get(table, {})
        for key, value in committed.items():
            value = overlay.get(key, value)
            if value is not _DELETED:
                yield value
        for key, value in overlay.items():
            if key not in committed and value is not _DELETED:
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


def _tally(rows: Iterator[tuple[int, str, str, int]], since: int, until: int, width: int) -> list[Tally]:
    """``ports``' tally of (created_at, currency, status value, amount) rows, in a fixed order."""
    groups: dict[tuple[int, str, str], list[int]] = {}
    for created_at, currency, status, amount in rows:
        if since <= created_at < until:
            group = groups.setdefault(((created_at - since) // width, currency, status), [0, 0])
            group[0] += 1
            group[1] += amount
    return [Tally(b, c, s, n, a) for (b, c, s), (n, a) in sorted(groups.items())]


def _oldest_first(
    rows: Iterator[R], created_at: Callable[[R], int], key: Callable[[R], str], after: str | None
) -> list[R] | None:
    """``rows`` (in the order written) oldest first, ties in the order written; those after the row
    whose key is ``after`` (None when there is none)."""
    numbered = sorted(enumerate(rows), key=lambda p: (created_at(p[1]), p[0]))
    ordered = [row for _, row in numbered]
    if after is not None:
        place = next((i for i, row in enumerate(ordered) if key(row) == after), None)
        if place is None:
            return None
        ordered = ordered[place + 1 :]
    return ordered


def _page(
    rows: Iterator[R],
    *,
    key: Callable[[R], str],
    created_at: Callable[[R], int],
    after: str | None,
    keep: Callable[[R], bool],
    limit: int,
) -> list[R] | None:
    """``ports``' page order over ``rows`` (the merchant's, in the order written): newest first, ties
    the last written first; the rows after the one whose key is ``after``, kept by ``keep``."""
    numbered = sorted(enumerate(rows), key=lambda p: (created_at(p[1]), p[0]), reverse=True)
    ordered = [row for _, row in numbered]
    if after is not None:
        place = next((i for i, row in enumerate(ordered) if key(row) == after), None)
        if place is None:
            return None
        ordered = ordered[place + 1 :]
    return [row for row in ordered if keep(row)][:limit]


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

    def lookup(self, key_hash: str) -> KeyLookup | None:
        key = self.by_hash(key_hash)
        if key is None:
            return None
        return KeyLookup(key, self._t.get("merchants", key.merchant_id), _Settings(self._t).get())

    def put(self, key: ApiKey) -> None:
        old = self.get(key.id)
        if old is not None and old.key_hash != key.key_hash:
            self._t.delete("key_hashes", old.key_hash)
        self._t.put("keys", key.id, key)
        self._t.put("key_hashes", key.key_hash, key.id)

    def list(self, merchant_id: str) -> builtins.list[ApiKey]:
        keys = [k for k in self._t.in_order("keys") if k.merchant_id == merchant_id]
        return sorted(keys, key=lambda k: k.created_at)  # stable: in the order written


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

    def due(self, now: int, limit: int, *, per_lane: int | None = None) -> list[Collection]:
        due = [c for c in self._t.values("collections") if collection_is_due(c, now)]
        due.sort(key=collection_due_order)
        if per_lane is not None:
            due = in_turns(due, collection_lane, per_lane)
        return due[:limit]

    def due_refs(self, now: int, limit: int, *, per_lane: int | None = None) -> list[DueRef]:
        due = self.due(now, limit, per_lane=per_lane)
        return [DueRef(c.reference, collection_lane(c), c.merchant_id) for c in due]

    def count_due(self, now: int) -> int:
        return sum(1 for c in self._t.values("collections") if collection_is_due(c, now))

    def prompts_since(self, phone: str, since: int) -> int:
        return sum(
            1
            for c in self._t.values("collections")
            if c.phone == phone and c.submitted_at is not None and c.submitted_at >= since
        )

    def oldest_due(self, now: int) -> int | None:
        since = [collection_due_since(c, now) for c in self._t.values("collections")]
        return min((t for t in since if t is not None), default=None)

    def tally(self, since: int, until: int, width: int) -> list[Tally]:
        rows = (
            (c.created_at, c.requested_currency, c.status.value, c.requested_amount)
            for c in self._t.values("collections")
        )
        return _tally(rows, since, until, width)

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
    ) -> list[Collection] | None:
        ordered = _oldest_first(
            self._t.in_order("collections"), lambda c: c.created_at, lambda c: c.reference, after
        )
        if ordered is None:
            return None

        def keep(c: Collection) -> bool:
            return (
                (merchant_id is None or c.merchant_id == merchant_id)
                and (currency is None or c.requested_currency == currency)
                and (status is None or c.status is status)
                and (created_from is None or c.created_at >= created_from)
                and (created_before is None or c.created_at < created_before)
            )

        return [c for c in ordered if keep(c)][:limit]

    def page(
        self,
        merchant_id: str,
        *,
        limit: int,
        after: str | None = None,
        status: CollectionStatus | None = None,
        merchant_reference: str | None = None,
    ) -> list[Collection] | None:
        return _page(
            (c for c in self._t.in_order("collections") if c.merchant_id == merchant_id),
            key=lambda c: c.reference,
            created_at=lambda c: c.created_at,
            after=after,
            keep=lambda c: (
                (status is None or c.status is status)
                and (merchant_reference is None or c.merchant_reference == merchant_reference)
            ),
            limit=limit,
        )


class _Payouts(_Repository):
    def get(self, reference: str) -> Payout | None:
        payout: Payout | None = self._t.get("payouts", reference)
        return payout

    def get_many(self, references: Sequence[str]) -> dict[str, Payout]:
        return {ref: payout for ref in references if (payout := self.get(ref)) is not None}

    def add(self, payout: Payout) -> None:
        self._t.insert("payouts", payout.reference, payout)

    def add_many(self, payouts: builtins.list[Payout]) -> None:
        for payout in payouts:
            self.add(payout)

    def update(self, payout: Payout) -> None:
        stored = self._t.get("payouts", payout.reference)
        if stored is not None:
            check_fixed(stored, payout, PAYOUT_FIXED)
        self._t.update("payouts", payout.reference, payout)

    def due(self, now: int, limit: int, *, per_lane: int | None = None) -> list[Payout]:
        due = payouts_in_due_order(p for p in self._t.values("payouts") if payout_is_due(p, now))
        return (due if per_lane is None else at_most_per_lane(due, payout_lane, per_lane))[:limit]

    def due_refs(self, now: int, limit: int, *, per_lane: int | None = None) -> list[DueRef]:
        due = self.due(now, limit, per_lane=per_lane)
        return [DueRef(p.reference, payout_lane(p), p.merchant_id) for p in due]

    def count_due(self, now: int) -> int:
        return sum(1 for p in self._t.values("payouts") if payout_is_due(p, now))

    def oldest_due(self, now: int) -> int | None:
        return min(
            (p.next_check_at for p in self._t.values("payouts") if payout_is_due(p, now)), default=None
        )

    def tally(self, since: int, until: int, width: int) -> builtins.list[Tally]:
        rows = ((p.created_at, p.currency, p.status.value, p.amount) for p in self._t.values("payouts"))
        return _tally(rows, since, until, width)

    def totals(
        self,
        *,
        status: PayoutStatus | None = None,
        awaiting_review: bool | None = None,
        unresolved: bool | None = None,
    ) -> builtins.list[CurrencyTotal]:
        sums: dict[str, list[int]] = {}
        for p in self._t.values("payouts"):
            if self._kept(p, status=status, awaiting_review=awaiting_review, unresolved=unresolved):
                total = sums.setdefault(p.currency, [0, 0])
                total[0] += 1
                total[1] += p.amount
        return [CurrencyTotal(currency, n, a) for currency, (n, a) in sorted(sums.items())]

    @staticmethod
    def _kept(
        p: Payout,
        *,
        merchant_id: str | None = None,
        status: PayoutStatus | None = None,
        awaiting_review: bool | None = None,
        unresolved: bool | None = None,
        currency: str | None = None,
        created_from: int | None = None,
        created_before: int | None = None,
    ) -> bool:
        return (
            (merchant_id is None or p.merchant_id == merchant_id)
            and (status is None or p.status is status)
            and (awaiting_review is None or p.awaiting_review is awaiting_review)
            and (unresolved is None or (p.resolution is None) is unresolved)
            and (currency is None or p.currency == currency)
            and (created_from is None or p.created_at >= created_from)
            and (created_before is None or p.created_at < created_before)
        )

    def inputs(
        self,
        merchant_id: str,
        currency: str | None,
        *,
        day_since: int,
        week_since: int,
        idempotency_key: str | None = None,
    ) -> PayoutInputs:
        limits = None if currency is None else _Limits(self._t).get(merchant_id, currency)
        day = week = None
        if limits is not None and currency is not None:
            day = None if limits.per_day is None else self.spent(merchant_id, currency, day_since)
            week = None if limits.per_week is None else self.spent(merchant_id, currency, week_since)
        balance: Balance | None = None
        if currency is not None:
            balance = self._t.get("balances", (merchant_id, currency))
        return PayoutInputs(
            _Settings(self._t).get(),
            self._t.get("merchants", merchant_id),
            limits,
            day,
            week,
            None if balance is None else balance.available,
            None if idempotency_key is None else _Idempotency(self._t).get(merchant_id, idempotency_key),
        )

    def inputs_later(
        self,
        merchant_id: str,
        currency: str | None,
        *,
        day_since: int,
        week_since: int,
        idempotency_key: str | None = None,
    ) -> Callable[[], PayoutInputs]:
        found = self.inputs(
            merchant_id, currency, day_since=day_since, week_since=week_since, idempotency_key=idempotency_key
        )
        return lambda: found

    def spent(self, merchant_id: str, currency: str, since: int) -> int:
        return sum(
            p.amount
            for p in self._t.values("payouts")
            if p.merchant_id == merchant_id
            and p.currency == currency
            and p.created_at >= since
            and counts_as_spent(p)
        )

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
        return _page(
            (p for p in self._t.in_order("payouts") if p.merchant_id == merchant_id),
            key=lambda p: p.reference,
            created_at=lambda p: p.created_at,
            after=after,
            keep=lambda p: (
                (status is None or p.status is status)
                and (merchant_reference is None or p.merchant_reference == merchant_reference)
                and (batch_id is None or p.batch_id == batch_id)
            ),
            limit=limit,
        )

    def _batch(self, batch_id: str) -> builtins.list[Payout]:
        found = [p for p in self._t.values("payouts") if p.batch_id == batch_id]
        found.sort(key=lambda p: p.batch_index or 0)
        return found

    def in_batch(self, batch_id: str, *, after: int | None, limit: int) -> builtins.list[Payout]:
        return [p for p in self._batch(batch_id) if after is None or (p.batch_index or 0) > after][:limit]

    def batch_tally(self, batch_id: str) -> builtins.list[BatchTally]:
        sums: dict[tuple[PayoutStatus, str], tuple[int, int]] = {}
        for p in self._batch(batch_id):
            count, amount = sums.get((p.status, p.currency), (0, 0))
            sums[(p.status, p.currency)] = (count + 1, amount + p.amount)
        order = builtins.list(PayoutStatus)
        return [
            BatchTally(status, currency, count, amount)
            for (status, currency), (count, amount) in sorted(
                sums.items(), key=lambda item: (order.index(item[0][0]), item[0][1])
            )
        ]

    def batch_open(self, batch_id: str) -> int:
        return sum(1 for p in self._batch(batch_id) if p.status in BATCH_OPEN_STATUSES)

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
        ordered = _oldest_first(
            self._t.in_order("payouts"), lambda p: p.created_at, lambda p: p.reference, after
        )
        if ordered is None:
            return None
        kept = [
            p
            for p in ordered
            if self._kept(
                p,
                merchant_id=merchant_id,
                status=status,
                awaiting_review=awaiting_review,
                unresolved=unresolved,
                currency=currency,
                created_from=created_from,
                created_before=created_before,
            )
        ]
        return kept[:limit]


class _Batches(_Repository):
    def add(self, batch: PayoutBatch) -> None:
        self._t.insert("batches", batch.id, attrs.evolve(batch, refusals=copy.deepcopy(batch.refusals)))

    def get(self, batch_id: str) -> PayoutBatch | None:
        batch: PayoutBatch | None = self._t.get("batches", batch_id)
        return batch

    def update(self, batch: PayoutBatch) -> None:
        self._t.update("batches", batch.id, batch)


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
        # one step under the store's lock: the check and the write cannot be separated
        old = self.balance(merchant_id, currency)
        new = Balance(
            merchant_id=merchant_id,
            currency=currency,
            available=old.available + available,
            reserved=old.reserved + reserved,
            paid_out=old.paid_out + paid_out,
            credited=old.credited + credited,
        )
        if new.available < 0 or new.reserved < 0 or new.paid_out < 0:
            return None
        self.put_balance(new)
        return new

    def shift(
        self, merchant_id: str, currency: str, *, available: int = 0, reserved: int = 0, paid_out: int = 0
    ) -> bool:
        if self._t.get("balances", (merchant_id, currency)) is None:  # as the SQL update finds no row
            return False
        moved = self.move(merchant_id, currency, available=available, reserved=reserved, paid_out=paid_out)
        return moved is not None

    def append(self, entry: LedgerEntry) -> None:
        self._t.insert("entries", entry.id, entry)

    def append_many(self, entries: list[LedgerEntry]) -> None:
        for entry in entries:
            self.append(entry)

    def entries(self, merchant_id: str, currency: str) -> list[LedgerEntry]:
        entries = [
            e for e in self._t.values("entries") if e.merchant_id == merchant_id and e.currency == currency
        ]
        entries.sort(key=lambda e: e.created_at)
        return entries

    def page(
        self, merchant_id: str, currency: str, *, limit: int, after: str | None = None
    ) -> list[LedgerEntry] | None:
        return _page(
            (
                e
                for e in self._t.in_order("entries")
                if e.merchant_id == merchant_id and e.currency == currency
            ),
            key=lambda e: e.id,
            created_at=lambda e: e.created_at,
            after=after,
            keep=lambda e: True,
            limit=limit,
        )


# --- webhooks, the outbox, idempotency -------------------------------------------------------------


class _Webhooks(_Repository):
    def get(self, merchant_id: str) -> WebhookEndpoint | None:
        endpoint: WebhookEndpoint | None = self._t.get("webhooks", merchant_id)
        return endpoint

    def get_many(self, merchant_ids: Sequence[str]) -> dict[str, WebhookEndpoint]:
        return {key: found for key in merchant_ids if (found := self.get(key)) is not None}

    def put(self, endpoint: WebhookEndpoint) -> None:
        self._t.put("webhooks", endpoint.merchant_id, endpoint)

    def count_troubled(self) -> tuple[int, int]:
        troubled = [e for e in self._t.values("webhooks") if endpoint_is_troubled(e)]
        disabled = sum(1 for e in troubled if not e.is_active)
        return len(troubled) - disabled, disabled

    def troubled(self, limit: int) -> list[WebhookEndpoint]:
        troubled = [e for e in self._t.values("webhooks") if endpoint_is_troubled(e)]
        return sorted(troubled, key=endpoint_trouble_order)[:limit]


class _Outbox(_Repository):
    def add(self, event: Event) -> None:
        self._t.insert("events", event.id, attrs.evolve(event, data=copy.deepcopy(event.data)))

    def add_to_deliver(self, event: Event) -> None:
        if not endpoint_listens(self._t.get("webhooks", event.merchant_id)):
            event = attrs.evolve(event, status=DeliveryStatus.SKIPPED, last_error=NO_ENDPOINT)
        self.add(event)

    def get(self, event_id: str) -> Event | None:
        event: Event | None = self._t.get("events", event_id)
        return event

    def get_many(self, event_ids: Sequence[str]) -> dict[str, Event]:
        return {key: event for key in event_ids if (event := self.get(key)) is not None}

    def update(self, event: Event) -> None:
        stored = self._t.get("events", event.id)
        if stored is not None:
            check_fixed(stored, event, EVENT_FIXED)
        self._t.update("events", event.id, event)

    def due(self, now: int, limit: int, *, per_lane: int | None = None) -> list[Event]:
        due = [e for e in self._t.values("events") if event_is_due(e, now)]
        due.sort(key=lambda e: e.created_at)  # stable: insertion order within a millisecond
        if per_lane is not None:
            due = in_turns(due, event_lane, per_lane)
        return due[:limit]

    def due_refs(self, now: int, limit: int, *, per_lane: int | None = None) -> list[DueRef]:
        return [DueRef(e.id, event_lane(e), e.merchant_id) for e in self.due(now, limit, per_lane=per_lane)]

    def defer(self, merchant_id: str, until: int) -> int:
        moved = [
            e for e in self._t.values("events") if e.merchant_id == merchant_id and event_is_due(e, until - 1)
        ]
        for event in moved:
            self._t.update("events", event.id, attrs.evolve(event, next_attempt_at=until))
        return len(moved)

    def count_due(self, now: int) -> int:
        return sum(1 for e in self._t.values("events") if event_is_due(e, now))

    def oldest_due(self, now: int) -> int | None:
        return min(
            (e.next_attempt_at for e in self._t.values("events") if event_is_due(e, now)), default=None
        )

    def list(self, merchant_id: str) -> builtins.list[Event]:
        events = [e for e in self._t.values("events") if e.merchant_id == merchant_id]
        events.sort(key=lambda e: e.created_at)
        return events

    def page(
        self,
        merchant_id: str,
        *,
        limit: int,
        after: str | None = None,
        event_type: str | None = None,
        statuses: frozenset[DeliveryStatus] | None = None,
    ) -> builtins.list[Event] | None:
        return _page(
            (e for e in self._t.in_order("events") if e.merchant_id == merchant_id),
            key=lambda e: e.id,
            created_at=lambda e: e.created_at,
            after=after,
            keep=lambda e: (
                (event_type is None or e.type == event_type) and (statuses is None or e.status in statuses)
            ),
            limit=limit,
        )

    def resends_due(self, now: int, limit: int) -> builtins.list[Event]:
        due = [e for e in self._t.in_order("events") if e.resend_at is not None and e.resend_at <= now]
        due.sort(key=lambda e: e.resend_at or 0)  # stable: in the order written within a millisecond
        return due[:limit]


class _Deliveries(_Repository):
    def add(self, delivery: Delivery) -> None:
        self._t.insert("deliveries", delivery.id, delivery)

    def list(self, event_id: str) -> builtins.list[Delivery]:
        attempts = [d for d in self._t.in_order("deliveries") if d.event_id == event_id]
        attempts.sort(key=lambda d: d.at)
        return attempts


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


class _Leases(_Repository):
    def take(self, kind: str, key: str, until: int) -> None:
        self._t.put("leases", (kind, key), until)

    def drop(self, kind: str, key: str) -> None:
        if self._t.get("leases", (kind, key)) is not None:
            self._t.delete("leases", (kind, key))

    def take_many(self, kind: str, leases: Sequence[tuple[str, int]]) -> None:
        for key, until in leases:
            self.take(kind, key, until)

    def drop_many(self, kind: str, keys: Sequence[str]) -> None:
        for key in keys:
            self.drop(kind, key)

    def held(self, kind: str, now: int) -> int:
        return sum(1 for (k, _), until in self._t.items("leases") if k == kind and until > now)

    def purge(self, before: int) -> int:
        old = [key for key, until in self._t.items("leases") if until < before]
        for key in old:
            self._t.delete("leases", key)
        return len(old)


class _Rates(_Repository):
    def buckets(self, key_id: str, width: int, since: int) -> builtins.list[tuple[int, int]]:
        counts: dict[int, int] = self._t.get("rates", (key_id, width)) or {}
        return sorted((start, hits) for start, hits in counts.items() if start >= since)

    def spans(
        self, key_ids: Sequence[str], spans: Sequence[tuple[int, int]]
    ) -> dict[str, builtins.list[builtins.list[tuple[int, int]]]]:
        return {key_id: [self.buckets(key_id, width, since) for width, since in spans] for key_id in key_ids}

    def add(self, key_id: str, width: int, start: int, hits: int = 1) -> None:
        counts = dict(self._t.get("rates", (key_id, width)) or {})
        counts[start] = counts.get(start, 0) + hits
        self._t.put("rates", (key_id, width), counts)

    def add_many(self, counts: Sequence[tuple[str, int, int, int]]) -> None:
        for key_id, width, start, hits in counts:
            self.add(key_id, width, start, hits)

    def purge(self, before: int) -> int:
        gone = 0
        for key, counts in builtins.list(self._t.items("rates")):
            kept = {start: hits for start, hits in counts.items() if start >= before}
            if len(kept) != len(counts):
                gone += len(counts) - len(kept)
                self._t.put("rates", key, kept)
        return gone


# --- operators, console sessions, the audit trail ---------------------------------------------------


class _Operators(_Repository):
    def get(self, operator_id: str) -> StoredOperator | None:
        operator: StoredOperator | None = self._t.get("operators", operator_id)
        return operator

    def by_hash(self, token_hash: str) -> StoredOperator | None:
        operator_id = self._t.get("operator_hashes", token_hash)
        return None if operator_id is None else self.get(operator_id)

    def put(self, operator: StoredOperator) -> None:
        old = self.get(operator.id)
        if old is not None and old.token_hash != operator.token_hash:
            self._t.delete("operator_hashes", old.token_hash)
        self._t.put("operators", operator.id, operator)
        self._t.put("operator_hashes", operator.token_hash, operator.id)

    def list(self) -> builtins.list[StoredOperator]:
        return sorted(self._t.in_order("operators"), key=lambda o: o.created_at)


class _Sessions(_Repository):
    def by_hash(self, token_hash: str) -> StoredSession | None:
        session: StoredSession | None = self._t.get("sessions", token_hash)
        return session

    def put(self, session: StoredSession) -> None:
        for key, old in builtins.list(self._t.items("sessions")):
            if old.id == session.id and key != session.token_hash:
                self._t.delete("sessions", key)
        self._t.put("sessions", session.token_hash, session)

    def _drop(self, keep: Callable[[StoredSession], bool]) -> int:
        gone = [key for key, session in self._t.items("sessions") if not keep(session)]
        for key in gone:
            self._t.delete("sessions", key)
        return len(gone)

    def delete(self, session_id: str) -> None:
        self._drop(lambda s: s.id != session_id)

    def end_all(self, operator_id: str) -> int:
        return self._drop(lambda s: s.operator_id != operator_id)

    def purge(self, *, seen_before: int, created_before: int) -> int:
        return self._drop(lambda s: s.last_seen_at >= seen_before and s.created_at >= created_before)


class _Audit(_Repository):
    """Append-only: there is no way to change or remove an entry."""

    def add(self, entry: StoredAuditEntry) -> None:
        self._t.insert(
            "audit",
            entry.id,
            attrs.evolve(
                entry,
                state_before=copy.deepcopy(entry.state_before),
                state_after=copy.deepcopy(entry.state_after),
            ),
        )

    def page(
        self, *, limit: int, after: str | None = None, subject: str | None = None
    ) -> builtins.list[StoredAuditEntry] | None:
        return _page(
            self._t.in_order("audit"),
            key=lambda e: e.id,
            created_at=lambda e: e.at,
            after=after,
            keep=lambda e: subject is None or e.subject == subject,
            limit=limit,
        )


class MemoryTransaction:
    """One unit of work over the store's tables: the repositories of ``ports.UnitOfWork``."""

    def __init__(self, tables: dict[str, dict[Any, Any]], *, writable: bool) -> None:
        self._tables = _Tables(tables, writable=writable)
        self.settings = _Settings(self._tables)
        self.merchants = _Merchants(self._tables)
        self.keys = _Keys(self._tables)
        self.limits = _Limits(self._tables)
        self.collections = _Collections(self._tables)
        self.payouts = _Payouts(self._tables)
        self.batches = _Batches(self._tables)
        self.ledger = _Ledger(self._tables)
        self.webhooks = _Webhooks(self._tables)
        self.outbox = _Outbox(self._tables)
        self.deliveries = _Deliveries(self._tables)
        self.idempotency = _Idempotency(self._tables)
        self.leases = _Leases(self._tables)
        self.rates = _Rates(self._tables)
        self.operators = _Operators(self._tables)
        self.sessions = _Sessions(self._tables)
        self.audit = _Audit(self._tables)

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

    def ping(self, timeout: float = 0.5) -> None:
        """A read under the store's lock, waiting at most ``timeout`` seconds for a writer."""
        if not self._lock.acquire(timeout=timeout):
            raise StoreUnavailableError(f"the store stayed locked for {timeout} s")
        try:
            MemoryTransaction(self._tables, writable=False).settings.get()
        finally:
            self._lock.release()

    def close(self) -> None:
        pass
