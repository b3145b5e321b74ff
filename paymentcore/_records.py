"""The records a user of the library gets: frozen, snake_case, Decimal amounts, aware datetimes, enums.

They are views of the stored records (``paymentcore._models``, integer minor units and milliseconds),
built at the moment they are returned. The server renders them to the API's JSON; a Python caller uses
them directly. :data:`converter` turns them into plain data and back (cattrs), which is how an idempotent
answer is kept and replayed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import attrs
import cattrs

from paymentcore import _models as models
from paymentcore._models import CollectionKind, CollectionStatus, PayoutStatus
from paymentcore._money import apply_rate
from paymentcore.catalogue import Catalogue

__all__ = [
    "Collection",
    "MerchantBalance",
    "Payout",
    "PayoutAllowance",
    "WebhookRegistration",
    "WebhookSettings",
    "collection_from",
    "converter",
    "from_ms",
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


def collection_from(
    collection: models.Collection,
    *,
    catalogue: Catalogue,
    settlement_currency: str,
    public_url: str,
    now: int,
) -> Collection:
    legacy = collection.kind is CollectionKind.LEGACY
    if collection.settled_amount is not None and collection.settled_currency is not None:
        value, currency = collection.settled_amount, collection.settled_currency
    elif legacy and collection.requested_currency != settlement_currency:
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


def _make_converter() -> cattrs.Converter:
    made = cattrs.Converter(forbid_extra_keys=True)
    # Decimal as its exact text ("12.50" stays "12.50"), datetimes as integer milliseconds.
    made.register_unstructure_hook(Decimal, str)
    made.register_structure_hook(Decimal, lambda value, _: Decimal(str(value)))
    made.register_unstructure_hook(datetime, to_ms)
    made.register_structure_hook(datetime, lambda value, _: from_ms(int(value)))
    return made


converter = _make_converter()


def dump(record: Payout | Collection) -> dict[str, Any]:
    """Plain data for a record, tagged with its type."""
    kind = "payout" if isinstance(record, Payout) else "collection"
    return {"type": kind, "record": converter.unstructure(record)}


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
