"""An integrator's own test suite, written with ``paymentcore.testing``.

``paymentcore.testing`` gives you a whole payments core in memory with:

- a fake clock (``kit.clock``) that moves only when you say (``kit.advance(seconds=...)``);
- a network you drive by hand (``kit.network``): nothing is paid until the test calls
  ``complete(reference)`` or ``fail(reference, category)``;
- captured webhook deliveries (``kit.deliveries``), signed exactly as they would go over the wire, so
  your own webhook handler can verify and process them;
- ``kit.fund(...)`` to put money in a balance without collecting it first;
- ``kit.client(merchant_id)``: the HTTP client (``paymentcore.client.Client``) wired to that core
  through the real API in this process, for an application that talks to a paymentcore server.

The ``payment_kit`` fixture comes from the plugin loaded below. Run this file with::

    python -m pytest -q examples/test_my_shop.py
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING

import attrs
import pytest

from paymentcore import (
    CollectionStatus,
    InsufficientBalanceError,
    MerchantBalance,
    PaymentCore,
    PaymentError,
    PayoutStatus,
    WebhookVerificationError,
    construct_event,
)

if TYPE_CHECKING:
    # The ``payment_kit`` fixture comes from the paymentcore pytest plugin, which installing
    # paymentcore registers: nothing to list in ``pytest_plugins``.
    from paymentcore.client import Client
    from paymentcore.testing import CapturedDelivery, TestKit


# --- the integrator's application code: a tiny shop -----------------------------------------------


@attrs.define
class Order:
    order_id: str
    amount: Decimal
    paid: bool = False
    payment_reference: str | None = None
    failure: str | None = None


class Shop:
    """Takes orders, asks paymentcore to charge the customer, and learns the outcome by webhook."""

    def __init__(
        self, core: PaymentCore, merchant_id: str, webhook_secret: str, *, now: Callable[[], float]
    ) -> None:
        self.core = core
        self.merchant_id = merchant_id
        self.webhook_secret = webhook_secret
        self.now = now  # Unix seconds; the tests pass the kit's fake clock
        self.orders: dict[str, Order] = {}
        self.by_reference: dict[str, str] = {}  # payment reference -> order id
        self.seen_events: set[str] = set()

    def place_order(self, order_id: str, amount: Decimal) -> Order:
        order = Order(order_id, amount)
        self.orders[order_id] = order
        return order

    def pay(self, order: Order, *, phone: str, provider: str = "mtn_cm") -> str:
        """Push a payment prompt for ``order`` to ``phone``; returns the payment reference."""
        collection = self.core.collect.charge(
            self.merchant_id,
            amount=order.amount,
            currency="XAF",
            country="CM",
            provider=provider,
            phone=phone,
            merchant_reference=order.order_id,
            idempotency_key=f"pay-{order.order_id}",
        )
        order.payment_reference = collection.reference
        self.by_reference[collection.reference] = order.order_id
        return collection.reference

    def receive_webhook(self, headers: Mapping[str, str], body: bytes) -> int:
        """The webhook endpoint: returns the HTTP status the shop answers."""
        try:  # checks the signature and freshness, then parses the body (exact Decimal numbers)
            event = construct_event(self.webhook_secret, headers, body, now=self.now())
        except WebhookVerificationError:
            return 400
        if event.id is not None:  # every delivery carries its eventId
            if event.id in self.seen_events:
                return 204  # a repeated delivery: already handled
            self.seen_events.add(event.id)
        order_id = self.by_reference.get(event.reference)
        if order_id is not None and event.is_collection:
            order = self.orders[order_id]
            if event.type == "collect.succeeded":
                order.paid = True
            elif event.type == "collect.failed":
                order.failure = event.data["failureReason"]
        return 204

    def receive_all(self, deliveries: Iterable[CapturedDelivery]) -> list[int]:
        return [self.receive_webhook(d.headers, d.body) for d in deliveries]


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture
def shop(payment_kit: TestKit) -> Shop:
    """A shop wired to a fresh kit: a merchant, a webhook endpoint and the kit's fake clock."""
    merchant = payment_kit.merchant("My Shop")
    secret = payment_kit.webhook(merchant.id)
    return Shop(payment_kit.core, merchant.id, secret, now=lambda: payment_kit.clock.now() / 1000)


# --- tests ---------------------------------------------------------------------------------------


def test_order_is_paid_when_the_payment_succeeds(payment_kit: TestKit, shop: Shop) -> None:
    order = shop.place_order("order-1", Decimal(5000))
    reference = shop.pay(order, phone="670000000")
    payment_kit.settle()  # the prompt reaches the (manual) network, which has not answered yet
    assert not order.paid and payment_kit.deliveries == []

    payment_kit.network.complete(reference)  # the payer approves on the phone
    payment_kit.advance(seconds=1)  # the core asks the network again one poll interval later

    assert [d.event for d in payment_kit.deliveries] == ["collect.succeeded"]
    assert shop.receive_all(payment_kit.deliveries) == [204]
    assert order.paid


