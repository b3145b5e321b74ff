"""What every service needs, wired once by the composition root (``paymentcore._root.core``)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import attrs

from paymentcore._domain.catalogue import Catalogue
from paymentcore._domain.event_types import EventType
from paymentcore._domain.models import Event, Merchant
from paymentcore._domain.references import EVENT_ID_KIND
from paymentcore.config import Config
from paymentcore.observe import Observer
from paymentcore.ports import (
    Clock,
    GlancingStore,
    Network,
    PartitionedStore,
    References,
    Resolver,
    SecretBox,
    SkippingStore,
    Store,
    Transaction,
    WebhookSender,
)

_log = logging.getLogger("paymentcore")

T = TypeVar("T")


@attrs.define
class Deps:
    store: Store
    clock: Clock
    refs: References
    network: Network
    catalogue: Catalogue
    config: Config
    secret_box: SecretBox
    resolver: Resolver
    sender: WebhookSender | None = None
    #: makes the sender on first use when none was given (the root's makes the httpx one, so httpx is
    #: not loaded before a webhook is sent)
    make_sender: Callable[[], WebhookSender] | None = None
    observer: Observer = attrs.field(factory=Observer)
    _told: threading.local = attrs.field(factory=threading.local, init=False, repr=False)

    @contextlib.contextmanager
    def transaction(
        self, merchant_id: str | None = None, *, merchants: Sequence[str] = ()
    ) -> Iterator[Transaction]:
        """``store.transaction()``, and what :meth:`tell` is given inside reaches the observer once it
        has committed (nothing when it rolls back). With ``merchant_id`` (or ``merchants``: a worker's
        batch), on a store partitioned by merchant (``ports.PartitionedStore``), a transaction that
        waits only for those merchants' writers."""
        with self._telling(self._open(merchant_id, merchants)) as tx:
            yield tx

    @contextlib.contextmanager
    def claiming(self, merchants: Sequence[str]) -> Iterator[Transaction]:
        """A worker's claim of a batch of ``merchants``' items, told like :meth:`transaction`: on a store
        whose claims can pass over the items others hold (``ports.SkippingStore``), a write transaction
        that takes no merchant's partition and skips the rows another unit holds; elsewhere
        :meth:`transaction` on those merchants."""
        skipping = self._skipping()
        if skipping is not None and merchants:
            with self._telling(skipping.transaction_for_claims()) as tx:
                yield tx
            return
        with self.transaction(merchants=merchants) as tx:
            yield tx

    def apart(self) -> AbstractContextManager[Transaction]:
        """A write transaction of rows that belong to no merchant and move no money: housekeeping's
        sweep (expired idempotency answers, dead workers' leases, which no unit needs any more) and the
        console's operators, sessions and their audit entries. On a store whose claims take no
        merchant's partition (``ports.SkippingStore``), that unit, which makes no merchant's writer
        wait and waits for none (the whole store's lock is taken only shared; a row it changes is
        locked on its own); elsewhere ``store.transaction()``. With the whole store's lock taken
        exclusively, such a unit waited for every merchant's unit in flight, and every merchant's next
        unit queued behind it: one merchant's long unit, and a console page or a failed sign-in beside
        it, stopped every merchant's writes."""
        skipping = self._skipping()
        return self.store.transaction() if skipping is None else skipping.transaction_for_claims()

    def _skipping(self) -> SkippingStore | None:
        """The store, when it is partitioned by merchant and its claims' unit takes no partition."""
        if self.partitioned and hasattr(self.store, "transaction_for_claims"):
            skipping: SkippingStore = self.store  # type: ignore[assignment]
            return skipping
        return None

    def glance(self) -> AbstractContextManager[Transaction]:
        """A read of independent facts: ``store.glance()`` on a store that offers it
        (``ports.GlancingStore``), its read view elsewhere."""
        if hasattr(self.store, "glance"):
            glancing: GlancingStore = self.store  # type: ignore[assignment]
            return glancing.glance()
        return self.store.read()

    @contextlib.contextmanager
    def _telling(self, opened: AbstractContextManager[T]) -> Iterator[T]:
        stack: list[list[Callable[[Observer], None]]] = self._told.__dict__.setdefault("stack", [])
        notes: list[Callable[[Observer], None]] = []
        stack.append(notes)
        try:
            with opened as tx:
                yield tx
        finally:
            stack.pop()
        for note in notes:
            try:
                note(self.observer)
            except Exception:  # an observer never breaks the work it watches
                _log.exception("the observer failed")

    @property
    def partitioned(self) -> bool:
        """Whether the store's writers of different merchants need not wait for each other
        (``ports.PartitionedStore``)."""
        return hasattr(self.store, "transaction_for")

    def _open(self, merchant_id: str | None, merchants: Sequence[str]) -> AbstractContextManager[Transaction]:
        if self.partitioned:
            partitioned: PartitionedStore = self.store  # type: ignore[assignment]
            if len(merchants) > 1 and hasattr(partitioned, "transaction_for_many"):
                return partitioned.transaction_for_many(merchants)
            if len(merchants) == 1:
                return partitioned.transaction_for(merchants[0])
            if merchant_id is not None and not merchants:
                return partitioned.transaction_for(merchant_id)
        return self.store.transaction()

    def tell(self, note: Callable[[Observer], None]) -> None:
        """Inside :meth:`transaction`: call ``note(observer)`` once that transaction has committed."""
        stack: list[list[Callable[[Observer], None]]] | None = getattr(self._told, "stack", None)
        if not stack:
            raise RuntimeError("Deps.tell outside Deps.transaction: the change would be told uncommitted")
        stack[-1].append(note)

    def observe(self, note: Callable[[Observer], None]) -> None:
        """Call ``note(observer)`` now (for what is not a database change: a delivery attempt)."""
        try:
            note(self.observer)
        except Exception:
            _log.exception("the observer failed")

    def webhook_sender(self) -> WebhookSender:
        """The configured sender, or the one ``make_sender`` makes on first use."""
        if self.sender is None:
            if self.make_sender is None:
                raise RuntimeError("no webhook sender was given, and none to make")
            self.sender = self.make_sender()
        return self.sender

    def emit(
        self, tx: Transaction, merchant_id: str, event_type: EventType, data: dict[str, Any], now: int
    ) -> Event:
        """Write an outbox event inside the caller's transaction, delivered later by the worker, or
        skipped at once when the merchant has no active webhook endpoint (``Outbox.add_to_deliver``)."""
        event = Event(
            id=self.refs.token(EVENT_ID_KIND),
            merchant_id=merchant_id,
            type=event_type.value,  # stored as plain text
            data=data,
            created_at=now,
            next_attempt_at=now,
        )
        tx.outbox.add_to_deliver(event)
        return event


def require_merchant(tx: Transaction, merchant_id: str) -> Merchant:
    from paymentcore._domain.errors import NotFoundError

    merchant = tx.merchants.get(merchant_id)
    if merchant is None:
        raise NotFoundError(f"No merchant {merchant_id}.", param="merchant")
    return merchant
