"""Collecting over HTTP on SQLite: charge, checkout, legacy payments, the page, idempotency."""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import Any

import pytest

from paymentcore import MerchantBalance
from paymentcore._domain.models import CollectionStatus

from conftest import Client
from test_api_foundation import assert_error

CHARGE = {"amount": 5000, "currency": "XAF", "country": "CM", "provider": "mtn_cm", "phone": "670000000"}
CHARGE_FIELDS = {"reference", "status", "amount", "currency", "provider", "merchantReference", "createdAt"}
RECORD_FIELDS = {
    "reference",
    "status",
    "amount",
    "currency",
    "requestedAmount",
    "requestedCurrency",
    "description",
    "merchantReference",
    "checkoutUrl",
    "method",
    "providerCode",
    "expiresAt",
    "createdAt",
    "failureCategory",
}


def nothing_written(client: Client) -> None:
    with client.core.store.read() as tx:
        assert tx.ledger.balances(client.merchant.id) == []
        assert tx.collections.due(client.clock.now() + 10**12, 10) == []
    assert client.sandbox.prompt_count == 0


@pytest.mark.parametrize(
    ("change", "status", "code", "param", "details"),
    [
        ({"amount": 50}, 400, "AMOUNT_TOO_SMALL", "amount", {"minimum": 100, "currency": "XAF"}),
        ({"amount": 10**8}, 400, "AMOUNT_TOO_LARGE", "amount", {"maximum": 5000000, "currency": "XAF"}),
        ({"amount": Decimal("100.5")}, 400, "AMOUNT_PRECISION", "amount", None),
        ({"amount": "5000"}, 400, "INVALID_REQUEST", "amount", None),
        ({"amount": True}, 400, "INVALID_REQUEST", "amount", None),
        ({"amount": -5}, 400, "INVALID_REQUEST", "amount", None),
        ({"currency": "ZZZ"}, 400, "UNKNOWN_CURRENCY", "currency", None),
        ({"currency": "XOF"}, 400, "CURRENCY_MISMATCH", "currency", {"expected": "XAF"}),
        ({"country": "FR"}, 400, "COUNTRY_NOT_SUPPORTED", "country", None),
        ({"provider": "acme_cm"}, 400, "UNKNOWN_PROVIDER", "provider", None),
        ({"provider": "mtn_gh"}, 400, "PROVIDER_COUNTRY_MISMATCH", "provider", None),
        ({"phone": "600000000"}, 400, "PHONE_NOT_RECOGNISED", "phone", None),
        ({"phone": "67000000"}, 400, "PHONE_NOT_RECOGNISED", "phone", None),
        ({"phone": "+237670000000"}, 400, "INVALID_REQUEST", "phone", None),
        ({"phone": "690000000"}, 400, "PHONE_PROVIDER_MISMATCH", "phone", None),
        ({"phone": None}, 400, "INVALID_REQUEST", "phone", None),
        ({"merchantReference": "x" * 121}, 400, "INVALID_REQUEST", "merchantReference", None),
    ],
)
def test_charge_refusals(
    client: Client, change: dict[str, Any], status: int, code: str, param: str, details: Any
) -> None:
    body = {**CHARGE, **change}
    body = {k: v for k, v in body.items() if v is not None}
    error = assert_error(client.post("/v1/collect/charge", body), status, code, param)
    if details is not None:
        assert error["details"] == details
    client.settle()
    nothing_written(client)


def test_blocked_provider_and_busy_recipient(client: Client, clock: Any) -> None:
    client.core.operator.block_provider(client.merchant.id, "mtn_cm")
    assert_error(client.post("/v1/collect/charge", CHARGE), 403, "PROVIDER_BLOCKED", "provider")
    client.core.operator.block_provider(client.merchant.id, "mtn_cm", blocked=False)
    limit = client.core.config.prompt_limit
    for _ in range(limit):
        assert client.post("/v1/collect/charge", CHARGE).status_code == 202
    assert_error(client.post("/v1/collect/charge", CHARGE), 403, "RECIPIENT_BUSY", "phone")
    clock.advance(client.core.config.prompt_window_seconds + 1)
    assert client.post("/v1/collect/charge", CHARGE).status_code == 202


