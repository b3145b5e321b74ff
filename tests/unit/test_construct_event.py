"""construct_event: verify a delivery, then one typed WebhookEvent for every event shape and name.

The events come from a real core (``paymentcore.testing.TestKit``: memory store, manual network,
captured deliveries), registered for the current names and for the legacy ones. The kit's deliveries are
checked with a plain ``construct_event(secret, headers, body)``: no clock is passed anywhere unless a
test says so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import attrs
import pytest

from paymentcore._domain.events import WebhookEvent, construct_event
from paymentcore._domain.signing import (
    EVENT_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    WebhookVerificationError,
    signature,
    verify_webhook,
)
from paymentcore.ports import DeliveryTarget
from paymentcore.testing import RESTAMP_AFTER, CapturedDelivery, CapturingSender, TestKit

LEGACY = {
    "collect.succeeded": "payment.succeeded",
    "collect.failed": "payment.failed",
    "disburse.sent": "payout.sent",
    "disburse.succeeded": "payout.paid",
    "disburse.failed": "payout.failed",
}
PHONE = "670000000"
SECRET = "whsec_" + "ab" * 32


# --- a real core ----------------------------------------------------------------------------------


@attrs.define
class Shop:
    kit: TestKit
    merchant_id: str
    secret: str
    legacy: bool

    def name(self, current: str) -> str:
        """The name this shop's endpoint receives for the event ``current``."""
        return LEGACY[current] if self.legacy else current

    def charge(self, amount: int = 5000) -> str:
        collection = self.kit.core.collect.charge(
            self.merchant_id, amount=amount, currency="XAF", country="CM", provider="mtn_cm", phone=PHONE
        )
        self.kit.settle()  # the prompt reaches the manual network, which has not answered yet
        return collection.reference

    def payout(self, amount: int, key: str) -> str:
        payout = self.kit.core.disburse.create(
            self.merchant_id,
            amount=amount,
            currency="XAF",
            phone="690000000",
            idempotency_key=key,
            recipient_name="A. Seller",
            merchant_reference=f"ref-{key}",
        )
        return payout.reference

    def delivered(self, current: str) -> CapturedDelivery:
        matches = [d for d in self.kit.deliveries if d.event == self.name(current)]
        assert len(matches) == 1, [d.event for d in self.kit.deliveries]
        return matches[0]

    def event(self, current: str) -> WebhookEvent:
        """The one delivery of ``current`` (by its delivered name), through a plain construct_event."""
        delivery = self.delivered(current)
        return construct_event(self.secret, delivery.headers, delivery.body)


@pytest.fixture
def kit() -> Iterator[TestKit]:
    kit = TestKit.create()
    try:
        yield kit
    finally:
        kit.core.close()


def make_shop(kit: TestKit, *, legacy: bool) -> Shop:
    merchant = kit.merchant("Event Shop")
    registration = kit.core.webhooks.register(merchant.id, url="https://shop.example/hooks", legacy=legacy)
    assert registration.events == ("legacy" if legacy else "v2")
    kit.fund(merchant.id, "XAF", 100_000)
    return Shop(kit, merchant.id, registration.signing_secret, legacy)


@pytest.fixture(params=[False, True], ids=["v2", "legacy"])
def shop(request: pytest.FixtureRequest, kit: TestKit) -> Shop:
    legacy: bool = request.param
    return make_shop(kit, legacy=legacy)


def body_of(delivery: CapturedDelivery) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(delivery.body, parse_float=Decimal)
    return parsed


def check_common(shop: Shop, event: WebhookEvent, current: str, status: str) -> None:
    delivery = shop.delivered(current)
    assert event.type == current
    assert event.name == shop.name(current) == delivery.event
    assert event.status == status
    assert event.id is not None and event.id == body_of(delivery)["eventId"]
    assert event.timestamp == datetime.fromtimestamp(int(delivery.headers[TIMESTAMP_HEADER]), tz=UTC)
    assert event.timestamp.tzinfo is UTC
    assert event.currency == "XAF"
    assert isinstance(event.amount, Decimal)


