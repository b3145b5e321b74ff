"""``paymentcore.client`` against scripted answers (``httpx.MockTransport``): what it sends, how it
retries, how it reads every record and every kind of error answer.

The served tests (tests/e2e/test_client_served.py) prove the same client against a real server; here
the answers are chosen, so the rare ones (a 500, a proxy's 502 page, a ``Retry-After`` date, an unknown
error code, a malformed record) are covered too, without waiting for real time (sleeps are recorded).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from types import MappingProxyType
from typing import Any

import attrs
import httpx
import pytest

from paymentcore import (
    BatchItem,
    BatchMode,
    BatchPayout,
    BatchProgress,
    BatchRefusedError,
    BatchStatus,
    BatchTotal,
    Collection,
    CollectionKind,
    CollectionStatus,
    EventDelivery,
    EventDeliveryStatus,
    EventRecord,
    EventSummary,
    IdempotencyKeyReusedError,
    InsufficientBalanceError,
    InvalidRequestError,
    ItemError,
    LedgerItem,
    LedgerItemType,
    MerchantBalance,
    NotFoundError,
    PaymentError,
    Payout,
    PayoutAllowance,
    PayoutBatch,
    PayoutItem,
    PayoutStatus,
    RateLimitedError,
    ServerError,
    WebhookRegistration,
    WebhookSettings,
    wire,
)
from paymentcore import _remote as remote
from paymentcore._services.disburse import _refused as embedded_refusal
from paymentcore.client import (
    ApiConnectionError,
    AsyncClient,
    Client,
    RetryPolicy,
    UnexpectedResponseError,
)
from paymentcore_server import _wire as server_wire

BASE = "https://pay.example"
NOW = datetime(2026, 3, 1, 12, 30, 45, 123000, tzinfo=UTC)
PAYOUT = Payout(
    reference="PO-1772368245123-ABCDEF",
    status=PayoutStatus.PENDING,
    amount=Decimal("12.50"),
    currency="GHS",
    phone="241234567",
    recipient_name="Ama",
    merchant_reference="settle-1",
    provider_reference=None,
    awaiting_review=False,
    status_reason=None,
    created_at=NOW,
)
CHECKOUT = Collection(
    reference="REQ-1772368245123-XYZ",
    status=CollectionStatus.PENDING,
    amount=Decimal("12.50"),
    currency="USD",
    requested_amount=Decimal("12.50"),
    requested_currency="USD",
    description="Three books",
    merchant_reference=None,
    checkout_url=f"{BASE}/checkout/REQ-1772368245123-XYZ",
    method=None,
    provider_code=None,
    expires_at=NOW + timedelta(minutes=30),
    created_at=NOW,
    failure_category=None,
)


class Script:
    """A scripted server: answers in order (the last one again when they run out), requests recorded."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def client(self, **options: Any) -> tuple[Client, list[float]]:
        made = Client(BASE, "pck_test", transport=httpx.MockTransport(self), **options)
        slept: list[float] = []
        made._sleep = slept.append
        return made, slept

    def keys(self) -> list[str | None]:
        return [request.headers.get("idempotency-key") for request in self.requests]


def answer(status: int, body: Any, **headers: str) -> httpx.Response:
    return httpx.Response(
        status,
        content=wire.dumps(body).encode(),
        headers={"content-type": "application/json", "x-request-id": "req_" + "a" * 24, **headers},
    )


def error(status: int, code: str, message: str = "No.", **extra: Any) -> httpx.Response:
    return answer(status, {"code": code, "message": message, "requestId": "req_" + "b" * 24, **extra})


def payout_answer(status: int = 201) -> httpx.Response:
    return answer(status, server_wire.payout_json(PAYOUT))


def create(client: Client, **changes: Any) -> Payout:
    args: dict[str, Any] = {"amount": Decimal("12.50"), "currency": "GHS", "phone": "241234567", **changes}
    return client.disburse.create(**args)


# --- what goes out ---------------------------------------------------------------------------------


