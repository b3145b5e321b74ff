"""One contract for the storage port, run against every adapter (MemoryStore, SqliteStore and, when a
PostgreSQL server is there (tests/conftest.py), PostgresStore).

Each test talks only to the ``Store``/``Transaction`` protocols, so a behaviour that differs between the
adapters fails on one of the two parameters.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import sqlite3
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import hypothesis
import hypothesis.strategies as st
import psycopg
import pytest

from paymentcore._domain.models import (
    NO_ENDPOINT,
    PAYOUT_TRANSITIONS,
    ApiKey,
    Balance,
    BatchMode,
    BatchTally,
    Collection,
    CollectionKind,
    CollectionStatus,
    Delivery,
    DeliveryStatus,
    Event,
    IdempotencyRecord,
    LedgerEntry,
    LedgerLeg,
    Merchant,
    MerchantStatus,
    Payout,
    PayoutBatch,
    PayoutLimits,
    PayoutStatus,
    Resolution,
    Scope,
    Settings,
    WebhookEndpoint,
)
from paymentcore._domain.queries import (
    SPENT_STATUSES,
    UNSPENT_STATUSES,
    collection_due_order,
    collection_is_due,
    counts_as_spent,
    event_is_due,
    payout_is_due,
    payouts_in_due_order,
)
from paymentcore.adapters.memory import MemoryStore
from paymentcore.adapters.sqlite import MIGRATIONS, SqliteStore
from paymentcore.ports import Store

NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z in milliseconds

# What each adapter raises for a duplicate primary key (memory: KeyError; SQL: the PRIMARY KEY).
DUPLICATE = (KeyError, sqlite3.IntegrityError, psycopg.IntegrityError)
# What each adapter raises for a negative balance (memory: ValueError; SQL: the CHECK constraint).
NEGATIVE = (ValueError, sqlite3.IntegrityError, psycopg.IntegrityError)


class Boom(Exception):
    """Raised on purpose inside a transaction."""


# --- record factories ---------------------------------------------------------------------------


def merchant(merchant_id: str = "mer_1", *, created_at: int = NOW) -> Merchant:
    return Merchant(
        id=merchant_id,
        name=f"Shop {merchant_id}",
        settlement_currency="XAF",
        status=MerchantStatus.APPROVED,
        collect_fee_ppm=15_000,
        payouts_enabled=True,
        blocked_providers=frozenset({"orange_cm", "mtn_cm"}),
        created_at=created_at,
    )


def api_key(key_id: str = "key_1", *, key_hash: str = "hash-1") -> ApiKey:
    return ApiKey(
        id=key_id,
        merchant_id="mer_1",
        key_hash=key_hash,
        scopes=frozenset({Scope.COLLECT, Scope.DISBURSE}),
        per_minute=30,
        per_hour=600,
        revoked=False,
        created_at=NOW,
    )


def collection(
    reference: str,
    *,
    status: CollectionStatus = CollectionStatus.PENDING,
    next_check_at: int | None = None,
    expires_at: int = NOW + 300_000,
    phone: str | None = None,
    submitted_at: int | None = None,
) -> Collection:
    return Collection(
        reference=reference,
        merchant_id="mer_1",
        kind=CollectionKind.CHARGE,
        status=status,
        requested_amount=1500,
        requested_currency="XAF",
        description="Order 42",
        merchant_reference=None,
        created_at=NOW - 60_000,
        expires_at=expires_at,
        updated_at=NOW - 60_000,
        phone=phone,
        submitted_at=submitted_at,
        next_check_at=next_check_at,
    )


def full_collection(reference: str = "REQ-1-FULL") -> Collection:
    """A settled collection with every optional field set."""
    return Collection(
        reference=reference,
        merchant_id="mer_1",
        kind=CollectionKind.CHECKOUT,
        status=CollectionStatus.SUCCESS,
        requested_amount=1500,
        requested_currency="XAF",
        description="Order 43 — café",
        merchant_reference="order-43",
        created_at=NOW,
        expires_at=NOW + 300_000,
        updated_at=NOW + 5_000,
        method="MOBILE_MONEY",
        provider="mtn_cm",
        phone="670000000",
        country="CM",
        submitted_at=NOW + 1_000,
        next_check_at=NOW + 2_000,
        charged_amount=1523,
        charged_currency="XAF",
        settled_amount=1500,
        settled_currency="XAF",
        fee_amount=23,
        failure_category=None,
        failure_reason=None,
    )


def payout(
    reference: str,
    *,
    status: PayoutStatus = PayoutStatus.PENDING,
    amount: int = 1000,
    merchant_id: str = "mer_1",
    currency: str = "XAF",
    created_at: int = NOW,
    awaiting_review: bool = False,
    next_check_at: int | None = None,
    batch_id: str | None = None,
    batch_index: int | None = None,
) -> Payout:
    return Payout(
        reference=reference,
        merchant_id=merchant_id,
        status=status,
        amount=amount,
        currency=currency,
        phone="670000000",
        country="CM",
        provider="mtn_cm",
        recipient_name=None,
        merchant_reference=None,
        awaiting_review=awaiting_review,
        created_at=created_at,
        updated_at=created_at,
        next_check_at=next_check_at,
        batch_id=batch_id,
        batch_index=batch_index,
    )


def entry(
    entry_id: str, *, created_at: int = NOW, merchant_id: str = "mer_1", currency: str = "XAF"
) -> LedgerEntry:
    return LedgerEntry(
        id=entry_id,
        merchant_id=merchant_id,
        currency=currency,
        kind="credit",
        reference=f"REQ-{entry_id}",
        legs=(
            LedgerLeg("network", -1523),
            LedgerLeg(f"merchant:{merchant_id}:available", 1500),
            LedgerLeg("fees", 23),
        ),
        created_at=created_at,
    )


def webhook(merchant_id: str = "mer_1") -> WebhookEndpoint:
    return WebhookEndpoint(
        merchant_id=merchant_id,
        url="https://hooks.example.com/paymentcore?x=1",
        secret_encrypted="gAAAAA-secret",
        events="v2",
        is_active=False,
        disabled_reason="10 consecutive failures",
        updated_at=NOW,
        consecutive_failures=10,
        ever_succeeded=True,
    )


def event(
    event_id: str,
    *,
    merchant_id: str = "mer_1",
    created_at: int = NOW,
    status: DeliveryStatus = DeliveryStatus.PENDING,
    next_attempt_at: int = NOW,
    data: dict[str, Any] | None = None,
) -> Event:
    return Event(
        id=event_id,
        merchant_id=merchant_id,
        type="collect.succeeded",
        data=data if data is not None else {"reference": event_id},
        created_at=created_at,
        status=status,
        next_attempt_at=next_attempt_at,
    )


def idem(key: str, *, created_at: int = NOW, merchant_id: str = "mer_1") -> IdempotencyRecord:
    return IdempotencyRecord(
        merchant_id=merchant_id,
        key=key,
        fingerprint="f" * 64,
        created_at=created_at,
        status_code=201,
        body='{"reference":"PO-1"}',
    )


def refs(records: list[Collection] | list[Payout]) -> list[str]:
    return [r.reference for r in records]


def floats_in(value: object) -> list[object]:
    """Every float anywhere inside a nested structure of dicts and lists."""
    if isinstance(value, float):
        return [value]
    if isinstance(value, dict):
        return [f for item in value.values() for f in floats_in(item)]
    if isinstance(value, list | tuple):
        return [f for item in value for f in floats_in(item)]
    return []


# --- settings, merchants, keys, limits ----------------------------------------------------------


def test_settings_default_then_put_replaces(store: Store) -> None:
    with store.read() as tx:
        assert tx.settings.get() == Settings()
        assert tx.settings.get().api_enabled is True
    closed = Settings(api_enabled=False, payouts_enabled=False, closed_currencies=frozenset({"XAF", "GHS"}))
    with store.transaction() as tx:
        tx.settings.put(closed)
    with store.read() as tx:
        got = tx.settings.get()
    assert got == closed
    assert isinstance(got.closed_currencies, frozenset)
    assert got.api_enabled is False and got.payouts_enabled is False
    reopened = Settings(api_enabled=True, payouts_enabled=False, closed_currencies=frozenset())
    with store.transaction() as tx:
        tx.settings.put(reopened)
    with store.read() as tx:
        assert tx.settings.get() == reopened


def test_merchant_round_trip_update_and_list_order(store: Store) -> None:
    late = merchant("mer_a", created_at=NOW + 10)
    early_b = merchant("mer_b", created_at=NOW + 1)
    early_a = attrs.evolve(merchant("mer_0", created_at=NOW), status=MerchantStatus.NOT_APPROVED)
    with store.transaction() as tx:
        assert tx.merchants.get("mer_a") is None
        for m in (late, early_b, early_a):
            tx.merchants.put(m)
    with store.read() as tx:
        got = tx.merchants.get("mer_a")
        assert got == late
        assert got is not None and got.blocked_providers == frozenset({"mtn_cm", "orange_cm"})
        assert tx.merchants.get("mer_0") == early_a
        assert [m.id for m in tx.merchants.list()] == ["mer_0", "mer_b", "mer_a"]
        assert tx.merchants.get("mer_missing") is None
    suspended = attrs.evolve(late, status=MerchantStatus.SUSPENDED, blocked_providers=frozenset(), name="X")
    with store.transaction() as tx:
        tx.merchants.put(suspended)
    with store.read() as tx:
        assert tx.merchants.get("mer_a") == suspended
        assert len(tx.merchants.list()) == 3


def test_api_key_round_trip_by_id_and_by_hash(store: Store) -> None:
    both = api_key("key_1", key_hash="hash-1")
    one = attrs.evolve(api_key("key_2", key_hash="hash-2"), scopes=frozenset({Scope.COLLECT}), revoked=True)
    with store.transaction() as tx:
        tx.keys.put(both)
        tx.keys.put(one)
    with store.read() as tx:
        assert tx.keys.get("key_1") == both
        assert tx.keys.by_hash("hash-1") == both
        got = tx.keys.by_hash("hash-2")
        assert got == one
        assert got is not None and got.revoked is True
        assert got.scopes == frozenset({Scope.COLLECT})
        assert all(isinstance(scope, Scope) for scope in got.scopes)
        assert tx.keys.get("key_3") is None
        assert tx.keys.by_hash("hash-3") is None
    revoked = attrs.evolve(both, revoked=True, per_minute=1)
    with store.transaction() as tx:
        tx.keys.put(revoked)
    with store.read() as tx:
        assert tx.keys.get("key_1") == revoked
        assert tx.keys.by_hash("hash-1") == revoked


def test_key_by_hash_never_answers_for_a_replaced_hash(store: Store) -> None:
    key = api_key("key_1", key_hash="hash-old")
    with store.transaction() as tx:
        tx.keys.put(key)
    with store.transaction() as tx:
        tx.keys.put(attrs.evolve(key, key_hash="hash-new"))
    with store.read() as tx:
        assert tx.keys.by_hash("hash-new") == attrs.evolve(key, key_hash="hash-new")
        assert tx.keys.by_hash("hash-old") is None


def test_payout_limits_round_trip_with_none_fields(store: Store) -> None:
    unset = PayoutLimits("mer_1", "XAF")
    partial = PayoutLimits(
        "mer_1", "GHS", per_transaction=None, per_day=50_000, per_week=None, review_threshold=0
    )
    with store.transaction() as tx:
        assert tx.limits.get("mer_1", "XAF") is None
        tx.limits.put(unset)
        tx.limits.put(partial)
    with store.read() as tx:
        got = tx.limits.get("mer_1", "XAF")
        assert got == unset
        assert got is not None and got.per_transaction is None and got.review_threshold is None
        assert tx.limits.get("mer_1", "GHS") == partial
        assert tx.limits.get("mer_2", "XAF") is None
    full = PayoutLimits(
        "mer_1", "XAF", per_transaction=10_000, per_day=20_000, per_week=30_000, review_threshold=5
    )
    with store.transaction() as tx:
        tx.limits.put(full)
    with store.read() as tx:
        assert tx.limits.get("mer_1", "XAF") == full
        assert tx.limits.get("mer_1", "GHS") == partial


# --- collections ----------------------------------------------------------------------------------


def test_collection_round_trip_insert_and_update(store: Store) -> None:
    full = full_collection()
    bare = collection("REQ-2-BARE")
    with store.transaction() as tx:
        tx.collections.add(full)
        tx.collections.add(bare)
    with store.read() as tx:
        assert tx.collections.get(full.reference) == full
        assert tx.collections.get(bare.reference) == bare
        assert tx.collections.get("REQ-missing") is None
    processing = attrs.evolve(
        bare, status=CollectionStatus.PROCESSING, provider="orange_cm", phone="690000000", updated_at=NOW + 9
    )
    with store.transaction() as tx:
        tx.collections.update(processing)
    with store.read() as tx:
        assert tx.collections.get(bare.reference) == processing


def test_collection_duplicate_insert_raises_and_keeps_the_first(store: Store) -> None:
    first = full_collection("REQ-DUP")
    with store.transaction() as tx:
        tx.collections.add(first)
    with pytest.raises(DUPLICATE), store.transaction() as tx:
        tx.collections.add(attrs.evolve(first, description="second", status=CollectionStatus.FAILED))
    with store.read() as tx:
        assert tx.collections.get("REQ-DUP") == first


def test_collection_update_of_missing_row_raises_key_error(store: Store) -> None:
    with pytest.raises(KeyError), store.transaction() as tx:
        tx.collections.update(collection("REQ-NOPE"))
    with store.read() as tx:
        assert tx.collections.get("REQ-NOPE") is None


def test_due_collections_selection_order_and_limit(store: Store) -> None:
    open_ones = [
        collection("REQ-a-check", next_check_at=NOW - 10),
        collection("REQ-b-expired", expires_at=NOW - 5),  # an unpaid checkout past its expiry
        collection("REQ-c-exact", status=CollectionStatus.PROCESSING, next_check_at=NOW),
        collection("REQ-d-both", next_check_at=NOW - 30, expires_at=NOW - 20),
        collection("REQ-e-tie", next_check_at=NOW - 10),
    ]
    not_due = [
        collection("REQ-f-future", next_check_at=NOW + 1, expires_at=NOW + 2),
        collection("REQ-g-unscheduled", next_check_at=None),
        # a prompt is out: expiry no longer makes it due, only its next check does
        collection(
            "REQ-j-paying",
            status=CollectionStatus.PROCESSING,
            submitted_at=NOW - 60,
            next_check_at=NOW + 500,
            expires_at=NOW - 50,
        ),
        collection(
            "REQ-h-success", status=CollectionStatus.SUCCESS, next_check_at=NOW - 100, expires_at=NOW - 1
        ),
        collection(
            "REQ-i-failed", status=CollectionStatus.FAILED, next_check_at=NOW - 100, expires_at=NOW - 1
        ),
    ]
    with store.transaction() as tx:
        for c in not_due + open_ones:
            tx.collections.add(c)
    expected = ["REQ-d-both", "REQ-a-check", "REQ-e-tie", "REQ-b-expired", "REQ-c-exact"]
    with store.read() as tx:
        assert refs(tx.collections.due(NOW, 100)) == expected
        assert refs(tx.collections.due(NOW, 2)) == expected[:2]
        assert tx.collections.due(NOW, 100)[0] == open_ones[3]
        assert refs(tx.collections.due(NOW - 31, 100)) == []
        assert refs(tx.collections.due(NOW + 1, 100)) == [*expected, "REQ-f-future"]


def test_count_prompts_window_is_inclusive_and_per_phone(store: Store) -> None:
    rows = [
        collection("REQ-1", phone="670000001", submitted_at=NOW - 300_000),  # exactly at the window start
        collection("REQ-2", phone="670000001", submitted_at=NOW - 1, status=CollectionStatus.FAILED),
        collection("REQ-3", phone="670000001", submitted_at=NOW - 300_001),  # just before the window
        collection("REQ-4", phone="670000001", submitted_at=None),  # never prompted
        collection("REQ-5", phone="670000002", submitted_at=NOW),  # another number
    ]
    with store.transaction() as tx:
        for c in rows:
            tx.collections.add(c)
    with store.read() as tx:
        assert tx.collections.prompts_since("670000001", NOW - 300_000) == 2
        assert tx.collections.prompts_since("670000001", NOW - 300_001) == 3
        assert tx.collections.prompts_since("670000001", NOW) == 0
        assert tx.collections.prompts_since("670000002", NOW) == 1
        assert tx.collections.prompts_since("670000009", 0) == 0


# --- payouts --------------------------------------------------------------------------------------


def test_payout_round_trip_insert_and_update(store: Store) -> None:
    pending = payout("PO-1", next_check_at=NOW)
    with store.transaction() as tx:
        tx.payouts.add(pending)
    with store.read() as tx:
        assert tx.payouts.get("PO-1") == pending
        assert tx.payouts.get("PO-2") is None
    paid = attrs.evolve(
        pending,
        status=PayoutStatus.PAID,
        recipient_name="Awa",
        merchant_reference="inv-9",
        provider_reference="SBX123",
        status_reason="ok",
        sent_at=NOW + 1,
        next_check_at=None,
        resolution=Resolution.POSTED,
        awaiting_review=True,
        updated_at=NOW + 2,
    )
    with store.transaction() as tx:
        tx.payouts.update(paid)
    with store.read() as tx:
        got = tx.payouts.get("PO-1")
    assert got == paid
    assert got is not None and got.resolution is Resolution.POSTED and got.awaiting_review is True


def test_payout_duplicate_insert_raises_and_keeps_the_first(store: Store) -> None:
    first = payout("PO-DUP", amount=700)
    with store.transaction() as tx:
        tx.payouts.add(first)
    with pytest.raises(DUPLICATE), store.transaction() as tx:
        tx.payouts.add(attrs.evolve(first, amount=900, status=PayoutStatus.SENT))
    with store.read() as tx:
        assert tx.payouts.get("PO-DUP") == first


def test_payouts_read_many_at_once_then_one_by_one_in_the_same_transaction(store: Store) -> None:
    with store.transaction() as tx:
        for ref in ("PO-M1", "PO-M2", "PO-M3"):
            tx.payouts.add(payout(ref))
    with store.transaction() as tx:
        found = tx.payouts.get_many(["PO-M3", "PO-NONE", "PO-M1"])
        assert sorted(found) == ["PO-M1", "PO-M3"] and found["PO-M1"] == payout("PO-M1")
        sent = attrs.evolve(found["PO-M1"], status=PayoutStatus.SENT, next_check_at=NOW + 5)
        tx.payouts.update(sent)
        assert tx.payouts.get("PO-M1") == sent  # what was read at once stays current after an update
        assert tx.payouts.get("PO-M2") == payout("PO-M2")  # one not read at once is read as ever
        assert tx.payouts.get_many([]) == {}
    with store.read() as tx:
        assert tx.payouts.get("PO-M1") == sent


def test_events_read_many_at_once_stay_current_after_an_update_and_a_deferral(store: Store) -> None:
    """A batch of webhook events is read in one statement; an update keeps what was read current, and
    a deferral of the merchant's due events (an endpoint that failed) is seen by the reads after it."""
    with store.transaction() as tx:
        for event_id in ("evt_m1", "evt_m2", "evt_m3"):
            tx.outbox.add(event(event_id))
    with store.transaction() as tx:
        found = tx.outbox.get_many(["evt_m3", "evt_none", "evt_m1"])
        assert sorted(found) == ["evt_m1", "evt_m3"] and found["evt_m1"] == event("evt_m1")
        tried = attrs.evolve(found["evt_m1"], attempts=1, next_attempt_at=NOW + 5)
        tx.outbox.update(tried)
        assert tx.outbox.get("evt_m1") == tried
        assert tx.outbox.defer("mer_1", NOW + 60_000) == 3  # all three were due before then
        assert tx.outbox.get("evt_m3") == event("evt_m3", next_attempt_at=NOW + 60_000)
        assert tx.outbox.get_many([]) == {}
    with store.read() as tx:
        assert tx.outbox.get("evt_m1") == attrs.evolve(tried, next_attempt_at=NOW + 60_000)


