"""Storage contract for partitioned work, on every store (memory, SQLite, PostgreSQL).

``outbox.due`` and ``collections.due`` with ``per_lane=N`` list what is due in turns over its lanes
(``_queries.in_turns``): every lane's first item, then every lane's second, at most N of a lane
(payouts are listed in a round over each provider's merchants, ``_queries.payouts_in_due_order``, and
their lane is the provider); ``outbox.defer`` moves an endpoint's waiting events behind the attempt
that probes it.
"""

from __future__ import annotations

import random

import attrs
from test_store_contract import (  # type: ignore[import-not-found, unused-ignore]
    NOW,
    collection,
    event,
    payout,
)

from paymentcore._domain.models import CollectionStatus, DeliveryStatus, Payout, PayoutStatus
from paymentcore._domain.queries import (
    at_most_per_lane,
    collection_due_order,
    collection_is_due,
    collection_lane,
    event_lane,
    in_turns,
    payout_is_due,
    payout_lane,
    payouts_in_due_order,
)
from paymentcore.ports import DueRef, Store


def test_in_turns_takes_each_lane_in_turn_and_caps_a_lane() -> None:
    items = ["a1", "a2", "a3", "a4", "b1", "c1", "c2"]
    assert in_turns(items, lambda item: item[0], 10) == ["a1", "b1", "c1", "a2", "c2", "a3", "a4"]
    assert in_turns(items, lambda item: item[0], 2) == ["a1", "b1", "c1", "a2", "c2"]


def test_due_events_in_turns_over_merchants(store: Store) -> None:
    rows = [event(f"evt_big_{n}", merchant_id="mer_big", created_at=NOW - 1000 + n) for n in range(50)]
    rows += [event("evt_small", merchant_id="mer_small", created_at=NOW - 1)]
    rows += [
        event("evt_done", merchant_id="mer_small", created_at=NOW - 2000, status=DeliveryStatus.DELIVERED)
    ]
    with store.transaction() as tx:
        for e in rows:
            tx.outbox.add(e)
    with store.read() as tx:
        # an endpoint with 50 events due stands no further ahead than one with a single event
        assert [e.id for e in tx.outbox.due(NOW, 2, per_lane=10)] == ["evt_big_0", "evt_small"]
        assert len(tx.outbox.due(NOW, 100, per_lane=10)) == 11
        assert [e.id for e in tx.outbox.due(NOW, 2)] == ["evt_big_0", "evt_big_1"]


def test_due_collections_in_turns_over_providers(store: Store) -> None:
    rows = [
        attrs.evolve(
            collection(f"REQ-mtn-{n}", status=CollectionStatus.PROCESSING, next_check_at=NOW - 50 + n),
            provider="mtn_cm",
        )
        for n in range(4)
    ]
    rows.append(
        attrs.evolve(
            collection("REQ-orange", status=CollectionStatus.PROCESSING, next_check_at=NOW - 1),
            provider="orange_cm",
        )
    )
    rows.append(collection("REQ-unpaid-checkout", expires_at=NOW - 10))  # no provider yet
    with store.transaction() as tx:
        for c in rows:
            tx.collections.add(c)
    with store.read() as tx:
        listed = [c.reference for c in tx.collections.due(NOW, 100, per_lane=2)]
        assert listed == ["REQ-mtn-0", "REQ-unpaid-checkout", "REQ-orange", "REQ-mtn-1"]


def test_due_in_turns_agrees_with_the_one_definition_on_random_records(store: Store) -> None:
    rng = random.Random(7)
    providers = ["mtn_cm", "orange_cm", "moov_ci", "wave_sn"]
    collections = [
        attrs.evolve(
            collection(
                f"REQ-{n:03d}",
                status=rng.choice([CollectionStatus.PROCESSING, CollectionStatus.SUCCESS]),
                next_check_at=NOW - rng.randrange(0, 1000),
            ),
            provider=rng.choice(providers),
        )
        for n in range(120)
    ]
    merchants = [f"mer_{n}" for n in range(6)]
    events = [
        event(f"evt_{n:03d}", merchant_id=rng.choice(merchants), created_at=NOW - rng.randrange(0, 1000))
        for n in range(120)
    ]
    # events not listed, older and newer than the due ones of their lanes: waiting for a later attempt
    # (a retry, a lease), delivered, given up
    events += [
        event(
            f"evt_not_{n:03d}",
            merchant_id=rng.choice(merchants),
            created_at=NOW - rng.randrange(0, 1000),
            status=status,
            next_attempt_at=NOW + 1 + rng.randrange(0, 5000) if status is DeliveryStatus.PENDING else NOW,
        )
        for n, status in enumerate(
            rng.choice([DeliveryStatus.PENDING, DeliveryStatus.DELIVERED, DeliveryStatus.FAILED])
            for _ in range(80)
        )
    ]
    with store.transaction() as tx:
        for c in collections:
            tx.collections.add(c)
        for e in events:
            tx.outbox.add(e)
    with store.read() as tx:
        for per_lane, limit in ((1, 100), (5, 17), (50, 1000)):
            plain_collections = tx.collections.due(NOW, 1000)
            assert (
                tx.collections.due(NOW, limit, per_lane=per_lane)
                == in_turns(plain_collections, collection_lane, per_lane)[:limit]
            )
            plain_events = tx.outbox.due(NOW, 1000)
            assert {e.id for e in plain_events} == {e.id for e in events[:120]}
            assert (
                tx.outbox.due(NOW, limit, per_lane=per_lane)
                == in_turns(plain_events, event_lane, per_lane)[:limit]
            )