def test_failed_payment_leaves_the_order_unpaid(payment_kit: TestKit, shop: Shop) -> None:
    order = shop.place_order("order-2", Decimal(7500))
    reference = shop.pay(order, phone="690000000", provider="orange_cm")
    payment_kit.settle()
    payment_kit.network.fail(reference, "INSUFFICIENT_FUNDS")
    payment_kit.advance(seconds=1)

    assert [d.event for d in payment_kit.deliveries] == ["collect.failed"]
    assert shop.receive_all(payment_kit.deliveries) == [204]
    assert not order.paid
    assert order.failure is not None
    collection = payment_kit.core.collect.get(shop.merchant_id, reference)
    assert (collection.status, collection.failure_category) == (CollectionStatus.FAILED, "INSUFFICIENT_FUNDS")


def test_repeated_and_forged_deliveries(payment_kit: TestKit, shop: Shop) -> None:
    order = shop.place_order("order-3", Decimal(1000))
    payment_kit.network.complete(shop.pay(order, phone="670000001"))
    payment_kit.settle()
    [delivery] = payment_kit.deliveries

    forged = delivery.body.replace(b'"SUCCESS"', b'"FAILED"')
    assert shop.receive_webhook(delivery.headers, forged) == 400  # signature no longer matches
    assert shop.receive_webhook(delivery.headers, delivery.body) == 204
    assert shop.receive_webhook(delivery.headers, delivery.body) == 204  # a retry: handled once
    assert order.paid and len(shop.seen_events) == 1

    payment_kit.advance(seconds=301)  # a captured delivery replayed later is refused
    assert shop.receive_webhook(delivery.headers, delivery.body) == 400


def test_payout_driven_by_hand(payment_kit: TestKit) -> None:
    kit = payment_kit
    merchant = kit.merchant("Marketplace")
    secret = kit.webhook(merchant.id)
    kit.fund(merchant.id, "XAF", 10_000)  # as if collections had settled

    payout = kit.core.disburse.create(
        merchant.id,
        amount=Decimal(2500),
        currency="XAF",
        phone="690000000",
        recipient_name="A. Seller",
        idempotency_key="payout-1",
    )
    assert (payout.status, payout.amount) == (PayoutStatus.PENDING, Decimal(2500))
    reference = payout.reference

    kit.settle()  # dispatched: the manual network accepts it, but has not confirmed delivery
    assert kit.core.disburse.get(merchant.id, reference).status is PayoutStatus.SENT
    assert kit.core.operator.balances(merchant.id) == [
        MerchantBalance(currency="XAF", available=Decimal(7500), reserved=Decimal(2500))
    ]

    kit.network.complete(reference)  # the recipient is credited
    kit.advance(seconds=1)  # the next status check is due a poll interval later
    assert kit.core.disburse.get(merchant.id, reference).status is PayoutStatus.PAID
    assert kit.core.operator.balances(merchant.id) == [
        MerchantBalance(currency="XAF", available=Decimal(7500), reserved=Decimal(0))
    ]

    now = kit.clock.now() / 1000
    assert [d.event for d in kit.deliveries] == ["disburse.sent", "disburse.succeeded"]
    for delivery in kit.deliveries:
        delivery.verify(secret, now=now)  # raises WebhookVerificationError if forged
        assert delivery.json()["data"]["reference"] == reference


# --- an application that talks to a paymentcore server: the same client, wired to the kit -----------


class PayoutDesk:
    """Pays sellers through a paymentcore *server* (``paymentcore.client.Client``), one payout per
    settlement id: the id is the idempotency key, so paying a settlement again never pays twice."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def pay_seller(self, settlement_id: str, phone: str, amount: Decimal) -> str:
        payout = self.client.disburse.create(
            amount=amount, currency="XAF", phone=phone, idempotency_key=f"settlement-{settlement_id}"
        )
        return payout.reference


def test_an_http_integration_with_the_kits_client(payment_kit: TestKit) -> None:
    kit = payment_kit
    merchant = kit.merchant("Marketplace")
    kit.fund(merchant.id, "XAF", 10_000)
    desk = PayoutDesk(kit.client(merchant.id))  # what production builds as Client(url, api_key)

    reference = desk.pay_seller("S-1", "690000000", Decimal(2500))
    assert desk.pay_seller("S-1", "690000000", Decimal(2500)) == reference  # paid once
    kit.settle()
    kit.network.complete(reference)
    kit.advance(seconds=1)
    assert desk.client.disburse.get(reference).status is PayoutStatus.PAID
    assert desk.client.account.balances() == [
        MerchantBalance(currency="XAF", available=Decimal(7500), reserved=Decimal(0))
    ]
    with pytest.raises(InsufficientBalanceError) as refused:  # the API's refusal, typed
        desk.pay_seller("S-2", "690000000", Decimal(1_000_000))
    assert refused.value.details is not None and refused.value.details["available"] == Decimal(7500)


def test_the_kit_without_the_fixture() -> None:
    """TestKit.create() takes Config fields, e.g. a lower prompt limit per phone number."""
    from paymentcore.testing import TestKit  # registered as a plugin by now: no warning

    kit = TestKit.create(prompt_limit=1)
    try:
        merchant = kit.merchant()

        def charge() -> None:
            kit.core.collect.charge(
                merchant.id, amount=500, currency="XAF", country="CM", provider="mtn_cm", phone="670000002"
            )

        charge()
        with pytest.raises(PaymentError) as refused:  # a second prompt to the same number, too soon
            charge()
        assert refused.value.code == "RECIPIENT_BUSY"
    finally:
        kit.close()
