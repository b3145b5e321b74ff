"""Hostile amounts through the HTTP app: never a 500, always a 400 in the error shape, and nothing stored.

Each body is sent as raw bytes (most of these cannot be written by a JSON library) to every endpoint that
takes an amount, with an Idempotency-Key, after funding the XAF balance. "Nothing stored" means: no
collection or payout is due, the ledger, balances, outbox and prompt count are as before, and the
Idempotency-Key was not used up. Bugs it found are fixed; the tests stay as regression tests.
"""

from __future__ import annotations

import time
from typing import Any

import attrs
import pytest

from paymentcore.testing import fund

from conftest import Client  # type: ignore[import-not-found, unused-ignore]

PHONE = "670000000"
FUNDED_XAF = 10_000_000
IDEMPOTENCY_KEY = "amount-edge-1"
ERROR_FIELDS = {"code", "message", "param", "details", "requestId"}


@attrs.frozen
class Endpoint:
    path: str
    scope: str  # which of the client's keys: "collect" or "disburse"
    rest: str  # the other members of a valid body, as JSON text


ENDPOINTS = {
    "charge": Endpoint(
        "/v1/collect/charge",
        "collect",
        f'"currency": "XAF", "country": "CM", "provider": "mtn_cm", "phone": "{PHONE}"',
    ),
    "checkout": Endpoint("/v1/collect/checkout", "collect", '"currency": "XAF"'),
    "payments": Endpoint("/v1/payments", "collect", '"currency": "XAF"'),
    "disburse": Endpoint("/v1/disburse", "disburse", f'"currency": "XAF", "phone": "{PHONE}"'),
    "payouts": Endpoint("/v1/payouts", "disburse", f'"currency": "XAF", "phone": "{PHONE}"'),
}


@attrs.frozen
class Edge:
    members: str  # the JSON text of the amount member(s) of the body
    codes: frozenset[str]  # the acceptable error codes
    named: bool = True  # the error names param "amount"; False where the body is not JSON at all

    def body(self, endpoint: Endpoint) -> bytes:
        return ("{" + self.members + ", " + endpoint.rest + "}").encode()


INVALID = frozenset({"INVALID_REQUEST"})
TOO_LARGE = frozenset({"AMOUNT_TOO_LARGE"})
PRECISION = frozenset({"AMOUNT_PRECISION"})


def amount(text: str, codes: frozenset[str], *, named: bool = True) -> Edge:
    return Edge(f'"amount": {text}', codes, named)


EDGES: dict[str, Edge] = {
    # the cases of the brief
    "1e309": amount("1e309", TOO_LARGE),
    "NaN": amount("NaN", INVALID, named=False),
    "Infinity": amount("Infinity", INVALID, named=False),
    "-Infinity": amount("-Infinity", INVALID, named=False),
    "-0": amount("-0", INVALID),
    "0": amount("0", INVALID),
    "true": amount("true", INVALID),
    "string-100": amount('"100"', INVALID),
    "null": amount("null", INVALID),
    "2**53": amount(str(2**53), TOO_LARGE),
    "2**63": amount(str(2**63), TOO_LARGE),
    "5000-digit-integer": amount("9" * 5000, TOO_LARGE),
    "1e-400": amount("1e-400", PRECISION),
    "100.0000000001": amount("100.0000000001", PRECISION),
    "duplicate-amount-same": Edge('"amount": 1000, "amount": 1000', INVALID),
    "duplicate-amount-different": Edge('"amount": 1000, "amount": 2000', INVALID),
    "nested-object": amount('{"x": 1}', INVALID),
    "array": amount("[100]", INVALID),
    # more of the same family
    "-1": amount("-1", INVALID),
    "-0.0": amount("-0.0", INVALID),
    "0e5": amount("0e5", INVALID),
    "0.0e-400": amount("0.0e-400", INVALID),
    "-1e309": amount("-1e309", INVALID),
    "-1e-400": amount("-1e-400", INVALID),
    "below-minimum-99": amount("99", frozenset({"AMOUNT_TOO_SMALL"})),
    "above-maximum-5000001": amount("5000001", TOO_LARGE),
    "1e30": amount("1e30", TOO_LARGE),
    "float-max": amount("1.7976931348623157e308", TOO_LARGE),
    "1.5-in-XAF": amount("1.5", PRECISION),
    "float-min-subnormal": amount("4.9e-324", PRECISION),
    "hex": amount("0x64", INVALID, named=False),
    "leading-plus": amount("+100", INVALID, named=False),
    "empty-string": amount('""', INVALID),
    # exponents at and past what Decimal can hold
    "1e999999999999999999": amount("1e999999999999999999", TOO_LARGE),
    "1e-999999999999999999": amount("1e-999999999999999999", PRECISION),
    "1e99999999999999999999": amount("1e99999999999999999999", INVALID | TOO_LARGE),
    "1e-99999999999999999999": amount("1e-99999999999999999999", INVALID | PRECISION),
    "0e99999999999999999999": amount("0e99999999999999999999", INVALID),
}


def cases() -> list[Any]:
    return [
        pytest.param(
            endpoint_name,
            edge,
            id=f"{endpoint_name}-{edge_name}",
        )
        for edge_name, edge in EDGES.items()
        for endpoint_name in ENDPOINTS
    ]


# --- helpers -----------------------------------------------------------------------------------------


def funded(client: Client) -> Client:
    fund(client.core, client.merchant.id, "XAF", FUNDED_XAF)
    return client


def post_raw(client: Client, endpoint: Endpoint, body: bytes, key: str = IDEMPOTENCY_KEY) -> Any:
    api_key = client.collect_key if endpoint.scope == "collect" else client.disburse_key
    headers = {**client.headers(api_key, key), "Content-Type": "application/json"}
    return client.http.post(endpoint.path, content=body, headers=headers)


