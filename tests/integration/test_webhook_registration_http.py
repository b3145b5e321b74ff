"""Webhook registration over HTTP: PUT/POST /v1/webhook, the legacy POST /v1/webhooks and GET /v1/webhook.

Registration answers the signing secret once and rotates it every time; GET never shows it; hostile
URLs are refused with INVALID_REQUEST on ``url``; the secret is kept encrypted at rest.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from starlette.testclient import TestClient

from paymentcore import Config, FakeClock, PaymentCore
from paymentcore._domain.render import iso
from paymentcore.testing import CapturingSender, public_resolver
from paymentcore_server.app import create_app

URL = "https://shop.example/hooks/payments"
SECRET = re.compile(r"whsec_([0-9a-f]+)")
REGISTERED_FIELDS = {"url", "signingSecret", "isActive", "updatedAt"}
RECORD_FIELDS = {"url", "isActive", "disabledReason", "updatedAt", "events"}


@attrs.define
class Api:
    http: TestClient
    core: PaymentCore
    clock: FakeClock
    merchant_id: str
    collect_key: str
    disburse_key: str

    def send(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        key: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        all_headers = {"Authorization": f"Bearer {key or self.collect_key}", **(headers or {})}
        if body is None:
            return self.http.request(method, path, headers=all_headers)
        return self.http.request(method, path, json=body, headers=all_headers)

    def register(
        self, url: str = URL, *, method: str = "PUT", path: str = "/v1/webhook", **extra: Any
    ) -> str:
        response = self.send(method, path, {"url": url, **extra})
        assert response.status_code == 200, response.text
        secret: str = response.json()["signingSecret"]
        return secret

    def stored_secret(self) -> str:
        return self.core.webhooks.secret_of(self.merchant_id)


def resolver(host: str, port: int) -> list[str]:
    """No DNS in tests: names under internal.example resolve into private ranges, every other name to
    the public address of ``public_resolver``."""
    if host.endswith("internal.example"):
        return ["93.184.216.34", "10.0.0.5"] if host.startswith("mixed.") else ["192.168.0.20"]
    return public_resolver(host, port)


@pytest.fixture
def api() -> Iterator[Api]:
    clock = FakeClock()
    core = PaymentCore.memory(
        clock=clock,
        sender=CapturingSender(),
        resolver=resolver,
        config=Config(sandbox_delay=0, webhook_jitter=0.0),
    )
    merchant = core.operator.create_merchant("Hook Shop", settlement_currency="XAF")
    collect = core.operator.create_key(merchant.id, ["collect"])
    disburse = core.operator.create_key(merchant.id, ["disburse"])
    try:
        with TestClient(create_app(core), raise_server_exceptions=False) as http:
            yield Api(http, core, clock, merchant.id, collect.api_key, disburse.api_key)
    finally:
        core.close()


def assert_error(response: Any, status: int, code: str, param: str | None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert isinstance(body["message"], str) and body["message"]
    assert body["requestId"] == response.headers["x-request-id"]
    assert body.get("param") == param, body
    assert set(body) <= {"code", "message", "param", "details", "requestId"}
    return body


def assert_secret_shape(secret: str) -> None:
    match = SECRET.fullmatch(secret)
    assert match is not None, secret
    assert len(match.group(1)) >= 64  # at least 32 random bytes


# --- registering ----------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["PUT", "POST"])
def test_registration_answers_url_secret_active_and_time(api: Api, method: str) -> None:
    response = api.send(method, "/v1/webhook", {"url": URL})
    assert response.status_code == 200, response.text
    assert response.headers["x-request-id"]
    body = response.json()
    assert set(body) >= REGISTERED_FIELDS
    assert body["url"] == URL
    assert body["isActive"] is True
    assert body["updatedAt"] == iso(api.clock.now()) == "2026-01-01T00:00:00.000Z"
    assert_secret_shape(body["signingSecret"])
    assert body["signingSecret"] == api.stored_secret()


def test_every_registration_rotates_the_secret(api: Api) -> None:
    secrets = [
        api.register(method="PUT"),
        api.register(method="POST"),
        api.register(method="PUT"),
        api.register(method="POST", path="/v1/webhooks"),
        api.register("https://other.example/hooks"),
    ]
    assert len(set(secrets)) == len(secrets)
    for secret in secrets:
        assert_secret_shape(secret)
    assert api.stored_secret() == secrets[-1]


def test_registering_again_moves_updated_at(api: Api) -> None:
    api.register()
    first = api.send("GET", "/v1/webhook").json()["updatedAt"]
    api.clock.advance(90)
    api.register()
    second = api.send("GET", "/v1/webhook").json()["updatedAt"]
    assert first == "2026-01-01T00:00:00.000Z"
    assert second == "2026-01-01T00:01:30.000Z"


def test_a_repeated_idempotency_key_answers_the_same_registration(api: Api) -> None:
    headers = {"Idempotency-Key": "hook-1"}
    first = api.send("PUT", "/v1/webhook", {"url": URL}, headers=headers)
    second = api.send("PUT", "/v1/webhook", {"url": URL}, headers=headers)
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()
    assert api.stored_secret() == first.json()["signingSecret"]


# --- reading --------------------------------------------------------------------------------------


def test_get_shows_the_record_and_never_the_secret(api: Api) -> None:
    secret = api.register()
    response = api.send("GET", "/v1/webhook")
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == RECORD_FIELDS
    assert body == {
        "url": URL,
        "isActive": True,
        "disabledReason": None,
        "updatedAt": "2026-01-01T00:00:00.000Z",
        "events": "v2",
    }
    assert secret not in response.text
    assert "whsec_" not in response.text


def test_get_before_any_registration_is_not_found(api: Api) -> None:
    assert_error(api.send("GET", "/v1/webhook"), 404, "NOT_FOUND", None)


def test_legacy_path_selects_legacy_names_until_v2_is_asked_for(api: Api) -> None:
    api.register(method="POST", path="/v1/webhooks")
    assert api.send("GET", "/v1/webhook").json()["events"] == "legacy"
    api.register(events="v2")
    assert api.send("GET", "/v1/webhook").json()["events"] == "v2"
    api.register(events="legacy")
    assert api.send("GET", "/v1/webhook").json()["events"] == "legacy"
    api.register()  # any other registration gives the new names
    assert api.send("GET", "/v1/webhook").json()["events"] == "v2"


def test_an_unknown_events_value_is_refused(api: Api) -> None:
    response = api.send("PUT", "/v1/webhook", {"url": URL, "events": "v3"})
    assert_error(response, 400, "INVALID_REQUEST", "events")
    assert_error(api.send("GET", "/v1/webhook"), 404, "NOT_FOUND", None)


def test_a_disburse_only_key_may_register_and_read(api: Api) -> None:
    response = api.send("PUT", "/v1/webhook", {"url": URL}, key=api.disburse_key)
    assert response.status_code == 200, response.text
    assert response.json()["signingSecret"] == api.stored_secret()
    got = api.send("GET", "/v1/webhook", key=api.disburse_key)
    assert got.status_code == 200
    assert got.json()["url"] == URL


def test_without_a_key_nothing_is_registered_or_shown(api: Api) -> None:
    response = api.http.put("/v1/webhook", json={"url": URL})
    assert_error(response, 401, "UNAUTHORIZED", None)
    assert_error(api.http.get("/v1/webhook"), 401, "UNAUTHORIZED", None)
    with api.core.store.read() as tx:
        assert tx.webhooks.get(api.merchant_id) is None


def test_each_merchant_sees_only_its_own_endpoint(api: Api) -> None:
    api.register()
    other = api.core.operator.create_merchant("Other Shop")
    other_key = api.core.operator.create_key(other.id, ["collect"]).api_key
    assert_error(api.send("GET", "/v1/webhook", key=other_key), 404, "NOT_FOUND", None)


# --- refusals -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/x",
        "http://169.254.169.254/latest",
        "ftp://example.com",
        "http://localhost:8080/hooks",
        "http://10.0.0.5/hooks",
        "http://192.168.1.10/hooks",
        "http://[::1]/hooks",
        "http://2130706433/hooks",
        "http://0x7f000001/hooks",
        "http://metadata.google.internal/computeMetadata/v1/",
        "https://hooks.internal.example/x",
        "https://mixed.internal.example/x",
        "https://merchant:hunter2pw@shop.example/hooks",
        "javascript:alert(1)",
        "shop.example/hooks",
        "",
    ],
)
def test_hostile_or_malformed_urls_are_refused(api: Api, url: str) -> None:
    body = assert_error(api.send("PUT", "/v1/webhook", {"url": url}), 400, "INVALID_REQUEST", "url")
    if url:
        assert url not in body["message"]
    assert "hunter2pw" not in body["message"]
    assert_error(api.send("GET", "/v1/webhook"), 404, "NOT_FOUND", None)


@pytest.mark.parametrize("path", ["/v1/webhook", "/v1/webhooks"])
def test_a_refused_url_leaves_the_registered_endpoint_alone(api: Api, path: str) -> None:
    secret = api.register()
    response = api.send("POST", path, {"url": "http://169.254.169.254/latest"})
    assert_error(response, 400, "INVALID_REQUEST", "url")
    record = api.send("GET", "/v1/webhook").json()
    assert record["url"] == URL
    assert record["events"] == "v2"
    assert api.stored_secret() == secret


@pytest.mark.parametrize("body", [{}, {"url": None}, {"url": 123}, {"url": ["https://shop.example/"]}])
def test_a_missing_or_non_string_url_is_refused(api: Api, body: dict[str, Any]) -> None:
    assert_error(api.send("PUT", "/v1/webhook", body), 400, "INVALID_REQUEST", "url")


# --- the secret at rest ---------------------------------------------------------------------------


def test_the_secret_is_stored_encrypted(api: Api) -> None:
    secret = api.register()
    random_part = secret.removeprefix("whsec_")
    with api.core.store.read() as tx:
        endpoint = tx.webhooks.get(api.merchant_id)
    assert endpoint is not None
    assert secret not in endpoint.secret_encrypted
    assert random_part not in endpoint.secret_encrypted
    assert random_part[:16] not in endpoint.secret_encrypted
    assert api.core.deps.secret_box.decrypt(endpoint.secret_encrypted) == secret


def test_the_sqlite_file_never_holds_the_plaintext_secret(tmp_path: Path) -> None:
    # on a SQLite file, with an Idempotency-Key so that the stored reply is written as well
    core = PaymentCore.sqlite(
        tmp_path / "hooks.db",
        clock=FakeClock(),
        sender=CapturingSender(),
        resolver=public_resolver,
        config=Config(sandbox_delay=0),
    )
    try:
        merchant = core.operator.create_merchant("File Shop")
        key = core.operator.create_key(merchant.id, ["collect"]).api_key
        with TestClient(create_app(core), raise_server_exceptions=False) as http:
            response = http.put(
                "/v1/webhook",
                json={"url": URL},
                headers={"Authorization": f"Bearer {key}", "Idempotency-Key": "hook-at-rest"},
            )
        assert response.status_code == 200, response.text
        secret: str = response.json()["signingSecret"]
        assert core.webhooks.secret_of(merchant.id) == secret
    finally:
        core.close()
    files = [path for path in tmp_path.iterdir() if path.name.startswith("hooks.db")]
    assert any(path.name == "hooks.db" for path in files)
    raw = secret.removeprefix("whsec_").encode()
    for path in files:
        assert raw not in path.read_bytes(), path.name
