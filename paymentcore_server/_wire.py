"""The wire, both ways: request JSON to the library's arguments, the library's records to response JSON.

camelCase names, the legacy aliases and shapes, and the ``param`` an error names are the server's
business; the library only knows its own argument names (``merchant_reference``) and records.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from paymentcore import (
    BatchItem,
    BatchRefusedError,
    Collection,
    CollectionKind,
    EventDelivery,
    EventRecord,
    EventSummary,
    InvalidRequestError,
    LedgerItem,
    MerchantBalance,
    Page,
    PaymentError,
    Payout,
    PayoutAllowance,
    PayoutBatch,
    PayoutItem,
    WebhookRegistration,
    WebhookSettings,
    from_ms,
)
from paymentcore.errors import RefusedItemError
from paymentcore.limits import DEFAULT_PAGE_LIMIT, MAX_IDEMPOTENCY_KEY_LENGTH
from paymentcore_server._headers import IDEMPOTENCY_HEADER

LIMIT_DEFAULT = DEFAULT_PAGE_LIMIT  # a list's page size when ``limit`` is not given (the library's)
LIMIT_DIGITS = 3  # a longer ``limit`` is out of range whatever it says

E = TypeVar("E", bound=enum.Enum)
T = TypeVar("T")

# what the library's messages say, and what the API has always said on the wire
_HTTP_MESSAGES: Mapping[str, str] = {
    "IDEMPOTENCY_KEY_REQUIRED": "Payouts need an Idempotency-Key header.",
    "IDEMPOTENCY_KEY_TOO_LONG": (
        f"The {IDEMPOTENCY_HEADER} header must be at most {MAX_IDEMPOTENCY_KEY_LENGTH} characters."
    ),
    "IDEMPOTENCY_KEY_REUSED": "This Idempotency-Key was already used with a different request.",
}


def iso(moment: datetime) -> str:
    """ISO 8601 UTC with milliseconds: 2026-01-01T00:00:00.000Z (isoformat: a third cheaper than strftime)."""
    return moment.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def iso_ms(ms: int) -> str:
    """Milliseconds since the epoch as ISO 8601 UTC with milliseconds."""
    return iso(from_ms(ms))


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def require_object(body: object) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise InvalidRequestError("The body must be a JSON object.")
    return body


def text_field(body: Mapping[str, Any], name: str, *, max_length: int) -> str | None:
    """An optional string field checked at the wire (used for aliases the library does not know)."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequestError(f"{name} must be a string.", param=name)
    if len(value) > max_length:
        raise InvalidRequestError(f"{name} must be at most {max_length} characters.", param=name)
    return value


class Fields:
    """The JSON body of one request, and the wire name behind each library argument it fed."""

    def __init__(self, body: object) -> None:
        self.body = require_object(body)
        self.wire_names: dict[str, str] = {"idempotency_key": IDEMPOTENCY_HEADER}

    def get(self, argument: str, wire: str | None = None) -> Any:
        name = wire or camel(argument)
        self.wire_names[argument] = name
        return self.body.get(name)

    def merchant_reference(self) -> Any:
        """``merchantReference``, or its older alias ``reference`` (checked even when unused)."""
        value = self.body.get("merchantReference")
        if value is not None:
            text_field(self.body, "reference", max_length=120)
            self.wire_names["merchant_reference"] = "merchantReference"
            return value
        self.wire_names["merchant_reference"] = "reference"
        return self.body.get("reference")

    def translate(self, error: PaymentError) -> PaymentError:
        """The library's error with the wire's names in ``param`` and in the message."""
        return translate(error, self.wire_names)


class Query:
    """The query string of a list request, and the wire name behind each library argument it fed.

    Only the parameters the path reads are allowed, each at most once: a misspelt filter answers 400
    (``param`` naming it) instead of an unfiltered list.
    """

    def __init__(self, pairs: Sequence[tuple[str, str]], allowed: Sequence[str]) -> None:
        self.values: dict[str, str] = {}
        self.wire_names: dict[str, str] = {}
        for name, value in pairs:
            if name not in allowed:
                shown = name[:40]
                raise InvalidRequestError(
                    f"Unknown query parameter '{shown}'; this path reads {', '.join(allowed)}.",
                    param=shown,
                )
            if name in self.values:
                raise InvalidRequestError(f"{name} is given more than once.", param=name)
            self.values[name] = value

    def get(self, argument: str, wire: str | None = None) -> str | None:
        name = wire or camel(argument)
        self.wire_names[argument] = name
        return self.values.get(name)

    def limit(self) -> int:
        """``limit``: digits only (the library checks the range); :data:`LIMIT_DEFAULT` when absent."""
        value = self.get("limit")
        if value is None:
            return LIMIT_DEFAULT
        if not value.isascii() or not value.isdigit() or len(value) > LIMIT_DIGITS:
            raise InvalidRequestError("limit must be a whole number from 1 to 100.", param="limit")
        return int(value)

    def member(self, argument: str, kind: type[E], wire: str | None = None) -> E | None:
        """A filter naming one member of ``kind`` by its value."""
        value = self.get(argument, wire)
        if value is None:
            return None
        for member in kind:
            if value == member.value:
                return member
        name = self.wire_names[argument]
        allowed = ", ".join(str(member.value) for member in kind)
        raise InvalidRequestError(f"{name} must be one of {allowed}.", param=name)

    def translate(self, error: PaymentError) -> PaymentError:
        return translate(error, self.wire_names)


