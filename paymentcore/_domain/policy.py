"""The payout policy as plain values: who may pay out, the effective limits, ceilings and review.

Nothing here reads or writes storage: the spend in a rolling window arrives as a callable, so the same
rules run in the service and in unit tests.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import attrs

from paymentcore._domain.catalogue import Currency
from paymentcore._domain.errors import PayoutLimitExceededError
from paymentcore._domain.models import REJECTED_REASON, Merchant, PayoutLimits, Settings
from paymentcore._domain.money import to_decimal

__all__ = [
    "DAY_MS",
    "REJECTED_REASON",
    "REVIEW_REASON",
    "WEEK_MS",
    "BlockedBy",
    "EffectiveLimits",
    "blocked_by",
    "check_limits",
    "effective_limits",
    "held_for_review",
]

DAY_MS = 86_400_000
WEEK_MS = 7 * DAY_MS
REVIEW_REASON = "Held for review: the amount is above the review threshold."

_LABELS = {"perTransaction": "per-payout", "perDay": "rolling 24-hour", "perWeek": "rolling 7-day"}


@attrs.frozen
class EffectiveLimits:
    """A merchant's payout limits for one currency as they apply now (minor units; None: no ceiling)."""

    per_transaction: int | None
    per_day: int | None
    per_week: int | None
    review_threshold: int | None


def effective_limits(limits: PayoutLimits | None, max_minor: int) -> EffectiveLimits:
    """The limits in force: an unset per-payout ceiling is the currency's maximum amount."""
    if limits is None:
        return EffectiveLimits(per_transaction=max_minor, per_day=None, per_week=None, review_threshold=None)
    return EffectiveLimits(
        per_transaction=limits.per_transaction if limits.per_transaction is not None else max_minor,
        per_day=limits.per_day,
        per_week=limits.per_week,
        review_threshold=limits.review_threshold,
    )


class BlockedBy(enum.Enum):
    """Why payouts in a currency are stopped for a merchant, most general first."""

    PLATFORM = "PLATFORM"
    ACCOUNT_DISABLED = "ACCOUNT_DISABLED"
    CURRENCY_CLOSED = "CURRENCY_CLOSED"

    def message(self, currency: str) -> str:
        """The human message for this block."""
        if self is BlockedBy.PLATFORM:
            return "Payouts are switched off platform-wide."
        if self is BlockedBy.ACCOUNT_DISABLED:
            return "Payouts are disabled for this account."
        return f"Payouts in {currency} are closed."


def blocked_by(settings: Settings, merchant: Merchant, currency: str) -> BlockedBy | None:
    """The first block that applies: the platform switch, then the account, then the currency."""
    if not settings.payouts_enabled:
        return BlockedBy.PLATFORM
    if not merchant.payouts_enabled:
        return BlockedBy.ACCOUNT_DISABLED
    if currency in settings.closed_currencies:
        return BlockedBy.CURRENCY_CLOSED
    return None


def _refuse(name: str, ceiling: int, spent: int | None, currency: Currency) -> PayoutLimitExceededError:
    details: dict[str, Any] = {
        "limit": name,
        "ceiling": to_decimal(ceiling, currency),
        "currency": currency.code,
    }
    if spent is not None:
        details["spent"] = to_decimal(spent, currency)
        details["remaining"] = to_decimal(max(0, ceiling - spent), currency)
    shown = f"{to_decimal(ceiling, currency)} {currency.code}"
    return PayoutLimitExceededError(
        f"This payout is over the {_LABELS[name]} ceiling of {shown}.",
        param="amount",
        details=details,
    )


def check_limits(
    limits: EffectiveLimits,
    amount: int,
    currency: Currency,
    *,
    now: int,
    spent_since: Callable[[int], int],
) -> None:
    """Refuse ``amount`` past a ceiling; ``spent_since(t)`` is what was paid out since ``t``."""
    if limits.per_transaction is not None and amount > limits.per_transaction:
        raise _refuse("perTransaction", limits.per_transaction, None, currency)
    if limits.per_day is not None:
        spent = spent_since(now - DAY_MS)
        if spent + amount > limits.per_day:
            raise _refuse("perDay", limits.per_day, spent, currency)
    if limits.per_week is not None:
        spent = spent_since(now - WEEK_MS)
        if spent + amount > limits.per_week:
            raise _refuse("perWeek", limits.per_week, spent, currency)


def held_for_review(limits: EffectiveLimits, amount: int) -> bool:
    """Whether a new payout waits for an operator: strictly above the review threshold."""
    return limits.review_threshold is not None and amount > limits.review_threshold
