"""The OpenAPI document against the app: schemathesis in-process, plus exact checks of the document.

The fuzz run loads the document the app serves at ``GET /openapi.json`` (``from_asgi``) on a fresh core:
a merchant with a funded XAF balance and one key holding both scopes and a ceiling too high to reach.
Every operation (but GET /openapi.json itself, checked on its own) is tried with the document's
examples, schemathesis' boundary cases (coverage) and generated data, valid and invalid, under a fixed
seed. The checks: no 5xx, documented status codes, content types, headers and bodies, invalid data
refused with a 4xx, and 405 for undocumented methods.

Bugs of the app found this way are fixed and pinned by regression tests at the end of this file.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import Case
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from paymentcore import FakeClock, PaymentCore
from paymentcore.testing import fund
from paymentcore_server.app import create_app
from paymentcore_server.openapi import openapi_document

from conftest import make_core  # type: ignore[import-not-found, unused-ignore]

FuzzCase = Case[Any]
SEED = 20260101
MAX_EXAMPLES = 40  # generated cases per operation, on top of the examples and the coverage phase
FUNDED_XAF = 10**9
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    negative_data_rejection,
    unsupported_method,
]
CONFIG = schemathesis.Config.from_dict(
    {
        "seed": SEED,
        "generation": {
            "mode": "all",
            "max-examples": MAX_EXAMPLES,
            "deterministic": True,
            "database": "none",
            # The key is sent by the test (``Fuzz.auth``); 401s are checked by their own test below.
            "with-security-parameters": False,
        },
    }
)
OPERATIONS = [
    (path, method.upper())
    for path, item in openapi_document()["paths"].items()
    for method in item
    if method in ("get", "put", "post", "delete", "patch")
]
# Issue 17's merchant records: lists, ledger history, event detail and resend (all extensions).
RECORDS_ROUTES = {
    ("/v1/collect", "GET"),
    ("/v1/disburse", "GET"),
    ("/v1/account/ledger", "GET"),
    ("/v1/events", "GET"),
    ("/v1/events/{id}", "GET"),
    ("/v1/events/{id}/resend", "POST"),
}
# Issue 28's bulk payouts (extensions).
BULK_ROUTES = {("/v1/disburse/bulk", "POST"), ("/v1/disburse/bulk/{id}", "GET")}


@attrs.define
class Fuzz:
    """A fresh core with a funded merchant, its app, and a key with both scopes."""

    core: PaymentCore
    app: Starlette
    key: str
    merchant_id: str
    idempotency_keys: Iterator[int] = attrs.field(factory=itertools.count)

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


def served_operations(app: Starlette) -> set[tuple[str, str]]:
    return {
        (route.path, method)
        for route in app.routes
        if isinstance(route, Route)
        for method in (route.methods or set()) - {"HEAD"}
    }


def new_fuzz(tmp_path: Path) -> Fuzz:
    # prompt_limit: the examples charge one number over and over; RECIPIENT_BUSY would hide the rest.
    core = make_core("memory", tmp_path, FakeClock(), prompt_limit=1_000_000)
    merchant = core.operator.create_merchant("Fuzz Shop", settlement_currency="XAF")
    fund(core, merchant.id, "XAF", FUNDED_XAF)
    key = core.operator.create_key(
        merchant.id, ["collect", "disburse"], per_minute=1_000_000, per_hour=1_000_000
    )
    return Fuzz(core=core, app=create_app(core), key=key.api_key, merchant_id=merchant.id)


@pytest.fixture
def fuzz(tmp_path: Path) -> Iterator[Fuzz]:
    env = new_fuzz(tmp_path)
    yield env
    env.core.close()


@pytest.fixture
def served_schema(fuzz: Fuzz) -> schemathesis.BaseSchema:
    """The document as the app serves it at GET /openapi.json."""
    return schemathesis.openapi.from_asgi("/openapi.json", fuzz.app, config=CONFIG)


ALIAS_PATHS = ("/v1/collect/charge", "/v1/collect/checkout", "/v1/disburse", "/v1/payouts")


# --- the fuzz run ------------------------------------------------------------------------------------

lazy_schema = schemathesis.pytest.from_fixture("served_schema")


@lazy_schema.parametrize()
@settings(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
def test_the_app_conforms_to_its_document(case: FuzzCase, fuzz: Fuzz) -> None:
    key = case.headers.get("Idempotency-Key") if case.headers is not None else None
    if isinstance(key, str) and key.strip() and len(key) <= 200:
        # A usable key, made unique: a key reused with another body answers 409, which would hide the
        # validation of every later body. Missing, empty and too-long keys are sent as generated.
        case.headers["Idempotency-Key"] = f"fuzz-{next(fuzz.idempotency_keys)}"
    response = case.call(app=fuzz.app, headers=fuzz.auth)
    case.validate_response(response, checks=list(CHECKS), headers=fuzz.auth)
    check_error_code_is_listed(case.operation.path, case.operation.method, response)


def check_error_code_is_listed(path: str, method: str, response: Any) -> None:
    """Every error answer is the one shared Error schema, whose ``code`` may be any code: the codes an
    operation's answer may carry are its ``x-error-codes``, checked here."""
    document = openapi_document()
    answer = document["paths"][path][method.lower()]["responses"].get(str(response.status_code))
    if answer is not None and "$ref" in answer:
        answer = document["components"]["responses"][answer["$ref"].rsplit("/", 1)[-1]]
    if answer is None or "x-error-codes" not in answer:
        return  # a success, an HTML page, or a status other checks already refuse
    code = response.json()["code"]
    assert code in answer["x-error-codes"], (method, path, response.status_code, code)