def test_charge_settles_to_success_with_the_net_amount(client: Client) -> None:
    client.core.operator.set_collect_fee(client.merchant.id, "2.5")
    response = client.post("/v1/collect/charge", {**CHARGE, "merchantReference": "order-1"})
    assert response.status_code == 202
    charge = response.json()
    assert set(charge) == CHARGE_FIELDS
    assert charge["status"] == "PENDING" and charge["provider"] == "mtn_cm"
    assert charge["amount"] == 5000 and charge["merchantReference"] == "order-1"
    assert charge["reference"].startswith("REQ-")
    client.settle()
    record = client.get(f"/v1/collect/{charge['reference']}").json()
    assert set(record) == RECORD_FIELDS
    assert record["status"] == "SUCCESS"
    assert record["providerCode"] == "mtn_cm" and record["method"] == "MOBILE_MONEY"
    assert record["amount"] == 4875 and record["currency"] == "XAF"  # 5000 less 2.5 % (125)
    assert record["requestedAmount"] == 5000 and record["failureCategory"] is None
    assert client.core.operator.balances(client.merchant.id) == [
        MerchantBalance(currency="XAF", available=Decimal(4875), reserved=Decimal(0))
    ]
    client.core.check_ledger(client.merchant.id, "XAF")


@pytest.mark.parametrize(
    ("phone", "category"),
    [("670000011", "PAYER_DECLINED"), ("670000012", "INSUFFICIENT_FUNDS"), ("670000013", "TIMEOUT")],
)
def test_sandbox_failures(client: Client, phone: str, category: str) -> None:
    reference = client.post("/v1/collect/charge", {**CHARGE, "phone": phone}).json()["reference"]
    client.settle()
    record = client.get(f"/v1/collect/{reference}").json()
    assert record["status"] == "FAILED" and record["failureCategory"] == category
    assert record["amount"] == 5000
    assert client.core.operator.balances(client.merchant.id) == []


def test_checkout_record_and_defaults(client: Client) -> None:
    response = client.post(
        "/v1/collect/checkout", {"amount": Decimal("12.5"), "currency": "USD", "reference": "inv-9"}
    )
    assert response.status_code == 201
    record = response.json()
    assert set(record) == RECORD_FIELDS
    assert record["status"] == "PENDING" and record["amount"] == Decimal("12.50")
    assert '"amount":12.50' in response.text
    assert record["currency"] == "USD" and record["requestedCurrency"] == "USD"
    assert record["merchantReference"] == "inv-9"
    assert record["description"] == "Payment to Test Shop"
    assert record["method"] is None and record["providerCode"] is None
    assert record["checkoutUrl"].endswith(f"/checkout/{record['reference']}")
    assert (
        record["expiresAt"] == "2026-01-01T01:00:00.000Z"
        and record["createdAt"] == "2026-01-01T00:00:00.000Z"
    )


@pytest.mark.parametrize(
    ("change", "code", "param"),
    [
        ({"description": "d" * 201}, "INVALID_REQUEST", "description"),
        ({"merchantReference": "r" * 121}, "INVALID_REQUEST", "merchantReference"),
        ({"expiresInMinutes": 10081}, "INVALID_REQUEST", "expiresInMinutes"),
        ({"expiresInMinutes": 0}, "INVALID_REQUEST", "expiresInMinutes"),
        ({"expiresInMinutes": "60"}, "INVALID_REQUEST", "expiresInMinutes"),
        ({"currency": "ABC"}, "UNKNOWN_CURRENCY", "currency"),
        ({"amount": Decimal("1.234")}, "AMOUNT_PRECISION", "amount"),
    ],
)
def test_checkout_refusals(client: Client, change: dict[str, Any], code: str, param: str) -> None:
    body = {"amount": 10, "currency": "USD", **change}
    assert_error(client.post("/v1/collect/checkout", body), 400, code, param)
    nothing_written(client)


def test_checkout_accepts_every_active_currency(client: Client) -> None:
    for currency, amount in (
        ("XAF", 1000),
        ("XOF", 1000),
        ("USD", 5),
        ("EUR", 5),
        ("BTC", Decimal("0.0001")),
    ):
        response = client.post("/v1/collect/checkout", {"amount": amount, "currency": currency})
        assert response.status_code == 201, response.text
        assert response.json()["expiresAt"] is not None
    assert (
        client.post(
            "/v1/collect/checkout", {"amount": 5, "currency": "EUR", "expiresInMinutes": 10080}
        ).status_code
        == 201
    )


def test_legacy_payments_path(client: Client) -> None:
    response = client.post("/v1/payments", {"amount": 10, "currency": "USD", "reference": "legacy-1"})
    assert response.status_code == 201
    record = response.json()
    assert set(record) == RECORD_FIELDS - {"method", "providerCode"}
    assert record["merchantReference"] == "legacy-1"
    assert record["currency"] == "XAF" and record["amount"] == 6035  # 10 USD at 603.48 XAF per USD
    assert record["requestedAmount"] == 10 and record["requestedCurrency"] == "USD"
    again = client.get(f"/v1/payments/{record['reference']}").json()
    assert again == record