# --- every event, current and legacy names ----------------------------------------------------------


def test_collect_succeeded(shop: Shop) -> None:
    shop.kit.core.operator.set_collect_fee(shop.merchant_id, 2)
    reference = shop.charge(5000)
    shop.kit.network.complete(reference)
    shop.kit.settle()

    event = shop.event("collect.succeeded")
    check_common(shop, event, "collect.succeeded", "SUCCESS")
    assert event.reference == reference
    assert event.is_collection and not event.is_payout
    assert event.amount == Decimal(5000)
    # the flat body minus eventId, every number a Decimal
    assert "eventId" not in event.data and "event" not in event.data
    assert event.data["invoiceReference"] == reference
    assert event.data["settledAmount"] == Decimal(4900)
    assert isinstance(event.data["settledAmount"], Decimal)
    assert event.data["providerCode"] == "mtn_cm"
    assert event.data["failureReason"] is None
    assert not any(isinstance(value, float) for value in event.data.values())


def test_collect_failed(shop: Shop) -> None:
    reference = shop.charge(2500)
    shop.kit.network.fail(reference, "PAYER_DECLINED")
    shop.kit.settle()

    event = shop.event("collect.failed")
    check_common(shop, event, "collect.failed", "FAILED")
    assert event.reference == reference
    assert event.is_collection
    assert event.amount == Decimal(2500)
    assert event.data["settledAmount"] == Decimal(0)
    assert isinstance(event.data["failureReason"], str) and event.data["failureReason"]


def test_disburse_sent_then_succeeded(shop: Shop) -> None:
    reference = shop.payout(3000, "po-paid")
    shop.kit.settle()  # dispatched: the network accepted it
    sent = shop.event("disburse.sent")
    shop.kit.network.complete(reference)
    shop.kit.settle()
    paid = shop.event("disburse.succeeded")

    check_common(shop, sent, "disburse.sent", "SENT")
    check_common(shop, paid, "disburse.succeeded", "PAID")
    for event in (sent, paid):
        assert event.reference == reference
        assert event.is_payout and not event.is_collection
        assert event.amount == Decimal(3000)
        assert event.data["recipientName"] == "A. Seller"
        assert event.data["merchantReference"] == "ref-po-paid"
        assert event.data["providerReference"] == "TEST-" + reference
        assert "event" not in event.data and "eventId" not in event.data
    assert sent.id != paid.id


def test_disburse_failed_refused_by_the_network(shop: Shop) -> None:
    reference = shop.payout(1200, "po-refused")
    shop.kit.network.refuse(reference)
    shop.kit.settle()

    event = shop.event("disburse.failed")
    check_common(shop, event, "disburse.failed", "FAILED")
    assert event.reference == reference
    assert event.amount == Decimal(1200)
    assert isinstance(event.data["statusReason"], str) and event.data["statusReason"]


def test_disburse_failed_rejected_in_review(shop: Shop) -> None:
    shop.kit.core.operator.set_limits(shop.merchant_id, "XAF", review_threshold=1000)
    reference = shop.payout(4000, "po-review")
    shop.kit.settle()
    assert shop.kit.deliveries == []  # held for review: nothing sent
    shop.kit.core.disburse.reject(reference)
    shop.kit.settle()

    event = shop.event("disburse.failed")
    check_common(shop, event, "disburse.failed", "REJECTED")
    assert event.reference == reference
    assert event.amount == Decimal(4000)


