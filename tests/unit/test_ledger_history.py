"""The history of a balance (``_ledger.history``, ``core.operator.ledger``): each movement with the
balance right after it, newest first, page by page, agreeing with the journal read from the oldest on.

Property: whatever the movements (credits, reservations, payouts paid or released, many of them in one
millisecond) and whatever the page size, walking every page gives each entry once, newest first, with
the balance the journal gives right after it; applying the items from the oldest on ends at the stored
balance.
"""

from __future__ import annotations

import itertools
from decimal import Decimal

import attrs
import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from paymentcore import InvalidRequestError, LedgerItem, LedgerItemType, UnknownCurrencyError
from paymentcore._services import ledger as ledger
from paymentcore.adapters.memory import MemoryStore
from paymentcore.ports import Store
from paymentcore.testing import TestKit

MERCHANT = "mer_1"
NOW = 1_767_225_600_000

# one operation: what to do, an amount, and whether the clock moves on first
OPERATION = st.tuples(
    st.sampled_from(["credit", "reserve", "post", "release"]),
    st.integers(1, 5000),
    st.booleans(),
)


def write(store: Store, operations: list[tuple[str, int, bool]]) -> None:
    """Apply what the operations can (a post or release needs an open reservation)."""
    ids = itertools.count()
    reservations: list[int] = []
    now = NOW
    for kind, amount, later in operations:
        now += 1 if later else 0
        with store.transaction() as tx:
            common = {
                "entry_id": f"led_{next(ids):04d}",
                "merchant_id": MERCHANT,
                "currency": "XAF",
                "now": now,
            }
            balance = tx.ledger.balance(MERCHANT, "XAF")
            if kind == "credit":
                ledger.credit(tx, net=amount, fee=amount // 10, reference=f"REQ-{amount}", **common)  # type: ignore[arg-type]
            elif kind == "reserve" and balance.available >= amount:
                ledger.reserve(tx, amount=amount, reference=f"PO-{amount}", decimals=0, **common)  # type: ignore[arg-type]
                reservations.append(amount)
            elif kind in ("post", "release") and reservations:
                move = ledger.post if kind == "post" else ledger.release
                move(tx, amount=reservations.pop(0), reference="PO-x", **common)  # type: ignore[arg-type]


def expected(store: Store) -> list[tuple[str, int, int]]:
    """(id, available, reserved) after each entry, newest first, from the journal read oldest first."""
    available = reserved = 0
    lines = []
    with store.read() as tx:
        for entry in tx.ledger.entries(MERCHANT, "XAF"):
            moved = ledger.Movement.of(entry)
            available, reserved = available + moved.available, reserved + moved.reserved
            lines.append((entry.id, available, reserved))
    return lines[::-1]


@settings(max_examples=60, deadline=None)
@given(operations=st.lists(OPERATION, max_size=40), size=st.sampled_from([1, 2, 3, 7, 100]))
def test_every_page_agrees_with_the_journal_read_from_the_oldest(
    operations: list[tuple[str, int, bool]], size: int
) -> None:
    store = MemoryStore()
    write(store, operations)
    walked: list[tuple[str, int, int]] = []
    after: str | None = None
    with store.read() as tx:
        while True:
            lines = ledger.history(tx, MERCHANT, "XAF", limit=size, after=after)
            assert lines is not None
            walked += [(line.entry.id, line.available, line.reserved) for line in lines]
            if len(lines) < size:
                break
            after = lines[-1].entry.id
        balance = tx.ledger.balance(MERCHANT, "XAF")
        assert ledger.history(tx, MERCHANT, "XAF", limit=1, after="led_nope") is None
    assert walked == expected(store)
    if walked:
        assert walked[0][1:] == (balance.available, balance.reserved)


def test_the_library_pages_the_ledger_and_apply_replays_it() -> None:
    kit = TestKit.create()
    shop = kit.merchant(fee_percent="2")
    kit.core.operator.set_limits(shop.id, "XAF", review_threshold="5000")
    kit.fund(shop.id, "XAF", 20_000)
    charge = kit.core.collect.charge(
        shop.id, amount=10_000, currency="XAF", country="CM", provider="mtn_cm", phone="670000001"
    )
    kit.settle()
    kit.network.complete(charge.reference)
    kit.settle()
    paid = kit.core.disburse.create(
        shop.id, amount=2500, currency="XAF", phone="690000002", idempotency_key="p1"
    )
    held = kit.core.disburse.create(
        shop.id, amount=6000, currency="XAF", phone="690000002", idempotency_key="p2"
    )
    kit.settle()
    kit.network.complete(paid.reference)
    kit.settle()
    kit.core.disburse.reject(held.reference)

    items: list[LedgerItem] = []
    page = kit.core.operator.ledger(shop.id, "XAF", limit=2)
    items += page.data
    while page.has_more:
        page = kit.core.operator.ledger(shop.id, "XAF", limit=2, starting_after=items[-1].id)
        items += page.data
    assert [(i.type, i.reference, i.amount) for i in items] == [
        (LedgerItemType.PAYOUT_RELEASED, held.reference, Decimal(6000)),
        (LedgerItemType.PAYOUT_PAID, paid.reference, Decimal(-2500)),
        (LedgerItemType.PAYOUT_RESERVED, held.reference, Decimal(-6000)),
        (LedgerItemType.PAYOUT_RESERVED, paid.reference, Decimal(-2500)),
        (LedgerItemType.COLLECTION_SETTLED, charge.reference, Decimal(9800)),
        (LedgerItemType.COLLECTION_SETTLED, "test-funding", Decimal(20_000)),
    ]
    available = reserved = Decimal(0)
    for item in reversed(items):
        available, reserved = item.apply(available, reserved)
        assert (available, reserved) == (item.available, item.reserved)
    [balance] = kit.core.operator.balances(shop.id)
    assert (balance.available, balance.reserved) == (available, reserved) == (Decimal(27_300), Decimal(0))
    assert all(i.currency == "XAF" and i.created_at.tzinfo is not None for i in items)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        items[0].amount = Decimal(1)  # type: ignore[misc]
    with pytest.raises(InvalidRequestError) as bad_cursor:
        kit.core.operator.ledger(shop.id, "XAF", starting_after=charge.reference)
    assert bad_cursor.value.param == "starting_after"
    with pytest.raises(UnknownCurrencyError):
        kit.core.operator.ledger(shop.id, "USD")
    for limit in (0, 101, True, 2.0):
        with pytest.raises(InvalidRequestError) as bad_limit:
            kit.core.operator.ledger(shop.id, "XAF", limit=limit)  # type: ignore[arg-type]
        assert bad_limit.value.param == "limit"
    assert kit.core.operator.ledger(shop.id, "GHS").data == ()
    kit.core.close()