def _wire_param(param: str, message: str, wire_names: Mapping[str, str]) -> tuple[str, str]:
    """A library ``param`` by its wire name, and ``message`` saying that name."""
    wire = wire_names.get(param) or (camel(param) if "_" in param else param)
    if wire == param:
        return param, message
    return wire, re.sub(rf"\b{re.escape(param)}\b", wire, message)


def translate(error: PaymentError, wire_names: Mapping[str, str]) -> PaymentError:
    param = error.param
    if param is None:
        return error
    wire, message = _wire_param(param, error.message, wire_names)
    if wire != param:
        error.message = message
        error.param = wire
        error.args = (error.message,)
    http_message = _HTTP_MESSAGES.get(error.code)
    if http_message is not None and param == "idempotency_key":
        error.message = http_message
        error.args = (error.message,)
    return error


# --- records to JSON ----------------------------------------------------------------------------


def payout_json(payout: Payout) -> dict[str, Any]:
    return {
        "reference": payout.reference,
        "status": payout.status.value,
        "amount": payout.amount,
        "currency": payout.currency,
        "phone": payout.phone,
        "recipientName": payout.recipient_name,
        "merchantReference": payout.merchant_reference,
        "providerReference": payout.provider_reference,
        "awaitingReview": payout.awaiting_review,
        "statusReason": payout.status_reason,
        "createdAt": iso(payout.created_at),
    }


def collection_json(collection: Collection) -> dict[str, Any]:
    record: dict[str, Any] = {
        "reference": collection.reference,
        "status": collection.status.value,
        "amount": collection.amount,
        "currency": collection.currency,
        "requestedAmount": collection.requested_amount,
        "requestedCurrency": collection.requested_currency,
        "description": collection.description,
        "merchantReference": collection.merchant_reference,
        "checkoutUrl": collection.checkout_url,
    }
    if collection.kind is not CollectionKind.LEGACY:
        record["method"] = collection.method
        record["providerCode"] = collection.provider_code
    record["expiresAt"] = iso(collection.expires_at)
    record["createdAt"] = iso(collection.created_at)
    record["failureCategory"] = collection.failure_category
    return record


def charge_json(collection: Collection) -> dict[str, Any]:
    """The answer to a direct charge: what was asked, and the reference to follow."""
    return {
        "reference": collection.reference,
        "status": collection.status.value,
        "amount": collection.requested_amount,
        "currency": collection.requested_currency,
        "provider": collection.provider_code,
        "merchantReference": collection.merchant_reference,
        "createdAt": iso(collection.created_at),
    }


def webhook_registration_json(registration: WebhookRegistration) -> dict[str, Any]:
    return {
        "url": registration.url,
        "signingSecret": registration.signing_secret,
        "isActive": registration.is_active,
        "updatedAt": iso(registration.updated_at),
        "events": registration.events,
    }


def webhook_settings_json(settings: WebhookSettings) -> dict[str, Any]:
    return {
        "url": settings.url,
        "isActive": settings.is_active,
        "disabledReason": settings.disabled_reason,
        "updatedAt": iso(settings.updated_at),
        "events": settings.events,
    }


def allowance_json(allowance: PayoutAllowance) -> dict[str, Any]:
    record: dict[str, Any] = {
        "currency": allowance.currency,
        "enabled": allowance.enabled,
        "platformEnabled": allowance.platform_enabled,
        "configured": allowance.configured,
        "blockedBy": allowance.blocked_by,
        "message": allowance.message,
    }
    if not allowance.enabled:
        return record
    record.update(
        {
            "perTransaction": allowance.per_transaction,
            "perDay": allowance.per_day,
            "perWeek": allowance.per_week,
            "reviewThreshold": allowance.review_threshold,
            "spentToday": allowance.spent_today,
            "spentThisWeek": allowance.spent_this_week,
            "remainingToday": allowance.remaining_today,
            "remainingThisWeek": allowance.remaining_this_week,
        }
    )
    return record


