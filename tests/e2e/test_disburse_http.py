"""Payouts over HTTP on SQLite: checks, limits, review, dispatch, resolution, reading."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from paymentcore.errors import InvalidTransitionError
from paymentcore.testing import fund

from conftest import Client
from test_api_foundation import assert_error

PAYOUT = {"amount": 1000, "currency": "XAF", "phone": "670000000"}
PAYOUT_FIELDS = {
    "reference",
    "status",
    "amount",
    "currency",
    "phone",
    "recipientName",
    "merchantReference",
    "providerReference",
    "awaitingReview",
    "statusReason",
    "createdAt",
}
LIMIT_FIELDS = {
    "currency",
    "enabled",
    "platformEnabled",
    "configured",
    "blockedBy",
    "message",
    "perTransaction",
    "perDay",
    "perWeek",
    "reviewThreshold",
    "spentToday",
    "spentThisWeek",
    "remainingToday",
    "remainingThisWeek",
}


def pay(client: Client, body: dict[str, Any], idem: str) -> Any:
    return client.post("/v1/disburse", body, key=client.disburse_key, idem=idem)


def balance(client: Client) -> tuple[int, int, int]:
    with client.core.store.read() as tx:
        b = tx.ledger.balance(client.merchant.id, "XAF")
    client.core.check_ledger(client.merchant.id, "XAF")
    return b.available, b.reserved, b.paid_out


@pytest.fixture
def funded(client: Client) -> Client:
    fund(client.core, client.merchant.id, "XAF", 10_000)
    return client


def test_payout_is_created_reserved_then_paid(funded: Client) -> None:
    response = pay(funded, {**PAYOUT, "recipientName": "Ada", "merchantReference": "w-1"}, "p1")
    assert response.status_code == 201
    record = response.json()
    assert set(record) == PAYOUT_FIELDS
    assert record["status"] == "PENDING" and record["reference"].startswith("PO-")
    assert record["awaitingReview"] is False and record["providerReference"] is None
    assert record["recipientName"] == "Ada" and record["merchantReference"] == "w-1"
    assert balance(funded) == (9000, 1000, 0)
    funded.settle()
    final = funded.get(f"/v1/disburse/{record['reference']}", key=funded.disburse_key).json()
    assert final["status"] == "PAID" and final["providerReference"]
    assert balance(funded) == (9000, 0, 1000)
    legacy = funded.get(f"/v1/payouts/{record['reference']}", key=funded.disburse_key).json()
    assert legacy == final


def test_same_key_returns_the_original_and_moves_nothing_twice(funded: Client) -> None:
    first = pay(funded, PAYOUT, "same")
    second = pay(funded, PAYOUT, "same")
    assert first.status_code == second.status_code == 201 and first.json() == second.json()
    assert balance(funded) == (9000, 1000, 0)
    assert_error(pay(funded, {**PAYOUT, "amount": 2000}, "same"), 409, "IDEMPOTENCY_KEY_REUSED")
    legacy = funded.post("/v1/payouts", PAYOUT, key=funded.disburse_key, idem="legacy-1")
    assert legacy.status_code == 201
    assert balance(funded) == (8000, 2000, 0)


@pytest.mark.parametrize(
    ("body", "idem", "status", "code", "param"),
    [
        (PAYOUT, None, 400, "IDEMPOTENCY_KEY_REQUIRED", None),
        (PAYOUT, "k" * 201, 400, "IDEMPOTENCY_KEY_TOO_LONG", None),
        ({**PAYOUT, "currency": "ZZZ"}, "a", 400, "UNKNOWN_CURRENCY", "currency"),
        ({**PAYOUT, "currency": "USD"}, "b", 400, "UNKNOWN_CURRENCY", "currency"),
        ({**PAYOUT, "amount": 0}, "c", 400, "INVALID_REQUEST", "amount"),
        ({**PAYOUT, "amount": -100}, "d", 400, "INVALID_REQUEST", "amount"),
        ({**PAYOUT, "amount": Decimal("100.5")}, "e", 400, "AMOUNT_PRECISION", "amount"),
        ({**PAYOUT, "amount": 50}, "f", 400, "AMOUNT_TOO_SMALL", "amount"),
        ({**PAYOUT, "phone": "6" * 33}, "g", 400, "INVALID_REQUEST", "phone"),
        ({**PAYOUT, "recipientName": "n" * 121}, "h", 400, "INVALID_REQUEST", "recipientName"),
        ({**PAYOUT, "merchantReference": "m" * 121}, "i", 400, "INVALID_REQUEST", "merchantReference"),
        ({**PAYOUT, "currency": "XOF"}, "j", 400, "CURRENCY_MISMATCH", "currency"),
        ({**PAYOUT, "provider": "orange_cm"}, "k", 400, "PHONE_PROVIDER_MISMATCH", "phone"),
        ({**PAYOUT, "provider": "mtn_gh"}, "l", 400, "PROVIDER_COUNTRY_MISMATCH", "provider"),
        ({**PAYOUT, "phone": "600000000"}, "m", 400, "PHONE_NOT_RECOGNISED", "phone"),
        ({**PAYOUT, "amount": 20_000}, "n", 400, "INSUFFICIENT_BALANCE", "amount"),
    ],
)
def test_refusals_move_nothing(
    funded: Client, body: dict[str, Any], idem: str | None, status: int, code: str, param: str | None
) -> None:
    assert_error(pay(funded, body, idem), status, code, param)  # type: ignore[arg-type]
    assert balance(funded) == (10_000, 0, 0)


def test_insufficient_balance_says_what_is_held_and_needed(funded: Client) -> None:
    error = assert_error(pay(funded, {**PAYOUT, "amount": 20_000}, "x"), 400, "INSUFFICIENT_BALANCE")
    assert error["details"] == {"available": 10000, "required": 20000, "currency": "XAF"}
    assert "10000" in error["message"] and "20000" in error["message"]


def test_provider_detected_and_country_default(funded: Client) -> None:
    record = pay(funded, {**PAYOUT, "phone": "690000000"}, "orange").json()
    assert record["status"] == "PENDING"
    with funded.core.store.read() as tx:
        stored = tx.payouts.get(record["reference"])
    assert stored is not None and stored.provider == "orange_cm" and stored.country == "CM"


def test_switches(funded: Client) -> None:
    op = funded.core.operator
    op.set_platform_payouts(False)
    assert_error(pay(funded, PAYOUT, "s1"), 403, "CAPABILITY_DISABLED")
    op.set_platform_payouts(True)
    op.set_merchant_payouts(funded.merchant.id, False)
    assert_error(pay(funded, PAYOUT, "s2"), 403, "PAYOUTS_NOT_CONFIGURED")
    op.set_merchant_payouts(funded.merchant.id, True)
    op.set_currency_payouts("XAF", False)
    assert_error(pay(funded, PAYOUT, "s3"), 403, "PAYOUTS_NOT_CONFIGURED")
    op.set_currency_payouts("XAF", True)
    assert pay(funded, PAYOUT, "s4").status_code == 201


def test_limits_record_and_blocked_by(funded: Client) -> None:
    path = "/v1/account/disburse-limits/XAF"
    record = funded.get(path, key=funded.disburse_key).json()
    assert set(record) == LIMIT_FIELDS
    assert record["enabled"] is True and record["blockedBy"] is None and record["message"] is None
    assert record["perTransaction"] == 5_000_000 and record["perDay"] is None
    assert record["remainingToday"] is None and record["spentToday"] == 0
    assert funded.get("/v1/payout-limits/XAF", key=funded.disburse_key).json() == record
    op = funded.core.operator
    for switch, blocked in (
        (lambda on: op.set_platform_payouts(on), "PLATFORM"),
        (lambda on: op.set_merchant_payouts(funded.merchant.id, on), "ACCOUNT_DISABLED"),
        (lambda on: op.set_currency_payouts("XAF", on), "CURRENCY_CLOSED"),
    ):
        switch(False)
        off = funded.get(path, key=funded.disburse_key).json()
        assert off["enabled"] is False and off["blockedBy"] == blocked and off["message"]
        assert "perTransaction" not in off
        assert off["enabled"] == (off["platformEnabled"] and off["configured"])
        switch(True)
    assert_error(
        funded.get("/v1/account/disburse-limits/ZZZ", key=funded.disburse_key), 400, "UNKNOWN_CURRENCY"
    )
    assert_error(funded.get(path), 403, "INSUFFICIENT_SCOPE")


def test_ceilings(funded: Client) -> None:
    funded.core.operator.set_limits(
        funded.merchant.id, "XAF", per_transaction=3000, per_day=4000, per_week=5000
    )
    error = assert_error(pay(funded, {**PAYOUT, "amount": 3500}, "t1"), 403, "PAYOUT_LIMIT_EXCEEDED")
    assert error["details"]["limit"] == "perTransaction" and error["details"]["ceiling"] == 3000
    assert pay(funded, {**PAYOUT, "amount": 3000}, "t2").status_code == 201
    error = assert_error(pay(funded, {**PAYOUT, "amount": 1500}, "t3"), 403, "PAYOUT_LIMIT_EXCEEDED")
    assert error["details"]["limit"] == "perDay" and error["details"]["ceiling"] == 4000
    assert pay(funded, {**PAYOUT, "amount": 1000}, "t4").status_code == 201
    record = funded.get("/v1/account/disburse-limits/XAF", key=funded.disburse_key).json()
    assert (
        record["spentToday"] == 4000 and record["remainingToday"] == 0 and record["remainingThisWeek"] == 1000
    )
    funded.clock.advance(hours=24, seconds=1)
    error = assert_error(pay(funded, {**PAYOUT, "amount": 1500}, "t5"), 403, "PAYOUT_LIMIT_EXCEEDED")
    assert error["details"]["limit"] == "perWeek"
    record = funded.get("/v1/account/disburse-limits/XAF", key=funded.disburse_key).json()
    assert record["spentToday"] == 0 and record["spentThisWeek"] == 4000
    assert balance(funded)[0] + balance(funded)[1] + balance(funded)[2] == 10_000


def test_rolling_day_boundary(funded: Client) -> None:
    funded.core.operator.set_limits(funded.merchant.id, "XAF", per_day=1000, per_week=2000)
    assert pay(funded, PAYOUT, "r1").status_code == 201
    funded.clock.advance(hours=24)
    assert pay(funded, PAYOUT, "r2").status_code == 403  # exactly 24 h old still counts
    funded.clock.advance(seconds=1)
    assert pay(funded, PAYOUT, "r3").status_code == 201  # 24 h and 1 s old no longer counts for the day
    assert_error(pay(funded, PAYOUT, "r4"), 403, "PAYOUT_LIMIT_EXCEEDED")  # the week still sees both


def test_review_release_and_reject(funded: Client) -> None:
    funded.core.operator.set_limits(funded.merchant.id, "XAF", review_threshold=2000)
    small = pay(funded, {**PAYOUT, "amount": 2000}, "v0").json()
    assert small["awaitingReview"] is False
    held = pay(funded, {**PAYOUT, "amount": 2500}, "v1").json()
    assert held["awaitingReview"] is True and held["statusReason"]
    funded.settle()
    assert (
        funded.get(f"/v1/disburse/{held['reference']}", key=funded.disburse_key).json()["status"] == "PENDING"
    )
    released = funded.core.disburse.release(held["reference"])
    assert released.status.value in ("SENT", "PAID") and not released.awaiting_review
    with pytest.raises(InvalidTransitionError):
        funded.core.disburse.release(held["reference"])
    other = pay(funded, {**PAYOUT, "amount": 3000}, "v2").json()
    before = balance(funded)
    rejected = funded.core.disburse.reject(other["reference"])
    assert rejected.status.value == "REJECTED"
    after = balance(funded)
    assert after[0] == before[0] + 3000 and after[1] == before[1] - 3000
    with pytest.raises(InvalidTransitionError):
        funded.core.disburse.reject(other["reference"])
    assert balance(funded) == after
    spent = funded.get("/v1/account/disburse-limits/XAF", key=funded.disburse_key).json()["spentToday"]
    assert spent == 4500  # the rejected payout no longer counts


@pytest.mark.parametrize(
    ("phone", "status_after_dispatch", "moved"),
    [("670000021", "FAILED", False), ("670000022", "FAILED", True), ("670000023", "SENT", False)],
)
def test_sandbox_payout_outcomes_and_resolution(
    funded: Client, phone: str, status_after_dispatch: str, moved: bool
) -> None:
    record = pay(funded, {**PAYOUT, "phone": phone}, "o").json()
    funded.settle()
    current = funded.get(f"/v1/disburse/{record['reference']}", key=funded.disburse_key).json()
    assert current["status"] == status_after_dispatch
    if status_after_dispatch == "FAILED":
        assert current["statusReason"]
    assert balance(funded) == (9000, 1000, 0)  # still reserved
    resolved = funded.core.disburse.resolve(record["reference"])
    if moved:
        assert resolved.status.value == "PAID"
        assert balance(funded) == (9000, 0, 1000)
    else:
        assert resolved.status.value == "FAILED"
        assert balance(funded) == (10_000, 0, 0)
    with pytest.raises(InvalidTransitionError):
        funded.core.disburse.resolve(record["reference"])
    assert balance(funded) == ((9000, 0, 1000) if moved else (10_000, 0, 0))


def test_dispatch_sends_each_payout_once(funded: Client) -> None:
    refs = [pay(funded, PAYOUT, f"d{i}").json()["reference"] for i in range(3)]
    funded.settle()
    funded.core.tick()
    assert all(funded.sandbox.payouts_sent[ref] == 1 for ref in refs)


def test_reading_rules(funded: Client) -> None:
    reference = pay(funded, PAYOUT, "read").json()["reference"]
    assert_error(funded.get(f"/v1/disburse/{reference}"), 403, "INSUFFICIENT_SCOPE")
    other = funded.core.operator.create_merchant("Other")
    key = funded.core.operator.create_key(other.id, ["disburse"]).api_key
    theirs = funded.get(f"/v1/disburse/{reference}", key=key)
    missing = funded.get("/v1/disburse/PO-1-NOPE", key=key)
    assert theirs.status_code == missing.status_code == 404
    a, b = theirs.json(), missing.json()
    a.pop("requestId"), b.pop("requestId")
    assert a == b
