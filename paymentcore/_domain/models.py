"""Records of the domain: merchants, keys, switches, collections, payouts, balances, events.

Every record is a frozen attrs value; a change is a new value made with ``attrs.evolve``. Amounts are
integer minor units; times are integer milliseconds since the Unix epoch (UTC). State machines are
explicit tables: :func:`check_transition` raises :class:`InvalidTransitionError` for anything else.
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

from paymentcore._domain.errors import InvalidTransitionError

REJECTED_REASON = "Declined during review; the money is back in the balance."
UNCOMPLETED_REASON = "The network did not complete the payout."
RESOLVED_RELEASED_SUFFIX = " Resolved: no money moved; returned to the balance."


class Scope(enum.Enum):
    COLLECT = "collect"
    DISBURSE = "disburse"


class MerchantStatus(enum.Enum):
    APPROVED = "APPROVED"
    NOT_APPROVED = "NOT_APPROVED"
    SUSPENDED = "SUSPENDED"


class CollectionStatus(enum.Enum):
    PENDING = "PENDING"
    PROCESSING = "PROCESSING"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"


class CollectionKind(enum.Enum):
    CHARGE = "CHARGE"
    CHECKOUT = "CHECKOUT"
    LEGACY = "LEGACY"


class PayoutStatus(enum.Enum):
    PENDING = "PENDING"
    SENT = "SENT"
    PAID = "PAID"
    FAILED = "FAILED"
    REJECTED = "REJECTED"


class BatchMode(enum.Enum):
    """How a bulk payout request treats a refused item."""

    EACH = "each"  # each item is accepted or refused on its own
    ALL = "all"  # all or none: one refused item refuses the whole batch, and nothing is reserved


class Resolution(enum.Enum):
    """How a payout's reservation ended: at most once per payout."""

    POSTED = "POSTED"  # the money left: the payout is PAID
    RELEASED = "RELEASED"  # the money came back to the available balance


class DeliveryStatus(enum.Enum):
    PENDING = "PENDING"
    DELIVERED = "DELIVERED"
    FAILED = "FAILED"  # gave up after the retry schedule
    SKIPPED = "SKIPPED"  # no active endpoint when it was emitted or due


#: the error of an event skipped for want of an active webhook endpoint
NO_ENDPOINT = "no active endpoint"


COLLECTION_TRANSITIONS: frozenset[tuple[CollectionStatus, CollectionStatus]] = frozenset(
    {
        (CollectionStatus.PENDING, CollectionStatus.PROCESSING),
        (CollectionStatus.PENDING, CollectionStatus.FAILED),  # expiry before the payer chose
        (CollectionStatus.PROCESSING, CollectionStatus.SUCCESS),
        (CollectionStatus.PROCESSING, CollectionStatus.FAILED),
    }
)

PAYOUT_TRANSITIONS: frozenset[tuple[PayoutStatus, PayoutStatus]] = frozenset(
    {
        (PayoutStatus.PENDING, PayoutStatus.SENT),
        (PayoutStatus.PENDING, PayoutStatus.FAILED),
        (PayoutStatus.PENDING, PayoutStatus.REJECTED),
        (PayoutStatus.SENT, PayoutStatus.PAID),
        (PayoutStatus.SENT, PayoutStatus.FAILED),
        (PayoutStatus.FAILED, PayoutStatus.PAID),  # resolution found that the money did move
    }
)


#: the statuses whose payout can be resolved (once): the money may or may not have moved
RESOLVABLE: frozenset[PayoutStatus] = frozenset({PayoutStatus.SENT, PayoutStatus.FAILED})


def why_not_release(reference: str, status: PayoutStatus, awaiting_review: bool) -> str | None:
    """Why a payout cannot be released from review; None if it can: only a PENDING payout held for
    review can.

    This and the two below are the one copy of each operator action's rule: the stored record's guards
    (``Payout.can_release``...) and those of the records a user gets (:mod:`paymentcore._domain.records`)
    call them with their fields.
    """
    if status is PayoutStatus.PENDING and awaiting_review:
        return None
    return f"Payout {reference} is {status.value} and not held for review; nothing released."


def why_not_reject(reference: str, status: PayoutStatus, awaiting_review: bool, resolved: bool) -> str | None:
    """Why a payout cannot be rejected; None if it can: only an unresolved PENDING payout held for
    review can."""
    if not (status is PayoutStatus.PENDING and awaiting_review):
        return f"Payout {reference} is {status.value} and not held for review; nothing rejected."
    if resolved:
        return f"Payout {reference} is already resolved."
    return None


