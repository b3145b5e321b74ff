"""The outbox's event types and the names legacy webhook endpoints receive them by.

:class:`EventType` is the one list of the events the core writes; the maps below are derived from it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "BATCH_EVENTS",
    "COLLECTION_EVENTS",
    "CURRENT_OF",
    "LEGACY_NAMES",
    "PAYOUT_EVENTS",
    "UNRENAMED",
    "EventType",
]


class EventType(enum.StrEnum):
    """An event the core writes to its outbox and delivers to the merchant's webhook endpoint.

    A ``str``: ``EventType.DISBURSE_SUCCEEDED == "disburse.succeeded"``, and it is stored and sent as
    that text. :attr:`legacy_name` is the name an endpoint registered with ``events="legacy"`` gets.
    """

    COLLECT_SUCCEEDED = "collect.succeeded"
    COLLECT_FAILED = "collect.failed"
    DISBURSE_SENT = "disburse.sent"
    DISBURSE_SUCCEEDED = "disburse.succeeded"
    DISBURSE_FAILED = "disburse.failed"
    #: every accepted item of a bulk payout request is final (an extension; no legacy name)
    DISBURSE_BULK_COMPLETED = "disburse.bulk.completed"

    @property
    def legacy_name(self) -> str:
        """The name a legacy endpoint receives: the pre-rename name, or this one when it came after."""
        return _LEGACY.get(self, self.value)


# the names before the rename; an event type missing here came after it and has one name
_LEGACY: Mapping[EventType, str] = MappingProxyType(
    {
        EventType.COLLECT_SUCCEEDED: "payment.succeeded",
        EventType.COLLECT_FAILED: "payment.failed",
        EventType.DISBURSE_SENT: "payout.sent",
        EventType.DISBURSE_SUCCEEDED: "payout.paid",
        EventType.DISBURSE_FAILED: "payout.failed",
    }
)

#: the events of a collection, of a payout and of a bulk payout request (by the record they carry)
COLLECTION_EVENTS = (EventType.COLLECT_SUCCEEDED, EventType.COLLECT_FAILED)
PAYOUT_EVENTS = (EventType.DISBURSE_SENT, EventType.DISBURSE_SUCCEEDED, EventType.DISBURSE_FAILED)
BATCH_EVENTS = (EventType.DISBURSE_BULK_COMPLETED,)

#: current name -> the name an endpoint registered with ``events: "legacy"`` receives (plain strings)
LEGACY_NAMES: dict[str, str] = {t.value: name for t, name in _LEGACY.items()}
CURRENT_OF: dict[str, str] = {legacy: current for current, legacy in LEGACY_NAMES.items()}
#: events that came after the rename: one name, delivered as is to every endpoint
UNRENAMED: tuple[str, ...] = tuple(t.value for t in EventType if t not in _LEGACY)
