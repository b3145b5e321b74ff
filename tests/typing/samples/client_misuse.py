"""Deliberate misuses of ``paymentcore.client``, each on one line marked with the mypy error code it
must raise. Never imported or run: ``tests/typing/test_api_types.py`` checks it with ``mypy --strict``
as it checks ``misuse.py`` (every marked line reported with exactly those codes, no other line).
``client_correct_use.py`` does the same operations right.

Each function holds misuses that cannot affect one another (an error can change what mypy infers
after it).
"""

from __future__ import annotations

from decimal import Decimal

from paymentcore import BatchMode, PaymentError, Payout, PayoutItem, PayoutStatus
from paymentcore.client import AsyncClient, Client

PHONE = "690000000"


def amounts(client: Client) -> None:
    d = client.disburse
    d.create(amount=12.5, currency="XAF", phone=PHONE)  # expect: arg-type
    d.create(amount="2500", currency="XAF", phone=PHONE)  # expect: arg-type
    d.create(amount=Decimal("2500"), currency="XAF", phone=PHONE, idempotency_key=42)  # expect: arg-type
    client.collect.checkout(amount=9.99, currency="USD")  # expect: arg-type


def bulk(client: Client, items: list[PayoutItem]) -> None:
    d = client.disburse
    item = PayoutItem(amount=25.0, currency="XAF", phone=PHONE, merchant_reference="s")  # expect: arg-type
    d.create_bulk(items=[item], mode="each")
    d.create_bulk(items=items)  # expect: call-arg
    d.create_bulk(items=items, mode=BatchMode.EACH, idempotency_key=7)  # expect: arg-type
    d.get_bulk("bat_1", starting_after="PO-1")  # expect: arg-type
    batch = d.get_bulk("bat_1")
    print(batch.totals[0].amount + 0.5)  # expect: operator


async def async_bulk(client: AsyncClient, items: list[PayoutItem]) -> None:
    batch = client.disburse.create_bulk(items=items, mode="all")
    print(batch.id)  # expect: attr-defined


def missing_and_extra_arguments(client: Client, mid: str, reference: str) -> None:
    client.collect.charge(amount=1500, currency="XAF", country="CM", phone=PHONE)  # expect: call-arg
    client.disburse.create(amount=2500, currency="XAF")  # expect: call-arg
    client.disburse.get(mid, reference)  # expect: call-arg
    client.account.ledger()  # expect: call-arg
    client.disburse.create(amount=2500, currency="XAF", phone=PHONE, merchant_id=mid)  # expect: call-arg


def status_literals(client: Client) -> None:
    client.disburse.list(status="PAID")  # expect: arg-type
    client.events.list(delivery_status="FAILED")  # expect: arg-type


def status_as_text(payout: Payout) -> bool:
    return payout.status == "PAID"  # expect: comparison-overlap


def misspelt_member(payout: Payout) -> bool:
    return payout.status is PayoutStatus.PIAD  # expect: attr-defined


def records(client: Client) -> None:
    payout = client.disburse.get("PO-1")
    print(payout.amout)  # expect: attr-defined
    print(payout.amount + 1.5)  # expect: operator
    amount: float = payout.amount  # expect: assignment
    print(amount)
    page = client.disburse.list()
    print(page.data[0].amount + 0.5)  # expect: operator
    page.has_more = False  # expect: misc
    [balance] = client.account.balances()
    print(balance.available * 1.1)  # expect: operator


def errors(error: PaymentError) -> None:
    print(error.request_id.upper())  # expect: union-attr


def construction() -> None:
    Client("https://pay.example")  # expect: call-arg
    Client("https://pay.example", "pck_x", timeout="30")  # expect: arg-type
    Client("https://pay.example", "pck_x", max_retries=None)  # expect: arg-type


async def the_async_client(client: AsyncClient) -> None:
    for item in await client.disburse.list():  # expect: attr-defined
        print(item)


async def a_forgotten_await(client: AsyncClient) -> None:
    payout = client.disburse.get("PO-1")
    print(payout.reference)  # expect: attr-defined
