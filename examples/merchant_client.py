"""A merchant's integration with a running paymentcore server, through ``paymentcore.client``.

It does what a merchant integration does, one step after the other:

1. a direct charge: push a prompt to a phone, then read the collection until it is final;
2. a hosted checkout: create the payment, print its ``checkout_url``, then act as the payer would in a
   browser (open the page, submit its form with a provider and a phone) and read it until final;
3. a payout from the balance those two collections funded, polled until ``PAID``.

The client returns the library's own records (``Decimal`` amounts, enum statuses, aware datetimes) and
raises the library's exceptions, exactly as the embedded core does. Every create call carries an
``Idempotency-Key`` and is retried on a lost connection, a timeout, a 5xx or a 429 under that same key,
so a retry never makes a second payout; the payout here passes its own key, kept with the order, which
also makes calling again after an error safe.

Start a server with a demo merchant, then run the client with the keys the server printed::

    paymentcore --db demo.db serve --demo --sandbox-delay 0
    python examples/merchant_client.py --base-url http://127.0.0.1:8000 \\
        --collect-key pck_... --disburse-key pck_...

Exit status 0 means the charge and the checkout succeeded and the payout was paid.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from decimal import Decimal
from html.parser import HTMLParser
from typing import TypeVar
from urllib.parse import urljoin

import httpx

from paymentcore import Collection, CollectionStatus, PaymentError, Payout, PayoutStatus
from paymentcore.client import Client

FINAL_COLLECTION = frozenset({CollectionStatus.SUCCESS, CollectionStatus.FAILED})
FINAL_PAYOUT = frozenset({PayoutStatus.PAID, PayoutStatus.FAILED, PayoutStatus.REJECTED})

R = TypeVar("R", Collection, Payout)


def sandbox_phone(prefix: str) -> str:
    """A random 9-digit Cameroon number on ``prefix`` that the sandbox lets succeed.

    Random, because the service allows only a few prompts per number in five minutes; the last two
    digits are fixed to ``50``, a tail that no sandbox failure rule uses (11-13, 21-23).
    """
    middle = "".join(random.choice("0123456789") for _ in range(9 - len(prefix) - 2))
    return f"{prefix}{middle}50"


class CheckoutForm(HTMLParser):
    """Reads the hosted page as a browser would: the form's action and the providers offered."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.providers: list[str] = []
        self._in_provider_select = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "form" and self.action is None:
            self.action = attributes.get("action")
        elif tag == "select":
            self._in_provider_select = attributes.get("name") == "provider"
        elif tag == "option" and self._in_provider_select and attributes.get("value"):
            self.providers.append(str(attributes["value"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._in_provider_select = False


class Poller:
    """Reads a record again until its status is final, or the deadline passes."""

    def __init__(self, interval: float, deadline: float) -> None:
        self.interval = interval
        self.deadline = deadline

    def until_final(self, read: Callable[[], R], final: frozenset[object]) -> R:
        give_up = time.monotonic() + self.deadline
        while True:
            record = read()
            if record.status in final:
                return record
            if time.monotonic() > give_up:
                raise TimeoutError(f"{record.reference} still {record.status.value} after {self.deadline} s")
            time.sleep(self.interval)


def direct_charge(collect: Client, poll: Poller) -> Collection:
    charge = collect.collect.charge(
        amount=5000,  # XAF has no decimals: a plain int is exact
        currency="XAF",
        country="CM",
        provider="mtn_cm",
        phone=sandbox_phone("67"),
        merchant_reference=f"order-{uuid.uuid4().hex[:8]}",
        description="Two bags of rice",
    )
    print(f"charge {charge.reference} accepted: {charge.status.value} {charge.amount} {charge.currency}")
    record = poll.until_final(lambda: collect.collect.get(charge.reference), FINAL_COLLECTION)
    print(f"charge {record.reference} {record.status.value} (settled {record.amount} {record.currency})")
    return record


def hosted_checkout(collect: Client, poll: Poller) -> Collection:
    created = collect.collect.checkout(
        amount=Decimal("3000"),  # a Decimal goes out as an exact JSON number
        currency="XAF",
        description="Order of three books",
        merchant_reference=f"order-{uuid.uuid4().hex[:8]}",
        expires_in_minutes=30,
    )
    if created.checkout_url is None:
        raise RuntimeError(f"checkout {created.reference} has no checkout_url")
    checkout_url = created.checkout_url
    print(f"checkout {created.reference} created: {created.status.value}")
    print(f"checkoutUrl: {checkout_url}")

    # The payer's side: a browser opens the link, which needs no API key, and submits the form.
    with httpx.Client(timeout=15.0) as browser:
        page = browser.get(checkout_url)
        page.raise_for_status()
        form = CheckoutForm()
        form.feed(page.text)
        if form.action is None or "orange_cm" not in form.providers:
            raise RuntimeError(f"the checkout page offers no usable form (providers: {form.providers})")
        submitted = browser.post(
            urljoin(checkout_url, form.action),
            data={"provider": "orange_cm", "phone": sandbox_phone("69")},
        )
        # 303 See Other back to the page, which then shows the live status.
        if submitted.status_code not in (200, 303):
            raise RuntimeError(f"the checkout form was refused: HTTP {submitted.status_code}")
    print(f"checkout {created.reference} form submitted with orange_cm")

    record = poll.until_final(lambda: collect.collect.get(created.reference), FINAL_COLLECTION)
    print(f"checkout {record.reference} {record.status.value} via {record.provider_code} ({record.method})")
    return record


def payout(disburse: Client, poll: Poller, amount: int) -> Payout:
    limits = disburse.disburse.limits("XAF")
    if not limits.enabled:
        raise RuntimeError(f"payouts are not possible: {limits.blocked_by}: {limits.message}")
    for balance in disburse.account.balances():
        print(f"balance {balance.currency}: available {balance.available}")

    # Keep the key with the payout you mean to make (your own reference for it): calling again with it,
    # after an error or a crash, answers the same payout, and the money moves once.
    idempotency_key = f"payout-{uuid.uuid4()}"
    phone = sandbox_phone("69")
    settlement = f"settlement-{uuid.uuid4().hex[:8]}"

    def create() -> Payout:
        return disburse.disburse.create(
            amount=amount,
            currency="XAF",
            country="CM",
            provider="orange_cm",
            phone=phone,
            recipient_name="Supplier Ltd",
            merchant_reference=settlement,
            idempotency_key=idempotency_key,
        )

    created = create()
    print(f"payout {created.reference} created: {created.status.value} {created.amount} {created.currency}")
    repeat = create()  # the same key again: the same payout, nothing moves twice
    if repeat.reference != created.reference:
        raise RuntimeError("a repeated Idempotency-Key created a second payout")
    record = poll.until_final(lambda: disburse.disburse.get(created.reference), FINAL_PAYOUT)
    print(f"payout {record.reference} {record.status.value} (network reference {record.provider_reference})")
    return record


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A merchant client for a running paymentcore server.")
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000")
    parser.add_argument("--collect-key", required=True, help="an API key with the Collect scope")
    parser.add_argument("--disburse-key", required=True, help="an API key with the Disburse scope")
    parser.add_argument("--payout-amount", type=int, default=2000, help="XAF to pay out (default 2000)")
    parser.add_argument("--poll-interval", type=float, default=0.5, help="seconds between status reads")
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds to wait for a final status")
    args = parser.parse_args(argv)

    poll = Poller(args.poll_interval, args.deadline)
    # One client per API key: a Collect key collects, a Disburse key pays out.
    with (
        Client(args.base_url, args.collect_key) as collect,
        Client(args.base_url, args.disburse_key) as disburse,
    ):
        try:
            charge = direct_charge(collect, poll)
            checkout = hosted_checkout(collect, poll)
            paid = payout(disburse, poll, args.payout_amount)
        except PaymentError as error:  # the API refused: branch on error.code
            print(f"error: {error.code}: {error.message} (request {error.request_id})", file=sys.stderr)
            return 1
        except (httpx.HTTPError, RuntimeError, TimeoutError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    print(
        f"final statuses: charge={charge.status.value} checkout={checkout.status.value} "
        f"payout={paid.status.value}"
    )
    ok = (
        charge.status is CollectionStatus.SUCCESS
        and checkout.status is CollectionStatus.SUCCESS
        and paid.status is PayoutStatus.PAID
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