# --- the document itself -----------------------------------------------------------------------------


def test_the_served_document_is_the_document(fuzz: Fuzz, served_schema: Any) -> None:
    """The fuzz run leaves out the operation that serves the document itself; it is checked here."""
    with TestClient(fuzz.app) as http:
        response = http.get("/openapi.json")  # no key needed
    check_documented(served_schema, "/openapi.json", "GET", response)
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-request-id"]
    assert response.json() == openapi_document(fuzz.core.config.public_url)
    assert response.json()["servers"] == [{"url": fuzz.core.config.public_url.rstrip("/")}]


def test_the_document_is_valid_openapi_and_fresh_on_every_call() -> None:
    document = openapi_document()
    assert document["openapi"] == "3.1.0"
    assert "servers" not in document
    schemathesis.openapi.from_dict(document, config=CONFIG).validate()
    document["paths"].clear()
    assert openapi_document()["paths"], "a caller's change must not leak into the next document"


JSON_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}


def test_every_reference_resolves_and_every_type_is_a_json_type() -> None:
    document = openapi_document()

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                target: Any = document
                for part in ref.removeprefix("#/").split("/"):
                    assert isinstance(target, dict) and part in target, f"{where}: {ref} does not resolve"
                    target = target[part]
            kind = node.get("type")
            if isinstance(kind, str) and where.rsplit("/", 1)[-1] != "properties":
                assert kind in JSON_TYPES or node.get("scheme") == "bearer", f"{where}: type {kind}"
            if isinstance(kind, list):  # OpenAPI 3.1: a list of types, e.g. ["string", "null"]
                assert kind and set(kind) <= JSON_TYPES, f"{where}: type {kind}"
            for name, value in node.items():
                walk(value, f"{where}/{name}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{where}/{index}")

    walk(document, "#")


def test_every_route_of_the_app_is_documented_and_nothing_else(fuzz: Fuzz) -> None:
    served = served_operations(fuzz.app)
    assert served - set(OPERATIONS) == set(), "routes missing from paymentcore_server/openapi.py"
    unserved = set(OPERATIONS) - served
    assert unserved == set(), "documented operations the app does not serve"


