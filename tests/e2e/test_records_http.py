"""The merchant records API over HTTP (issue 17): the lists of payouts, collections, ledger items and
events, one event with its deliveries, and resending it.

- Every list pages newest first with ``limit`` and ``startingAfter``; paging through while new records
  are being created neither skips nor repeats an item, and each filter keeps exactly what it names.
- A bad ``limit``, ``startingAfter``, filter or query parameter answers 400 ``INVALID_REQUEST`` naming
  it; another merchant's reference as ``startingAfter`` answers exactly as an unknown one.
- Another merchant's items never appear; another merchant's event id answers 404 like an unknown one.
- Replaying the ledger from its oldest item gives the balance ``GET /v1/account/balances`` shows.
- Every delivery carries ``X-Service-Event-Id`` (the body's ``eventId``, the same on a retry); a resend
  arrives with the same id and a valid signature, is recorded as an attempt, and leaves the retry
  schedule and the endpoint's failure count alone.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest
from starlette.testclient import TestClient

from paymentcore import FakeClock, PaymentCore, verify_webhook
from paymentcore.testing import CapturedDelivery, CapturingSender, fund
from paymentcore_server.app import create_app

from conftest import make_core  # type: ignore[import-not-found, unused-ignore]

PER_MINUTE = 1_000_000  # these tests call a lot; the rate limit has its own tests
HOOK = "https://shop.example/hooks"
PAYING = "690000000"  # payout SENT then PAID (sandbox)
REFUSED = "670000021"  # payout refused by the network: FAILED
PAYER = "670000000"  # collection SUCCESS
DECLINER = "670000011"  # collection FAILED
PAYOUT_FIELDS = {
    "reference", "status", "amount", "currency", "phone", "recipientName", "merchantReference",
    "providerReference", "awaitingReview", "statusReason", "createdAt",
}  # fmt: skip
LEDGER_FIELDS = {"id", "createdAt", "type", "reference", "amount", "available", "reserved"}
EVENT_FIELDS = {"id", "type", "reference", "createdAt", "deliveryStatus", "attempts"}
DELIVERY_FIELDS = {"at", "responseStatus", "error", "durationMs"}


@attrs.define
class Shop:
    """One merchant talking to the app, with keys whose rate limit is out of reach."""

    http: TestClient
    core: PaymentCore
    clock: FakeClock
    merchant_id: str
    collect_key: str
    disburse_key: str
    counter: Iterator[int] = attrs.Factory(itertools.count)

    @property
    def sender(self) -> CapturingSender:
        sender = self.core.deps.sender
        assert isinstance(sender, CapturingSender)
        return sender

    def get(self, path: str, key: str | None = None, **params: Any) -> Any:
        headers = {"Authorization": f"Bearer {key or self.collect_key}"}
        return self.http.get(path, params=params, headers=headers)

    def post(self, path: str, body: Any = None, *, key: str | None = None, idem: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {key or self.collect_key}"}
        if idem is not None:
            headers["Idempotency-Key"] = idem
        if body is None:
            return self.http.post(path, headers=headers)
        return self.http.post(path, json=body, headers=headers)

    def payout(self, amount: int = 1000, phone: str = PAYING, **extra: Any) -> str:
        body = {"amount": amount, "currency": "XAF", "phone": phone, **extra}
        answer = self.post("/v1/disburse", body, key=self.disburse_key, idem=f"po-{next(self.counter)}")
        assert answer.status_code == 201, answer.text
        reference: str = answer.json()["reference"]
        return reference

    def charge(self, amount: int = 2000, phone: str = PAYER, **extra: Any) -> str:
        body = {"amount": amount, "currency": "XAF", "country": "CM", "provider": "mtn_cm", "phone": phone}
        answer = self.post("/v1/collect/charge", {**body, **extra})
        assert answer.status_code == 202, answer.text
        reference: str = answer.json()["reference"]
        return reference

    def register(self, url: str = HOOK, **extra: Any) -> str:
        answer = self.http.put(
            "/v1/webhook", json={"url": url, **extra}, headers={"Authorization": f"Bearer {self.collect_key}"}
        )
        assert answer.status_code == 200, answer.text
        secret: str = answer.json()["signingSecret"]
        return secret

    def settle(self) -> None:
        self.core.run_until_idle()

    def pages(self, path: str, limit: int, key: str | None = None, **params: Any) -> list[list[Any]]:
        """Every page of a list, following ``startingAfter``."""
        pages: list[list[Any]] = []
        cursor: str | None = None
        while True:
            query = {**params, "limit": limit, **({"startingAfter": cursor} if cursor else {})}
            answer = self.get(path, key, **query)
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert set(body) == {"data", "hasMore"}
            pages.append(body["data"])
            if not body["hasMore"]:
                return pages
            assert body["data"], "hasMore with an empty page"
            last = body["data"][-1]
            cursor = last["id"] if "id" in last else last["reference"]  # ledger items and events: id


def new_shop(core: PaymentCore, http: TestClient, clock: FakeClock, name: str) -> Shop:
    merchant = core.operator.create_merchant(name, settlement_currency="XAF")
    collect = core.operator.create_key(merchant.id, ["collect"], per_minute=PER_MINUTE, per_hour=PER_MINUTE)
    disburse = core.operator.create_key(merchant.id, ["disburse"], per_minute=PER_MINUTE, per_hour=PER_MINUTE)
    return Shop(http, core, clock, merchant.id, collect.api_key, disburse.api_key)


@attrs.define
class World:
    a: Shop
    b: Shop


@pytest.fixture
def world(tmp_path: Path, store_kind: str) -> Iterator[World]:
    clock = FakeClock()
    core = make_core(store_kind, tmp_path, clock, prompt_limit=1_000_000, webhook_retry_delays=(5,))
    try:
        with TestClient(create_app(core), raise_server_exceptions=False) as http:
            world = World(new_shop(core, http, clock, "Shop A"), new_shop(core, http, clock, "Shop B"))
            fund(core, world.a.merchant_id, "XAF", 1_000_000)
            fund(core, world.b.merchant_id, "XAF", 1_000_000)
            yield world
    finally:
        core.close()


def assert_error(response: Any, status: int, code: str, param: str | None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert body.get("param") == param, body
    assert body["requestId"] == response.headers["x-request-id"]
    return body


def flat(pages: list[list[Any]], key: str = "reference") -> list[str]:
    return [item[key] for page in pages for item in page]


# --- payouts and collections ---------------------------------------------------------------------


def test_payouts_page_newest_first_without_gaps_or_repeats_while_new_ones_arrive(world: World) -> None:
    a = world.a
    created = [a.payout(1000 + i) for i in range(7)]
    a.clock.advance(0.001)  # the rest a millisecond later: the order holds across and within one ms
    created += [a.payout(2000 + i) for i in range(5)]
    expected = created[::-1]  # newest first
    seen: list[str] = []
    cursor: str | None = None
    newcomers: list[str] = []
    while True:
        params = {"limit": 5, **({"startingAfter": cursor} if cursor else {})}
        answer = a.get("/v1/disburse", a.disburse_key, **params)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert all(set(item) == PAYOUT_FIELDS for item in body["data"])
        seen += [item["reference"] for item in body["data"]]
        newcomers.append(a.payout(3000 + len(newcomers)))  # created between two pages
        if not body["hasMore"]:
            break
        cursor = body["data"][-1]["reference"]
    assert seen == expected  # every one once, in order; the newcomers are newer than the first page
    fresh = a.get("/v1/disburse", a.disburse_key, limit=100).json()
    assert [item["reference"] for item in fresh["data"]] == newcomers[::-1] + expected
    assert fresh["hasMore"] is False
    # each record as GET /v1/disburse/{reference} shows it
    one = a.get(f"/v1/disburse/{created[0]}", a.disburse_key).json()
    assert fresh["data"][-1] == one


def test_payout_filters_status_and_merchant_reference(world: World) -> None:
    a = world.a
    paid = [a.payout(merchantReference="order-1"), a.payout(merchantReference="order-2")]
    failed = a.payout(phone=REFUSED, merchantReference="order-1")
    a.settle()  # sandbox: two PAID, one refused by the network (FAILED)
    pending = a.payout(merchantReference="order-1")  # not dispatched yet
    expected = {"PENDING": [pending], "PAID": paid[::-1], "FAILED": [failed], "SENT": [], "REJECTED": []}
    for status, references in expected.items():
        assert flat(a.pages("/v1/disburse", 1, a.disburse_key, status=status)) == references, status
    by_reference = flat(a.pages("/v1/disburse", 1, a.disburse_key, merchantReference="order-1"))
    assert by_reference == [pending, failed, paid[0]]
    both = a.get("/v1/disburse", a.disburse_key, merchantReference="order-1", status="PAID").json()
    assert [item["reference"] for item in both["data"]] == [paid[0]]
    nobody = a.get("/v1/disburse", a.disburse_key, merchantReference="nobody").json()
    assert nobody == {"data": [], "hasMore": False}


def test_a_cursor_keeps_its_place_when_its_status_changes_and_the_filter_drops_it(world: World) -> None:
    a = world.a
    first, second, third = a.payout(), a.payout(), a.payout()
    page = a.get("/v1/disburse", a.disburse_key, status="PENDING", limit=2).json()
    assert [p["reference"] for p in page["data"]] == [third, second] and page["hasMore"] is True
    a.settle()  # all three are PAID now: the cursor no longer matches the filter
    rest = a.get("/v1/disburse", a.disburse_key, status="PAID", startingAfter=second).json()
    assert [p["reference"] for p in rest["data"]] == [first]


def test_collections_page_and_filter_and_legacy_records_keep_their_shape(world: World) -> None:
    a = world.a
    paid = [a.charge(merchantReference="cart-1"), a.charge()]
    declined = a.charge(phone=DECLINER, merchantReference="cart-1")
    legacy = a.post("/v1/payments", {"amount": 1500, "currency": "XAF", "reference": "cart-9"})
    assert legacy.status_code == 201
    checkout = a.post("/v1/collect/checkout", {"amount": 2500, "currency": "XAF"}).json()["reference"]
    a.settle()
    everything = [checkout, legacy.json()["reference"], declined, *paid[::-1]]
    pages = a.pages("/v1/collect", 2)
    assert [len(page) for page in pages] == [2, 2, 1]
    assert flat(pages) == everything
    listed = {item["reference"]: item for item in itertools.chain(*pages)}
    for reference in everything:  # exactly what GET /v1/collect/{reference} answers
        assert listed[reference] == a.get(f"/v1/collect/{reference}").json()
    assert "method" not in listed[legacy.json()["reference"]]
    assert flat(a.pages("/v1/collect", 5, status="SUCCESS")) == paid[::-1]
    assert flat(a.pages("/v1/collect", 5, status="FAILED")) == [declined]
    assert flat(a.pages("/v1/collect", 5, status="PENDING")) == [checkout, legacy.json()["reference"]]
    assert flat(a.pages("/v1/collect", 5, merchantReference="cart-1")) == [declined, paid[0]]
    assert flat(a.pages("/v1/collect", 5, merchantReference="cart-9")) == [legacy.json()["reference"]]


def test_collections_created_between_pages_never_shift_a_later_page(world: World) -> None:
    a = world.a
    created = [a.charge(1000 + i) for i in range(6)]
    first = a.get("/v1/collect", limit=4).json()
    assert [c["reference"] for c in first["data"]] == created[::-1][:4]
    later = [a.charge(5000 + i) for i in range(3)]
    rest = a.get("/v1/collect", limit=4, startingAfter=first["data"][-1]["reference"]).json()
    assert [c["reference"] for c in rest["data"]] == created[::-1][4:] and rest["hasMore"] is False
    assert flat(a.pages("/v1/collect", 4)) == later[::-1] + created[::-1]


# --- tenancy, scopes and refusals --------------------------------------------------------------------


def test_another_merchants_items_never_appear_and_its_cursor_is_unknown(world: World) -> None:
    a, b = world.a, world.b
    mine, theirs = a.payout(), b.payout()
    my_charge, their_charge = a.charge(), b.charge()
    a.register()
    b.register()
    a.settle()
    assert flat(a.pages("/v1/disburse", 10, a.disburse_key)) == [mine]
    assert flat(a.pages("/v1/collect", 10)) == [my_charge]
    assert their_charge not in flat(a.pages("/v1/collect", 10))
    a_events = a.get("/v1/events", limit=100).json()["data"]
    b_events = b.get("/v1/events", limit=100).json()["data"]
    assert a_events and b_events and not {e["id"] for e in a_events} & {e["id"] for e in b_events}
    assert {e["reference"] for e in a_events} == {mine, my_charge}
    a_ledger = a.get("/v1/account/ledger", currency="XAF", limit=100).json()["data"]
    assert {item["reference"] for item in a_ledger} == {"test-funding", mine, my_charge}
    # another merchant's cursor answers exactly as one that never existed
    for path, key, foreign, query in (
        ("/v1/disburse", a.disburse_key, theirs, {}),
        ("/v1/collect", a.collect_key, their_charge, {}),
        ("/v1/events", a.collect_key, b_events[0]["id"], {}),
        (
            "/v1/account/ledger",
            a.collect_key,
            b.get("/v1/account/ledger", currency="XAF").json()["data"][0]["id"],
            {"currency": "XAF"},
        ),
    ):
        foreign_answer = a.get(path, key, startingAfter=foreign, **query)
        unknown_answer = a.get(path, key, startingAfter=foreign[:-4] + "QQQQ", **query)
        for answer in (foreign_answer, unknown_answer):
            assert_error(answer, 400, "INVALID_REQUEST", "startingAfter")
        assert foreign_answer.json()["message"] == unknown_answer.json()["message"]
    # another merchant's event: 404, identical to an unknown id
    their_event = b_events[0]["id"]
    for answer in (a.get(f"/v1/events/{their_event}"), a.post(f"/v1/events/{their_event}/resend")):
        body = assert_error(answer, 404, "NOT_FOUND", None)
        unknown = a.get("/v1/events/evt_000000000000000000000000").json()
        assert {k: v for k, v in body.items() if k != "requestId"} == {
            k: v for k, v in unknown.items() if k != "requestId"
        }
    assert b.get(f"/v1/events/{their_event}").status_code == 200


def test_scopes_and_keys(world: World) -> None:
    a = world.a
    assert_error(a.get("/v1/disburse", a.collect_key), 403, "INSUFFICIENT_SCOPE", None)
    assert_error(a.get("/v1/collect", a.disburse_key), 403, "INSUFFICIENT_SCOPE", None)
    for key in (a.collect_key, a.disburse_key):  # any key of the merchant
        assert a.get("/v1/account/ledger", key, currency="XAF").status_code == 200
        assert a.get("/v1/events", key).status_code == 200
    assert a.get("/v1/disburse", a.disburse_key).status_code == 200
    assert a.get("/v1/collect", a.collect_key).status_code == 200
    for path in ("/v1/disburse", "/v1/collect", "/v1/account/ledger?currency=XAF", "/v1/events"):
        assert_error(a.http.get(path), 401, "UNAUTHORIZED", None)
    assert_error(a.http.post("/v1/events/evt_1/resend"), 401, "UNAUTHORIZED", None)
    answer = a.get("/v1/events", a.disburse_key)
    assert {"x-ratelimit-limit", "x-ratelimit-remaining", "x-request-id"} <= set(answer.headers)


@pytest.mark.parametrize("path", ["/v1/disburse", "/v1/collect", "/v1/events", "/v1/account/ledger"])
def test_bad_list_parameters_answer_400_naming_them(world: World, path: str) -> None:
    a = world.a
    key = a.disburse_key if path == "/v1/disburse" else a.collect_key
    base = {"currency": "XAF"} if path == "/v1/account/ledger" else {}
    for limit in ("0", "101", "-1", "1.5", "abc", "", "1e2", "0x10", "99999999999999999999"):
        assert_error(a.get(path, key, limit=limit, **base), 400, "INVALID_REQUEST", "limit")
    for limit in ("1", "100", "020"):
        assert a.get(path, key, limit=limit, **base).status_code == 200
    for cursor in ("", "PO-1-NOPE", "evt_nope", "x" * 300):
        assert_error(a.get(path, key, startingAfter=cursor, **base), 400, "INVALID_REQUEST", "startingAfter")
    assert_error(a.get(path, key, starting_after="x", **base), 400, "INVALID_REQUEST", "starting_after")
    assert_error(a.get(path, key, stat="PAID", **base), 400, "INVALID_REQUEST", "stat")
    repeated = a.http.get(
        f"{path}?limit=2&limit=3" + ("&currency=XAF" if base else ""),
        headers={"Authorization": f"Bearer {key}"},
    )
    assert_error(repeated, 400, "INVALID_REQUEST", "limit")
    if path in ("/v1/disburse", "/v1/collect"):
        for status in ("paid", "UNKNOWN", "", "SUCCESS" if path == "/v1/disburse" else "PAID"):
            assert_error(a.get(path, key, status=status), 400, "INVALID_REQUEST", "status")
        for reference in ("", "x" * 121):
            assert_error(
                a.get(path, key, merchantReference=reference), 400, "INVALID_REQUEST", "merchantReference"
            )
    if path == "/v1/events":
        assert_error(a.get(path, key, type="collect.won"), 400, "INVALID_REQUEST", "type")
        assert_error(a.get(path, key, deliveryStatus="SKIPPED"), 400, "INVALID_REQUEST", "deliveryStatus")
    if path == "/v1/account/ledger":
        assert_error(a.get(path, key), 400, "INVALID_REQUEST", "currency")
        for currency in ("ZZZ", "USD", "xaf"):
            assert_error(a.get(path, key, currency=currency), 400, "UNKNOWN_CURRENCY", "currency")


# --- the ledger ------------------------------------------------------------------------------------


def replay(items_newest_first: list[dict[str, Any]]) -> tuple[Decimal, Decimal]:
    """Apply every item from the oldest on, checking each one's balance on the way."""
    available = reserved = Decimal(0)
    for item in reversed(items_newest_first):
        amount = Decimal(str(item["amount"]))
        if item["type"] == "PAYOUT_PAID":
            reserved += amount
        elif item["type"] == "COLLECTION_SETTLED":
            available += amount
        else:  # PAYOUT_RESERVED, PAYOUT_RELEASED: between available and reserved
            available += amount
            reserved -= amount
        assert (available, reserved) == (Decimal(str(item["available"])), Decimal(str(item["reserved"])))
    return available, reserved