def stored(client: Client, key: str = IDEMPOTENCY_KEY) -> dict[str, Any]:
    """Everything a request could have written, as comparable values."""
    core, merchant_id = client.core, client.merchant.id
    with core.store.read() as tx:
        state = {
            "due collections": tx.collections.due(10**15, 100),
            "due payouts": tx.payouts.due(10**15, 100),
            "ledger": tx.ledger.entries(merchant_id, "XAF"),
            "events": tx.outbox.list(merchant_id),
            "prompts": tx.collections.prompts_since(PHONE, 0),
            "idempotency record": tx.idempotency.get(merchant_id, key),
        }
    state["balances"] = core.operator.balances(merchant_id)
    return state


def assert_error_shape(response: Any) -> dict[str, Any]:
    assert response.headers["content-type"] == "application/json", response.text
    body: dict[str, Any] = response.json()
    assert set(body) <= ERROR_FIELDS, body
    assert isinstance(body.get("code"), str) and body["code"], body
    assert isinstance(body.get("message"), str) and body["message"], body
    assert body.get("requestId") == response.headers["x-request-id"], body
    return body


# --- the tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("endpoint_name", "edge"), cases())
def test_a_hostile_amount_is_refused_with_400_and_nothing_is_stored(
    client: Client, endpoint_name: str, edge: Edge
) -> None:
    endpoint = ENDPOINTS[endpoint_name]
    before = stored(funded(client))
    assert before["due collections"] == [] and before["due payouts"] == []
    assert before["idempotency record"] is None

    response = post_raw(client, endpoint, edge.body(endpoint))

    assert response.status_code != 500, response.text
    assert response.status_code == 400, response.text
    body = assert_error_shape(response)
    assert body["code"] in edge.codes, body
    if edge.named:
        assert body.get("param") == "amount", body
    else:
        assert body.get("param") in (None, "amount"), body
    if body["code"] == "AMOUNT_TOO_SMALL":
        assert body["details"]["minimum"] == 100, body
    if body["code"] == "AMOUNT_TOO_LARGE":
        assert body["details"]["maximum"] == 5_000_000, body
    after = stored(client)
    assert after == before
    assert after["due collections"] == [] and after["due payouts"] == []


@pytest.mark.parametrize("endpoint_name", list(ENDPOINTS))
def test_a_plain_amount_is_accepted_and_stored(client: Client, endpoint_name: str) -> None:
    """The control: the same bodies with a good amount do get stored, so the checks above can see it."""
    endpoint = ENDPOINTS[endpoint_name]
    before = stored(funded(client))
    response = post_raw(client, endpoint, amount("1000", INVALID).body(endpoint))
    assert response.status_code in (201, 202), response.text
    after = stored(client)
    assert after["idempotency record"] is not None
    if endpoint.scope == "disburse":
        assert len(after["due payouts"]) == 1
        assert after["balances"] != before["balances"]
        assert len(after["ledger"]) == len(before["ledger"]) + 1
    else:
        assert len(after["due collections"]) == 1


@pytest.mark.parametrize("endpoint_name", list(ENDPOINTS))
@pytest.mark.parametrize(
    "text", ["100." + "0" * 4300, "1" + "0" * 5000 + "e-4998"], ids=["trailing-zeros", "long-mantissa"]
)
def test_an_exact_amount_with_many_digits_is_accepted(client: Client, endpoint_name: str, text: str) -> None:
    """100 written with thousands of digits is exactly 100 (it was a 500: int() of over 4300 digits)."""
    endpoint = ENDPOINTS[endpoint_name]
    response = post_raw(funded(client), endpoint, amount(text, INVALID).body(endpoint))
    assert response.status_code in (201, 202), response.text
    assert response.json()["amount"] == 100


@pytest.mark.parametrize("endpoint_name", list(ENDPOINTS))
@pytest.mark.parametrize("number", ["1e999999999999999999", "1e400000000", "-1e-400000000"])
def test_a_huge_exponent_in_an_ignored_field_is_cheap(
    client: Client, endpoint_name: str, number: str
) -> None:
    """The idempotency fingerprint once wrote such numbers out in full: MemoryError (500), or ~4 s and ~1 GB
    for a 50-byte body. Now it costs what its text costs."""
    endpoint = ENDPOINTS[endpoint_name]
    body = Edge(f'"amount": 1000, "note": {number}', INVALID).body(endpoint)
    started = time.perf_counter()
    response = post_raw(funded(client), endpoint, body)
    assert time.perf_counter() - started < 2.0
    assert response.status_code in (201, 202), response.text


# --- not amounts: other strings of a body, found while probing -----------------------------------------

SURROGATES = {  # the JSON text of whole bodies
    "checkout-description": ("checkout", r'{"amount": 1000, "currency": "XAF", "description": "\ud800"}'),
    "checkout-merchantReference": (
        "checkout",
        r'{"amount": 1000, "currency": "XAF", "merchantReference": "\udfff"}',
    ),
    "payments-currency": ("payments", r'{"amount": 1000, "currency": "\ud800"}'),
    "disburse-recipientName": (
        "disburse",
        r'{"amount": 1000, "currency": "XAF", "phone": "670000000", "recipientName": "\ud800"}',
    ),
}


@pytest.mark.parametrize("case", list(SURROGATES))
def test_a_lone_surrogate_in_a_string_is_refused_and_nothing_is_stored(any_client: Client, case: str) -> None:
    endpoint_name, text = SURROGATES[case]
    before = stored(funded(any_client))
    response = post_raw(any_client, ENDPOINTS[endpoint_name], text.encode())
    after = stored(any_client)
    assert response.status_code == 400, response.text
    assert_error_shape(response)
    assert after == before
