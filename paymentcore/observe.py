"""Watching a core at work: an :class:`Observer` that the core tells what happened.

``paymentcore`` records no metrics itself and imports no metrics library. Give a core an observer
(``PaymentCore(..., observer=...)``, also through ``PaymentCore.memory``/``PaymentCore.sqlite``) and it
calls it:

- ``collection_status(status)`` each time a collection reaches a status (created PENDING, PROCESSING
  once the prompt is out, SUCCESS, FAILED);
- ``payout_status(status)`` each time a payout reaches a status (created PENDING, SENT, PAID, FAILED,
  REJECTED); a payout resolved as "no money moved" stays FAILED and is not told again;
- ``delivery_attempt(delivered=...)`` after each webhook delivery attempt: ``True`` for a 2xx answer,
  ``False`` for anything else (another status, a timeout, a refused address), retries included.

A status change is told only after the write transaction that made it has committed, so a rolled-back
change is never counted; it is told by the process that made it, from the thread that made it. An
observer must be quick and thread-safe; whatever it raises is logged and ignored. Calls carry no
merchant id, reference, phone number or amount, so nothing an observer exports can leak one.

How much background work is waiting and how much is being worked on, in every process sharing the
store, is read from the store itself: :meth:`PaymentCore.work_backlog`.
"""

from __future__ import annotations

import attrs

from paymentcore._domain.models import CollectionStatus, PayoutStatus

__all__ = ["WORK_KINDS", "Observer", "WorkBacklog"]

#: The kinds of background work, as :meth:`PaymentCore.work_backlog` names them.
WORK_KINDS: tuple[str, ...] = ("collections", "payouts", "deliveries")


class Observer:
    """Does nothing: subclass it and override the calls you want (new calls may be added later)."""

    def collection_status(self, status: CollectionStatus) -> None:
        """A collection reached ``status`` (its write has committed)."""

    def payout_status(self, status: PayoutStatus) -> None:
        """A payout reached ``status`` (its write has committed)."""

    def delivery_attempt(self, *, delivered: bool) -> None:
        """A webhook delivery attempt ended: ``delivered`` for a 2xx answer, else it failed."""


@attrs.frozen
class WorkBacklog:
    """One kind of background work, as the store shows it now, for every process sharing it.

    ``pending``: items whose turn has come and that no worker holds. ``in_flight``: items a worker holds
    under a lease that has not run out (being worked on, or held by a worker that died until the lease
    runs out). A collection being checked on (not only prompted) may be counted in both.
    ``oldest_pending_seconds``: how long the pending item that has waited longest has been due (its
    turn came that long ago and no worker has taken it since), 0 when nothing is pending.
    """

    kind: str
    pending: int
    in_flight: int
    oldest_pending_seconds: float = 0.0
