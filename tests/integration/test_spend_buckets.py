"""SqliteStore.spent() uses hourly buckets kept by triggers: it must equal the plain sum, always."""

from __future__ import annotations

import tempfile
from pathlib import Path

import attrs
import hypothesis.strategies as st
from hypothesis import given, settings

from paymentcore._domain.models import Payout, PayoutStatus
from paymentcore.adapters.sqlite import SqliteStore

HOUR = 3_600_000
STATUSES = list(PayoutStatus)


def payout(index: int, created_at: int, amount: int, status: PayoutStatus) -> Payout:
    return Payout(
        reference=f"PO-{index}",
        merchant_id="m1",
        status=status,
        amount=amount,
        currency="XAF",
        phone="670000000",
        country="CM",
        provider="mtn_cm",
        recipient_name=None,
        merchant_reference=None,
        awaiting_review=False,
        created_at=created_at,
        updated_at=created_at,
    )


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 10 * HOUR), st.integers(1, 10_000), st.sampled_from(STATUSES)),
        max_size=40,
    ),
    rejected_later=st.sets(st.integers(0, 39)),
    since=st.integers(0, 10 * HOUR),
)
def test_spent_equals_the_plain_sum(
    rows: list[tuple[int, int, PayoutStatus]], rejected_later: set[int], since: int
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = SqliteStore(Path(folder) / "s.db", synchronous="NORMAL")
        try:
            payouts = [payout(i, at, amount, status) for i, (at, amount, status) in enumerate(rows)]
            with store.transaction() as tx:
                for p in payouts:
                    tx.payouts.add(p)
            with store.transaction() as tx:
                for i in rejected_later:
                    if i < len(payouts) and payouts[i].status is PayoutStatus.PENDING:
                        payouts[i] = attrs.evolve(payouts[i], status=PayoutStatus.REJECTED)
                        tx.payouts.update(payouts[i])
            counted = (PayoutStatus.PENDING, PayoutStatus.SENT, PayoutStatus.PAID, PayoutStatus.FAILED)
            expected = sum(p.amount for p in payouts if p.created_at >= since and p.status in counted)
            with store.read() as tx:
                assert tx.payouts.spent("m1", "XAF", since) == expected
                assert tx.payouts.spent("m1", "XOF", since) == 0
        finally:
            store.close()
