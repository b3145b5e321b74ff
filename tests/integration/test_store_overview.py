"""The storage queries of the console's overview, on every store (memory, SQLite, PostgreSQL).

Each store is given the same random records, and must answer what a plain Python count over those
records answers: the tallies by span, currency and status; the per-currency totals of the operator's
queues; the operator's lists across merchants with their currency and creation-time filters; how long
the oldest due item of each kind has waited (``_queries``' definitions); the webhook endpoints in
trouble, worst first.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import attrs

from paymentcore._domain.models import (
    Collection,
    CollectionKind,
    CollectionStatus,
    DeliveryStatus,
    Event,
    Payout,
    PayoutStatus,
    Resolution,
    WebhookEndpoint,
)
from paymentcore._domain.queries import (
    collection_due_since,
    collection_is_due,
    endpoint_is_troubled,
    endpoint_trouble_order,
    event_is_due,
    payout_is_due,
)
from paymentcore.ports import CurrencyTotal, Store, Tally

NOW = 1_767_225_600_000 + 13 * 3_600_000 + 1234  # 2026-01-01T13:00:01.234Z
HOUR = 3_600_000
CURRENCIES = ["XAF", "XOF", "EUR"]


def _payouts(rng: random.Random, n: int) -> list[Payout]:
    made = []
    for i in range(n):
        status = rng.choice(list(PayoutStatus))
        created = NOW - rng.randrange(-HOUR, 30 * HOUR)  # some in the future, some before the window
        made.append(
            Payout(
                reference=f"PO-{i:04d}",
                merchant_id=rng.choice(["mer_a", "mer_b"]),
                status=status,
                amount=rng.randrange(1, 100_000),
                currency=rng.choice(CURRENCIES),
                phone="670000000",
                country="CM",
                provider="mtn_cm",
                recipient_name=None,
                merchant_reference=None,
                awaiting_review=status is PayoutStatus.PENDING and rng.random() < 0.5,
                created_at=created,
                updated_at=created,
                next_check_at=rng.choice([None, NOW - rng.randrange(-60_000, 600_000)]),
                resolution=(
                    rng.choice([None, Resolution.POSTED, Resolution.RELEASED])
                    if status in (PayoutStatus.FAILED, PayoutStatus.PAID)
                    else None
                ),
            )
        )
    return made


def _collections(rng: random.Random, n: int) -> list[Collection]:
    made = []
    for i in range(n):
        created = NOW - rng.randrange(-HOUR, 30 * HOUR)
        made.append(
            Collection(
                reference=f"REQ-{i:04d}",
                merchant_id=rng.choice(["mer_a", "mer_b"]),
                kind=CollectionKind.CHARGE,
                status=rng.choice(list(CollectionStatus)),
                requested_amount=rng.randrange(1, 100_000),
                requested_currency=rng.choice(CURRENCIES),
                description="d",
                merchant_reference=None,
                created_at=created,
                expires_at=NOW - rng.randrange(-600_000, 600_000),
                updated_at=created,
                submitted_at=rng.choice([None, created]),
                next_check_at=rng.choice([None, NOW - rng.randrange(-600_000, 600_000)]),
            )
        )
    return made


def _events(rng: random.Random, n: int) -> list[Event]:
    return [
        Event(
            id=f"evt_{i:04d}",
            merchant_id="mer_a",
            type="disburse.paid",
            data={},
            created_at=NOW - 1000,
            status=rng.choice(list(DeliveryStatus)),
            next_attempt_at=NOW - rng.randrange(-600_000, 600_000),
        )
        for i in range(n)
    ]


def _fill(store: Store, seed: int) -> tuple[list[Payout], list[Collection], list[Event]]:
    """Random records, written; then a third of the payouts and collections change status (the SQL
    stores keep their hourly counts with triggers: an update must move a record between counts)."""
    rng = random.Random(seed)
    payouts, collections, events = _payouts(rng, 120), _collections(rng, 120), _events(rng, 30)
    with store.transaction() as tx:
        for payout in payouts:
            tx.payouts.add(payout)
        for collection in collections:
            tx.collections.add(collection)
        for event in events:
            tx.outbox.add(event)
    for i in range(0, len(payouts), 3):
        payouts[i] = attrs.evolve(payouts[i], status=rng.choice(list(PayoutStatus)))
    for i in range(1, len(collections), 3):
        collections[i] = attrs.evolve(collections[i], status=rng.choice(list(CollectionStatus)))
    with store.transaction() as tx:
        for payout in payouts[::3]:
            tx.payouts.update(payout)
        for collection in collections[1::3]:
            tx.collections.update(collection)
    return payouts, collections, events


def expected_tally(rows: list[tuple[int, str, str, int]], since: int, until: int, width: int) -> list[Tally]:
    counts: Counter[tuple[int, str, str]] = Counter()
    sums: Counter[tuple[int, str, str]] = Counter()
    for created, currency, status, amount in rows:
        if since <= created < until:
            key = ((created - since) // width, currency, status)
            counts[key] += 1
            sums[key] += amount
    return [Tally(*key, counts[key], sums[key]) for key in sorted(counts)]


def test_tallies_group_by_span_currency_and_status(store: Store) -> None:
    payouts, collections, _ = _fill(store, 1)
    payout_rows = [(p.created_at, p.currency, p.status.value, p.amount) for p in payouts]
    collection_rows = [
        (c.created_at, c.requested_currency, c.status.value, c.requested_amount) for c in collections
    ]
    first_hour = (NOW // HOUR - 23) * HOUR
    windows = [
        (first_hour, NOW + 1, HOUR),  # the charts: whole hours from the hourly counts, the current from rows
        (NOW - HOUR, NOW + 1, HOUR + 1),  # the last hour: one span, no whole hour
        (first_hour - 5 * HOUR - 17, NOW + 3 * HOUR, 40 * HOUR),  # one span: whole hours and both ends
        (first_hour, NOW, 2 * HOUR),  # spans of two hours
        (first_hour + 1000, NOW, HOUR),  # spans that straddle hours: every record from the rows
        (NOW - 7, NOW - 6, 1),
    ]
    with store.read() as tx:
        for since, until, width in windows:
            assert tx.payouts.tally(since, until, width) == expected_tally(payout_rows, since, until, width)
            found = tx.collections.tally(since, until, width)
            assert found == expected_tally(collection_rows, since, until, width)
        assert any(t.bucket > 0 for t in tx.payouts.tally(first_hour, NOW + 1, HOUR))


def test_totals_per_currency_of_the_operators_queues(store: Store) -> None:
    payouts, _, _ = _fill(store, 2)

    def expected(keep: Any) -> list[CurrencyTotal]:
        counts: Counter[str] = Counter()
        sums: Counter[str] = Counter()
        for p in payouts:
            if keep(p):
                counts[p.currency] += 1
                sums[p.currency] += p.amount
        return [CurrencyTotal(c, counts[c], sums[c]) for c in sorted(counts)]

    with store.read() as tx:
        held = tx.payouts.totals(status=PayoutStatus.PENDING, awaiting_review=True)
        assert held == expected(lambda p: p.awaiting_review and p.status is PayoutStatus.PENDING)
        assert held  # the random records hold some
        failed = tx.payouts.totals(status=PayoutStatus.FAILED, unresolved=True)
        assert failed == expected(lambda p: p.status is PayoutStatus.FAILED and p.resolution is None)
        assert tx.payouts.totals() == expected(lambda p: True)
        assert tx.payouts.totals(unresolved=False) == expected(lambda p: p.resolution is not None)


def test_operator_lists_filter_by_currency_and_creation_time_and_page_oldest_first(store: Store) -> None:
    payouts, collections, _ = _fill(store, 3)
    since, until = NOW - 12 * HOUR, NOW - HOUR
    wanted = sorted(
        (p for p in payouts if p.currency == "XOF" and since <= p.created_at < until),
        key=lambda p: (p.created_at, p.reference),  # written in reference order
    )
    assert len(wanted) > 3
    with store.read() as tx:
        first = tx.payouts.queue(limit=3, currency="XOF", created_from=since, created_before=until)
        assert first is not None
        rest = tx.payouts.queue(
            limit=100, after=first[-1].reference, currency="XOF", created_from=since, created_before=until
        )
        assert rest is not None
        assert [p.reference for p in first + rest] == [p.reference for p in wanted]
        failed = tx.payouts.queue(limit=100, status=PayoutStatus.FAILED, currency="XAF")
        assert failed is not None
        assert {p.reference for p in failed} == {
            p.reference for p in payouts if p.status is PayoutStatus.FAILED and p.currency == "XAF"
        }

        expected = sorted(
            (
                c
                for c in collections
                if c.requested_currency == "EUR"
                and c.status is CollectionStatus.FAILED
                and c.created_at >= since
            ),
            key=lambda c: (c.created_at, c.reference),
        )
        found = tx.collections.queue(
            limit=100, currency="EUR", status=CollectionStatus.FAILED, created_from=since
        )
        assert found is not None and [c.reference for c in found] == [c.reference for c in expected]
        mine = tx.collections.queue(limit=100, merchant_id="mer_b", created_before=NOW)
        assert mine is not None
        assert {c.reference for c in mine} == {
            c.reference for c in collections if c.merchant_id == "mer_b" and c.created_at < NOW
        }
        assert tx.collections.queue(limit=5, after="REQ-none") is None
        assert tx.payouts.queue(limit=5, after="PO-none", currency="XAF") is None


def test_oldest_due_is_the_earliest_moment_a_due_item_became_due(store: Store) -> None:
    payouts, collections, events = _fill(store, 4)
    with store.read() as tx:
        for now in (NOW - 700_000, NOW, NOW + 700_000):
            due_payouts = [p.next_check_at for p in payouts if payout_is_due(p, now)]
            assert tx.payouts.oldest_due(now) == min((t for t in due_payouts if t is not None), default=None)
            since = [collection_due_since(c, now) for c in collections if collection_is_due(c, now)]
            assert tx.collections.oldest_due(now) == min((t for t in since if t is not None), default=None)
            due_events = [e.next_attempt_at for e in events if event_is_due(e, now)]
            assert tx.outbox.oldest_due(now) == min(due_events, default=None)
        assert tx.payouts.oldest_due(NOW - 10 * HOUR) is None


def test_webhook_endpoints_in_trouble_worst_first(store: Store) -> None:
    base = WebhookEndpoint(
        merchant_id="mer_0",
        url="https://shop.example/hooks",
        secret_encrypted="x",
        events="v2",
        is_active=True,
        disabled_reason=None,
        updated_at=NOW,
    )
    endpoints = [
        attrs.evolve(base, merchant_id="mer_ok"),
        attrs.evolve(base, merchant_id="mer_one", consecutive_failures=1),
        attrs.evolve(base, merchant_id="mer_three", consecutive_failures=3),
        attrs.evolve(base, merchant_id="mer_threeb", consecutive_failures=3),
        attrs.evolve(
            base, merchant_id="mer_off", is_active=False, consecutive_failures=10, disabled_reason="10 failed"
        ),
        attrs.evolve(base, merchant_id="mer_off2", is_active=False, consecutive_failures=0),
    ]
    with store.transaction() as tx:
        for endpoint in endpoints:
            tx.webhooks.put(endpoint)
    expected = sorted((e for e in endpoints if endpoint_is_troubled(e)), key=endpoint_trouble_order)
    assert [e.merchant_id for e in expected] == ["mer_off", "mer_off2", "mer_three", "mer_threeb", "mer_one"]
    with store.read() as tx:
        assert tx.webhooks.count_troubled() == (3, 2)
        assert tx.webhooks.troubled(3) == expected[:3]
        assert tx.webhooks.troubled(10) == expected
