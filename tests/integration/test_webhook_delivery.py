"""Webhook deliveries to a real HTTP receiver on loopback, through the real httpx sender.

Every delivery the receiver gets is checked with ``paymentcore.verify_webhook`` over the raw body bytes
as they arrived (and once more with an HMAC computed here, independently of the package), so a body
re-serialised between signing and sending, a wrong header or a stale timestamp fails these tests.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

import attrs
import pytest

from paymentcore import (
    Config,
    FakeClock,
    PaymentCore,
    PayoutStatus,
    SandboxNetwork,
    WebhookVerificationError,
    verify_webhook,
)
from paymentcore.adapters.http_sender import HttpWebhookSender
from paymentcore.testing import fund

COLLECT_FIELDS = {
    "invoiceReference",
    "status",
    "amount",
    "currency",
    "settledAmount",
    "settledCurrency",
    "requestedAmount",
    "requestedCurrency",
    "paymentMethod",
    "providerCode",
    "failureReason",
    "timestamp",
    "eventId",
}
PAYOUT_DATA_FIELDS = {
    "reference",
    "status",
    "amount",
    "currency",
    "phone",
    "recipientName",
    "merchantReference",
    "providerReference",
    "statusReason",
}
LEGACY = {
    "collect.succeeded": "payment.succeeded",
    "collect.failed": "payment.failed",
    "disburse.sent": "payout.sent",
    "disburse.succeeded": "payout.paid",
    "disburse.failed": "payout.failed",
}
PAYING = "670000000"  # collection succeeds; payout SENT then PAID
DECLINING = "670000011"  # collection FAILED (PAYER_DECLINED)
REFUSED = "670000021"  # payout refused by the network: FAILED


# --- the receiver ---------------------------------------------------------------------------------


class Received(NamedTuple):
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def event(self) -> str:
        return self.headers["x-service-event"]

    def json(self) -> Any:
        return json.loads(self.body)


class Receiver(ThreadingHTTPServer):
    """Records every POST (headers and raw body) and answers ``status``."""

    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ReceiverHandler)
        self.received: list[Received] = []
        self.status = 200
        self._lock = threading.Lock()

    def url(self, path: str = "/hooks") -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"

    def record(self, item: Received) -> int:
        with self._lock:
            self.received.append(item)
            return self.status

    def names(self) -> list[str]:
        with self._lock:
            return [item.event for item in self.received]


class ReceiverHandler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet test output

    def do_POST(self) -> None:
        server = self.server
        assert isinstance(server, Receiver)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in self.headers.items()}
        status = server.record(Received(self.path, headers, body))
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5.0)


# --- the core -------------------------------------------------------------------------------------


@attrs.define
class Shop:
    core: PaymentCore
    clock: FakeClock
    receiver: Receiver
    merchant_id: str

    def register(self, url: str | None = None, *, events: str | None = None, legacy: bool = False) -> str:
        """Register the receiver (at ``url``, by default its /hooks); the new signing secret."""
        registration = self.core.webhooks.register(
            self.merchant_id,
            url=url if url is not None else self.receiver.url(),
            events=events,
            legacy=legacy,
        )
        assert registration.is_active
        return registration.signing_secret

    def charge(self, phone: str, amount: int = 5000, *, merchant_reference: str | None = None) -> str:
        return self.core.collect.charge(
            self.merchant_id,
            amount=amount,
            currency="XAF",
            country="CM",
            provider="mtn_cm",
            phone=phone,
            merchant_reference=merchant_reference,
        ).reference

    def payout(
        self,
        phone: str,
        key: str,
        amount: int = 5000,
        *,
        recipient_name: str | None = None,
        merchant_reference: str | None = None,
    ) -> str:
        payout = self.core.disburse.create(
            self.merchant_id,
            amount=amount,
            currency="XAF",
            phone=phone,
            idempotency_key=key,
            recipient_name=recipient_name,
            merchant_reference=merchant_reference,
        )
        assert payout.status is PayoutStatus.PENDING, payout
        return payout.reference

    def run(self) -> None:
        self.core.run_until_idle()


@pytest.fixture
def shop(receiver: Receiver) -> Iterator[Shop]:
    clock = FakeClock(int(time.time() * 1000))
    config = Config(
        sandbox_delay=0,
        webhook_jitter=0.0,
        webhook_retry_delays=(),
        allow_private_webhooks=True,
        webhook_timeout=5.0,
    )
    core = PaymentCore.memory(
        clock=clock,
        network=SandboxNetwork(delay_seconds=0),
        sender=HttpWebhookSender(),
        config=config,
    )
    try:
        merchant = core.operator.create_merchant("Loopback Shop", settlement_currency="XAF")
        fund(core, merchant.id, "XAF", 100000)
        yield Shop(core, clock, receiver, merchant.id)
    finally:
        core.close()


# --- checks ---------------------------------------------------------------------------------------


def own_hmac(secret: str, timestamp: str, body: bytes) -> str:
    """The signature computed here from the spec, without the package's signing code."""
    return "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def verified(item: Received, secret: str) -> Any:
    """Check one delivery as a receiver would and return its parsed body."""
    stamp = verify_webhook(secret, item.headers, item.body)
    assert item.headers["x-service-timestamp"] == str(stamp)
    assert abs(time.time() - stamp) < 60
    assert item.headers["x-service-signature"] == own_hmac(secret, str(stamp), item.body)
    assert item.headers["content-type"] == "application/json"
    body = item.json()
    assert isinstance(body, dict)
    assert isinstance(body["eventId"], str) and body["eventId"]
    return body


