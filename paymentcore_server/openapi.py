"""The OpenAPI 3.0.3 description of the whole HTTP API (served at ``GET /openapi.json``, an extension).

Written as Python data, not read from a file: ``openapi_document()`` builds a fresh dict on every call,
so a caller may change what it gets. Nothing is computed at import besides the constants below.

What the document says is the contract (``spec/api.md`` and CONTRACT §4-§8), not a picture of the
code: response shapes are exact (``additionalProperties: false``), every error answer names the codes
its status may carry (CONTRACT §6), and request bodies carry the spec's bounds. Request bodies stay
open (unknown fields are ignored) and optional request fields accept ``null`` as "not given". Anything
beyond the spec is marked ``x-extension: true``; the old paths are ``deprecated`` aliases that answer
identically.
"""

from __future__ import annotations

from typing import Any

from paymentcore import errors

__all__ = [
    "ACCESS_403",
    "ALL_CODES",
    "AMOUNT_400",
    "API_VERSION",
    "COLLECTION_REFERENCE_PATTERN",
    "DESCRIPTION",
    "HTML",
    "JSON",
    "MOBILE_400",
    "OPENAPI_VERSION",
    "PAYOUT_REFERENCE_PATTERN",
    "SCOPED_403",
    "TAGS",
    "TIMESTAMP_PATTERN",
    "TRANSACT_403",
    "openapi_document",
]

OPENAPI_VERSION = "3.0.3"
API_VERSION = "1.0.0"

JSON = "application/json"
HTML = "text/html"

# --- error codes by HTTP status (CONTRACT §6) ------------------------------------------------------

ACCESS_403 = ("CAPABILITY_DISABLED",)
SCOPED_403 = ("CAPABILITY_DISABLED", "INSUFFICIENT_SCOPE")
TRANSACT_403 = ("CAPABILITY_DISABLED", "INSUFFICIENT_SCOPE", "MERCHANT_NOT_APPROVED")
AMOUNT_400 = ("AMOUNT_TOO_SMALL", "AMOUNT_TOO_LARGE", "AMOUNT_PRECISION")
MOBILE_400 = (
    "CURRENCY_MISMATCH",
    "UNKNOWN_PROVIDER",
    "PROVIDER_COUNTRY_MISMATCH",
    "COUNTRY_NOT_SUPPORTED",
    "PHONE_NOT_RECOGNISED",
    "PHONE_PROVIDER_MISMATCH",
)
ALL_CODES = errors.ALL_CODES  # the error tree is the one list of codes

TIMESTAMP_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$"
COLLECTION_REFERENCE_PATTERN = r"^REQ-\d+-[A-Za-z0-9]+$"
PAYOUT_REFERENCE_PATTERN = r"^PO-\d+-[A-Za-z0-9]+$"

TAGS = (
    ("collect", "Money in: direct charge and hosted checkout."),
    ("disburse", "Money out from the merchant's balance."),
    ("discovery", "Read-only lists: countries, providers, channels, amount bounds."),
    ("account", "The merchant account: payout limits and balances."),
    ("webhooks", "The merchant's single webhook endpoint."),
    ("legacy", "Previous paths; they answer identically and stay with advance notice before any change."),
    ("hosted-checkout", "The payer-facing checkout pages (HTML; an extension)."),
    ("service", "Health and this document."),
)

DESCRIPTION = """\
Collect money from mobile money numbers (direct charge or hosted checkout) and disburse money from the
merchant balance to mobile money numbers. Every endpoint under /v1 needs `Authorization: Bearer
<API_KEY>`. Bodies are JSON; amounts are JSON numbers in the currency's units, never rounded.

Every response carries `X-Request-Id`. Every error has the shape of the `Error` schema; its `requestId`
equals that header, `code` is the thing to branch on, and only the first problem found is reported.
An unknown path answers 404 `NOT_FOUND`; a method a path does not accept answers 405 `INVALID_REQUEST`
with an `Allow` header; a body over 1 MiB answers 413 `INVALID_REQUEST`.

Operations, responses and fields marked `x-extension: true` go beyond the API specification."""


# --- small builders (called when the document is built, never at import) -----------------------


def _ref(kind: str, name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/{kind}/{name}"}


def _schema(name: str) -> dict[str, Any]:
    return _ref("schemas", name)


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "nullable": True}


def _string(**bounds: Any) -> dict[str, Any]:
    return {"type": "string", **bounds}


def _exact_object(
    properties: dict[str, Any],
    *,
    required: list[str] | None = None,
    description: str | None = None,
    extension: bool = False,
) -> dict[str, Any]:
    """An object whose properties are all listed (required unless named otherwise) and no others."""
    schema: dict[str, Any] = {
        "type": "object",
        "required": list(properties) if required is None else required,
        "properties": properties,
        "additionalProperties": False,
    }
    if description is not None:
        schema["description"] = description
    if extension:
        schema["x-extension"] = True
    return schema


