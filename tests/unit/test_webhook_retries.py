"""Webhook delivery retries, Retry-After, auto-disable, reactivation, leases and skipped events.

A core on the memory store with a fake clock, the sandbox network answering at once and a capturing
sender whose answer each test flips. Time only moves when a test advances the clock, so every attempt's
moment (and so its X-Service-Timestamp) is known exactly.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
import pytest

from paymentcore import (
    Config,
    FakeClock,
    PaymentCore,
    SandboxNetwork,
    WebhookSettings,
    WebhookVerificationError,
)
from paymentcore._domain.models import NO_ENDPOINT, DeliveryStatus, Event
from paymentcore._domain.signing import verify_webhook
from paymentcore.ports import DeliveryResult, DeliveryTarget
from paymentcore.testing import CapturedDelivery, CapturingSender, public_resolver

URL = "https://shop.example/webhooks"


class ScriptedSender(CapturingSender):
    """Records like CapturingSender but answers from a script of results (the last one repeats)."""

    def __init__(self, *results: DeliveryResult) -> None:
        super().__init__()
        self.results = list(results)

    def send(
        self, target: DeliveryTarget, headers: Mapping[str, str], body: bytes, timeout: float
    ) -> DeliveryResult:
        super().send(target, headers, body, timeout)
        return self.results.pop(0) if len(self.results) > 1 else self.results[0]


@attrs.define
class Kit:
    core: PaymentCore
    clock: FakeClock
    sender: CapturingSender
    merchant_id: str
    phones: int = 0

    @property
    def deliveries(self) -> list[CapturedDelivery]:
        return self.sender.deliveries

    def register(self, url: str = URL) -> str:
        return self.core.webhooks.register(self.merchant_id, url=url).signing_secret

    def emit(self) -> None:
        """A charge that settles at the next tick, so one collect.succeeded event (a fresh phone number
        each time, so that the per-number prompt limit never interferes)."""
        self.phones += 1
        phone = f"67{self.phones:05d}00"
        self.core.collect.charge(
            self.merchant_id, amount=1000, currency="XAF", country="CM", provider="mtn_cm", phone=phone
        )

    def emit_and_run(self) -> Event:
        """Emit one event, run the background work and return that event as it stands now."""
        known = {e.id for e in self.events()}
        self.emit()
        self.run()
        [event] = [e for e in self.events() if e.id not in known]
        return event

    def event(self, event_id: str) -> Event:
        with self.core.store.read() as tx:
            event = tx.outbox.get(event_id)
        assert event is not None
        return event

    def settle_only(self) -> Event:
        """Settle the open charges without delivering; return the newest pending event."""
        self.core.collect.process_due()
        pending = [e for e in self.events() if e.status is DeliveryStatus.PENDING]
        assert pending
        return pending[-1]

    def run(self) -> None:
        self.core.run_until_idle()

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.run()

    def events(self) -> list[Event]:
        with self.core.store.read() as tx:
            return tx.outbox.list(self.merchant_id)

    def webhook(self) -> WebhookSettings:
        return self.core.webhooks.get(self.merchant_id)

    def now_seconds(self) -> float:
        return self.clock.now() / 1000


def build(sender: CapturingSender, **config: Any) -> Kit:
    clock = FakeClock()
    settings: dict[str, Any] = {"sandbox_delay": 0, "webhook_jitter": 0.0, **config}
    core = PaymentCore.memory(
        clock=clock,
        network=SandboxNetwork(delay_seconds=0),
        sender=sender,
        resolver=public_resolver,
        config=Config(**settings),
    )
    merchant = core.operator.create_merchant("Retry Shop")
    return Kit(core, clock, sender, merchant.id)


@pytest.fixture
def kit() -> Iterator[Kit]:
    """Retries after 5, 60 and 600 seconds."""
    made = build(CapturingSender(), webhook_retry_delays=(5, 60, 600))
    yield made
    made.core.close()


@pytest.fixture
def once() -> Iterator[Kit]:
    """One attempt per event, no retry."""
    made = build(CapturingSender(), webhook_retry_delays=())
    yield made
    made.core.close()


# --- the retry schedule ---------------------------------------------------------------------------


def test_failed_attempts_follow_the_schedule_then_the_event_fails(kit: Kit) -> None:
    secret = kit.register()
    kit.sender.status = 500
    start = kit.clock.now()
    kit.emit()
    kit.run()
    assert len(kit.deliveries) == 1

    attempt_times = [start]
    for delay, count in ((5, 2), (60, 3), (600, 4)):
        kit.advance(delay - 0.001)
        assert len(kit.deliveries) == count - 1, f"attempt {count} came before its {delay} s delay"
        kit.advance(0.001)
        assert len(kit.deliveries) == count
        attempt_times.append(kit.clock.now())
    assert attempt_times == [start, start + 5_000, start + 65_000, start + 665_000]

    kit.advance(86_400 * 30)
    assert len(kit.deliveries) == 4  # no attempt after the last retry
    [event] = kit.events()
    assert event.status is DeliveryStatus.FAILED
    assert event.attempts == 4

    # one event: the same id and body every time; each attempt has its own timestamp and signature
    assert len({d.body for d in kit.deliveries}) == 1
    assert len({d.json()["eventId"] for d in kit.deliveries}) == 1
    assert len({d.headers["X-Service-Signature"] for d in kit.deliveries}) == 4
    for delivery, moment in zip(kit.deliveries, attempt_times, strict=True):
        assert delivery.headers["X-Service-Timestamp"] == str(moment // 1000)
        assert delivery.verify(secret, now=moment / 1000) == moment // 1000
    # the first attempt's headers are stale by the time of the last one
    with pytest.raises(WebhookVerificationError):
        kit.deliveries[0].verify(secret, now=attempt_times[-1] / 1000)


def test_a_2xx_stops_the_retries(kit: Kit) -> None:
    secret = kit.register()
    kit.sender.status = 503
    kit.emit()
    kit.run()
    kit.sender.status = 200
    kit.advance(5)
    assert len(kit.deliveries) == 2
    kit.deliveries[-1].verify(secret, now=kit.now_seconds())
    kit.advance(86_400)
    assert len(kit.deliveries) == 2
    [event] = kit.events()
    assert event.status is DeliveryStatus.DELIVERED
    assert event.attempts == 2


@pytest.mark.parametrize("status", [301, 400, 404, 410, 500])
def test_every_non_2xx_status_counts_as_a_failure(kit: Kit, status: int) -> None:
    kit.register()
    kit.sender.status = status
    kit.emit()
    kit.run()
    kit.advance(5)
    assert len(kit.deliveries) == 2


def test_retry_after_on_429_postpones_the_next_attempt() -> None:
    limited = DeliveryResult(status=429, retry_after=120)
    made = build(ScriptedSender(limited, DeliveryResult(status=200)), webhook_retry_delays=(5, 60, 600))
    try:
        made.register()
        made.emit()
        made.run()
        assert len(made.deliveries) == 1
        made.advance(5)
        made.advance(114.999)
        assert len(made.deliveries) == 1  # the schedule's 5 s is not enough: the receiver asked for 120
        made.advance(0.001)
        assert len(made.deliveries) == 2
        [event] = made.events()
        assert event.status is DeliveryStatus.DELIVERED
    finally:
        made.core.close()


def test_a_short_retry_after_does_not_shorten_the_schedule() -> None:
    made = build(
        ScriptedSender(DeliveryResult(status=503, retry_after=1), DeliveryResult(status=200)),
        webhook_retry_delays=(5, 60, 600),
    )
    try:
        made.register()
        made.emit()
        made.run()
        made.advance(4.999)
        assert len(made.deliveries) == 1
        made.advance(0.001)
        assert len(made.deliveries) == 2
    finally:
        made.core.close()


def test_a_lost_2xx_is_redelivered_with_the_same_event_id_and_a_fresh_signature() -> None:
    # the receiver got the body, but its answer never came back: the sender reports a timeout
    timeout = DeliveryResult(status=None, error="no response within 10 seconds")
    made = build(ScriptedSender(timeout, DeliveryResult(status=200)), webhook_retry_delays=(5, 60, 600))
    try:
        secret = made.register()
        made.emit()
        made.run()
        first_at = made.clock.now()
        made.advance(5)
        second_at = made.clock.now()
        made.advance(3_600)

        first, second = made.deliveries
        assert first.json()["eventId"] == second.json()["eventId"]
        assert first.body == second.body
        assert first.event == second.event == "collect.succeeded"
        assert first.headers["X-Service-Timestamp"] == str(first_at // 1000)
        assert second.headers["X-Service-Timestamp"] == str(second_at // 1000)
        assert first.headers["X-Service-Signature"] != second.headers["X-Service-Signature"]
        first.verify(secret, now=first_at / 1000)
        second.verify(secret, now=second_at / 1000)
        [event] = made.events()
        assert event.status is DeliveryStatus.DELIVERED
    finally:
        made.core.close()


# --- auto-disable and reactivation ----------------------------------------------------------------


def fail_events(kit: Kit, count: int) -> None:
    kit.sender.status = 500
    for _ in range(count):
        kit.emit()
        kit.run()


def test_ten_consecutive_failed_events_disable_the_endpoint(once: Kit) -> None:
    once.register()
    fail_events(once, 9)
    assert once.webhook().is_active is True
    assert once.webhook().disabled_reason is None
    fail_events(once, 1)
    settings = once.webhook()
    assert settings.is_active is False
    assert isinstance(settings.disabled_reason, str) and settings.disabled_reason
    assert len(once.deliveries) == 10

    once.sender.status = 200
    eleventh = once.emit_and_run()
    once.advance(86_400)
    assert len(once.deliveries) == 10  # the 11th event is never attempted
    assert once.event(eleventh.id).status is DeliveryStatus.SKIPPED
    statuses = [e.status for e in once.events() if e.id != eleventh.id]
    assert statuses == [DeliveryStatus.FAILED] * 10


def test_a_success_between_failures_keeps_the_endpoint_active(once: Kit) -> None:
    once.register()
    fail_events(once, 9)
    once.sender.status = 200
    once.emit()
    once.run()
    fail_events(once, 9)
    assert once.webhook().is_active is True
    assert len(once.deliveries) == 19
    fail_events(once, 1)  # ten in a row now
    assert once.webhook().is_active is False


def test_auto_disable_counts_failed_events_not_failed_attempts() -> None:
    made = build(CapturingSender(status=500), webhook_retry_delays=(5,))
    try:
        made.register()
        for _ in range(6):  # 12 failed attempts, 6 failed events
            made.emit()
            made.run()
            made.advance(5)
        assert len(made.deliveries) == 12
        assert made.webhook().is_active is True
        for _ in range(4):
            made.emit()
            made.run()
            made.advance(5)
        assert len(made.deliveries) == 20
        assert made.webhook().is_active is False
    finally:
        made.core.close()


def test_reactivation_restores_delivery_with_the_same_secret(once: Kit) -> None:
    secret = once.register()
    fail_events(once, 10)
    assert once.webhook().is_active is False
    while_disabled = once.emit_and_run()
    assert len(once.deliveries) == 10

    endpoint = once.core.webhooks.reactivate(once.merchant_id)
    assert endpoint.is_active
    settings = once.webhook()
    assert settings.is_active is True
    assert settings.disabled_reason is None
    assert once.core.webhooks.secret_of(once.merchant_id) == secret

    once.sender.status = 200
    new_event = once.emit_and_run()
    assert new_event.status is DeliveryStatus.DELIVERED
    [latest] = [d for d in once.deliveries if d.json()["eventId"] == new_event.id]
    latest.verify(secret, now=once.now_seconds())
    # what was skipped while disabled is not replayed (docs/decisions.md: polling catches up)
    once.advance(86_400)
    assert len(once.deliveries) == 11
    assert all(d.json()["eventId"] != while_disabled.id for d in once.deliveries)


def test_reactivation_resets_the_count_of_consecutive_failures(once: Kit) -> None:
    once.register()
    fail_events(once, 10)
    once.core.webhooks.reactivate(once.merchant_id)
    fail_events(once, 9)
    assert once.webhook().is_active is True
    fail_events(once, 1)
    assert once.webhook().is_active is False


def test_registering_again_clears_auto_disable_and_rotates_the_secret(once: Kit) -> None:
    old = once.register()
    fail_events(once, 10)
    assert once.webhook().is_active is False
    new = once.register()
    assert new != old
    assert once.webhook().is_active is True
    once.sender.status = 200
    once.emit()
    once.run()
    latest = once.deliveries[-1]
    latest.verify(new, now=once.now_seconds())
    with pytest.raises(WebhookVerificationError):
        latest.verify(old, now=once.now_seconds())


# --- skipped events -------------------------------------------------------------------------------


def test_without_an_endpoint_events_are_skipped_and_never_sent(once: Kit) -> None:
    once.emit()
    once.run()
    [event] = once.events()
    assert event.status is DeliveryStatus.SKIPPED
    once.register()
    once.advance(86_400)
    assert once.deliveries == []
    assert once.events()[0].status is DeliveryStatus.SKIPPED


def test_without_an_endpoint_an_event_is_skipped_as_it_is_written_and_no_delivery_round_takes_it(
    once: Kit,
) -> None:
    once.emit()
    once.core.collect.process_due()  # the charge settles: its event is written
    [event] = once.events()
    assert (event.status, event.last_error, event.attempts) == (DeliveryStatus.SKIPPED, NO_ENDPOINT, 0)
    assert once.core.webhooks.process_due() == 0  # nothing due for the deliveries


def test_a_disabled_endpoint_receives_nothing_even_for_events_awaiting_a_retry() -> None:
    made = build(CapturingSender(status=500), webhook_retry_delays=(5,), auto_disable_after=1)
    try:
        made.register()
        made.emit()
        made.emit()
        made.run()  # both events fail their first attempt
        assert len(made.deliveries) == 2
        made.advance(5)  # the first event's second failure disables; the other is not sent again
        assert made.webhook().is_active is False
        assert len(made.deliveries) == 3
        made.advance(86_400)
        assert len(made.deliveries) == 3
        assert sorted(e.status.value for e in made.events()) == ["FAILED", "SKIPPED"]
    finally:
        made.core.close()


# --- leases: two workers ----------------------------------------------------------------------------


class BlockingSender(CapturingSender):
    """Holds the first send until released, so a second worker can try while the first is sending."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def send(
        self, target: DeliveryTarget, headers: Mapping[str, str], body: bytes, timeout: float
    ) -> DeliveryResult:
        self.entered.set()
        assert self.release.wait(5.0)
        return super().send(target, headers, body, timeout)