def test_webhook_endpoints_read_once_or_many_at_once_are_what_the_unit_last_wrote(store: Store) -> None:
    endpoint = webhook("mer_1")
    with store.transaction() as tx:
        assert tx.webhooks.get("mer_1") is None
        tx.webhooks.put(endpoint)
        assert tx.webhooks.get("mer_1") == endpoint
        failing = attrs.evolve(endpoint, consecutive_failures=3)
        tx.webhooks.put(failing)
        assert tx.webhooks.get("mer_1") == failing
    with store.read() as tx:
        assert tx.webhooks.get("mer_1") == failing
    with store.transaction() as tx:
        tx.webhooks.put(webhook("mer_2"))
    with store.transaction() as tx:
        found = tx.webhooks.get_many(["mer_2", "mer_none", "mer_1"])
        assert found == {"mer_1": failing, "mer_2": webhook("mer_2")}
        assert tx.webhooks.get("mer_none") is None
        tx.webhooks.put(webhook("mer_none"))  # registered within the transaction: seen by its reads
        assert tx.webhooks.get("mer_none") == webhook("mer_none")
        assert tx.webhooks.get_many([]) == {}


def test_leases_taken_and_dropped_many_at_once_as_one_by_one(store: Store) -> None:
    with store.transaction() as tx:
        tx.leases.take("payouts", "PO-1", NOW - 10)
        tx.leases.take_many("payouts", [("PO-1", NOW + 10), ("PO-2", NOW + 10), ("PO-3", NOW + 10)])
        tx.leases.take_many("deliveries", [("PO-1", NOW + 10)])  # another kind: a lease of its own
        tx.leases.take_many("payouts", [])
        tx.leases.take_many("collections", [("REQ-1", NOW - 10), ("REQ-1", NOW + 10)])  # the last counts
    with store.read() as tx:
        assert tx.leases.held("collections", NOW) == 1
        assert tx.leases.held("payouts", NOW) == 3  # PO-1's lease replaced, not added
        assert tx.leases.held("deliveries", NOW) == 1
    with store.transaction() as tx:
        tx.leases.drop_many("payouts", ["PO-1", "PO-3", "PO-unknown"])
        tx.leases.drop_many("payouts", [])
    with store.read() as tx:
        assert tx.leases.held("payouts", NOW) == 1
        assert tx.leases.held("deliveries", NOW) == 1  # only the kind named goes