def _open_object(properties: dict[str, Any], *, required: list[str], **more: Any) -> dict[str, Any]:
    """A request body: the fields read are listed; other fields are ignored, not refused."""
    schema: dict[str, Any] = {"type": "object", "properties": properties, **more}
    if required:
        schema["required"] = required
    return schema


def _headers(*names: str) -> dict[str, Any]:
    return {name: _ref("headers", name) for name in names}


def _json_content(schema: dict[str, Any], example: Any = None) -> dict[str, Any]:
    media: dict[str, Any] = {"schema": schema}
    if example is not None:
        media["example"] = example
    return {JSON: media}


def _ok(
    description: str,
    schema: dict[str, Any],
    *,
    rate_limited: bool = True,
    cache: bool = False,
) -> dict[str, Any]:
    names = ["X-Request-Id"]
    if rate_limited:
        names += ["X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"]
    if cache:
        names.append("Cache-Control")
    return {"description": description, "headers": _headers(*names), "content": _json_content(schema)}


def _error(description: str, codes: tuple[str, ...], *headers: str) -> dict[str, Any]:
    """An error answer whose ``code`` is one of ``codes`` (CONTRACT §6)."""
    schema = {"allOf": [_schema("Error"), {"type": "object", "properties": {"code": {"enum": list(codes)}}}]}
    return {
        "description": description,
        "headers": _headers("X-Request-Id", *headers),
        "content": _json_content(schema),
    }


def _authenticated_errors(
    *,
    forbidden: tuple[str, ...] = ACCESS_403,
    bad_request: tuple[str, ...] | None = None,
    not_found: str | None = None,
    body: bool = False,
    idempotent: bool = False,
) -> dict[str, Any]:
    responses: dict[str, Any] = {}
    if bad_request is not None:
        responses["400"] = _error(
            "The request is not valid; `param` names the field or header at fault.", bad_request
        )
    responses["401"] = _ref("responses", "Unauthorized")
    responses["403"] = _error(
        "Refused: key scope, account state, or a switch or limit; `code` says which.", forbidden
    )
    if not_found is not None:
        responses["404"] = _error(not_found, ("NOT_FOUND",))
    if idempotent:
        responses["409"] = _ref("responses", "IdempotencyKeyReused")
    if body:
        responses["413"] = _ref("responses", "PayloadTooLarge")
    responses["429"] = _ref("responses", "RateLimited")
    responses["500"] = _ref("responses", "ServerError")
    return responses


