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
from datetime import UTC, datetime
from typing import Any

import attrs

from paymentcore import wire
from paymentcore._deps import Deps, require_merchant
from paymentcore._fields import required_text
from paymentcore._idempotency import Idempotency, check_key, fingerprint
from paymentcore._models import DeliveryStatus, Event, WebhookEndpoint
from paymentcore._queries import event_is_due
from paymentcore._records import WebhookRegistration, WebhookSettings, converter, from_ms
from paymentcore._signing import EVENT_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, signature
from paymentcore._urlsafety import UnsafeUrlError, check_webhook_url
from paymentcore._work import Due, Runner
from paymentcore.errors import InvalidRequestError, NotFoundError
from paymentcore.ports import DeliveryResult, Transaction

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


@attrs.frozen
class _Attempt:
    """A claimed delivery: the event and the endpoint it goes to."""

    event: Event
    endpoint: WebhookEndpoint


class Webhooks:
    def __init__(self, deps: Deps, idempotency: Idempotency) -> None:
        self._deps = deps
        self._idem = idempotency
        self._runner: Runner[_Attempt, DeliveryResult] = Runner(self, deps.store, deps.clock)

    @property
    def runner(self) -> Runner[_Attempt, DeliveryResult]:
        """This service's background work, for the worker (:meth:`PaymentCore.start_worker`)."""
        return self._runner

    # --- registration ----------------------------------------------------------------------------

    def register(
        self,
        merchant_id: str,
        *,
        url: str,
        events: str | None = None,
        legacy: bool = False,
        idempotency_key: str | None = None,
    ) -> WebhookRegistration:
        """Register (or replace) the merchant's endpoint: check the URL, rotate the signing secret.

        ``events`` is "v2" (current event names) or "legacy"; when None, ``legacy`` decides.
        """
        deps = self._deps
        key = check_key(idempotency_key)
        url = required_text(url, "url", max_length=2048)
        if events is not None and events not in ("legacy", "v2"):
            raise InvalidRequestError("events must be 'legacy' or 'v2'.", param="events")
        chosen = events if events is not None else ("legacy" if legacy else "v2")
        try:
            check_webhook_url(url, resolver=deps.resolver, allow_private=deps.config.allow_private_webhooks)
        except UnsafeUrlError as exc:
            raise InvalidRequestError(f"The webhook URL is refused: {exc.reason}", param="url") from None
        print_ = fingerprint("webhook.legacy" if legacy else "webhook", {"url": url, "events": events})
        with deps.store.transaction() as tx:
            now = deps.clock.now()
            kept = self._idem.lookup(tx, merchant_id, key, print_, now)
            if kept is not None:
                return _registration_of(kept)
            require_merchant(tx, merchant_id)
            secret = "whsec_" + secrets.token_hex(32)
            endpoint = WebhookEndpoint(
                merchant_id=merchant_id,
                url=url,
                secret_encrypted=deps.secret_box.encrypt(secret),
                events=chosen,
                is_active=True,
                disabled_reason=None,
                updated_at=now,
            )
            tx.webhooks.put(endpoint)
            answer = WebhookRegistration(
                url=url, signing_secret=secret, is_active=True, updated_at=from_ms(now), events=chosen
            )
            self._idem.save(
                tx, merchant_id, key, print_, converter.unstructure(answer), now, sensitive=True
            )
            return answer

    def get(self, merchant_id: str) -> WebhookSettings:
        """The merchant's endpoint; NotFoundError when none is registered."""
        with self._deps.store.read() as tx:
            endpoint = tx.webhooks.get(merchant_id)
        if endpoint is None:
            raise NotFoundError("No webhook endpoint is registered for this account.")
        return WebhookSettings(
            url=endpoint.url,
            is_active=endpoint.is_active,
            disabled_reason=endpoint.disabled_reason,
            updated_at=from_ms(endpoint.updated_at),
            events=endpoint.events,
        )

    def reactivate(self, merchant_id: str) -> WebhookEndpoint:
        """Operator action: clear auto-disable, keep the secret."""
        with self._deps.store.transaction() as tx:
            endpoint = tx.webhooks.get(merchant_id)
            if endpoint is None:
                raise NotFoundError("No webhook endpoint is registered for this merchant.", param="merchant")
            endpoint = attrs.evolve(endpoint, is_active=True, disabled_reason=None, consecutive_failures=0)
            tx.webhooks.put(endpoint)
            return endpoint

    def secret_of(self, merchant_id: str) -> str:
        """The current signing secret (for the operator's own tooling and tests; never over the API)."""
        with self._deps.store.read() as tx:
            endpoint = tx.webhooks.get(merchant_id)
        if endpoint is None:
            raise NotFoundError("No webhook endpoint is registered for this merchant.")
        return self._deps.secret_box.decrypt(endpoint.secret_encrypted)

    # --- delivery --------------------------------------------------------------------------------

    def process_due(self, limit: int = 50) -> int:
        return self._runner.run_due(limit)

    def deliver(self, event_id: str) -> DeliveryResult | None:
        """One delivery attempt of a due event; None when there was nothing to attempt."""
        return self._runner.run_one(event_id)

    # the Task of paymentcore._work: claim the event, send it, record the attempt

    def due(self, tx: Transaction, now: int, limit: int) -> list[Due]:
        return [Due(key=event.id, lane=event.merchant_id) for event in tx.outbox.due(now, limit)]

    def claim(self, tx: Transaction, key: str, now: int) -> _Attempt | None:
        event = tx.outbox.get(key)
        if event is None or not event_is_due(event, now):
            return None
        endpoint = tx.webhooks.get(event.merchant_id)
        if endpoint is None or not endpoint.is_active:
            skipped = attrs.evolve(event, status=DeliveryStatus.SKIPPED, last_error="no active endpoint")
            tx.outbox.update(skipped)
            return None
        lease = now + self._deps.config.dispatch_lease_seconds * 1000
        tx.outbox.update(attrs.evolve(event, next_attempt_at=lease))
        return _Attempt(event=event, endpoint=endpoint)

    def act(self, claim: _Attempt, now: int) -> DeliveryResult:
        deps = self._deps
        config = deps.config
        event, endpoint = claim.event, claim.endpoint
        name = event_name(event.type, endpoint.events)
        body = wire.dumps(event_body(event, name)).encode()
        try:
            secret = deps.secret_box.decrypt(endpoint.secret_encrypted)
        except Exception:  # the server key changed: the endpoint must be registered again
            return DeliveryResult(status=None, error="signing secret unreadable")
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
            return DeliveryResult(status=None, error=f"refused address: {exc.reason}")
        return deps.webhook_sender().send(target, headers, body, config.webhook_timeout)

    def record(self, tx: Transaction, claim: _Attempt, outcome: DeliveryResult, now: int) -> bool:
        self._record(tx, claim.event.id, claim.endpoint, outcome, now)
        return False

    def _record(
        self, tx: Transaction, event_id: str, endpoint: WebhookEndpoint, result: DeliveryResult, now: int
    ) -> None:
        config = self._deps.config
        event = tx.outbox.get(event_id)
        if event is None or event.status is not DeliveryStatus.PENDING:
            return
        attempts = event.attempts + 1
        current = tx.webhooks.get(event.merchant_id)
        if result.ok:
            tx.outbox.update(
                attrs.evolve(
                    event,
                    status=DeliveryStatus.DELIVERED,
                    attempts=attempts,
                    delivered_at=now,
                    last_error=None,
                )
            )
            if current is not None:
                tx.webhooks.put(attrs.evolve(current, consecutive_failures=0, ever_succeeded=True))
            return
        error = result.error or f"HTTP {result.status}"
        delays = config.webhook_retry_delays
        if attempts <= len(delays):
            delay_ms = int(delays[attempts - 1] * 1000 * (1 + random.random() * config.webhook_jitter))
            if result.retry_after is not None:
                delay_ms = max(delay_ms, result.retry_after * 1000)
            tx.outbox.update(
                attrs.evolve(event, attempts=attempts, next_attempt_at=now + delay_ms, last_error=error)
            )
            return
        tx.outbox.update(
            attrs.evolve(event, status=DeliveryStatus.FAILED, attempts=attempts, last_error=error)
        )
        if current is None or current.url != endpoint.url or not current.is_active:
            return
        failures = current.consecutive_failures + 1
        disabled = failures >= config.auto_disable_after
        tx.webhooks.put(
            attrs.evolve(
                current,
                consecutive_failures=failures,
                is_active=not disabled,
                disabled_reason=DISABLED_REASON.format(n=failures) if disabled else None,
            )
        )


def _registration_of(kept: Any) -> WebhookRegistration:
    """A kept registration answer; one kept by an older version is the API's JSON record."""
    if isinstance(kept, dict) and "signingSecret" in kept:
        updated = kept["updatedAt"]
        moment = datetime.strptime(updated, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        return WebhookRegistration(
            url=kept["url"],
            signing_secret=kept["signingSecret"],
            is_active=kept["isActive"],
            updated_at=moment,
            events=kept["events"],
        )
    return converter.structure(kept, WebhookRegistration)