def test_a_create_call_sends_exact_json_the_key_and_a_generated_idempotency_key() -> None:
    script = Script(payout_answer())
    client, _ = script.client()
    assert create(client, country="GH", recipient_name="Ama", merchant_reference="settle-1") == PAYOUT
    create(client)
    first, _ = script.requests
    assert (first.method, first.url.path) == ("POST", "/v1/disburse")
    assert first.headers["authorization"] == "Bearer pck_test"
    assert first.headers["content-type"] == "application/json"
    assert first.content == (
        b'{"amount":12.50,"currency":"GHS","phone":"241234567","recipientName":"Ama",'
        b'"country":"GH","merchantReference":"settle-1"}'
    )
    keys = script.keys()
    assert all(key is not None and key.startswith("pcc_") and len(key) == 36 for key in keys)
    assert keys[0] != keys[1]  # one per logical call
    create(client, idempotency_key="order-42")
    assert script.keys()[-1] == "order-42"


def test_every_create_call_sends_an_idempotency_key() -> None:
    collection = answer(201, server_wire.collection_json(CHECKOUT))
    script = Script(
        answer(202, {"reference": CHECKOUT.reference}),
        collection,  # the charge's collection, read back
        collection,
        payout_answer(),
        answer(200, server_wire.webhook_registration_json(REGISTRATION)),
        answer(202, server_wire.event_record_json(EVENT)),
    )
    client, _ = script.client()
    charged = client.collect.charge(
        amount=1000, currency="XAF", country="CM", provider="mtn_cm", phone="670000000"
    )
    assert charged.kind is CollectionKind.CHARGE  # what the client knows, though the wire does not say
    client.collect.checkout(amount=1000, currency="XAF")
    create(client)
    client.webhooks.register(url="https://shop.example/hooks")
    client.events.resend("evt_1")
    sent = [(r.method, r.url.path, r.headers.get("idempotency-key") is not None) for r in script.requests]
    assert sent == [
        ("POST", "/v1/collect/charge", True),
        ("GET", f"/v1/collect/{CHECKOUT.reference}", False),
        ("POST", "/v1/collect/checkout", True),
        ("POST", "/v1/disburse", True),
        ("PUT", "/v1/webhook", True),
        ("POST", "/v1/events/evt_1/resend", True),
    ]


def test_a_float_is_refused_before_anything_is_sent() -> None:
    script = Script(payout_answer())
    client, _ = script.client()
    calls: list[Callable[[], object]] = [
        lambda: create(client, amount=12.5),
        lambda: client.collect.checkout(amount=12.5, currency="USD"),  # type: ignore[arg-type]
        lambda: client.collect.charge(
            amount=2.0,  # type: ignore[arg-type]
            currency="XAF",
            country="CM",
            provider="mtn_cm",
            phone="670000000",
        ),
    ]
    for call in calls:
        with pytest.raises(InvalidRequestError) as caught:
            call()
        assert caught.value.param == "amount" and "float" in caught.value.message
    for amount in (Decimal("NaN"), object()):
        with pytest.raises(InvalidRequestError) as unsendable:
            create(client, amount=amount)
        assert unsendable.value.param == "amount"
    assert script.requests == []


def test_lists_send_their_filters_and_page_on_from_the_last_item() -> None:
    second = {**server_wire.payout_json(PAYOUT), "reference": "PO-2"}
    script = Script(
        answer(200, {"data": [server_wire.payout_json(PAYOUT)], "hasMore": True}),
        answer(200, {"data": [second], "hasMore": False}),
    )
    client, _ = script.client()
    page = client.disburse.list(limit=1, status=PayoutStatus.PAID, merchant_reference="a b")
    assert page.data == (PAYOUT,) and page.has_more
    assert [p.reference for p in page] == [PAYOUT.reference, "PO-2"]
    assert [str(r.url.params) for r in script.requests] == [
        "limit=1&status=PAID&merchantReference=a+b",
        f"limit=1&status=PAID&merchantReference=a+b&startingAfter={PAYOUT.reference}",
    ]


def test_a_reference_is_one_path_segment() -> None:
    script = Script(error(404, "NOT_FOUND"))
    client, _ = script.client()
    with pytest.raises(NotFoundError):
        client.disburse.get("../collect/REQ-1?x=1")
    assert script.requests[0].url.raw_path == b"/v1/disburse/..%2Fcollect%2FREQ-1%3Fx%3D1"


