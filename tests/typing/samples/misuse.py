"""Deliberate misuses of the typed API, each on one line marked with the mypy error code it must raise.

Never imported or run. ``tests/typing/test_api_types.py`` checks this file with ``mypy --strict`` and
asserts that every line ending in the comment ``expect: <code>[, <code>...]`` is reported at that line
with exactly those codes, and that no other line is reported. ``correct_use.py`` does the same
operations right.

Each function holds misuses that cannot affect one another: an error can change what mypy infers for
the lines after it (``payout.status is PayoutStatus.PIAD`` makes ``payout.status`` ``Any`` below it, so
a later comparison would go unreported), so such misuses get a function of their own.
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


def disburse_arguments(core: PaymentCore, mid: str) -> None:
    d = core.disburse
    d.create(mid, amount=12.5, currency="XAF", phone=PHONE, idempotency_key="k1")  # expect: arg-type
    d.create(mid, amount="2500", currency="XAF", phone=PHONE, idempotency_key="k2")  # expect: arg-type
    d.create(mid, amount=Decimal("2500"), currency="XAF", phone=PHONE)  # expect: call-arg
    d.create(mid, amount=2500, currency="XAF", phone=PHONE, idempotency_key=None)  # expect: arg-type
    d.create(mid, {"amount": 2500, "currency": "XAF"}, idempotency_key="k3")  # expect: call-arg, arg-type
    d.get(mid, 42)  # expect: arg-type


def collect_arguments(core: PaymentCore, mid: str, reference: str) -> None:
    c = core.collect
    c.pay(reference, 1, PHONE)  # expect: arg-type
    c.pay(reference, "mtn_cm", 670000000)  # expect: arg-type
    c.pay(reference, "mtn_cm")  # expect: call-arg
    c.checkout(mid, amount=1500, currency="XAF", expires_in_minutes="60")  # expect: arg-type
    c.charge(mid, amount=1500, currency="XAF", country="CM", phone=PHONE)  # expect: call-arg


def record_fields(payout: Payout, collection: Collection) -> None:
    print(payout.amout)  # expect: attr-defined
    reference: int = payout.reference  # expect: assignment
    amount: int = payout.amount  # expect: assignment
    print(reference, amount)
    print(payout.amount + 1.5)  # expect: operator
    print(payout["reference"])  # expect: index
    print(collection.checkout_url.upper())  # expect: union-attr


def assign_to_frozen_record(payout: Payout) -> None:
    payout.status = PayoutStatus.PAID  # expect: misc


def misspelt_member(payout: Payout) -> bool:
    return payout.status is PayoutStatus.PIAD  # expect: attr-defined


def status_as_text(payout: Payout) -> bool:
    return payout.status == "PAID"  # expect: comparison-overlap


def errors(error: PaymentError) -> object:
    return error.details["limit"]  # expect: index


def webhooks(secret: str, headers: Mapping[str, str], body: bytes) -> None:
    construct_event(secret, headers, body.decode())  # expect: arg-type
    event = construct_event(secret, headers, body)
    print(event.amount + 1)  # expect: operator


def removed_names() -> None:
    from paymentcore import Reply  # expect: attr-defined

    print(Reply)


def lists(core: PaymentCore, mid: str, item: LedgerItem) -> None:
    core.disburse.list(mid, limit="20")  # expect: arg-type
    core.disburse.list(mid, status="PAID")  # expect: arg-type
    page = core.disburse.list(mid)
    print(page.data[0].amount + 1.5)  # expect: operator
    page.has_more = False  # expect: misc
    print(item.type == "PAYOUT_PAID")  # expect: comparison-overlap
    print(item.type is LedgerItemType.PAID)  # expect: attr-defined
    core.operator.ledger(mid)  # expect: call-arg