def test_replaying_the_ledger_gives_the_balance_across_pages(world: World) -> None:
    a = world.a
    core = a.core
    core.operator.set_collect_fee(a.merchant_id, "2")
    core.operator.set_limits(a.merchant_id, "XAF", review_threshold="50000")
    charges = [a.charge(10_000), a.charge(3_000)]
    a.settle()
    paid = a.payout(2500)
    refused = a.payout(4000, phone=REFUSED)
    held = a.payout(60_000)  # held for review, then rejected: the reservation is released
    also_paid = a.payout(1234)
    a.settle()
    core.disburse.reject(held)
    core.disburse.resolve(refused)  # the sandbox finds no money moved: released
    a.clock.advance(1)
    late = a.payout(777)  # reserved, not dispatched yet
    pages = a.pages("/v1/account/ledger", 3, currency="XAF")
    items = [item for page in pages for item in page]
    assert all(set(item) == LEDGER_FIELDS for item in items)
    assert len({item["id"] for item in items}) == len(items)
    [balance] = a.get("/v1/account/balances").json()["balances"]
    available, reserved = replay(items)
    assert (available, reserved) == (Decimal(balance["available"]), Decimal(balance["reserved"]))
    assert (items[0]["available"], items[0]["reserved"]) == (balance["available"], balance["reserved"])
    kinds = [(item["type"], item["reference"], Decimal(str(item["amount"]))) for item in items]
    assert kinds[0] == ("PAYOUT_RESERVED", late, Decimal(-777))
    assert ("COLLECTION_SETTLED", charges[0], Decimal(9800)) in kinds  # net of the 2 % fee
    assert ("PAYOUT_PAID", paid, Decimal(-2500)) in kinds
    assert ("PAYOUT_RELEASED", held, Decimal(60_000)) in kinds
    assert ("PAYOUT_RELEASED", refused, Decimal(4000)) in kinds
    assert ("PAYOUT_PAID", also_paid, Decimal(-1234)) in kinds
    assert items[-1]["reference"] == "test-funding"  # the oldest last
    # every page after the first starts with the balance the previous page's last item left
    one_by_one = a.pages("/v1/account/ledger", 1, currency="XAF")
    assert [page[0] for page in one_by_one] == items
    assert a.core.check_ledger(a.merchant_id, "XAF").available == int(available)