# --- retries ---------------------------------------------------------------------------------------


def test_5xx_and_no_answer_are_retried_under_the_same_key_with_backoff() -> None:
    script = Script(
        error(500, "SERVER_ERROR"),
        httpx.ReadTimeout("slow"),
        payout_answer(),
    )
    client, slept = script.client(backoff=1.0, max_backoff=8.0)
    assert create(client) == PAYOUT
    keys = script.keys()
    assert len(keys) == 3 and len(set(keys)) == 1
    assert 0.5 <= slept[0] <= 1.0 and 1.0 <= slept[1] <= 2.0  # doubling, with jitter


def test_retry_after_is_honoured() -> None:
    limited = error(429, "RATE_LIMITED")
    limited.headers["Retry-After"] = "3"
    script = Script(limited, payout_answer())
    client, slept = script.client(backoff=0.01)
    assert create(client) == PAYOUT
    assert slept == [3.0]


def test_a_retry_after_beyond_the_allowed_wait_is_raised_at_once() -> None:
    limited = error(429, "RATE_LIMITED", "Too many requests: 30 a minute.")
    limited.headers["Retry-After"] = "120"
    limited.headers["X-RateLimit-Limit"] = "30"
    script = Script(limited)
    client, slept = script.client()
    with pytest.raises(RateLimitedError) as caught:
        client.account.balances()
    assert (caught.value.retry_after, caught.value.limit, caught.value.http_status) == (120, 30, 429)
    assert len(script.requests) == 1 and slept == []


def test_retries_stop_at_max_retries_with_the_last_error() -> None:
    script = Script(error(503, "SERVER_ERROR", "Down."))
    client, slept = script.client(max_retries=3, backoff=0.01)
    with pytest.raises(ServerError) as caught:
        client.disburse.get("PO-1")
    assert len(script.requests) == 4 and len(slept) == 3
    assert (caught.value.http_status, caught.value.request_id) == (503, "req_" + "b" * 24)


def test_a_refusal_is_never_retried() -> None:
    script = Script(error(409, "IDEMPOTENCY_KEY_REUSED", param="Idempotency-Key"), payout_answer())
    client, slept = script.client()
    with pytest.raises(IdempotencyKeyReusedError) as caught:
        create(client, idempotency_key="k")
    assert caught.value.param == "idempotency_key" and caught.value.http_status == 409
    assert len(script.requests) == 1 and slept == []


def test_no_answer_on_every_try_is_an_api_connection_error() -> None:
    script = Script(httpx.ConnectError("refused"))
    client, _ = script.client(max_retries=2, backoff=0.01)
    with pytest.raises(ApiConnectionError) as caught:
        create(client)
    assert len(script.requests) == 3 and len(set(script.keys())) == 1
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert isinstance(caught.value, ServerError) and caught.value.http_status == 0


def test_the_retry_policy() -> None:
    policy = RetryPolicy(max_retries=3, backoff=0.5, max_backoff=2.0, max_retry_after=10)
    waits = [policy.wait(attempt, None) for attempt in range(4)]
    assert waits[3] is None
    for wait, ceiling in zip(waits[:3], (0.5, 1.0, 2.0), strict=True):
        assert wait is not None and ceiling / 2 <= wait <= ceiling
    assert policy.wait(0, 7.0) == 7.0 and policy.wait(0, 11.0) is None
    assert RetryPolicy(max_retries=0).wait(0, None) is None
    for bad in ({"max_retries": -1}, {"max_retries": True}, {"backoff": -1.0}, {"max_backoff": float("nan")}):
        with pytest.raises(ValueError):
            RetryPolicy(**bad)


def test_retry_after_as_seconds_or_an_http_date() -> None:
    now = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    assert remote.retry_after_seconds("5") == 5.0
    assert remote.retry_after_seconds("Sun, 01 Mar 2026 12:00:30 GMT", now=now) == 30.0
    assert remote.retry_after_seconds("Sun, 01 Mar 2026 11:00:00 GMT", now=now) == 0.0
    assert remote.retry_after_seconds("soon") is None and remote.retry_after_seconds(None) is None
    assert remote.retry_after_seconds("nan") is None


# --- reading answers -------------------------------------------------------------------------------


