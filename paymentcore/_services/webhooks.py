"""Webhook registration and at-least-once, signed delivery from the transactional outbox.

Events are written by the services inside the transaction of the state change they report. The worker
delivers each due event: it claims it (a lease, so two workers never send one attempt twice), checks
the URL again and connects to the checked address, signs the body afresh with the attempt's own
timestamp, and records the outcome. A failed attempt is retried after ``Config.webhook_retry_delays``
(with jitter; a 429/503 Retry-After is honoured when longer). An event whose every attempt failed is a
*failed event*; ``Config.auto_disable_after`` (``DEFAULT_AUTO_DISABLE_AFTER``, 10) consecutive failed
events disable the endpoint.

Every attempt is recorded (``tx.deliveries``) in the transaction that records its outcome. A merchant
can read its events and their attempts, and ask for one more delivery of an event (:meth:`Webhooks.resend`):
the redelivery is queued on the event (``Event.resend_at``) and sent by the same worker, to the endpoint
registered when it is sent, outside the event's retry schedule and without counting toward auto-disable.
"""

from __future__ import annotations

import copy
import random
import secrets
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from types import MappingProxyType
from typing import Any

import attrs

from paymentcore._domain import wire as wire
from paymentcore._domain.commands import RegisterLegacyWebhook, RegisterWebhook, ResendEvent
from paymentcore._domain.errors import InvalidRequestError, NotFoundError
from paymentcore._domain.event_types import COLLECTION_EVENTS, CURRENT_OF, LEGACY_NAMES, UNRENAMED
from paymentcore._domain.fields import required_text
from paymentcore._domain.models import NO_ENDPOINT, Delivery, DeliveryStatus, Event, WebhookEndpoint
from paymentcore._domain.pages import (
    DEFAULT_LIMIT,
    check_cursor,
    check_limit,
    check_member,
    page_of,
    unknown_cursor,
)
from paymentcore._domain.queries import endpoint_listens, event_is_due, event_lane
from paymentcore._domain.records import (
    EventDelivery,
    EventDeliveryStatus,
    EventRecord,
    EventSummary,
    Page,
    WebhookRegistration,
    WebhookSettings,
    converter,
    from_ms,
)
from paymentcore._domain.signing import (
    EVENT_HEADER,
    EVENT_ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    signature,
)
from paymentcore._services import audit as audit
from paymentcore._services.audit import DEFAULT_ACTOR
from paymentcore._services.deps import Deps, require_merchant
from paymentcore._services.idempotency import Answer, Idempotency, check_key
from paymentcore._services.urlsafety import MAX_URL_LENGTH, UnsafeUrlError, check_webhook_url
from paymentcore._services.work import LANE_DEPTH, Due, Runner
from paymentcore.observe import Observer
from paymentcore.ports import DeliveryResult, DeliveryTarget, Transaction

DISABLED_REASON = "Disabled after {n} consecutive failed events."

#: how a stored delivery status shows (an event skipped for want of an active endpoint has failed) ...
_SHOWN = {
    DeliveryStatus.PENDING: EventDeliveryStatus.PENDING,
    DeliveryStatus.DELIVERED: EventDeliveryStatus.DELIVERED,
    DeliveryStatus.FAILED: EventDeliveryStatus.FAILED,
    DeliveryStatus.SKIPPED: EventDeliveryStatus.FAILED,
}
#: ... and the stored statuses a filter on a shown one selects
_STORED = {
    shown: frozenset(stored for stored, as_shown in _SHOWN.items() if as_shown is shown)
    for shown in EventDeliveryStatus
}


def event_name(event_type: str, events: str) -> str:
    return LEGACY_NAMES.get(event_type, event_type) if events == "legacy" else event_type


def _attempt_seen(observer: Observer, *, delivered: bool) -> None:
    observer.delivery_attempt(delivered=delivered)