def test_the_ledger_of_a_currency_never_held_is_empty(world: World) -> None:
    a = world.a
    assert a.get("/v1/account/ledger", currency="GHS").json() == {"data": [], "hasMore": False}


# --- events, deliveries, resend ----------------------------------------------------------------------


def by_event(deliveries: list[CapturedDelivery], event_id: str) -> list[CapturedDelivery]:
    return [d for d in deliveries if d.json()["eventId"] == event_id]


def header(delivery: CapturedDelivery, name: str) -> str:
    return {k.lower(): v for k, v in delivery.headers.items()}[name.lower()]


def test_events_list_filter_and_show_what_was_delivered(world: World) -> None:
    a = world.a
    secret = a.register()
    paid_charge, declined = a.charge(), a.charge(phone=DECLINER)
    payout = a.payout()
    a.settle()
    deliveries = a.sender.deliveries
    assert deliveries
    for delivery in deliveries:  # the header is the signed body's eventId
        assert header(delivery, "X-Service-Event-Id") == delivery.json()["eventId"]
        verify_webhook(secret, delivery.headers, delivery.body, now=delivery.timestamp)
    events = flat(a.pages("/v1/events", 2), "id")
    listed = a.get("/v1/events", limit=100).json()["data"]
    assert [e["id"] for e in listed] == events
    assert all(set(e) == EVENT_FIELDS for e in listed)
    assert {(e["type"], e["reference"]) for e in listed} == {
        ("collect.succeeded", paid_charge),
        ("collect.failed", declined),
        ("disburse.sent", payout),
        ("disburse.succeeded", payout),
    }
    assert all(e["deliveryStatus"] == "DELIVERED" and e["attempts"] == 1 for e in listed)
    assert {e["id"] for e in listed} == {d.json()["eventId"] for d in deliveries}
    only = a.get("/v1/events", type="disburse.sent").json()["data"]
    assert [(e["type"], e["reference"]) for e in only] == [("disburse.sent", payout)]
    legacy_name = a.get("/v1/events", type="payout.sent").json()["data"]  # the legacy name selects too
    assert legacy_name == only
    assert a.get("/v1/events", deliveryStatus="FAILED").json()["data"] == []
    assert len(a.get("/v1/events", deliveryStatus="DELIVERED").json()["data"]) == 4

    event_id = only[0]["id"]
    record = a.get(f"/v1/events/{event_id}").json()
    assert set(record) == EVENT_FIELDS | {"payload", "deliveries"}
    assert {k: record[k] for k in EVENT_FIELDS} == only[0]
    [sent] = by_event(deliveries, event_id)
    assert record["payload"] == sent.json()  # the body exactly as signed and sent
    [attempt] = record["deliveries"]
    assert set(attempt) == DELIVERY_FIELDS
    assert attempt["responseStatus"] == 200 and attempt["error"] is None and attempt["durationMs"] >= 0
    assert attempt["at"] == record["createdAt"]  # the fake clock did not move


