"""The records a user of the library gets: frozen, snake_case, Decimal amounts, aware datetimes, enums.

They are views of the stored records (``paymentcore._domain.models``, integer minor units and milliseconds),
built at the moment they are returned. The server renders them to the API's JSON; a Python caller uses
them directly. :data:`converter` turns them into plain data and back (cattrs), which is how an idempotent
answer is kept and replayed.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Generic, TypeVar

import attrs
import cattrs

from paymentcore._domain import models as models
from paymentcore._domain.catalogue import Catalogue
from paymentcore._domain.errors import ALL_ERRORS, PaymentError
from paymentcore._domain.models import BatchMode, CollectionKind, CollectionStatus, PayoutStatus
from paymentcore._domain.money import apply_rate

__all__ = [
    "AuditEntry",
    "BatchItem",
    "BatchPayout",
    "BatchProgress",
    "BatchStatus",
    "BatchTotal",
    "Collection",
    "ConsoleSession",
    "CreatedOperator",
    "EventDelivery",
    "EventDeliveryStatus",
    "EventRecord",
    "EventSummary",
    "ItemError",
    "LedgerItem",
    "LedgerItemType",
    "MerchantBalance",
    "OperatorAccount",
    "OperatorBatch",
    "OperatorCollection",
    "OperatorPayout",
    "Page",
    "Payout",
    "PayoutAllowance",
    "PayoutBatch",
    "PayoutItem",
    "SignedIn",
    "WebhookRegistration",
    "WebhookSettings",
    "collection_from",
    "converter",
    "converts_on_settling",
    "dump_batch",
    "from_ms",
    "load_batch",
    "payout_from",
    "to_ms",
]


def from_ms(ms: int) -> datetime:
    """Milliseconds since the epoch as an aware UTC datetime (exact to the millisecond)."""
    seconds, millis = divmod(ms, 1000)
    return datetime.fromtimestamp(seconds, tz=UTC).replace(microsecond=millis * 1000)


def to_ms(moment: datetime) -> int:
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


@attrs.frozen
class Payout:
    """A payout as its merchant sees it. ``amount`` is in the currency's units (``Decimal("2500")``)."""

    reference: str
    status: PayoutStatus
    amount: Decimal
    currency: str
    phone: str
    recipient_name: str | None
    merchant_reference: str | None
    provider_reference: str | None
    awaiting_review: bool
    status_reason: str | None
    created_at: datetime

    @property
    def can_release(self) -> bool:
        """Whether an operator may release it from review now (``PaymentCore.disburse.release``)."""
        return models.why_not_release(self.reference, self.status, self.awaiting_review) is None

    @property
    def can_reject(self) -> bool:
        """Whether an operator may reject it in review now (a payout held for review is never resolved)."""
        return models.why_not_reject(self.reference, self.status, self.awaiting_review, False) is None


@attrs.frozen
class Collection:
    """A collection (direct charge, hosted checkout or legacy payment) as its merchant sees it.

    ``amount``/``currency`` are what the merchant receives (settled net once SUCCESS); ``requested_*``
    are what was asked for. ``checkout_url`` is set while the hosted page can still be paid.
    """

    reference: str
    status: CollectionStatus
    amount: Decimal
    currency: str
    requested_amount: Decimal
    requested_currency: str
    description: str
    merchant_reference: str | None
    checkout_url: str | None
    method: str | None
    provider_code: str | None
    expires_at: datetime
    created_at: datetime
    failure_category: str | None
    kind: CollectionKind = CollectionKind.CHECKOUT


def payout_from(payout: models.Payout, *, catalogue: Catalogue) -> Payout:
    return Payout(
        reference=payout.reference,
        status=payout.status,
        amount=catalogue.currencies[payout.currency].render(payout.amount),
        currency=payout.currency,
        phone=payout.phone,
        recipient_name=payout.recipient_name,
        merchant_reference=payout.merchant_reference,
        provider_reference=payout.provider_reference,
        awaiting_review=payout.awaiting_review,
        status_reason=payout.status_reason,
        created_at=from_ms(payout.created_at),
    )