def test_a_payouts_fixed_columns_keep_their_stored_values(store: Store) -> None:
    """What a payout was created with (merchant, amount, currency, phone, ...) never changes: the SQL
    stores do not write those columns again on an update, and the reference store (memory) refuses an
    update that would change one, so a service that tried is caught by the tests on any store."""
    with store.transaction() as tx:
        tx.payouts.add(payout("PO-FIX", amount=1000))
    changed = attrs.evolve(payout("PO-FIX", amount=1000), amount=5, status=PayoutStatus.SENT)
    try:
        with store.transaction() as tx:
            tx.payouts.update(changed)
    except ValueError as refused:
        assert isinstance(store, MemoryStore) and "amount" in str(refused)
    with store.read() as tx:
        stored = tx.payouts.get("PO-FIX")
    assert stored is not None and stored.amount == 1000


def test_payout_update_of_missing_row_raises_key_error(store: Store) -> None:
    with pytest.raises(KeyError), store.transaction() as tx:
        tx.payouts.update(payout("PO-NOPE"))
    with store.read() as tx:
        assert tx.payouts.get("PO-NOPE") is None


def test_due_payouts_selection_order_and_limit(store: Store) -> None:
    rows = [
        payout("PO-a", next_check_at=NOW - 10),
        payout("PO-b", status=PayoutStatus.SENT, next_check_at=NOW - 20),
        payout("PO-c", next_check_at=NOW),
        payout("PO-d", status=PayoutStatus.SENT, next_check_at=NOW - 10),
        payout("PO-held", awaiting_review=True, next_check_at=NOW - 100),
        payout("PO-unscheduled", next_check_at=None),
        payout("PO-later", status=PayoutStatus.SENT, next_check_at=NOW + 1),
        payout("PO-paid", status=PayoutStatus.PAID, next_check_at=NOW - 100),
        payout("PO-failed", status=PayoutStatus.FAILED, next_check_at=NOW - 100),
        payout("PO-rejected", status=PayoutStatus.REJECTED, next_check_at=NOW - 100),
    ]
    with store.transaction() as tx:
        for p in rows:
            tx.payouts.add(p)
    with store.read() as tx:
        assert refs(tx.payouts.due(NOW, 100)) == ["PO-b", "PO-a", "PO-d", "PO-c"]
        assert refs(tx.payouts.due(NOW, 3)) == ["PO-b", "PO-a", "PO-d"]
        assert tx.payouts.due(NOW, 100)[0] == rows[1]
        assert refs(tx.payouts.due(NOW + 1, 100)) == ["PO-b", "PO-a", "PO-d", "PO-c", "PO-later"]
        assert refs(tx.payouts.due(NOW - 21, 100)) == []


def test_many_payouts_and_ledger_entries_are_written_in_order_in_one_call(store: Store) -> None:
    payouts = [payout(f"PO-{n}", batch_id="bat_1", batch_index=n) for n in range(5)]
    entries = [entry(f"led_{n}") for n in range(5)]
    with store.transaction() as tx:
        tx.payouts.add_many(payouts)
        tx.ledger.append_many(entries)
    with store.read() as tx:
        assert [tx.payouts.get(p.reference) for p in payouts] == payouts
        assert tx.ledger.entries("mer_1", "XAF") == entries  # the order written
        page = tx.payouts.page("mer_1", limit=10)
        assert page is not None and refs(page) == [f"PO-{n}" for n in reversed(range(5))]
    with pytest.raises(DUPLICATE), store.transaction() as tx:
        tx.payouts.add_many([payout("PO-new"), payout("PO-3")])
    with store.read() as tx:
        assert tx.payouts.get("PO-new") is None  # the whole unit of work rolled back


def test_due_payouts_take_turns_between_merchants(store: Store) -> None:
    """A merchant's 1,000 due payouts take one place per round, so another merchant's payout, due a
    moment later, is listed second, not 1,001st (each merchant's own payouts stay in their order)."""
    with store.transaction() as tx:
        for index in range(6):
            tx.payouts.add(payout(f"PO-big-{index}", merchant_id="mer_big", next_check_at=NOW - 100 + index))
        for name, at in (("PO-small-1", NOW - 50), ("PO-small-2", NOW - 40)):  # to another provider
            small = payout(name, merchant_id="mer_small", next_check_at=at)
            tx.payouts.add(attrs.evolve(small, phone="690000000", provider="orange_cm"))
        tx.payouts.add(payout("PO-third", merchant_id="mer_third", next_check_at=NOW))
    with store.read() as tx:
        assert refs(tx.payouts.due(NOW, 100)) == [
            "PO-big-0",
            "PO-small-1",
            "PO-third",
            "PO-big-1",
            "PO-small-2",
            "PO-big-2",
            "PO-big-3",
            "PO-big-4",
            "PO-big-5",
        ]
        assert refs(tx.payouts.due(NOW, 2)) == ["PO-big-0", "PO-small-1"]
        # at most 2 of a lane (a provider), the first 2 in that order: mer_small's go to Orange
        assert refs(tx.payouts.due(NOW, 100, per_lane=2)) == [
            "PO-big-0",
            "PO-small-1",
            "PO-third",
            "PO-small-2",
        ]
        assert refs(tx.payouts.due(NOW, 3, per_lane=2)) == ["PO-big-0", "PO-small-1", "PO-third"]
        assert refs(tx.payouts.due(NOW - 45, 100)) == ["PO-big-0", "PO-small-1", "PO-big-1"] + [
            f"PO-big-{index}" for index in range(2, 6)
        ]


def test_batches_round_trip_and_their_payouts_are_read_in_item_order(store: Store) -> None:
    batch = PayoutBatch(
        id="bat_1",
        merchant_id="mer_1",
        mode=BatchMode.EACH,
        item_count=5,
        created_at=NOW,
        refusals={
            "1": {"merchantReference": "r1", "code": "AMOUNT_PRECISION", "details": {"x": Decimal("1.5")}}
        },
    )
    statuses = [PayoutStatus.PAID, PayoutStatus.SENT, PayoutStatus.PENDING, PayoutStatus.FAILED]
    with store.transaction() as tx:
        tx.batches.add(batch)
        # written out of item order: the reads order them by batch_index
        for index, status in zip((4, 0, 3, 2), statuses, strict=True):
            tx.payouts.add(
                payout(
                    f"PO-{index}",
                    status=status,
                    amount=100 * (index + 1),
                    batch_id="bat_1",
                    batch_index=index,
                )
            )
        tx.payouts.add(payout("PO-other", batch_id="bat_2", batch_index=0))
        tx.payouts.add(payout("PO-single"))
    with pytest.raises(DUPLICATE), store.transaction() as tx:
        tx.batches.add(batch)
    with store.read() as tx:
        assert tx.batches.get("bat_1") == batch
        assert tx.batches.get("bat_nope") is None
        assert refs(tx.payouts.in_batch("bat_1", after=None, limit=10)) == ["PO-0", "PO-2", "PO-3", "PO-4"]
        assert refs(tx.payouts.in_batch("bat_1", after=0, limit=2)) == ["PO-2", "PO-3"]
        assert refs(tx.payouts.in_batch("bat_1", after=4, limit=2)) == []
        tally = sorted(tx.payouts.batch_tally("bat_1"), key=lambda row: row.status.value)
        assert tally == [
            BatchTally(PayoutStatus.FAILED, "XAF", 1, 300),
            BatchTally(PayoutStatus.PAID, "XAF", 1, 500),
            BatchTally(PayoutStatus.PENDING, "XAF", 1, 400),
            BatchTally(PayoutStatus.SENT, "XAF", 1, 100),
        ]
        assert tx.payouts.batch_open("bat_1") == 2  # PENDING and SENT
        assert tx.payouts.batch_tally("bat_none") == [] and tx.payouts.batch_open("bat_none") == 0
        page = tx.payouts.page("mer_1", limit=10, batch_id="bat_1")
        assert page is not None and sorted(refs(page)) == ["PO-0", "PO-2", "PO-3", "PO-4"]
    done = attrs.evolve(batch, completed_at=NOW + 5)
    with store.transaction() as tx:
        tx.batches.update(done)
        tx.payouts.update(
            payout("PO-3", status=PayoutStatus.PAID, amount=400, batch_id="bat_1", batch_index=3)
        )
    with store.read() as tx:
        assert tx.batches.get("bat_1") == done
        assert tx.payouts.batch_open("bat_1") == 1
    with pytest.raises(KeyError), store.transaction() as tx:
        tx.batches.update(attrs.evolve(batch, id="bat_nope"))