def one(shop: Shop, name: str) -> Received:
    matches = [item for item in shop.receiver.received if item.event == name]
    assert len(matches) == 1, shop.receiver.names()
    return matches[0]


def assert_payout_event(item: Received, secret: str, name: str, status: str) -> dict[str, Any]:
    body = verified(item, secret)
    assert set(body) == {"event", "data", "eventId"}
    assert body["event"] == name
    data: dict[str, Any] = body["data"]
    assert set(data) == PAYOUT_DATA_FIELDS
    assert data["status"] == status
    return data


# --- collection events ----------------------------------------------------------------------------


def test_collect_succeeded_is_flat_signed_and_carries_exact_numbers(shop: Shop) -> None:
    shop.core.operator.set_collect_fee(shop.merchant_id, 2)
    secret = shop.register()
    reference = shop.charge(PAYING, merchant_reference="order-1")
    shop.run()

    item = one(shop, "collect.succeeded")
    assert shop.receiver.names() == ["collect.succeeded"]
    assert item.path == "/hooks"
    body = verified(item, secret)
    assert set(body) == COLLECT_FIELDS
    assert body["invoiceReference"] == reference
    assert body["status"] == "SUCCESS"
    assert (body["amount"], body["currency"]) == (5000, "XAF")
    assert (body["settledAmount"], body["settledCurrency"]) == (4900, "XAF")
    assert (body["requestedAmount"], body["requestedCurrency"]) == (5000, "XAF")
    assert body["paymentMethod"] == "MOBILE_MONEY"
    assert body["providerCode"] == "mtn_cm"
    assert body["failureReason"] is None
    assert isinstance(body["timestamp"], str) and body["timestamp"].endswith("Z")
    assert body["eventId"].startswith("evt")
    # amounts are JSON numbers on the wire, not strings
    text = item.body.decode()
    assert '"amount":5000' in text
    assert '"settledAmount":4900' in text
    assert '"requestedAmount":5000' in text
    # the net amount is what GET /v1/collect/{reference} answers
    assert shop.core.collect.get(shop.merchant_id, reference).amount == body["settledAmount"]


def test_collect_failed_is_delivered_with_its_reason(shop: Shop) -> None:
    secret = shop.register()
    reference = shop.charge(DECLINING, amount=2500)
    shop.run()

    item = one(shop, "collect.failed")
    assert shop.receiver.names() == ["collect.failed"]
    body = verified(item, secret)
    assert set(body) == COLLECT_FIELDS
    assert body["invoiceReference"] == reference
    assert body["status"] == "FAILED"
    assert (body["amount"], body["currency"]) == (2500, "XAF")
    assert (body["requestedAmount"], body["requestedCurrency"]) == (2500, "XAF")
    assert body["settledAmount"] == 0
    assert body["settledCurrency"] == "XAF"
    assert body["providerCode"] == "mtn_cm"
    assert body["paymentMethod"] == "MOBILE_MONEY"
    assert isinstance(body["failureReason"], str) and body["failureReason"]
    assert '"amount":2500' in item.body.decode()


def test_a_tampered_body_or_wrong_secret_does_not_verify(shop: Shop) -> None:
    secret = shop.register()
    shop.charge(PAYING)
    shop.run()
    item = one(shop, "collect.succeeded")
    verified(item, secret)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(secret, item.headers, item.body.replace(b"5000", b"9000"))
    with pytest.raises(WebhookVerificationError):
        verify_webhook("whsec_" + "0" * 64, item.headers, item.body)
    with pytest.raises(WebhookVerificationError):  # replayed later than the 300 s tolerance
        verify_webhook(secret, item.headers, item.body, now=time.time() + 301)