def is_payable(collection: models.Collection, now: int) -> bool:
    """Whether the hosted page can still be paid: an unpaid, unexpired checkout nobody chose for yet."""
    return (
        collection.kind is not CollectionKind.CHARGE
        and collection.status is CollectionStatus.PENDING
        and collection.submitted_at is None
        and now < collection.expires_at
    )


def converts_on_settling(collection: models.Collection) -> bool:
    """Whether the collection's public amount is its requested amount in the merchant's settlement
    currency (a legacy payment not yet settled), so that :func:`collection_from` needs that currency."""
    return collection.kind is CollectionKind.LEGACY and (
        collection.settled_amount is None or collection.settled_currency is None
    )


def collection_from(
    collection: models.Collection,
    *,
    catalogue: Catalogue,
    settlement_currency: str,
    public_url: str,
    now: int,
) -> Collection:
    if collection.settled_amount is not None and collection.settled_currency is not None:
        value, currency = collection.settled_amount, collection.settled_currency
    elif converts_on_settling(collection) and collection.requested_currency != settlement_currency:
        source = catalogue.currencies[collection.requested_currency]
        target = catalogue.currencies[settlement_currency]
        rate = catalogue.rates.rate(source.code, target.code)
        value = apply_rate(collection.requested_amount, source.decimals, rate, target.decimals)
        currency = target.code
    else:
        value, currency = collection.requested_amount, collection.requested_currency
    return Collection(
        reference=collection.reference,
        status=collection.status,
        amount=catalogue.currencies[currency].render(value),
        currency=currency,
        requested_amount=catalogue.currencies[collection.requested_currency].render(
            collection.requested_amount
        ),
        requested_currency=collection.requested_currency,
        description=collection.description,
        merchant_reference=collection.merchant_reference,
        checkout_url=(
            f"{public_url.rstrip('/')}/checkout/{collection.reference}"
            if is_payable(collection, now)
            else None
        ),
        method=collection.method,
        provider_code=collection.provider,
        expires_at=from_ms(collection.expires_at),
        created_at=from_ms(collection.created_at),
        failure_category=(
            collection.failure_category if collection.status is CollectionStatus.FAILED else None
        ),
        kind=collection.kind,
    )


# --- bulk payouts ------------------------------------------------------------------------------------


@attrs.frozen
class PayoutItem:
    """One payout of a bulk request (:meth:`Disburse.create_bulk`): the arguments of a single payout.

    ``merchant_reference`` is required and must be unique within the request: it is how an item's
    outcome is matched to the merchant's own records. Every value is checked as a single payout's is.
    """

    amount: Decimal | int
    currency: str
    phone: str
    merchant_reference: str
    recipient_name: str | None = None
    provider: str | None = None
    country: str | None = None


@attrs.frozen
class ItemError:
    """Why an item of a bulk request was refused: the error a single payout with this item's arguments
    would have raised (``code``, ``message``, ``param``, ``details``, as :class:`PaymentError` has them;
    ``param`` is the item's field at fault, by its library name)."""

    code: str
    message: str
    param: str | None = None
    details: Mapping[str, Any] | None = attrs.field(default=None, hash=False)

    def exception(self) -> PaymentError:
        """The refusal as the typed exception a single payout raises (``InsufficientBalanceError``...)."""
        kind = next((cls for cls in ALL_ERRORS if cls.code == self.code), PaymentError)
        return kind(self.message, param=self.param, details=self.details)


@attrs.frozen
class BatchPayout:
    """The payout an accepted item created: its reference, and its status when the batch was read."""

    reference: str
    status: PayoutStatus
    awaiting_review: bool


@attrs.frozen
class BatchItem:
    """One item of a bulk request, in request order: the payout it created, or why it was refused."""

    index: int
    merchant_reference: str
    payout: BatchPayout | None = None
    error: ItemError | None = None

    @property
    def accepted(self) -> bool:
        return self.payout is not None


