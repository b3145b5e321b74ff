"""Payout and collection transitions on plain records: the tables, the review, resolution at most once."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from paymentcore._domain.models import (
    COLLECTION_TRANSITIONS,
    PAYOUT_TRANSITIONS,
    Collection,
    CollectionKind,
    CollectionStatus,
    Payout,
    PayoutStatus,
    Resolution,
    check_transition,
)
from paymentcore.errors import InvalidTransitionError

T0 = 1_700_000_000_000
NOW = T0 + 5_000

P = PayoutStatus
C = CollectionStatus

# Written out here, independently of models.py: what a payout and a collection may do.
PAYOUT_ALLOWED = {
    (P.PENDING, P.SENT),
    (P.PENDING, P.FAILED),
    (P.PENDING, P.REJECTED),
    (P.SENT, P.PAID),
    (P.SENT, P.FAILED),
    (P.FAILED, P.PAID),
}
COLLECTION_ALLOWED = {
    (C.PENDING, C.PROCESSING),
    (C.PENDING, C.FAILED),
    (C.PROCESSING, C.SUCCESS),
    (C.PROCESSING, C.FAILED),
}


def payout(status: PayoutStatus = P.PENDING, **changes: Any) -> Payout:
    record = Payout(
        reference="pay_1",
        merchant_id="mer_1",
        status=status,
        amount=25_000,
        currency="XAF",
        phone="670000000",
        country="CM",
        provider="mtn_cm",
        recipient_name=None,
        merchant_reference=None,
        awaiting_review=False,
        created_at=T0,
        updated_at=T0,
        next_check_at=T0 + 1_000,
    )
    return attrs.evolve(record, **changes)


def collection(status: CollectionStatus = C.PENDING, **changes: Any) -> Collection:
    record = Collection(
        reference="col_1",
        merchant_id="mer_1",
        kind=CollectionKind.CHARGE,
        status=status,
        requested_amount=10_000,
        requested_currency="XAF",
        description="Payment to Shop",
        merchant_reference=None,
        created_at=T0,
        expires_at=T0 + 60_000,
        updated_at=T0,
        provider="mtn_cm",
        phone="670000000",
        submitted_at=T0,
        next_check_at=T0 + 1_000,
        charged_amount=10_000,
        charged_currency="XAF",
    )
    return attrs.evolve(record, **changes)


# How each target status is reached on a record (None: no method leads there).
PAYOUT_MOVES: dict[PayoutStatus, Callable[[Payout], Payout] | None] = {
    P.PENDING: None,
    P.SENT: lambda p: p.mark_sent(NOW, provider_reference="net_1", next_check_at=NOW + 3_000),
    P.PAID: lambda p: p.mark_paid(NOW),
    P.FAILED: lambda p: p.mark_failed("The network refused the payout.", NOW),
    P.REJECTED: lambda p: attrs.evolve(p, awaiting_review=True).reject(NOW),
}
COLLECTION_MOVES: dict[CollectionStatus, Callable[[Collection], Collection] | None] = {
    C.PENDING: None,
    C.PROCESSING: lambda c: c.start_processing(NOW, NOW + 2_000),
    C.SUCCESS: lambda c: c.settle(net=9_850, fee=150, now=NOW),
    C.FAILED: lambda c: c.fail("DECLINED", "The payment did not clear.", NOW),
}


# --- the tables -----------------------------------------------------------------------------------


def test_the_tables_are_the_documented_ones() -> None:
    assert set(PAYOUT_TRANSITIONS) == PAYOUT_ALLOWED
    assert set(COLLECTION_TRANSITIONS) == COLLECTION_ALLOWED


@pytest.mark.parametrize(("current", "target"), list(itertools.product(P, P)), ids=str)
def test_payout_check_transition(current: PayoutStatus, target: PayoutStatus) -> None:
    if (current, target) in PAYOUT_ALLOWED:
        check_transition(PAYOUT_TRANSITIONS, current, target, "payout")
        return
    with pytest.raises(InvalidTransitionError) as caught:
        check_transition(PAYOUT_TRANSITIONS, current, target, "payout")
    assert caught.value.message == f"A payout in status {current.value} cannot move to {target.value}."
    assert caught.value.details == {"status": current.value, "requested": target.value}


@pytest.mark.parametrize(("current", "target"), list(itertools.product(C, C)), ids=str)
def test_collection_check_transition(current: CollectionStatus, target: CollectionStatus) -> None:
    if (current, target) in COLLECTION_ALLOWED:
        check_transition(COLLECTION_TRANSITIONS, current, target, "collection")
        return
    with pytest.raises(InvalidTransitionError) as caught:
        check_transition(COLLECTION_TRANSITIONS, current, target, "collection")
    assert caught.value.details == {"status": current.value, "requested": target.value}


# --- every pair through the record methods --------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "target"),
    [(c, t) for c, t in itertools.product(P, P) if PAYOUT_MOVES[t] is not None],
    ids=str,
)
def test_payout_methods_follow_the_table(current: PayoutStatus, target: PayoutStatus) -> None:
    move = PAYOUT_MOVES[target]
    assert move is not None
    before = payout(current)
    if (current, target) in PAYOUT_ALLOWED:
        after = move(before)
        assert after.status is target
        assert after.updated_at == NOW
    else:
        with pytest.raises(InvalidTransitionError):
            move(before)
    assert before.status is current and before.updated_at == T0  # the original value is untouched


@pytest.mark.parametrize(
    ("current", "target"),
    [(c, t) for c, t in itertools.product(C, C) if COLLECTION_MOVES[t] is not None],
    ids=str,
)
def test_collection_methods_follow_the_table(current: CollectionStatus, target: CollectionStatus) -> None:
    move = COLLECTION_MOVES[target]
    assert move is not None
    before = collection(current)
    if (current, target) in COLLECTION_ALLOWED:
        after = move(before)
        assert after.status is target
        assert after.updated_at == NOW
    else:
        with pytest.raises(InvalidTransitionError) as caught:
            move(before)
        assert caught.value.details == {"status": current.value, "requested": target.value}
    assert before.status is current and before.updated_at == T0


def test_nothing_moves_a_record_back_to_pending() -> None:
    assert not [pair for pair in PAYOUT_ALLOWED if pair[1] is P.PENDING]
    assert not [pair for pair in COLLECTION_ALLOWED if pair[1] is C.PENDING]


# --- payouts: what each step records --------------------------------------------------------------


def test_mark_sent_records_the_network_reference_and_next_check() -> None:
    sent = payout(status_reason="stale").mark_sent(NOW, provider_reference="net_9", next_check_at=NOW + 3_000)
    assert sent == payout(
        status=P.SENT,
        provider_reference="net_9",
        status_reason=None,
        next_check_at=NOW + 3_000,
        updated_at=NOW,
    )


def test_mark_sent_without_a_reference_keeps_the_known_one() -> None:
    sent = payout(provider_reference="net_1").mark_sent(NOW, provider_reference=None, next_check_at=NOW)
    assert sent.provider_reference == "net_1"
    assert payout().mark_sent(NOW, provider_reference=None, next_check_at=NOW).provider_reference is None


@pytest.mark.parametrize("current", [P.SENT, P.FAILED])
def test_mark_paid_posts_the_reservation(current: PayoutStatus) -> None:
    paid = payout(current, status_reason="The network refused the payout.").mark_paid(NOW)
    assert paid == payout(
        P.PAID, status_reason=None, resolution=Resolution.POSTED, next_check_at=None, updated_at=NOW
    )


def test_mark_failed_keeps_the_money_reserved() -> None:
    failed = payout(P.SENT).mark_failed("The network did not complete the payout.", NOW)
    assert failed == payout(
        P.FAILED, status_reason="The network did not complete the payout.", next_check_at=None, updated_at=NOW
    )
    assert failed.resolution is None


# --- review ---------------------------------------------------------------------------------------


REVIEW = "Held for review: the amount is above the review threshold."


def held() -> Payout:
    return payout(awaiting_review=True, status_reason=REVIEW, next_check_at=None)


def test_reject_a_held_payout() -> None:
    rejected = held().reject(NOW)
    assert rejected == payout(
        P.REJECTED,
        awaiting_review=False,
        status_reason="Declined during review; the money is back in the balance.",
        resolution=Resolution.RELEASED,
        next_check_at=None,
        updated_at=NOW,
    )


def test_release_a_held_payout_makes_it_due_now() -> None:
    released = held().release_from_review(NOW)
    assert released == payout(
        P.PENDING, awaiting_review=False, status_reason=None, next_check_at=NOW, updated_at=NOW
    )
    with pytest.raises(InvalidTransitionError):
        released.reject(NOW)  # no longer held


@pytest.mark.parametrize(
    ("action", "verb"),
    [(Payout.reject, "rejected"), (Payout.release_from_review, "released")],
    ids=["reject", "release"],
)
def test_review_actions_need_a_held_payout(action: Callable[[Payout, int], Payout], verb: str) -> None:
    with pytest.raises(InvalidTransitionError) as caught:
        action(payout(P.PENDING), NOW)
    assert caught.value.message == f"Payout pay_1 is PENDING and not held for review; nothing {verb}."
    for status in (P.SENT, P.PAID, P.FAILED, P.REJECTED):
        with pytest.raises(InvalidTransitionError) as caught:
            action(payout(status, awaiting_review=True), NOW)
        assert caught.value.message == (
            f"Payout pay_1 is {status.value} and not held for review; nothing {verb}."
        )


# --- resolution, at most once ---------------------------------------------------------------------


def test_resolve_released_a_failed_payout_keeps_its_reason() -> None:
    failed = payout(P.FAILED, status_reason="The network refused the payout.", next_check_at=None)
    assert failed.resolve_released(NOW) == payout(
        P.FAILED,
        status_reason="The network refused the payout. Resolved: no money moved; returned to the balance.",
        resolution=Resolution.RELEASED,
        next_check_at=None,
        updated_at=NOW,
    )


def test_resolve_released_a_sent_payout_without_a_reason() -> None:
    resolved = payout(P.SENT).resolve_released(NOW)
    assert resolved.status is P.FAILED
    assert resolved.status_reason == (
        "The network did not complete the payout. Resolved: no money moved; returned to the balance."
    )
    assert resolved.resolution is Resolution.RELEASED and resolved.next_check_at is None


@pytest.mark.parametrize("status", [P.PENDING, P.PAID, P.REJECTED])
def test_only_failed_or_sent_payouts_resolve(status: PayoutStatus) -> None:
    with pytest.raises(InvalidTransitionError) as caught:
        payout(status).resolve_released(NOW)
    assert caught.value.message == (
        f"Payout pay_1 is {status.value}; only an unresolved FAILED or SENT payout can be resolved."
    )


@pytest.mark.parametrize("status", [P.SENT, P.FAILED])
def test_a_released_payout_resolves_only_once(status: PayoutStatus) -> None:
    resolved = payout(status).resolve_released(NOW)
    with pytest.raises(InvalidTransitionError) as caught:
        resolved.resolve_released(NOW + 1)
    assert caught.value.message == (
        "Payout pay_1 is FAILED and already resolved;"
        " only an unresolved FAILED or SENT payout can be resolved."
    )
    with pytest.raises(InvalidTransitionError) as caught:
        resolved.mark_paid(NOW + 1)  # FAILED -> PAID is in the table, but the money already came back
    assert caught.value.message == "Payout pay_1 is already resolved."


@pytest.mark.parametrize("status", [P.SENT, P.FAILED])
def test_a_paid_payout_resolves_only_once(status: PayoutStatus) -> None:
    paid = payout(status).mark_paid(NOW)
    with pytest.raises(InvalidTransitionError):
        paid.mark_paid(NOW + 1)
    with pytest.raises(InvalidTransitionError) as caught:
        paid.resolve_released(NOW + 1)
    assert "already resolved" in caught.value.message


def test_a_rejected_payout_cannot_be_resolved_again() -> None:
    rejected = held().reject(NOW)
    for step in (rejected.resolve_released, rejected.mark_paid):
        with pytest.raises(InvalidTransitionError):
            step(NOW + 1)


# --- collections: what each step records ----------------------------------------------------------


def test_start_processing_sets_the_next_check() -> None:
    assert collection().start_processing(NOW, NOW + 2_000) == collection(
        C.PROCESSING, next_check_at=NOW + 2_000, updated_at=NOW
    )


def test_settle_credits_net_in_the_charged_currency() -> None:
    processing = collection(C.PROCESSING, requested_currency="USD", charged_currency="XAF")
    settled = processing.settle(net=9_850, fee=150, now=NOW)
    assert settled == attrs.evolve(
        processing,
        status=C.SUCCESS,
        settled_amount=9_850,
        settled_currency="XAF",
        fee_amount=150,
        next_check_at=None,
        updated_at=NOW,
    )


def test_settle_refuses_a_collection_never_charged() -> None:
    with pytest.raises(InvalidTransitionError):
        collection(C.PROCESSING, charged_currency=None).settle(net=1, fee=0, now=NOW)


@pytest.mark.parametrize(
    ("current", "category", "reason"),
    [
        (C.PENDING, "EXPIRED", "The checkout link expired."),
        (C.PROCESSING, "TIMEOUT", "The payer did not answer in time."),
    ],
)
def test_fail_records_category_and_reason(current: CollectionStatus, category: str, reason: str) -> None:
    failed = collection(current).fail(category, reason, NOW)
    assert failed == collection(
        C.FAILED, failure_category=category, failure_reason=reason, next_check_at=None, updated_at=NOW
    )
