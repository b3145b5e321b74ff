"""Webhook registration and at-least-once, signed delivery from the transactional outbox.

Events are written by the services inside the transaction of the state change they report. The worker
delivers each due event: it claims it (a lease, so two workers never send one attempt twice), checks
the URL again and connects to the checked address, signs the body afresh with the attempt's own
timestamp, and records the outcome. A failed attempt is retried after ``Config.webhook_retry_delays``
(with jitter; a 429/503 Retry-After is honoured when longer). An event whose every attempt failed is a
*failed event*; ``Config.auto_disable_after`` (10) consecutive failed events disable the endpoint.
"""

from __future__ import annotations

import random
import secrets
from typing import Any

import attrs

from paymentcore import render, wire
from paymentcore.deps import Deps, require_merchant
from paymentcore.errors import InvalidRequestError, NotFoundError
from paymentcore.fields import require_object, required_string
from paymentcore.idempotency import Idempotency, Reply, fingerprint
from paymentcore.models import DeliveryStatus, Event, WebhookEndpoint
from paymentcore.ports import DeliveryResult
from paymentcore.signing import EVENT_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, signature
from paymentcore.urlsafety import UnsafeUrlError, check_webhook_url

LEGACY_NAMES = {
    "collect.succeeded": "payment.succeeded",
    "collect.failed": "payment.failed",
    "disburse.sent": "payout.sent",
    "disburse.succeeded": "payout.paid",
    "disburse.failed": "payout.failed",
}
DISABLED_REASON = "Disabled after {n} consecutive failed events."


def event_name(event_type: str, events: str) -> str:
    return LEGACY_NAMES.get(event_type, event_type) if events == "legacy" else event_type


def event_body(event: Event, name: str) -> dict[str, Any]:
    """The delivered JSON: flat for collections, ``{event, data}`` for payouts; ``eventId`` added."""
    if event.type.startswith("collect."):
        return {**event.data, "eventId": event.id}
    return {"event": name, "data": event.data, "eventId": event.id}