def _operation(
    operation_id: str,
    summary: str,
    tag: str,
    responses: dict[str, Any],
    *,
    description: str | None = None,
    parameters: list[dict[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
    legacy_of: str | None = None,
    extension: bool = False,
    public: bool = False,
) -> dict[str, Any]:
    operation: dict[str, Any] = {"operationId": operation_id, "summary": summary, "tags": [tag]}
    if legacy_of is not None:
        operation["tags"] = [tag, "legacy"]
        operation["deprecated"] = True
        text = f"Previous path of `{legacy_of}`; answers identically."
        description = f"{text} {description}" if description else text
    if description:
        operation["description"] = description
    if parameters:
        operation["parameters"] = parameters
    if body is not None:
        operation["requestBody"] = body
    operation["responses"] = responses
    if public:
        operation["security"] = []
    if extension:
        operation["x-extension"] = True
    return operation


# --- components ------------------------------------------------------------------------------------


def _components() -> dict[str, Any]:
    money = {"type": "number", "description": "An amount in the currency's units (not minor units)."}
    timestamp = _string(format="date-time", pattern=TIMESTAMP_PATTERN, example="2026-01-01T00:00:00.000Z")
    collection: dict[str, Any] = {
        "reference": _string(pattern=COLLECTION_REFERENCE_PATTERN),
        "status": _schema("CollectionStatus"),
        "amount": money,
        "currency": _string(),
        "requestedAmount": money,
        "requestedCurrency": _string(),
        "description": _string(),
        "merchantReference": _nullable(_string()),
        "checkoutUrl": _nullable(_string(format="uri")),
        "method": _nullable(_string(enum=["MOBILE_MONEY", "CARD", "CRYPTO", None])),
        "providerCode": _nullable(_string()),
        "expiresAt": timestamp,
        "createdAt": timestamp,
        "failureCategory": _nullable(_string()),
    }
    amount_in = {
        "type": "number",
        "minimum": 0,
        "exclusiveMinimum": True,
        "description": "A JSON number, positive, within the currency's bounds (GET /v1/limits) and with no "
        "more decimals than the currency has: more precision is refused, never rounded. Strings, "
        "booleans, NaN and Infinity are refused.",
        "example": 1000,
    }
    merchant_reference_in = _nullable(
        _string(maxLength=120, description="The merchant's own identifier, echoed back as merchantReference.")
    )
    reference_alias = _nullable(
        _string(
            maxLength=120,
            deprecated=True,
            description="Alias of merchantReference, read only when merchantReference is not given.",
        )
    )
    schemas: dict[str, Any] = {
        "Error": _exact_object(
            {
                "code": {"type": "string", "enum": list(ALL_CODES), "description": "Stable; branch on it."},
                "message": _string(description="Human text; free to change."),
                "param": _string(description="The field or header at fault; absent when not about one."),
                "details": {
                    "type": "object",
                    "description": "The numbers behind the message: on amount, balance and limit failures "
                    "(and `expected` on CURRENCY_MISMATCH); absent otherwise.",
                    "additionalProperties": True,
                },
                "requestId": _string(minLength=1, description="Equals the X-Request-Id header."),
            },
            required=["code", "message", "requestId"],
        ),
        "Amount": amount_in,
        "ChargeRequest": _open_object(
            {
                "amount": _schema("Amount"),
                "currency": _string(
                    minLength=1, description="A currency from GET /v1/limits.", example="XAF"
                ),
                "country": _string(minLength=1, description="ISO country of the number.", example="CM"),
                "provider": _string(minLength=1, description="A code from GET /v1/account/providers."),
                "phone": _string(
                    minLength=1, description="The local number, digits only.", example="670000000"
                ),
                "merchantReference": merchant_reference_in,
                "reference": reference_alias,
                "description": _nullable(_string(maxLength=200, description="Shown to the payer.")),
            },
            required=["amount", "currency", "country", "provider", "phone"],
        ),
        "CheckoutRequest": _open_object(
            {
                "amount": _schema("Amount"),
                "currency": _string(minLength=1, description="Any active currency code.", example="XAF"),
                "description": _nullable(_string(maxLength=200, description="Shown to the payer.")),
                "merchantReference": merchant_reference_in,
                "reference": reference_alias,
                "expiresInMinutes": _nullable(
                    {"type": "integer", "minimum": 1, "maximum": 10080, "default": 60}
                ),
            },
            required=["amount", "currency"],
        ),
        "LegacyPaymentRequest": _open_object(
            {
                "amount": _schema("Amount"),
                "currency": _string(minLength=1, example="XAF"),
                "description": _nullable(_string(maxLength=200)),
                "reference": _nullable(
                    _string(
                        maxLength=120, description="The merchant's identifier, echoed as merchantReference."
                    )
                ),
                "expiresInMinutes": _nullable(
                    {"type": "integer", "minimum": 1, "maximum": 10080, "default": 60}
                ),
            },
            required=["amount", "currency"],
        ),
        "DisburseRequest": _open_object(
            {
                "amount": _schema("Amount"),
                "currency": _string(minLength=1, description="A currency held in a balance.", example="XAF"),
                "phone": _string(
                    minLength=1, maxLength=32, description="The local number.", example="670000000"
                ),
                "recipientName": _nullable(_string(maxLength=120)),
                "provider": _nullable(
                    _string(description="Network code; detected from the number when not given.")
                ),
                "country": _nullable(_string(description="ISO country of the number.", default="CM")),
                "merchantReference": merchant_reference_in,
                "reference": reference_alias,
            },
            required=["amount", "currency", "phone"],
        ),
        "WebhookRequest": _open_object(
            {
                "url": _string(
                    minLength=1,
                    maxLength=2048,
                    format="uri",
                    description="A public http(s) URL; private, loopback and link-local addresses are "
                    "refused.",
                ),
                "events": _nullable(
                    _string(enum=["legacy", "v2", None], description="`legacy` keeps the old event names.")
                ),
            },
            required=["url"],
        ),
        "CollectionRecord": _exact_object(collection),
        "LegacyCollectionRecord": _exact_object(
            {name: schema for name, schema in collection.items() if name not in ("method", "providerCode")},
            description="The Collection record of a payment created through POST /v1/payments: "
            "no method and no providerCode.",
        ),
        "CollectionStatus": _string(enum=["PENDING", "PROCESSING", "SUCCESS", "FAILED"]),
        "ChargeResponse": _exact_object(
            {
                "reference": _string(pattern=COLLECTION_REFERENCE_PATTERN),
                "status": _string(enum=["PENDING"]),
                "amount": money,
                "currency": _string(),
                "provider": _string(),
                "merchantReference": _nullable(_string()),
                "createdAt": timestamp,
            }
        ),
        "PayoutRecord": _exact_object(
            {
                "reference": _string(pattern=PAYOUT_REFERENCE_PATTERN),
                "status": _string(enum=["PENDING", "SENT", "PAID", "FAILED", "REJECTED"]),
                "amount": money,
                "currency": _string(),
                "phone": _string(),
                "recipientName": _nullable(_string()),
                "merchantReference": _nullable(_string()),
                "providerReference": _nullable(_string()),
                "awaitingReview": {"type": "boolean"},
                "statusReason": _nullable(_string()),
                "createdAt": timestamp,
            },
            required=[
                "reference",
                "status",
                "amount",
                "currency",
                "phone",
                "merchantReference",
                "providerReference",
                "awaitingReview",
                "statusReason",
                "createdAt",
            ],
        ),
        "DisburseLimits": {
            "oneOf": [_schema("DisburseLimitsEnabled"), _schema("DisburseLimitsBlocked")],
            "description": "Read `enabled`. The limit fields are present only when enabled is true.",
        },
        "DisburseLimitsEnabled": _exact_object(
            {
                "currency": _string(),
                "enabled": {"type": "boolean", "enum": [True]},
                "platformEnabled": {"type": "boolean", "enum": [True]},
                "configured": {"type": "boolean", "enum": [True]},
                "blockedBy": _nullable({"type": "string", "enum": [None]}),
                "message": _nullable({"type": "string", "enum": [None]}),
                "perTransaction": _nullable(money),
                "perDay": _nullable(money),
                "perWeek": _nullable(money),
                "reviewThreshold": _nullable(money),
                "spentToday": money,
                "spentThisWeek": money,
                "remainingToday": _nullable(money),
                "remainingThisWeek": _nullable(money),
            }
        ),
        "DisburseLimitsBlocked": _exact_object(
            {
                "currency": _string(),
                "enabled": {"type": "boolean", "enum": [False]},
                "platformEnabled": {"type": "boolean"},
                "configured": {"type": "boolean"},
                "blockedBy": _string(enum=["PLATFORM", "ACCOUNT_DISABLED", "CURRENCY_CLOSED"]),
                "message": _string(minLength=1),
            }
        ),
        "CatalogueEntry": _exact_object(
            {
                "provider": _string(),
                "name": _string(),
                "method": _string(),
                "country": _nullable(_string()),
            }
        ),
        "AccountProviderEntry": _exact_object(
            {
                "provider": _string(),
                "name": _string(),
                "method": _string(),
                "country": _nullable(_string()),
                "providerCode": _string(),
                "available": {"type": "boolean"},
                "reason": _nullable(_string()),
            },
            description="Both forms of the spec in one entry: provider/name/method/country and "
            "providerCode/method/country/available/reason.",
        ),
        "ChannelEntry": _exact_object(
            {
                "providerCode": _string(),
                "method": _string(),
                "country": _string(),
                "available": {"type": "boolean"},
                "reason": _nullable(_string(enum=["not_yet_enabled", "restricted", None])),
            }
        ),
        "CountryEntry": _exact_object(
            {
                "country": _string(),
                "name": _string(),
                "currency": _string(),
                "dialCode": _string(pattern=r"^\+\d+$"),
                "phoneDigits": {"type": "integer", "minimum": 1},
                "phoneExample": _string(),
            },
            required=["country", "name", "currency", "dialCode"],
        ),
        "LimitEntry": _exact_object(
            {
                "currency": _string(),
                "min": money,
                "max": money,
                "decimals": {"type": "integer", "minimum": 0},
            }
        ),
        "WebhookRegistration": _exact_object(
            {
                "url": _string(),
                "signingSecret": _string(minLength=1, description="Shown here only, never again."),
                "isActive": {"type": "boolean"},
                "updatedAt": timestamp,
                "events": _string(enum=["legacy", "v2"]),
            },
            required=["url", "signingSecret", "isActive", "updatedAt"],
        ),
        "WebhookRecord": _exact_object(
            {
                "url": _string(),
                "isActive": {"type": "boolean"},
                "disabledReason": _nullable(_string()),
                "updatedAt": timestamp,
                "events": _string(enum=["legacy", "v2"]),
            },
            required=["url", "isActive", "disabledReason", "updatedAt"],
        ),
        "Balances": _exact_object(
            {
                "balances": {
                    "type": "array",
                    "items": _exact_object({"currency": _string(), "available": money, "reserved": money}),
                }
            },
            extension=True,
        ),
        "Health": _exact_object({"status": _string(enum=["ok"])}, extension=True),
        "CheckoutStatus": {
            "type": "object",
            "description": "What the hosted page's script polls; the page may add display fields.",
            "required": ["status", "message"],
            "properties": {"status": _schema("CollectionStatus"), "title": _string(), "message": _string()},
            "x-extension": True,
        },
    }
    headers = {
        "X-Request-Id": {
            "description": "The request's id; equals `requestId` in an error body.",
            "required": True,
            "schema": _string(minLength=1),
        },
        "X-RateLimit-Limit": {
            "description": "The key's per-minute ceiling.",
            "required": True,
            "schema": {"type": "integer", "minimum": 1},
            "x-extension": True,
        },
        "X-RateLimit-Remaining": {
            "description": "Requests left in the current minute.",
            "required": True,
            "schema": {"type": "integer", "minimum": 0},
            "x-extension": True,
        },
        "X-RateLimit-Reset": {
            "description": "Seconds until the minute window frees a request.",
            "required": True,
            "schema": {"type": "integer", "minimum": 0},
            "x-extension": True,
        },
        "Retry-After": {
            "description": "Seconds to wait before retrying.",
            "required": True,
            "schema": {"type": "integer", "minimum": 1},
            "x-extension": True,
        },
        "Cache-Control": {
            "description": "The list may be cached for one hour.",
            "required": True,
            "schema": _string(),
        },
        "Allow": {"description": "The methods the path accepts.", "required": True, "schema": _string()},
        "Location": {"description": "Where to go next.", "required": True, "schema": _string()},
    }
    responses = {
        "Unauthorized": _error("The API key is missing, malformed, unknown or revoked.", ("UNAUTHORIZED",)),
        "IdempotencyKeyReused": {
            **_error(
                "The Idempotency-Key was already used with a different body; nothing happened.",
                ("IDEMPOTENCY_KEY_REUSED",),
            ),
            "x-extension": True,
        },
        "PayloadTooLarge": _error("The body is larger than 1 MiB.", ("INVALID_REQUEST",)),
        "RateLimited": _error(
            "The key went over its per-minute or per-hour ceiling; the message names the window.",
            ("RATE_LIMITED",),
            "Retry-After",
        ),
        "ServerError": _error("Service-side failure; retry and quote requestId.", ("SERVER_ERROR",)),
        "NotFound": _error("No such path, or no such resource on this account.", ("NOT_FOUND",)),
        "MethodNotAllowed": _error("The path does not accept this method.", ("INVALID_REQUEST",), "Allow"),
    }
    parameters = {
        "IdempotencyKey": {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "description": "Scoped per merchant: a repeat with the same key and body answers the original "
            "status and body and does nothing twice; the same key with another body answers 409.",
            "schema": _string(minLength=1, maxLength=200),
        },
        "IdempotencyKeyRequired": {
            "name": "Idempotency-Key",
            "in": "header",
            "required": True,
            "description": "Required on payouts. The same key returns the original payout; nothing moves "
            "twice. The same key with another body answers 409.",
            "schema": _string(minLength=1, maxLength=200),
        },
        "CollectionReference": {
            "name": "reference",
            "in": "path",
            "required": True,
            "description": "A collection reference (REQ-...).",
            "schema": _string(minLength=1),
        },
        "PayoutReference": {
            "name": "reference",
            "in": "path",
            "required": True,
            "description": "A payout reference (PO-...).",
            "schema": _string(minLength=1),
        },
        "Currency": {
            "name": "currency",
            "in": "path",
            "required": True,
            "description": "A currency that can be paid out, e.g. XAF.",
            "schema": _string(minLength=1),
        },
    }
    return {
        "securitySchemes": {
            "bearerAuth": {
                "type": "http",
                "scheme": "bearer",
                "description": "An API key created in the dashboard, with the Collect and/or Disburse scope.",
            }
        },
        "schemas": schemas,
        "headers": headers,
        "responses": responses,
        "parameters": parameters,
    }


# --- paths ---------------------------------------------------------------------------------------


def _body(schema_name: str, example: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": _json_content(_schema(schema_name), example)}


def _collect_paths() -> dict[str, Any]:
    charge_400 = ("INVALID_REQUEST", "IDEMPOTENCY_KEY_TOO_LONG", "UNKNOWN_CURRENCY", *MOBILE_400, *AMOUNT_400)
    checkout_400 = ("INVALID_REQUEST", "IDEMPOTENCY_KEY_TOO_LONG", "UNKNOWN_CURRENCY", *AMOUNT_400)
    idempotency = [_ref("parameters", "IdempotencyKey")]
    collection_any = {"oneOf": [_schema("CollectionRecord"), _schema("LegacyCollectionRecord")]}
    not_found = "No such collection on this account (also for another merchant's reference)."

    def checkout(*, legacy: bool) -> dict[str, Any]:
        if legacy:
            return _operation(
                "createPaymentLegacy",
                "Create a payment and its hosted checkout link (legacy)",
                "collect",
                {
                    "201": _ok(
                        "The payment, without method and providerCode.", _schema("LegacyCollectionRecord")
                    ),
                    **_authenticated_errors(
                        forbidden=(*TRANSACT_403, "PROVIDER_BLOCKED"),
                        bad_request=checkout_400,
                        body=True,
                        idempotent=True,
                    ),
                },
                description="The merchant's identifier is `reference`, echoed as merchantReference. Before "
                "payment, amount/currency is the settlement-currency equivalent of the price.",
                parameters=idempotency,
                body=_body(
                    "LegacyPaymentRequest", {"amount": 2500, "currency": "XAF", "reference": "order-7"}
                ),
                legacy_of="POST /v1/collect/checkout",
            )
        return _operation(
            "collectCheckout",
            "Create a payment and its hosted checkout link",
            "collect",
            {
                "201": _ok("The payment (PENDING) with its checkoutUrl.", _schema("CollectionRecord")),
                **_authenticated_errors(
                    forbidden=TRANSACT_403, bad_request=checkout_400, body=True, idempotent=True
                ),
            },
            description="Needs the Collect scope. The same Idempotency-Key returns the same payment.",
            parameters=idempotency,
            body=_body(
                "CheckoutRequest",
                {
                    "amount": 2500,
                    "currency": "XAF",
                    "description": "Order 7",
                    "merchantReference": "order-7",
                    "expiresInMinutes": 60,
                },
            ),
        )

    def get_collection(*, legacy: bool) -> dict[str, Any]:
        return _operation(
            "getPaymentLegacy" if legacy else "getCollection",
            "Read a collection",
            "collect",
            {
                "200": _ok(
                    "The Collection record; a payment created through POST /v1/payments has no method "
                    "and no providerCode.",
                    collection_any,
                ),
                **_authenticated_errors(forbidden=SCOPED_403, not_found=not_found),
            },
            parameters=[_ref("parameters", "CollectionReference")],
            legacy_of="GET /v1/collect/{reference}" if legacy else None,
        )

    return {
        "/v1/collect/charge": {
            "post": _operation(
                "collectCharge",
                "Push a mobile money prompt to a phone",
                "collect",
                {
                    "202": _ok(
                        "Accepted; the prompt is on its way. Read the result with GET.",
                        _schema("ChargeResponse"),
                    ),
                    **_authenticated_errors(
                        forbidden=(*TRANSACT_403, "PROVIDER_BLOCKED", "RECIPIENT_BUSY"),
                        bad_request=charge_400,
                        body=True,
                        idempotent=True,
                    ),
                },
                description="Needs the Collect scope. Refusals happen before any prompt; nothing is "
                "charged. A repeat with the same Idempotency-Key returns the original charge and sends no "
                "second prompt.",
                parameters=idempotency,
                body=_body(
                    "ChargeRequest",
                    {
                        "amount": 1000,
                        "currency": "XAF",
                        "country": "CM",
                        "provider": "mtn_cm",
                        "phone": "670000000",
                        "merchantReference": "order-1",
                        "description": "Order 1",
                    },
                ),
            )
        },
        "/v1/collect/checkout": {"post": checkout(legacy=False)},
        "/v1/payments": {"post": checkout(legacy=True)},
        "/v1/collect/{reference}": {"get": get_collection(legacy=False)},
        "/v1/payments/{reference}": {"get": get_collection(legacy=True)},
    }


def _disburse_paths() -> dict[str, Any]:
    disburse_400 = (
        "INVALID_REQUEST",
        "IDEMPOTENCY_KEY_REQUIRED",
        "IDEMPOTENCY_KEY_TOO_LONG",
        "UNKNOWN_CURRENCY",
        *MOBILE_400,
        *AMOUNT_400,
        "INSUFFICIENT_BALANCE",
    )
    disburse_403 = (
        *TRANSACT_403,
        "PROVIDER_BLOCKED",
        "PAYOUT_LIMIT_EXCEEDED",
        "PAYOUTS_NOT_CONFIGURED",
    )

    def create(*, legacy: bool) -> dict[str, Any]:
        return _operation(
            "createPayoutLegacy" if legacy else "disburse",
            "Send money from the balance to a mobile money number",
            "disburse",
            {
                "201": _ok("The payout (PENDING); the amount is reserved at once.", _schema("PayoutRecord")),
                **_authenticated_errors(
                    forbidden=disburse_403, bad_request=disburse_400, body=True, idempotent=True
                ),
            },
            description="Needs the Disburse scope and an Idempotency-Key. Checked before the balance moves: "
            "permission, payout limits, the live balance, the review threshold.",
            parameters=[_ref("parameters", "IdempotencyKeyRequired")],
            body=_body(
                "DisburseRequest",
                {
                    "amount": 1000,
                    "currency": "XAF",
                    "phone": "670000000",
                    "recipientName": "Awa Ngono",
                    "provider": "mtn_cm",
                    "country": "CM",
                    "merchantReference": "payout-1",
                },
            ),
            legacy_of="POST /v1/disburse" if legacy else None,
        )

    def get(*, legacy: bool) -> dict[str, Any]:
        return _operation(
            "getPayoutLegacy" if legacy else "getPayout",
            "Read a payout",
            "disburse",
            {
                "200": _ok("The Payout record.", _schema("PayoutRecord")),
                **_authenticated_errors(
                    forbidden=SCOPED_403,
                    not_found="No such payout on this account (also for another merchant's reference).",
                ),
            },
            parameters=[_ref("parameters", "PayoutReference")],
            legacy_of="GET /v1/disburse/{reference}" if legacy else None,
        )

    def limits(*, legacy: bool) -> dict[str, Any]:
        return _operation(
            "getPayoutLimitsLegacy" if legacy else "getDisburseLimits",
            "Whether a payout would be accepted, and the payout limits",
            "account",
            {
                "200": _ok(
                    "Answered whether or not payouts are possible; read enabled.", _schema("DisburseLimits")
                ),
                **_authenticated_errors(
                    forbidden=SCOPED_403, bad_request=("INVALID_REQUEST", "UNKNOWN_CURRENCY")
                ),
            },
            description="Needs the Disburse scope.",
            parameters=[_ref("parameters", "Currency")],
            legacy_of="GET /v1/account/disburse-limits/{currency}" if legacy else None,
        )

    return {
        "/v1/disburse": {"post": create(legacy=False)},
        "/v1/payouts": {"post": create(legacy=True)},
        "/v1/disburse/{reference}": {"get": get(legacy=False)},
        "/v1/payouts/{reference}": {"get": get(legacy=True)},
        "/v1/account/disburse-limits/{currency}": {"get": limits(legacy=False)},
        "/v1/payout-limits/{currency}": {"get": limits(legacy=True)},
    }


def _discovery_paths() -> dict[str, Any]:
    def listing(operation_id: str, summary: str, item: str, *, cache: bool, **more: Any) -> dict[str, Any]:
        return {
            "get": _operation(
                operation_id,
                summary,
                "discovery",
                {
                    "200": _ok(summary + ".", {"type": "array", "items": _schema(item)}, cache=cache),
                    **_authenticated_errors(),
                },
                description="Any valid key of the merchant may read it.",
                **more,
            )
        }

    return {
        "/v1/countries": listing(
            "listCountries", "The countries where at least one provider is usable", "CountryEntry", cache=True
        ),
        "/v1/providers": listing(
            "listProviders", "Every network the platform supports", "CatalogueEntry", cache=True
        ),
        "/v1/limits": listing("listLimits", "Amount bounds per currency", "LimitEntry", cache=True),
        "/v1/account/providers": listing(
            "listAccountProviders", "The payment providers usable now", "AccountProviderEntry", cache=False
        ),
        "/v1/channels": listing(
            "listChannels",
            "The channels of the account",
            "ChannelEntry",
            cache=False,
            legacy_of="GET /v1/account/providers",
        ),
        "/v1/account/balances": {
            "get": _operation(
                "getBalances",
                "Available and reserved money per currency",
                "account",
                {"200": _ok("The balances.", _schema("Balances")), **_authenticated_errors()},
                extension=True,
            )
        },
    }


def _webhook_paths() -> dict[str, Any]:
    def register(operation_id: str, *, legacy: bool = False, same_as_put: bool = False) -> dict[str, Any]:
        description = (
            "Registers or replaces the merchant's single endpoint, rotates the signing secret and clears any "
            "auto-disable state. Any valid key of the merchant may do it."
        )
        if same_as_put:
            description = "Same as PUT /v1/webhook. " + description
        example: dict[str, Any] = {"url": "https://shop.example/webhooks", "events": "v2"}
        if legacy:
            description += " An endpoint registered here receives the legacy event names."
            example = {"url": "https://shop.example/webhooks"}
        return _operation(
            operation_id,
            "Register the webhook endpoint" + (" (legacy)" if legacy else ""),
            "webhooks",
            {
                "200": _ok(
                    "Registered; the signing secret is shown this once.", _schema("WebhookRegistration")
                ),
                **_authenticated_errors(
                    bad_request=("INVALID_REQUEST", "IDEMPOTENCY_KEY_TOO_LONG"), body=True, idempotent=True
                ),
            },
            description=description,
            parameters=[_ref("parameters", "IdempotencyKey")],
            body=_body("WebhookRequest", example),
            legacy_of="PUT /v1/webhook" if legacy else None,
        )

    return {
        "/v1/webhook": {
            "get": _operation(
                "getWebhook",
                "Read the webhook endpoint (never the secret)",
                "webhooks",
                {
                    "200": _ok("The endpoint.", _schema("WebhookRecord")),
                    **_authenticated_errors(not_found="No webhook endpoint is registered for this account."),
                },
            ),
            "put": register("putWebhook"),
            "post": register("postWebhook", same_as_put=True),
        },
        "/v1/webhooks": {"post": register("postWebhooksLegacy", legacy=True)},
    }


def _service_paths() -> dict[str, Any]:
    server_error = {"500": _ref("responses", "ServerError")}
    return {
        "/healthz": {
            "get": _operation(
                "healthz",
                "Liveness",
                "service",
                {"200": _ok("The server answers.", _schema("Health"), rate_limited=False), **server_error},
                public=True,
                extension=True,
            )
        },
        "/openapi.json": {
            "get": _operation(
                "getOpenApiDocument",
                "This document",
                "service",
                {
                    "200": _ok(
                        "The OpenAPI document.",
                        {"type": "object", "required": ["openapi", "info", "paths"]},
                        rate_limited=False,
                    ),
                    **server_error,
                },
                public=True,
                extension=True,
            )
        },
    }


def _page_paths() -> dict[str, Any]:
    reference = {
        "name": "reference",
        "in": "path",
        "required": True,
        "description": "The payment's reference (REQ-...).",
        "schema": _string(minLength=1),
    }

    def page(description: str) -> dict[str, Any]:
        return {
            "description": description,
            "headers": _headers("X-Request-Id"),
            "content": {HTML: {"schema": _string()}},
        }

    return {
        "/checkout/{reference}": {
            "get": _operation(
                "checkoutPage",
                "The hosted checkout page",
                "hosted-checkout",
                {
                    "200": page("What is asked and, while payable, the form (provider, phone, submit)."),
                    "404": page("No such payment."),
                    "500": _ref("responses", "ServerError"),
                },
                parameters=[reference],
                public=True,
                extension=True,
            ),
            "post": _operation(
                "submitCheckoutPage",
                "The payer's choice, as a plain form post",
                "hosted-checkout",
                {
                    "303": {
                        "description": "Accepted; back to the page, which shows the status.",
                        "headers": _headers("X-Request-Id", "Location"),
                    },
                    "400": page("Refused; the page again with the reason."),
                    "404": page("No such payment."),
                    "413": _ref("responses", "PayloadTooLarge"),
                    "500": _ref("responses", "ServerError"),
                },
                parameters=[reference],
                body={
                    "required": True,
                    "content": {
                        "application/x-www-form-urlencoded": {
                            "schema": {
                                "type": "object",
                                "properties": {"provider": _string(), "phone": _string()},
                            }
                        }
                    },
                },
                public=True,
                extension=True,
            ),
        },
        "/checkout/{reference}/status": {
            "get": _operation(
                "checkoutPageStatus",
                "The status the page polls",
                "hosted-checkout",
                {
                    "200": {
                        "description": "The collection status and the payer-facing message.",
                        "headers": _headers("X-Request-Id", "Cache-Control"),
                        "content": _json_content(_schema("CheckoutStatus")),
                    },
                    "404": _ref("responses", "NotFound"),
                    "500": _ref("responses", "ServerError"),
                },
                parameters=[reference],
                public=True,
                extension=True,
            )
        },
        "/checkout-assets/page.js": {
            "get": _operation(
                "checkoutPageScript",
                "The page's script (live status updates)",
                "hosted-checkout",
                {
                    "200": {
                        "description": "The script.",
                        "headers": _headers("X-Request-Id", "Cache-Control"),
                        "content": {"text/javascript": {"schema": _string()}},
                    },
                    "500": _ref("responses", "ServerError"),
                },
                public=True,
                extension=True,
            )
        },
        "/checkout-assets/icon.svg": {
            "get": _operation(
                "checkoutPageIcon",
                "The page's icon",
                "hosted-checkout",
                {
                    "200": {
                        "description": "The icon.",
                        "headers": _headers("X-Request-Id", "Cache-Control"),
                        "content": {"image/svg+xml": {"schema": _string()}},
                    },
                    "500": _ref("responses", "ServerError"),
                },
                public=True,
                extension=True,
            )
        },
    }


def openapi_document(public_url: str | None = None) -> dict[str, Any]:
    """The OpenAPI document of the whole API; ``public_url`` becomes its server address when given."""
    document: dict[str, Any] = {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "paymentcore: mobile money collection and disbursement API",
            "version": API_VERSION,
            "description": DESCRIPTION,
        },
    }
    if public_url:
        document["servers"] = [{"url": public_url.rstrip("/")}]
    document["security"] = [{"bearerAuth": []}]
    document["tags"] = [{"name": name, "description": text} for name, text in TAGS]
    document["paths"] = {
        **_collect_paths(),
        **_disburse_paths(),
        **_discovery_paths(),
        **_webhook_paths(),
        **_service_paths(),
        **_page_paths(),
    }
    document["components"] = _components()
    return document