def test_a_second_worker_does_not_attempt_an_event_another_worker_holds() -> None:
    sender = BlockingSender()
    made = build(sender, webhook_retry_delays=(5, 60, 600))
    try:
        made.register()
        made.emit()
        event = made.settle_only()
        results: list[DeliveryResult | None] = []
        first = threading.Thread(target=lambda: results.append(made.core.webhooks.deliver(event.id)))
        first.start()
        assert sender.entered.wait(5.0)
        second = made.core.webhooks.deliver(event.id)  # while the first worker is sending
        assert second is None
        assert made.core.webhooks.process_due() == 0
        sender.release.set()
        first.join(5.0)
        assert not first.is_alive()
        assert len(results) == 1 and results[0] is not None and results[0].ok
        assert len(sender.deliveries) == 1
        assert made.core.webhooks.deliver(event.id) is None  # delivered: nothing left to attempt
        assert len(sender.deliveries) == 1
    finally:
        sender.release.set()
        made.core.close()


class CrashingOnceSender(CapturingSender):
    """The first send dies with the worker (after the claim, before any result is recorded)."""

    def __init__(self) -> None:
        super().__init__()
        self.crashed = False

    def send(
        self, target: DeliveryTarget, headers: Mapping[str, str], body: bytes, timeout: float
    ) -> DeliveryResult:
        if not self.crashed:
            self.crashed = True
            raise RuntimeError("worker died mid-delivery")
        return super().send(target, headers, body, timeout)