def test_every_name_is_seen_once_per_registration(shop: Shop) -> None:
    """All five events from one core; every one constructs, and ``type`` is the current name."""
    collected = shop.charge()
    declined = shop.charge()
    shop.kit.network.complete(collected)
    shop.kit.network.fail(declined)
    paid = shop.payout(1000, "all-paid")
    refused = shop.payout(1000, "all-refused")
    shop.kit.network.refuse(refused)
    shop.kit.settle()
    shop.kit.network.complete(paid)
    shop.kit.settle()

    names = sorted(d.event for d in shop.kit.deliveries)
    assert names == sorted(shop.name(current) for current in LEGACY)
    types = sorted(construct_event(shop.secret, d.headers, d.body).type for d in shop.kit.deliveries)
    assert types == sorted(LEGACY)


def test_a_payout_event_without_the_event_header_uses_the_body_name(shop: Shop) -> None:
    reference = shop.payout(1000, "no-header")
    shop.kit.settle()
    delivery = shop.delivered("disburse.sent")
    headers = {key: value for key, value in delivery.headers.items() if key != EVENT_HEADER}
    event = construct_event(shop.secret, headers, delivery.body)
    assert (event.type, event.name, event.reference) == (
        "disburse.sent",
        shop.name("disburse.sent"),
        reference,
    )


# --- refused deliveries -------------------------------------------------------------------------------


@pytest.fixture
def success(kit: TestKit) -> tuple[Shop, CapturedDelivery]:
    shop = make_shop(kit, legacy=False)
    reference = shop.charge(5000)
    kit.network.complete(reference)
    kit.settle()
    return shop, shop.delivered("collect.succeeded")


def test_tampered_body_wrong_secret_and_stale_timestamp_are_refused(
    success: tuple[Shop, CapturedDelivery],
) -> None:
    shop, delivery = success
    construct_event(shop.secret, delivery.headers, delivery.body)  # the genuine one passes
    tampered = delivery.body.replace(b'"amount":5000', b'"amount":9000')
    assert tampered != delivery.body
    with pytest.raises(WebhookVerificationError, match="signature"):
        construct_event(shop.secret, delivery.headers, tampered)
    with pytest.raises(WebhookVerificationError, match="signature"):
        construct_event("whsec_" + "0" * 64, delivery.headers, delivery.body)
    stamp = int(delivery.headers[TIMESTAMP_HEADER])
    for now in (stamp + 301, stamp - 301):  # replayed later, or from the future
        with pytest.raises(WebhookVerificationError, match="tolerance"):
            construct_event(shop.secret, delivery.headers, delivery.body, now=now)
    with pytest.raises(WebhookVerificationError, match="tolerance"):
        construct_event(shop.secret, delivery.headers, delivery.body, now=stamp + 61, tolerance=60)
    construct_event(shop.secret, delivery.headers, delivery.body, now=stamp + 300)
    missing = {key: value for key, value in delivery.headers.items() if key != SIGNATURE_HEADER}
    with pytest.raises(WebhookVerificationError, match="missing"):
        construct_event(shop.secret, missing, delivery.body)


def test_an_event_header_that_contradicts_the_signed_body_is_refused(kit: TestKit) -> None:
    """X-Service-Event is not signed: a failed payment relabelled collect.succeeded must not pass."""
    shop = make_shop(kit, legacy=False)
    reference = shop.charge(5000)
    kit.network.fail(reference)
    payout = shop.payout(1000, "relabel")
    kit.settle()
    failed, sent = shop.delivered("collect.failed"), shop.delivered("disburse.sent")
    assert verify_webhook(shop.secret, failed.headers, failed.body)  # the signature itself is fine
    for forged_name in ("collect.succeeded", "payment.succeeded"):
        with pytest.raises(WebhookVerificationError, match="disagrees"):
            construct_event(shop.secret, {**failed.headers, EVENT_HEADER: forged_name}, failed.body)
    with pytest.raises(WebhookVerificationError, match="disagrees"):  # the body says disburse.sent
        construct_event(shop.secret, {**sent.headers, EVENT_HEADER: "disburse.succeeded"}, sent.body)
    with pytest.raises(WebhookVerificationError, match="disagrees"):  # a payout body under a collect name
        construct_event(shop.secret, {**sent.headers, EVENT_HEADER: "collect.succeeded"}, sent.body)
    with pytest.raises(WebhookVerificationError, match="wrapper"):  # a collection body under a payout name
        construct_event(shop.secret, {**failed.headers, EVENT_HEADER: "disburse.failed"}, failed.body)
    assert construct_event(shop.secret, sent.headers, sent.body).reference == payout