def why_not_resolve(reference: str, status: PayoutStatus, resolved: bool) -> str | None:
    """Why a payout cannot be resolved; None if it can: only an unresolved SENT or FAILED one can.

    The stored record's ``can_resolve`` and the operator's record's (which knows the resolution) call it.
    """
    if not resolved and status in RESOLVABLE:
        return None
    return (
        f"Payout {reference} is {status.value}"
        + (" and already resolved" if resolved else "")
        + "; only an unresolved FAILED or SENT payout can be resolved."
    )


def check_transition(
    table: frozenset[tuple[Any, Any]], current: enum.Enum, target: enum.Enum, what: str
) -> None:
    if (current, target) not in table:
        raise InvalidTransitionError(
            f"A {what} in status {current.value} cannot move to {target.value}.",
            details={"status": current.value, "requested": target.value},
        )


@attrs.frozen
class Settings:
    """Platform switches: one record for the whole platform."""

    api_enabled: bool = True
    payouts_enabled: bool = True
    closed_currencies: frozenset[str] = frozenset()


@attrs.frozen
class Merchant:
    id: str
    name: str
    settlement_currency: str
    status: MerchantStatus
    collect_fee_ppm: int  # platform fee, in millionths of the charged amount
    payouts_enabled: bool
    blocked_providers: frozenset[str]
    created_at: int

    @property
    def approved(self) -> bool:
        return self.status is MerchantStatus.APPROVED


@attrs.frozen
class ApiKey:
    id: str
    merchant_id: str
    key_hash: str
    scopes: frozenset[Scope]
    per_minute: int
    per_hour: int
    revoked: bool
    created_at: int


@attrs.frozen
class PayoutLimits:
    """A merchant's payout ceilings for one currency, in minor units; None means not set."""

    merchant_id: str
    currency: str
    per_transaction: int | None = None
    per_day: int | None = None
    per_week: int | None = None
    review_threshold: int | None = None


@attrs.frozen
class Collection:
    reference: str
    merchant_id: str
    kind: CollectionKind
    status: CollectionStatus
    requested_amount: int
    requested_currency: str
    description: str
    merchant_reference: str | None
    created_at: int
    expires_at: int
    updated_at: int
    method: str | None = None
    provider: str | None = None
    phone: str | None = None
    country: str | None = None
    submitted_at: int | None = None  # when the prompt went to the network
    next_check_at: int | None = None  # when the worker next asks the network
    charged_amount: int | None = None  # what the payer pays, in charged_currency (fee included)
    charged_currency: str | None = None
    settled_amount: int | None = None  # net, credited to the merchant
    settled_currency: str | None = None
    fee_amount: int | None = None
    failure_category: str | None = None
    failure_reason: str | None = None

    def _to(self, target: CollectionStatus) -> None:
        check_transition(COLLECTION_TRANSITIONS, self.status, target, "collection")

    def start_processing(self, now: int, next_check_at: int) -> Collection:
        """PENDING -> PROCESSING: the prompt is with the network."""
        self._to(CollectionStatus.PROCESSING)
        return attrs.evolve(
            self, status=CollectionStatus.PROCESSING, next_check_at=next_check_at, updated_at=now
        )

    def settle(self, *, net: int, fee: int, now: int) -> Collection:
        """PROCESSING -> SUCCESS, settled net of ``fee`` in the charged currency."""
        self._to(CollectionStatus.SUCCESS)
        if self.charged_currency is None:
            raise InvalidTransitionError(
                f"Collection {self.reference} was never charged; it cannot settle.",
                details={"status": self.status.value, "requested": CollectionStatus.SUCCESS.value},
            )
        return attrs.evolve(
            self,
            status=CollectionStatus.SUCCESS,
            settled_amount=net,
            settled_currency=self.charged_currency,
            fee_amount=fee,
            next_check_at=None,
            updated_at=now,
        )

    def fail(self, category: str, reason: str, now: int) -> Collection:
        """PENDING or PROCESSING -> FAILED with a category (EXPIRED, TIMEOUT, DECLINED, ...)."""
        self._to(CollectionStatus.FAILED)
        return attrs.evolve(
            self,
            status=CollectionStatus.FAILED,
            failure_category=category,
            failure_reason=reason,
            next_check_at=None,
            updated_at=now,
        )