def test_usd_checkout_paid_with_orange_cameroon_settles_in_xaf(client: Client) -> None:
    record = client.post("/v1/collect/checkout", {"amount": 10, "currency": "USD"}).json()
    page = client.http.get(f"/checkout/{record['reference']}")
    assert page.status_code == 200 and "name='provider'" in page.text and "name='phone'" in page.text
    submitted = client.http.post(
        f"/checkout/{record['reference']}",
        data={"provider": "orange_cm", "phone": "690000000"},
        follow_redirects=False,
    )
    assert submitted.status_code == 303
    client.settle()
    final = client.get(f"/v1/collect/{record['reference']}").json()
    assert final["status"] == "SUCCESS" and final["providerCode"] == "orange_cm"
    assert final["currency"] == "XAF" and final["amount"] == 6035
    assert final["requestedAmount"] == 10 and final["requestedCurrency"] == "USD"
    assert final["checkoutUrl"] is None
    page = client.http.get(f"/checkout/{record['reference']}")
    assert "data-status='SUCCESS'" in page.text and "<form" not in page.text
    client.core.check_ledger(client.merchant.id, "XAF")


def test_other_merchants_reference_is_a_plain_404(client: Client) -> None:
    reference = client.post("/v1/collect/charge", CHARGE).json()["reference"]
    other = client.core.operator.create_merchant("Other")
    key = client.core.operator.create_key(other.id, ["collect"]).api_key
    theirs = client.get(f"/v1/collect/{reference}", key=key)
    missing = client.get("/v1/collect/REQ-1-NOPE", key=key)
    assert theirs.status_code == missing.status_code == 404
    a, b = theirs.json(), missing.json()
    a.pop("requestId"), b.pop("requestId")
    assert a == b


def test_same_key_same_body_sends_one_prompt(client: Client) -> None:
    first = client.post("/v1/collect/charge", CHARGE, idem="charge-1")
    second = client.post("/v1/collect/charge", CHARGE, idem="charge-1")
    assert first.status_code == second.status_code == 202
    assert first.json() == second.json()
    client.settle()
    assert client.sandbox.prompt_count == 1
    conflict = client.post("/v1/collect/charge", {**CHARGE, "amount": 6000}, idem="charge-1")
    assert_error(conflict, 409, "IDEMPOTENCY_KEY_REUSED")
    assert_error(client.post("/v1/collect/charge", CHARGE, idem="k" * 201), 400, "IDEMPOTENCY_KEY_TOO_LONG")


def test_twenty_threads_with_one_key_make_one_collection(client: Client) -> None:
    barrier = threading.Barrier(20)
    results: list[tuple[int, str]] = []
    lock = threading.Lock()

    def call() -> None:
        barrier.wait()
        response = client.post("/v1/collect/checkout", {"amount": 1000, "currency": "XAF"}, idem="same")
        with lock:
            results.append((response.status_code, response.json()["reference"]))

    threads = [threading.Thread(target=call) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 20
    assert {status for status, _ in results} == {201}
    assert len({reference for _, reference in results}) == 1


def test_balance_equals_sum_of_net_settled(client: Client) -> None:
    client.core.operator.set_collect_fee(client.merchant.id, "1")
    phones = ["670000000", "670000011", "650000001", "690000002", "670000013"]
    for phone in phones:
        provider = "orange_cm" if phone.startswith("69") else "mtn_cm"
        body = {**CHARGE, "phone": phone, "provider": provider, "amount": 3333}
        assert client.post("/v1/collect/charge", body).status_code == 202
    client.settle()
    with client.core.store.read() as tx:
        balance = tx.ledger.balance(client.merchant.id, "XAF")
    net = (3333 - 33) * 3  # three successes, fee 1 % of 3333 rounded half up to 33
    assert balance.available == net == balance.credited
    client.core.check_ledger(client.merchant.id, "XAF")


def test_balances_endpoint(client: Client) -> None:
    client.post("/v1/collect/charge", CHARGE)
    client.settle()
    response = client.get("/v1/account/balances")
    assert response.status_code == 200
    assert response.json() == {"balances": [{"currency": "XAF", "available": 5000, "reserved": 0}]}


def test_collection_status_is_a_known_value(client: Client) -> None:
    reference = client.post("/v1/collect/charge", CHARGE).json()["reference"]
    status = client.get(f"/v1/collect/{reference}").json()["status"]
    assert status in {s.value for s in CollectionStatus}
