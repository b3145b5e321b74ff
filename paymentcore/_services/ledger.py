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

from paymentcore._domain.errors import InsufficientBalanceError
from paymentcore._domain.models import Balance, LedgerEntry, LedgerLeg
from paymentcore._domain.money import minor_to_decimal
from paymentcore._domain.records import LedgerItemType
from paymentcore.ports import Transaction


class LedgerInvariantError(AssertionError):
    """The books do not balance: a bug, never a user error."""


def _account(merchant_id: str, name: str) -> str:
    return f"merchant:{merchant_id}:{name}"


def _journal(
    tx: Transaction,
    *,
    entry_id: str,
    merchant_id: str,
    currency: str,
    kind: str,
    reference: str,
    legs: tuple[LedgerLeg, ...],
    now: int,
) -> None:
    if sum(leg.amount for leg in legs) != 0:
        raise LedgerInvariantError(f"entry {entry_id} does not balance")
    tx.ledger.append(
        LedgerEntry(
            id=entry_id,
            merchant_id=merchant_id,
            currency=currency,
            kind=kind,
            reference=reference,
            legs=legs,
            created_at=now,
        )
    )


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
    legs = [
        LedgerLeg("network", -(net + fee)),
        LedgerLeg(_account(merchant_id, "available"), net),
    ]
    if fee:
        legs.append(LedgerLeg("fees", fee))
    _journal(
        tx, entry_id=entry_id, merchant_id=merchant_id, currency=currency, kind="credit",
        reference=reference, legs=tuple(legs), now=now,
    )  # fmt: skip
    balance = tx.ledger.move(merchant_id, currency, available=net, credited=net)
    if balance is None:  # adding never goes below zero
        raise LedgerInvariantError(f"credit of {net} refused by the store")
    return balance


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
    held: bool = False,
) -> None:
    """Move ``amount`` between two of the merchant's accounts (available, reserved, paid_out).

    One conditional step in the store: the source is debited only if it holds the amount, so two
    movements racing on one balance can never take the same money twice. Money the source is known to
    hold (``held``: the reservation of a payout paid or released, or an amount checked against the
    balance read under the merchant's lock) moves by a ``tx.ledger.shift``, which the store may check
    with the unit's end rather than answer at once; other money by a ``move``.
    """
    if amount <= 0:
        raise ValueError(f"a {kind} moves a positive amount")
    amounts = {source: -amount, target: amount}
    if held or source == "reserved":
        done = tx.ledger.shift(merchant_id, currency, **amounts)
    else:
        done = tx.ledger.move(merchant_id, currency, **amounts) is not None
    if not done:
        there: int = getattr(tx.ledger.balance(merchant_id, currency), source)
        raise LedgerInvariantError(f"{kind} of {amount} with only {there} in {source}")
    legs = (
        LedgerLeg(_account(merchant_id, source), -amount),
        LedgerLeg(_account(merchant_id, target), amount),
    )
    _journal(
        tx, entry_id=entry_id, merchant_id=merchant_id, currency=currency, kind=kind,
        reference=reference, legs=legs, now=now,
    )  # fmt: skip


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
    available: int | None = None,
) -> None:
    """A payout is created: available -> reserved, or INSUFFICIENT_BALANCE (and nothing moves).

    ``available``: the balance's available amount, when the caller read it in this unit under the
    merchant's lock (every writer of the balance holds it): checked here, and the money moved by a
    shift, whose own check may wait for the unit's end (no answer waited for)."""
    if available is not None:
        check_funds(available, amount, currency=currency, decimals=decimals)
    try:
        _move(
            tx, entry_id=entry_id, merchant_id=merchant_id, currency=currency, amount=amount,
            reference=reference, now=now, kind="reserve", source="available", target="reserved",
            held=available is not None,
        )  # fmt: skip
        return
    except LedgerInvariantError:
        available = tx.ledger.balance(merchant_id, currency).available
        if available >= amount:
            raise
    check_funds(available, amount, currency=currency, decimals=decimals)
    raise LedgerInvariantError(f"reserve of {amount} refused with {available} available")


def check_funds(available: int, amount: int, *, currency: str, decimals: int) -> None:
    """INSUFFICIENT_BALANCE unless ``available`` (minor units) covers ``amount``: the reservation's rule,
    for :func:`reserve` and for :class:`Reservations`."""
    if available >= amount:
        return
    have, need = minor_to_decimal(available, decimals), minor_to_decimal(amount, decimals)
    raise InsufficientBalanceError(
        f"The available {currency} balance is {have}; this payout needs {need}.",
        param="amount",
        details={"available": have, "required": need, "currency": currency},
    )


