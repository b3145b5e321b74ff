"""The forms of the references and ids the core makes: a collection's ``REQ-...``, a payout's ``PO-...``,
an event's ``evt_...`` and a bulk request's ``bat_...`` (defined in ``paymentcore._domain.references``;
the reference generator and the OpenAPI document's patterns are built from these)."""

from paymentcore._domain.references import (
    BATCH_ID_PREFIX,
    COLLECTION_REFERENCE_PREFIX,
    EVENT_ID_PREFIX,
    PAYOUT_REFERENCE_PREFIX,
)

__all__ = [
    "BATCH_ID_PREFIX",
    "COLLECTION_REFERENCE_PREFIX",
    "EVENT_ID_PREFIX",
    "PAYOUT_REFERENCE_PREFIX",
]
