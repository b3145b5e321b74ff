"""The outbox's event types and the names legacy webhook endpoints receive them by."""

from __future__ import annotations

__all__ = ["CURRENT_OF", "LEGACY_NAMES", "UNRENAMED"]

#: current name -> the name an endpoint registered with ``events: "legacy"`` receives
LEGACY_NAMES = {
    "collect.succeeded": "payment.succeeded",
    "collect.failed": "payment.failed",
    "disburse.sent": "payout.sent",
    "disburse.succeeded": "payout.paid",
    "disburse.failed": "payout.failed",
}
CURRENT_OF = {legacy: current for current, legacy in LEGACY_NAMES.items()}
#: events that came after the rename: one name, delivered as is to every endpoint
UNRENAMED = ("disburse.bulk.completed",)
