"""The payout guards (``can_release``/``can_reject``/``can_resolve`` and their reasons): one rule each,
consistent with the transition table, with what the methods do, and on every record that has them."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal

import attrs
import pytest

from paymentcore import OperatorPayout
from paymentcore import Payout as UserPayout
from paymentcore._domain.models import PAYOUT_TRANSITIONS, Payout, PayoutStatus, Resolution
from paymentcore.errors import InvalidTransitionError

P = PayoutStatus
T0 = 1_700_000_000_000
CASES = list(itertools.product(PayoutStatus, (False, True), (None, *Resolution)))


def stored(status: PayoutStatus, held: bool, resolution: Resolution | None) -> Payout:
    return Payout(
        reference="PO-1-ABC",
        merchant_id="mer_1",
        status=status,
        amount=25_000,
        currency="XAF",
        phone="670000000",
        country="CM",
        provider="mtn_cm",
        recipient_name=None,
        merchant_reference=None,
        awaiting_review=held,
        created_at=T0,
        updated_at=T0,
        resolution=resolution,
    )


def seen(payout: Payout) -> OperatorPayout:
    """The operator's view of ``payout``, built by hand (no catalogue needed)."""
    user = UserPayout(
        reference=payout.reference,
        status=payout.status,
        amount=Decimal("25000"),
        currency="XAF",
        phone=payout.phone,
        recipient_name=None,
        merchant_reference=None,
        provider_reference=None,
        awaiting_review=payout.awaiting_review,
        status_reason=None,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    resolution = None if payout.resolution is None else payout.resolution.value
    return OperatorPayout("mer_1", user, resolution, datetime(2026, 1, 1, tzinfo=UTC))


@pytest.mark.parametrize(("status", "held", "resolution"), CASES)
def test_each_guard_follows_the_transition_table(
    status: PayoutStatus, held: bool, resolution: Resolution | None
) -> None:
    payout = stored(status, held, resolution)
    unresolved = resolution is None
    # release: a held payout goes on to the network (PENDING -> SENT next)
    assert payout.can_release == (held and (status, P.SENT) in PAYOUT_TRANSITIONS and status is P.PENDING)
    # reject: a held, unresolved payout may move to REJECTED
    assert payout.can_reject == (held and unresolved and (status, P.REJECTED) in PAYOUT_TRANSITIONS)
    # resolve: an unresolved payout that may still turn out PAID (SENT or FAILED)
    assert payout.can_resolve == (unresolved and (status, P.PAID) in PAYOUT_TRANSITIONS)


def _outcome(act: Callable[[], object]) -> str | None:
    try:
        act()
    except InvalidTransitionError as refused:
        return refused.message
    return None


@pytest.mark.parametrize(("status", "held", "resolution"), CASES)
def test_the_guard_says_what_the_transition_does_and_why_not(
    status: PayoutStatus, held: bool, resolution: Resolution | None
) -> None:
    payout = stored(status, held, resolution)
    for why, can, act in (
        (payout.why_not_release(), payout.can_release, lambda: payout.release_from_review(T0)),
        (payout.why_not_reject(), payout.can_reject, lambda: payout.reject(T0)),
        (payout.why_not_resolve(), payout.can_resolve, lambda: payout.resolve_released(T0)),
    ):
        assert (why is None) == can
        assert _outcome(act) == why  # refused exactly when the guard says so, with its message


@pytest.mark.parametrize(("status", "held", "resolution"), CASES)
def test_the_records_a_user_gets_ask_the_same_rules(
    status: PayoutStatus, held: bool, resolution: Resolution | None
) -> None:
    payout = stored(status, held, resolution)
    operator = seen(payout)
    assert (operator.can_release, operator.can_reject, operator.can_resolve) == (
        payout.can_release,
        payout.can_reject,
        payout.can_resolve,
    )
    if resolution is None:  # the merchant's record does not carry the resolution
        assert (operator.payout.can_release, operator.payout.can_reject) == (
            payout.can_release,
            payout.can_reject,
        )


def test_the_resolve_refusal_names_the_state() -> None:
    done = attrs.evolve(stored(P.FAILED, False, None), resolution=Resolution.RELEASED)
    assert done.why_not_resolve() == (
        "Payout PO-1-ABC is FAILED and already resolved; only an unresolved FAILED or SENT payout can be"
        " resolved."
    )
    assert stored(P.PENDING, True, None).why_not_resolve() == (
        "Payout PO-1-ABC is PENDING; only an unresolved FAILED or SENT payout can be resolved."
    )
