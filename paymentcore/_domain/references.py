"""The forms of the references and ids the core makes, written once: the reference generator
(``paymentcore.adapters.clock.RandomReferences``) builds them from these, the services name the kinds of
id they ask for, and the server's OpenAPI document states the patterns through the public
``paymentcore.references``.

A collection's reference is ``REQ-<milliseconds>-<suffix>`` and a payout's ``PO-<milliseconds>-<suffix>``;
any other id is ``<kind>_<suffix>`` (``References.token(kind)``), such as an event's ``evt_...`` or a bulk
request's ``bat_...``.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BATCH_ID_KIND",
    "BATCH_ID_PREFIX",
    "COLLECTION_REFERENCE_PREFIX",
    "EVENT_ID_KIND",
    "EVENT_ID_PREFIX",
    "PAYOUT_REFERENCE_PREFIX",
    "TOKEN_SEPARATOR",
]

COLLECTION_REFERENCE_PREFIX: Final = "REQ-"
PAYOUT_REFERENCE_PREFIX: Final = "PO-"

#: between an id's kind and its random part: ``References.token(kind)`` is ``<kind>_<suffix>``
TOKEN_SEPARATOR: Final = "_"
EVENT_ID_KIND: Final = "evt"
BATCH_ID_KIND: Final = "bat"
#: how an event's id starts
EVENT_ID_PREFIX: Final = EVENT_ID_KIND + TOKEN_SEPARATOR
#: how a bulk payout request's id starts
BATCH_ID_PREFIX: Final = BATCH_ID_KIND + TOKEN_SEPARATOR