def test_a_failed_event_retries_with_the_same_id_and_is_listed_as_failed(world: World) -> None:
    a = world.a
    secret = a.register()
    a.sender.status = 500
    reference = a.charge()
    a.settle()  # first attempt fails; the one retry is due in 5 s
    a.clock.advance(6)
    a.settle()  # the retry fails too: a failed event
    [event] = a.get("/v1/events", deliveryStatus="FAILED").json()["data"]
    assert event["reference"] == reference and event["attempts"] == 2
    assert a.get("/v1/events", deliveryStatus="PENDING").json()["data"] == []
    attempts = by_event(a.sender.deliveries, event["id"])
    assert len(attempts) == 2
    assert {header(d, "X-Service-Event-Id") for d in attempts} == {event["id"]}
    assert attempts[0].timestamp != attempts[1].timestamp  # each attempt signed afresh
    for delivery in attempts:
        verify_webhook(secret, delivery.headers, delivery.body, now=delivery.timestamp)
    record = a.get(f"/v1/events/{event['id']}").json()
    assert [(d["responseStatus"], d["error"]) for d in record["deliveries"]] == [
        (500, "HTTP 500"),
        (500, "HTTP 500"),
    ]


def test_resend_delivers_the_same_event_again_signed_afresh(world: World) -> None:
    a = world.a
    reference = a.charge()
    a.settle()  # collect.succeeded is written; no endpoint: it fails at once
    [event] = a.get("/v1/events").json()["data"]
    assert event["deliveryStatus"] == "FAILED" and event["attempts"] == 0
    refused = a.post(f"/v1/events/{event['id']}/resend")
    assert_error(refused, 400, "INVALID_REQUEST", None)

    secret = a.register()
    a.clock.advance(60)
    answer = a.post(f"/v1/events/{event['id']}/resend")
    assert answer.status_code == 202, answer.text
    queued = answer.json()
    assert queued["id"] == event["id"] and queued["deliveries"] == [] and queued["reference"] == reference
    assert a.sender.deliveries == []  # queued: the worker sends it
    a.settle()
    [delivery] = a.sender.deliveries
    assert header(delivery, "X-Service-Event-Id") == event["id"] == delivery.json()["eventId"]
    assert verify_webhook(secret, delivery.headers, delivery.body, now=a.clock.now() / 1000) == (
        a.clock.now() // 1000
    )
    record = a.get(f"/v1/events/{event['id']}").json()
    assert record["payload"] == delivery.json() == queued["payload"]
    assert record["deliveryStatus"] == "DELIVERED" and record["attempts"] == 1
    [attempt] = record["deliveries"]
    assert attempt["responseStatus"] == 200 and attempt["error"] is None
    a.settle()
    assert len(a.sender.deliveries) == 1  # sent once

    again = a.post(f"/v1/events/{event['id']}/resend")  # whatever the status: delivered events too
    assert again.status_code == 202
    a.settle()
    assert len(a.sender.deliveries) == 2
    assert header(a.sender.deliveries[1], "X-Service-Event-Id") == event["id"]
    assert a.get(f"/v1/events/{event['id']}").json()["attempts"] == 2


