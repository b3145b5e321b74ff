"""The operations of ``misuse.py``, done right: ``mypy --strict`` must report nothing here.

Never imported or run; ``tests/typing/test_api_types.py`` checks it with mypy. The functions mirror
``misuse.py``'s one for one.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from paymentcore import (
    Collection,
    LedgerItem,
    LedgerItemType,
    PaymentCore,
    PaymentError,
    Payout,
    PayoutStatus,
    construct_event,
)

PHONE = "690000000"


def disburse_arguments(core: PaymentCore, mid: str) -> list[Payout]:
    d = core.disburse
    return [
        d.create(
            mid, amount=Decimal("12.50"), currency="GHS", phone="241234567", country="GH", idempotency_key="k"
        ),
        d.create(mid, amount=Decimal("2500"), currency="XAF", phone=PHONE, idempotency_key="k2"),
        d.create(mid, amount=2500, currency="XAF", phone=PHONE, idempotency_key="k3"),
        d.create(mid, amount=2500, currency="XAF", phone=PHONE, idempotency_key="k4", country="CM"),
        d.get(mid, "PO-1700000000000-abc"),
    ]


def collect_arguments(core: PaymentCore, mid: str, reference: str) -> list[Collection]:
    c = core.collect
    return [
        c.pay(reference, "mtn_cm", "670000000"),
        c.pay(reference, "lightning", None),
        c.checkout(mid, amount=1500, currency="XAF", expires_in_minutes=60),
        c.charge(mid, amount=1500, currency="XAF", country="CM", provider="mtn_cm", phone=PHONE),
    ]


def record_fields(payout: Payout, collection: Collection) -> None:
    print(payout.amount)
    reference: str = payout.reference
    amount: Decimal = payout.amount
    print(reference, amount)
    print(payout.amount + Decimal("1.5"), payout.amount + 1)
    print(payout.reference)
    if collection.checkout_url is not None:
        print(collection.checkout_url.upper())


def fresh_record(core: PaymentCore, mid: str, payout: Payout) -> Payout:
    # Records are frozen: a changed status comes from the core, in a new record.
    return core.disburse.get(mid, payout.reference)


def member(payout: Payout) -> bool:
    return payout.status is PayoutStatus.PAID


def status_as_text(payout: Payout) -> bool:
    return payout.status.value == "PAID"


def errors(error: PaymentError) -> object:
    return None if error.details is None else error.details.get("limit")


def webhooks(secret: str, headers: Mapping[str, str], body: bytes) -> None:
    event = construct_event(secret, headers, body)
    if event.amount is not None:
        print(event.amount + 1)


def current_names(core: PaymentCore, mid: str, reference: str) -> str:
    payout: Payout = core.disburse.get(mid, reference)
    return payout.reference


def lists(core: PaymentCore, mid: str, item: LedgerItem) -> None:
    core.disburse.list(mid, limit=20)
    core.disburse.list(mid, status=PayoutStatus.PAID)
    page = core.disburse.list(mid)
    print(page.data[0].amount + Decimal("1.5"))
    print(page.has_more)
    print(item.type.value == "PAYOUT_PAID")
    print(item.type is LedgerItemType.PAYOUT_PAID)
    core.operator.ledger(mid, "XAF")