def test_due_payouts_take_turns_within_each_provider(store: Store) -> None:
    """A merchant's place in one provider's round does not depend on what it has waiting for another:
    mer_a's Orange payout, due after its three MTN ones, is still its first turn at Orange."""

    def to(provider: str, p: Payout) -> Payout:
        return attrs.evolve(p, provider=provider, phone="690000000" if provider == "orange_cm" else p.phone)

    rows = [
        to("mtn_cm", payout(f"PO-a{n}", merchant_id="mer_a", next_check_at=NOW - 10 + n)) for n in (1, 2, 3)
    ]
    rows.append(to("orange_cm", payout("PO-a4", merchant_id="mer_a", next_check_at=NOW - 6)))
    rows.append(to("orange_cm", payout("PO-b1", merchant_id="mer_b", next_check_at=NOW - 5)))
    with store.transaction() as tx:
        tx.payouts.add_many(rows)
    with store.read() as tx:
        assert [p.reference for p in tx.payouts.due(NOW, 100)] == [
            "PO-a1",
            "PO-a4",
            "PO-b1",
            "PO-a2",
            "PO-a3",
        ]
        assert [p.reference for p in tx.payouts.due(NOW, 100, per_lane=1)] == ["PO-a1", "PO-a4"]
        assert [p.reference for p in tx.payouts.due(NOW, 100, per_lane=2)] == [
            "PO-a1",
            "PO-a4",
            "PO-b1",
            "PO-a2",
        ]


def test_due_payouts_per_lane_agree_with_the_one_definition_on_random_records(store: Store) -> None:
    """The worker's listing (at most ``per_lane`` of a provider) on every store is the definition's:
    deep merchants, shallow ones, payouts not yet due, held for review, finished."""
    rng = random.Random(5)
    providers = ["mtn_cm", "orange_cm", "moov_ci"]
    merchants = [f"mer_{n}" for n in range(9)]
    payouts: list[Payout] = []
    for n in range(300):
        merchant = merchants[min(rng.randrange(0, 12), 8)]  # mer_8 has about a third of them
        status = rng.choice(
            [PayoutStatus.PENDING, PayoutStatus.PENDING, PayoutStatus.SENT, PayoutStatus.PAID]
        )
        held = status is PayoutStatus.PENDING and rng.random() < 0.1
        check = None if held or status is PayoutStatus.PAID else NOW - 500 + rng.randrange(0, 1000)
        made = payout(
            f"PO-{n:03d}", merchant_id=merchant, status=status, awaiting_review=held, next_check_at=check
        )
        payouts.append(attrs.evolve(made, provider=rng.choice(providers)))
    with store.transaction() as tx:
        tx.payouts.add_many(payouts)
    due = payouts_in_due_order(p for p in payouts if payout_is_due(p, NOW))
    assert len({p.merchant_id for p in due}) == 9 and len(due) > 90
    with store.read() as tx:
        for per_lane, limit in ((1, 100), (3, 7), (5, 100), (20, 30), (200, 1000)):
            expected = at_most_per_lane(due, payout_lane, per_lane)[:limit]
            assert tx.payouts.due(NOW, limit, per_lane=per_lane) == expected