REGISTRATION = WebhookRegistration(
    url="https://shop.example/hooks", signing_secret="whsec_x", is_active=True, updated_at=NOW, events="v2"
)
EVENT = EventRecord(
    id="evt_1",
    type="disburse.succeeded",
    name="payout.paid",
    reference=PAYOUT.reference,
    created_at=NOW,
    delivery_status=EventDeliveryStatus.FAILED,
    attempts=2,
    payload=MappingProxyType({"event": "payout.paid", "data": {"amount": Decimal("12.50")}}),
    deliveries=(
        EventDelivery(at=NOW, response_status=None, error="timed out", duration_ms=10_000),
        EventDelivery(at=NOW, response_status=500, error="HTTP 500", duration_ms=12),
    ),
)


def records() -> Iterator[tuple[str, Any, Callable[[Any], Any], dict[str, Any]]]:
    """(name, a record, the client's reader, the server's JSON of it)."""
    legacy = CollectionKind.LEGACY
    yield "payout", PAYOUT, remote.payout, server_wire.payout_json(PAYOUT)
    yield "checkout", CHECKOUT, remote.collection, server_wire.collection_json(CHECKOUT)
    paid = attrs.evolve(CHECKOUT, kind=legacy, amount=Decimal("7500"), currency="XAF")
    yield "legacy payment", paid, remote.collection, server_wire.collection_json(paid)
    closed = PayoutAllowance("XAF", False, True, False, "ACCOUNT_DISABLED", "Payouts are off.")
    yield "payouts off", closed, remote.allowance, server_wire.allowance_json(closed)
    allowed = PayoutAllowance(
        "GHS", True, True, True, None, None, Decimal("500.00"), None, Decimal("2000.00"), Decimal("100.00"),
        Decimal("12.50"), Decimal("12.50"), None, Decimal("1987.50"),
    )  # fmt: skip
    yield "payout limits", allowed, remote.allowance, server_wire.allowance_json(allowed)
    balance = MerchantBalance("GHS", Decimal("87.50"), Decimal("0.00"))
    yield "balances", [balance], remote.balances, {"balances": [server_wire.balance_json(balance)]}
    item = LedgerItem(
        "led_1", NOW, LedgerItemType.PAYOUT_RESERVED, PAYOUT.reference, "GHS", Decimal("-12.50"),
        Decimal("87.50"), Decimal("12.50"),
    )  # fmt: skip
    yield "ledger item", item, remote.ledger_item("GHS"), server_wire.ledger_item_json(item)
    yield (
        "registration",
        REGISTRATION,
        remote.registration,
        server_wire.webhook_registration_json(REGISTRATION),
    )
    settings = WebhookSettings("https://shop.example/hooks", False, "10 failed events", NOW, "legacy")
    yield "webhook", settings, remote.webhook_settings, server_wire.webhook_settings_json(settings)
    summary = EventSummary("evt_1", "disburse.succeeded", "payout.paid", PAYOUT.reference, NOW,
                           EventDeliveryStatus.FAILED, 2)  # fmt: skip
    yield "legacy event", summary, remote.event_summary, server_wire.event_summary_json(summary)
    yield "event", EVENT, remote.event_record, server_wire.event_record_json(EVENT)


@pytest.mark.parametrize("name", [name for name, *_ in records()])
def test_every_record_reads_back_from_the_servers_json_unchanged(name: str) -> None:
    [(_, record, read, rendered)] = [entry for entry in records() if entry[0] == name]
    data = json.loads(wire.dumps(rendered), parse_float=Decimal)  # as the bytes on the wire hold it
    assert read(data) == record
    assert read(wire.loads(wire.dumps(rendered))) == record


def test_decimals_keep_their_written_precision() -> None:
    payout = remote.payout(wire.loads(wire.dumps(server_wire.payout_json(PAYOUT))))
    assert type(payout.amount) is Decimal and str(payout.amount) == "12.50"
    whole = remote.payout(wire.loads(wire.dumps({**server_wire.payout_json(PAYOUT), "amount": 2500})))
    assert type(whole.amount) is Decimal and whole.amount == Decimal(2500)


