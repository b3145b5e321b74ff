"""The audit trail of operator actions, and the stored records of operators and their console sessions.

Every operator action (from the console, the CLI or a library call such as ``core.operator.
approve_merchant`` or ``core.disburse.release``) writes one :class:`StoredAuditEntry` in the unit of
work that makes its change, so the change and its entry commit together or not at all: when, who (the
actor), what (the action), which record, and that record's state before and after. A refused action
changes nothing and writes nothing. The trail is append-only: its repository can only add, and the SQL
stores refuse ``UPDATE`` and ``DELETE`` of ``audit_log`` with triggers, as they do for the ledger.

Who: the caller names the actor. The console passes the signed-in operator's id (``op_...``), the
command line ``cli:<os user>``, and a program calling the library without naming one is recorded as
:data:`DEFAULT_ACTOR` (``library``).

The states are small JSON objects with the names the operator reads elsewhere (the CLI's JSON):
amounts in the currency's units, never a key's hash or a token.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from paymentcore._domain.catalogue import Catalogue
from paymentcore._domain.errors import InvalidRequestError

# The stored records of operators, sessions and audit entries live with the other records (ports.py
# names them without importing this module); they stay importable from here.
from paymentcore._domain.models import (
    ApiKey,
    Merchant,
    Payout,
    PayoutLimits,
    Settings,
    StoredAuditEntry,
    StoredOperator,
    StoredSession,
    WebhookEndpoint,
)

if TYPE_CHECKING:
    from paymentcore._services.deps import Deps
    from paymentcore.ports import UnitOfWork

__all__ = [
    "DEFAULT_ACTOR",
    "MAX_ACTOR",
    "PLATFORM",
    "StoredAuditEntry",
    "StoredOperator",
    "StoredSession",
    "check_actor",
    "key_state",
    "limits_state",
    "merchant_state",
    "operator_state",
    "payout_state",
    "settings_state",
    "webhook_state",
    "write",
]

#: The actor recorded when a library caller names none: a program, not a person at the console or CLI.
DEFAULT_ACTOR = "library"
MAX_ACTOR = 200
#: The record the platform switches (and the per-currency payout switches) are recorded against.
PLATFORM = "platform"


def check_actor(actor: object) -> str:
    """An actor as given by the caller: 1 to 200 printable characters."""
    if (
        not isinstance(actor, str)
        or not actor
        or len(actor) > MAX_ACTOR
        or not actor.isprintable()
        or actor != actor.strip()
    ):
        raise InvalidRequestError(
            f"actor must be 1 to {MAX_ACTOR} printable characters, such as 'cli:alice' or an operator id.",
            param="actor",
        )
    return actor


def write(
    tx: UnitOfWork,
    deps: Deps,
    *,
    actor: str,
    action: str,
    subject: str,
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
) -> StoredAuditEntry:
    """Append the entry of an action inside the unit of work that makes the action's change."""
    entry = StoredAuditEntry(
        id=deps.refs.token("aud"),
        at=deps.clock.now(),
        actor=actor,
        action=action,
        subject=subject,
        state_before=None if before is None else dict(before),
        state_after=None if after is None else dict(after),
    )
    tx.audit.add(entry)
    return entry


# --- the states recorded before and after ---------------------------------------------------------


def _units(minor: int | None, currency: str, catalogue: Catalogue) -> Decimal | None:
    if minor is None:
        return None
    known = catalogue.currencies.get(currency)
    return known.render(minor) if known is not None else Decimal(minor)


def merchant_state(merchant: Merchant) -> dict[str, Any]:
    return {
        "merchantId": merchant.id,
        "name": merchant.name,
        "settlementCurrency": merchant.settlement_currency,
        "status": merchant.status.value,
        "payoutsEnabled": merchant.payouts_enabled,
        "collectFeePercent": Decimal(merchant.collect_fee_ppm) / Decimal(10_000),
        "blockedProviders": sorted(merchant.blocked_providers),
    }


def key_state(key: ApiKey) -> dict[str, Any]:
    """A key's state: never its hash."""
    return {
        "keyId": key.id,
        "merchantId": key.merchant_id,
        "scopes": sorted(scope.value for scope in key.scopes),
        "perMinute": key.per_minute,
        "perHour": key.per_hour,
        "revoked": key.revoked,
    }


def limits_state(limits: PayoutLimits, catalogue: Catalogue) -> dict[str, Any]:
    currency = limits.currency
    return {
        "merchantId": limits.merchant_id,
        "currency": currency,
        "perTransaction": _units(limits.per_transaction, currency, catalogue),
        "perDay": _units(limits.per_day, currency, catalogue),
        "perWeek": _units(limits.per_week, currency, catalogue),
        "reviewThreshold": _units(limits.review_threshold, currency, catalogue),
    }


def settings_state(settings: Settings) -> dict[str, Any]:
    return {
        "apiEnabled": settings.api_enabled,
        "payoutsEnabled": settings.payouts_enabled,
        "closedCurrencies": sorted(settings.closed_currencies),
    }


def payout_state(payout: Payout, catalogue: Catalogue) -> dict[str, Any]:
    return {
        "reference": payout.reference,
        "merchantId": payout.merchant_id,
        "status": payout.status.value,
        "amount": _units(payout.amount, payout.currency, catalogue),
        "currency": payout.currency,
        "phone": payout.phone,
        "recipientName": payout.recipient_name,
        "merchantReference": payout.merchant_reference,
        "awaitingReview": payout.awaiting_review,
        "statusReason": payout.status_reason,
        "resolution": None if payout.resolution is None else payout.resolution.value,
    }


def webhook_state(endpoint: WebhookEndpoint) -> dict[str, Any]:
    """An endpoint's state: never its secret."""
    return {
        "merchantId": endpoint.merchant_id,
        "url": endpoint.url,
        "isActive": endpoint.is_active,
        "disabledReason": endpoint.disabled_reason,
        "events": endpoint.events,
        "consecutiveFailures": endpoint.consecutive_failures,
    }


def operator_state(operator: StoredOperator) -> dict[str, Any]:
    """An operator's state: never the token's hash."""
    return {"operatorId": operator.id, "name": operator.name, "revoked": operator.revoked}