def test_an_abandoned_claim_is_taken_over_when_its_lease_runs_out() -> None:
    sender = CrashingOnceSender()
    made = build(sender, webhook_retry_delays=(5, 60, 600), dispatch_lease_seconds=30)
    try:
        made.register()
        made.emit()
        event = made.settle_only()
        with pytest.raises(RuntimeError):
            made.core.webhooks.deliver(event.id)
        made.clock.advance(29.999)
        assert made.core.webhooks.deliver(event.id) is None
        assert sender.deliveries == []
        made.clock.advance(0.001)
        result = made.core.webhooks.deliver(event.id)
        assert result is not None and result.ok
        assert len(sender.deliveries) == 1
    finally:
        made.core.close()


# --- the URL is checked again before every attempt --------------------------------------------------


def test_a_name_that_now_resolves_privately_is_not_contacted() -> None:
    answers = [["93.184.216.34"]]

    def resolver(host: str, port: int) -> list[str]:
        return answers[-1]

    sender = CapturingSender()
    clock = FakeClock()
    core = PaymentCore.memory(
        clock=clock,
        network=SandboxNetwork(delay_seconds=0),
        sender=sender,
        resolver=resolver,
        config=Config(sandbox_delay=0, webhook_jitter=0.0, webhook_retry_delays=(5,)),
    )
    try:
        merchant = core.operator.create_merchant("Rebinding Shop")
        core.webhooks.register(merchant.id, url=URL)
        answers.append(["10.0.0.5"])
        core.collect.charge(
            merchant.id, amount=1000, currency="XAF", country="CM", provider="mtn_cm", phone="670000000"
        )
        core.run_until_idle()
        clock.advance(5)
        core.run_until_idle()
        assert sender.deliveries == []
        with core.store.read() as tx:
            [event] = tx.outbox.list(merchant.id)
        assert event.status is DeliveryStatus.FAILED
        assert event.attempts == 2
    finally:
        core.close()


def test_headers_name_the_event_and_sign_the_exact_body(once: Kit) -> None:
    secret = once.register()
    once.emit()
    once.run()
    [delivery] = once.deliveries
    assert delivery.event == "collect.succeeded"
    assert delivery.url == URL
    stamp = verify_webhook(secret, delivery.headers, delivery.body, now=once.now_seconds())
    assert stamp == once.clock.now() // 1000
    with pytest.raises(WebhookVerificationError):
        verify_webhook(secret, delivery.headers, delivery.body + b" ", now=once.now_seconds())