def test_a_failing_resend_changes_neither_the_schedule_nor_the_endpoints_failure_count(
    world: World,
) -> None:
    a = world.a
    a.register()
    a.sender.status = 503
    a.charge()
    a.settle()  # the first attempt failed; the retry is due in 5 s
    [event] = a.get("/v1/events").json()["data"]
    with a.core.store.read() as tx:
        before = tx.outbox.get(event["id"])
        endpoint_before = tx.webhooks.get(a.merchant_id)
    assert before is not None and endpoint_before is not None
    for _ in range(12):  # more than auto-disable's 10: resends never count toward it
        assert a.post(f"/v1/events/{event['id']}/resend").status_code == 202
        a.settle()
    with a.core.store.read() as tx:
        after = tx.outbox.get(event["id"])
        endpoint_after = tx.webhooks.get(a.merchant_id)
    assert after is not None and endpoint_after is not None
    assert (after.status, after.attempts, after.next_attempt_at) == (
        before.status,
        before.attempts,
        before.next_attempt_at,
    )
    assert endpoint_after == endpoint_before and endpoint_after.is_active
    record = a.get(f"/v1/events/{event['id']}").json()
    assert record["attempts"] == 13 and record["deliveryStatus"] == "PENDING"
    assert [d["responseStatus"] for d in record["deliveries"]] == [503] * 13
    assert len(by_event(a.sender.deliveries, event["id"])) == 13
    a.sender.status = 200
    a.clock.advance(6)
    a.settle()  # the scheduled retry still comes, on time
    final = a.get(f"/v1/events/{event['id']}").json()
    assert final["deliveryStatus"] == "DELIVERED" and final["attempts"] == 14