def test_spent_counts_live_and_failed_payouts_from_since_inclusive(store: Store) -> None:
    rows = [
        payout("PO-pending", status=PayoutStatus.PENDING, amount=1, created_at=NOW),
        payout("PO-sent", status=PayoutStatus.SENT, amount=10, created_at=NOW + 5),
        payout("PO-paid", status=PayoutStatus.PAID, amount=100, created_at=NOW + 6),
        payout("PO-failed", status=PayoutStatus.FAILED, amount=1000, created_at=NOW + 7),
        payout("PO-rejected", status=PayoutStatus.REJECTED, amount=10_000, created_at=NOW + 8),
        payout("PO-old", status=PayoutStatus.PAID, amount=100_000, created_at=NOW - 1),
        payout("PO-other-merchant", amount=1_000_000, merchant_id="mer_2", created_at=NOW),
        payout("PO-other-currency", amount=10_000_000, currency="XOF", created_at=NOW),
    ]
    with store.transaction() as tx:
        assert tx.payouts.spent("mer_1", "XAF", 0) == 0
        for p in rows:
            tx.payouts.add(p)
    with store.read() as tx:
        assert tx.payouts.spent("mer_1", "XAF", NOW) == 1111
        assert tx.payouts.spent("mer_1", "XAF", NOW - 1) == 101_111
        assert tx.payouts.spent("mer_1", "XAF", NOW + 1) == 1110
        assert tx.payouts.spent("mer_1", "XAF", NOW + 7) == 1000
        assert tx.payouts.spent("mer_1", "XAF", NOW + 8) == 0
        assert tx.payouts.spent("mer_2", "XAF", 0) == 1_000_000
        assert tx.payouts.spent("mer_1", "XOF", 0) == 10_000_000


# --- balances and the journal ---------------------------------------------------------------------


def test_balance_defaults_put_and_list_sorted_by_currency(store: Store) -> None:
    with store.read() as tx:
        assert tx.ledger.balance("mer_1", "XAF") == Balance("mer_1", "XAF", 0, 0, 0, 0)
        assert tx.ledger.balances("mer_1") == []
    balances = [
        Balance("mer_1", "XOF", available=5, reserved=0, paid_out=0, credited=5),
        Balance("mer_1", "GHS", available=1, reserved=2, paid_out=3, credited=6),
        Balance("mer_1", "XAF", available=4000, reserved=1000, paid_out=500, credited=5500),
        Balance("mer_2", "AAA", available=9, reserved=0, paid_out=0, credited=9),
    ]
    with store.transaction() as tx:
        for b in balances:
            tx.ledger.put_balance(b)
    with store.read() as tx:
        assert tx.ledger.balance("mer_1", "GHS") == balances[1]
        assert [b.currency for b in tx.ledger.balances("mer_1")] == ["GHS", "XAF", "XOF"]
        assert tx.ledger.balances("mer_1") == [balances[1], balances[2], balances[0]]
        assert tx.ledger.balances("mer_2") == [balances[3]]
        assert tx.ledger.balance("mer_2", "XAF") == Balance("mer_2", "XAF")
    moved = Balance("mer_1", "XAF", available=3000, reserved=2000, paid_out=500, credited=5500)
    with store.transaction() as tx:
        tx.ledger.put_balance(moved)
    with store.read() as tx:
        assert tx.ledger.balance("mer_1", "XAF") == moved
        assert len(tx.ledger.balances("mer_1")) == 3


def test_negative_balance_is_refused_and_nothing_is_written(store: Store) -> None:
    with pytest.raises(NEGATIVE), store.transaction() as tx:
        tx.ledger.put_balance(Balance("mer_1", "XAF", available=-1, reserved=0, paid_out=0, credited=-1))
    with store.read() as tx:
        assert tx.ledger.balances("mer_1") == []
        assert tx.ledger.balance("mer_1", "XAF") == Balance("mer_1", "XAF")
    kept = Balance("mer_1", "XAF", available=10, reserved=0, paid_out=0, credited=10)
    with store.transaction() as tx:
        tx.ledger.put_balance(kept)
    with pytest.raises(NEGATIVE), store.transaction() as tx:
        tx.ledger.append(entry("led_overdraw"))
        tx.ledger.put_balance(attrs.evolve(kept, available=-1, reserved=11))
    with store.read() as tx:
        assert tx.ledger.balance("mer_1", "XAF") == kept
        assert tx.ledger.entries("mer_1", "XAF") == []


def test_ledger_entries_round_trip_and_order(store: Store) -> None:
    entries = [
        entry("led_c", created_at=NOW + 1),
        entry("led_b", created_at=NOW),
        entry("led_a", created_at=NOW + 1),
        entry("led_other_currency", created_at=NOW, currency="XOF"),
        entry("led_other_merchant", created_at=NOW, merchant_id="mer_2"),
    ]
    with store.transaction() as tx:
        for e in entries:
            tx.ledger.append(e)
    with store.read() as tx:
        listed = tx.ledger.entries("mer_1", "XAF")
    # oldest first; within one millisecond, in the order they were written
    assert [e.id for e in listed] == ["led_b", "led_c", "led_a"]
    assert listed == [entries[1], entries[0], entries[2]]
    legs = listed[0].legs
    assert isinstance(legs, tuple)
    assert legs == (
        LedgerLeg("network", -1523),
        LedgerLeg("merchant:mer_1:available", 1500),
        LedgerLeg("fees", 23),
    )
    assert all(isinstance(leg, LedgerLeg) for leg in legs)
    with store.read() as tx:
        assert [e.id for e in tx.ledger.entries("mer_1", "XOF")] == ["led_other_currency"]
        assert tx.ledger.entries("mer_3", "XAF") == []
    with pytest.raises(DUPLICATE), store.transaction() as tx:
        tx.ledger.append(attrs.evolve(entries[0], kind="post"))
    with store.read() as tx:
        assert [e for e in tx.ledger.entries("mer_1", "XAF") if e.id == "led_c"] == [entries[0]]


# --- webhooks and the outbox ----------------------------------------------------------------------


def test_webhook_endpoint_round_trip_and_replace(store: Store) -> None:
    endpoint = webhook()
    with store.transaction() as tx:
        assert tx.webhooks.get("mer_1") is None
        tx.webhooks.put(endpoint)
    with store.read() as tx:
        got = tx.webhooks.get("mer_1")
    assert got == endpoint
    assert got is not None and got.ever_succeeded is True and got.is_active is False
    active = attrs.evolve(
        endpoint, is_active=True, disabled_reason=None, consecutive_failures=0, events="legacy"
    )
    with store.transaction() as tx:
        tx.webhooks.put(active)
    with store.read() as tx:
        assert tx.webhooks.get("mer_1") == active
        assert tx.webhooks.get("mer_2") is None


def test_event_round_trip_keeps_nested_decimals_exact(store: Store) -> None:
    data: dict[str, Any] = {
        "reference": "REQ-1",
        "amount": Decimal("12.50"),
        "settledAmount": Decimal("1500"),
        "fee": Decimal("0.05"),
        "nested": {"lines": [{"amount": Decimal("12.50")}, {"amount": Decimal("1500")}], "count": 2},
        "ok": True,
        "none": None,
        "text": "café ✓",
    }
    original = event("evt_1", data=data)
    with store.transaction() as tx:
        tx.outbox.add(original)
    with store.read() as tx:
        got = tx.outbox.get("evt_1")
        assert tx.outbox.get("evt_2") is None
    assert got is not None
    assert got == original
    assert floats_in(got.data) == []
    for amount in (got.data["amount"], got.data["nested"]["lines"][0]["amount"]):
        assert isinstance(amount, Decimal)
        assert str(amount) == "12.50"
    assert got.data["fee"] == Decimal("0.05") and isinstance(got.data["fee"], Decimal)
    for amount in (got.data["settledAmount"], got.data["nested"]["lines"][1]["amount"]):
        assert isinstance(amount, Decimal), type(amount)
        assert amount == Decimal("1500")
        assert str(amount) == "1500"
    assert got.data["ok"] is True and got.data["none"] is None and got.data["text"] == "café ✓"


def test_an_event_to_deliver_is_skipped_when_no_active_endpoint_listens(store: Store) -> None:
    """``add_to_deliver`` stores the event PENDING for a merchant whose endpoint is active, and SKIPPED
    with NO_ENDPOINT for one without an endpoint or with a disabled one (so no worker's round is spent
    on it); its other fields as given, and a second insert of the id raises."""
    active = attrs.evolve(webhook("mer_on"), is_active=True, disabled_reason=None, consecutive_failures=0)
    with store.transaction() as tx:
        tx.webhooks.put(active)
        tx.webhooks.put(webhook("mer_off"))  # disabled after ten failures
        for merchant_id in ("mer_on", "mer_off", "mer_none"):
            tx.outbox.add_to_deliver(event(f"evt_{merchant_id}", merchant_id=merchant_id))
    with store.read() as tx:
        found = tx.outbox.get_many(["evt_mer_on", "evt_mer_off", "evt_mer_none"])
    assert found["evt_mer_on"] == event("evt_mer_on", merchant_id="mer_on")
    for merchant_id in ("mer_off", "mer_none"):
        skipped = attrs.evolve(
            event(f"evt_{merchant_id}", merchant_id=merchant_id),
            status=DeliveryStatus.SKIPPED,
            last_error=NO_ENDPOINT,
        )
        assert found[f"evt_{merchant_id}"] == skipped
    with store.read() as tx:
        assert [e.id for e in tx.outbox.due(NOW, 10)] == ["evt_mer_on"]
    with pytest.raises(DUPLICATE), store.transaction() as tx:
        tx.outbox.add_to_deliver(event("evt_mer_none", merchant_id="mer_none"))


