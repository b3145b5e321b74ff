"""Verify a webhook delivery and parse it into one typed object, whatever its shape or name.

:func:`construct_event` first checks the delivery exactly as
:func:`paymentcore._domain.signing.verify_webhook` does (signature over ``<timestamp>.<raw body>``,
freshness), then parses the body with exact numbers
(:func:`paymentcore._domain.money.parse_json`: never a float) and returns a :class:`WebhookEvent`:

- collection events are flat JSON without the event name (it travels in ``X-Service-Event``);
- payout events are wrapped: ``{"event": <name>, "data": {...}, "eventId": ...}``, and so is
  ``disburse.bulk.completed``, whose data is the batch's (``reference`` is its ``bat_...`` id);
- an endpoint registered for legacy names receives ``payment.succeeded``, ``payout.paid``, ...;
  ``WebhookEvent.type`` is always the current name (``collect.succeeded``, ``disburse.succeeded``),
  ``WebhookEvent.name`` the name as delivered.

The ``X-Service-Event`` header is not covered by the signature (only the timestamp and the body are).
So that an altered header cannot turn, say, a failed payment into ``collect.succeeded``, the name of a
known event must agree with what the signed body says: the record's ``status`` (``SUCCESS`` for
``collect.succeeded``, ``PAID`` for ``disburse.succeeded``, ...) and, for payouts, the body's own
``event`` field. A disagreement raises :class:`WebhookVerificationError`, as does an
``X-Service-Event-Id`` header other than the body's ``eventId``, or a body that is not a JSON object or
lacks the fields every event has. An unknown but well-formed name is kept as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from types import MappingProxyType
from typing import Any

import attrs

from paymentcore._domain.errors import PaymentError
from paymentcore._domain.event_types import LEGACY_NAMES, EventType
from paymentcore._domain.money import parse_json
from paymentcore._domain.signing import (
    EVENT_HEADER,
    EVENT_ID_HEADER,
    TOLERANCE_SECONDS,
    WebhookVerificationError,
    verify_webhook,
)
from paymentcore._domain.signing import (
    header as _header,
)

__all__ = ["WebhookEvent", "construct_event"]

#: legacy name -> current name (the inverse of ``webhooks.LEGACY_NAMES``)
CURRENT_NAMES: Mapping[str, str] = MappingProxyType({old: new for new, old in LEGACY_NAMES.items()})

#: the record statuses each known event can carry (the spec's "Emitted by" column)
_STATUSES: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        EventType.COLLECT_SUCCEEDED: frozenset({"SUCCESS"}),
        EventType.COLLECT_FAILED: frozenset({"FAILED"}),
        EventType.DISBURSE_SENT: frozenset({"SENT"}),
        EventType.DISBURSE_SUCCEEDED: frozenset({"PAID"}),
        EventType.DISBURSE_FAILED: frozenset({"FAILED", "REJECTED"}),
        EventType.DISBURSE_BULK_COMPLETED: frozenset({"COMPLETED"}),
    }
)

_COLLECTION_PREFIX = "collect."
_PAYOUT_PREFIX = "disburse."
_BATCH_PREFIX = "disburse.bulk."
_NAME = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)+")
_NAME_MAX = 100


@attrs.frozen
class WebhookEvent:
    """One verified webhook delivery.

    ``type`` is always the current event name, ``name`` the name as delivered (a legacy one for an
    endpoint registered for legacy names). ``data`` is the event's data, read-only, with every JSON
    number as a :class:`~decimal.Decimal`: the flat body without ``eventId`` for a collection event,
    the body's ``data`` object for a payout event. ``timestamp`` is the signature's timestamp (UTC).
    """

    id: str | None
    type: str
    name: str
    reference: str
    status: str
    data: Mapping[str, Any] = attrs.field(hash=False)
    timestamp: datetime

    @property
    def is_collection(self) -> bool:
        """A ``collect.*`` event: the flat collection body."""
        return self.type.startswith(_COLLECTION_PREFIX)

    @property
    def is_payout(self) -> bool:
        """A ``disburse.*`` event about one payout: the payout's data."""
        return self.type.startswith(_PAYOUT_PREFIX) and not self.is_batch

    @property
    def is_batch(self) -> bool:
        """A ``disburse.bulk.*`` event (``disburse.bulk.completed``): a bulk request's data, whose
        ``reference`` is the batch's id (``bat_...``)."""
        return self.type.startswith(_BATCH_PREFIX)

    @property
    def amount(self) -> Decimal | None:
        """``data["amount"]``: what the payer was charged (collection) or the amount sent (payout)."""
        value = self.data.get("amount")
        return value if isinstance(value, Decimal) and value.is_finite() else None

    @property
    def currency(self) -> str | None:
        """``data["currency"]``: the currency of :attr:`amount`."""
        value = self.data.get("currency")
        return value if isinstance(value, str) else None