def test_operation_ids_are_unique_and_extensions_are_marked() -> None:
    document = openapi_document()
    operations = [op for item in document["paths"].values() for op in item.values()]
    ids = [op["operationId"] for op in operations]
    assert len(ids) == len(set(ids))
    extensions = {
        (path, method.upper())
        for path, item in document["paths"].items()
        for method, op in item.items()
        if op.get("x-extension") is True
    }
    assert extensions == {
        ("/v1/account/balances", "GET"),
        ("/healthz", "GET"),
        ("/openapi.json", "GET"),
        ("/checkout/{reference}", "GET"),
        ("/checkout/{reference}", "POST"),
        ("/checkout/{reference}/status", "GET"),
        ("/checkout-assets/page.js", "GET"),
        ("/checkout-assets/icon.svg", "GET"),
        *RECORDS_ROUTES,
        *BULK_ROUTES,
    }
    for path, method in RECORDS_ROUTES | BULK_ROUTES:
        assert document["paths"][path][method.lower()]["description"].startswith("**Extension.**")
    assert document["components"]["responses"]["IdempotencyKeyReused"]["x-extension"] is True
    legacy = {
        (path, method.upper()) for path, item in document["paths"].items() for method, op in item.items()
    } - {(path, method) for path, method in OPERATIONS if not _deprecated(document, path, method)}
    assert legacy == {
        ("/v1/payments", "POST"),
        ("/v1/payments/{reference}", "GET"),
        ("/v1/payouts", "POST"),
        ("/v1/payouts/{reference}", "GET"),
        ("/v1/payout-limits/{currency}", "GET"),
        ("/v1/channels", "GET"),
        ("/v1/webhooks", "POST"),
    }


def _deprecated(document: dict[str, Any], path: str, method: str) -> bool:
    return bool(document["paths"][path][method.lower()].get("deprecated"))


def test_the_spec_bounds_are_in_the_document() -> None:
    document = openapi_document()
    schemas = document["components"]["schemas"]
    parameters = document["components"]["parameters"]
    assert parameters["IdempotencyKey"]["schema"]["maxLength"] == 200
    assert parameters["IdempotencyKeyRequired"]["required"] is True
    for path in ("/v1/disburse", "/v1/payouts"):
        assert document["paths"][path]["post"]["parameters"] == [
            {"$ref": "#/components/parameters/IdempotencyKeyRequired"}
        ]
    checkout = schemas["CheckoutRequest"]["properties"]
    assert checkout["description"]["maxLength"] == 200
    assert checkout["merchantReference"]["maxLength"] == 120
    assert (checkout["expiresInMinutes"]["minimum"], checkout["expiresInMinutes"]["maximum"]) == (1, 10080)
    disburse = schemas["DisburseRequest"]["properties"]
    assert disburse["phone"]["maxLength"] == 32
    assert disburse["recipientName"]["maxLength"] == 120
    assert disburse["merchantReference"]["maxLength"] == 120
    amount = schemas["Amount"]
    assert (amount["type"], amount["exclusiveMinimum"]) == ("number", 0)  # 3.1: exclusiveMinimum is a number
    error = schemas["Error"]
    assert error["required"] == ["code", "message", "requestId"]
    assert error["additionalProperties"] is False
    assert document["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": document["components"]["securitySchemes"]["bearerAuth"]["description"],
    }


# --- success records and refusals, validated against the document ------------------------------------


def check_documented(schema: schemathesis.BaseSchema, path: str, method: str, response: Any) -> None:
    """The status is documented for the operation and the body matches it."""
    operation = schema[path][method]
    documented = operation.definition.raw["responses"]
    assert str(response.status_code) in documented, (path, method, response.status_code, response.text)
    operation.validate_response(response)
    check_error_code_is_listed(path, method, response)