class Reservations:
    """Many payouts' reservations in one unit of work, written together by :meth:`write`.

    :meth:`reserve` checks each one against the available balance as the earlier ones leave it (the
    balance is read once per currency) with :func:`check_funds`, and keeps its journal entry; nothing
    is written until :meth:`write`, which moves each currency's total in one conditional step and
    appends every entry in order. Inside a write unit of work the balance cannot change meanwhile.
    """

    def __init__(self, tx: Transaction, merchant_id: str) -> None:
        self._tx = tx
        self._merchant_id = merchant_id
        self._available: dict[str, int] = {}
        self._totals: dict[str, int] = {}
        self._entries: list[LedgerEntry] = []

    def reserve(
        self, *, entry_id: str, currency: str, amount: int, reference: str, now: int, decimals: int
    ) -> None:
        if amount <= 0:
            raise ValueError("a reserve moves a positive amount")
        if currency not in self._available:
            self._available[currency] = self._tx.ledger.balance(self._merchant_id, currency).available
        check_funds(self._available[currency], amount, currency=currency, decimals=decimals)
        self._available[currency] -= amount
        self._totals[currency] = self._totals.get(currency, 0) + amount
        legs = (
            LedgerLeg(_account(self._merchant_id, "available"), -amount),
            LedgerLeg(_account(self._merchant_id, "reserved"), amount),
        )
        self._entries.append(
            LedgerEntry(
                id=entry_id,
                merchant_id=self._merchant_id,
                currency=currency,
                kind="reserve",
                reference=reference,
                legs=legs,
                created_at=now,
            )
        )

    def write(self) -> None:
        for currency, total in self._totals.items():
            if self._tx.ledger.move(self._merchant_id, currency, available=-total, reserved=total) is None:
                raise LedgerInvariantError(f"reserve of {total} {currency} refused by the store")
        if self._entries:
            self._tx.ledger.append_many(self._entries)


def post(
    tx: Transaction,
    *,
    entry_id: str,
    merchant_id: str,
    currency: str,
    amount: int,
    reference: str,
    now: int,
) -> None:
    """A payout is paid: reserved -> paid_out."""
    _move(
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
) -> None:
    """A payout is rejected or its money returned: reserved -> available."""
    _move(
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


# --- the history of a balance ----------------------------------------------------------------------

#: what each kind of entry is, as the merchant sees it
ITEM_TYPES = {
    "credit": LedgerItemType.COLLECTION_SETTLED,
    "reserve": LedgerItemType.PAYOUT_RESERVED,
    "post": LedgerItemType.PAYOUT_PAID,
    "release": LedgerItemType.PAYOUT_RELEASED,
}
_WALK = 500  # entries read at a time when walking back from the current balance


@attrs.frozen
class Movement:
    """What one entry did to the merchant's ``available`` and ``reserved`` accounts (minor units)."""

    available: int
    reserved: int

    @classmethod
    def of(cls, entry: LedgerEntry) -> Movement:
        available = reserved = 0
        for leg in entry.legs:
            if leg.account == _account(entry.merchant_id, "available"):
                available += leg.amount
            elif leg.account == _account(entry.merchant_id, "reserved"):
                reserved += leg.amount
        return cls(available=available, reserved=reserved)

    def signed_amount(self, kind: str) -> int:
        """The item's ``amount``: the change to reserved for a post (the money left), else to available
        (see :class:`paymentcore.LedgerItem`)."""
        return self.reserved if kind == "post" else self.available


@attrs.frozen
class HistoryLine:
    """An entry of the journal with the balance right after it."""

    entry: LedgerEntry
    movement: Movement
    available: int
    reserved: int


def history(
    tx: Transaction, merchant_id: str, currency: str, *, limit: int, after: str | None
) -> list[HistoryLine] | None:
    """Up to ``limit`` entries of the account, newest first, after the entry ``after``, each with the
    balance right after it; None when ``after`` is not an entry of this account.

    The balance after the newest entry is the stored balance; each older one is found by undoing the
    entries in between, so a page costs the entries from the newest down to it, not the whole journal.
    """
    rows = tx.ledger.page(merchant_id, currency, limit=limit, after=after)
    if rows is None:
        return None
    balance = tx.ledger.balance(merchant_id, currency)
    available, reserved = balance.available, balance.reserved
    if after is not None:  # undo every entry from the newest down to ``after`` itself
        cursor: str | None = None
        while cursor != after:
            newer = tx.ledger.page(merchant_id, currency, limit=_WALK, after=cursor)
            if not newer:
                raise LedgerInvariantError(f"entry {after} vanished while its history was read")
            for entry in newer:
                moved = Movement.of(entry)
                available, reserved = available - moved.available, reserved - moved.reserved
                cursor = entry.id
                if cursor == after:
                    break
    lines = []
    for entry in rows:
        moved = Movement.of(entry)
        lines.append(HistoryLine(entry, moved, available, reserved))
        available, reserved = available - moved.available, reserved - moved.reserved
    return lines
