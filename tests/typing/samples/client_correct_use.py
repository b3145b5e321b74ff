"""The operations of ``client_misuse.py``, done right: ``mypy --strict`` must report nothing here.

Never imported or run; ``tests/typing/test_api_types.py`` checks it with mypy. It is what an outside
file using the client looks like: the functions mirror ``client_misuse.py``'s one for one.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from paymentcore import (
    BatchMode,
    BatchRefusedError,
    Collection,
    EventDeliveryStatus,
    EventSummary,
    InsufficientBalanceError,
    LedgerItem,
    PaymentError,
    Payout,
    PayoutBatch,
    PayoutItem,
    PayoutStatus,
    construct_event,
)
from paymentcore.client import AsyncClient, AsyncListPage, Client, ListPage

PHONE = "690000000"


def amounts(client: Client) -> list[Payout | Collection]:
    d = client.disburse
    return [
        d.create(amount=Decimal("12.50"), currency="GHS", phone="241234567", country="GH"),
        d.create(amount=2500, currency="XAF", phone=PHONE),
        d.create(amount=Decimal("2500"), currency="XAF", phone=PHONE, idempotency_key="order-42"),
        client.collect.checkout(amount=Decimal("9.99"), currency="USD"),
    ]


def bulk(client: Client, items: list[PayoutItem]) -> PayoutBatch:
    d = client.disburse
    exact = PayoutItem(amount=Decimal("25.00"), currency="GHS", phone="241234567", merchant_reference="s-1")
    made = d.create_bulk(items=[exact], mode="each")
    try:
        d.create_bulk(items=items, mode=BatchMode.ALL, idempotency_key="payroll-11")
    except BatchRefusedError as refused:
        for item in refused.items:
            if item.error is not None:
                print(item.index, item.merchant_reference, item.error.exception())
    page = d.get_bulk(made.id, limit=100, starting_after=made.items[-1].index)
    print(page.totals[0].amount + Decimal("0.5"), page.has_more)
    return page


async def async_bulk(client: AsyncClient, items: list[PayoutItem]) -> None:
    batch = await client.disburse.create_bulk(items=items, mode="all")
    print(batch.id)


def missing_and_extra_arguments(client: Client, reference: str) -> list[object]:
    return [
        client.collect.charge(amount=1500, currency="XAF", country="CM", provider="mtn_cm", phone=PHONE),
        client.disburse.create(amount=2500, currency="XAF", phone=PHONE),
        client.disburse.get(reference),
        client.account.ledger("XAF"),
        client.disburse.create(amount=2500, currency="XAF", phone=PHONE, merchant_reference="s-1"),
    ]


def status_literals(client: Client) -> tuple[ListPage[Payout], ListPage[EventSummary]]:
    return (
        client.disburse.list(status=PayoutStatus.PAID),
        client.events.list(delivery_status=EventDeliveryStatus.FAILED),
    )


def status_as_text(payout: Payout) -> bool:
    return payout.status is PayoutStatus.PAID or payout.status.value == "PAID"


def misspelt_member(payout: Payout) -> bool:
    return payout.status is PayoutStatus.PAID


def records(client: Client) -> None:
    payout = client.disburse.get("PO-1")
    print(payout.amount)
    print(payout.amount + Decimal("1.5"))
    amount: Decimal = payout.amount
    print(amount)
    page = client.disburse.list()
    print(page.data[0].amount + 1)
    more: bool = page.has_more
    print(more)
    for each in page:  # pages on
        print(each.reference)
    [balance] = client.account.balances()
    print(balance.available * Decimal("1.1"))
    item: LedgerItem = next(iter(client.account.ledger("XAF")))
    print(item.apply(balance.available, balance.reserved))


def errors(client: Client, error: PaymentError) -> None:
    if error.request_id is not None:
        print(error.request_id.upper(), error.http_status, error.code, error.param, error.details)
    try:
        client.disburse.create(amount=50_000, currency="XAF", phone=PHONE)
    except InsufficientBalanceError as short:
        print(short.details)


def construction() -> list[Client]:
    return [
        Client("https://pay.example", "pck_x"),
        Client("https://pay.example", "pck_x", timeout=30.0, max_retries=0),
        Client("https://pay.example", "pck_x", max_retries=5, backoff=0.1, max_retry_after=10),
    ]


async def the_async_client(client: AsyncClient) -> None:
    page: AsyncListPage[Payout] = await client.disburse.list()
    async for item in page:
        print(item)
    for first in page.data:
        print(first)


async def a_forgotten_await(client: AsyncClient) -> None:
    payout = await client.disburse.get("PO-1")
    print(payout.reference)


def webhooks(secret: str, headers: Mapping[str, str], body: bytes) -> None:
    event = construct_event(secret, headers, body)
    print(event.amount)