def test_every_record_the_app_returns_matches_the_document(fuzz: Fuzz, served_schema: Any) -> None:
    """Each record in each of its states, and the usual refusals, through the documented operations."""
    core, auth = fuzz.core, fuzz.auth
    with TestClient(fuzz.app) as http:

        def call(method: str, path: str, expect: int, body: Any = None, idem: str = "", **params: str) -> Any:
            headers = {**auth, "Idempotency-Key": idem} if idem else dict(auth)
            response = http.request(method, path.format(**params), json=body, headers=headers)
            assert response.status_code == expect, (method, path, response.text)
            check_documented(served_schema, path, method, response)
            return response.json()

        charge = {
            "amount": 1000,
            "currency": "XAF",
            "country": "CM",
            "provider": "mtn_cm",
            "phone": "670000000",
        }
        charged = call("POST", "/v1/collect/charge", 202, charge, idem="c1")
        assert call("POST", "/v1/collect/charge", 202, charge, idem="c1") == charged  # replay
        declined = call("POST", "/v1/collect/charge", 202, {**charge, "phone": "670000011"})
        call("POST", "/v1/collect/charge", 400, {**charge, "provider": "orange_cm"})  # number is MTN
        checkout = call("POST", "/v1/collect/checkout", 201, {"amount": 1500, "currency": "XAF"})
        paid = call("POST", "/v1/collect/checkout", 201, {"amount": 2500, "currency": "XAF"})
        call("POST", "/v1/collect/checkout", 409, {"amount": 2501, "currency": "XAF"}, idem="c1")
        legacy = call("POST", "/v1/payments", 201, {"amount": 10, "currency": "USD", "reference": "o-1"})
        form = {"provider": "mtn_cm", "phone": "670000000"}
        assert (
            http.post(f"/checkout/{paid['reference']}", data=form, follow_redirects=False).status_code == 303
        )

        payout_body = {"amount": 2000, "currency": "XAF", "phone": "690000000", "recipientName": "Awa"}
        payout = call("POST", "/v1/disburse", 201, payout_body, idem="p1")
        assert call("POST", "/v1/disburse", 201, payout_body, idem="p1") == payout  # replay
        call("POST", "/v1/disburse", 409, {**payout_body, "amount": 2001}, idem="p1")
        call("POST", "/v1/disburse", 400, payout_body)  # no Idempotency-Key
        refused = call("POST", "/v1/payouts", 201, {**payout_body, "phone": "670000021"}, idem="p2")
        call("POST", "/v1/disburse", 400, {**payout_body, "currency": "GHS"}, idem="p3")  # CM pays XAF
        core.operator.set_limits(
            fuzz.merchant_id, "XAF", review_threshold=Decimal(5000), per_day=Decimal(10**6)
        )
        held = call("POST", "/v1/disburse", 201, {**payout_body, "amount": 6000}, idem="p4")
        assert held["awaitingReview"] is True
        call("POST", "/v1/disburse", 403, {**payout_body, "amount": 2 * 10**6}, idem="p5")  # over the day
        limits = call("GET", "/v1/account/disburse-limits/{currency}", 200, currency="XAF")
        assert limits["enabled"] is True and limits["remainingToday"] is not None

        core.run_until_idle()  # settles the collections and sends the payouts
        records = {
            reference: call("GET", "/v1/collect/{reference}", 200, reference=reference)
            for reference in (
                charged["reference"],
                declined["reference"],
                checkout["reference"],
                paid["reference"],
            )
        }
        assert records[charged["reference"]]["status"] == "SUCCESS"
        assert records[declined["reference"]]["failureCategory"] == "PAYER_DECLINED"
        assert records[paid["reference"]]["method"] == "MOBILE_MONEY"
        assert records[paid["reference"]]["checkoutUrl"] is None
        for reference in (legacy["reference"], checkout["reference"]):
            call("GET", "/v1/payments/{reference}", 200, reference=reference)
        call("GET", "/v1/collect/{reference}", 404, reference="REQ-1-NOPE")
        statuses = {
            call("GET", path, 200, reference=reference)["status"]
            for path in ("/v1/disburse/{reference}", "/v1/payouts/{reference}")
            for reference in (payout["reference"], held["reference"], refused["reference"])
        }
        assert statuses == {"PAID", "PENDING", "FAILED"}
        call("GET", "/v1/payouts/{reference}", 404, reference="PO-1-NOPE")

        core.operator.set_merchant_payouts(fuzz.merchant_id, False)
        for path in ("/v1/account/disburse-limits/{currency}", "/v1/payout-limits/{currency}"):
            assert call("GET", path, 200, currency="XAF")["blockedBy"] == "ACCOUNT_DISABLED"
        call("GET", "/v1/payout-limits/{currency}", 400, currency="USD")  # never paid out
        call("GET", "/v1/webhook", 404)
        call("PUT", "/v1/webhook", 200, {"url": "https://shop.example/hooks"})
        call("POST", "/v1/webhook", 200, {"url": "https://shop.example/hooks", "events": "v2"})
        call("POST", "/v1/webhooks", 200, {"url": "https://shop.example/hooks"})
        assert call("GET", "/v1/webhook", 200)["events"] == "legacy"
        call("PUT", "/v1/webhook", 400, {"url": "http://127.0.0.1/hooks"})  # a private address
        for path in ("/v1/countries", "/v1/providers", "/v1/limits", "/v1/account/providers", "/v1/channels"):
            call("GET", path, 200)
        assert call("GET", "/v1/account/balances", 200)["balances"]
        call("GET", "/healthz", 200)
        response = http.get(f"/checkout/{checkout['reference']}/status")
        check_documented(served_schema, "/checkout/{reference}/status", "GET", response)