def event_body(event: Event, name: str) -> dict[str, Any]:
    """The delivered JSON: flat for collections, ``{event, data}`` for payouts; ``eventId`` added."""
    if event.type in COLLECTION_EVENTS:
        return {**event.data, "eventId": event.id}
    return {"event": name, "data": event.data, "eventId": event.id}


def event_reference(event: Event) -> str:
    """The collection (``invoiceReference``) or payout (``reference``) an event is about."""
    return str(event.data.get("invoiceReference", event.data.get("reference", "")))


@attrs.frozen
class _Attempt:
    """A claimed delivery: the event and the endpoint it goes to; ``resend`` for a manual redelivery."""

    event: Event
    endpoint: WebhookEndpoint
    resend: bool = False


@attrs.frozen
class _Sent:
    """What one attempt learnt: the receiver's answer, the name sent, when, and how long the send took."""

    result: DeliveryResult
    name: str
    at: int
    duration_ms: int


#: how many endpoints' decrypted signing secrets a worker keeps (each delivery is signed with one)
KEPT_SECRETS = 1024
#: how many checked delivery targets of webhook URLs whose host is an address a worker keeps
KEPT_TARGETS = 1024


class Webhooks:
    def __init__(self, deps: Deps, idempotency: Idempotency) -> None:
        self._deps = deps
        self._idem = idempotency
        # the signing secrets decrypted for deliveries, by their ciphertext (one key decrypts a
        # ciphertext to the same secret every time; an endpoint registered again has a new one)
        self._secrets: dict[str, str] = {}
        # the delivery targets of URLs whose host is an address, by URL and the private-address rule
        # (nothing to look up: such a URL always gives the same target, or the same refusal)
        self._targets: dict[tuple[str, bool], DeliveryTarget] = {}
        self._runner: Runner[_Attempt, _Sent] = Runner(
            self,
            deps.store,
            deps.clock,
            kind="deliveries",
            lease_ms=deps.config.dispatch_lease_seconds * 1000,
            write=deps.transaction,
            claiming=deps.claiming,
        )

    @property
    def runner(self) -> Runner[_Attempt, _Sent]:
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
        url = required_text(url, "url", max_length=MAX_URL_LENGTH)
        if events is not None and events not in ("legacy", "v2"):
            raise InvalidRequestError("events must be 'legacy' or 'v2'.", param="events")
        chosen = events if events is not None else ("legacy" if legacy else "v2")
        try:
            check_webhook_url(url, resolver=deps.resolver, allow_private=deps.config.allow_private_webhooks)
        except UnsafeUrlError as exc:
            raise InvalidRequestError(f"The webhook URL is refused: {exc.reason}", param="url") from None
        command = (RegisterLegacyWebhook if legacy else RegisterWebhook)(url=url, events=events)

        def body(tx: Transaction, now: int) -> WebhookRegistration:
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
            return WebhookRegistration(
                url=url, signing_secret=secret, is_active=True, updated_at=from_ms(now), events=chosen
            )

        return self._idem.run(deps, merchant_id, key, command, body, _REGISTRATION)

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

    def reactivate(self, merchant_id: str, *, actor: str = DEFAULT_ACTOR) -> WebhookEndpoint:
        """Operator action: clear auto-disable, keep the secret. ``actor`` is who does it (audited)."""
        actor = audit.check_actor(actor)
        with self._deps.transaction(merchant_id) as tx:  # the merchant's unit: no other merchant waits
            before = tx.webhooks.get(merchant_id)
            if before is None:
                raise NotFoundError("No webhook endpoint is registered for this merchant.", param="merchant")
            endpoint = attrs.evolve(before, is_active=True, disabled_reason=None, consecutive_failures=0)
            tx.webhooks.put(endpoint)
            audit.write(
                tx,
                self._deps,
                actor=actor,
                action="webhook.reactivate",
                subject=merchant_id,
                before=audit.webhook_state(before),
                after=audit.webhook_state(endpoint),
            )
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
        """One delivery attempt of a due event (or its queued redelivery); None when there was nothing
        to attempt."""
        sent = self._runner.run_one(event_id)
        return None if sent is None else sent.result

    # --- the merchant's events -------------------------------------------------------------------

    def events(
        self,
        merchant_id: str,
        *,
        limit: int = DEFAULT_LIMIT,
        starting_after: str | None = None,
        type: str | None = None,
        delivery_status: EventDeliveryStatus | None = None,
    ) -> Page[EventSummary]:
        """The events written for the merchant, newest first, ``limit`` (1 to 100) at a time.

        ``type`` keeps one kind of event, named by its current or its legacy name; ``delivery_status``
        keeps the events whose delivery stands there. ``starting_after`` is the id of the previous
        page's last event.
        """
        limit = check_limit(limit)
        after = check_cursor(starting_after)
        event_type = _check_type(type)
        wanted = check_member(delivery_status, EventDeliveryStatus, "delivery_status")
        with self._deps.store.read() as tx:
            endpoint = tx.webhooks.get(merchant_id)
            rows = tx.outbox.page(
                merchant_id,
                limit=limit + 1,
                after=after,
                event_type=event_type,
                statuses=None if wanted is None else _STORED[wanted],
            )
        if rows is None:
            raise unknown_cursor("events")
        return page_of(rows, limit, lambda event: _summary(event, endpoint))

    def event(self, merchant_id: str, event_id: str) -> EventRecord:
        """One of the merchant's events, with its body and every delivery attempt; NotFoundError for an
        unknown id and for another merchant's alike."""
        with self._deps.store.read() as tx:
            event = _own(tx, merchant_id, event_id)
            return _record_of(tx, event, tx.webhooks.get(merchant_id))

    def resend(self, merchant_id: str, event_id: str, *, idempotency_key: str | None = None) -> EventRecord:
        """Queue one more delivery of the event, whatever its status, and answer the event.

        The worker sends it (soon: at its next round) to the endpoint registered then, with the same body,
        ``eventId`` and ``X-Service-Event-Id``, signed afresh; the URL is checked again before it goes.
        It is recorded as a delivery attempt of the event (``resent``), leaves the event's retry schedule
        and the endpoint's failure count alone, and when it succeeds a FAILED event becomes DELIVERED.
        A resend while an earlier one of the event is still queued or under way adds nothing. Refused
        with InvalidRequestError while no endpoint is registered.
        """
        deps = self._deps
        key = check_key(idempotency_key)

        def body(tx: Transaction, now: int) -> EventRecord:
            event = _own(tx, merchant_id, event_id)
            endpoint = tx.webhooks.get(merchant_id)
            if endpoint is None:
                raise InvalidRequestError(
                    "No webhook endpoint is registered for this account: register one to resend events to."
                )
            if event.resend_at is None:
                event = attrs.evolve(event, resend_at=now)
                tx.outbox.update(event)
            return _record_of(tx, event, endpoint)

        return self._idem.run(deps, merchant_id, key, ResendEvent(event=event_id), body, _RESENT)

    # the Task of paymentcore._services.work: claim the event, send it, record the attempt

    def due(self, tx: Transaction, now: int, limit: int) -> list[Due]:
        # a lane per endpoint (one per merchant), listed in turns: an endpoint with 10,000 events due
        # stands no further ahead than one with a single event
        # listed as references (the claims read the events); each event once, at its first place (a
        # retry and a resend may both be due)
        found = {
            ref.key: Due(ref.key, ref.lane, ref.merchant)
            for ref in tx.outbox.due_refs(now, limit, per_lane=LANE_DEPTH)
        }
        for event in tx.outbox.resends_due(now, limit):
            found.setdefault(event.id, Due(key=event.id, lane=event_lane(event), merchant=event.merchant_id))
        return list(found.values())

    def renew(self, tx: Transaction, key: str, held_until: int, until: int) -> bool:
        event = tx.outbox.get(key)
        if event is None:
            return False
        if event.status is DeliveryStatus.PENDING and event.next_attempt_at == held_until:
            tx.outbox.update(attrs.evolve(event, next_attempt_at=until))
            return True
        if event.resend_at == held_until:
            tx.outbox.update(attrs.evolve(event, resend_at=until))
            return True
        return False

    def prefetch(self, tx: Transaction, keys: Sequence[str]) -> None:
        # a batch's events in one statement, then their merchants' endpoints in one: each claim's or
        # outcome's reads read nothing
        events = tx.outbox.get_many(keys)
        tx.webhooks.get_many([event.merchant_id for event in events.values()])

    def claim(self, tx: Transaction, key: str, now: int) -> _Attempt | None:
        event = tx.outbox.get(key)
        if event is None:
            return None
        lease = now + self._deps.config.dispatch_lease_seconds * 1000
        if event_is_due(event, now):
            endpoint = tx.webhooks.get(event.merchant_id)
            if endpoint is None or not endpoint_listens(endpoint):
                skipped = attrs.evolve(event, status=DeliveryStatus.SKIPPED, last_error=NO_ENDPOINT)
                tx.outbox.update(skipped)
                return None
            tx.outbox.update(attrs.evolve(event, next_attempt_at=lease))
            return _Attempt(event=event, endpoint=endpoint)
        if event.resend_at is not None and event.resend_at <= now:  # a redelivery the merchant asked for
            endpoint = tx.webhooks.get(event.merchant_id)
            if endpoint is None:
                tx.outbox.update(attrs.evolve(event, resend_at=None))
                return None
            tx.outbox.update(attrs.evolve(event, resend_at=lease))
            return _Attempt(event=event, endpoint=endpoint, resend=True)
        return None

    def act(self, claim: _Attempt, now: int) -> _Sent | None:
        [sent] = self.act_many([claim], now)
        return sent

    def act_many(self, claims: Sequence[_Attempt], now: int) -> list[_Sent | None]:
        """:meth:`act` for several claimed deliveries (of one endpoint, as a pump's turn holds), sent at
        once by the sender when it can (``send_many``: the requests written, then the answers read)."""
        deps = self._deps
        prepared = [self._prepare(claim, now) for claim in claims]
        ready = [one for one in prepared if not isinstance(one, _Sent)]
        sender = deps.webhook_sender()
        timeout = deps.config.webhook_timeout
        send_many = getattr(sender, "send_many", None)
        answers: list[tuple[DeliveryResult, float]] = []
        if send_many is not None:
            answers = send_many([(target, headers, body) for _, target, headers, body in ready], timeout)
        else:  # a sender of the port's one method
            for _, target, headers, body in ready:
                began = time.perf_counter()
                answers.append((sender.send(target, headers, body, timeout), time.perf_counter() - began))
        results = iter(answers)
        out: list[_Sent | None] = []
        for one in prepared:
            if isinstance(one, _Sent):
                sent = one
            else:
                result, seconds = next(results)
                sent = _Sent(result, one[0], now, round(seconds * 1000))
            if not sent.result.attempted:
                out.append(None)  # the request never left: no attempt to record; the event is due again
                continue
            deps.observe(partial(_attempt_seen, delivered=sent.result.ok))
            out.append(sent)
        return out

    def _prepare(
        self, claim: _Attempt, now: int
    ) -> tuple[str, DeliveryTarget, dict[str, str], bytes] | _Sent:
        """The delivery's request (the event's name, where to, the signed headers, the body), or what
        came of it without a request (a secret or an address refused)."""
        deps = self._deps
        config = deps.config
        event, endpoint = claim.event, claim.endpoint
        name = event_name(event.type, endpoint.events)
        body = wire.dumps(event_body(event, name)).encode()
        secret = self._secrets.get(endpoint.secret_encrypted)
        if secret is None:
            try:
                secret = deps.secret_box.decrypt(endpoint.secret_encrypted)
            except Exception:  # the server key changed: the endpoint must be registered again
                return _Sent(DeliveryResult(status=None, error="signing secret unreadable"), name, now, 0)
            if len(self._secrets) >= KEPT_SECRETS:
                self._secrets.clear()  # rare (a thousand endpoints in turn): start again, no ages kept
            self._secrets[endpoint.secret_encrypted] = secret
        timestamp = now // 1000
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: signature(secret, timestamp, body),
            TIMESTAMP_HEADER: str(timestamp),
            EVENT_HEADER: name,
            EVENT_ID_HEADER: event.id,
            "User-Agent": "paymentcore-webhooks/1",
        }
        try:
            target = self._target(endpoint.url, config.allow_private_webhooks)
        except UnsafeUrlError as exc:
            return _Sent(DeliveryResult(status=None, error=f"refused address: {exc.reason}"), name, now, 0)
        return name, target, headers, body

    def _target(self, url: str, allow_private: bool) -> DeliveryTarget:
        """Where a delivery to ``url`` goes (:func:`check_webhook_url`). A host name is resolved and
        checked afresh for every delivery; the target of a URL whose host is an address is kept."""
        kept = self._targets.get((url, allow_private))
        if kept is not None:
            return kept
        named = False

        def resolve(host: str, port: int) -> list[str]:
            nonlocal named
            named = True
            return self._deps.resolver(host, port)

        target = check_webhook_url(url, resolver=resolve, allow_private=allow_private)
        if not named:
            if len(self._targets) >= KEPT_TARGETS:
                self._targets.clear()
            self._targets[(url, allow_private)] = target
        return target

    def record(self, tx: Transaction, claim: _Attempt, outcome: _Sent, now: int) -> bool:
        result = outcome.result
        tx.deliveries.add(
            Delivery(
                id=self._deps.refs.token("dlv"),
                event_id=claim.event.id,
                at=outcome.at,
                name=outcome.name,
                response_status=result.status,
                error=None if result.ok else _error_of(result),
                duration_ms=max(0, outcome.duration_ms),
                resent=claim.resend,
            )
        )
        if claim.resend:
            self._record_resend(tx, claim.event.id, outcome, now)
        else:
            self._record(tx, claim.event.id, claim.endpoint, outcome, now)
        return False

    @staticmethod
    def _record_resend(tx: Transaction, event_id: str, outcome: _Sent, now: int) -> None:
        """A manual redelivery: counted and named on the event, nothing else of its schedule touched."""
        event = tx.outbox.get(event_id)
        if event is None:
            return
        done = attrs.evolve(event, redeliveries=event.redeliveries + 1, sent_as=outcome.name, resend_at=None)
        if outcome.result.ok and event.status in (DeliveryStatus.FAILED, DeliveryStatus.SKIPPED):
            done = attrs.evolve(done, status=DeliveryStatus.DELIVERED, delivered_at=now, last_error=None)
        tx.outbox.update(done)

    def _record(
        self, tx: Transaction, event_id: str, endpoint: WebhookEndpoint, outcome: _Sent, now: int
    ) -> None:
        config = self._deps.config
        result = outcome.result
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
                    sent_as=outcome.name,
                )
            )
            if current is not None and (current.consecutive_failures or not current.ever_succeeded):
                tx.webhooks.put(attrs.evolve(current, consecutive_failures=0, ever_succeeded=True))
            return
        error = _error_of(result)
        delays = config.webhook_retry_delays
        if attempts <= len(delays):
            delay_ms = int(delays[attempts - 1] * 1000 * (1 + random.random() * config.webhook_jitter))
            if result.retry_after is not None:
                delay_ms = max(delay_ms, result.retry_after * 1000)
            tx.outbox.update(
                attrs.evolve(
                    event,
                    attempts=attempts,
                    next_attempt_at=now + delay_ms,
                    last_error=error,
                    sent_as=outcome.name,
                )
            )
            if result.status is None:
                # no answer at all (a timeout, a refused connection): the endpoint's circuit opens, its
                # other events wait for this one's next attempt, which probes it (no attempt of theirs
                # is made, or counted, while it is down)
                tx.outbox.defer(event.merchant_id, now + delay_ms)
            return
        tx.outbox.update(
            attrs.evolve(
                event, status=DeliveryStatus.FAILED, attempts=attempts, last_error=error, sent_as=outcome.name
            )
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


def _error_of(result: DeliveryResult) -> str:
    return result.error or f"HTTP {result.status}"


def _check_type(value: object) -> str | None:
    """An event-type filter: a current or a legacy event name, as the current name."""
    if value is None:
        return None
    if isinstance(value, str):
        if value in LEGACY_NAMES or value in UNRENAMED:
            return value
        if value in CURRENT_OF:
            return CURRENT_OF[value]
    names = ", ".join([*LEGACY_NAMES, *UNRENAMED])
    raise InvalidRequestError(f"type must be an event name ({names}) or its legacy name.", param="type")


def _own(tx: Transaction, merchant_id: str, event_id: object) -> Event:
    """The merchant's event ``event_id``; another merchant's answers as an unknown one does."""
    event = tx.outbox.get(event_id) if isinstance(event_id, str) and event_id else None
    if event is None or event.merchant_id != merchant_id:
        raise NotFoundError("No such event on this account.")
    return event


def _name_of(event: Event, endpoint: WebhookEndpoint | None) -> str:
    """The name as delivered: the latest attempt's, or what the endpoint registered now would get."""
    if event.sent_as is not None:
        return event.sent_as
    return event_name(event.type, endpoint.events if endpoint is not None else "v2")


def _summary(event: Event, endpoint: WebhookEndpoint | None) -> EventSummary:
    return EventSummary(
        id=event.id,
        type=event.type,
        name=_name_of(event, endpoint),
        reference=event_reference(event),
        created_at=from_ms(event.created_at),
        delivery_status=_SHOWN[event.status],
        attempts=event.attempts + event.redeliveries,
    )


def _record_of(tx: Transaction, event: Event, endpoint: WebhookEndpoint | None) -> EventRecord:
    summary = _summary(event, endpoint)
    deliveries = tuple(
        EventDelivery(
            at=from_ms(attempt.at),
            response_status=attempt.response_status,
            error=attempt.error,
            duration_ms=attempt.duration_ms,
            resent=attempt.resent,
        )
        for attempt in tx.deliveries.list(event.id)
    )
    return EventRecord(
        id=summary.id,
        type=summary.type,
        name=summary.name,
        reference=summary.reference,
        created_at=summary.created_at,
        delivery_status=summary.delivery_status,
        attempts=summary.attempts,
        payload=MappingProxyType(copy.deepcopy(event_body(event, summary.name))),
        deliveries=deliveries,
    )


def _dump_record(record: EventRecord) -> dict[str, Any]:
    """An event record as plain data, for an idempotent answer (the payload kept as the JSON it is)."""
    return {
        "type": "event",
        "record": converter.unstructure(attrs.evolve(record, payload={})),
        "payload": dict(record.payload),
    }


def _load_record(kept: Mapping[str, Any]) -> EventRecord:
    """The record :func:`_dump_record` kept (its fingerprint names the resend operation)."""
    record = converter.structure(kept["record"], EventRecord)
    return attrs.evolve(record, payload=MappingProxyType(dict(kept["payload"])))


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


#: how a registration's answer is kept with its key (encrypted: it holds the signing secret) ...
_REGISTRATION = Answer[WebhookRegistration](
    converter.unstructure, lambda tx, kept, now: _registration_of(kept), sensitive=True
)
#: ... and a resend's
_RESENT = Answer[EventRecord](_dump_record, lambda tx, kept, now: _load_record(kept))