def test_an_error_answer_is_the_librarys_exception_with_its_details() -> None:
    script = Script(
        error(
            400,
            "INSUFFICIENT_BALANCE",
            "Available 9000 XAF; this payout needs 50000 XAF.",
            param="amount",
            details={"available": 9000, "required": Decimal("50000"), "currency": "XAF"},
        )
    )
    client, _ = script.client()
    with pytest.raises(InsufficientBalanceError) as caught:
        create(client)
    raised = caught.value
    assert (raised.code, raised.param, raised.http_status, raised.request_id) == (
        "INSUFFICIENT_BALANCE",
        "amount",
        400,
        "req_" + "b" * 24,
    )
    assert raised.details == {"available": Decimal(9000), "required": Decimal(50000), "currency": "XAF"}
    assert type(raised.details["available"]) is Decimal
    assert raised.message == "Available 9000 XAF; this payout needs 50000 XAF."


@pytest.mark.parametrize(
    ("wire_param", "library_param"),
    [
        ("merchantReference", "merchant_reference"),
        ("Idempotency-Key", "idempotency_key"),
        ("expiresInMinutes", "expires_in_minutes"),
        ("amount", "amount"),
    ],
)
def test_param_is_the_librarys_argument_name(wire_param: str, library_param: str) -> None:
    raised = remote.error_from(
        400, {}, wire.dumps({"code": "INVALID_REQUEST", "message": "x", "param": wire_param}).encode()
    )
    assert type(raised) is InvalidRequestError and raised.param == library_param


def test_a_405_or_413_keeps_its_own_status() -> None:
    raised = remote.error_from(
        413, {}, b'{"code":"INVALID_REQUEST","message":"Too large.","requestId":"req_1"}'
    )
    assert type(raised) is InvalidRequestError and raised.http_status == 413 and raised.request_id == "req_1"


def test_answers_that_are_not_the_apis() -> None:
    page = httpx.Response(502, content=b"<html>Bad gateway</html>", headers={"x-request-id": "req_lb"})
    script = Script(page)
    client, _ = script.client(max_retries=0)
    with pytest.raises(ServerError) as caught:
        client.account.balances()
    assert caught.value.http_status == 502 and "Bad gateway" in caught.value.message

    unknown = remote.error_from(418, {}, b'{"code":"TEAPOT","message":"Short and stout."}')
    assert (
        type(unknown) is UnexpectedResponseError and unknown.code == "TEAPOT" and unknown.http_status == 418
    )
    assert isinstance(unknown, PaymentError) and unknown.message == "Short and stout."

    for body in (b"not json", b"[1, 2]", b'{"reference": "PO-1"}'):
        client, _ = Script(httpx.Response(200, content=body, headers={"x-request-id": "req_z"})).client()
        with pytest.raises(UnexpectedResponseError) as bad:
            client.disburse.get("PO-1")
        assert bad.value.request_id == "req_z"

    wrong = {**server_wire.payout_json(PAYOUT), "amount": "12.50"}
    with pytest.raises(UnexpectedResponseError, match="amount should be a number"):
        remote.payout(wrong)
    undated = {**server_wire.payout_json(PAYOUT), "createdAt": "yesterday"}
    with pytest.raises(UnexpectedResponseError, match="createdAt"):
        remote.payout(undated)


# --- bulk payouts ----------------------------------------------------------------------------------

SHORT = ItemError(
    "INSUFFICIENT_BALANCE",
    "The available GHS balance is 1.25; this payout needs 12.50.",
    "amount",
    {"available": Decimal("1.25"), "required": Decimal("12.50"), "currency": "GHS"},
)
LONG_NAME = ItemError("INVALID_REQUEST", "recipient_name must be at most 120 characters.", "recipient_name")
BATCH = PayoutBatch(
    id="bat_0123456789abcdef01234567",
    mode=BatchMode.EACH,
    status=BatchStatus.PROCESSING,
    created_at=NOW,
    completed_at=None,
    item_count=4,
    accepted=2,
    refused=2,
    totals=(BatchTotal("GHS", 1, Decimal("12.50")), BatchTotal("XAF", 1, Decimal("2500"))),
    progress=tuple(
        BatchProgress(status, currency, int(status is PayoutStatus.PENDING), amount)
        for currency, amount in (("GHS", Decimal("12.50")), ("XAF", Decimal("2500")))
        for status in PayoutStatus
    ),
    items=(
        BatchItem(0, "settle-1", payout=BatchPayout(PAYOUT.reference, PayoutStatus.PENDING, False)),
        BatchItem(1, "settle-2", error=SHORT),
        BatchItem(2, "settle-3", payout=BatchPayout("PO-2", PayoutStatus.PENDING, True)),
        BatchItem(3, "settle-4", error=LONG_NAME),
    ),
    has_more=True,
)
ITEMS = [
    PayoutItem(
        amount=Decimal("12.50"), currency="GHS", phone="241234567", country="GH", merchant_reference="a"
    ),
    PayoutItem(amount=2500, currency="XAF", phone="690000002", recipient_name="Awa", merchant_reference="b"),
]


