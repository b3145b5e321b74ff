"""The OpenAPI document states the library's constants from the constants themselves: header names,
the signature's form, the freshness window and the bounds agree with what the code enforces."""

from __future__ import annotations

import re
from typing import Any

import pytest

from paymentcore import limits, signing
from paymentcore._domain import pages
from paymentcore._services import disburse, idempotency, urlsafety
from paymentcore.events import EventType
from paymentcore_server import _headers, openapi


def doc() -> dict[str, Any]:
    return openapi.openapi_document()


def test_the_webhook_headers_and_window_are_the_signers() -> None:
    params = doc()["components"]["parameters"]
    assert params["WebhookSignature"]["name"] == signing.SIGNATURE_HEADER == "X-Service-Signature"
    assert params["WebhookTimestamp"]["name"] == signing.TIMESTAMP_HEADER
    assert params["WebhookEventId"]["name"] == signing.EVENT_ID_HEADER
    assert f"more than {signing.TOLERANCE_SECONDS} seconds" in params["WebhookTimestamp"]["description"]
    assert signing.TIMESTAMP_HEADER in params["WebhookSignature"]["description"]
    # the pattern accepts what the signer writes, and nothing shorter or of another scheme
    pattern = re.compile(params["WebhookSignature"]["schema"]["pattern"])
    made = signing.signature("whsec_x", 1_700_000_000, b"{}")
    assert pattern.fullmatch(made)
    assert not pattern.fullmatch(made[:-1]) and not pattern.fullmatch("sha1=" + made[7:])
    for name, hook in doc()["webhooks"].items():
        headers = [p.get("name") or p["$ref"].rpartition("/")[2] for p in hook["post"]["parameters"]]
        assert signing.EVENT_HEADER in headers, name
    assert openapi.WEBHOOK_HEADERS == signing.WEBHOOK_HEADERS


def test_the_bounds_are_the_enforced_ones() -> None:
    document = doc()
    params = document["components"]["parameters"]
    schemas = document["components"]["schemas"]
    for key in ("IdempotencyKey", "IdempotencyKeyRequired"):
        assert params[key]["name"] == _headers.IDEMPOTENCY_HEADER
        assert params[key]["schema"]["maxLength"] == idempotency.MAX_KEY_LENGTH == 200
    limit = params["Limit"]["schema"]
    assert (limit["maximum"], limit["default"]) == (pages.MAX_LIMIT, pages.DEFAULT_LIMIT)
    assert f"1 to {pages.MAX_LIMIT}, {pages.DEFAULT_LIMIT} when not given" in params["Limit"]["description"]
    assert schemas["BulkDisburseRequest"]["properties"]["items"]["maxItems"] == disburse.MAX_BATCH_ITEMS
    assert schemas["WebhookRequest"]["properties"]["url"]["maxLength"] == urlsafety.MAX_URL_LENGTH
    assert limits.MAX_BATCH_ITEMS is disburse.MAX_BATCH_ITEMS


def test_the_event_names_are_the_enum() -> None:
    schemas = doc()["components"]["schemas"]
    assert schemas["EventType"]["enum"] == [t.value for t in EventType]
    assert set(doc()["webhooks"]) >= {t.value for t in EventType} | {t.legacy_name for t in EventType}


@pytest.mark.parametrize(
    ("name", "value", "path", "text"),
    [
        ("TOLERANCE_SECONDS", 123, ("parameters", "WebhookTimestamp", "description"), "than 123 seconds"),
        ("TIMESTAMP_HEADER", "X-Stamp", ("parameters", "WebhookTimestamp", "name"), "X-Stamp"),
        ("IDEMPOTENCY_HEADER", "Idem-Key", ("parameters", "IdempotencyKey", "name"), "Idem-Key"),
        ("MAX_PAGE_LIMIT", 77, ("parameters", "Limit", "description"), "1 to 77,"),
        ("REQUEST_ID_HEADER", "X-Req", ("headers", "X-Req", "description"), ""),
    ],
)
def test_changing_a_constant_changes_the_document(
    monkeypatch: pytest.MonkeyPatch, name: str, value: object, path: tuple[str, ...], text: str
) -> None:
    """The document is built from the names, not restated: another value shows up where it is used."""
    monkeypatch.setattr(openapi, name, value)
    found: Any = doc()["components"]
    for part in path:
        found = found[part]
    assert text in found
