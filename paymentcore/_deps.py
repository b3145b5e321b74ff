"""What every service needs, wired once by the composition root (``paymentcore._bootstrap``)."""

from __future__ import annotations

from typing import Any

import attrs

from paymentcore._models import Event, Merchant
from paymentcore.catalogue import Catalogue
from paymentcore.config import Config
from paymentcore.ports import (
    Clock,
    Network,
    References,
    Resolver,
    SecretBox,
    Store,
    Transaction,
    WebhookSender,
)


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

    def webhook_sender(self) -> WebhookSender:
        """The configured sender; the httpx one is made on first use (httpx is not loaded before)."""
        if self.sender is None:
            from paymentcore.adapters.httpx_sender import HttpxWebhookSender

            self.sender = HttpxWebhookSender()
        return self.sender

    def emit(
        self, tx: Transaction, merchant_id: str, event_type: str, data: dict[str, Any], now: int
    ) -> Event:
        """Write an outbox event inside the caller's transaction (delivered later by the worker)."""
        event = Event(
            id=self.refs.token("evt"),
            merchant_id=merchant_id,
            type=event_type,
            data=data,
            created_at=now,
            next_attempt_at=now,
        )
        tx.outbox.add(event)
        return event


def require_merchant(tx: Transaction, merchant_id: str) -> Merchant:
    from paymentcore.errors import NotFoundError

    merchant = tx.merchants.get(merchant_id)
    if merchant is None:
        raise NotFoundError(f"No merchant {merchant_id}.", param="merchant")
    return merchant