def test_due_collections_per_lane_agree_with_the_one_definition_on_random_records(store: Store) -> None:
    """The worker's listing of collections (at most ``per_lane`` of a lane) on every store is the
    definition's: due for a check, overdue (expired, waiting to expire or still checked), a checkout no
    payer chose yet (no provider), not yet due, settled."""
    rng = random.Random(13)
    rows = []
    for n in range(400):
        status = rng.choice(
            [
                CollectionStatus.PENDING,
                CollectionStatus.PROCESSING,
                CollectionStatus.PROCESSING,
                CollectionStatus.SUCCESS,
            ]
        )
        check = rng.choice([None, NOW - rng.randrange(0, 2000), NOW + rng.randrange(1, 2000)])
        submitted = None if rng.random() < 0.5 else NOW - 5000
        made = collection(
            f"REQ-{n:03d}",
            status=status,
            next_check_at=None if status is CollectionStatus.SUCCESS else check,
            expires_at=NOW - 1500 + rng.randrange(0, 3000),
            submitted_at=submitted,
        )
        provider = rng.choice(["mtn_cm", "orange_cm", "moov_ci", None])
        rows.append(
            attrs.evolve(made, merchant_id=rng.choice(["mer_1", "mer_2", "mer_3"]), provider=provider)
        )
    with store.transaction() as tx:
        for c in rows:
            tx.collections.add(c)
    due = sorted((c for c in rows if collection_is_due(c, NOW)), key=collection_due_order)
    assert len(due) > 100 and len({collection_lane(c) for c in due}) == 4
    with store.read() as tx:
        for per_lane, limit in ((1, 100), (3, 9), (10, 100), (40, 60), (500, 1000)):
            expected = in_turns(due, collection_lane, per_lane)[:limit]
            assert tx.collections.due(NOW, limit, per_lane=per_lane) == expected
            listed = tx.collections.due_refs(NOW, limit, per_lane=per_lane)
            assert listed == [DueRef(c.reference, collection_lane(c), c.merchant_id) for c in expected]


def test_the_workers_listing_names_what_due_lists_in_its_order(store: Store) -> None:
    """``due_refs``, the worker's listing, is ``due``'s items as (key, lane, merchant), in ``due``'s
    order, for payouts, collections and events, with and without a cap per lane."""
    rng = random.Random(11)
    providers = ["mtn_cm", "orange_cm", "moov_ci"]
    merchants = [f"mer_{n}" for n in range(5)]
    payouts = [
        attrs.evolve(
            payout(
                f"PO-{n:03d}",
                merchant_id=rng.choice(merchants),
                status=rng.choice([PayoutStatus.PENDING, PayoutStatus.SENT, PayoutStatus.PAID]),
                next_check_at=NOW - rng.randrange(0, 1000),
            ),
            provider=rng.choice(providers),
        )
        for n in range(90)
    ]
    collections = [
        attrs.evolve(
            collection(
                f"REQ-{n:03d}", status=CollectionStatus.PROCESSING, next_check_at=NOW - rng.randrange(0, 1000)
            ),
            merchant_id=rng.choice(merchants),
            provider=rng.choice([*providers, None]),
        )
        for n in range(90)
    ]
    events = [
        event(f"evt_{n:03d}", merchant_id=rng.choice(merchants), created_at=NOW - rng.randrange(0, 1000))
        for n in range(90)
    ]
    with store.transaction() as tx:
        tx.payouts.add_many(payouts)
        for c in collections:
            tx.collections.add(c)
        for e in events:
            tx.outbox.add(e)
    with store.read() as tx:
        for per_lane, limit in ((None, 1000), (None, 7), (1, 100), (4, 23)):
            listed = tx.payouts.due_refs(NOW, limit, per_lane=per_lane)
            due_payouts = tx.payouts.due(NOW, limit, per_lane=per_lane)
            assert listed == [DueRef(p.reference, payout_lane(p), p.merchant_id) for p in due_payouts]
            listed = tx.collections.due_refs(NOW, limit, per_lane=per_lane)
            due_collections = tx.collections.due(NOW, limit, per_lane=per_lane)
            assert listed == [DueRef(c.reference, collection_lane(c), c.merchant_id) for c in due_collections]
            listed = tx.outbox.due_refs(NOW, limit, per_lane=per_lane)
            due_events = tx.outbox.due(NOW, limit, per_lane=per_lane)
            assert listed == [DueRef(e.id, event_lane(e), e.merchant_id) for e in due_events]
            assert due_payouts and due_collections and due_events


def test_defer_moves_only_the_merchants_waiting_events(store: Store) -> None:
    rows = [
        event("evt_a1", merchant_id="mer_a", next_attempt_at=NOW - 5),
        event("evt_a2", merchant_id="mer_a", next_attempt_at=NOW + 50),
        event("evt_a_later", merchant_id="mer_a", next_attempt_at=NOW + 5000),
        event("evt_a_done", merchant_id="mer_a", status=DeliveryStatus.DELIVERED, next_attempt_at=NOW - 5),
        event("evt_b", merchant_id="mer_b", next_attempt_at=NOW - 5),
    ]
    with store.transaction() as tx:
        for e in rows:
            tx.outbox.add(e)
    with store.transaction() as tx:
        assert tx.outbox.defer("mer_a", NOW + 1000) == 2
    with store.read() as tx:
        after = {e.id: e.next_attempt_at for e in (tx.outbox.get(r.id) for r in rows) if e is not None}
    assert after == {
        "evt_a1": NOW + 1000,
        "evt_a2": NOW + 1000,
        "evt_a_later": NOW + 5000,
        "evt_a_done": NOW - 5,
        "evt_b": NOW - 5,
    }