def test_event_update_duplicate_and_missing(store: Store) -> None:
    first = event("evt_1")
    with store.transaction() as tx:
        tx.outbox.add(first)
    delivered = attrs.evolve(
        first, status=DeliveryStatus.DELIVERED, attempts=2, last_error="503", delivered_at=NOW + 10
    )
    with store.transaction() as tx:
        tx.outbox.update(delivered)
    with store.read() as tx:
        assert tx.outbox.get("evt_1") == delivered
    with pytest.raises(DUPLICATE), store.transaction() as tx:
        tx.outbox.add(attrs.evolve(first, type="disburse.sent"))
    with store.read() as tx:
        assert tx.outbox.get("evt_1") == delivered
    with pytest.raises(KeyError), store.transaction() as tx:
        tx.outbox.update(event("evt_missing"))
    with store.read() as tx:
        assert tx.outbox.get("evt_missing") is None


def test_due_events_only_pending_and_due_oldest_first(store: Store) -> None:
    rows = [
        event("evt_c", created_at=NOW - 1, next_attempt_at=NOW),
        event("evt_b", created_at=NOW - 3, next_attempt_at=NOW - 1),
        event("evt_a", created_at=NOW - 3, next_attempt_at=NOW - 100, merchant_id="mer_2"),
        event("evt_0_later", created_at=NOW - 9, next_attempt_at=NOW + 1),
        event("evt_delivered", created_at=NOW - 9, status=DeliveryStatus.DELIVERED, next_attempt_at=0),
        event("evt_failed", created_at=NOW - 9, status=DeliveryStatus.FAILED, next_attempt_at=0),
        event("evt_skipped", created_at=NOW - 9, status=DeliveryStatus.SKIPPED, next_attempt_at=0),
    ]
    with store.transaction() as tx:
        for e in rows:
            tx.outbox.add(e)
    with store.read() as tx:
        # oldest first; within one millisecond, in the order they were written
        assert [e.id for e in tx.outbox.due(NOW, 100)] == ["evt_b", "evt_a", "evt_c"]
        assert [e.id for e in tx.outbox.due(NOW, 2)] == ["evt_b", "evt_a"]
        assert [e.id for e in tx.outbox.due(NOW + 1, 100)] == ["evt_0_later", "evt_b", "evt_a", "evt_c"]
        assert [e.id for e in tx.outbox.due(NOW - 2, 100)] == ["evt_a"]
        assert tx.outbox.due(NOW, 100)[0] == rows[1]


def test_list_events_per_merchant_in_creation_order(store: Store) -> None:
    rows = [
        event("evt_z", created_at=NOW),
        event("evt_y", created_at=NOW + 1, status=DeliveryStatus.DELIVERED),
        event("evt_x", created_at=NOW + 1, status=DeliveryStatus.FAILED),
        event("evt_w", created_at=NOW - 1, merchant_id="mer_2"),
    ]
    with store.transaction() as tx:
        for e in rows:
            tx.outbox.add(e)
    with store.read() as tx:
        assert tx.outbox.list("mer_1") == [rows[0], rows[1], rows[2]]  # ties: in the order written
        assert [e.id for e in tx.outbox.list("mer_2")] == ["evt_w"]
        assert tx.outbox.list("mer_3") == []


# --- idempotency ----------------------------------------------------------------------------------


def test_idempotency_get_put_replace_delete(store: Store) -> None:
    running = IdempotencyRecord("mer_1", "key-1", "a" * 64, NOW)
    with store.transaction() as tx:
        assert tx.idempotency.get("mer_1", "key-1") is None
        tx.idempotency.put(running)
    with store.read() as tx:
        got = tx.idempotency.get("mer_1", "key-1")
        assert got == running
        assert got is not None and got.status_code is None and got.body is None
        assert tx.idempotency.get("mer_2", "key-1") is None
    done = attrs.evolve(running, status_code=201, body='{"amount":12.50}')
    with store.transaction() as tx:
        tx.idempotency.put(done)
        tx.idempotency.put(idem("key-1", merchant_id="mer_2"))
    with store.read() as tx:
        assert tx.idempotency.get("mer_1", "key-1") == done
    with store.transaction() as tx:
        tx.idempotency.delete("mer_1", "key-1")
        tx.idempotency.delete("mer_1", "never-there")
        assert tx.idempotency.get("mer_1", "key-1") is None
    with store.read() as tx:
        assert tx.idempotency.get("mer_1", "key-1") is None
        assert tx.idempotency.get("mer_2", "key-1") == idem("key-1", merchant_id="mer_2")


def test_purge_idempotency_removes_only_older_records_and_counts_them(store: Store) -> None:
    records = [
        idem("k-old-1", created_at=NOW - 2),
        idem("k-old-2", created_at=NOW - 1, merchant_id="mer_2"),
        idem("k-boundary", created_at=NOW),
        idem("k-new", created_at=NOW + 1),
    ]
    with store.transaction() as tx:
        for r in records:
            tx.idempotency.put(r)
    with store.transaction() as tx:
        assert tx.idempotency.purge(NOW) == 2
    with store.read() as tx:
        assert tx.idempotency.get("mer_1", "k-old-1") is None
        assert tx.idempotency.get("mer_2", "k-old-2") is None
        assert tx.idempotency.get("mer_1", "k-boundary") == records[2]
        assert tx.idempotency.get("mer_1", "k-new") == records[3]
    with store.transaction() as tx:
        assert tx.idempotency.purge(NOW) == 0
        assert tx.idempotency.purge(NOW + 2) == 2
    with store.read() as tx:
        assert tx.idempotency.get("mer_1", "k-new") is None


# --- transactions ---------------------------------------------------------------------------------


def _write_one_of_everything(store: Store) -> None:
    """Inside an open transaction: a write to every table, then a failure."""
    with store.transaction() as tx:
        tx.settings.put(Settings(api_enabled=False))
        tx.merchants.put(merchant("mer_rb"))
        tx.keys.put(api_key("key_rb", key_hash="hash-rb"))
        tx.limits.put(PayoutLimits("mer_rb", "XAF", per_day=1))
        tx.collections.add(collection("REQ-RB", next_check_at=NOW))
        tx.payouts.add(payout("PO-RB", merchant_id="mer_rb", next_check_at=NOW))
        tx.ledger.put_balance(Balance("mer_rb", "XAF", available=5, credited=5))
        tx.ledger.append(entry("led_rb", merchant_id="mer_rb"))
        tx.webhooks.put(webhook("mer_rb"))
        tx.outbox.add(event("evt_rb", merchant_id="mer_rb"))
        tx.idempotency.put(idem("key-rb", merchant_id="mer_rb"))
        # inside the transaction, its own writes are visible
        assert tx.merchants.get("mer_rb") == merchant("mer_rb")
        assert tx.ledger.balance("mer_rb", "XAF").available == 5
        raise Boom("after several writes")


def test_exception_inside_a_transaction_rolls_every_write_back(store: Store) -> None:
    with pytest.raises(Boom):
        _write_one_of_everything(store)
    with store.read() as tx:
        assert tx.settings.get() == Settings()
        assert tx.merchants.get("mer_rb") is None
        assert tx.merchants.list() == []
        assert tx.keys.get("key_rb") is None
        assert tx.keys.by_hash("hash-rb") is None
        assert tx.limits.get("mer_rb", "XAF") is None
        assert tx.collections.get("REQ-RB") is None
        assert tx.collections.due(NOW, 10) == []
        assert tx.payouts.get("PO-RB") is None
        assert tx.payouts.due(NOW, 10) == []
        assert tx.payouts.spent("mer_rb", "XAF", 0) == 0
        assert tx.ledger.balances("mer_rb") == []
        assert tx.ledger.balance("mer_rb", "XAF") == Balance("mer_rb", "XAF")
        assert tx.ledger.entries("mer_rb", "XAF") == []
        assert tx.webhooks.get("mer_rb") is None
        assert tx.outbox.get("evt_rb") is None
        assert tx.outbox.due(NOW, 10) == []
        assert tx.idempotency.get("mer_rb", "key-rb") is None
    # the store is still usable after the rollback
    with store.transaction() as tx:
        tx.merchants.put(merchant("mer_after"))
    with store.read() as tx:
        assert [m.id for m in tx.merchants.list()] == ["mer_after"]


def test_rollback_restores_updated_rows(store: Store) -> None:
    first_payout = payout("PO-1")
    first_event = event("evt_1")
    first_balance = Balance("mer_1", "XAF", available=7, credited=7)
    with store.transaction() as tx:
        tx.payouts.add(first_payout)
        tx.outbox.add(first_event)
        tx.ledger.put_balance(first_balance)
        tx.idempotency.put(idem("key-1"))
    with pytest.raises(Boom), store.transaction() as tx:
        tx.payouts.update(attrs.evolve(first_payout, status=PayoutStatus.SENT))
        tx.outbox.update(attrs.evolve(first_event, status=DeliveryStatus.DELIVERED))
        tx.ledger.put_balance(attrs.evolve(first_balance, available=0, reserved=7))
        tx.idempotency.delete("mer_1", "key-1")
        assert tx.idempotency.purge(NOW + 1) == 0
        raise Boom
    with store.read() as tx:
        assert tx.payouts.get("PO-1") == first_payout
        assert tx.outbox.get("evt_1") == first_event
        assert tx.ledger.balance("mer_1", "XAF") == first_balance
        assert tx.idempotency.get("mer_1", "key-1") == idem("key-1")