@attrs.frozen
class BatchTotal:
    """The accepted items in one currency: how many, and their sum (in the currency's units)."""

    currency: str
    count: int
    amount: Decimal


@attrs.frozen
class BatchProgress:
    """A batch's payouts in one status and currency now: how many, and their sum."""

    status: PayoutStatus
    currency: str
    count: int
    amount: Decimal


class BatchStatus(enum.Enum):
    """PROCESSING while a payout of the batch is PENDING or SENT; COMPLETED once none is (every accepted
    item PAID, FAILED or REJECTED; at once for a batch that accepted nothing)."""

    PROCESSING = "PROCESSING"
    COMPLETED = "COMPLETED"


@attrs.frozen
class PayoutBatch:
    """A bulk payout request as its merchant sees it.

    ``totals`` are the accepted items per currency; ``progress`` counts and sums the batch's payouts per
    status and currency as they are now (every status, zeros included, for each currency). ``items`` are
    in request order: all of them in the answer to :meth:`Disburse.create_bulk`, one page of them (and
    ``has_more``) from :meth:`Disburse.get_bulk`.
    """

    id: str
    mode: BatchMode
    status: BatchStatus
    created_at: datetime
    completed_at: datetime | None
    item_count: int
    accepted: int
    refused: int
    totals: tuple[BatchTotal, ...]
    progress: tuple[BatchProgress, ...]
    items: tuple[BatchItem, ...]
    has_more: bool = False


@attrs.frozen
class OperatorBatch:
    """A bulk payout request as an operator sees it: whose it is, and the batch."""

    merchant_id: str
    batch: PayoutBatch


def _make_converter() -> cattrs.Converter:
    made = cattrs.Converter(forbid_extra_keys=True)
    # Decimal as its exact text ("12.50" stays "12.50"), datetimes as integer milliseconds.
    made.register_unstructure_hook(Decimal, str)
    made.register_structure_hook(Decimal, lambda value, _: Decimal(str(value)))
    made.register_unstructure_hook(datetime, to_ms)
    made.register_structure_hook(datetime, lambda value, _: from_ms(int(value)))
    # an item's error details are kept as they are (JSON numbers stay numbers, as in an error body)
    made.register_unstructure_hook(
        ItemError,
        lambda error: {
            "code": error.code,
            "message": error.message,
            "param": error.param,
            "details": None if error.details is None else copy.deepcopy(dict(error.details)),
        },
    )
    made.register_structure_hook(
        ItemError,
        lambda value, _: ItemError(
            code=str(value["code"]),
            message=str(value["message"]),
            param=value.get("param"),
            details=value.get("details"),
        ),
    )
    return made


converter = _make_converter()


def dump(record: Payout | Collection) -> dict[str, Any]:
    """Plain data for a record, tagged with its type."""
    kind = "payout" if isinstance(record, Payout) else "collection"
    return {"type": kind, "record": converter.unstructure(record)}


def dump_batch(batch: PayoutBatch) -> dict[str, Any]:
    """Plain data for a batch (the answer an idempotent bulk request keeps), tagged with its type."""
    return {"type": "batch", "record": converter.unstructure(batch)}


def load_batch(data: Any) -> PayoutBatch | None:
    """The batch :func:`dump_batch` wrote, or None for anything else."""
    if not isinstance(data, dict) or set(data) != {"type", "record"} or data["type"] != "batch":
        return None
    return converter.structure(data["record"], PayoutBatch)


def load(data: Any) -> Payout | Collection | None:
    """The record :func:`dump` wrote, or None for anything else (an answer stored by an older version)."""
    if not isinstance(data, dict) or set(data) != {"type", "record"}:
        return None
    if data["type"] == "payout":
        return converter.structure(data["record"], Payout)
    if data["type"] == "collection":
        return converter.structure(data["record"], Collection)
    return None


@attrs.frozen
class WebhookSettings:
    """A merchant's webhook endpoint (never its secret)."""

    url: str
    is_active: bool
    disabled_reason: str | None
    updated_at: datetime
    events: str  # "v2" (current event names) or "legacy"


