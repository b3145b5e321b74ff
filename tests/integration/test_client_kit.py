"""The testing kit's clients: ``paymentcore.client`` wired to the kit's in-memory core through the real
HTTP app in this process (httpx's ASGI transport), so an integration is tested with the client it runs
with. What the client answers is what the kit's core answers; the kit's clock, network and captured
webhooks drive it as they drive the core.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator
from decimal import Decimal

import attrs
import pytest

from paymentcore import (
    CollectionKind,
    CollectionStatus,
    EventDeliveryStatus,
    InsufficientBalanceError,
    InsufficientScopeError,
    NotFoundError,
    PayoutStatus,
    construct_event,
)
from paymentcore.client import AsyncClient, Client
from paymentcore.testing import TestKit


@pytest.fixture
def kit() -> Iterator[TestKit]:
    made = TestKit.create()
    yield made
    made.close()


def test_the_kit_client_answers_what_the_kits_core_answers(kit: TestKit) -> None:
    shop = kit.merchant("Kit Shop")
    client = kit.client(shop.id)
    assert isinstance(client, Client)
    secret = client.webhooks.register(url="https://shop.example/hooks").signing_secret
    assert client.webhooks.get() == kit.core.webhooks.get(shop.id)

    charge = client.collect.charge(
        amount=2500, currency="XAF", country="CM", provider="mtn_cm", phone="670000001", idempotency_key="o-1"
    )
    assert charge == kit.core.collect.get(shop.id, charge.reference) and charge.kind is CollectionKind.CHARGE
    kit.settle()
    kit.network.complete(charge.reference)
    kit.settle()
    settled = client.collect.get(charge.reference)
    assert settled.status is CollectionStatus.SUCCESS
    assert attrs.evolve(settled, kind=CollectionKind.CHARGE) == kit.core.collect.get(
        shop.id, charge.reference
    )

    [delivery] = kit.deliveries
    event = construct_event(secret, delivery.headers, delivery.body)
    assert (event.type, event.reference, event.amount) == (
        "collect.succeeded",
        charge.reference,
        Decimal(2500),
    )
    [summary] = client.events.list().data
    assert summary == kit.core.webhooks.events(shop.id).data[0]
    assert summary.delivery_status is EventDeliveryStatus.DELIVERED
    assert client.events.get(summary.id) == kit.core.webhooks.event(shop.id, summary.id)
    assert client.events.resend(summary.id).id == summary.id
    kit.settle()
    assert len(kit.deliveries) == 2 and client.events.get(summary.id).attempts == 2

    checkout = client.collect.checkout(amount=Decimal("12.50"), currency="USD")
    assert str(checkout.amount) == "12.50"
    assert checkout.checkout_url == f"{kit.core.config.public_url}/checkout/{checkout.reference}"
    assert [c.reference for c in client.collect.list(limit=1)] == [checkout.reference, charge.reference]

    payout = client.disburse.create(amount=1000, currency="XAF", phone="690000002", merchant_reference="s-1")
    kit.settle()
    kit.network.complete(payout.reference)
    kit.settle()
    assert client.disburse.get(payout.reference).status is PayoutStatus.PAID
    assert client.disburse.get(payout.reference) == kit.core.disburse.get(shop.id, payout.reference)
    assert client.account.balances() == kit.core.operator.balances(shop.id)
    assert list(client.account.ledger("XAF", limit=1)) == list(kit.core.operator.ledger(shop.id, "XAF").data)
    assert client.disburse.limits("XAF") == kit.core.disburse.limits(shop.id, "XAF")

    with pytest.raises(InsufficientBalanceError) as short:
        client.disburse.create(amount=1_000_000, currency="XAF", phone="690000002")
    assert short.value.request_id is not None and short.value.http_status == 400
    with pytest.raises(NotFoundError):
        client.disburse.get("PO-none")


def test_a_kit_client_has_the_scopes_asked_for(kit: TestKit) -> None:
    shop = kit.merchant()
    collect_only = kit.client(shop.id, scopes=["collect"])
    with pytest.raises(InsufficientScopeError):
        collect_only.disburse.list()
    assert list(collect_only.collect.list()) == []


def test_the_kit_async_client(kit: TestKit) -> None:
    shop = kit.merchant()
    kit.fund(shop.id, "GHS", "100.00")
    client = kit.async_client(shop.id)
    assert isinstance(client, AsyncClient)

    async def run() -> list[str]:
        made = [
            await client.disburse.create(
                amount=Decimal("12.50"), currency="GHS", phone=f"24123450{i}", country="GH"
            )
            for i in range(3)
        ]
        assert all(str(p.amount) == "12.50" for p in made)
        return [p.reference async for p in await client.disburse.list(limit=2)]

    references = asyncio.run(run())
    assert references == [p.reference for p in kit.core.disburse.list(shop.id).data]
    assert len(references) == 3


def test_closing_the_kit_stops_its_app_and_closes_its_clients(kit: TestKit) -> None:
    shop = kit.merchant()
    client = kit.client(shop.id)
    client.account.balances()
    app_threads = [t for t in threading.enumerate() if t.name == "paymentcore-kit-app"]
    assert len(app_threads) == 1
    kit.close()
    assert not app_threads[0].is_alive()
    with pytest.raises(RuntimeError):
        client.account.balances()  # closed with the kit


def test_the_payment_kit_fixture_gives_a_client(payment_kit: TestKit) -> None:
    shop = payment_kit.merchant()
    assert payment_kit.client(shop.id).account.balances() == []


def test_the_kit_loads_the_server_and_httpx_only_when_a_client_is_asked_for() -> None:
    code = (
        "import sys\n"
        "from paymentcore.testing import TestKit\n"
        "watched = ('starlette', 'httpx', 'paymentcore_server', 'paymentcore.client')\n"
        "kit = TestKit.create()\n"
        "print(sorted(m for m in watched if m in sys.modules))\n"
        "kit.client(kit.merchant().id).account.balances()\n"
        "print(sorted(m for m in watched if m in sys.modules))\n"
        "kit.close()\n"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert ran.stdout.splitlines() == [
        "[]",
        "['httpx', 'paymentcore.client', 'paymentcore_server', 'starlette']",
    ]


def test_every_call_of_the_async_client(kit: TestKit) -> None:
    shop = kit.merchant("Async Shop")
    client = kit.async_client(shop.id)

    async def run() -> None:
        secret = (await client.webhooks.register(url="https://shop.example/hooks")).signing_secret
        assert await client.webhooks.get() == kit.core.webhooks.get(shop.id)
        charge = await client.collect.charge(
            amount=Decimal("12.50"), currency="GHS", country="GH", provider="mtn_gh", phone="241234567"
        )
        assert str(charge.amount) == "12.50" and charge.kind is CollectionKind.CHARGE
        kit.settle()
        kit.network.complete(charge.reference)
        kit.settle()
        settled = await client.collect.get(charge.reference)
        assert attrs.evolve(settled, kind=CollectionKind.CHARGE) == kit.core.collect.get(
            shop.id, charge.reference
        )
        checkout = await client.collect.checkout(amount=1500, currency="XAF", merchant_reference="web-1")
        assert [c.reference async for c in await client.collect.list(limit=1)] == [
            checkout.reference,
            charge.reference,
        ]
        payout = await client.disburse.create(
            amount=Decimal("2.50"), currency="GHS", phone="241234550", country="GH", idempotency_key="a-1"
        )
        assert await client.disburse.get(payout.reference) == kit.core.disburse.get(shop.id, payout.reference)
        assert await client.disburse.limits("GHS") == kit.core.disburse.limits(shop.id, "GHS")
        assert await client.account.balances() == kit.core.operator.balances(shop.id)
        ledger = [item async for item in await client.account.ledger("GHS", limit=1)]
        assert ledger == list(kit.core.operator.ledger(shop.id, "GHS").data)
        [summary] = (await client.events.list(delivery_status=EventDeliveryStatus.DELIVERED)).data
        assert summary == kit.core.webhooks.events(shop.id).data[0]
        assert construct_event(secret, kit.deliveries[0].headers, kit.deliveries[0].body).id == summary.id
        assert await client.events.get(summary.id) == kit.core.webhooks.event(shop.id, summary.id)
        assert (await client.events.resend(summary.id)).id == summary.id
        with pytest.raises(NotFoundError) as missing:
            await client.events.get("evt_none")
        assert missing.value.http_status == 404 and missing.value.request_id is not None

    asyncio.run(run())
