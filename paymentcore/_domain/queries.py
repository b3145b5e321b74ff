"""Which records the storage queries select: "counts as spent" and "is due", each defined once.

These are domain rules, not storage: MemoryStore filters with the predicates below, and SqliteStore
generates its SQL (the ``due``/``spent`` queries and the spend-bucket triggers of schema migration 2)
from the same status sets, so changing a definition here changes every engine. The storage contract
tests check on random records that each adapter selects exactly what these predicates select.

Nothing here imports a storage adapter.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import TypeVar

from paymentcore._domain.models import (
    Collection,
    CollectionStatus,
    DeliveryStatus,
    Event,
    Payout,
    PayoutStatus,
    WebhookEndpoint,
)

T = TypeVar("T")

# --- payouts ------------------------------------------------------------------------------------

#: Payouts in these statuses count against the rolling per-day and per-week limits. A FAILED payout
#: still counts (its money may yet turn out to have moved); only a REJECTED one never went anywhere.
SPENT_STATUSES: frozenset[PayoutStatus] = frozenset(
    {PayoutStatus.PENDING, PayoutStatus.SENT, PayoutStatus.PAID, PayoutStatus.FAILED}
)
#: Every other status: a payout that reaches one of these stops counting.
UNSPENT_STATUSES: frozenset[PayoutStatus] = frozenset(PayoutStatus) - SPENT_STATUSES

#: Due to be handed to the network once ``next_check_at`` has come, unless held for review.
PAYOUT_SEND_STATUSES: frozenset[PayoutStatus] = frozenset({PayoutStatus.PENDING})
#: Due for a status check once ``next_check_at`` has come (held for review or not).
PAYOUT_CHECK_STATUSES: frozenset[PayoutStatus] = frozenset({PayoutStatus.SENT})


def counts_as_spent(payout: Payout) -> bool:
    """Does this payout count against its merchant's rolling limits (when created in the window)?"""
    return payout.status in SPENT_STATUSES


def payout_is_due(payout: Payout, now: int) -> bool:
    """Has the worker something to do with this payout at ``now`` (send it, or check on it)?"""
    if payout.next_check_at is None or payout.next_check_at > now:
        return False
    return (
        payout.status in PAYOUT_SEND_STATUSES and not payout.awaiting_review
    ) or payout.status in PAYOUT_CHECK_STATUSES


def payout_due_order(payout: Payout) -> tuple[int, str]:
    """One merchant's due payouts in turn: earliest ``next_check_at``, then reference."""
    assert payout.next_check_at is not None
    return (payout.next_check_at, payout.reference)


def payouts_in_due_order(due: Iterable[Payout]) -> list[Payout]:
    """The order ``payouts.due`` lists due payouts in: a round over the merchants with work, within
    each provider.

    A merchant's due payouts to one provider are taken in :func:`payout_due_order`; the list holds every
    merchant's first to each provider, then every second, and so on (within a round, in
    :func:`payout_due_order`). A merchant who sends a batch of 1,000 payouts then takes one place in each
    round, not the first 1,000 places, so another merchant's single payout is worked next, not after the
    batch. The rounds are counted per provider, the lane a payout waits in (:func:`payout_lane`): a
    merchant's place in one provider's round does not depend on what it has waiting for another, so
    the worker finds a lane's next payouts from that lane's own (``payouts_lanes``, migration 12).
    """
    ordered = sorted(due, key=payout_due_order)
    return in_turns(ordered, lambda payout: f"{payout.provider} {payout.merchant_id}", len(ordered))


#: A batch's payouts in these statuses are still open: the batch completes when none is left. The
#: others are final for a batch: PAID and REJECTED for ever, FAILED until an operator resolves it (the
#: worker does nothing more with it on its own).
BATCH_OPEN_STATUSES: frozenset[PayoutStatus] = frozenset({PayoutStatus.PENDING, PayoutStatus.SENT})


# --- collections --------------------------------------------------------------------------------

#: Open collections, due for a status check once ``next_check_at`` has come.
COLLECTION_CHECK_STATUSES: frozenset[CollectionStatus] = frozenset(
    {CollectionStatus.PENDING, CollectionStatus.PROCESSING}
)
#: Also due once ``expires_at`` has come while no prompt went out (an unpaid checkout that expired).
COLLECTION_EXPIRY_STATUSES: frozenset[CollectionStatus] = frozenset({CollectionStatus.PENDING})