# --- disbursement events --------------------------------------------------------------------------


def test_payout_sends_disburse_sent_then_disburse_succeeded(shop: Shop) -> None:
    secret = shop.register()
    reference = shop.payout(PAYING, "po-1", recipient_name="Ada Lovelace", merchant_reference="pay-1")
    shop.run()

    assert sorted(shop.receiver.names()) == ["disburse.sent", "disburse.succeeded"]
    sent = assert_payout_event(one(shop, "disburse.sent"), secret, "disburse.sent", "SENT")
    paid = assert_payout_event(one(shop, "disburse.succeeded"), secret, "disburse.succeeded", "PAID")
    for data in (sent, paid):
        assert data["reference"] == reference
        assert (data["amount"], data["currency"]) == (5000, "XAF")
        assert data["phone"] == PAYING
        assert data["recipientName"] == "Ada Lovelace"
        assert data["merchantReference"] == "pay-1"
        assert isinstance(data["providerReference"], str) and data["providerReference"]
    assert paid["providerReference"] == sent["providerReference"]
    assert '"amount":5000' in one(shop, "disburse.sent").body.decode()
    ids = {item.json()["eventId"] for item in shop.receiver.received}
    assert len(ids) == 2


def test_payout_refused_by_the_network_sends_disburse_failed(shop: Shop) -> None:
    secret = shop.register()
    reference = shop.payout(REFUSED, "po-refused", amount=3000)
    shop.run()

    assert shop.receiver.names() == ["disburse.failed"]
    data = assert_payout_event(one(shop, "disburse.failed"), secret, "disburse.failed", "FAILED")
    assert data["reference"] == reference
    assert (data["amount"], data["currency"]) == (3000, "XAF")
    assert data["phone"] == REFUSED
    assert isinstance(data["statusReason"], str) and data["statusReason"]
    assert '"amount":3000' in one(shop, "disburse.failed").body.decode()


def test_payout_declined_in_review_sends_disburse_failed_rejected(shop: Shop) -> None:
    shop.core.operator.set_limits(shop.merchant_id, "XAF", review_threshold=1000)
    secret = shop.register()
    reference = shop.payout(PAYING, "po-review", amount=4000)
    shop.run()
    assert shop.receiver.received == []  # held: nothing happened yet

    shop.core.disburse.reject(reference)
    shop.run()
    assert shop.receiver.names() == ["disburse.failed"]
    data = assert_payout_event(one(shop, "disburse.failed"), secret, "disburse.failed", "REJECTED")
    assert data["reference"] == reference
    assert data["amount"] == 4000
    assert isinstance(data["statusReason"], str) and data["statusReason"]


# --- legacy names and the switch to v2 --------------------------------------------------------------


def produce_all_five(shop: Shop, tag: str) -> None:
    """One event of every kind: collection success and failure, payout sent+paid, payout refused."""
    shop.charge(PAYING)
    shop.charge(DECLINING)
    shop.payout(PAYING, f"{tag}-paid")
    shop.payout(REFUSED, f"{tag}-refused")
    shop.run()


def test_legacy_endpoint_receives_the_legacy_names_with_the_same_bodies(shop: Shop) -> None:
    secret = shop.register(shop.receiver.url("/legacy"), legacy=True)
    assert shop.core.webhooks.get(shop.merchant_id).events == "legacy"
    produce_all_five(shop, "legacy")

    assert sorted(shop.receiver.names()) == sorted(LEGACY.values())
    for item in shop.receiver.received:
        assert item.path == "/legacy"
        body = verified(item, secret)
        if item.event.startswith("payment."):
            assert set(body) == COLLECT_FIELDS
            assert body["status"] == ("SUCCESS" if item.event == "payment.succeeded" else "FAILED")
        else:
            assert set(body) == {"event", "data", "eventId"}
            assert body["event"] == item.event  # the legacy name inside the body as well
            assert set(body["data"]) == PAYOUT_DATA_FIELDS
    statuses = {
        item.event: item.json()["data"]["status"]
        for item in shop.receiver.received
        if item.event.startswith("payout.")
    }
    assert statuses == {"payout.sent": "SENT", "payout.paid": "PAID", "payout.failed": "FAILED"}


def test_events_legacy_in_the_body_also_selects_legacy_names(shop: Shop) -> None:
    secret = shop.register(events="legacy")
    shop.charge(PAYING)
    shop.run()
    assert shop.receiver.names() == ["payment.succeeded"]
    verified(shop.receiver.received[0], secret)


