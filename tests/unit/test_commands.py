"""Commands (issue 25, item 3): each idempotent call is a frozen command, its fingerprint derived from it.

The fingerprint decides whether a request with a used idempotency key is a retry (the kept answer) or
another request (IdempotencyKeyReusedError). It is kept in the store for 48 hours, so it must not move
between versions or processes: the values pinned here were computed by the version before commands,
from the hand-written argument dicts it fingerprinted, and a record it kept must still replay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import attrs
import pytest

from paymentcore import IdempotencyKeyReusedError, PayoutItem
from paymentcore._domain import wire
from paymentcore._domain.commands import (
    Charge,
    Checkout,
    Command,
    CreateBulkPayouts,
    CreatePayout,
    LegacyPayment,
    RegisterLegacyWebhook,
    RegisterWebhook,
    ResendEvent,
    fingerprint,
)
from paymentcore._domain.models import BatchMode
from paymentcore._domain.records import dump
from paymentcore.testing import TestKit

PAYOUT = CreatePayout(
    amount=Decimal("2500"),
    currency="XAF",
    phone="670000000",
    recipient_name="Ada",
    country="CM",
    merchant_reference="order-1",
)
OTHER_PAYOUT = CreatePayout(amount=1000, currency="XAF", phone="670000001", merchant_reference="order-2")
BULK = CreateBulkPayouts(mode=BatchMode.ALL, items=(PAYOUT, OTHER_PAYOUT))
CHARGE = Charge(
    amount=1000,
    currency="XAF",
    country="CM",
    provider="mtn_cm",
    phone="670000000",
    merchant_reference="order-3",
    description="Tea",
)
CHECKOUT = Checkout(
    amount=Decimal("1500"), currency="XAF", merchant_reference="order-4", expires_in_minutes=30
)
LEGACY = LegacyPayment(amount=1500, currency="XAF", merchant_reference="order-5")
WEBHOOK = RegisterWebhook(url="https://shop.example/hooks")
LEGACY_WEBHOOK = RegisterLegacyWebhook(url="https://shop.example/hooks", events="v2")
RESEND = ResendEvent(event="evt_0123")

# Pinned, not recomputed: these are the digests the version before commands stored for the same
# arguments (its hand-written dicts, run at commit 1195cfa). A change here means every idempotency record
# kept in a database stops replaying (a retry after an upgrade would be refused as a reused key), so a
# new command format needs a migration path, not a new pin.
PINNED = {
    PAYOUT: "8957aefbabf39327a8ca6b8e1e375aad5c2b64aa6d5a0a0437cc2cdf8eca9f9c",
    BULK: "fe5a9582bda10760b5e4a1d237c7c668deb40030afadf76634f957ffb61e528c",
    CHARGE: "540733fdf83500aedd3ded65eea038156a199d7fee30c39eaa0cb7b29b2a67d2",
    CHECKOUT: "87d72fb67d7b54c6cce2430ec072ff8c330d8497aaa96a95685e46042dab08bd",
    LEGACY: "afd8f02d5ddb43f5bd8858dfa4e00c22d94b54b093c38a9a9f2e049aa1e5df46",
    WEBHOOK: "f55474c8bb2b88e44f18609955aed523856226ebfe249fbadeb826736bf124eb",
    LEGACY_WEBHOOK: "4174965da3e0d705e3fae09e5c37a4bb031c6905f14508d08ded5b15678c1140",
    RESEND: "328e81622e5dcdc6f5be5df1de34a603bfa951925389f06cb00ba8892a8718e6",
}
COMMANDS = list(PINNED)


def _name(command: object) -> str:
    return type(command).__name__


@pytest.mark.parametrize("command", COMMANDS, ids=_name)
def test_the_fingerprint_is_the_one_stored_before_commands(command: Command) -> None:
    assert command.fingerprint() == PINNED[command]


def _other(value: object) -> object:
    """A value of the same kind as ``value`` but different from it."""
    if isinstance(value, BatchMode):
        return BatchMode.EACH if value is BatchMode.ALL else BatchMode.ALL
    if isinstance(value, tuple):
        return value[:-1]
    if isinstance(value, Decimal | int):
        return value + 1
    if value is None:
        return "x"
    assert isinstance(value, str)
    return value + "x"


@pytest.mark.parametrize("command", COMMANDS, ids=_name)
def test_every_field_is_in_the_fingerprint(command: Command) -> None:
    names = [field.name for field in attrs.fields(type(command))]
    assert names
    for name in names:
        changed = attrs.evolve(command, **{name: _other(getattr(command, name))})
        assert changed != command
        assert changed.fingerprint() != command.fingerprint(), name


def test_each_item_of_a_bulk_request_and_its_order_are_in_the_fingerprint() -> None:
    changed = attrs.evolve(PAYOUT, phone="670000009")
    assert attrs.evolve(BULK, items=(changed, OTHER_PAYOUT)).fingerprint() != BULK.fingerprint()
    assert attrs.evolve(BULK, items=(OTHER_PAYOUT, PAYOUT)).fingerprint() != BULK.fingerprint()


def test_equal_commands_have_equal_fingerprints() -> None:
    again = CreatePayout(
        merchant_reference="order-1",
        country="CM",
        recipient_name="Ada",
        phone="670000000",
        currency="XAF",
        amount=Decimal("2500"),
    )
    assert again == PAYOUT and hash(again) == hash(PAYOUT)
    assert again.fingerprint() == PAYOUT.fingerprint()
    # an int is the equal Decimal, as a JSON body and a Python call give it
    assert attrs.evolve(PAYOUT, amount=2500).fingerprint() == PAYOUT.fingerprint()
    # but another way of writing the number is another request, as it always was
    assert attrs.evolve(PAYOUT, amount=Decimal("2500.0")).fingerprint() != PAYOUT.fingerprint()


def test_the_operation_is_in_the_fingerprint() -> None:
    """The same arguments to another call are another request (a legacy checkout is no checkout)."""
    same = {field.name: getattr(CHECKOUT, field.name) for field in attrs.fields(Checkout)}
    assert LegacyPayment(**same).fingerprint() != CHECKOUT.fingerprint()
    assert RegisterLegacyWebhook(url=WEBHOOK.url).fingerprint() != WEBHOOK.fingerprint()
    assert LegacyPayment(**same) != Checkout(**same)


def test_commands_are_frozen() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        PAYOUT.amount = 1  # type: ignore[misc]


def test_a_huge_exponent_is_written_as_its_text() -> None:
    """A hostile number costs what its text costs (never expanded: see tests/e2e/test_amount_edges.py)."""
    huge = attrs.evolve(CHARGE, amount=Decimal("1e999999999999999999"))
    assert len(huge.fingerprint()) == 64
    assert fingerprint("collect.charge", {"amount": Decimal("1E+999999999999999999")}) == fingerprint(
        "collect.charge", {"amount": Decimal("1e999999999999999999")}
    )


# --- through the services: what each call keeps is what the version before kept -----------------------


@pytest.fixture
def kit() -> Iterator[TestKit]:
    made = TestKit.create()
    yield made
    made.core.close()


def _kept_fingerprint(kit: TestKit, merchant_id: str, key: str) -> str:
    with kit.core.deps.store.read() as tx:
        record = tx.idempotency.get(merchant_id, key)
    assert record is not None
    return record.fingerprint


CALLS: dict[str, tuple[Command, Callable[[TestKit, str], Any]]] = {
    "payout": (
        PAYOUT,
        lambda kit, shop: kit.core.disburse.create(
            shop,
            amount=Decimal("2500"),
            currency="XAF",
            phone="670000000",
            recipient_name="Ada",
            country="CM",
            merchant_reference="order-1",
            idempotency_key="k",
        ),
    ),
    "bulk": (
        BULK,
        lambda kit, shop: kit.core.disburse.create_bulk(
            shop,
            items=[
                PayoutItem(
                    amount=Decimal("2500"),
                    currency="XAF",
                    phone="670000000",
                    merchant_reference="order-1",
                    recipient_name="Ada",
                    country="CM",
                ),
                PayoutItem(amount=1000, currency="XAF", phone="670000001", merchant_reference="order-2"),
            ],
            mode="all",
            idempotency_key="k",
        ),
    ),
    "charge": (
        CHARGE,
        lambda kit, shop: kit.core.collect.charge(
            shop,
            amount=1000,
            currency="XAF",
            country="CM",
            provider="mtn_cm",
            phone="670000000",
            merchant_reference="order-3",
            description="Tea",
            idempotency_key="k",
        ),
    ),
    "checkout": (
        CHECKOUT,
        lambda kit, shop: kit.core.collect.checkout(
            shop,
            amount=Decimal("1500"),
            currency="XAF",
            merchant_reference="order-4",
            expires_in_minutes=30,
            idempotency_key="k",
        ),
    ),
    "legacy payment": (
        LEGACY,
        lambda kit, shop: kit.core.collect.legacy_payment(
            shop, amount=1500, currency="XAF", reference="order-5", idempotency_key="k"
        ),
    ),
    "webhook": (
        WEBHOOK,
        lambda kit, shop: kit.core.webhooks.register(
            shop, url="https://shop.example/hooks", idempotency_key="k"
        ),
    ),
    "legacy webhook": (
        LEGACY_WEBHOOK,
        lambda kit, shop: kit.core.webhooks.register(
            shop, url="https://shop.example/hooks", events="v2", legacy=True, idempotency_key="k"
        ),
    ),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_each_call_keeps_the_fingerprint_the_version_before_kept(kit: TestKit, call: str) -> None:
    command, make = CALLS[call]
    shop = kit.merchant().id
    kit.fund(shop, "XAF", 10_000)
    first = make(kit, shop)
    assert _kept_fingerprint(kit, shop, "k") == PINNED[command]
    assert make(kit, shop) == first  # and a retry is answered from it


def test_a_resend_keeps_the_fingerprint_of_its_event(kit: TestKit) -> None:
    shop = kit.merchant().id
    kit.webhook(shop)
    collection = kit.core.collect.charge(
        shop, amount=1000, currency="XAF", country="CM", provider="mtn_cm", phone="670000000"
    )
    kit.network.complete(collection.reference)
    kit.settle()
    event_id = kit.core.webhooks.events(shop).data[0].id
    first = kit.core.webhooks.resend(shop, event_id, idempotency_key="k")
    assert _kept_fingerprint(kit, shop, "k") == fingerprint("event.resend", {"event": event_id})
    assert kit.core.webhooks.resend(shop, event_id, idempotency_key="k") == first


def test_a_record_kept_by_the_version_before_commands_replays(kit: TestKit) -> None:
    """An answer kept before the upgrade, under the fingerprint that version computed, is the answer
    after it: nothing is paid twice, and other arguments with its key are still refused."""
    shop = kit.merchant().id
    kit.fund(shop, "XAF", 10_000)
    _, make = CALLS["payout"]
    paid = make(kit, shop)
    with kit.core.deps.store.transaction() as tx:
        record = tx.idempotency.get(shop, "k")
        assert record is not None
        tx.idempotency.put(attrs.evolve(record, key="before-upgrade", fingerprint=PINNED[PAYOUT]))
        tx.idempotency.put(
            attrs.evolve(record, key="other", fingerprint="0" * 64, body=wire.dumps(dump(paid)))
        )
    again = kit.core.disburse.create(
        shop,
        amount=2500,
        currency="XAF",
        phone="670000000",
        recipient_name="Ada",
        country="CM",
        merchant_reference="order-1",
        idempotency_key="before-upgrade",
    )
    assert again == paid
    assert len(kit.core.disburse.list(shop).data) == 1
    with pytest.raises(IdempotencyKeyReusedError):
        kit.core.disburse.create(
            shop, amount=2500, currency="XAF", phone="670000000", idempotency_key="before-upgrade"
        )
    with pytest.raises(IdempotencyKeyReusedError):  # a kept fingerprint that is not the command's
        kit.core.disburse.create(
            shop,
            amount=2500,
            currency="XAF",
            phone="670000000",
            recipient_name="Ada",
            country="CM",
            merchant_reference="order-1",
            idempotency_key="other",
        )


def test_a_command_per_state_changing_call() -> None:
    """Every command names its own operation (two with one name would answer each other's keys)."""
    kinds = {type(command) for command in COMMANDS}
    operations = [kind.operation for kind in kinds]
    assert len(set(operations)) == len(kinds) == 8
