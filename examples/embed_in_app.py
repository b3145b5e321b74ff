"""Embed paymentcore in your own application, without the HTTP server.

The whole payments core is one object, ``PaymentCore``. This script builds one, creates a merchant the
way an operator would, collects money from a phone (a direct charge), and then pays part of the
collected balance out to another phone. The services take keyword arguments and return frozen, typed
records (``Collection``, ``Payout``: ``Decimal`` amounts, enum statuses, aware datetimes); a refusal is
a ``PaymentError`` with a stable ``code``. Background work (talking to the network, dispatching
payouts, delivering webhooks) runs only when we ask for it with ``core.run_until_idle()``, so the whole
flow is synchronous and deterministic. A long-running application would call ``core.start_worker()``
instead.

The network is the built-in sandbox: every Cameroon number succeeds except those ending in the
special digits of the sandbox table (e.g. ``...11`` declines a collection).

Run it::

    python examples/embed_in_app.py                  # in-memory store
    python examples/embed_in_app.py --store sqlite   # a SQLite file in a temporary directory
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

from paymentcore import CollectionStatus, Config, PaymentCore, PaymentError, PayoutStatus

PAYER_PHONE = "670000001"  # an MTN Cameroon number; the sandbox lets it pay
RECIPIENT_PHONE = "690000002"  # an Orange Cameroon number; the sandbox pays it out


def build_core(store: str, workdir: Path) -> PaymentCore:
    """A core on the chosen store. ``sandbox_delay=0``: the sandbox answers at the next tick."""
    config = Config(sandbox_delay=0)
    if store == "sqlite":
        # The database and its server key (``shop.db.key``) live beside each other.
        return PaymentCore.sqlite(workdir / "shop.db", config=config)
    return PaymentCore.memory(config=config)


def print_balances(core: PaymentCore, merchant_id: str, label: str) -> None:
    for balance in core.operator.balances(merchant_id):
        print(
            f"balance {label}: {balance.currency} "
            f"available={balance.available} reserved={balance.reserved}"
        )


def run(core: PaymentCore) -> None:
    # 1. The operator's side: an approved merchant settling in XAF, with a 2 % platform fee.
    merchant = core.operator.create_merchant("Corner Shop", settlement_currency="XAF", fee_percent="2")
    print(f"merchant {merchant.id} ({merchant.name}) settles in {merchant.settlement_currency}")

    # 2. Collect: push a prompt to the payer's phone. The services take keyword arguments and return
    #    frozen records; amounts are ints or Decimals in the currency's units, never floats.
    charge = core.collect.charge(
        merchant.id,
        amount=10_000,
        currency="XAF",
        country="CM",
        provider="mtn_cm",
        phone=PAYER_PHONE,
        merchant_reference="order-1001",
        idempotency_key="charge-order-1001",
    )
    print(f"charge {charge.reference} created with status {charge.status.value}")

    # 3. The "network" answers during background work; run it until nothing is left to do.
    core.run_until_idle()

    # 4. Read the collection again: the record GET /v1/collect/{reference} shows, as a typed Collection
    #    (Decimal amounts, an enum status, aware datetimes).
    collection = core.collect.get(merchant.id, charge.reference)
    print(
        f"charge {collection.reference} status={collection.status.value} "
        f"requested={collection.requested_amount} {collection.requested_currency} "
        f"settled={collection.amount} {collection.currency} via {collection.provider_code}"
    )
    if collection.status is not CollectionStatus.SUCCESS:
        raise SystemExit(f"the charge did not succeed: {collection.failure_category}")
    print_balances(core, merchant.id, "after collection")

    # 5. Disburse from the balance the collection funded. The idempotency key is required: a retry
    #    with the same key and arguments returns the same payout and never moves money twice.
    payout = core.disburse.create(
        merchant.id,
        amount=Decimal("2500"),
        currency="XAF",
        country="CM",
        phone=RECIPIENT_PHONE,
        recipient_name="A. Supplier",
        merchant_reference="settlement-42",
        idempotency_key="payout-settlement-42",
    )
    print(f"payout {payout.reference} created with status {payout.status.value}")
    again = core.disburse.create(
        merchant.id,
        amount=Decimal("2500"),
        currency="XAF",
        country="CM",
        phone=RECIPIENT_PHONE,
        recipient_name="A. Supplier",
        merchant_reference="settlement-42",
        idempotency_key="payout-settlement-42",
    )
    assert again == payout, "the same key must give the same payout"
    print_balances(core, merchant.id, "with the payout reserved")

    # 6. Dispatch and confirmation happen in background work too.
    core.run_until_idle()
    payout = core.disburse.get(merchant.id, payout.reference)
    print(
        f"payout {payout.reference} status={payout.status.value} "
        f"provider_reference={payout.provider_reference}"
    )
    if payout.status is not PayoutStatus.PAID:
        raise SystemExit(f"the payout was not paid: {payout.status_reason}")

    # 7. Errors are exceptions with the spec's stable code: branch on ``code``, show ``message``.
    try:
        core.disburse.create(
            merchant.id,
            amount=1_000_000,
            currency="XAF",
            country="CM",
            phone=RECIPIENT_PHONE,
            recipient_name="A. Supplier",
            merchant_reference="settlement-42",
            idempotency_key="payout-too-big",
        )
    except PaymentError as error:
        print(f"a payout beyond the balance is refused: {error.code}")

    # 8. The books: balances per currency, and a check that the ledger adds up.
    print_balances(core, merchant.id, "final")
    core.check_all_ledgers()
    print(f"final statuses: charge={collection.status.value} payout={payout.status.value}")

    # 9. Your own API layer in front of the core: the operator gives the merchant an API key, and each
    #    request is admitted first: its caller found (UNAUTHORIZED otherwise) and counted against the
    #    key's limits, in one call (on PostgreSQL one round trip). A refused count is an error to raise.
    made = core.operator.create_key(merchant.id, ["disburse"], per_minute=2)
    for attempt in (1, 2, 3):
        principal, count = core.access.admit(made.api_key)
        if isinstance(count, PaymentError):
            print(f"request {attempt} for {principal.merchant.name}: {count.code}")
        elif isinstance(count, Exception):
            raise count
        else:
            print(f"request {attempt} for {principal.merchant.name}: {count.remaining} left this minute")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--store", choices=["memory", "sqlite"], default="memory")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="paymentcore-example-") as workdir:
        core = build_core(args.store, Path(workdir))
        try:
            run(core)
        finally:
            core.close()  # stops the worker (if started) and closes the store
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