@attrs.frozen
class WebhookRegistration:
    """The answer to registering an endpoint: the new signing secret, shown this once."""

    url: str
    signing_secret: str
    is_active: bool
    updated_at: datetime
    events: str


@attrs.frozen
class PayoutAllowance:
    """What a merchant may pay out in one currency right now: the switches, the ceilings, the spend.

    When ``enabled`` is False, ``blocked_by`` says why (PLATFORM, ACCOUNT_DISABLED, CURRENCY_CLOSED) and
    the amounts are None. Amounts are in the currency's units; a ceiling of None is not set.
    """

    currency: str
    enabled: bool
    platform_enabled: bool
    configured: bool
    blocked_by: str | None
    message: str | None
    per_transaction: Decimal | None = None
    per_day: Decimal | None = None
    per_week: Decimal | None = None
    review_threshold: Decimal | None = None
    spent_today: Decimal | None = None
    spent_this_week: Decimal | None = None
    remaining_today: Decimal | None = None
    remaining_this_week: Decimal | None = None


@attrs.frozen
class MerchantBalance:
    """A merchant's money in one currency: available to pay out, and reserved by open payouts."""

    currency: str
    available: Decimal
    reserved: Decimal


# --- lists: one page of records, the ledger's history, events and their deliveries ------------------

T = TypeVar("T")


@attrs.frozen
class Page(Generic[T]):
    """One page of a list, newest first: at most ``limit`` items, and whether more follow.

    Ask for the next page with ``starting_after`` set to the last item's ``reference`` (payouts,
    collections) or ``id`` (ledger items, events). Records created meanwhile are newer, so they never
    shift a later page: paging on never skips or repeats an item.
    """

    data: tuple[T, ...]
    has_more: bool


class LedgerItemType(enum.Enum):
    """What moved a balance (the ledger's movements, as the merchant sees them)."""

    COLLECTION_SETTLED = "COLLECTION_SETTLED"  # a collection's net amount credited: available +
    PAYOUT_RESERVED = "PAYOUT_RESERVED"  # a payout created: available -, reserved +
    PAYOUT_PAID = "PAYOUT_PAID"  # a payout paid: reserved -, the money left
    PAYOUT_RELEASED = "PAYOUT_RELEASED"  # a payout rejected or resolved unpaid: reserved -, available +


@attrs.frozen
class LedgerItem:
    """One movement of a merchant's balance in one currency, and the balance right after it.

    ``amount`` is signed: for ``PAYOUT_PAID`` it is the change to ``reserved`` (negative: the money
    left), for every other type the change to ``available`` (so ``PAYOUT_RESERVED`` is negative and its
    opposite is added to ``reserved``; ``PAYOUT_RELEASED`` positive and taken from ``reserved``).
    :meth:`apply` is that rule: applied from the oldest item on, it ends at the current balance.
    """

    id: str
    created_at: datetime
    type: LedgerItemType
    reference: str  # the collection (REQ-...) or payout (PO-...) behind the movement
    currency: str
    amount: Decimal
    available: Decimal
    reserved: Decimal

    def apply(self, available: Decimal, reserved: Decimal) -> tuple[Decimal, Decimal]:
        """The balance after this movement, given the balance before it."""
        if self.type is LedgerItemType.PAYOUT_PAID:
            return available, reserved + self.amount
        if self.type is LedgerItemType.COLLECTION_SETTLED:
            return available + self.amount, reserved
        return available + self.amount, reserved - self.amount


class EventDeliveryStatus(enum.Enum):
    """Where an event's delivery stands."""

    PENDING = "PENDING"  # not delivered yet; attempts may be under way or scheduled
    DELIVERED = "DELIVERED"  # an attempt was answered with 2xx
    FAILED = "FAILED"  # every attempt failed, or there was no active endpoint to send it to


@attrs.frozen
class EventDelivery:
    """One delivery attempt of an event. ``resent`` marks a manual redelivery (``webhooks.resend``)."""

    at: datetime
    response_status: int | None  # None when no response came (timeout, refused connection, ...)
    error: str | None  # None when the attempt succeeded
    duration_ms: int
    resent: bool = False