def balance_json(balance: MerchantBalance) -> dict[str, Any]:
    return {"currency": balance.currency, "available": balance.available, "reserved": balance.reserved}


# --- bulk payouts ----------------------------------------------------------------------------------


def bulk_items(value: Any) -> Any:
    """The ``items`` of a bulk request as the library takes them: each JSON object becomes a
    :class:`PayoutItem` (its fields read as a single payout's body reads them, but ``merchantReference``
    only: a bulk request is new, so its items do not take the old alias ``reference``); anything else is
    passed on as it is, for the library to refuse, naming the item (``items``, ``items[3]``)."""
    if not isinstance(value, list):
        return value
    made: list[Any] = []
    for item in value:
        if not isinstance(item, Mapping):
            made.append(item)
            continue
        f = Fields(item)
        made.append(
            PayoutItem(
                amount=f.get("amount"),
                currency=f.get("currency"),
                phone=f.get("phone"),
                merchant_reference=f.get("merchant_reference"),
                recipient_name=f.get("recipient_name"),
                provider=f.get("provider"),
                country=f.get("country"),
            )
        )
    return made


def item_error_json(error: RefusedItemError) -> dict[str, Any]:
    """A refused item's error in the API's error shape (no ``requestId``: the request has it), ``param``
    by its wire name, and ``param`` and ``details`` only when there are some."""
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.param is not None:
        body["param"], body["message"] = _wire_param(error.param, error.message, {})
    if error.details is not None:
        body["details"] = dict(error.details)
    return body


def batch_item_json(item: BatchItem) -> dict[str, Any]:
    payout = item.payout
    return {
        "index": item.index,
        "merchantReference": item.merchant_reference,
        "payout": None
        if payout is None
        else {
            "reference": payout.reference,
            "status": payout.status.value,
            "awaitingReview": payout.awaiting_review,
        },
        "error": None if item.error is None else item_error_json(item.error),
    }


def batch_json(batch: PayoutBatch) -> dict[str, Any]:
    return {
        "id": batch.id,
        "mode": batch.mode.value,
        "status": batch.status.value,
        "createdAt": iso(batch.created_at),
        "completedAt": None if batch.completed_at is None else iso(batch.completed_at),
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
        "items": [batch_item_json(item) for item in batch.items],
        "hasMore": batch.has_more,
    }


def batch_refused(error: BatchRefusedError) -> BatchRefusedError:
    """The refusal of an all-or-none batch as the wire says it: every refused item's error by its wire
    names (the first one's in the message as well)."""
    items = [
        {
            "index": item.index,
            "merchantReference": item.merchant_reference,
            "error": item_error_json(item.error),
        }
        for item in error.items
        if item.error is not None
    ]
    first = error.items[0].error if error.items else None
    message = error.message
    if first is not None and first.param is not None:
        message = _wire_param(first.param, message, {})[1]
    return BatchRefusedError(
        message,
        param=error.param,
        details={**(error.details or {}), "items": items},
        items=error.items,
    )


# --- lists ----------------------------------------------------------------------------------------


def page_json(page: Page[T], render: Callable[[T], dict[str, Any]]) -> dict[str, Any]:
    """``{"data": [...], "hasMore": ...}``: one page of a list, newest first."""
    return {"data": [render(item) for item in page.data], "hasMore": page.has_more}


def ledger_item_json(item: LedgerItem) -> dict[str, Any]:
    return {
        "id": item.id,
        "createdAt": iso(item.created_at),
        "type": item.type.value,
        "reference": item.reference,
        "amount": item.amount,
        "available": item.available,
        "reserved": item.reserved,
    }


def event_summary_json(event: EventSummary | EventRecord) -> dict[str, Any]:
    """An event in a list: ``type`` is the name as delivered (legacy for a legacy endpoint)."""
    return {
        "id": event.id,
        "type": event.name,
        "reference": event.reference,
        "createdAt": iso(event.created_at),
        "deliveryStatus": event.delivery_status.value,
        "attempts": event.attempts,
    }


def event_delivery_json(delivery: EventDelivery) -> dict[str, Any]:
    return {
        "at": iso(delivery.at),
        "responseStatus": delivery.response_status,
        "error": delivery.error,
        "durationMs": delivery.duration_ms,
    }


def event_record_json(event: EventRecord) -> dict[str, Any]:
    """An event with ``payload`` (the body as signed and sent) and every delivery attempt."""
    return {
        **event_summary_json(event),
        "payload": dict(event.payload),
        "deliveries": [event_delivery_json(delivery) for delivery in event.deliveries],
    }