# --- hand-signed bodies ---------------------------------------------------------------------------------


def signed(body: bytes, name: str | None = None, *, stamp: int | None = None) -> dict[str, str]:
    at = int(time.time()) if stamp is None else stamp
    headers = {TIMESTAMP_HEADER: str(at), SIGNATURE_HEADER: signature(SECRET, at, body)}
    if name is not None:
        headers[EVENT_HEADER] = name
    return headers


@pytest.mark.parametrize(
    "body",
    [b"[1, 2]", b"null", b"5", b'"collect.succeeded"', b"true", b"not json", b"\xff\xfe", b"", b'{"a": NaN}'],
    ids=["array", "null", "number", "string", "bool", "garbage", "not-utf8", "empty", "nan"],
)
def test_a_verified_body_that_is_not_a_json_object_is_refused(body: bytes) -> None:
    headers = signed(body, "collect.succeeded")
    assert verify_webhook(SECRET, headers, body)  # authentic ...
    with pytest.raises(WebhookVerificationError, match="JSON"):  # ... but not an event
        construct_event(SECRET, headers, body)


FLAT = {
    "invoiceReference": "REQ-1-A",
    "status": "SUCCESS",
    "amount": 1,
    "currency": "XAF",
    "eventId": "evt_1",
}
WRAPPED = {"event": "disburse.sent", "data": {"reference": "PO-1-A", "status": "SENT"}, "eventId": "evt_2"}


@pytest.mark.parametrize(
    ("document", "name", "message"),
    [
        (FLAT, None, "no event name"),
        ({**FLAT, "event": 7}, None, "not a string"),
        (FLAT, "", "no event name"),
        (FLAT, "Collect Succeeded", "malformed event name"),
        (FLAT, "collect", "malformed event name"),
        (FLAT, "x." * 60 + "y", "malformed event name"),
        ({k: v for k, v in FLAT.items() if k != "invoiceReference"}, "collect.succeeded", "no reference"),
        ({**FLAT, "invoiceReference": 12}, "collect.succeeded", "no reference"),
        ({k: v for k, v in FLAT.items() if k != "status"}, "collect.succeeded", "no status"),
        ({**FLAT, "status": None}, "collect.succeeded", "no status"),
        ({**WRAPPED, "data": ["PO-1-A"]}, "disburse.sent", "not a JSON object"),
        ({**WRAPPED, "data": None}, "disburse.sent", "not a JSON object"),
        ({**WRAPPED, "data": {"status": "SENT"}}, "disburse.sent", "no reference"),
        ({**WRAPPED, "event": "disburse.failed"}, "disburse.sent", "disagrees"),
        ({"eventId": "evt_3"}, "disburse.sent", "wrapper"),
        ({"data": WRAPPED["data"]}, "collect.succeeded", "flat body"),
        ({}, "collect.failed", "no reference"),
    ],
)
def test_a_verified_object_that_is_not_a_recognisable_event_is_refused(
    document: dict[str, Any], name: str | None, message: str
) -> None:
    body = json.dumps(document).encode()
    with pytest.raises(WebhookVerificationError, match=message):
        construct_event(SECRET, signed(body, name), body)