@attrs.frozen
class EventSummary:
    """A webhook event written for the merchant, and where its delivery stands.

    ``type`` is the current name (``collect.succeeded``), ``name`` the name as delivered (a legacy one,
    such as ``payment.succeeded``, for an endpoint registered for legacy names). ``attempts`` counts
    every delivery attempt, manual redeliveries included.
    """

    id: str
    type: str
    name: str
    reference: str
    created_at: datetime
    delivery_status: EventDeliveryStatus
    attempts: int


@attrs.frozen
class EventRecord:
    """An event with its body and every delivery attempt (oldest first).

    ``payload`` is the JSON body as signed and sent (numbers as ``Decimal`` or ``int``), read-only.
    """

    id: str
    type: str
    name: str
    reference: str
    created_at: datetime
    delivery_status: EventDeliveryStatus
    attempts: int
    payload: Mapping[str, Any] = attrs.field(hash=False)
    deliveries: tuple[EventDelivery, ...]


# --- the operator's side: operators, console sessions, the audit trail, the work queues ---------------


@attrs.frozen
class OperatorAccount:
    """A person who may sign in to the console (never the sign-in token, which is shown once)."""

    id: str
    name: str
    revoked: bool
    created_at: datetime


@attrs.frozen
class CreatedOperator:
    """A new operator and the sign-in token: shown here once and never stored (only its hash is)."""

    operator: OperatorAccount
    token: str


@attrs.frozen
class ConsoleSession:
    """A signed-in console session. It ends at ``expires_at`` unless used before then (each use moves
    it on), and in any case once ``ends_at`` has come, when the operator signs out, or is revoked."""

    id: str
    operator: OperatorAccount
    created_at: datetime
    last_seen_at: datetime
    expires_at: datetime
    ends_at: datetime


@attrs.frozen
class SignedIn:
    """A new session and its secret (the console's cookie): shown here once, kept only as a hash."""

    session: ConsoleSession
    secret: str


@attrs.frozen
class AuditEntry:
    """One operator action, as the audit trail recorded it with its effect.

    ``actor`` is who acted: an operator id (``op_...``) for the console, ``cli:<os user>`` for the
    command line, ``library`` (or what the caller named) for a library call. ``record`` is the record
    acted on (a payout reference, a merchant, key or operator id, or ``platform``); ``before`` and
    ``after`` its state around the action (``before`` is None when the action created it), read-only
    JSON objects (amounts in the currency's units, as ``int`` or ``Decimal``).
    """

    id: str
    at: datetime
    actor: str
    action: str
    record: str
    before: Mapping[str, Any] | None = attrs.field(hash=False)
    after: Mapping[str, Any] | None = attrs.field(hash=False)


@attrs.frozen
class OperatorPayout:
    """A payout in an operator's work queue: the merchant's record, whose it is, and whether its
    reservation has been resolved (``resolution``: ``POSTED`` (paid), ``RELEASED`` (money back) or
    None)."""

    merchant_id: str
    payout: Payout
    resolution: str | None
    updated_at: datetime
    batch_id: str | None = None  # the bulk request (bat_...) that created it, if any

    # the operator's actions on it (``PaymentCore.disburse.release``/``reject``/``resolve``) allowed now:
    # the rules of the stored record (paymentcore._domain.models), asked with this record's fields

    @property
    def can_release(self) -> bool:
        p = self.payout
        return models.why_not_release(p.reference, p.status, p.awaiting_review) is None

    @property
    def can_reject(self) -> bool:
        p = self.payout
        resolved = self.resolution is not None
        return models.why_not_reject(p.reference, p.status, p.awaiting_review, resolved) is None

    @property
    def can_resolve(self) -> bool:
        p = self.payout
        return models.why_not_resolve(p.reference, p.status, self.resolution is not None) is None


@attrs.frozen
class OperatorCollection:
    """A collection in an operator's list across merchants: the merchant's record and whose it is."""

    merchant_id: str
    collection: Collection
    updated_at: datetime