def test_read_sees_committed_data_in_this_and_another_thread(store: Store) -> None:
    with store.transaction() as tx:
        tx.merchants.put(merchant("mer_1"))
        tx.ledger.put_balance(Balance("mer_1", "XAF", available=3, credited=3))
    with store.read() as tx:
        assert tx.merchants.get("mer_1") == merchant("mer_1")
    seen: list[object] = []

    def reader() -> None:
        with store.read() as tx:
            seen.append(tx.merchants.get("mer_1"))
            seen.append(tx.ledger.balance("mer_1", "XAF"))

    thread = threading.Thread(target=reader)
    thread.start()
    thread.join(timeout=30)
    assert seen == [merchant("mer_1"), Balance("mer_1", "XAF", available=3, credited=3)]


def test_a_write_through_a_read_view_never_persists(store: Store) -> None:
    with contextlib.suppress(RuntimeError), store.read() as tx:
        tx.merchants.put(merchant("mer_ro"))
    with store.read() as tx:
        assert tx.merchants.get("mer_ro") is None


# --- the adapters agree where the port leaves the choice open ---------------------------------------


def test_both_adapters_list_merchants_created_in_one_millisecond_alike(tmp_path: Path) -> None:
    stores: list[Store] = [MemoryStore(), SqliteStore(tmp_path / "agree.db")]
    try:
        listed: list[list[str]] = []
        for each in stores:
            with each.transaction() as tx:
                for merchant_id in ("mer_b", "mer_c", "mer_a"):
                    tx.merchants.put(merchant(merchant_id, created_at=NOW))
            with each.read() as tx:
                listed.append([m.id for m in tx.merchants.list()])
        assert sorted(listed[0]) == sorted(listed[1]) == ["mer_a", "mer_b", "mer_c"]
        assert listed[0] == listed[1]
    finally:
        for each in stores:
            each.close()


# --- "counts as spent" and "is due" are defined once, in paymentcore._domain.queries -----------------------

HOUR = 3_600_000
# the text of every schema migration as existing SQLite files ran it: a migration never changes
MIGRATION_SHA256 = (
    "ae7418912ed9b03b35c323c38f6b1867cbf129c1950f194d02d429889ab9b783",
    "3774d8f165d94746f9325bd937acf71c17d9cde18b4705b505557adae75da641",
)

PAYOUT_ROWS = st.lists(
    st.tuples(
        st.sampled_from(list(PayoutStatus)),
        st.integers(-3 * HOUR, 3 * HOUR),  # created_at, across hour boundaries (NOW starts an hour)
        st.integers(1, 10_000),  # amount
        st.sampled_from(["mer_a", "mer_b"]),
        st.sampled_from(["XAF", "XOF"]),
        st.booleans(),  # awaiting_review
        st.none() | st.integers(-1_000, 1_000),  # next_check_at
        st.none() | st.sampled_from(list(PayoutStatus)),  # a later status, when the move is allowed
    ),
    max_size=12,
)
COLLECTION_ROWS = st.lists(
    st.tuples(
        st.sampled_from(list(CollectionStatus)),
        st.none() | st.integers(-1_000, 1_000),  # next_check_at
        st.integers(-1_000, 1_000),  # expires_at
        st.none() | st.integers(-1_000, 1_000),  # submitted_at
    ),
    max_size=12,
)
EVENT_ROWS = st.lists(
    st.tuples(
        st.sampled_from(list(DeliveryStatus)),
        st.integers(-1_000, 1_000),  # created_at
        st.integers(-1_000, 1_000),  # next_attempt_at
    ),
    max_size=12,
)


def test_spent_and_due_select_what_the_one_definition_selects(store: Store) -> None:
    """On random records, ``payouts.spent`` and every ``due`` agree with the predicates of _queries.

    MemoryStore filters with those predicates and SqliteStore runs SQL generated from the same status
    sets (the spend-bucket triggers included: payouts are inserted, then moved along allowed
    transitions), so both adapters answering like the predicates means the two agree.
    """
    runs = itertools.count()
    # every record written so far: the store keeps the earlier examples' rows, so `due` sees them too
    payouts: dict[str, Payout] = {}
    collections: dict[str, Collection] = {}
    events: dict[str, Event] = {}

    @hypothesis.settings(max_examples=40, deadline=None)
    @hypothesis.given(
        payout_rows=PAYOUT_ROWS,
        collection_rows=COLLECTION_ROWS,
        event_rows=EVENT_ROWS,
        now=st.integers(-1_000, 1_000),
        since=st.integers(-4 * HOUR, 4 * HOUR),
        limit=st.integers(1, 30),
    )
    def check(
        payout_rows: list[tuple[PayoutStatus, int, int, str, str, bool, int | None, PayoutStatus | None]],
        collection_rows: list[tuple[CollectionStatus, int | None, int, int | None]],
        event_rows: list[tuple[DeliveryStatus, int, int]],
        now: int,
        since: int,
        limit: int,
    ) -> None:
        run = next(runs)
        created = [
            payout(
                f"PO-{run}-{i}",
                status=status,
                created_at=NOW + at,
                amount=amount,
                merchant_id=f"{merchant_id}-{run}",
                currency=currency,
                awaiting_review=held,
                next_check_at=None if check_at is None else NOW + check_at,
            )
            for i, (status, at, amount, merchant_id, currency, held, check_at, _) in enumerate(payout_rows)
        ]
        new_collections = [
            collection(
                f"REQ-{run}-{i}",
                status=status,
                next_check_at=None if check_at is None else NOW + check_at,
                expires_at=NOW + expires,
                submitted_at=None if submitted is None else NOW + submitted,
            )
            for i, (status, check_at, expires, submitted) in enumerate(collection_rows)
        ]
        new_events = [
            event(f"evt_{run}_{i}", status=status, created_at=NOW + at, next_attempt_at=NOW + attempt_at)
            for i, (status, at, attempt_at) in enumerate(event_rows)
        ]
        with store.transaction() as tx:
            for p in created:
                tx.payouts.add(p)
            for c in new_collections:
                tx.collections.add(c)
            for e in new_events:
                tx.outbox.add(e)
        moved = [
            attrs.evolve(p, status=later)
            if later is not None and (p.status, later) in PAYOUT_TRANSITIONS
            else p
            for p, (*_, later) in zip(created, payout_rows, strict=True)
        ]
        with store.transaction() as tx:
            for before, after in zip(created, moved, strict=True):
                if after is not before:
                    tx.payouts.update(after)
        payouts.update((p.reference, p) for p in moved)
        collections.update((c.reference, c) for c in new_collections)
        events.update((e.id, e) for e in new_events)

        at = NOW + now
        with store.read() as tx:
            for merchant_id in (f"mer_a-{run}", f"mer_b-{run}"):
                for currency in ("XAF", "XOF"):
                    for start in (NOW + since, 0):
                        expected = sum(
                            p.amount
                            for p in moved
                            if p.merchant_id == merchant_id
                            and p.currency == currency
                            and p.created_at >= start
                            and counts_as_spent(p)
                        )
                        assert tx.payouts.spent(merchant_id, currency, start) == expected
            due_payouts = payouts_in_due_order(p for p in payouts.values() if payout_is_due(p, at))
            assert tx.payouts.due(at, limit) == due_payouts[:limit]
            due_collections = sorted(
                (c for c in collections.values() if collection_is_due(c, at)), key=collection_due_order
            )
            assert tx.collections.due(at, limit) == due_collections[:limit]
            # oldest first; within one millisecond, in the order written (`events` keeps that order)
            due_events = sorted(
                (e for e in events.values() if event_is_due(e, at)), key=lambda e: e.created_at
            )
            assert tx.outbox.due(at, limit) == due_events[:limit]

    check()


def test_no_allowed_transition_makes_a_payout_count_again() -> None:
    """The spend-bucket triggers take a payout back when it stops counting and never add it again."""
    assert frozenset(PayoutStatus) == SPENT_STATUSES | UNSPENT_STATUSES
    assert not SPENT_STATUSES & UNSPENT_STATUSES
    back = [(a, b) for a, b in PAYOUT_TRANSITIONS if a in UNSPENT_STATUSES and b in SPENT_STATUSES]
    assert back == [], "the spend-bucket triggers need a migration adding a payout that counts again"


def test_the_generated_migrations_are_the_ones_existing_files_ran() -> None:
    """Migration 2 is generated from SPENT_STATUSES; its text must stay what existing files ran.

    Changing which payouts count as spent changes the generated triggers here, and this test says so:
    leave migration 2 as it was and add a migration that recreates the triggers and rebuilds
    payout_spend, so files already at version 2 change too.
    """
    assert "WHEN new.status != 'REJECTED'" in MIGRATIONS[1]
    assert "WHEN old.status != 'REJECTED' AND new.status = 'REJECTED'" in MIGRATIONS[1]
    digests = tuple(hashlib.sha256(script.encode()).hexdigest() for script in MIGRATIONS)
    assert digests[: len(MIGRATION_SHA256)] == MIGRATION_SHA256


def test_the_bulk_payouts_migration_is_numbered_alike_and_an_older_file_gains_it(tmp_path: Path) -> None:
    """Migration 9 (bulk payouts) has the same number on both engines, and a file from before it is
    brought forward with its payouts kept, each of no batch."""
    from paymentcore.adapters.postgres import MIGRATIONS as POSTGRES_MIGRATIONS

    (sqlite_number,) = [
        i for i, script in enumerate(MIGRATIONS, 1) if "CREATE TABLE payout_batches" in script
    ]
    (postgres_number,) = [
        i for i, script in enumerate(POSTGRES_MIGRATIONS, 1) if "CREATE TABLE payout_batches" in script
    ]
    assert sqlite_number == postgres_number
    path = tmp_path / "before-bulk.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for number, script in enumerate(MIGRATIONS[: sqlite_number - 1], start=1):
            conn.executescript(script)
            conn.execute(f"PRAGMA user_version = {number}")
        columns = [c for c in _columns(conn, "payouts") if c not in ("batch_id", "batch_index")]
        conn.execute(
            f"INSERT INTO payouts ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})",
            [_old_payout_value(c) for c in columns],
        )
    finally:
        conn.close()
    store = SqliteStore(path)
    try:
        assert store.schema_version() == len(MIGRATIONS)
        with store.read() as tx:
            kept = tx.payouts.get("PO-old")
            assert kept is not None and kept.batch_id is None and kept.batch_index is None
            assert tx.batches.get("bat_x") is None
    finally:
        store.close()


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")]


