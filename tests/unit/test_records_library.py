"""The merchant records API as a library user and an integrator's test see it (``paymentcore.testing``):
typed pages of payouts and collections, events with their deliveries, and resending one."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import attrs
import pytest

from paymentcore import (
    Collection,
    CollectionStatus,
    EventDeliveryStatus,
    EventRecord,
    EventSummary,
    InvalidRequestError,
    NotFoundError,
    Page,
    Payout,
    PayoutStatus,
    WebhookVerificationError,
    construct_event,
)
from paymentcore.testing import TestKit


@pytest.fixture
def kit() -> Iterator[TestKit]:
    made = TestKit.create()
    yield made
    made.core.close()


def test_payouts_and_collections_come_as_typed_pages(kit: TestKit) -> None:
    shop, other = kit.merchant(), kit.merchant("Other Shop")
    kit.fund(shop.id, "XAF", 50_000)
    kit.fund(other.id, "XAF", 50_000)
    made = [
        kit.core.disburse.create(
            shop.id, amount=1000 + i, currency="XAF", phone="690000002", idempotency_key=f"p{i}",
            merchant_reference="batch-1" if i % 2 else None,
        )
        for i in range(5)
    ]  # fmt: skip
    kit.core.disburse.create(other.id, amount=1000, currency="XAF", phone="690000002", idempotency_key="o")
    first = kit.core.disburse.list(shop.id, limit=3)
    assert isinstance(first, Page) and first.has_more is True
    assert all(isinstance(p, Payout) for p in first.data)
    rest = kit.core.disburse.list(shop.id, limit=3, starting_after=first.data[-1].reference)
    assert [p.reference for p in (*first.data, *rest.data)] == [p.reference for p in made[::-1]]
    assert rest.has_more is False
    assert [p.reference for p in kit.core.disburse.list(shop.id, merchant_reference="batch-1").data] == [
        made[3].reference,
        made[1].reference,
    ]
    assert len(kit.core.disburse.list(shop.id, status=PayoutStatus.PENDING).data) == 5
    assert kit.core.disburse.list(shop.id, status=PayoutStatus.PAID).data == ()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        first.has_more = False  # type: ignore[misc]
    with pytest.raises(InvalidRequestError) as foreign:
        kit.core.disburse.list(other.id, starting_after=made[0].reference)
    assert foreign.value.param == "starting_after"
    with pytest.raises(InvalidRequestError) as bad_status:
        kit.core.disburse.list(shop.id, status="SUCCESS")  # type: ignore[arg-type]
    assert bad_status.value.param == "status"

    charge = kit.core.collect.charge(
        shop.id, amount=2500, currency="XAF", country="CM", provider="mtn_cm", phone="670000001"
    )
    collections = kit.core.collect.list(shop.id, status=CollectionStatus.PENDING)
    assert [c.reference for c in collections.data] == [charge.reference]
    assert isinstance(collections.data[0], Collection) and collections.data[0] == kit.core.collect.get(
        shop.id, charge.reference
    )
    assert kit.core.collect.list(other.id).data == ()


def test_events_deliveries_and_a_resend_through_the_kit(kit: TestKit) -> None:
    shop = kit.merchant()
    legacy_secret = kit.core.webhooks.register(shop.id, url="https://shop.example/hooks", legacy=True)
    charge = kit.core.collect.charge(
        shop.id, amount=2500, currency="XAF", country="CM", provider="mtn_cm", phone="670000001"
    )
    kit.settle()
    kit.network.complete(charge.reference)
    kit.settle()
    [summary] = kit.core.webhooks.events(shop.id).data
    assert isinstance(summary, EventSummary)
    assert (summary.type, summary.name) == ("collect.succeeded", "payment.succeeded")
    assert summary.reference == charge.reference and summary.attempts == 1
    assert summary.delivery_status is EventDeliveryStatus.DELIVERED
    assert isinstance(summary.created_at, datetime) and summary.created_at.tzinfo is not None
    for name in ("collect.succeeded", "payment.succeeded"):
        assert kit.core.webhooks.events(shop.id, type=name).data == (summary,)
    assert kit.core.webhooks.events(shop.id, delivery_status=EventDeliveryStatus.FAILED).data == ()

    record = kit.core.webhooks.event(shop.id, summary.id)
    assert isinstance(record, EventRecord)
    [delivered] = kit.deliveries
    assert dict(record.payload) == delivered.json()
    assert delivered.sent_headers["X-Service-Event-Id"] == summary.id
    [attempt] = record.deliveries
    assert attempt.response_status == 200 and attempt.error is None and attempt.resent is False

    secret = kit.webhook(shop.id)  # now v2 names, and a new secret
    resent = kit.core.webhooks.resend(shop.id, summary.id)
    assert resent.deliveries == record.deliveries  # queued, not sent yet
    kit.settle()
    second = kit.deliveries[-1]
    event = construct_event(secret, second.headers, second.body)
    assert event.id == summary.id and event.name == "collect.succeeded"
    with pytest.raises(WebhookVerificationError):
        construct_event(legacy_secret.signing_secret, second.headers, second.body)
    forged = {**second.headers, "X-Service-Event-Id": "evt_other"}
    with pytest.raises(WebhookVerificationError, match="X-Service-Event-Id"):
        construct_event(secret, forged, second.body)
    after = kit.core.webhooks.event(shop.id, summary.id)
    assert after.name == "collect.succeeded" and after.attempts == 2
    assert [d.resent for d in after.deliveries] == [False, True]

    other = kit.merchant("Other Shop")
    with pytest.raises(NotFoundError):
        kit.core.webhooks.event(other.id, summary.id)
    with pytest.raises(NotFoundError):
        kit.core.webhooks.resend(other.id, summary.id)
    unheard = kit.core.collect.charge(
        other.id, amount=2500, currency="XAF", country="CM", provider="mtn_cm", phone="670000002"
    )
    kit.settle()
    kit.network.fail(unheard.reference)
    kit.settle()  # collect.failed, with no endpoint to send it to
    [lost] = kit.core.webhooks.events(other.id, delivery_status=EventDeliveryStatus.FAILED).data
    assert (lost.type, lost.attempts) == ("collect.failed", 0)
    with pytest.raises(InvalidRequestError) as no_endpoint:
        kit.core.webhooks.resend(other.id, lost.id)
    assert no_endpoint.value.param is None


def test_a_queued_resend_is_not_queued_twice_and_goes_out_to_a_disabled_endpoint(kit: TestKit) -> None:
    shop = kit.merchant()
    kit.webhook(shop.id)
    kit.fund(shop.id, "XAF", 5000)
    kit.core.disburse.create(shop.id, amount=1000, currency="XAF", phone="690000002", idempotency_key="p")
    kit.settle()  # disburse.sent, delivered
    [event] = kit.core.webhooks.events(shop.id).data
    with kit.core.store.transaction() as tx:  # the endpoint was auto-disabled meanwhile
        endpoint = tx.webhooks.get(shop.id)
        assert endpoint is not None
        tx.webhooks.put(attrs.evolve(endpoint, is_active=False, disabled_reason="Disabled after 10 ..."))
    kit.core.webhooks.resend(shop.id, event.id)
    kit.core.webhooks.resend(shop.id, event.id)  # still queued: nothing more
    kit.settle()
    assert len(kit.deliveries) == 2
    record = kit.core.webhooks.event(shop.id, event.id)
    assert record.attempts == 2 and [d.resent for d in record.deliveries] == [False, True]
    assert kit.core.webhooks.get(shop.id).is_active is False  # a resend does not reactivate it either
