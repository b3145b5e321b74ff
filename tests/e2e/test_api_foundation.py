"""The server skeleton: auth, rate limits, the error shape everywhere, discovery endpoints."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal
from typing import Any

import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

from paymentcore_server.app import create_app

from conftest import Client


def assert_error(response: Any, status: int, code: str, param: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert isinstance(body["message"], str) and body["message"]
    assert body["requestId"] == response.headers["x-request-id"]
    if param is not None:
        assert body.get("param") == param, body
    return body


# --- authentication ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [None, "", "Bearer", "Bearer ", "Basic abc", "Token pck_x", "Bearer pck_unknown_key_value"],
)
def test_missing_malformed_or_unknown_keys_get_401(client: Client, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header}
    response = client.http.get("/v1/countries", headers=headers)
    assert_error(response, 401, "UNAUTHORIZED")


def test_revoked_key_gets_401_at_once(client: Client) -> None:
    assert client.get("/v1/countries").status_code == 200
    key = client.core.operator.create_key(client.merchant.id, ["collect"])
    assert client.get("/v1/countries", key=key.api_key).status_code == 200
    client.core.operator.revoke_key(key.key.id)
    assert_error(client.get("/v1/countries", key=key.api_key), 401, "UNAUTHORIZED")


def test_not_approved_merchant_cannot_transact(client: Client) -> None:
    client.core.operator.suspend_merchant(client.merchant.id)
    body = {"amount": 1000, "currency": "XAF"}
    assert_error(client.post("/v1/collect/checkout", body), 403, "MERCHANT_NOT_APPROVED")


def test_api_switched_off_platform_wide(client: Client) -> None:
    client.core.operator.set_platform_api(False)
    assert_error(client.get("/v1/countries"), 403, "CAPABILITY_DISABLED")
    client.core.operator.set_platform_api(True)
    assert client.get("/v1/countries").status_code == 200


def test_collect_key_cannot_disburse(client: Client) -> None:
    response = client.post("/v1/disburse", {"amount": 100, "currency": "XAF", "phone": "670000000"}, idem="k")
    assert_error(response, 403, "INSUFFICIENT_SCOPE")


# --- rate limits ------------------------------------------------------------------------------------


def test_31st_request_of_a_minute_is_limited_and_other_keys_are_not(client: Client) -> None:
    for _ in range(30):
        assert client.get("/v1/countries").status_code == 200
    response = client.get("/v1/countries")
    body = assert_error(response, 429, "RATE_LIMITED")
    assert "30" in body["message"] and "minute" in body["message"]
    assert int(response.headers["retry-after"]) >= 1
    assert client.get("/v1/countries", key=client.disburse_key).status_code == 200
    client.clock.advance(61)
    assert client.get("/v1/countries").status_code == 200


def test_raised_ceiling_applies_without_restart(client: Client) -> None:
    for _ in range(30):
        client.get("/v1/countries")
    assert client.get("/v1/countries").status_code == 429
    key_id = client.core.access.authenticate(client.collect_key).key.id
    client.core.operator.set_rate_limit(key_id, per_minute=40)
    for _ in range(9):
        assert client.get("/v1/countries").status_code == 200
    assert client.get("/v1/countries").status_code == 200
    assert client.get("/v1/countries").status_code == 429


def test_hourly_limit_names_the_hour(client: Client) -> None:
    key = client.core.operator.create_key(client.merchant.id, ["collect"], per_minute=100, per_hour=5)
    for _ in range(5):
        assert client.get("/v1/countries", key=key.api_key).status_code == 200
    body = assert_error(client.get("/v1/countries", key=key.api_key), 429, "RATE_LIMITED")
    assert "5" in body["message"] and "hour" in body["message"]


# --- the error shape for framework errors -------------------------------------------------------------


def test_unknown_path_is_404_in_the_error_shape(client: Client) -> None:
    assert_error(client.get("/v1/nothing-here"), 404, "NOT_FOUND")
    assert_error(client.http.get("/"), 404, "NOT_FOUND")


def test_wrong_method_is_405_invalid_request(client: Client) -> None:
    response = client.http.delete("/v1/countries", headers=client.headers(client.collect_key))
    assert_error(response, 405, "INVALID_REQUEST")


@pytest.mark.parametrize(
    "raw",
    [b"{bad", b"", b"[1, 2]", b"42", b'"text"', b'{"amount": NaN}', b'{"a": 1, "a": 2}', b"\xff\xfe"],
)
def test_malformed_or_non_object_bodies(client: Client, raw: bytes) -> None:
    response = client.http.post(
        "/v1/collect/checkout",
        content=raw,
        headers={**client.headers(client.collect_key), "Content-Type": "application/json"},
    )
    assert_error(response, 400, "INVALID_REQUEST")


def test_body_over_one_mebibyte_is_413(client: Client) -> None:
    raw = b'{"description": "' + b"x" * (1024 * 1024 + 10) + b'"}'
    response = client.http.post(
        "/v1/collect/checkout", content=raw, headers=client.headers(client.collect_key)
    )
    assert_error(response, 413, "INVALID_REQUEST")


def test_unhandled_exception_is_500_without_a_traceback(client: Client) -> None:
    app = create_app(client.core)

    async def boom(request: Any) -> Any:
        raise RuntimeError("secret internals")

    app.router.routes.append(Route("/boom", boom))
    with TestClient(app, raise_server_exceptions=False) as http:
        response = http.get("/boom")
    body = assert_error(response, 500, "SERVER_ERROR")
    assert "secret internals" not in response.text and "Traceback" not in response.text
    assert set(body) == {"code", "message", "requestId"}


def test_every_response_has_a_request_id(client: Client) -> None:
    first = client.get("/v1/countries").headers["x-request-id"]
    second = client.get("/v1/countries").headers["x-request-id"]
    assert first and second and first != second


# --- discovery --------------------------------------------------------------------------------------


def test_countries(client: Client) -> None:
    response = client.get("/v1/countries")
    assert response.status_code == 200
    assert "max-age=3600" in response.headers["cache-control"]
    rows = {row["country"]: row for row in response.json()}
    assert {"CM", "CI", "SN", "GH", "KE", "UG"} <= set(rows)
    assert rows["CM"] == {
        "country": "CM",
        "name": "Cameroon",
        "currency": "XAF",
        "dialCode": "+237",
        "phoneDigits": 9,
        "phoneExample": "670000000",
    }
    assert rows["CI"]["currency"] == "XOF" and rows["CI"]["phoneDigits"] == 10


def test_providers(client: Client) -> None:
    response = client.get("/v1/providers")
    assert "max-age=3600" in response.headers["cache-control"]
    rows = {row["provider"]: row for row in response.json()}
    assert rows["mtn_cm"] == {
        "provider": "mtn_cm",
        "name": "MTN Mobile Money",
        "method": "MOBILE_MONEY",
        "country": "CM",
    }
    assert rows["lightning"]["country"] is None and rows["lightning"]["method"] == "CRYPTO"
    assert all(set(row) == {"provider", "name", "method", "country"} for row in rows.values())


def test_limits(client: Client) -> None:
    response = client.get("/v1/limits")
    assert "max-age=3600" in response.headers["cache-control"]
    rows = {row["currency"]: row for row in response.json()}
    assert rows["XAF"]["decimals"] == 0 and rows["GHS"]["decimals"] == 2 and rows["BTC"]["decimals"] == 8
    assert '"min":1.00' in response.text  # GHS rendered with its decimals, as a JSON number
    for row in rows.values():
        assert set(row) == {"currency", "min", "max", "decimals"}
        assert row["min"] < row["max"]


def test_account_providers_and_channels(client: Client) -> None:
    rows = client.get("/v1/account/providers").json()
    mtn = next(r for r in rows if r["provider"] == "mtn_cm")
    assert mtn["available"] is True and mtn["reason"] is None and mtn["providerCode"] == "mtn_cm"
    client.core.operator.block_provider(client.merchant.id, "orange_cm")
    channels = {r["providerCode"]: r for r in client.get("/v1/channels").json()}
    assert channels["orange_cm"] == {
        "providerCode": "orange_cm",
        "method": "ORANGE",
        "country": "CM",
        "available": False,
        "reason": "restricted",
    }
    assert channels["mtn_cm"]["available"] is True and channels["mtn_cm"]["method"] == "MOMO"


def test_any_key_reads_discovery(client: Client) -> None:
    for path in ("/v1/countries", "/v1/providers", "/v1/limits", "/v1/account/providers", "/v1/channels"):
        assert client.get(path, key=client.disburse_key).status_code == 200


def test_importing_the_core_loads_no_web_stack() -> None:
    code = (
        "import sys, paymentcore, paymentcore.testing\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn', 'httpx')]\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_edges_own_error_answers_keep_their_header_lines() -> None:
    """A 500 for an unknown exception and a 431 for an oversized head, sent by RequestIdMiddleware itself:
    the same header lines, in the same order, as they always had."""
    import asyncio
    from collections.abc import MutableMapping

    from paymentcore_server._edge import MAX_HEADERS, RequestIdMiddleware

    async def boom(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("boom")

    def first_message(headers: list[tuple[bytes, bytes]]) -> MutableMapping[str, Any]:
        sent: list[MutableMapping[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b""}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": "/x", "headers": headers, "query_string": b""}
        asyncio.run(RequestIdMiddleware(boom)(scope, receive, send))
        return sent[0]

    crashed = first_message([])
    assert crashed["status"] == 500
    assert [name for name, _ in crashed["headers"]] == [b"content-type", b"content-length", b"x-request-id"]
    too_big = first_message([(b"x-big", b"a" * (MAX_HEADERS + 1))])
    assert too_big["status"] == 431
    names = [name for name, _ in too_big["headers"]]
    assert names == [b"content-type", b"content-length", b"x-request-id", b"connection"]


@pytest.mark.parametrize(
    ("status", "headers"),
    [
        (200, None),
        (201, {"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "59"}),
        (204, {}),
        (429, {"Retry-After": "3"}),
    ],
)
def test_send_json_sends_what_json_response_sends(status: int, headers: dict[str, str] | None) -> None:
    """The API's endpoints send their JSON themselves (no Response object): the same messages, header
    lines in the same order, as the Starlette response every other route answers with."""
    import asyncio
    from collections.abc import MutableMapping

    from paymentcore_server._edge import json_response, send_json

    body = {"reference": "PO-1", "amount": Decimal("12.50"), "note": "caf\u00e9 \"x\"", "items": [1, None]}

    def sent(how: Any) -> list[MutableMapping[str, Any]]:
        messages: list[MutableMapping[str, Any]] = []

        async def send(message: MutableMapping[str, Any]) -> None:
            messages.append(message)

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b""}

        asyncio.run(how(send, receive))
        return messages

    scope = {"type": "http", "method": "GET", "path": "/x", "headers": []}
    ours = sent(lambda send, receive: send_json(send, body, status, headers))
    theirs = sent(lambda send, receive: json_response(body, status, headers)(scope, receive, send))
    assert ours == theirs
