"""The HTTP API end to end on a real ``paymentcore serve --db ...`` process, once per database engine.

The rest of the HTTP suite drives the app in process (on SQLite and PostgreSQL, through ``client`` in
tests/conftest.py); this module starts the real command, as an operator would, with ``--db PATH`` and
with ``--db postgresql://...``, and checks over loopback what a merchant relies on: collections and
payouts reaching their final states through the background work, signed webhooks arriving, idempotent
replays, every error in its documented shape and status, and balances that add up.

Merchants and keys are made through the library on the same database (the running server sees them at
once, as it sees the CLI's changes); money arrives only through charges the sandbox settles.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from typing import Any

import attrs
import httpx
import pytest
from test_postgres_server import Serve  # type: ignore[import-not-found, unused-ignore]

from paymentcore import PaymentCore

from conftest import HTTP_ENGINES, postgres_url  # type: ignore[import-not-found, unused-ignore]

pytestmark = pytest.mark.slow

SETTLE_TIMEOUT = 30.0
_numbers = count()


@attrs.define
class Served:
    """A running server on one engine and a core of our own on the same database."""

    engine: str
    server: Any  # test_postgres_server.Serve
    core: PaymentCore

    @property
    def base(self) -> str:
        base: str = self.server.base
        return base


@pytest.fixture(scope="module", params=HTTP_ENGINES)
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    engine: str = request.param
    folder = tmp_path_factory.mktemp(f"served-{engine}")
    db = postgres_url(folder) if engine == "postgres" else str(folder / "served.db")
    server = Serve(db, folder, "server", private_webhooks=True)
    try:
        server.wait_ready()
        core = PaymentCore.postgresql(db, sender=None) if engine == "postgres" else PaymentCore.sqlite(db)
        try:
            yield Served(engine, server, core)
        finally:
            core.close()
    finally:
        server.stop()


@attrs.define
class Shop:
    """A fresh approved merchant on the served database, with roomy rate limits."""

    http: httpx.Client
    merchant_id: str
    collect_key: str
    disburse_key: str

    def auth(self, key: str, idem: str | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {key}"}
        if idem is not None:
            headers["Idempotency-Key"] = idem
        return headers

    def charge(self, phone: str, amount: int, idem: str | None = None) -> httpx.Response:
        body = {"amount": amount, "currency": "XAF", "country": "CM", "provider": "mtn_cm", "phone": phone}
        return self.http.post(
            "/v1/collect/charge", json=body, headers=self.auth(self.collect_key, idem or unique("c"))
        )

    def payout(self, phone: str, amount: int, idem: str) -> httpx.Response:
        body = {"amount": amount, "currency": "XAF", "phone": phone}
        return self.http.post("/v1/disburse", json=body, headers=self.auth(self.disburse_key, idem))

    def wait(self, path: str, key: str, *final: str) -> dict[str, Any]:
        deadline = time.monotonic() + SETTLE_TIMEOUT
        record: dict[str, Any] = {}
        while time.monotonic() < deadline:
            answer = self.http.get(path, headers=self.auth(key))
            assert answer.status_code == 200, answer.text
            record = answer.json()
            if record["status"] in final:
                return record
            time.sleep(0.05)
        pytest.fail(f"{path} stayed {record.get('status')}, wanted one of {final}")

    def fund(self, amount: int) -> None:
        answer = self.charge(fresh_phone(), amount)
        assert answer.status_code == 202, answer.text
        self.wait(f"/v1/collect/{answer.json()['reference']}", self.collect_key, "SUCCESS")

    def balances(self) -> list[tuple[str, Decimal, Decimal]]:
        answer = self.http.get("/v1/account/balances", headers=self.auth(self.collect_key))
        assert answer.status_code == 200, answer.text
        return [(b["currency"], b["available"], b["reserved"]) for b in decoded(answer)["balances"]]


def fresh_phone() -> str:
    """An MTN Cameroon number not used before in this run that the sandbox pays (the prompt limit is
    per number, so each charge gets its own)."""
    while True:
        number = f"67{next(_numbers) + 1000:07d}"
        if number[-2:] not in ("11", "12", "13", "21", "22", "23"):
            return number


def unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns()}-{next(_numbers)}"


def decoded(answer: httpx.Response) -> Any:
    return json.loads(answer.content, parse_float=Decimal)


@pytest.fixture
def shop(served: Served) -> Iterator[Shop]:
    merchant = served.core.operator.create_merchant(unique("Shop"), settlement_currency="XAF")
    operator = served.core.operator
    collect = operator.create_key(merchant.id, ["collect"], per_minute=10_000, per_hour=100_000)
    disburse = operator.create_key(merchant.id, ["disburse"], per_minute=10_000, per_hour=100_000)
    with httpx.Client(base_url=served.base, timeout=30.0) as http:
        yield Shop(http, merchant.id, collect.api_key, disburse.api_key)


def assert_error(answer: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    body: dict[str, Any] = answer.json()
    assert body["code"] == code, body
    assert body["requestId"] == answer.headers["x-request-id"]
    assert isinstance(body["message"], str) and body["message"]
    return body


# --- collections -----------------------------------------------------------------------------------


def test_charges_reach_the_outcome_the_sandbox_number_asks_for(shop: Shop) -> None:
    base = fresh_phone()[:-2]
    outcomes = {base + "00": None, base + "11": "PAYER_DECLINED", base + "12": "INSUFFICIENT_FUNDS"}
    references = {}
    for phone in outcomes:
        answer = shop.charge(phone, 2500)
        assert answer.status_code == 202, answer.text
        accepted = decoded(answer)
        assert accepted["status"] == "PENDING" and accepted["reference"].startswith("REQ-")
        assert (accepted["amount"], accepted["currency"], accepted["provider"]) == (2500, "XAF", "mtn_cm")
        references[phone] = accepted["reference"]
    for phone, category in outcomes.items():
        final = shop.wait(f"/v1/collect/{references[phone]}", shop.collect_key, "SUCCESS", "FAILED")
        if category is None:
            assert final["status"] == "SUCCESS"
        else:
            assert (final["status"], final["failureCategory"]) == ("FAILED", category)
    assert shop.balances() == [("XAF", Decimal(2500), Decimal(0))]  # only the settled charge counts


def test_a_checkout_link_opens_a_page_on_the_server(shop: Shop) -> None:
    body = {"amount": 1500, "currency": "XAF", "description": "Two mangoes"}
    answer = shop.http.post(
        "/v1/collect/checkout", json=body, headers=shop.auth(shop.collect_key, unique("k"))
    )
    assert answer.status_code == 201, answer.text
    record = answer.json()
    assert record["status"] == "PENDING"
    page = shop.http.get(httpx.URL(record["checkoutUrl"]).path)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "Two mangoes" in page.text


# --- payouts ---------------------------------------------------------------------------------------


def test_payouts_reach_paid_or_failed_and_the_balance_follows(shop: Shop) -> None:
    shop.fund(10_000)
    paid = shop.payout("670000001", 3000, unique("p"))
    refused = shop.payout("670000021", 2000, unique("p"))
    assert (paid.status_code, refused.status_code) == (201, 201), (paid.text, refused.text)
    assert paid.json()["status"] == "PENDING"
    done = shop.wait(f"/v1/disburse/{paid.json()['reference']}", shop.disburse_key, "PAID")
    assert done["providerReference"]
    failed = shop.wait(f"/v1/disburse/{refused.json()['reference']}", shop.disburse_key, "FAILED")
    assert failed["statusReason"]
    # the refused payout stays reserved until an operator resolves it with the network
    assert shop.balances() == [("XAF", Decimal(5000), Decimal(2000))]


def test_a_replay_answers_the_first_payout_and_another_body_is_refused(shop: Shop) -> None:
    shop.fund(5000)
    key = unique("same")
    first = shop.payout("670000002", 1000, key)
    again = shop.payout("670000002", 1000, key)
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json()["reference"] == first.json()["reference"]
    assert_error(shop.payout("670000002", 1001, key), 409, "IDEMPOTENCY_KEY_REUSED")
    shop.wait(f"/v1/disburse/{first.json()['reference']}", shop.disburse_key, "PAID")
    assert shop.balances() == [("XAF", Decimal(4000), Decimal(0))]  # one payout, not two


def test_a_payout_beyond_the_balance_is_refused_and_moves_nothing(shop: Shop) -> None:
    shop.fund(1000)
    assert_error(shop.payout("670000003", 1001, unique("p")), 400, "INSUFFICIENT_BALANCE")
    assert shop.balances() == [("XAF", Decimal(1000), Decimal(0))]


# --- errors in their documented shape --------------------------------------------------------------


def test_every_error_has_its_documented_status_and_shape(shop: Shop) -> None:
    http = shop.http
    assert_error(http.get("/v1/countries"), 401, "UNAUTHORIZED")
    assert_error(http.get("/v1/countries", headers=shop.auth("sk_nobody")), 401, "UNAUTHORIZED")
    payout_body = {"amount": 100, "currency": "XAF", "phone": "670000004"}
    assert_error(
        http.post("/v1/disburse", json=payout_body, headers=shop.auth(shop.collect_key, unique("p"))),
        403,
        "INSUFFICIENT_SCOPE",
    )
    assert_error(
        http.post("/v1/disburse", json=payout_body, headers=shop.auth(shop.disburse_key)),
        400,
        "IDEMPOTENCY_KEY_REQUIRED",
    )
    assert_error(http.get("/v1/collect/REQ-nothing", headers=shop.auth(shop.collect_key)), 404, "NOT_FOUND")
    assert_error(http.get("/v1/nowhere", headers=shop.auth(shop.collect_key)), 404, "NOT_FOUND")
    assert_error(http.delete("/v1/countries", headers=shop.auth(shop.collect_key)), 405, "INVALID_REQUEST")
    broken = http.post(
        "/v1/collect/charge",
        content=b"{not json",
        headers={**shop.auth(shop.collect_key, unique("c")), "Content-Type": "application/json"},
    )
    assert_error(broken, 400, "INVALID_REQUEST")
    huge = http.post(
        "/v1/collect/charge",
        content=b"x" * (1024 * 1024 + 1),
        headers={**shop.auth(shop.collect_key, unique("c")), "Content-Type": "application/json"},
    )
    assert_error(huge, 413, "INVALID_REQUEST")
    assert_error(shop.charge(fresh_phone(), 1), 400, "AMOUNT_TOO_SMALL")
    assert_error(shop.charge("690000000", 2500), 400, "PHONE_PROVIDER_MISMATCH")


def test_the_discovery_endpoints_answer_on_the_served_database(shop: Shop) -> None:
    for path in ("/v1/countries", "/v1/providers", "/v1/limits", "/v1/account/providers", "/v1/channels"):
        answer = shop.http.get(path, headers=shop.auth(shop.disburse_key))
        assert answer.status_code == 200, (path, answer.text)
        assert isinstance(answer.json(), list) and answer.json(), path
    assert int(answer.headers["x-ratelimit-limit"]) == 10_000


# --- webhooks --------------------------------------------------------------------------------------


class Receiver:
    """A webhook endpoint on loopback that records each delivery with its headers."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[dict[str, str], bytes]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver.lock:
                    receiver.deliveries.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/hooks"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def wait(self, event: str) -> tuple[dict[str, str], bytes]:
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while time.monotonic() < deadline:
            with self.lock:
                for headers, body in self.deliveries:
                    if headers.get("x-service-event") == event:
                        return headers, body
            time.sleep(0.05)
        pytest.fail(f"no {event} delivery; got {[h.get('x-service-event') for h, _ in self.deliveries]}")

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def test_signed_webhooks_arrive_for_a_charge_and_a_payout(shop: Shop) -> None:
    receiver = Receiver()
    try:
        registered = shop.http.put(
            "/v1/webhook", json={"url": receiver.url}, headers=shop.auth(shop.collect_key)
        )
        assert registered.status_code == 200, registered.text
        secret = registered.json()["signingSecret"]
        shop.fund(4000)
        payout = shop.payout("670000005", 1500, unique("p"))
        assert payout.status_code == 201, payout.text
        for event in ("collect.succeeded", "disburse.succeeded"):
            headers, body = receiver.wait(event)
            signed = f"{headers['x-service-timestamp']}.".encode() + body
            expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
            assert hmac.compare_digest(headers["x-service-signature"], f"sha256={expected}")
            assert json.loads(body)["eventId"] == headers["x-service-event-id"]
        paid = json.loads(receiver.wait("disburse.succeeded")[1], parse_float=Decimal)
        assert paid["event"] == "disburse.succeeded"
        assert (paid["data"]["reference"], paid["data"]["status"]) == (payout.json()["reference"], "PAID")
        collected = json.loads(receiver.wait("collect.succeeded")[1], parse_float=Decimal)
        assert (collected["status"], collected["settledAmount"]) == ("SUCCESS", 4000)
    finally:
        receiver.close()