def test_numbers_are_decimal_never_float() -> None:
    document = '{"event":"disburse.succeeded","data":{"reference":"PO-9-Z","status":"PAID","amount":12.50,'
    body = (document + '"currency":"GHS","fees":[0.1,2]},"eventId":"evt_9"}').encode()
    event = construct_event(SECRET, signed(body, "disburse.succeeded"), body)
    assert event.amount == Decimal("12.50") and str(event.amount) == "12.50"
    assert event.currency == "GHS"
    assert event.data["fees"] == [Decimal("0.1"), Decimal(2)]
    assert all(isinstance(value, Decimal) for value in event.data["fees"])


def test_legacy_names_map_to_current_types_and_headers_are_case_insensitive() -> None:
    body = json.dumps(FLAT).encode()
    headers = {key.lower(): value for key, value in signed(body, "payment.succeeded").items()}
    event = construct_event(SECRET, headers, body)
    assert (event.type, event.name, event.reference, event.id) == (
        "collect.succeeded",
        "payment.succeeded",
        "REQ-1-A",
        "evt_1",
    )
    assert event.amount == Decimal(1) and event.is_collection
    wrapped = json.dumps({**WRAPPED, "event": "payout.sent"}).encode()
    event = construct_event(SECRET, signed(wrapped), wrapped)  # no header: the body's name
    assert (event.type, event.name, event.reference) == ("disburse.sent", "payout.sent", "PO-1-A")
    assert event.is_payout


def test_unknown_well_formed_names_are_kept() -> None:
    flat = json.dumps({**FLAT, "status": "REFUNDED", "amount": "n/a"}).encode()
    event = construct_event(SECRET, signed(flat, "collect.refunded"), flat)
    assert (event.type, event.name, event.status, event.reference) == (
        "collect.refunded",
        "collect.refunded",
        "REFUNDED",
        "REQ-1-A",
    )
    assert event.is_collection and event.amount is None  # a non-number amount is not an amount
    wrapped = json.dumps(
        {"event": "account.updated", "data": {"reference": "MER-1", "status": "OK"}}
    ).encode()
    event = construct_event(SECRET, signed(wrapped), wrapped)
    assert (event.type, event.reference, event.id) == ("account.updated", "MER-1", None)
    assert not event.is_collection and not event.is_payout
    assert event.amount is None and event.currency is None


def test_the_event_is_frozen_and_its_data_read_only() -> None:
    body = json.dumps(FLAT).encode()
    event = construct_event(SECRET, signed(body, "collect.succeeded"), body)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        event.type = "collect.failed"  # type: ignore[misc]
    with pytest.raises(TypeError):
        event.data["status"] = "FAILED"  # type: ignore[index]
    assert isinstance(hash(event), int)


# --- the testing kit: deliveries verify without the kit's clock -------------------------------------------


def test_kit_deliveries_verify_with_a_plain_construct_event(kit: TestKit) -> None:
    merchant = kit.merchant()
    secret = kit.webhook(merchant.id)
    reference = kit.core.collect.charge(
        merchant.id, amount=700, currency="XAF", country="CM", provider="mtn_cm", phone=PHONE
    ).reference
    kit.network.complete(reference)
    kit.settle()
    [delivery] = kit.deliveries
    assert not delivery.restamped and delivery.sent_headers == delivery.headers  # signed by the core itself
    event = construct_event(secret, delivery.headers, delivery.body)  # the wall clock: no now=
    assert (event.type, event.reference, event.amount) == ("collect.succeeded", reference, Decimal(700))
    assert delivery.verify(secret) == delivery.timestamp
    assert delivery.construct(secret) == event
    # the kit's clock still refuses a replay, for tests that verify with it
    delivery.verify(secret, now=kit.clock.now() / 1000)
    kit.advance(seconds=301)
    with pytest.raises(WebhookVerificationError):
        delivery.verify(secret, now=kit.clock.now() / 1000)