def _old_payout_value(column: str) -> Any:
    values: dict[str, Any] = {
        "reference": "PO-old", "merchant_id": "mer_1", "status": "PAID", "amount": 100, "currency": "XAF",
        "phone": "670000000", "country": "CM", "provider": "mtn_cm", "awaiting_review": 0,
        "created_at": NOW, "updated_at": NOW, "resolution": "POSTED",
    }  # fmt: skip
    return values.get(column)


def test_a_file_made_before_the_repositories_opens_and_counts_alike(tmp_path: Path) -> None:
    """A file migrated by the literal SQL of migrations 1 and 2 (as written before they were generated)."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.executescript(MIGRATIONS[0])
        conn.executescript(
            """
            CREATE TABLE payout_spend (
                merchant_id TEXT NOT NULL, currency TEXT NOT NULL, hour INTEGER NOT NULL,
                amount INTEGER NOT NULL CHECK (amount >= 0), PRIMARY KEY (merchant_id, currency, hour)
            );
            CREATE TRIGGER payout_spend_insert AFTER INSERT ON payouts WHEN new.status != 'REJECTED'
            BEGIN
                INSERT INTO payout_spend (merchant_id, currency, hour, amount)
                    VALUES (new.merchant_id, new.currency, new.created_at / 3600000, new.amount)
                    ON CONFLICT (merchant_id, currency, hour) DO UPDATE SET amount = amount + excluded.amount;
            END;
            CREATE TRIGGER payout_spend_rejected AFTER UPDATE OF status ON payouts
                WHEN old.status != 'REJECTED' AND new.status = 'REJECTED'
            BEGIN
                UPDATE payout_spend SET amount = amount - old.amount
                    WHERE merchant_id = old.merchant_id AND currency = old.currency
                    AND hour = old.created_at / 3600000;
            END;
            PRAGMA user_version = 2;
            """
        )
    finally:
        conn.close()
    store = SqliteStore(path)
    try:
        assert store.schema_version() == len(MIGRATIONS)
        with store.transaction() as tx:
            tx.payouts.add(payout("PO-1", amount=10, created_at=NOW - 2 * HOUR))
            tx.payouts.add(payout("PO-2", amount=20, created_at=NOW - HOUR, status=PayoutStatus.SENT))
            tx.payouts.add(payout("PO-3", amount=40, created_at=NOW - 1))
        with store.transaction() as tx:
            tx.payouts.update(payout("PO-3", amount=40, created_at=NOW - 1, status=PayoutStatus.REJECTED))
        with store.read() as tx:
            assert tx.payouts.spent("mer_1", "XAF", NOW - 3 * HOUR) == 30
            assert tx.payouts.spent("mer_1", "XAF", NOW - HOUR - 1) == 20
    finally:
        store.close()


# --- pages: one merchant's records newest first (the merchant records API) -------------------------


def test_payout_pages_are_newest_first_and_ties_go_to_the_last_written(store: Store) -> None:
    rows = [
        payout("PO-a", created_at=NOW),
        payout("PO-c", created_at=NOW + 1, status=PayoutStatus.PAID),
        payout("PO-b", created_at=NOW + 1),  # written after PO-c in the same millisecond: before it
        payout("PO-other", created_at=NOW + 5, merchant_id="mer_2"),
        payout("PO-d", created_at=NOW - 7, status=PayoutStatus.PAID),
        attrs.evolve(payout("PO-e", created_at=NOW + 1), merchant_reference="order-9"),
    ]
    with store.transaction() as tx:
        for row in rows:
            tx.payouts.add(row)
    with store.read() as tx:
        listed = tx.payouts.page("mer_1", limit=100)
        assert listed is not None
        assert [p.reference for p in listed] == ["PO-e", "PO-b", "PO-c", "PO-a", "PO-d"]
        assert listed[-1] == rows[4]
        assert refs(tx.payouts.page("mer_1", limit=2) or []) == ["PO-e", "PO-b"]
        assert refs(tx.payouts.page("mer_1", limit=2, after="PO-b") or []) == ["PO-c", "PO-a"]
        assert refs(tx.payouts.page("mer_1", limit=2, after="PO-a") or []) == ["PO-d"]
        assert tx.payouts.page("mer_1", limit=2, after="PO-d") == []
        paid = tx.payouts.page("mer_1", limit=100, status=PayoutStatus.PAID)
        assert refs(paid or []) == ["PO-c", "PO-d"]
        # the cursor need not match the filter: it only marks the place
        assert refs(tx.payouts.page("mer_1", limit=100, after="PO-e", status=PayoutStatus.PAID) or []) == [
            "PO-c",
            "PO-d",
        ]
        assert refs(tx.payouts.page("mer_1", limit=100, merchant_reference="order-9") or []) == ["PO-e"]
        paid_order = tx.payouts.page(
            "mer_1", limit=100, merchant_reference="order-9", status=PayoutStatus.PAID
        )
        assert paid_order == []
        assert tx.payouts.page("mer_1", limit=5, after="PO-other") is None  # another merchant's
        assert tx.payouts.page("mer_1", limit=5, after="PO-nope") is None
        assert refs(tx.payouts.page("mer_2", limit=5) or []) == ["PO-other"]
        assert tx.payouts.page("mer_3", limit=5) == []


def test_an_update_keeps_a_records_place_in_its_pages(store: Store) -> None:
    with store.transaction() as tx:
        for reference in ("PO-1", "PO-2", "PO-3"):
            tx.payouts.add(payout(reference))
            tx.collections.add(collection(reference.replace("PO", "REQ")))
            tx.outbox.add(event(reference.replace("PO", "evt")))
    with store.transaction() as tx:  # the oldest of each changes
        tx.payouts.update(payout("PO-1", status=PayoutStatus.SENT))
        tx.collections.update(collection("REQ-1", status=CollectionStatus.PROCESSING))
        tx.outbox.update(event("evt-1", status=DeliveryStatus.DELIVERED))
    with store.read() as tx:
        assert refs(tx.payouts.page("mer_1", limit=5) or []) == ["PO-3", "PO-2", "PO-1"]
        assert refs(tx.collections.page("mer_1", limit=5) or []) == ["REQ-3", "REQ-2", "REQ-1"]
        assert [e.id for e in tx.outbox.page("mer_1", limit=5) or []] == ["evt-3", "evt-2", "evt-1"]


def test_collection_pages_filter_and_place(store: Store) -> None:
    rows = [
        attrs.evolve(collection("REQ-a"), merchant_reference="cart-1"),
        attrs.evolve(collection("REQ-b"), status=CollectionStatus.FAILED),
        attrs.evolve(collection("REQ-c"), created_at=NOW - 120_000, merchant_reference="cart-1"),
        attrs.evolve(collection("REQ-x"), merchant_id="mer_2"),
        full_collection("REQ-d"),  # created at NOW: the newest
    ]
    with store.transaction() as tx:
        for row in rows:
            tx.collections.add(row)
    with store.read() as tx:
        listed = tx.collections.page("mer_1", limit=100)
        assert listed is not None and listed[0] == rows[4]
        assert refs(listed) == ["REQ-d", "REQ-b", "REQ-a", "REQ-c"]
        assert refs(tx.collections.page("mer_1", limit=1, after="REQ-b") or []) == ["REQ-a"]
        assert refs(tx.collections.page("mer_1", limit=9, status=CollectionStatus.PENDING) or []) == [
            "REQ-a",
            "REQ-c",
        ]
        assert refs(tx.collections.page("mer_1", limit=9, merchant_reference="cart-1") or []) == [
            "REQ-a",
            "REQ-c",
        ]
        assert refs(tx.collections.page("mer_1", limit=9, status=CollectionStatus.SUCCESS) or []) == ["REQ-d"]
        assert tx.collections.page("mer_1", limit=9, after="REQ-x") is None
        assert tx.collections.page("mer_2", limit=9, after="REQ-a") is None


def test_ledger_pages_per_account_newest_first(store: Store) -> None:
    entries = [
        entry("led_c", created_at=NOW + 1),
        entry("led_b", created_at=NOW),
        entry("led_a", created_at=NOW + 1),
        entry("led_other_currency", created_at=NOW + 9, currency="XOF"),
        entry("led_other_merchant", created_at=NOW + 9, merchant_id="mer_2"),
    ]
    with store.transaction() as tx:
        for e in entries:
            tx.ledger.append(e)
    with store.read() as tx:
        listed = tx.ledger.page("mer_1", "XAF", limit=10)
        assert listed is not None and [e.id for e in listed] == ["led_a", "led_c", "led_b"]
        # newest first is the journal's own order reversed
        assert listed == tx.ledger.entries("mer_1", "XAF")[::-1]
        assert listed[1] == entries[0]
        assert [e.id for e in tx.ledger.page("mer_1", "XAF", limit=1, after="led_a") or []] == ["led_c"]
        assert tx.ledger.page("mer_1", "XAF", limit=1, after="led_b") == []
        assert tx.ledger.page("mer_1", "XAF", limit=1, after="led_other_currency") is None
        assert tx.ledger.page("mer_1", "XAF", limit=1, after="led_other_merchant") is None
        assert [e.id for e in tx.ledger.page("mer_1", "XOF", limit=5) or []] == ["led_other_currency"]


def test_event_pages_filter_by_type_and_statuses(store: Store) -> None:
    rows = [
        event("evt_a"),
        attrs.evolve(event("evt_b", status=DeliveryStatus.FAILED), type="disburse.sent"),
        event("evt_c", status=DeliveryStatus.SKIPPED),
        event("evt_d", status=DeliveryStatus.DELIVERED, created_at=NOW + 1),
        event("evt_x", merchant_id="mer_2"),
    ]
    with store.transaction() as tx:
        for row in rows:
            tx.outbox.add(row)
    failed = frozenset({DeliveryStatus.FAILED, DeliveryStatus.SKIPPED})
    with store.read() as tx:
        assert [e.id for e in tx.outbox.page("mer_1", limit=9) or []] == ["evt_d", "evt_c", "evt_b", "evt_a"]
        assert [e.id for e in tx.outbox.page("mer_1", limit=9, statuses=failed) or []] == ["evt_c", "evt_b"]
        assert [e.id for e in tx.outbox.page("mer_1", limit=9, event_type="disburse.sent") or []] == ["evt_b"]
        only = tx.outbox.page("mer_1", limit=9, event_type="collect.succeeded", statuses=failed)
        assert [e.id for e in only or []] == ["evt_c"]
        assert tx.outbox.page("mer_1", limit=9, statuses=frozenset()) == []
        assert [e.id for e in tx.outbox.page("mer_1", limit=2, after="evt_c") or []] == ["evt_b", "evt_a"]
        assert tx.outbox.page("mer_1", limit=2, after="evt_x") is None
        assert tx.outbox.page("mer_1", limit=9)[-1] == rows[0]  # type: ignore[index]


def test_event_resend_fields_round_trip_and_resends_due(store: Store) -> None:
    rows = [
        attrs.evolve(event("evt_a"), resend_at=NOW + 5),
        attrs.evolve(event("evt_b", status=DeliveryStatus.FAILED), resend_at=NOW - 1, redeliveries=2),
        attrs.evolve(
            event("evt_c", status=DeliveryStatus.DELIVERED), resend_at=NOW - 1, sent_as="payout.paid"
        ),
        event("evt_d"),
    ]
    with store.transaction() as tx:
        for row in rows:
            tx.outbox.add(row)
    with store.read() as tx:
        assert tx.outbox.get("evt_c") == rows[2]
        assert tx.outbox.get("evt_d") == rows[3]
        assert (rows[3].redeliveries, rows[3].sent_as, rows[3].resend_at) == (0, None, None)
        # the earliest first; ties in the order written
        assert [e.id for e in tx.outbox.resends_due(NOW, 10)] == ["evt_b", "evt_c"]
        assert [e.id for e in tx.outbox.resends_due(NOW + 5, 10)] == ["evt_b", "evt_c", "evt_a"]
        assert [e.id for e in tx.outbox.resends_due(NOW + 5, 1)] == ["evt_b"]
        assert tx.outbox.resends_due(NOW - 2, 10) == []
    with store.transaction() as tx:
        tx.outbox.update(attrs.evolve(rows[1], resend_at=None, redeliveries=3))
    with store.read() as tx:
        assert [e.id for e in tx.outbox.resends_due(NOW, 10)] == ["evt_c"]
        assert tx.outbox.get("evt_b") == attrs.evolve(rows[1], resend_at=None, redeliveries=3)


def test_deliveries_are_kept_per_event_oldest_first(store: Store) -> None:
    attempts = [
        Delivery("dlv_2", "evt_1", NOW + 10, "collect.succeeded", 200, None, 12),
        Delivery("dlv_1", "evt_1", NOW, "payment.succeeded", None, "timed out", 10_000),
        Delivery("dlv_3", "evt_1", NOW + 10, "collect.succeeded", 503, "HTTP 503", 0, resent=True),
        Delivery("dlv_4", "evt_2", NOW, "disburse.sent", 500, "HTTP 500", 7),
    ]
    with store.transaction() as tx:
        for attempt in attempts:
            tx.deliveries.add(attempt)
    with store.read() as tx:
        assert tx.deliveries.list("evt_1") == [attempts[1], attempts[0], attempts[2]]
        assert tx.deliveries.list("evt_2") == [attempts[3]]
        assert tx.deliveries.list("evt_3") == []
    with pytest.raises(DUPLICATE), store.transaction() as tx:
        tx.deliveries.add(attrs.evolve(attempts[0], response_status=418))
    with store.read() as tx:
        assert tx.deliveries.list("evt_1")[1] == attempts[0]


def test_a_file_from_before_the_records_api_keeps_its_events(tmp_path: Path) -> None:
    """Events written before the migration that added delivery records read back with no resend."""
    path = tmp_path / "before.db"
    mine = next(i for i, script in enumerate(MIGRATIONS) if "CREATE TABLE deliveries" in script)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for script in MIGRATIONS[:mine]:
            conn.executescript(script)
        conn.execute(
            "INSERT INTO events (id, merchant_id, type, data, created_at, status, attempts, next_attempt_at)"
            " VALUES ('evt_old', 'mer_1', 'collect.succeeded', ?, ?, 'FAILED', 9, 0)",
            ('{"reference":"REQ-1"}', NOW),
        )
        conn.execute(f"PRAGMA user_version = {mine}")
    finally:
        conn.close()
    store = SqliteStore(path)
    try:
        assert store.schema_version() == len(MIGRATIONS)
        with store.read() as tx:
            old = tx.outbox.get("evt_old")
            assert old is not None and old.attempts == 9 and old.status is DeliveryStatus.FAILED
            assert (old.redeliveries, old.sent_as, old.resend_at) == (0, None, None)
            assert tx.deliveries.list("evt_old") == []
            assert [e.id for e in tx.outbox.page("mer_1", limit=5) or []] == ["evt_old"]
    finally:
        store.close()


# --- balances moved in one step, and the rate-limit counters ---------------------------------------


def test_move_adds_in_one_step_and_never_goes_below_zero(store: Store) -> None:
    with store.transaction() as tx:
        assert tx.ledger.move("mer_1", "XAF", available=10, credited=10) == Balance(
            "mer_1", "XAF", available=10, credited=10
        )
        assert tx.ledger.move("mer_1", "XAF", available=-4, reserved=4) == Balance(
            "mer_1", "XAF", available=6, reserved=4, credited=10
        )
        assert tx.ledger.move("mer_1", "XAF", available=-7, reserved=7) is None  # only 6 available
        assert tx.ledger.move("mer_1", "XAF", reserved=-4, paid_out=4) == Balance(
            "mer_1", "XAF", available=6, paid_out=4, credited=10
        )
        assert tx.ledger.move("mer_2", "XAF", available=-1, reserved=1) is None  # no balance at all
    with store.read() as tx:
        moved = Balance("mer_1", "XAF", available=6, paid_out=4, credited=10)
        assert tx.ledger.balance("mer_1", "XAF") == moved
        assert tx.ledger.balances("mer_2") == []  # a refused move creates nothing


def test_shift_moves_held_money_and_a_refused_one_writes_nothing_of_its_unit(store: Store) -> None:
    with store.transaction() as tx:
        tx.ledger.move("mer_1", "XAF", available=10, credited=10)
        tx.ledger.move("mer_1", "XAF", available=-6, reserved=6)
    with store.transaction() as tx:
        assert tx.ledger.shift("mer_1", "XAF", reserved=-4, paid_out=4) is True
        assert tx.ledger.shift("mer_1", "XAF", reserved=-2, available=2) is True
    shifted = Balance("mer_1", "XAF", available=6, paid_out=4, credited=10)
    with store.read() as tx:
        assert tx.ledger.balance("mer_1", "XAF") == shifted
    # more than the reservation holds, or no balance at all: refused at once (False) or, where the store
    # checks its shifts with the unit's end (PostgreSQL), there, and the unit fails as a whole
    for merchant in ("mer_1", "mer_2"):
        try:
            with store.transaction() as tx:
                tx.ledger.move("mer_1", "XAF", available=-1, reserved=1)  # a change the refusal undoes
                refused = not tx.ledger.shift(merchant, "XAF", reserved=-5, paid_out=5)
                if refused:
                    raise LookupError("refused at once")
        except (LookupError, KeyError):  # KeyError: refused with the unit's end
            pass
        else:
            raise AssertionError(f"a shift {merchant}'s balance does not hold was written")
    with store.read() as tx:
        assert tx.ledger.balance("mer_1", "XAF") == shifted
        assert tx.ledger.balances("mer_2") == []


def test_a_unit_that_goes_on_after_its_refused_write_commits_nothing(store: Store) -> None:
    """Where a refused write fails its unit at once (the memory store, SQLite) there is nothing to go on
    with; where it fails when sent with a later statement (PostgreSQL), code that catches that failure
    and carries on must not see the unit committed."""
    with store.transaction() as tx:
        tx.ledger.move("mer_1", "XAF", available=10, credited=10)
    with pytest.raises((KeyError, RuntimeError)), store.transaction() as tx:
        tx.ledger.move("mer_1", "XAF", available=-3, reserved=3)
        if not tx.ledger.shift("mer_1", "XAF", reserved=-5, paid_out=5):  # refused at once
            raise KeyError("refused at once")
        with contextlib.suppress(KeyError):  # swallowed: the unit must still not commit
            tx.ledger.balance("mer_1", "XAF")  # sends the refused shift: its unit is aborted
    with store.read() as tx:
        assert tx.ledger.balance("mer_1", "XAF") == Balance("mer_1", "XAF", available=10, credited=10)


def test_rate_buckets_count_per_key_and_width_and_purge_by_start(store: Store) -> None:
    with store.transaction() as tx:
        assert tx.rates.buckets("key_1", 1_000, 0) == []
        for key_id, width, start in [
            ("key_1", 1_000, 5_000),
            ("key_1", 1_000, 5_000),
            ("key_1", 1_000, 6_000),
            ("key_1", 60_000, 0),
            ("key_2", 1_000, 5_000),
        ]:
            tx.rates.add(key_id, width, start)
    with store.transaction() as tx:
        assert tx.rates.buckets("key_1", 1_000, 0) == [(5_000, 2), (6_000, 1)]
        assert tx.rates.buckets("key_1", 1_000, 5_001) == [(6_000, 1)]
        assert tx.rates.buckets("key_1", 60_000, 0) == [(0, 1)]
        assert tx.rates.buckets("key_2", 1_000, 0) == [(5_000, 1)]
        assert tx.rates.purge(5_500) == 3
    with store.read() as tx:
        assert tx.rates.buckets("key_1", 1_000, 0) == [(6_000, 1)]
        assert tx.rates.buckets("key_2", 1_000, 0) == []
