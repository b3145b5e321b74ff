"""The operator's overview: is money moving? What waits for a person, what is stuck, which webhook
endpoints fail, how far behind the background work is. One read of the store, a snapshot.

Definitions (also in docs/operator.md, and the same as the alert rules'):

- a window's figures count the records *created* in it: the last hour is the 60 minutes up to now,
  today the UTC day so far; their amounts are summed per currency (a collection's requested amount and
  currency: what was asked for, known from its creation on);
- the failed share is ``FAILED / (FAILED + PAID)`` for payouts and ``FAILED / (FAILED + SUCCESS)`` for
  collections: of those that reached the network's final answer (a REJECTED payout is an operator's
  decision, not a failure, and a pending one has no answer yet);
- the charts count, per UTC hour of the last 24, the records created in that hour by their status now;
- a background queue's oldest age is how long its longest-waiting due item has been due.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from types import MappingProxyType

import attrs

from paymentcore._domain.catalogue import Catalogue
from paymentcore._domain.models import CollectionStatus, PayoutStatus
from paymentcore._domain.queries import collection_due_since
from paymentcore._domain.records import from_ms
from paymentcore._services.deps import Deps
from paymentcore.observe import WORK_KINDS, WorkBacklog
from paymentcore.ports import CurrencyTotal, Tally, UnitOfWork

__all__ = [
    "CHART_HOURS",
    "Activity",
    "ActivityWindow",
    "DueItem",
    "HourCounts",
    "Overview",
    "QueueTotal",
    "TroubledEndpoint",
    "build_overview",
    "due_items",
    "work_backlog",
]

HOUR_MS = 3_600_000
DAY_MS = 86_400_000
#: the charts' span: this many UTC hours, the current one last
CHART_HOURS = 24
#: how many of the worst webhook endpoints the overview names
TROUBLED_SHOWN = 5


@attrs.frozen
class Activity:
    """Payouts (or collections) of one currency created in one window: how many, their amounts summed
    (in the currency's units), and how many reached success (PAID, SUCCESS) and FAILED by now."""

    currency: str
    count: int
    amount: Decimal
    succeeded: int
    failed: int

    @property
    def failed_share(self) -> Decimal | None:
        """``failed / (failed + succeeded)``, None while none of them has a final answer."""
        finished = self.failed + self.succeeded
        return None if finished == 0 else Decimal(self.failed) / Decimal(finished)


@attrs.frozen
class ActivityWindow:
    """The payouts and collections created from ``start`` (inclusive) to ``end`` (exclusive), one
    :class:`Activity` per currency that had any, in currency order."""

    start: datetime
    end: datetime
    payouts: tuple[Activity, ...]
    collections: tuple[Activity, ...]


@attrs.frozen
class HourCounts:
    """The records created in the UTC hour starting at ``start``, by their status now (every status of
    the kind is a key, 0 when none)."""

    start: datetime
    counts: Mapping[str, int] = attrs.field(hash=False)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@attrs.frozen
class QueueTotal:
    """How many payouts of one currency wait in a queue, and their amounts summed."""

    currency: str
    count: int
    amount: Decimal


@attrs.frozen
class TroubledEndpoint:
    """A webhook endpoint an operator should look at: disabled, or its latest events failed."""

    merchant_id: str
    merchant_name: str
    url: str
    active: bool
    consecutive_failures: int
    disabled_reason: str | None
    updated_at: datetime


@attrs.frozen
class Overview:
    """Everything the console's overview shows, read in one snapshot of the store at ``at``."""

    at: datetime
    last_hour: ActivityWindow
    today: ActivityWindow
    payout_hours: tuple[HourCounts, ...]
    collection_hours: tuple[HourCounts, ...]
    held_for_review: tuple[QueueTotal, ...]
    failed_unresolved: tuple[QueueTotal, ...]
    work: tuple[WorkBacklog, ...]
    endpoints_failing: int
    endpoints_disabled: int
    troubled_endpoints: tuple[TroubledEndpoint, ...]


@attrs.frozen
class DueItem:
    """An item of background work that is due and waiting: a collection or payout (``key`` its
    reference) or an event to deliver (``key`` its id)."""

    kind: str
    key: str
    merchant_id: str
    state: str  # the record's status, or the event's type
    due_since: datetime
    attempts: int | None  # an event's delivery attempts so far; None for the others


def work_backlog(tx: UnitOfWork, now: int) -> list[WorkBacklog]:
    """Per kind of work: due items waiting, items held under a live lease, and how long the
    longest-waiting due item has been due."""
    counts = {
        "collections": (tx.collections.count_due(now), tx.collections.oldest_due(now)),
        "payouts": (tx.payouts.count_due(now), tx.payouts.oldest_due(now)),
        "deliveries": (tx.outbox.count_due(now), tx.outbox.oldest_due(now)),
    }
    backlog = []
    for kind in WORK_KINDS:
        pending, oldest = counts[kind]
        age = 0.0 if oldest is None or not pending else max(0, now - oldest) / 1000
        backlog.append(WorkBacklog(kind, pending, tx.leases.held(kind, now), age))
    return backlog


def _units(catalogue: Catalogue, currency: str, minor: int) -> Decimal:
    known = catalogue.currencies.get(currency)
    return known.render(minor) if known is not None else Decimal(minor)


def _activities(
    tallies: list[Tally], catalogue: Catalogue, succeeded: str, *, from_bucket: int = 0
) -> tuple[Activity, ...]:
    """One Activity per currency, from the tallies of bucket ``from_bucket`` on."""
    sums: dict[str, list[int]] = {}
    for tally in tallies:
        if tally.bucket < from_bucket:
            continue
        figures = sums.setdefault(tally.currency, [0, 0, 0, 0])
        figures[0] += tally.count
        figures[1] += tally.amount
        if tally.status == succeeded:
            figures[2] += tally.count
        elif tally.status == "FAILED":
            figures[3] += tally.count
    return tuple(
        Activity(currency, n, _units(catalogue, currency, amount), ok, failed)
        for currency, (n, amount, ok, failed) in sorted(sums.items())
    )


def _hours(tallies: list[Tally], first_hour: int, statuses: list[str]) -> tuple[HourCounts, ...]:
    counts = [dict.fromkeys(statuses, 0) for _ in range(CHART_HOURS)]
    for tally in tallies:
        if 0 <= tally.bucket < CHART_HOURS:
            hour = counts[tally.bucket]
            hour[tally.status] = hour.get(tally.status, 0) + tally.count
    return tuple(
        HourCounts(from_ms(first_hour + i * HOUR_MS), MappingProxyType(hour)) for i, hour in enumerate(counts)
    )


def _totals(totals: list[CurrencyTotal], catalogue: Catalogue) -> tuple[QueueTotal, ...]:
    return tuple(QueueTotal(t.currency, t.count, _units(catalogue, t.currency, t.amount)) for t in totals)


def build_overview(deps: Deps) -> Overview:
    """The overview, from one read of the store."""
    catalogue = deps.catalogue
    with deps.store.read() as tx:
        now = deps.clock.now()
        until = now + 1  # "up to now" includes this millisecond
        first_hour = (now // HOUR_MS - (CHART_HOURS - 1)) * HOUR_MS
        midnight = now // DAY_MS * DAY_MS  # never before first_hour: the day has at most 24 hours
        today_bucket = (midnight - first_hour) // HOUR_MS
        hour_ago = now - HOUR_MS
        payouts_24h = tx.payouts.tally(first_hour, until, HOUR_MS)
        collections_24h = tx.collections.tally(first_hour, until, HOUR_MS)
        payouts_hour = tx.payouts.tally(hour_ago, until, until - hour_ago)
        collections_hour = tx.collections.tally(hour_ago, until, until - hour_ago)
        # a payout held for review is always PENDING: naming the status lets an index find them
        held = tx.payouts.totals(status=PayoutStatus.PENDING, awaiting_review=True)
        failed = tx.payouts.totals(status=PayoutStatus.FAILED, unresolved=True)
        work = tuple(work_backlog(tx, now))
        failing, disabled = tx.webhooks.count_troubled()
        troubled = []
        for endpoint in tx.webhooks.troubled(TROUBLED_SHOWN):
            merchant = tx.merchants.get(endpoint.merchant_id)
            troubled.append(
                TroubledEndpoint(
                    merchant_id=endpoint.merchant_id,
                    merchant_name=merchant.name if merchant is not None else endpoint.merchant_id,
                    url=endpoint.url,
                    active=endpoint.is_active,
                    consecutive_failures=endpoint.consecutive_failures,
                    disabled_reason=endpoint.disabled_reason,
                    updated_at=from_ms(endpoint.updated_at),
                )
            )
    paid, success = PayoutStatus.PAID.value, CollectionStatus.SUCCESS.value
    return Overview(
        at=from_ms(now),
        last_hour=ActivityWindow(
            start=from_ms(hour_ago),
            end=from_ms(until),
            payouts=_activities(payouts_hour, catalogue, paid),
            collections=_activities(collections_hour, catalogue, success),
        ),
        today=ActivityWindow(
            start=from_ms(midnight),
            end=from_ms(until),
            payouts=_activities(payouts_24h, catalogue, paid, from_bucket=today_bucket),
            collections=_activities(collections_24h, catalogue, success, from_bucket=today_bucket),
        ),
        payout_hours=_hours(payouts_24h, first_hour, [s.value for s in PayoutStatus]),
        collection_hours=_hours(collections_24h, first_hour, [s.value for s in CollectionStatus]),
        held_for_review=_totals(held, catalogue),
        failed_unresolved=_totals(failed, catalogue),
        work=work,
        endpoints_failing=failing,
        endpoints_disabled=disabled,
        troubled_endpoints=tuple(troubled),
    )


def due_items(deps: Deps, kind: str, limit: int) -> list[DueItem]:
    """The first ``limit`` due items of ``kind`` (collections, payouts, deliveries), in the order the
    worker takes them."""
    with deps.store.read() as tx:
        now = deps.clock.now()
        if kind == "collections":
            items = []
            for c in tx.collections.due(now, limit):
                since = collection_due_since(c, now)
                items.append(
                    DueItem(kind, c.reference, c.merchant_id, c.status.value, from_ms(since or now), None)
                )
            return items
        if kind == "payouts":
            return [
                DueItem(
                    kind, p.reference, p.merchant_id, p.status.value, from_ms(p.next_check_at or now), None
                )
                for p in tx.payouts.due(now, limit)
            ]
        return [
            DueItem(kind, e.id, e.merchant_id, e.type, from_ms(e.next_attempt_at), e.attempts)
            for e in tx.outbox.due(now, limit)
        ]