def test_reregistering_with_v2_switches_names_and_secret_at_once(shop: Shop) -> None:
    old_secret = shop.register(legacy=True)
    shop.charge(PAYING)
    shop.run()
    assert shop.receiver.names() == ["payment.succeeded"]
    verified(shop.receiver.received[0], old_secret)

    # an event already in the outbox when the endpoint switches goes out under the new name and secret
    shop.charge(PAYING)
    shop.core.collect.process_due()
    assert len(shop.receiver.received) == 1
    new_secret = shop.register(events="v2")
    assert new_secret != old_secret
    assert shop.core.webhooks.get(shop.merchant_id).events == "v2"
    shop.run()
    produce_all_five(shop, "v2")

    after = shop.receiver.received[1:]
    assert sorted(item.event for item in after) == sorted(
        ["collect.succeeded", *LEGACY]  # the pending one plus one of each kind
    )
    for item in after:
        body = verified(item, new_secret)
        with pytest.raises(WebhookVerificationError):
            verify_webhook(old_secret, item.headers, item.body)
        if item.event.startswith("disburse."):
            assert body["event"] == item.event
    assert not any(name in LEGACY.values() for name in shop.receiver.names()[1:])


# --- failures over real HTTP ------------------------------------------------------------------------


def test_a_non_2xx_answer_is_retried_with_the_same_event_id(receiver: Receiver) -> None:
    clock = FakeClock(int(time.time() * 1000))
    config = Config(
        sandbox_delay=0, webhook_jitter=0.0, webhook_retry_delays=(5,), allow_private_webhooks=True
    )
    core = PaymentCore.memory(
        clock=clock, network=SandboxNetwork(delay_seconds=0), sender=HttpWebhookSender(), config=config
    )
    try:
        merchant = core.operator.create_merchant("Retry Shop")
        secret = core.webhooks.register(merchant.id, url=receiver.url()).signing_secret
        receiver.status = 500
        core.collect.charge(
            merchant.id, amount=1000, currency="XAF", country="CM", provider="mtn_cm", phone=PAYING
        )
        core.run_until_idle()
        assert receiver.names() == ["collect.succeeded"]

        clock.advance(4)
        core.run_until_idle()
        assert len(receiver.received) == 1  # not before the 5 s delay

        receiver.status = 204
        clock.advance(1)
        core.run_until_idle()
        first, second = receiver.received
        assert first.json()["eventId"] == second.json()["eventId"]
        assert int(second.headers["x-service-timestamp"]) == int(first.headers["x-service-timestamp"]) + 5
        verify_webhook(secret, first.headers, first.body, now=clock.now() / 1000)
        verify_webhook(secret, second.headers, second.body, now=clock.now() / 1000)

        clock.advance(3600)
        core.run_until_idle()
        assert len(receiver.received) == 2  # delivered: no further attempt
    finally:
        core.close()


def test_a_named_endpoint_is_resolved_at_every_delivery_and_an_address_checked_once(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delivery to a host name asks the resolver again (an answer that changed is followed, and
    checked, at once), while a URL whose host is an address always gives the same target: the worker
    checks it once, not at every delivery."""
    asked: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    checked: list[str] = []
    from paymentcore._services.urlsafety import check_webhook_url as check

    def counted(url: str, **kwargs: Any) -> Any:
        checked.append(url)
        return check(url, **kwargs)

    monkeypatch.setattr("paymentcore._services.webhooks.check_webhook_url", counted)
    config = Config(sandbox_delay=0, webhook_jitter=0.0, allow_private_webhooks=True)
    core = PaymentCore.memory(
        network=SandboxNetwork(delay_seconds=0), sender=HttpWebhookSender(), config=config, resolver=resolver
    )
    try:
        port = receiver.server_address[1]
        named = core.operator.create_merchant("Named Shop")
        literal = core.operator.create_merchant("Address Shop")
        for merchant, url in (
            (named, f"http://hooks.test:{port}/named"),
            (literal, receiver.url("/literal")),
        ):
            fund(core, merchant.id, "XAF", 10_000)
            core.webhooks.register(merchant.id, url=url)
            for n in range(2):
                core.disburse.create(
                    merchant.id,
                    amount=100,
                    currency="XAF",
                    phone=PAYING,
                    idempotency_key=f"{merchant.id}-{n}",
                )
        asked.clear()
        checked.clear()
        core.run_until_idle()
        paths = [item.path for item in receiver.received]
        assert sorted(paths) == ["/literal"] * 4 + ["/named"] * 4  # sent and succeeded, twice each
        assert asked == ["hooks.test"] * 4
        assert checked.count(receiver.url("/literal")) == 1
    finally:
        core.close()