def collection_is_due(collection: Collection, now: int) -> bool:
    """Has the worker something to do with this collection at ``now`` (check it, or expire it)?"""
    check = (
        collection.status in COLLECTION_CHECK_STATUSES
        and collection.next_check_at is not None
        and collection.next_check_at <= now
    )
    expire = (
        collection.status in COLLECTION_EXPIRY_STATUSES
        and collection.submitted_at is None
        and collection.expires_at <= now
    )
    return check or expire


def collection_due_since(collection: Collection, now: int) -> int | None:
    """Since when a due collection has been due: its ``next_check_at`` if due for a check, its
    ``expires_at`` if due for expiry, the earlier if both; None when it is not due at ``now``."""
    times = []
    if (
        collection.status in COLLECTION_CHECK_STATUSES
        and collection.next_check_at is not None
        and collection.next_check_at <= now
    ):
        times.append(collection.next_check_at)
    if (
        collection.status in COLLECTION_EXPIRY_STATUSES
        and collection.submitted_at is None
        and collection.expires_at <= now
    ):
        times.append(collection.expires_at)
    return min(times) if times else None


def collection_due_order(collection: Collection) -> tuple[int, str]:
    """The order ``collections.due`` lists due collections in: the earlier of expiry and next check."""
    next_check = collection.next_check_at if collection.next_check_at is not None else collection.expires_at
    return (min(collection.expires_at, next_check), collection.reference)


# --- the outbox ---------------------------------------------------------------------------------

#: Events still to deliver, due once ``next_attempt_at`` has come.
EVENT_DUE_STATUSES: frozenset[DeliveryStatus] = frozenset({DeliveryStatus.PENDING})


def event_is_due(event: Event, now: int) -> bool:
    """Is this event's next delivery attempt due at ``now``? (``outbox.due`` lists oldest first.)"""
    return event.status in EVENT_DUE_STATUSES and event.next_attempt_at <= now


def event_lane(event: Event) -> str:
    """Events of one merchant go to one endpoint: they share its fate."""
    return event.merchant_id


# --- lanes: what shares a fate, listed in turns ----------------------------------------------------


def payout_lane(payout: Payout) -> str:
    """Payouts to one mobile network (provider) share its fate: a provider that hangs holds them."""
    return payout.provider


def collection_lane(collection: Collection) -> str:
    """Collections on one provider share its fate (a checkout no payer has chosen yet: the empty lane)."""
    return collection.provider or ""


def at_most_per_lane(items: Iterable[T], lane: Callable[[T], str], per_lane: int) -> list[T]:
    """``items`` in their order, but only the first ``per_lane`` of each lane."""
    seen: Counter[str] = Counter()
    kept: list[T] = []
    for item in items:
        name = lane(item)
        seen[name] += 1
        if seen[name] <= per_lane:
            kept.append(item)
    return kept


def in_turns(items: Iterable[T], lane: Callable[[T], str], per_lane: int) -> list[T]:
    """``items`` (in due order) taken in turns over their lanes: every lane's first item, then every
    lane's second, ... (each turn in due order), at most ``per_lane`` of a lane. So a lane with 10,000
    items due stands no further ahead in the list than a lane with one."""
    seen: Counter[str] = Counter()
    ranked: list[tuple[int, int, T]] = []
    for position, item in enumerate(items):
        name = lane(item)
        seen[name] += 1
        if seen[name] <= per_lane:
            ranked.append((seen[name], position, item))
    ranked.sort(key=lambda entry: (entry[0], entry[1]))
    return [item for _, _, item in ranked]


# --- webhook endpoints ----------------------------------------------------------------------------


def endpoint_listens(endpoint: WebhookEndpoint | None) -> bool:
    """Is there an endpoint to send a merchant's events to (registered and active)? An event written
    while there is none is skipped, and so is one whose turn comes while there is none."""
    return endpoint is not None and endpoint.is_active


def endpoint_is_troubled(endpoint: WebhookEndpoint) -> bool:
    """Does an operator need to look at this endpoint: disabled, or its last event(s) failed (after
    every retry) since its last delivered one?"""
    return not endpoint.is_active or endpoint.consecutive_failures > 0


def endpoint_trouble_order(endpoint: WebhookEndpoint) -> tuple[bool, int, str]:
    """The worst first: disabled before active, then the most consecutive failed events, then by
    merchant id."""
    return (endpoint.is_active, -endpoint.consecutive_failures, endpoint.merchant_id)
