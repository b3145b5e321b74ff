"""Bulk payouts over HTTP (issue 28), on SQLite and PostgreSQL: POST /v1/disburse/bulk and its batch.

Both modes, every refusal of a single payout as an item's error, the 400s of a malformed batch, the
idempotent replay of the whole request, ceilings and balance counted in item order, review, tenancy,
the progress of the batch as the worker moves its payouts, ``disburse.bulk.completed`` (once, signed),
one rate-limit count per request, and another merchant's payout not waiting behind a batch.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from paymentcore.testing import CapturingSender, fund

from conftest import Client
from test_api_foundation import assert_error
from test_disburse_http import balance

PAYOUT = {"amount": 1000, "currency": "XAF", "phone": "670000000"}
BATCH_FIELDS = {
    "id",
    "mode",
    "status",
    "createdAt",
    "completedAt",
    "itemCount",
    "acceptedCount",
    "refusedCount",
    "totals",
    "progress",
    "items",
    "hasMore",
}
STATUSES = ["PENDING", "SENT", "PAID", "FAILED", "REJECTED"]


def item(reference: str, **fields: Any) -> dict[str, Any]:
    return {**PAYOUT, "merchantReference": reference, **fields}


def bulk(client: Client, items: Any, idem: str | None, mode: Any = "each", **extra: Any) -> Any:
    body = {"mode": mode, "items": items, **extra}
    return client.post("/v1/disburse/bulk", body, key=client.disburse_key, idem=idem)


def created(client: Client, items: Any, idem: str, mode: str = "each") -> dict[str, Any]:
    response = bulk(client, items, idem, mode)
    assert response.status_code == 201, response.text
    batch: dict[str, Any] = response.json()
    return batch


def read(client: Client, batch_id: str, query: str = "") -> dict[str, Any]:
    response = client.get(f"/v1/disburse/bulk/{batch_id}{query}", key=client.disburse_key)
    assert response.status_code == 200, response.text
    batch: dict[str, Any] = response.json()
    return batch


def progress(batch: dict[str, Any], currency: str = "XAF") -> dict[str, tuple[int, Any]]:
    return {
        row["status"]: (row["count"], row["amount"])
        for row in batch["progress"]
        if row["currency"] == currency
    }


def listed(client: Client, query: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/disburse?{query}", key=client.disburse_key)
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()["data"]
    return rows


@pytest.fixture
def funded(client: Client) -> Client:
    fund(client.core, client.merchant.id, "XAF", 10_000)
    return client


# --- the two modes ---------------------------------------------------------------------------------


def test_each_mode_accepts_and_refuses_every_item_on_its_own(funded: Client) -> None:
    items = [
        item("a", recipientName="Ada"),
        item("b", amount=Decimal("100.5")),
        item("c", amount=2000, phone="690000000"),
        item("d", currency="ZZZ"),
    ]
    batch = created(funded, items, "each-1")
    assert set(batch) == BATCH_FIELDS
    assert batch["id"].startswith("bat_") and batch["mode"] == "each" and batch["status"] == "PROCESSING"
    assert batch["completedAt"] is None and batch["hasMore"] is False
    assert (batch["itemCount"], batch["acceptedCount"], batch["refusedCount"]) == (4, 2, 2)
    assert batch["totals"] == [{"currency": "XAF", "count": 2, "amount": 3000}]
    assert [row["status"] for row in batch["progress"]] == STATUSES
    assert progress(batch)["PENDING"] == (2, 3000) and progress(batch)["PAID"] == (0, 0)
    assert [entry["index"] for entry in batch["items"]] == [0, 1, 2, 3]
    assert [entry["merchantReference"] for entry in batch["items"]] == ["a", "b", "c", "d"]
    a, b, c, d = batch["items"]
    assert a["error"] is None and c["error"] is None
    assert a["payout"]["status"] == "PENDING" and a["payout"]["awaitingReview"] is False
    assert b["payout"] is None and d["payout"] is None
    assert b["error"]["code"] == "AMOUNT_PRECISION" and b["error"]["param"] == "amount"
    assert d["error"] == {
        "code": "UNKNOWN_CURRENCY",
        "message": d["error"]["message"],
        "param": "currency",
    }
    assert balance(funded) == (7000, 3000, 0)  # only the accepted items are reserved

    # each accepted item is an ordinary payout of the merchant, listed by its batch
    single = funded.get(f"/v1/disburse/{c['payout']['reference']}", key=funded.disburse_key).json()
    assert single["amount"] == 2000 and single["merchantReference"] == "c" and single["phone"] == "690000000"
    assert (
        funded.get(f"/v1/disburse/{a['payout']['reference']}", key=funded.disburse_key).json()[
            "recipientName"
        ]
        == "Ada"
    )
    refs = {row["reference"] for row in listed(funded, f"batch={batch['id']}")}
    assert refs == {a["payout"]["reference"], c["payout"]["reference"]}
    assert pay_single(funded, "alone").status_code == 201
    assert len(listed(funded, "limit=100")) == 3 and len(listed(funded, f"batch={batch['id']}")) == 2
    assert listed(funded, "batch=bat_unknown") == []


def pay_single(client: Client, idem: str, **fields: Any) -> Any:
    return client.post("/v1/disburse", {**PAYOUT, **fields}, key=client.disburse_key, idem=idem)


def test_all_mode_is_all_or_none_and_a_refusal_reserves_nothing(funded: Client) -> None:
    items = [item("p1", amount=4000), item("p2", amount=4000), item("p3", amount=4000), item("p4", phone="1")]
    response = bulk(funded, items, "payroll", "all")
    error = assert_error(response, 422, "BATCH_REFUSED")
    assert "2 of 4" in error["message"]
    details = error["details"]
    assert (details["itemCount"], details["refusedCount"]) == (4, 2)
    assert [(entry["index"], entry["merchantReference"]) for entry in details["items"]] == [
        (2, "p3"),
        (3, "p4"),
    ]
    short = details["items"][0]["error"]
    assert short["code"] == "INSUFFICIENT_BALANCE" and short["param"] == "amount"
    assert short["details"] == {"available": 2000, "required": 4000, "currency": "XAF"}  # after p1 and p2
    assert details["items"][1]["error"]["param"] == "phone"
    assert balance(funded) == (10_000, 0, 0)
    assert listed(funded, "limit=100") == []
    with funded.core.store.read() as tx:
        assert tx.ledger.entries(funded.merchant.id, "XAF")[-1].kind == "credit"  # no reservation at all

    # nothing was kept, so the same key takes the corrected batch
    fixed = created(
        funded, [item("p1", amount=4000), item("p2", amount=4000), item("p3", amount=2000)], "payroll", "all"
    )
    assert fixed["mode"] == "all" and fixed["acceptedCount"] == 3 and fixed["refusedCount"] == 0
    assert balance(funded) == (0, 10_000, 0)


def test_an_each_batch_that_accepts_nothing_is_complete_at_once(funded: Client) -> None:
    secret = funded.core.webhooks.register(
        funded.merchant.id, url="https://shop.example/hooks"
    ).signing_secret
    batch = created(funded, [item("x", currency="ZZZ"), item("y", amount=0)], "none")
    assert batch["acceptedCount"] == 0 and batch["status"] == "COMPLETED" and batch["completedAt"]
    assert batch["totals"] == [] and batch["progress"] == []
    funded.settle()
    [delivery] = completed_deliveries(funded)
    event = delivery.construct(secret)
    assert event.is_batch and event.reference == batch["id"] and event.data["refusedCount"] == 2


# --- every rule of a single payout, per item -------------------------------------------------------

REFUSALS: list[tuple[dict[str, Any], str]] = [
    ({"currency": "ZZZ"}, "UNKNOWN_CURRENCY"),
    ({"currency": "USD"}, "UNKNOWN_CURRENCY"),
    ({"amount": 0}, "INVALID_REQUEST"),
    ({"amount": -100}, "INVALID_REQUEST"),
    ({"amount": "1000"}, "INVALID_REQUEST"),
    ({"amount": None}, "INVALID_REQUEST"),
    ({"amount": Decimal("100.5")}, "AMOUNT_PRECISION"),
    ({"amount": 50}, "AMOUNT_TOO_SMALL"),
    ({"amount": 10**12}, "AMOUNT_TOO_LARGE"),
    ({"phone": "6" * 33}, "INVALID_REQUEST"),
    ({"phone": None}, "INVALID_REQUEST"),
    ({"recipientName": "n" * 121}, "INVALID_REQUEST"),
    ({"merchantReference": "m" * 121}, "INVALID_REQUEST"),
    ({"currency": "XOF"}, "CURRENCY_MISMATCH"),
    ({"provider": "orange_cm"}, "PHONE_PROVIDER_MISMATCH"),
    ({"provider": "mtn_gh"}, "PROVIDER_COUNTRY_MISMATCH"),
    ({"provider": "nope"}, "UNKNOWN_PROVIDER"),
    ({"country": "ZZ"}, "COUNTRY_NOT_SUPPORTED"),
    ({"phone": "600000000"}, "PHONE_NOT_RECOGNISED"),
    ({"amount": 12_000}, "INSUFFICIENT_BALANCE"),
    ({"amount": 16_000}, "PAYOUT_LIMIT_EXCEEDED"),  # the per-payout ceiling set below
    ({"phone": "690000000"}, "PROVIDER_BLOCKED"),  # orange_cm, blocked below
    ({"currency": "XOF", "country": "SN", "phone": "770000000"}, "PAYOUTS_NOT_CONFIGURED"),  # closed
]


def test_every_refusal_of_a_single_payout_is_the_same_items_error(funded: Client) -> None:
    """Each body refused as a single payout is refused as an item with exactly the same error (code,
    message, param, details), and moves nothing; the accepted item after them is still created."""
    op = funded.core.operator
    op.set_limits(funded.merchant.id, "XAF", per_transaction=15_000)
    op.block_provider(funded.merchant.id, "orange_cm")
    op.set_currency_payouts("XOF", False)
    singles = []
    for number, (fields, code) in enumerate(REFUSALS):
        response = pay_single(funded, f"single-{number}", **fields)
        expected = assert_error(response, response.status_code, code)
        expected.pop("requestId")
        singles.append(expected)
    assert balance(funded) == (10_000, 0, 0)
    items = [{**item(f"r{number}"), **fields} for number, (fields, _) in enumerate(REFUSALS)]
    items[12]["merchantReference"] = "m" * 121
    batch = created(funded, [*items, item("last")], "refusals")
    assert batch["refusedCount"] == len(REFUSALS) and batch["acceptedCount"] == 1
    for entry, single in zip(batch["items"], singles, strict=False):
        assert entry["payout"] is None
        assert entry["error"] == single, entry["index"]
    assert batch["items"][-1]["payout"]["status"] == "PENDING"
    assert balance(funded) == (9000, 1000, 0)
    # a batch read later shows the same errors
    page = read(funded, batch["id"], "?limit=100")
    assert [entry["error"] for entry in page["items"]] == [entry["error"] for entry in batch["items"]]


def test_platform_switch_and_account_state_refuse_the_request_as_for_a_single_payout(funded: Client) -> None:
    op = funded.core.operator
    op.set_platform_payouts(False)
    assert_error(bulk(funded, [item("a")], "off"), 403, "CAPABILITY_DISABLED")
    op.set_platform_payouts(True)
    op.suspend_merchant(funded.merchant.id)
    assert_error(bulk(funded, [item("a")], "suspended"), 403, "MERCHANT_NOT_APPROVED")
    op.approve_merchant(funded.merchant.id)
    op.set_merchant_payouts(funded.merchant.id, False)  # an account switch is a currency's: per item
    batch = created(funded, [item("a")], "disabled")
    assert batch["items"][0]["error"]["code"] == "PAYOUTS_NOT_CONFIGURED"
    assert balance(funded) == (10_000, 0, 0)


# --- a malformed batch is refused whole --------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"mode": "each"}, "items"),
        ({"mode": "each", "items": "a"}, "items"),
        ({"mode": "each", "items": {"0": PAYOUT}}, "items"),
        ({"mode": "each", "items": []}, "items"),
        ({"mode": "each", "items": [item(f"r{n}") for n in range(1001)]}, "items[1000]"),
        ({"mode": "each", "items": [item("a"), 7]}, "items[1]"),
        ({"mode": "each", "items": [item("a"), [PAYOUT]]}, "items[1]"),
        ({"mode": "each", "items": [item("a"), PAYOUT]}, "items[1].merchantReference"),
        ({"mode": "each", "items": [item("a"), item("")]}, "items[1].merchantReference"),
        ({"mode": "each", "items": [item("a"), item(5)]}, "items[1].merchantReference"),  # type: ignore[arg-type]
        ({"mode": "each", "items": [item("a"), {**PAYOUT, "reference": "b"}]}, "items[1].merchantReference"),
        ({"mode": "each", "items": [item("a"), item("b"), item("a")]}, "items[2].merchantReference"),
        ({"items": [item("a")]}, "mode"),
        ({"mode": "some", "items": [item("a")]}, "mode"),
        ({"mode": "EACH", "items": [item("a")]}, "mode"),
    ],
)
def test_a_malformed_batch_is_refused_whole_naming_the_item(
    funded: Client, body: dict[str, Any], param: str
) -> None:
    response = funded.post("/v1/disburse/bulk", body, key=funded.disburse_key, idem="bad")
    error = assert_error(response, 400, "INVALID_REQUEST", param)
    if param.startswith("items["):
        assert error["details"]["index"] == int(param[6 : param.index("]")])
        assert param in error["message"]
    if param == "items[2].merchantReference":
        assert error["details"]["sameAs"] == 0
    assert balance(funded) == (10_000, 0, 0) and listed(funded, "limit=100") == []
    # nothing was kept under the key: a good request with it is taken
    assert bulk(funded, [item("a")], "bad").status_code == 201


def test_the_request_needs_a_key_a_json_object_and_the_disburse_scope(funded: Client) -> None:
    assert_error(bulk(funded, [item("a")], None), 400, "IDEMPOTENCY_KEY_REQUIRED", "Idempotency-Key")
    assert_error(bulk(funded, [item("a")], "k" * 201), 400, "IDEMPOTENCY_KEY_TOO_LONG")
    assert_error(
        funded.post("/v1/disburse/bulk", [item("a")], key=funded.disburse_key, idem="arr"),
        400,
        "INVALID_REQUEST",
    )
    assert_error(
        funded.post("/v1/disburse/bulk", {"mode": "each", "items": [item("a")]}, idem="c"),
        403,
        "INSUFFICIENT_SCOPE",
    )
    assert_error(funded.get("/v1/disburse/bulk/bat_x"), 403, "INSUFFICIENT_SCOPE")
    assert_error(funded.http.post("/v1/disburse/bulk", content=b"{}"), 401, "UNAUTHORIZED")
    assert balance(funded) == (10_000, 0, 0)


# --- idempotency -------------------------------------------------------------------------------------


def test_the_same_key_replays_the_whole_batch_and_another_body_is_refused(funded: Client) -> None:
    items = [item("a"), item("b", amount=2000), item("c", currency="ZZZ")]
    first = bulk(funded, items, "same")
    assert first.status_code == 201
    again = bulk(funded, items, "same")
    assert again.status_code == 201 and again.json() == first.json()
    assert balance(funded) == (7000, 3000, 0)
    funded.settle()  # the payouts are PAID now: a replay still answers the batch as created
    later = bulk(funded, items, "same").json()
    assert later == first.json() and later["items"][0]["payout"]["status"] == "PENDING"
    assert balance(funded) == (7000, 0, 3000)
    for other in (
        [item("a"), item("b", amount=2001), item("c", currency="ZZZ")],
        [item("a"), item("b", amount=2000)],
        [item("b", amount=2000), item("a"), item("c", currency="ZZZ")],
    ):
        assert_error(bulk(funded, other, "same"), 409, "IDEMPOTENCY_KEY_REUSED", "Idempotency-Key")
    assert_error(bulk(funded, items, "same", "all"), 409, "IDEMPOTENCY_KEY_REUSED")
    assert_error(pay_single(funded, "same"), 409, "IDEMPOTENCY_KEY_REUSED")  # one key, one request
    assert len(listed(funded, "limit=100")) == 2 and balance(funded) == (7000, 0, 3000)


# --- ceilings, balance and review, in item order ---------------------------------------------------


def test_ceilings_and_balance_are_counted_in_item_order(funded: Client) -> None:
    funded.core.operator.set_limits(funded.merchant.id, "XAF", per_transaction=2500, per_day=5000)
    assert pay_single(funded, "before", amount=1000).status_code == 201  # already spent today
    items = [
        item("a", amount=2000),
        item("b", amount=3000),  # over the per-payout ceiling
        item("c", amount=1500),
        item("d", amount=1000),  # 1000 + 2000 + 1500 + 1000 > 5000
        item("e", amount=500),  # exactly 5000
        item("f", amount=100),
    ]
    batch = created(funded, items, "order")
    codes = [entry["error"]["code"] if entry["error"] else "OK" for entry in batch["items"]]
    assert codes == [
        "OK",
        "PAYOUT_LIMIT_EXCEEDED",
        "OK",
        "PAYOUT_LIMIT_EXCEEDED",
        "OK",
        "PAYOUT_LIMIT_EXCEEDED",
    ]
    assert batch["items"][1]["error"]["details"]["limit"] == "perTransaction"
    day = batch["items"][3]["error"]["details"]
    assert (day["limit"], day["spent"], day["remaining"]) == ("perDay", 4500, 500)
    assert batch["items"][5]["error"]["details"]["spent"] == 5000
    limits = funded.get("/v1/account/disburse-limits/XAF", key=funded.disburse_key).json()
    assert limits["spentToday"] == 5000 and limits["remainingToday"] == 0
    assert balance(funded) == (5000, 5000, 0)


def test_the_balance_is_spent_in_item_order(client: Client) -> None:
    fund(client.core, client.merchant.id, "XAF", 2500)
    items = [item("a"), item("b", amount=2000), item("c", amount=1500), item("d", amount=100)]
    batch = created(client, items, "balance")
    assert [entry["payout"] is not None for entry in batch["items"]] == [True, False, True, False]
    assert batch["items"][1]["error"]["details"] == {"available": 1500, "required": 2000, "currency": "XAF"}
    assert batch["items"][3]["error"]["details"] == {"available": 0, "required": 100, "currency": "XAF"}
    assert balance(client) == (0, 2500, 0)


def test_items_above_the_review_threshold_are_held_and_the_batch_waits_for_them(funded: Client) -> None:
    funded.core.operator.set_limits(funded.merchant.id, "XAF", review_threshold=2000)
    batch = created(funded, [item("small", amount=2000), item("big", amount=3000)], "review")
    small, big = batch["items"]
    assert small["payout"]["awaitingReview"] is False and big["payout"]["awaitingReview"] is True
    funded.settle()
    now = read(funded, batch["id"])
    assert now["status"] == "PROCESSING" and now["completedAt"] is None
    assert progress(now)["PAID"] == (1, 2000) and progress(now)["PENDING"] == (1, 3000)
    assert now["items"][1]["payout"] == {
        "reference": big["payout"]["reference"],
        "status": "PENDING",
        "awaitingReview": True,
    }
    funded.core.disburse.reject(big["payout"]["reference"])
    done = read(funded, batch["id"])
    assert done["status"] == "COMPLETED" and done["completedAt"]
    assert progress(done)["REJECTED"] == (1, 3000) and progress(done)["PENDING"] == (0, 0)
    assert balance(funded) == (8000, 0, 2000)


# --- reading a batch: progress, pages, tenancy --------------------------------------------------------


def test_progress_reaches_the_final_counts_and_the_completed_event_is_sent_once(funded: Client) -> None:
    secret = funded.core.webhooks.register(
        funded.merchant.id, url="https://shop.example/hooks"
    ).signing_secret
    items = [
        item("paid-1"),
        item("paid-2", amount=2000),
        item("refused", phone="670000021"),  # the network refuses it: FAILED
        item("failed-later", phone="670000022"),  # SENT, then FAILED
        item("nope", amount=1),
    ]
    batch = created(funded, items, "progress")
    assert progress(batch) == {
        "PENDING": (4, 5000),
        "SENT": (0, 0),
        "PAID": (0, 0),
        "FAILED": (0, 0),
        "REJECTED": (0, 0),
    }
    funded.settle()
    done = read(funded, batch["id"])
    assert done["status"] == "COMPLETED" and done["completedAt"] is not None
    assert progress(done) == {
        "PENDING": (0, 0),
        "SENT": (0, 0),
        "PAID": (2, 3000),
        "FAILED": (2, 2000),
        "REJECTED": (0, 0),
    }
    assert done["totals"] == batch["totals"] == [{"currency": "XAF", "count": 4, "amount": 5000}]
    assert [entry["payout"]["status"] if entry["payout"] else None for entry in done["items"]] == [
        "PAID",
        "PAID",
        "FAILED",
        "FAILED",
        None,
    ]
    [delivery] = completed_deliveries(funded)
    event = delivery.construct(secret)  # a valid signature, over the body as sent
    assert event.type == "disburse.bulk.completed" and event.status == "COMPLETED" and event.is_batch
    assert not event.is_payout and event.reference == batch["id"]
    body = delivery.json()
    assert body["event"] == "disburse.bulk.completed" and body["eventId"] == event.id
    data = body["data"]
    assert data["id"] == batch["id"] and data["completedAt"] == done["completedAt"]
    assert (data["itemCount"], data["acceptedCount"], data["refusedCount"]) == (5, 4, 1)
    assert data["progress"] == done["progress"] and data["totals"] == done["totals"]
    # the payouts' own events came first, and resolving a FAILED payout later sends no second one
    sender = funded.core.deps.sender
    assert isinstance(sender, CapturingSender)
    names = [d.event for d in sender.deliveries]
    assert names.index("disburse.bulk.completed") == len(names) - 1
    funded.core.disburse.resolve(done["items"][3]["payout"]["reference"])  # the money did move: PAID
    funded.settle()
    funded.core.tick()
    assert len(completed_deliveries(funded)) == 1
    assert progress(read(funded, batch["id"]))["PAID"] == (3, 4000)
    events = funded.get("/v1/events?limit=100", key=funded.disburse_key).json()["data"]
    assert [e["reference"] for e in events if e["type"] == "disburse.bulk.completed"] == [batch["id"]]
    filtered = funded.get("/v1/events?type=disburse.bulk.completed", key=funded.disburse_key)
    assert filtered.status_code == 200, filtered.text
    assert [e["reference"] for e in filtered.json()["data"]] == [batch["id"]]


def completed_deliveries(client: Client) -> list[Any]:
    sender = client.core.deps.sender
    assert isinstance(sender, CapturingSender)
    return [d for d in sender.deliveries if d.event == "disburse.bulk.completed"]


def test_the_items_are_read_a_page_at_a_time_in_request_order(funded: Client) -> None:
    items = [item(f"r{n:02}", amount=100) for n in range(25)]
    items[21] = item("r21", amount=1)  # refused: below the minimum
    batch = created(funded, items, "pages")
    assert len(batch["items"]) == 25 and batch["hasMore"] is False
    first = read(funded, batch["id"])
    assert [entry["index"] for entry in first["items"]] == list(range(20)) and first["hasMore"] is True
    rest = read(funded, batch["id"], "?startingAfter=19")
    assert [entry["index"] for entry in rest["items"]] == [20, 21, 22, 23, 24] and rest["hasMore"] is False
    assert rest["items"][1]["error"]["code"] == "AMOUNT_TOO_SMALL"
    small = read(funded, batch["id"], "?limit=2&startingAfter=20")
    assert [entry["merchantReference"] for entry in small["items"]] == ["r21", "r22"] and small["hasMore"]
    assert read(funded, batch["id"], "?startingAfter=24")["items"] == []
    for query, param in (
        ("?startingAfter=25", "startingAfter"),
        ("?startingAfter=x", "startingAfter"),
        ("?startingAfter=-1", "startingAfter"),
        ("?limit=0", "limit"),
        ("?limit=101", "limit"),
        ("?page=2", "page"),
    ):
        answer = funded.get(f"/v1/disburse/bulk/{batch['id']}{query}", key=funded.disburse_key)
        assert_error(answer, 400, "INVALID_REQUEST", param)


def test_another_merchants_batch_answers_as_an_unknown_one(funded: Client) -> None:
    batch = created(funded, [item("a")], "mine")
    other = funded.core.operator.create_merchant("Other")
    fund(funded.core, other.id, "XAF", 10_000)
    key = funded.core.operator.create_key(other.id, ["disburse"]).api_key
    theirs = funded.get(f"/v1/disburse/bulk/{batch['id']}", key=key)
    missing = funded.get("/v1/disburse/bulk/bat_nope", key=key)
    a, b = assert_error(theirs, 404, "NOT_FOUND"), assert_error(missing, 404, "NOT_FOUND")
    a.pop("requestId"), b.pop("requestId")
    assert a == b
    assert funded.get(f"/v1/disburse?batch={batch['id']}", key=key).json()["data"] == []
    # the same key and merchant reference in another account are that account's own
    answer = funded.post("/v1/disburse/bulk", {"mode": "each", "items": [item("a")]}, key=key, idem="mine")
    assert answer.status_code == 201 and answer.json()["id"] != batch["id"]
    assert balance(funded) == (9000, 1000, 0)


# --- counted fairly ----------------------------------------------------------------------------------


def test_one_bulk_request_counts_once_against_the_keys_rate_limit(funded: Client) -> None:
    key = funded.core.operator.create_key(funded.merchant.id, ["disburse"], per_minute=3, per_hour=100)
    body = {"mode": "each", "items": [item(f"r{n}", amount=100) for n in range(50)]}
    answer = funded.post("/v1/disburse/bulk", body, key=key.api_key, idem="rate-1")
    assert answer.status_code == 201 and answer.json()["acceptedCount"] == 50
    assert answer.headers["x-ratelimit-remaining"] == "2"
    assert funded.post("/v1/disburse/bulk", body, key=key.api_key, idem="rate-2").status_code == 201
    assert funded.get("/v1/disburse", key=key.api_key).status_code == 200
    assert_error(funded.get("/v1/disburse", key=key.api_key), 429, "RATE_LIMITED")


def test_a_batch_does_not_make_another_merchants_payout_wait(funded: Client) -> None:
    """The worker lists due payouts as a round over the merchants: a payout another merchant sends
    after a batch of 200 is among the first two the worker takes, not the 201st."""
    core = funded.core
    fund(core, funded.merchant.id, "XAF", 10_000)
    batch = created(funded, [item(f"r{n}", amount=100) for n in range(200)], "flood")
    assert batch["acceptedCount"] == 200
    other = core.operator.create_merchant("Other")
    fund(core, other.id, "XAF", 10_000)
    funded.clock.advance(seconds=1)
    single = core.disburse.create(
        other.id, amount=1000, currency="XAF", phone="670000000", idempotency_key="single"
    )
    due = core.disburse.runner.due(1000)
    assert [entry.key for entry in due[:2]][1] == single.reference
    core.disburse.process_due(limit=2)  # one round of two items: the single payout goes out now
    assert core.disburse.get(other.id, single.reference).status.value == "PAID"
    assert progress(read(funded, batch["id"]))["PENDING"][0] == 199


def test_a_nul_character_is_refused_in_the_documented_shape_on_every_engine(funded: Client) -> None:
    # PostgreSQL keeps no NUL in text: before the check this was a 500 there (psycopg DataError)
    batch = created(funded, [item("ok"), item("nul", recipientName="A\u0000da")], "nul-1")
    assert batch["items"][1]["payout"] is None
    assert batch["items"][1]["error"]["code"] == "INVALID_REQUEST"
    assert batch["items"][1]["error"]["param"] == "recipientName"
    assert batch["items"][0]["payout"]["status"] == "PENDING"
    key = funded.disburse_key
    assert funded.get("/v1/disburse/bulk/bat_%00", key=key).status_code == 404
    listed = funded.get("/v1/disburse?batch=bat_%00", key=key)
    assert listed.status_code == 400 and listed.json()["param"] == "batch"
    single = funded.post("/v1/disburse", {**PAYOUT, "merchantReference": "x\u0000"}, key=key, idem="nul-2")
    assert single.status_code == 400 and single.json()["param"] == "merchantReference"
