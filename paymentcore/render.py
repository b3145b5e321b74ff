"""Records as the spec's JSON objects (dicts with Decimal amounts, ISO timestamps)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from paymentcore.catalogue import Catalogue
from paymentcore.models import Collection, CollectionKind, CollectionStatus, Merchant, Payout
from paymentcore.money import apply_rate


def iso(ms: int) -> str:
    """ISO 8601 UTC with milliseconds: 2026-01-01T00:00:00.000Z."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def amount(catalogue: Catalogue, minor: int, currency: str) -> Decimal:
    return catalogue.currencies[currency].render(minor)


def is_payable(collection: Collection, now: int) -> bool:
    return (
        collection.kind is not CollectionKind.CHARGE
        and collection.status is CollectionStatus.PENDING
        and collection.submitted_at is None
        and now < collection.expires_at
    )


def collection_record(
    collection: Collection,
    *,
    catalogue: Catalogue,
    merchant: Merchant,
    public_url: str,
    now: int,
) -> dict[str, Any]:
    legacy = collection.kind is CollectionKind.LEGACY
    if collection.settled_amount is not None and collection.settled_currency is not None:
        value, currency = collection.settled_amount, collection.settled_currency
    elif legacy and collection.requested_currency != merchant.settlement_currency:
        source = catalogue.currencies[collection.requested_currency]
        target = catalogue.currencies[merchant.settlement_currency]
        rate = catalogue.rates.rate(source.code, target.code)
        value = apply_rate(collection.requested_amount, source.decimals, rate, target.decimals)
        currency = target.code
    else:
        value, currency = collection.requested_amount, collection.requested_currency
    record: dict[str, Any] = {
        "reference": collection.reference,
        "status": collection.status.value,
        "amount": amount(catalogue, value, currency),
        "currency": currency,
        "requestedAmount": amount(catalogue, collection.requested_amount, collection.requested_currency),
        "requestedCurrency": collection.requested_currency,
        "description": collection.description,
        "merchantReference": collection.merchant_reference,
        "checkoutUrl": (
            f"{public_url.rstrip('/')}/checkout/{collection.reference}"
            if is_payable(collection, now)
            else None
        ),
    }
    if not legacy:
        record["method"] = collection.method
        record["providerCode"] = collection.provider
    record["expiresAt"] = iso(collection.expires_at)
    record["createdAt"] = iso(collection.created_at)
    record["failureCategory"] = (
        collection.failure_category if collection.status is CollectionStatus.FAILED else None
    )
    return record


def charge_response(collection: Collection, *, catalogue: Catalogue) -> dict[str, Any]:
    return {
        "reference": collection.reference,
        "status": collection.status.value,
        "amount": amount(catalogue, collection.requested_amount, collection.requested_currency),
        "currency": collection.requested_currency,
        "provider": collection.provider,
        "merchantReference": collection.merchant_reference,
        "createdAt": iso(collection.created_at),
    }


def payout_record(payout: Payout, *, catalogue: Catalogue) -> dict[str, Any]:
    return {
        "reference": payout.reference,
        "status": payout.status.value,
        "amount": amount(catalogue, payout.amount, payout.currency),
        "currency": payout.currency,
        "phone": payout.phone,
        "recipientName": payout.recipient_name,
        "merchantReference": payout.merchant_reference,
        "providerReference": payout.provider_reference,
        "awaitingReview": payout.awaiting_review,
        "statusReason": payout.status_reason,
        "createdAt": iso(payout.created_at),
    }


_EVENT_FIELDS = (
    "reference",
    "status",
    "amount",
    "currency",
    "phone",
    "recipientName",
    "merchantReference",
    "providerReference",
    "statusReason",
)


def payout_event_data(payout: Payout, *, catalogue: Catalogue) -> dict[str, Any]:
    """The ``data`` of a disbursement event: the payout record's fields the spec lists for it."""
    record = payout_record(payout, catalogue=catalogue)
    return {name: record[name] for name in _EVENT_FIELDS}


def collection_event_data(collection: Collection, *, catalogue: Catalogue, now: int) -> dict[str, Any]:
    charged = collection.charged_amount
    charged_currency = collection.charged_currency
    if charged is None or charged_currency is None:  # failed before the payer chose how to pay
        charged, charged_currency = collection.requested_amount, collection.requested_currency
    provider = catalogue.providers.get(collection.provider or "")
    method = None
    if provider is not None:
        method = "LIGHTNING" if provider.code == "lightning" else provider.method
    settled = collection.settled_amount or 0
    settled_currency = collection.settled_currency or charged_currency
    return {
        "invoiceReference": collection.reference,
        "status": collection.status.value,
        "amount": amount(catalogue, charged, charged_currency),
        "currency": charged_currency,
        "settledAmount": amount(catalogue, settled, settled_currency),
        "settledCurrency": settled_currency,
        "requestedAmount": amount(catalogue, collection.requested_amount, collection.requested_currency),
        "requestedCurrency": collection.requested_currency,
        "paymentMethod": method,
        "providerCode": collection.provider,
        "failureReason": collection.failure_reason,
        "timestamp": iso(now),
    }
