"""The OpenAPI document states the library's constants from the constants themselves: header names,
the signature's form, the freshness window, the bounds, the field lengths, a checkout's lifetime, the
reference and id forms and the webhook delivery defaults agree with what the code enforces."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest

from paymentcore import Config, PayoutItem, _remote, config, limits, references, signing
from paymentcore._domain import pages
from paymentcore._services import disburse, idempotency, urlsafety
from paymentcore.adapters.clock import RandomReferences
from paymentcore.errors import InvalidRequestError, PaymentError
from paymentcore.events import EventType
from paymentcore.testing import TestKit
from paymentcore_server import _headers, openapi


def doc() -> dict[str, Any]:
    return openapi.openapi_document()


@pytest.fixture
def kit() -> Iterator[TestKit]:
    made = TestKit.create()
    yield made
    made.close()


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


def test_the_field_lengths_and_the_checkout_lifetime_are_the_enforced_ones() -> None:
    schemas = doc()["components"]["schemas"]
    charge = schemas["ChargeRequest"]["properties"]
    checkout = schemas["CheckoutRequest"]["properties"]
    legacy = schemas["LegacyPaymentRequest"]["properties"]
    payout = schemas["DisburseRequest"]["properties"]
    # the values the API has always stated (spec/api.md): the constants did not move them
    assert limits.MAX_MERCHANT_REFERENCE_LENGTH == 120 and limits.MAX_DESCRIPTION_LENGTH == 200
    assert limits.MAX_PHONE_LENGTH == 32 and limits.MAX_RECIPIENT_NAME_LENGTH == 120
    for properties in (charge, checkout, payout):
        for name in ("merchantReference", "reference"):
            assert properties[name]["maxLength"] == limits.MAX_MERCHANT_REFERENCE_LENGTH, name
    assert legacy["reference"]["maxLength"] == limits.MAX_MERCHANT_REFERENCE_LENGTH
    for properties in (charge, checkout, legacy):
        assert properties["description"]["maxLength"] == limits.MAX_DESCRIPTION_LENGTH
    assert payout["phone"]["maxLength"] == limits.MAX_PHONE_LENGTH
    assert payout["recipientName"]["maxLength"] == limits.MAX_RECIPIENT_NAME_LENGTH
    bulk_reference = schemas["BulkPayoutItem"]["properties"]["merchantReference"]["description"]
    assert f"more than {limits.MAX_MERCHANT_REFERENCE_LENGTH} characters" in bulk_reference
    lifetime = (limits.MIN_CHECKOUT_MINUTES, limits.MAX_CHECKOUT_MINUTES, limits.DEFAULT_CHECKOUT_MINUTES)
    assert lifetime == (1, 10080, 60)
    for properties in (checkout, legacy):
        minutes = properties["expiresInMinutes"]
        assert (minutes["minimum"], minutes["maximum"], minutes["default"]) == lifetime


def _refusal(call: Callable[[], object]) -> str | None:
    """The message of the InvalidRequestError ``call`` raises, None when it raises none."""
    try:
        call()
    except InvalidRequestError as error:
        return str(error)
    except PaymentError:  # refused for another reason (the catalogue's), not by a bound
        return None
    return None


# each: the bound, the error's text past it, and the call given a value of the bound's size
BOUNDED: dict[str, tuple[int, str, Callable[[TestKit, str, int], object]]] = {
    "charge merchant_reference": (
        limits.MAX_MERCHANT_REFERENCE_LENGTH,
        "merchant_reference must be at most",
        lambda kit, shop, n: kit.core.collect.charge(
            shop,
            amount=1000,
            currency="XAF",
            country="CM",
            provider="mtn_cm",
            phone="670000000",
            merchant_reference="r" * n,
        ),
    ),
    "charge description": (
        limits.MAX_DESCRIPTION_LENGTH,
        "description must be at most",
        lambda kit, shop, n: kit.core.collect.charge(
            shop,
            amount=1000,
            currency="XAF",
            country="CM",
            provider="mtn_cm",
            phone="670000001",
            description="d" * n,
        ),
    ),
    "checkout merchant_reference": (
        limits.MAX_MERCHANT_REFERENCE_LENGTH,
        "merchant_reference must be at most",
        lambda kit, shop, n: kit.core.collect.checkout(
            shop, amount=1000, currency="XAF", merchant_reference="r" * n
        ),
    ),
    "checkout description": (
        limits.MAX_DESCRIPTION_LENGTH,
        "description must be at most",
        lambda kit, shop, n: kit.core.collect.checkout(
            shop, amount=1000, currency="XAF", description="d" * n
        ),
    ),
    "checkout expires_in_minutes": (
        limits.MAX_CHECKOUT_MINUTES,
        f"expires_in_minutes must be between {limits.MIN_CHECKOUT_MINUTES} and",
        lambda kit, shop, n: kit.core.collect.checkout(
            shop, amount=1000, currency="XAF", expires_in_minutes=n
        ),
    ),
    "payout phone": (
        limits.MAX_PHONE_LENGTH,
        "phone must be at most",
        lambda kit, shop, n: kit.core.disburse.create(
            shop, amount=100, currency="XAF", phone="6" * n, idempotency_key=f"phone-{n}"
        ),
    ),
    "payout recipient_name": (
        limits.MAX_RECIPIENT_NAME_LENGTH,
        "recipient_name must be at most",
        lambda kit, shop, n: kit.core.disburse.create(
            shop,
            amount=100,
            currency="XAF",
            phone="670000000",
            recipient_name="n" * n,
            idempotency_key=f"name-{n}",
        ),
    ),
    "payout merchant_reference": (
        limits.MAX_MERCHANT_REFERENCE_LENGTH,
        "merchant_reference must be at most",
        lambda kit, shop, n: kit.core.disburse.create(
            shop,
            amount=100,
            currency="XAF",
            phone="670000000",
            merchant_reference="r" * n,
            idempotency_key=f"ref-{n}",
        ),
    ),
}


@pytest.mark.parametrize("case", list(BOUNDED))
def test_the_services_enforce_the_stated_bounds(kit: TestKit, case: str) -> None:
    """A value at the constant is not refused by its bound, one past it is: the constant the document
    states is the one the service checks."""
    bound, refused, call = BOUNDED[case]
    shop = kit.merchant().id
    kit.fund(shop, "XAF", 10_000)
    at = _refusal(lambda: call(kit, shop, bound))
    assert at is None or refused not in at, at
    past = _refusal(lambda: call(kit, shop, bound + 1))
    assert past is not None and refused in past and str(bound) in past, past


def test_a_checkout_shorter_than_the_least_lifetime_is_refused(kit: TestKit) -> None:
    shop = kit.merchant().id
    least = limits.MIN_CHECKOUT_MINUTES
    assert kit.core.collect.checkout(shop, amount=1000, currency="XAF", expires_in_minutes=least).checkout_url
    bounds = f"between {least} and {limits.MAX_CHECKOUT_MINUTES}"
    with pytest.raises(InvalidRequestError, match=bounds):
        kit.core.collect.checkout(shop, amount=1000, currency="XAF", expires_in_minutes=least - 1)


def test_the_idempotency_header_is_one_name() -> None:
    """The server reads, the HTTP client sends and the document names the same header."""
    assert limits.IDEMPOTENCY_HEADER == "Idempotency-Key"
    assert _headers.IDEMPOTENCY_HEADER is limits.IDEMPOTENCY_HEADER
    assert _remote.IDEMPOTENCY_HEADER is limits.IDEMPOTENCY_HEADER
    assert _remote.DEFAULT_LIMIT == limits.DEFAULT_PAGE_LIMIT


def test_the_reference_patterns_match_what_the_core_makes(kit: TestKit) -> None:
    schemas = doc()["components"]["schemas"]
    patterns = {
        "collection": schemas["CollectionRecord"]["properties"]["reference"]["pattern"],
        "payout": schemas["PayoutRecord"]["properties"]["reference"]["pattern"],
        "event": schemas["EventRecord"]["properties"]["id"]["pattern"],
        "batch": schemas["PayoutBatch"]["properties"]["id"]["pattern"],
    }
    assert patterns == {
        "collection": openapi.COLLECTION_REFERENCE_PATTERN,
        "payout": openapi.PAYOUT_REFERENCE_PATTERN,
        "event": openapi.EVENT_ID_PATTERN,
        "batch": openapi.BATCH_ID_PATTERN,
    }
    assert patterns["collection"] == r"^REQ-\d+-[A-Za-z0-9]+$" and patterns["event"] == r"^evt_[A-Za-z0-9]+$"
    shop = kit.merchant().id
    kit.fund(shop, "XAF", 10_000)
    kit.webhook(shop)
    made = {
        "collection": kit.core.collect.charge(
            shop, amount=1000, currency="XAF", country="CM", provider="mtn_cm", phone="670000000"
        ).reference,
        "payout": kit.core.disburse.create(
            shop, amount=100, currency="XAF", phone="670000000", idempotency_key="one"
        ).reference,
        "batch": kit.core.disburse.create_bulk(
            shop,
            items=[
                PayoutItem(amount=Decimal(100), currency="XAF", phone="670000000", merchant_reference="a")
            ],
            mode="each",
            idempotency_key="many",
        ).id,
    }
    kit.network.complete(made["collection"])
    kit.settle()
    made["event"] = kit.core.webhooks.events(shop).data[0].id
    prefixes = {
        "collection": references.COLLECTION_REFERENCE_PREFIX,
        "payout": references.PAYOUT_REFERENCE_PREFIX,
        "event": references.EVENT_ID_PREFIX,
        "batch": references.BATCH_ID_PREFIX,
    }
    for kind, value in made.items():
        assert re.fullmatch(patterns[kind], value), (kind, value)
        assert value.startswith(prefixes[kind])
    generator = RandomReferences()
    assert re.fullmatch(patterns["collection"], generator.collection(1_700_000_000_000))
    assert re.fullmatch(patterns["payout"], generator.payout(1_700_000_000_000))


def test_a_prefix_is_matched_literally() -> None:
    assert openapi.prefixed_pattern("REQ-", "x") == "^REQ-x$"
    pattern = openapi.prefixed_pattern("a.b_", "[0-9]+")
    assert re.fullmatch(pattern, "a.b_12") and not re.fullmatch(pattern, "axb_12")


def test_the_delivery_texts_are_the_configs_defaults() -> None:
    assert Config().webhook_timeout == config.DEFAULT_WEBHOOK_TIMEOUT_SECONDS == 10
    assert Config().auto_disable_after == config.DEFAULT_AUTO_DISABLE_AFTER == 10
    for name, hook in doc()["webhooks"].items():
        failed = hook["post"]["responses"]["default"]["description"]
        assert f"no answer within {config.DEFAULT_WEBHOOK_TIMEOUT_SECONDS:g} s" in failed, name
        assert f"After {config.DEFAULT_AUTO_DISABLE_AFTER} consecutive failed events" in failed, name


@pytest.mark.parametrize(
    ("name", "value", "path", "text"),
    [
        ("TOLERANCE_SECONDS", 123, ("parameters", "WebhookTimestamp", "description"), "than 123 seconds"),
        ("TIMESTAMP_HEADER", "X-Stamp", ("parameters", "WebhookTimestamp", "name"), "X-Stamp"),
        ("IDEMPOTENCY_HEADER", "Idem-Key", ("parameters", "IdempotencyKey", "name"), "Idem-Key"),
        ("MAX_PAGE_LIMIT", 77, ("parameters", "Limit", "description"), "1 to 77,"),
        ("REQUEST_ID_HEADER", "X-Req", ("headers", "X-Req", "description"), ""),
        (
            "MAX_MERCHANT_REFERENCE_LENGTH",
            77,
            ("schemas", "BulkPayoutItem", "properties", "merchantReference", "description"),
            "more than 77 characters",
        ),
        (
            "COLLECTION_REFERENCE_PREFIX",
            "COL-",
            ("parameters", "CollectionReference", "description"),
            "(COL-...)",
        ),
        ("PAYOUT_REFERENCE_PREFIX", "PAY-", ("parameters", "PayoutReference", "description"), "(PAY-...)"),
        ("EVENT_ID_PREFIX", "ev_", ("parameters", "EventId", "description"), "(ev_...)"),
        ("BATCH_ID_PREFIX", "bt_", ("parameters", "BatchId", "description"), "(bt_...)"),
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


@pytest.mark.parametrize(
    ("name", "schema", "field", "key"),
    [
        ("MAX_MERCHANT_REFERENCE_LENGTH", "ChargeRequest", "merchantReference", "maxLength"),
        ("MAX_MERCHANT_REFERENCE_LENGTH", "LegacyPaymentRequest", "reference", "maxLength"),
        ("MAX_DESCRIPTION_LENGTH", "CheckoutRequest", "description", "maxLength"),
        ("MAX_PHONE_LENGTH", "DisburseRequest", "phone", "maxLength"),
        ("MAX_RECIPIENT_NAME_LENGTH", "DisburseRequest", "recipientName", "maxLength"),
        ("MIN_CHECKOUT_MINUTES", "CheckoutRequest", "expiresInMinutes", "minimum"),
        ("MAX_CHECKOUT_MINUTES", "LegacyPaymentRequest", "expiresInMinutes", "maximum"),
        ("DEFAULT_CHECKOUT_MINUTES", "CheckoutRequest", "expiresInMinutes", "default"),
    ],
)
def test_changing_a_bound_changes_the_schema(
    monkeypatch: pytest.MonkeyPatch, name: str, schema: str, field: str, key: str
) -> None:
    monkeypatch.setattr(openapi, name, 7)
    assert doc()["components"]["schemas"][schema]["properties"][field][key] == 7


@pytest.mark.parametrize(
    ("name", "value", "text"),
    [
        ("DEFAULT_WEBHOOK_TIMEOUT_SECONDS", 2.5, "no answer within 2.5 s"),
        ("DEFAULT_AUTO_DISABLE_AFTER", 4, "After 4 consecutive failed events"),
    ],
)
def test_changing_a_delivery_default_changes_the_webhooks(
    monkeypatch: pytest.MonkeyPatch, name: str, value: object, text: str
) -> None:
    monkeypatch.setattr(openapi, name, value)
    for hook in doc()["webhooks"].values():
        assert text in hook["post"]["responses"]["default"]["description"]


def test_changing_a_prefix_changes_the_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    """The webhook bodies' examples carry the prefixes too, so they keep matching the patterns."""
    monkeypatch.setattr(openapi, "EVENT_ID_PREFIX", "ev_")
    monkeypatch.setattr(openapi, "PAYOUT_REFERENCE_PREFIX", "PAY-")
    hook = doc()["webhooks"][EventType.DISBURSE_SENT.value]["post"]
    example = hook["requestBody"]["content"]["application/json"]["example"]
    assert example["eventId"].startswith("ev_") and example["data"]["reference"].startswith("PAY-")