def test_create_bulk_sends_the_items_as_json_under_one_key_and_reads_the_batch() -> None:
    batch_answer = answer(201, server_wire.batch_json(BATCH))
    script = Script(error(503, "SERVER_ERROR"), batch_answer)
    client, slept = script.client()
    made = client.disburse.create_bulk(items=ITEMS, mode=BatchMode.EACH)
    assert made == BATCH  # Decimal, enums, datetimes, items' errors by the library's names
    assert type(made.totals[0].amount) is Decimal and str(made.totals[0].amount) == "12.50"
    assert made.items[3].error == LONG_NAME  # recipientName on the wire, recipient_name here
    assert (
        made.items[1].error is not None and type(made.items[1].error.exception()) is InsufficientBalanceError
    )
    first, retry = script.requests
    assert (first.method, first.url.path) == ("POST", "/v1/disburse/bulk") and len(slept) == 1
    assert (
        first.content
        == retry.content
        == (
            b'{"mode":"each","items":['
            b'{"amount":12.50,"currency":"GHS","phone":"241234567","country":"GH","merchantReference":"a"},'
            b'{"amount":2500,"currency":"XAF","phone":"690000002","recipientName":"Awa","merchantReference":"b"}]}'
        )
    )
    keys = script.keys()
    assert keys[0] is not None and keys[0].startswith("pcc_") and keys[0] == keys[1]  # kept over the retry
    client.disburse.create_bulk(items=ITEMS, mode="all", idempotency_key="payroll-11")
    assert script.keys()[-1] == "payroll-11" and b'"mode":"all"' in (script.requests[-1].content or b"")


def test_create_bulk_refuses_what_json_cannot_carry_before_sending() -> None:
    script = Script(answer(201, server_wire.batch_json(BATCH)))
    client, _ = script.client()
    floating = attrs.evolve(ITEMS[1], amount=25.0)  # type: ignore[arg-type]
    cases: list[tuple[Any, str]] = [
        ([ITEMS[0], floating], "items[1].amount"),
        ([ITEMS[0], {"amount": 1}], "items[1]"),
        ("items", "items"),
        ([attrs.evolve(ITEMS[0], phone=object())], "items[0].phone"),  # type: ignore[arg-type]
    ]
    for items, param in cases:
        with pytest.raises(InvalidRequestError) as caught:
            client.disburse.create_bulk(items=items, mode="each")
        assert caught.value.param == param, caught.value.message
    assert script.requests == []


def test_get_bulk_sends_the_page_and_reads_it() -> None:
    page = attrs.evolve(BATCH, items=BATCH.items[2:], has_more=False)
    script = Script(answer(200, server_wire.batch_json(page)))
    client, _ = script.client()
    assert client.disburse.get_bulk(BATCH.id, limit=2, starting_after=1) == page
    client.disburse.get_bulk("bat_1/../x")
    first, second = script.requests
    assert (first.method, first.url.path, str(first.url.params)) == (
        "GET",
        f"/v1/disburse/bulk/{BATCH.id}",
        "limit=2&startingAfter=1",
    )
    assert first.headers.get("idempotency-key") is None
    assert second.url.raw_path == b"/v1/disburse/bulk/bat_1%2F..%2Fx?limit=20"
    with pytest.raises(InvalidRequestError) as caught:
        client.disburse.get_bulk(BATCH.id, starting_after="1")  # type: ignore[arg-type]
    assert caught.value.param == "starting_after" and len(script.requests) == 2


