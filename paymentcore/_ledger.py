"""The double-entry ledger of merchant balances.

Each merchant and currency has three accounts: ``available``, ``reserved`` and ``paid_out``; money
enters from the ``network`` account (external) and a platform fee goes to ``fees``. Every movement is
one :class:`LedgerEntry` whose legs sum to zero, written together with the balance it changes (and, in
the services, with the state change and the outbox event) inside one transaction.

The four movements:

- :func:`credit`  a collection settles: network -> available (net), network -> fees (fee);
- :func:`reserve` a payout is created: available -> reserved;
- :func:`post`    a payout is paid: reserved -> paid_out;
- :func:`release` a payout is rejected or its money returned: reserved -> available.

A payout's reservation resolves (post or release) at most once: the payout record carries the
resolution and the services refuse a second one.
"""

from __future__ import annotations

import attrs

from paymentcore._models import Balance, LedgerEntry, LedgerLeg
from paymentcore._money import minor_to_decimal
from paymentcore.errors import InsufficientBalanceError
from paymentcore.ports import Transaction


class LedgerInvariantError(AssertionError):
    """The books do not balance: a bug, never a user error."""


def _account(merchant_id: str, name: str) -> str:
    return f"merchant:{merchant_id}:{name}"


def _write(
    tx: Transaction,
    *,
    entry_id: str,
    balance: Balance,
    kind: str,
    reference: str,
    legs: tuple[LedgerLeg, ...],
    now: int,
    new_balance: Balance,
) -> Balance:
    if sum(leg.amount for leg in legs) != 0:
        raise LedgerInvariantError(f"entry {entry_id} does not balance")
    tx.ledger.append(
        LedgerEntry(
            id=entry_id,
            merchant_id=balance.merchant_id,
            currency=balance.currency,
            kind=kind,
            reference=reference,
            legs=legs,
            created_at=now,
        )
    )
    tx.ledger.put_balance(new_balance)
    return new_balance


def credit(
    tx: Transaction,
    *,
    entry_id: str,
    merchant_id: str,
    currency: str,
    net: int,
    fee: int,
    reference: str,
    now: int,
) -> Balance:
    if net < 0 or fee < 0 or net + fee <= 0:
        raise ValueError("a credit moves a positive amount")
    balance = tx.ledger.balance(merchant_id, currency)
    legs = [
        LedgerLeg("network", -(net + fee)),
        LedgerLeg(_account(merchant_id, "available"), net),
    ]
    if fee:
        legs.append(LedgerLeg("fees", fee))
    return _write(
        tx,
        entry_id=entry_id,
        balance=balance,
        kind="credit",
        reference=reference,
        legs=tuple(legs),
        now=now,
        new_balance=attrs.evolve(balance, available=balance.available + net, credited=balance.credited + net),
    )


def _move(
    tx: Transaction,
    *,
    entry_id: str,
    merchant_id: str,
    currency: str,
    amount: int,
    reference: str,
    now: int,
    kind: str,
    source: str,
    target: str,
) -> Balance:
    """Move ``amount`` between two of the merchant's accounts (available, reserved, paid_out)."""
    if amount <= 0:
        raise ValueError(f"a {kind} moves a positive amount")
    balance = tx.ledger.balance(merchant_id, currency)
    held: int = getattr(balance, source)
    if held < amount:
        raise LedgerInvariantError(f"{kind} of {amount} with only {held} in {source}")
    legs = (
        LedgerLeg(_account(merchant_id, source), -amount),
        LedgerLeg(_account(merchant_id, target), amount),
    )
    moved = attrs.evolve(balance, **{source: held - amount, target: getattr(balance, target) + amount})
    return _write(
        tx,
        entry_id=entry_id,
        balance=balance,
        kind=kind,
        reference=reference,
        legs=legs,
        now=now,
        new_balance=moved,
    )


def reserve(
    tx: Transaction,
    *,
    entry_id: str,
    merchant_id: str,
    currency: str,
    amount: int,
    reference: str,
    now: int,
    decimals: int,
) -> Balance:
    """A payout is created: available -> reserved, or INSUFFICIENT_BALANCE."""
    available = tx.ledger.balance(merchant_id, currency).available
    if available < amount:
        have, need = minor_to_decimal(available, decimals), minor_to_decimal(amount, decimals)
        raise InsufficientBalanceError(
            f"The available {currency} balance is {have}; this payout needs {need}.",
            param="amount",
            details={"available": have, "required": need, "currency": currency},
        )
    return _move(
        tx, entry_id=entry_id, merchant_id=merchant_id, currency=currency, amount=amount,
        reference=reference, now=now, kind="reserve", source="available", target="reserved",
    )  # fmt: skip


def post(
    tx: Transaction,
    *,
    entry_id: str,
    merchant_id: str,
    currency: str,
    amount: int,
    reference: str,
    now: int,
) -> Balance:
    """A payout is paid: reserved -> paid_out."""
    return _move(
        tx, entry_id=entry_id, merchant_id=merchant_id, currency=currency, amount=amount,
        reference=reference, now=now, kind="post", source="reserved", target="paid_out",
    )  # fmt: skip


def release(
    tx: Transaction,
    *,
    entry_id: str,
    merchant_id: str,
    currency: str,
    amount: int,
    reference: str,
    now: int,
) -> Balance:
    """A payout is rejected or its money returned: reserved -> available."""
    return _move(
        tx, entry_id=entry_id, merchant_id=merchant_id, currency=currency, amount=amount,
        reference=reference, now=now, kind="release", source="reserved", target="available",
    )  # fmt: skip


def check_invariant(tx: Transaction, merchant_id: str, currency: str) -> Balance:
    """Recompute the balance from the journal and compare; raise LedgerInvariantError on any gap.

    Checks: every entry balances; credited = available + reserved + paid_out; available >= 0 and
    reserved >= 0; the stored balance equals the one derived from the entries.
    """
    derived = Balance(merchant_id=merchant_id, currency=currency)
    available = _account(merchant_id, "available")
    reserved = _account(merchant_id, "reserved")
    paid_out = _account(merchant_id, "paid_out")
    for entry in tx.ledger.entries(merchant_id, currency):
        if sum(leg.amount for leg in entry.legs) != 0:
            raise LedgerInvariantError(f"entry {entry.id} does not balance")
        for leg in entry.legs:
            if leg.account == available:
                derived = attrs.evolve(derived, available=derived.available + leg.amount)
                if entry.kind == "credit":
                    derived = attrs.evolve(derived, credited=derived.credited + leg.amount)
            elif leg.account == reserved:
                derived = attrs.evolve(derived, reserved=derived.reserved + leg.amount)
            elif leg.account == paid_out:
                derived = attrs.evolve(derived, paid_out=derived.paid_out + leg.amount)
    stored = tx.ledger.balance(merchant_id, currency)
    if stored != derived:
        raise LedgerInvariantError(f"stored balance {stored} differs from the journal {derived}")
    if derived.credited != derived.available + derived.reserved + derived.paid_out:
        raise LedgerInvariantError(f"credited != available + reserved + paid out: {derived}")
    if derived.available < 0 or derived.reserved < 0:
        raise LedgerInvariantError(f"negative balance: {derived}")
    return derived