def test_calls_without_a_key_get_the_documented_401(fuzz: Fuzz, served_schema: Any) -> None:
    document = openapi_document()
    with TestClient(fuzz.app) as http:
        for path, method in OPERATIONS:
            if document["paths"][path][method.lower()].get("security") == []:
                continue
            url = path.replace("{reference}", "REQ-1-X").replace("{currency}", "XAF").replace("{id}", "evt_1")
            response = http.request(method, url)
            assert response.status_code == 401, (path, method)
            assert response.json()["requestId"] == response.headers["x-request-id"]
            check_documented(served_schema, path, method, response)


# --- bugs the fuzzing found, kept as regression tests ------------------------------------------------


@pytest.mark.parametrize("path", ALIAS_PATHS)
@pytest.mark.parametrize("alias", ["r" * 121, 5], ids=["121-chars", "number"])
def test_reference_alias_is_validated_beside_merchant_reference(fuzz: Fuzz, path: str, alias: object) -> None:
    bodies = {
        "/v1/collect/charge": {
            "amount": 1000,
            "currency": "XAF",
            "country": "CM",
            "provider": "mtn_cm",
            "phone": "670000000",
        },
        "/v1/collect/checkout": {"amount": 1000, "currency": "XAF"},
        "/v1/disburse": {"amount": 1000, "currency": "XAF", "phone": "670000000"},
        "/v1/payouts": {"amount": 1000, "currency": "XAF", "phone": "670000000"},
    }
    body = {**bodies[path], "merchantReference": "m-1", "reference": alias}
    with TestClient(fuzz.app) as http:
        response = http.post(path, json=body, headers={**fuzz.auth, "Idempotency-Key": "alias"})
    assert response.status_code == 400, response.text
    assert response.json()["param"] == "reference"


def test_checkout_status_404_has_the_error_shape(fuzz: Fuzz, served_schema: Any) -> None:
    with TestClient(fuzz.app) as http:
        response = http.get("/checkout/REQ-1-NOPE/status")
    assert response.status_code == 404
    body = response.json()
    assert body.get("code") == "NOT_FOUND", body
    assert body.get("requestId") == response.headers["x-request-id"], body
    check_documented(served_schema, "/checkout/{reference}/status", "GET", response)


def test_an_oversized_checkout_form_is_413(fuzz: Fuzz, served_schema: Any) -> None:
    with TestClient(fuzz.app) as http:
        created = http.post(
            "/v1/collect/checkout", json={"amount": 1000, "currency": "XAF"}, headers=fuzz.auth
        )
        reference = created.json()["reference"]
        response = http.post(
            f"/checkout/{reference}",
            content=b"phone=" + b"6" * (1024 * 1024),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
    assert response.status_code == 413
    check_documented(served_schema, "/checkout/{reference}", "POST", response)