def test_kit_deliveries_signed_after_the_fake_clock_moved_on_are_resigned_at_wall_time(kit: TestKit) -> None:
    merchant = kit.merchant()
    secret = kit.webhook(merchant.id)
    reference = kit.core.collect.charge(
        merchant.id, amount=800, currency="XAF", country="CM", provider="mtn_cm", phone=PHONE
    ).reference
    kit.settle()
    kit.advance(hours=3)  # e.g. waiting for something; the core now signs three hours ahead
    kit.network.fail(reference, "INSUFFICIENT_FUNDS")
    kit.settle()
    [delivery] = kit.deliveries
    sent_stamp = int(delivery.sent_headers[TIMESTAMP_HEADER])
    assert sent_stamp == kit.clock.now() // 1000
    assert abs(sent_stamp - time.time()) > 3 * 3600 - 60
    # the core's own signature is genuine at its own (fake) time, and refused at wall time
    verify_webhook(secret, delivery.sent_headers, delivery.body, now=sent_stamp)
    with pytest.raises(WebhookVerificationError, match="tolerance"):
        construct_event(secret, delivery.sent_headers, delivery.body)
    # what the kit shows the application was re-signed at wall time with the same secret
    assert delivery.restamped
    assert delivery.timestamp is not None and abs(delivery.timestamp - time.time()) <= 5
    changed = {key for key in delivery.headers if delivery.headers[key] != delivery.sent_headers[key]}
    assert changed == {TIMESTAMP_HEADER, SIGNATURE_HEADER}
    event = construct_event(secret, delivery.headers, delivery.body)
    assert (event.type, event.status, event.reference) == ("collect.failed", "FAILED", reference)
    assert delivery.construct(secret) == event
    with pytest.raises(WebhookVerificationError):
        construct_event("whsec_" + "1" * 64, delivery.headers, delivery.body)


def test_the_kit_never_resigns_what_the_core_did_not_sign(kit: TestKit) -> None:
    merchant = kit.merchant()
    secret = kit.webhook(merchant.id)
    kit.fund(merchant.id, "XAF", 1000)
    payout = kit.core.disburse.create(
        merchant.id, amount=500, currency="XAF", phone="690000000", idempotency_key="k"
    )
    kit.settle()
    [delivery] = kit.deliveries
    stale = int(time.time()) - 3600
    old = {**delivery.sent_headers, TIMESTAMP_HEADER: str(stale)}
    forged = {**old, SIGNATURE_HEADER: "sha256=" + "0" * 64}
    assert kit.restamp(forged, delivery.body) == forged  # a wrong signature stays wrong
    genuine = {**old, SIGNATURE_HEADER: signature(secret, stale, delivery.body)}
    fresh = kit.restamp(genuine, delivery.body)
    assert fresh != genuine and construct_event(secret, fresh, delivery.body).reference == payout.reference
    kit.webhook(merchant.id)  # the secret rotates: the old signature no longer matches the endpoint's
    assert kit.restamp(genuine, delivery.body) == genuine
    recent = {**delivery.sent_headers}
    assert abs(int(recent[TIMESTAMP_HEADER]) - time.time()) <= RESTAMP_AFTER
    assert kit.restamp(recent, delivery.body) == recent  # already fresh: left exactly as the core sent it


def test_a_capturing_sender_on_its_own_records_exactly_what_it_is_given() -> None:
    sender = CapturingSender()
    assert sender.restamp is None
    body = b'{"eventId":"evt_x"}'
    headers = signed(body, "collect.succeeded", stamp=1_000)

    target = DeliveryTarget(
        url="https://shop.example/hooks",
        scheme="https",
        host="shop.example",
        port=443,
        target="/hooks",
        address="93.184.216.34",
    )
    assert sender.send(target, headers, body, 1.0).status == 200
    [delivery] = sender.deliveries
    assert delivery.headers == delivery.sent_headers == headers
    assert not delivery.restamped
    assert delivery.verify(SECRET, now=1_000) == 1_000
    with pytest.raises(WebhookVerificationError, match="reference"):  # authentic, but not an event
        delivery.construct(SECRET)
