"""The webhook events: their types (:class:`EventType`), the legacy names, and the receiver's parser
(defined in ``paymentcore._domain.event_types`` and ``paymentcore._domain.events``)."""

from paymentcore._domain.event_types import (
    BATCH_EVENTS,
    COLLECTION_EVENTS,
    CURRENT_OF,
    LEGACY_NAMES,
    PAYOUT_EVENTS,
    UNRENAMED,
    EventType,
)
from paymentcore._domain.events import WebhookEvent, construct_event

__all__ = [
    "BATCH_EVENTS",
    "COLLECTION_EVENTS",
    "CURRENT_OF",
    "LEGACY_NAMES",
    "PAYOUT_EVENTS",
    "UNRENAMED",
    "EventType",
    "WebhookEvent",
    "construct_event",
]