def test_resend_goes_to_the_endpoint_registered_now_and_rechecks_its_address(world: World) -> None:
    a = world.a
    a.register("https://old.example/hooks")
    a.charge()
    a.settle()
    [event] = a.get("/v1/events").json()["data"]
    secret = a.register("https://new.example/hooks")
    assert a.post(f"/v1/events/{event['id']}/resend").status_code == 202
    a.settle()
    resent = a.sender.deliveries[-1]
    assert resent.url == "https://new.example/hooks"
    verify_webhook(secret, resent.headers, resent.body, now=resent.timestamp)

    a.core.deps.resolver = lambda host, port: ["10.0.0.7"]  # the name now points inside
    assert a.post(f"/v1/events/{event['id']}/resend").status_code == 202
    a.settle()
    assert len(a.sender.deliveries) == 2  # nothing sent
    last = a.get(f"/v1/events/{event['id']}").json()["deliveries"][-1]
    assert last["responseStatus"] is None and last["error"].startswith("refused address")


def test_resend_with_an_idempotency_key_answers_the_same_and_sends_once(world: World) -> None:
    a = world.a
    a.register()
    a.charge()
    a.settle()
    [event] = a.get("/v1/events").json()["data"]
    first = a.post(f"/v1/events/{event['id']}/resend", idem="resend-1")
    a.settle()
    second = a.post(f"/v1/events/{event['id']}/resend", idem="resend-1")
    a.settle()
    assert first.status_code == second.status_code == 202
    assert first.json() == second.json()
    assert len(by_event(a.sender.deliveries, event["id"])) == 2  # the first attempt and one resend
    other = a.post(f"/v1/events/{event['id']}/resend", idem="resend-1", body={"x": 1})
    assert other.status_code == 202  # the body is not part of a resend
    reused = a.post("/v1/collect/checkout", {"amount": 100, "currency": "XAF"}, idem="resend-1")
    assert_error(reused, 409, "IDEMPOTENCY_KEY_REUSED", "Idempotency-Key")


def test_a_legacy_endpoint_sees_the_names_it_receives(world: World) -> None:
    a = world.a
    answer = a.post("/v1/webhooks", {"url": HOOK})
    assert answer.status_code == 200
    payout = a.payout()
    a.settle()
    listed = a.get("/v1/events").json()["data"]
    assert {e["type"] for e in listed} == {"payout.sent", "payout.paid"}
    assert [e["reference"] for e in a.get("/v1/events", type="disburse.succeeded").json()["data"]] == [payout]
    record = a.get(f"/v1/events/{listed[0]['id']}").json()
    assert record["payload"]["event"] == record["type"] == "payout.paid"