@attrs.frozen
class Payout:
    reference: str
    merchant_id: str
    status: PayoutStatus
    amount: int
    currency: str
    phone: str
    country: str
    provider: str
    recipient_name: str | None
    merchant_reference: str | None
    awaiting_review: bool
    created_at: int
    updated_at: int
    provider_reference: str | None = None
    status_reason: str | None = None
    sent_at: int | None = None
    next_check_at: int | None = None  # dispatch lease, or next status check once SENT
    resolution: Resolution | None = None
    batch_id: str | None = None  # the bulk request (bat_...) that created it, if any ...
    batch_index: int | None = None  # ... and its item's place in that request (from 0)

    def _to(self, target: PayoutStatus) -> None:
        check_transition(PAYOUT_TRANSITIONS, self.status, target, "payout")

    # --- guards: whether an operator action is allowed now, and if not, why (the one copy of each rule)

    def why_not_release(self) -> str | None:
        """Why :meth:`release_from_review` would be refused; None when the payout can be released."""
        return why_not_release(self.reference, self.status, self.awaiting_review)

    def why_not_reject(self) -> str | None:
        """Why :meth:`reject` would be refused; None when the payout can be rejected."""
        return why_not_reject(self.reference, self.status, self.awaiting_review, self.resolution is not None)

    def why_not_resolve(self) -> str | None:
        """Why resolving it (:meth:`resolve_released`, or posting it) would be refused; None when it can."""
        return why_not_resolve(self.reference, self.status, self.resolution is not None)

    @property
    def can_release(self) -> bool:
        return self.why_not_release() is None

    @property
    def can_reject(self) -> bool:
        return self.why_not_reject() is None

    @property
    def can_resolve(self) -> bool:
        return self.why_not_resolve() is None

    @staticmethod
    def _refuse(why: str | None) -> None:
        if why is not None:
            raise InvalidTransitionError(why)

    def _require_unresolved(self) -> None:
        if self.resolution is not None:
            raise InvalidTransitionError(f"Payout {self.reference} is already resolved.")

    def mark_sent(self, now: int, *, provider_reference: str | None, next_check_at: int) -> Payout:
        """PENDING -> SENT: the network accepted it; a missing provider reference keeps the old one."""
        self._to(PayoutStatus.SENT)
        return attrs.evolve(
            self,
            status=PayoutStatus.SENT,
            provider_reference=provider_reference or self.provider_reference,
            status_reason=None,
            next_check_at=next_check_at,
            updated_at=now,
        )

    def mark_paid(self, now: int) -> Payout:
        """SENT or FAILED -> PAID: the reservation is posted, which happens at most once."""
        self._to(PayoutStatus.PAID)
        self._require_unresolved()
        return attrs.evolve(
            self,
            status=PayoutStatus.PAID,
            status_reason=None,
            resolution=Resolution.POSTED,
            next_check_at=None,
            updated_at=now,
        )

    def mark_failed(self, reason: str, now: int) -> Payout:
        """PENDING or SENT -> FAILED: the money stays reserved until the payout is resolved."""
        self._to(PayoutStatus.FAILED)
        return attrs.evolve(
            self, status=PayoutStatus.FAILED, status_reason=reason, next_check_at=None, updated_at=now
        )

    def reject(self, now: int) -> Payout:
        """A payout held for review is declined: REJECTED, its reservation released."""
        self._refuse(self.why_not_reject())
        self._to(PayoutStatus.REJECTED)
        return attrs.evolve(
            self,
            status=PayoutStatus.REJECTED,
            awaiting_review=False,
            status_reason=REJECTED_REASON,
            resolution=Resolution.RELEASED,
            next_check_at=None,
            updated_at=now,
        )

    def release_from_review(self, now: int) -> Payout:
        """A payout held for review is let go: still PENDING, due for dispatch at ``now``."""
        self._refuse(self.why_not_release())
        return attrs.evolve(
            self, awaiting_review=False, status_reason=None, next_check_at=now, updated_at=now
        )

    def resolve_released(self, now: int) -> Payout:
        """An unresolved FAILED or SENT payout moved no money: FAILED, its reservation released."""
        self._refuse(self.why_not_resolve())
        if self.status is PayoutStatus.SENT:
            self._to(PayoutStatus.FAILED)
        return attrs.evolve(
            self,
            status=PayoutStatus.FAILED,
            status_reason=(self.status_reason or UNCOMPLETED_REASON) + RESOLVED_RELEASED_SUFFIX,
            resolution=Resolution.RELEASED,
            next_check_at=None,
            updated_at=now,
        )