def construct_event(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float | None = None,
    tolerance: int = TOLERANCE_SECONDS,
) -> WebhookEvent:
    """Verify a delivery and return it as a :class:`WebhookEvent`; raise WebhookVerificationError.

    The verification is :func:`~paymentcore._domain.signing.verify_webhook`'s, with the same ``now`` and
    ``tolerance``: ``body`` must be the raw bytes as received. A delivery that verifies but whose body is
    not a JSON object, has no recognisable event name, lacks its reference or status, or whose
    ``X-Service-Event`` header disagrees with the signed body is refused as well.
    """
    stamp = verify_webhook(secret, headers, body, now=now, tolerance=tolerance)
    try:
        timestamp = datetime.fromtimestamp(stamp, tz=UTC)
    except (OverflowError, OSError, ValueError):
        raise WebhookVerificationError("timestamp out of range") from None
    try:
        parsed = parse_json(body)
    except PaymentError:
        raise WebhookVerificationError("the body is not valid JSON") from None
    if not isinstance(parsed, dict):
        raise WebhookVerificationError("the body is not a JSON object")
    document: dict[str, Any] = _decimals(parsed)

    header_name = _header(headers, EVENT_HEADER)
    body_name = document.get("event")
    if body_name is not None and not isinstance(body_name, str):
        raise WebhookVerificationError("the body's 'event' field is not a string")
    name = header_name or body_name
    if not name:
        raise WebhookVerificationError("no event name: no X-Service-Event header and no 'event' field")
    if len(name) > _NAME_MAX or not _NAME.fullmatch(name):
        raise WebhookVerificationError(f"malformed event name {name[:_NAME_MAX]!r}")
    event_type = CURRENT_NAMES.get(name, name)
    if body_name and CURRENT_NAMES.get(body_name, body_name) != event_type:
        raise WebhookVerificationError(
            f"the X-Service-Event header ({name!r}) disagrees with the signed body ({body_name!r})"
        )

    wrapped = "data" in document
    if event_type.startswith(_COLLECTION_PREFIX) and event_type in _STATUSES and wrapped:
        raise WebhookVerificationError(f"a {name} event has a flat body, not an event/data wrapper")
    if event_type.startswith(_PAYOUT_PREFIX) and event_type in _STATUSES and not wrapped:
        raise WebhookVerificationError(f"a {name} event has an event/data wrapper, not a flat body")
    if wrapped:
        data = document["data"]
        if not isinstance(data, dict):
            raise WebhookVerificationError("the body's 'data' field is not a JSON object")
        reference = data.get("reference")
    else:
        data = {key: value for key, value in document.items() if key != "eventId"}
        reference = data.get("invoiceReference", data.get("reference"))
    if not isinstance(reference, str) or not reference:
        raise WebhookVerificationError(f"the {name} event carries no reference")
    status = data.get("status")
    if not isinstance(status, str) or not status:
        raise WebhookVerificationError(f"the {name} event carries no status")
    allowed = _STATUSES.get(event_type)
    if allowed is not None and status not in allowed:
        raise WebhookVerificationError(f"the event name {name!r} disagrees with the signed status {status!r}")

    event_id = document.get("eventId")
    header_id = _header(headers, EVENT_ID_HEADER)
    if header_id is not None and isinstance(event_id, str) and header_id != event_id:
        raise WebhookVerificationError(
            f"the X-Service-Event-Id header ({header_id[:40]!r}) disagrees with the signed body's eventId"
        )
    return WebhookEvent(
        id=event_id if isinstance(event_id, str) else None,
        type=event_type,
        name=name,
        reference=reference,
        status=status,
        data=MappingProxyType(data),
        timestamp=timestamp,
    )


def _decimals(value: Any) -> Any:
    """Every JSON number as Decimal (parse_json keeps small integers as int); booleans stay booleans."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, dict):
        return {key: _decimals(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decimals(item) for item in value]
    return value