class Webhooks:
    def __init__(self, deps: Deps, idempotency: Idempotency) -> None:
        self._deps = deps
        self._idem = idempotency

    # --- registration ----------------------------------------------------------------------------

    def register(
        self,
        merchant_id: str,
        body: object,
        *,
        legacy: bool = False,
        idempotency_key: str | None = None,
    ) -> Reply:
        """PUT/POST /v1/webhook (or legacy POST /v1/webhooks): check the URL, rotate the secret."""
        deps = self._deps
        data = require_object(body)
        url = required_string(data, "url", max_length=2048)
        events_field = data.get("events")
        if events_field is not None and events_field not in ("legacy", "v2"):
            raise InvalidRequestError("events must be 'legacy' or 'v2'.", param="events")
        # an explicit choice wins; otherwise the path decides (CONTRACT §4)
        events = events_field if events_field is not None else ("legacy" if legacy else "v2")
        try:
            check_webhook_url(url, resolver=deps.resolver, allow_private=deps.config.allow_private_webhooks)
        except UnsafeUrlError as exc:
            raise InvalidRequestError(f"The webhook URL is refused: {exc.reason}", param="url") from None
        print_ = fingerprint("webhook.legacy" if legacy else "webhook", data)
        with deps.store.transaction() as tx:
            now = deps.clock.now()
            replay = self._idem.lookup(tx, merchant_id, idempotency_key, print_, now)
            if replay is not None:
                return replay
            require_merchant(tx, merchant_id)
            secret = "whsec_" + secrets.token_hex(32)
            endpoint = WebhookEndpoint(
                merchant_id=merchant_id,
                url=url,
                secret_encrypted=deps.secret_box.encrypt(secret),
                events=events,
                is_active=True,
                disabled_reason=None,
                updated_at=now,
            )
            tx.put_webhook(endpoint)
            reply = Reply(
                200,
                {
                    "url": url,
                    "signingSecret": secret,
                    "isActive": True,
                    "updatedAt": render.iso(now),
                    "events": events,
                },
            )
            self._idem.save(tx, merchant_id, idempotency_key, print_, reply, now, sensitive=True)
            return reply

    def get(self, merchant_id: str) -> dict[str, Any]:
        with self._deps.store.read() as tx:
            endpoint = tx.get_webhook(merchant_id)
        if endpoint is None:
            raise NotFoundError("No webhook endpoint is registered for this account.")
        return self.record(endpoint)

    @staticmethod
    def record(endpoint: WebhookEndpoint) -> dict[str, Any]:
        return {
            "url": endpoint.url,
            "isActive": endpoint.is_active,
            "disabledReason": endpoint.disabled_reason,
            "updatedAt": render.iso(endpoint.updated_at),
            "events": endpoint.events,
        }

    def reactivate(self, merchant_id: str) -> WebhookEndpoint:
        """Operator action: clear auto-disable, keep the secret."""
        with self._deps.store.transaction() as tx:
            endpoint = tx.get_webhook(merchant_id)
            if endpoint is None:
                raise NotFoundError("No webhook endpoint is registered for this merchant.", param="merchant")
            endpoint = attrs.evolve(endpoint, is_active=True, disabled_reason=None, consecutive_failures=0)
            tx.put_webhook(endpoint)
            return endpoint

    def secret_of(self, merchant_id: str) -> str:
        """The current signing secret (for the operator's own tooling and tests; never over the API)."""
        with self._deps.store.read() as tx:
            endpoint = tx.get_webhook(merchant_id)
        if endpoint is None:
            raise NotFoundError("No webhook endpoint is registered for this merchant.")
        return self._deps.secret_box.decrypt(endpoint.secret_encrypted)

    # --- delivery --------------------------------------------------------------------------------

    def process_due(self, limit: int = 50) -> int:
        now = self._deps.clock.now()
        with self._deps.store.read() as tx:
            due = tx.due_events(now, limit)
        for event in due:
            self.deliver(event.id)
        return len(due)

    def deliver(self, event_id: str) -> DeliveryResult | None:
        """One delivery attempt of a due event; None when there was nothing to attempt."""
        deps = self._deps
        config = deps.config
        with deps.store.transaction() as tx:
            event = tx.get_event(event_id)
            now = deps.clock.now()
            if event is None or event.status is not DeliveryStatus.PENDING or event.next_attempt_at > now:
                return None
            endpoint = tx.get_webhook(event.merchant_id)
            if endpoint is None or not endpoint.is_active:
                tx.update_event(
                    attrs.evolve(event, status=DeliveryStatus.SKIPPED, last_error="no active endpoint")
                )
                return None
            tx.update_event(attrs.evolve(event, next_attempt_at=now + config.dispatch_lease_seconds * 1000))
        name = event_name(event.type, endpoint.events)
        body = wire.dumps(event_body(event, name)).encode()
        try:
            secret = deps.secret_box.decrypt(endpoint.secret_encrypted)
        except Exception:  # the server key changed: the endpoint must be registered again
            self._record(event.id, endpoint, DeliveryResult(status=None, error="signing secret unreadable"))
            return None
        timestamp = now // 1000
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: signature(secret, timestamp, body),
            TIMESTAMP_HEADER: str(timestamp),
            EVENT_HEADER: name,
            "User-Agent": "paymentcore-webhooks/1",
        }
        try:
            target = check_webhook_url(
                endpoint.url, resolver=deps.resolver, allow_private=config.allow_private_webhooks
            )
        except UnsafeUrlError as exc:
            result = DeliveryResult(status=None, error=f"refused address: {exc.reason}")
        else:
            result = deps.webhook_sender().send(target, headers, body, config.webhook_timeout)
        self._record(event.id, endpoint, result)
        return result

    def _record(self, event_id: str, endpoint: WebhookEndpoint, result: DeliveryResult) -> None:
        deps = self._deps
        config = deps.config
        with deps.store.transaction() as tx:
            event = tx.get_event(event_id)
            if event is None or event.status is not DeliveryStatus.PENDING:
                return
            now = deps.clock.now()
            attempts = event.attempts + 1
            current = tx.get_webhook(event.merchant_id)
            if result.ok:
                tx.update_event(
                    attrs.evolve(
                        event,
                        status=DeliveryStatus.DELIVERED,
                        attempts=attempts,
                        delivered_at=now,
                        last_error=None,
                    )
                )
                if current is not None:
                    tx.put_webhook(attrs.evolve(current, consecutive_failures=0, ever_succeeded=True))
                return
            error = result.error or f"HTTP {result.status}"
            delays = config.webhook_retry_delays
            if attempts <= len(delays):
                delay_ms = int(delays[attempts - 1] * 1000 * (1 + random.random() * config.webhook_jitter))
                if result.retry_after is not None:
                    delay_ms = max(delay_ms, result.retry_after * 1000)
                tx.update_event(
                    attrs.evolve(event, attempts=attempts, next_attempt_at=now + delay_ms, last_error=error)
                )
                return
            tx.update_event(
                attrs.evolve(event, status=DeliveryStatus.FAILED, attempts=attempts, last_error=error)
            )
            if current is None or current.url != endpoint.url or not current.is_active:
                return
            failures = current.consecutive_failures + 1
            disabled = failures >= config.auto_disable_after
            tx.put_webhook(
                attrs.evolve(
                    current,
                    consecutive_failures=failures,
                    is_active=not disabled,
                    disabled_reason=DISABLED_REASON.format(n=failures) if disabled else None,
                )
            )