@attrs.frozen
class PayoutBatch:
    """A bulk payout request, written in the transaction that created its payouts.

    The accepted items are the payouts that carry this batch's id (``Payout.batch_id``, with their
    ``batch_index``); the refused ones are kept here, in ``refusals``: the item's index (as a string)
    to ``{"merchantReference", "code", "message", "param", "details"}``. ``completed_at`` is set once,
    by the transaction that makes its last open payout final.
    """

    id: str
    merchant_id: str
    mode: BatchMode
    item_count: int
    created_at: int
    refusals: dict[str, Any]
    completed_at: int | None = None


@attrs.frozen
class BatchTally:
    """How many of a batch's payouts are in one status and currency, and their sum (minor units)."""

    status: PayoutStatus
    currency: str
    count: int
    amount: int


@attrs.frozen
class Balance:
    """One merchant's money in one currency. credited == available + reserved + paid_out."""

    merchant_id: str
    currency: str
    available: int = 0
    reserved: int = 0
    paid_out: int = 0
    credited: int = 0


@attrs.frozen
class LedgerLeg:
    account: str
    amount: int  # positive: the account grows; legs of one entry sum to zero


@attrs.frozen
class LedgerEntry:
    id: str
    merchant_id: str
    currency: str
    kind: str  # credit, reserve, post, release
    reference: str
    legs: tuple[LedgerLeg, ...]
    created_at: int


@attrs.frozen
class WebhookEndpoint:
    merchant_id: str
    url: str
    secret_encrypted: str
    events: str  # "v2" or "legacy"
    is_active: bool
    disabled_reason: str | None
    updated_at: int
    consecutive_failures: int = 0
    ever_succeeded: bool = False


@attrs.frozen
class Event:
    """A row of the transactional outbox: written with the state change that caused it."""

    id: str
    merchant_id: str
    type: str  # new name: collect.succeeded, disburse.sent, ...
    data: dict[str, Any]
    created_at: int
    status: DeliveryStatus = DeliveryStatus.PENDING
    attempts: int = 0
    next_attempt_at: int = 0
    last_error: str | None = None
    delivered_at: int | None = None
    redeliveries: int = 0  # manual redeliveries made (``Webhooks.resend``), beside the ``attempts``
    sent_as: str | None = None  # the event name of the latest attempt (legacy or current)
    resend_at: int | None = None  # a queued manual redelivery is due then (or leased until then)


#: a payout's and an event's columns that never change once written: an update leaves them as they
#: were stored (the SQL stores do not set them; the memory store refuses an update that changes one)
PAYOUT_FIXED = ("merchant_id", "amount", "currency", "phone", "country", "provider", "created_at", "batch_id")
EVENT_FIXED = ("merchant_id", "type", "data", "created_at")


def check_fixed(stored: Any, record: Any, fixed: tuple[str, ...]) -> None:
    """Raise ValueError when ``record`` changes a column of ``fixed`` from what is ``stored``."""
    changed = [name for name in fixed if getattr(stored, name) != getattr(record, name)]
    if changed:
        raise ValueError(f"{type(record).__name__}: {', '.join(changed)} never change once written")


@attrs.frozen
class Delivery:
    """One delivery attempt of an event, written with the attempt's outcome."""

    id: str
    event_id: str
    at: int  # when the attempt was made
    name: str  # the event name sent in X-Service-Event
    response_status: int | None  # the HTTP status answered; None when no response came
    error: str | None
    duration_ms: int
    resent: bool = False  # a manual redelivery (``Webhooks.resend``), not a scheduled attempt


@attrs.frozen
class IdempotencyRecord:
    merchant_id: str
    key: str
    fingerprint: str
    created_at: int
    status_code: int | None = None  # None while the first request is still running
    body: str | None = None  # the JSON answered


@attrs.frozen
class StoredOperator:
    """A person who may sign in to the console. Only the SHA-256 of the sign-in token is kept."""

    id: str
    name: str
    token_hash: str
    revoked: bool
    created_at: int


@attrs.frozen
class StoredSession:
    """A signed-in console session, kept in the database so that every server process shares it.

    Only the SHA-256 of the session secret (the cookie's value) is kept.
    """

    id: str
    operator_id: str
    token_hash: str
    created_at: int
    last_seen_at: int


@attrs.frozen
class StoredAuditEntry:
    """One operator action: written with its effect, never changed or removed."""

    id: str
    at: int  # milliseconds since the epoch
    actor: str  # op_..., cli:<os user>, library, or what a library caller named
    action: str  # payout.release, merchant.suspend, key.create, ...
    subject: str  # the record acted on: a payout reference, a merchant, key or operator id, "platform"
    state_before: dict[str, Any] | None  # None when the action created the record
    state_after: dict[str, Any] | None
