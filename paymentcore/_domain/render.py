"""The data of outbox events, as webhook receivers get it (camelCase, Decimal amounts, ISO times).

Webhook bodies are the one wire the library itself writes: the worker delivers them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from paymentcore._domain.catalogue import Catalogue
from paymentcore._domain.models import Collection, Payout
from paymentcore._domain.records import PayoutBatch


def iso(ms: int) -> str:
    """ISO 8601 UTC with milliseconds: 2026-01-01T00:00:00.000Z."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return f"{moment.replace(tzinfo=None).isoformat(timespec='seconds')}.{ms % 1000:03d}Z"


def _units(catalogue: Catalogue, minor: int, currency: str) -> Decimal:
    return catalogue.currencies[currency].render(minor)


def payout_event_data(payout: Payout, *, catalogue: Catalogue) -> dict[str, Any]:
    """The ``data`` of a disbursement event: the payout record's fields the spec lists for it."""
    return {
        "reference": payout.reference,
        "status": payout.status.value,
        "amount": _units(catalogue, payout.amount, payout.currency),
        "currency": payout.currency,
        "phone": payout.phone,
        "recipientName": payout.recipient_name,
        "merchantReference": payout.merchant_reference,
        "providerReference": payout.provider_reference,
        "statusReason": payout.status_reason,
    }


def _iso_of(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def batch_event_data(batch: PayoutBatch) -> dict[str, Any]:
    """The ``data`` of ``disburse.bulk.completed``: the batch's counts, and its payouts counted and summed
    per status and currency (``reference`` is the batch's id, as every event names its record)."""
    return {
        "reference": batch.id,
        "id": batch.id,
        "status": batch.status.value,
        "mode": batch.mode.value,
        "createdAt": _iso_of(batch.created_at),
        "completedAt": None if batch.completed_at is None else _iso_of(batch.completed_at),
        "itemCount": batch.item_count,
        "acceptedCount": batch.accepted,
        "refusedCount": batch.refused,
        "totals": [
            {"currency": total.currency, "count": total.count, "amount": total.amount}
            for total in batch.totals
        ],
        "progress": [
            {"status": row.status.value, "currency": row.currency, "count": row.count, "amount": row.amount}
            for row in batch.progress
        ],
    }


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
        "amount": _units(catalogue, charged, charged_currency),
        "currency": charged_currency,
        "settledAmount": _units(catalogue, settled, settled_currency),
        "settledCurrency": settled_currency,
        "requestedAmount": _units(catalogue, collection.requested_amount, collection.requested_currency),
        "requestedCurrency": collection.requested_currency,
        "paymentMethod": method,
        "providerCode": collection.provider,
        "failureReason": collection.failure_reason,
        "timestamp": iso(now),
    }
