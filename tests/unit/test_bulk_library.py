"""Bulk payouts from Python (issue 28): typed items, typed errors, the batch record, the testing kit.

The HTTP behaviour is in ``tests/e2e/test_bulk_http.py``; here the library's own surface, on the memory
store through :class:`paymentcore.testing.TestKit` and its hand-driven network.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from paymentcore import (
    BatchItem,
    BatchMode,
    BatchRefusedError,
    BatchStatus,
    IdempotencyKeyReusedError,
    InsufficientBalanceError,
    InvalidRequestError,
    NotFoundError,
    PayoutBatch,
    PayoutItem,
    PayoutLimitExceededError,
    PayoutStatus,
)
from paymentcore.testing import TestKit


@pytest.fixture
def kit() -> Any:
    made = TestKit.create()
    yield made
    made.core.close()


def items(*amounts: int | Decimal, currency: str = "XAF") -> list[PayoutItem]:
    return [
        PayoutItem(amount=amount, currency=currency, phone="670000000", merchant_reference=f"ref-{n}")
        for n, amount in enumerate(amounts)
    ]


def test_items_and_outcomes_are_typed_records(kit: TestKit) -> None:
    shop = kit.merchant()
    kit.fund(shop.id, "XAF", 3000)
    kit.core.operator.set_limits(shop.id, "XAF", per_transaction=2000)
    batch = kit.core.disburse.create_bulk(
        shop.id, items=items(1000, 2500, 1500, 1000), mode=BatchMode.EACH, idempotency_key="k"
    )
    assert isinstance(batch, PayoutBatch) and batch.mode is BatchMode.EACH
    assert batch.status is BatchStatus.PROCESSING and batch.completed_at is None
    assert (batch.item_count, batch.accepted, batch.refused) == (4, 2, 2)
    assert [total.amount for total in batch.totals] == [Decimal("2500")]
    first, over, third, broke = batch.items
    assert isinstance(first, BatchItem) and first.accepted and first.error is None
    assert first.payout is not None and first.payout.status is PayoutStatus.PENDING
    assert over.error is not None and not over.accepted
    limit = over.error.exception()
    assert isinstance(limit, PayoutLimitExceededError) and limit.details is not None
    assert limit.details["limit"] == "perTransaction" and limit.param == "amount"
    assert third.accepted
    assert broke.error is not None
    short = broke.error.exception()
    assert isinstance(short, InsufficientBalanceError)
    assert short.details == {"available": Decimal("500"), "required": Decimal("1000"), "currency": "XAF"}
    assert short.http_status == 400
    # the same request with the same key is the same batch; another request with it is refused
    again = kit.core.disburse.create_bulk(
        shop.id, items=items(1000, 2500, 1500, 1000), mode="each", idempotency_key="k"
    )
    assert again == batch
    with pytest.raises(IdempotencyKeyReusedError):
        kit.core.disburse.create_bulk(
            shop.id, items=items(1000, 2500, 1500), mode="each", idempotency_key="k"
        )


def test_all_mode_raises_with_every_refused_item(kit: TestKit) -> None:
    shop = kit.merchant()
    kit.fund(shop.id, "XAF", 2000)
    with pytest.raises(BatchRefusedError) as raised:
        kit.core.disburse.create_bulk(
            shop.id, items=items(1000, 1000, 1000, 50), mode="all", idempotency_key="k"
        )
    refused = raised.value
    assert refused.code == "BATCH_REFUSED" and refused.http_status == 422
    assert [item.index for item in refused.items] == [2, 3]
    assert [type(item.error.exception()).__name__ for item in refused.items if item.error] == [
        "InsufficientBalanceError",
        "AmountTooSmallError",
    ]
    assert refused.details is not None and refused.details["refusedCount"] == 2
    assert kit.core.operator.balances(shop.id)[0].available == Decimal("2000")
    assert kit.core.disburse.list(shop.id).data == ()


@pytest.mark.parametrize(
    ("given", "param"),
    [
        (None, "items"),
        ("items", "items"),
        ([], "items"),
        ([{"amount": 1000, "currency": "XAF", "phone": "670000000", "merchant_reference": "a"}], "items[0]"),
        (
            [PayoutItem(amount=1000, currency="XAF", phone="670000000", merchant_reference="")],
            "items[0].merchant_reference",
        ),
    ],
)
def test_a_malformed_request_is_refused_naming_the_item(kit: TestKit, given: Any, param: str) -> None:
    shop = kit.merchant()
    with pytest.raises(InvalidRequestError) as raised:
        kit.core.disburse.create_bulk(shop.id, items=given, mode="each", idempotency_key="k")
    assert raised.value.param == param


def test_the_kit_drives_a_batch_to_completion_and_the_event_verifies(kit: TestKit) -> None:
    shop = kit.merchant()
    kit.fund(shop.id, "XAF", 10_000)
    secret = kit.webhook(shop.id)
    batch = kit.core.disburse.create_bulk(
        shop.id, items=items(1000, 2000, 3000), mode="all", idempotency_key="k"
    )
    references = kit.batch_references(shop.id, batch.id)
    assert references == [item.payout.reference for item in batch.items if item.payout]
    kit.network.refuse(references[2])
    kit.settle()  # dispatched: two SENT, one refused (FAILED)
    now = kit.core.disburse.get_bulk(shop.id, batch.id)
    counts = {row.status: row.count for row in now.progress}
    assert counts[PayoutStatus.SENT] == 2 and counts[PayoutStatus.FAILED] == 1
    assert now.status is BatchStatus.PROCESSING
    assert "disburse.bulk.completed" not in [d.event for d in kit.deliveries]
    for reference in references[:2]:
        kit.network.complete(reference)
    kit.settle()
    done = kit.core.disburse.get_bulk(shop.id, batch.id)
    assert done.status is BatchStatus.COMPLETED and done.completed_at is not None
    [delivery] = [d for d in kit.deliveries if d.event == "disburse.bulk.completed"]
    event = delivery.construct(secret)
    assert event.is_batch and event.reference == batch.id and event.status == "COMPLETED"
    assert event.data["acceptedCount"] == 3
    # the operator sees the batch of any merchant, and each payout knows its batch
    seen = kit.core.operator.payout(references[0])
    assert seen.batch_id == batch.id
    inspected = kit.core.disburse.inspect_bulk(batch.id)
    assert inspected.merchant_id == shop.id and inspected.batch == done
    other = kit.merchant("Other")
    with pytest.raises(NotFoundError):
        kit.core.disburse.get_bulk(other.id, batch.id)
    assert [p.reference for p in kit.core.disburse.list(shop.id, batch=batch.id).data] == references[::-1]