def test_batch_refused_is_the_librarys_exception_as_the_embedded_core_builds_it() -> None:
    outcomes = [
        BatchItem(0, "a", payout=BatchPayout("PO-1", PayoutStatus.PENDING, False)),
        BatchItem(1, "b", error=LONG_NAME),
        BatchItem(2, "c", error=SHORT),
    ]
    embedded = embedded_refusal(outcomes)
    served = server_wire.batch_refused(embedded)  # what the server answers: the wire's names
    assert "recipientName" in served.message and "recipientName" in wire.dumps(served.to_dict())
    script = Script(error(422, **served.to_dict()))
    client, _ = script.client()
    with pytest.raises(BatchRefusedError) as caught:
        client.disburse.create_bulk(items=ITEMS, mode="all")
    raised = caught.value
    assert (raised.message, raised.param, raised.details, raised.items) == (
        embedded.message,
        embedded.param,
        embedded.details,
        embedded.items,
    )
    assert raised.items[1].error is not None and raised.items[1].error.details is not None
    assert type(raised.items[1].error.details["available"]) is Decimal
    assert (raised.http_status, raised.request_id) == (422, "req_" + "b" * 24)
    assert len(script.requests) == 1  # a refusal is not retried

    unreadable = remote.error_from(
        422, {}, wire.dumps({"code": "BATCH_REFUSED", "message": "No.", "details": {"items": [1]}}).encode()
    )
    assert type(unreadable) is UnexpectedResponseError and unreadable.code == "BATCH_REFUSED"


def test_a_batch_count_in_details_is_not_money() -> None:
    raised = remote.error_from(
        400,
        {},
        wire.dumps(
            {
                "code": "INVALID_REQUEST",
                "message": "A batch holds at most 1,000 items.",
                "param": "items[1000]",
                "details": {"index": 1000, "maximum": 1000, "count": 1001},
            }
        ).encode(),
    )
    assert raised.param == "items[1000]" and raised.details is not None
    assert type(raised.details["maximum"]) is int


# --- the async client ------------------------------------------------------------------------------


def test_the_async_client_retries_and_reads_the_same() -> None:
    script = Script(
        error(502, "SERVER_ERROR"),
        payout_answer(),
        answer(200, {"data": [server_wire.payout_json(PAYOUT)], "hasMore": True}),
        answer(200, {"data": [], "hasMore": False}),
    )

    async def run() -> tuple[Payout, list[str], list[float]]:
        slept: list[float] = []

        async def sleep(seconds: float) -> None:
            slept.append(seconds)

        async with AsyncClient(
            BASE, "pck_test", transport=httpx.MockTransport(script), backoff=0.01
        ) as client:
            client._sleep = sleep
            payout = await client.disburse.create(amount=Decimal("12.50"), currency="GHS", phone="241234567")
            listed = [p.reference async for p in await client.disburse.list(limit=1)]
            made = await client.disburse.create_bulk(items=ITEMS, mode="each", idempotency_key="run-1")
            read = await client.disburse.get_bulk(BATCH.id, starting_after=3)
        assert made == read == BATCH
        return payout, listed, slept

    script.answers += [answer(201, server_wire.batch_json(BATCH)), answer(200, server_wire.batch_json(BATCH))]
    payout, listed, slept = asyncio.run(run())
    assert payout == PAYOUT and listed == [PAYOUT.reference] and len(slept) == 1
    assert len(set(script.keys()[:2])) == 1 and script.keys()[0] is not None
    bulk, page = script.requests[-2:]
    assert (bulk.url.path, bulk.headers["idempotency-key"]) == ("/v1/disburse/bulk", "run-1")
    assert str(page.url.params) == "limit=20&startingAfter=3"


def test_a_client_needs_an_address_and_a_key() -> None:
    with pytest.raises(ValueError, match="base_url"):
        Client("pay.example", "pck_x")
    with pytest.raises(ValueError, match="api_key"):
        Client(BASE, " ")
    with Client(BASE + "/", "pck_secret") as client:
        assert "pck_secret" not in repr(client) and repr(client) == "Client('https://pay.example')"
