"""The OpenAPI 3.1 description of the whole HTTP API (served at ``GET /openapi.json``, an extension).

Written as Python data, not read from a file: ``openapi_document()`` builds a fresh dict on every call,
so a caller may change what it gets. Nothing is computed at import besides the constants below.

What the document says is the contract (``spec/api.md`` and CONTRACT §4-§8), not a picture of the
code: response shapes are exact (``additionalProperties: false``), and request bodies carry the spec's
bounds. Request bodies stay open (unknown fields are ignored) and optional request fields accept
``null`` as "not given". Anything beyond the spec is marked ``x-extension: true`` (and says so in its
description); the old paths are ``deprecated`` aliases that answer identically.

Written for code generators as much as for people:

- every error answer is the one ``Error`` schema, by ``$ref``; the codes a status may carry for an
  operation are listed in the answer's description and in ``x-error-codes``;
- a record, an enum or a list page is a named component, defined once and referenced everywhere;
- a field that may be null says so the 3.1 way (``type: [..., "null"]`` or ``anyOf`` with
  ``{type: null}``), never with 3.0's ``nullable``;
- amounts are ``type: number`` with ``format: decimal`` (generators that know that format, such as
  Speakeasy's or OpenAPI Generator's C# one, give them an exact decimal type; the others ignore it),
  described as exact decimals in the currency's units (never ``format: float``);
- ``webhooks`` describes every event the service POSTs to the merchant: the body and the headers.
"""

from __future__ import annotations

import re
from typing import Any

from paymentcore import errors, events, signing
from paymentcore.config import DEFAULT_AUTO_DISABLE_AFTER, DEFAULT_WEBHOOK_TIMEOUT_SECONDS
from paymentcore.events import EventType
from paymentcore.limits import (
    DEFAULT_CHECKOUT_MINUTES,
    DEFAULT_PAGE_LIMIT,
    MAX_BATCH_ITEMS,
    MAX_CHECKOUT_MINUTES,
    MAX_DESCRIPTION_LENGTH,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    MAX_MERCHANT_REFERENCE_LENGTH,
    MAX_PAGE_LIMIT,
    MAX_PHONE_LENGTH,
    MAX_RECIPIENT_NAME_LENGTH,
    MAX_URL_LENGTH,
    MIN_CHECKOUT_MINUTES,
)
from paymentcore.references import (
    BATCH_ID_PREFIX,
    COLLECTION_REFERENCE_PREFIX,
    EVENT_ID_PREFIX,
    PAYOUT_REFERENCE_PREFIX,
)
from paymentcore.signing import (
    EVENT_HEADER,
    EVENT_ID_HEADER,
    SIGNATURE_HEADER,
    SIGNATURE_HEX_DIGITS,
    SIGNATURE_SCHEME,
    TIMESTAMP_HEADER,
    TOLERANCE_SECONDS,
)
from paymentcore_server._headers import (
    IDEMPOTENCY_HEADER,
    RATE_LIMIT_LIMIT,
    RATE_LIMIT_REMAINING,
    RATE_LIMIT_RESET,
    REQUEST_ID_HEADER,
    RETRY_AFTER_HEADER,
)

__all__ = [
    "ACCESS_403",
    "ALL_CODES",
    "AMOUNT_400",
    "API_VERSION",
    "BATCH_EVENTS",
    "BATCH_ID_PATTERN",
    "COLLECTION_EVENTS",
    "COLLECTION_REFERENCE_PATTERN",
    "DESCRIPTION",
    "EVENT_ID_PATTERN",
    "HTML",
    "JSON",
    "LEGACY_EVENT_NAMES",
    "MOBILE_400",
    "MONEY_DESCRIPTION",
    "OPENAPI_VERSION",
    "PAYOUT_EVENTS",
    "PAYOUT_REFERENCE_PATTERN",
    "SCOPED_403",
    "SIGNATURE_PATTERN",
    "TAGS",
    "TIMESTAMP_PATTERN",
    "TRANSACT_403",
    "WEBHOOK_HEADERS",
    "openapi_document",
]

OPENAPI_VERSION = "3.1.0"
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


def prefixed_pattern(prefix: str, rest: str) -> str:
    """The pattern of a reference or id: ``prefix`` matched literally (escaped only where the syntax
    needs it, so the pattern stays plain: ``-`` and ``_`` are literal outside a class), then ``rest``."""
    literal = "".join(c if c.isalnum() or c in "-_" else re.escape(c) for c in prefix)
    return f"^{literal}{rest}$"


# a reference: the prefix, the time in milliseconds, then the random part; an id: the prefix, the random part
COLLECTION_REFERENCE_PATTERN = prefixed_pattern(COLLECTION_REFERENCE_PREFIX, r"\d+-[A-Za-z0-9]+")
PAYOUT_REFERENCE_PATTERN = prefixed_pattern(PAYOUT_REFERENCE_PREFIX, r"\d+-[A-Za-z0-9]+")
EVENT_ID_PATTERN = prefixed_pattern(EVENT_ID_PREFIX, "[A-Za-z0-9]+")
BATCH_ID_PATTERN = prefixed_pattern(BATCH_ID_PREFIX, "[A-Za-z0-9]+")

_EXTENSION = "**Extension.** "  # how an extension's description starts

MONEY_DESCRIPTION = (
    "An exact decimal in the currency's units, not minor units (2500 XAF, 12.5 USD): read it as a "
    "decimal, never through a binary float."
)

# --- webhooks (spec "Events") ----------------------------------------------------------------------

# the library's event types (paymentcore.events), as the plain names the document shows
COLLECTION_EVENTS = tuple(t.value for t in events.COLLECTION_EVENTS)
PAYOUT_EVENTS = tuple(t.value for t in events.PAYOUT_EVENTS)
BATCH_EVENTS = tuple(t.value for t in events.BATCH_EVENTS)  # an extension; the same name for legacy endpoints
LEGACY_EVENT_NAMES = dict(events.LEGACY_NAMES)  # the current name -> the name a legacy endpoint gets
WEBHOOK_HEADERS = signing.WEBHOOK_HEADERS
#: the signature header's value: the scheme, then the lowercase hex digest
SIGNATURE_PATTERN = f"^{re.escape(SIGNATURE_SCHEME)}[0-9a-f]{{{SIGNATURE_HEX_DIGITS}}}$"

_EVENT_WHEN: dict[EventType, tuple[str, str]] = {
    EventType.COLLECT_SUCCEEDED: ("A collection reached SUCCESS: the payer's payment cleared.", "SUCCESS"),
    EventType.COLLECT_FAILED: (
        "A collection reached FAILED: the payment did not clear (including an expired checkout).",
        "FAILED",
    ),
    EventType.DISBURSE_SENT: (
        "A payout reached SENT: the network accepted it. Not yet delivered: wait for disburse.succeeded.",
        "SENT",
    ),
    EventType.DISBURSE_SUCCEEDED: ("A payout reached PAID: the recipient has the money.", "PAID"),
    EventType.DISBURSE_FAILED: (
        "A payout reached FAILED (the network refused it; the money stays reserved) or REJECTED (declined "
        "in review; the money is back in the balance).",
        "FAILED or REJECTED",
    ),
    EventType.DISBURSE_BULK_COMPLETED: (
        "**Extension.** Every accepted item of a bulk payout request (POST /v1/disburse/bulk) is final: "
        "PAID, FAILED or REJECTED (at once for a batch that accepted nothing). Sent once per batch, after "
        "the events of its payouts.",
        "COMPLETED",
    ),
}

TAGS = (
    ("collect", "Money in: direct charge and hosted checkout."),
    ("disburse", "Money out from the merchant's balance."),
    ("discovery", "Read-only lists: countries, providers, channels, amount bounds."),
    ("account", "The merchant account: payout limits, balances and the ledger."),
    ("webhooks", "The merchant's single webhook endpoint, and the events delivered to it."),
    ("events", "The events written for the merchant: list, inspect, resend (an extension)."),
    ("legacy", "Previous paths; they answer identically and stay with advance notice before any change."),
    ("hosted-checkout", "The payer-facing checkout pages (HTML; an extension)."),
    ("service", "Health and this document."),
)

DESCRIPTION = f"""\
Collect money from mobile money numbers (direct charge or hosted checkout) and disburse money from the
merchant balance to mobile money numbers. Every endpoint under /v1 needs `Authorization: Bearer
<API_KEY>`. Bodies are JSON; amounts are JSON numbers in the currency's units, exact decimals, never
rounded.

Every response carries `{REQUEST_ID_HEADER}`. Every error has the shape of the one `Error` schema; its
`requestId` equals that header, `code` is the thing to branch on (each error answer lists the codes it
may carry in `x-error-codes`), and only the first problem found is reported. An unknown path answers
404 `NOT_FOUND`; a method a path does not accept answers 405 `INVALID_REQUEST` with an `Allow` header; a
body over 1 MiB answers 413 `INVALID_REQUEST`; a request line and headers over 32 KiB together answer
431 `INVALID_REQUEST` (and the connection is closed).

The `webhooks` section describes what the service POSTs to the merchant's registered URL: one entry per
event name (current and legacy), with its body and its signed headers.

Operations, responses and fields marked `x-extension: true` go beyond the API specification."""


# --- small builders (called when the document is built, never at import) -----------------------


def _ref(kind: str, name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/{kind}/{name}"}


def _schema(name: str) -> dict[str, Any]:
    return _ref("schemas", name)


def _nullable(schema: dict[str, Any], **meta: Any) -> dict[str, Any]:
    """``schema`` or null, the 3.1 way: ``null`` joins a plain type (and its enum); a ``$ref`` or a
    composite becomes ``anyOf`` with ``{type: null}``. ``meta`` (a description, ...) goes on the outside."""
    kind = schema.get("type")
    if "$ref" in schema or kind is None:
        return {"anyOf": [schema, {"type": "null"}], **meta}
    types = kind if isinstance(kind, list) else [kind]
    result = {**schema, "type": [*types, "null"], **meta}
    if "enum" in result:
        result["enum"] = [*result["enum"], None]
    return result


def _string(**bounds: Any) -> dict[str, Any]:
    return {"type": "string", **bounds}


def _money(description: str | None = None) -> dict[str, Any]:
    text = MONEY_DESCRIPTION if description is None else f"{description} {MONEY_DESCRIPTION}"
    return {"type": "number", "format": "decimal", "description": text}


def _timestamp(description: str | None = None) -> dict[str, Any]:
    schema = _string(format="date-time", pattern=TIMESTAMP_PATTERN, examples=["2026-01-01T00:00:00.000Z"])
    if description is not None:
        schema["description"] = description
    return schema


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


def _page(item: dict[str, Any], what: str) -> dict[str, Any]:
    """One page of a list: ``{"data": [...], "hasMore": bool}`` (an extension)."""
    return _exact_object(
        {
            "data": {"type": "array", "items": item, "description": f"{what}, at most `limit` of them."},
            "hasMore": {
                "type": "boolean",
                "description": "true when more items follow: ask again with startingAfter set to the last "
                "item's id.",
            },
        },
        description=f"**Extension.** One page of {what}.",
        extension=True,
    )


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
    names = [REQUEST_ID_HEADER]
    if rate_limited:
        names += [RATE_LIMIT_LIMIT, RATE_LIMIT_REMAINING, RATE_LIMIT_RESET]
    if cache:
        names.append("Cache-Control")
    return {"description": description, "headers": _headers(*names), "content": _json_content(schema)}


def _error(description: str, codes: tuple[str, ...], *headers: str) -> dict[str, Any]:
    """An error answer: the one ``Error`` schema, whose ``code`` is one of ``codes`` (CONTRACT §6).

    The codes are listed in the description and in ``x-error-codes``, not in a per-answer schema, so a
    generated client has one error model."""
    listed = ", ".join(f"`{code}`" for code in codes)
    return {
        "description": f"{description} Codes: {listed}.",
        "headers": _headers(REQUEST_ID_HEADER, *headers),
        "content": _json_content(_schema("Error")),
        "x-error-codes": list(codes),
    }


def _authenticated_errors(
    *,
    forbidden: tuple[str, ...] = ACCESS_403,
    bad_request: tuple[str, ...] | None = None,
    not_found: str | None = None,
    body: bool = False,
    idempotent: bool = False,
    bad_request_description: str = "The request is not valid; `param` names the field or header at fault.",
) -> dict[str, Any]:
    responses: dict[str, Any] = {}
    if bad_request is not None:
        responses["400"] = _error(bad_request_description, bad_request)
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


def _enums() -> dict[str, Any]:
    """Every enum of the API, once: a generated client gets one type per enum."""
    return {
        "ErrorCode": _string(enum=list(ALL_CODES), description="Stable; branch on it."),
        "CollectionStatus": _string(enum=["PENDING", "PROCESSING", "SUCCESS", "FAILED"]),
        "PayoutStatus": _string(
            enum=["PENDING", "SENT", "PAID", "FAILED", "REJECTED"],
            description="PENDING and SENT: the money is reserved; PAID: the recipient has it; FAILED: the "
            "network did not complete it (the money stays reserved); REJECTED: declined in review (the "
            "money is back in the balance).",
        ),
        "PaymentMethod": _string(
            enum=["MOBILE_MONEY", "CARD", "CRYPTO"],
            description="The class of payment; the same for every mobile network (read providerCode).",
        ),
        "WebhookEventNames": _string(
            enum=["legacy", "v2"],
            description="Which event names the endpoint receives: `v2` the current ones, `legacy` the old "
            "ones.",
        ),
        "BlockedBy": _string(enum=["PLATFORM", "ACCOUNT_DISABLED", "CURRENCY_CLOSED"]),
        "ChannelReason": _string(
            enum=["not_yet_enabled", "restricted"],
            description="Why a channel is not available: not open platform-wide, or disabled for this "
            "account.",
        ),
        "EventType": _string(
            enum=[t.value for t in EventType],
            description="An event's current name (also for an endpoint that receives the legacy names).",
        ),
        "DeliveryStatus": _string(
            enum=["PENDING", "DELIVERED", "FAILED"],
            description="**Extension.** PENDING: not delivered yet (attempts may be under way); DELIVERED: "
            "the endpoint answered 2xx; FAILED: every attempt failed, or there was no endpoint to send it "
            "to.",
            **{"x-extension": True},
        ),
        "CollectionEventStatus": _string(enum=["SUCCESS", "FAILED"]),
        "BatchMode": _string(
            enum=["each", "all"],
            description="**Extension.** `each`: every item is accepted or refused on its own; `all`: all or "
            "none, one refused item refuses the whole batch and nothing is reserved (payroll).",
            **{"x-extension": True},
        ),
        "BatchStatus": _string(
            enum=["PROCESSING", "COMPLETED"],
            description="**Extension.** PROCESSING while a payout of the batch is PENDING or SENT; "
            "COMPLETED once every one is PAID, FAILED or REJECTED.",
            **{"x-extension": True},
        ),
        "PayoutEventName": _string(
            enum=[*PAYOUT_EVENTS, *(LEGACY_EVENT_NAMES[name] for name in PAYOUT_EVENTS)],
            description="The event's name as delivered: the legacy name for an endpoint registered for "
            "legacy names.",
        ),
    }


def _request_schemas() -> dict[str, Any]:
    merchant_reference_in = _nullable(
        _string(
            maxLength=MAX_MERCHANT_REFERENCE_LENGTH,
            description="The merchant's own identifier, echoed back as merchantReference.",
        )
    )
    reference_alias = _nullable(
        _string(
            maxLength=MAX_MERCHANT_REFERENCE_LENGTH,
            deprecated=True,
            description="Alias of merchantReference, read only when merchantReference is not given.",
        )
    )
    expires_in_minutes = _nullable(
        {
            "type": "integer",
            "minimum": MIN_CHECKOUT_MINUTES,
            "maximum": MAX_CHECKOUT_MINUTES,
            "default": DEFAULT_CHECKOUT_MINUTES,
        }
    )
    return {
        "Amount": {
            "type": "number",
            "format": "decimal",
            "exclusiveMinimum": 0,
            "description": "A JSON number, positive, within the currency's bounds (GET /v1/limits) and with "
            "no more decimals than the currency has: more precision is refused, never rounded. Strings, "
            "booleans, NaN and Infinity are refused. " + MONEY_DESCRIPTION,
            "examples": [1000],
        },
        "ChargeRequest": _open_object(
            {
                "amount": _schema("Amount"),
                "currency": _string(
                    minLength=1, description="A currency from GET /v1/limits.", examples=["XAF"]
                ),
                "country": _string(minLength=1, description="ISO country of the number.", examples=["CM"]),
                "provider": _string(minLength=1, description="A code from GET /v1/account/providers."),
                "phone": _string(
                    minLength=1, description="The local number, digits only.", examples=["670000000"]
                ),
                "merchantReference": merchant_reference_in,
                "reference": reference_alias,
                "description": _nullable(
                    _string(maxLength=MAX_DESCRIPTION_LENGTH, description="Shown to the payer.")
                ),
            },
            required=["amount", "currency", "country", "provider", "phone"],
        ),
        "CheckoutRequest": _open_object(
            {
                "amount": _schema("Amount"),
                "currency": _string(minLength=1, description="Any active currency code.", examples=["XAF"]),
                "description": _nullable(
                    _string(maxLength=MAX_DESCRIPTION_LENGTH, description="Shown to the payer.")
                ),
                "merchantReference": merchant_reference_in,
                "reference": reference_alias,
                "expiresInMinutes": expires_in_minutes,
            },
            required=["amount", "currency"],
        ),
        "LegacyPaymentRequest": _open_object(
            {
                "amount": _schema("Amount"),
                "currency": _string(minLength=1, examples=["XAF"]),
                "description": _nullable(_string(maxLength=MAX_DESCRIPTION_LENGTH)),
                "reference": _nullable(
                    _string(
                        maxLength=MAX_MERCHANT_REFERENCE_LENGTH,
                        description="The merchant's identifier, echoed as merchantReference.",
                    )
                ),
                "expiresInMinutes": expires_in_minutes,
            },
            required=["amount", "currency"],
        ),
        "DisburseRequest": _open_object(
            {
                "amount": _schema("Amount"),
                "currency": _string(
                    minLength=1, description="A currency held in a balance.", examples=["XAF"]
                ),
                "phone": _string(
                    minLength=1,
                    maxLength=MAX_PHONE_LENGTH,
                    description="The local number.",
                    examples=["670000000"],
                ),
                "recipientName": _nullable(_string(maxLength=MAX_RECIPIENT_NAME_LENGTH)),
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
                    maxLength=MAX_URL_LENGTH,
                    format="uri",
                    description="A public http(s) URL; private, loopback and link-local addresses are "
                    "refused.",
                ),
                "events": _nullable(
                    _schema("WebhookEventNames"), description="`legacy` keeps the old event names."
                ),
            },
            required=["url"],
        ),
    }


def _record_schemas() -> dict[str, Any]:
    collection: dict[str, Any] = {
        "reference": _string(pattern=COLLECTION_REFERENCE_PATTERN),
        "status": _schema("CollectionStatus"),
        "amount": _money(
            "Before payment the requested price (legacy path: its settlement-currency equivalent); after "
            "SUCCESS the net amount credited to the merchant."
        ),
        "currency": _string(),
        "requestedAmount": _money("The price asked; never changes."),
        "requestedCurrency": _string(),
        "description": _string(),
        "merchantReference": _nullable(_string()),
        "checkoutUrl": _nullable(_string(format="uri")),
        "method": _nullable(_schema("PaymentMethod"), description="Null until the payer has chosen."),
        "providerCode": _nullable(
            _string(), description="The network that pays; null until chosen. Branch on this, not method."
        ),
        "expiresAt": _timestamp(),
        "createdAt": _timestamp(),
        "failureCategory": _nullable(_string()),
    }
    return {
        "Error": _exact_object(
            {
                "code": _schema("ErrorCode"),
                "message": _string(description="Human text; free to change."),
                "param": _string(description="The field or header at fault; absent when not about one."),
                "details": {
                    "type": "object",
                    "description": "The numbers behind the message: on amount, balance and limit failures "
                    "(and `expected` on CURRENCY_MISMATCH); absent otherwise.",
                    "additionalProperties": True,
                },
                "requestId": _string(minLength=1, description=f"Equals the {REQUEST_ID_HEADER} header."),
            },
            required=["code", "message", "requestId"],
            description="Every error answer, whatever the status. Branch on `code`.",
        ),
        "CollectionRecord": _exact_object(collection),
        "LegacyCollectionRecord": _exact_object(
            {name: schema for name, schema in collection.items() if name not in ("method", "providerCode")},
            description="The Collection record of a payment created through POST /v1/payments: "
            "no method and no providerCode.",
        ),
        "ChargeResponse": _exact_object(
            {
                "reference": _string(pattern=COLLECTION_REFERENCE_PATTERN),
                "status": _string(const="PENDING"),
                "amount": _money(),
                "currency": _string(),
                "provider": _string(),
                "merchantReference": _nullable(_string()),
                "createdAt": _timestamp(),
            }
        ),
        "PayoutRecord": _exact_object(
            {
                "reference": _string(pattern=PAYOUT_REFERENCE_PATTERN),
                "status": _schema("PayoutStatus"),
                "amount": _money("What is sent."),
                "currency": _string(),
                "phone": _string(),
                "recipientName": _nullable(_string()),
                "merchantReference": _nullable(_string()),
                "providerReference": _nullable(_string()),
                "awaitingReview": {"type": "boolean"},
                "statusReason": _nullable(_string()),
                "createdAt": _timestamp(),
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
                "enabled": {"type": "boolean", "const": True},
                "platformEnabled": {"type": "boolean", "const": True},
                "configured": {"type": "boolean", "const": True},
                "blockedBy": {"type": "null"},
                "message": {"type": "null"},
                "perTransaction": _nullable(_money("Largest single payout.")),
                "perDay": _nullable(_money("Rolling 24-hour ceiling; null = none.")),
                "perWeek": _nullable(_money("Rolling 7-day ceiling; null = none.")),
                "reviewThreshold": _nullable(_money("Amounts strictly above it are held; null = none.")),
                "spentToday": _money("Committed in the 24-hour window."),
                "spentThisWeek": _money("Committed in the 7-day window."),
                "remainingToday": _nullable(_money("Left in the day window; null where no ceiling.")),
                "remainingThisWeek": _nullable(_money("Left in the week window; null where no ceiling.")),
            }
        ),
        "DisburseLimitsBlocked": _exact_object(
            {
                "currency": _string(),
                "enabled": {"type": "boolean", "const": False},
                "platformEnabled": {"type": "boolean"},
                "configured": {"type": "boolean"},
                "blockedBy": _schema("BlockedBy"),
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
                "reason": _nullable(_schema("ChannelReason"), description="null when available."),
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
                "min": _money(),
                "max": _money(),
                "decimals": {"type": "integer", "minimum": 0},
            }
        ),
        "WebhookRegistration": _exact_object(
            {
                "url": _string(),
                "signingSecret": _string(minLength=1, description="Shown here only, never again."),
                "isActive": {"type": "boolean"},
                "updatedAt": _timestamp(),
                "events": _schema("WebhookEventNames"),
            },
            required=["url", "signingSecret", "isActive", "updatedAt"],
        ),
        "WebhookRecord": _exact_object(
            {
                "url": _string(),
                "isActive": {"type": "boolean"},
                "disabledReason": _nullable(_string()),
                "updatedAt": _timestamp(),
                "events": _schema("WebhookEventNames"),
            },
            required=["url", "isActive", "disabledReason", "updatedAt"],
        ),
        "Balance": _exact_object(
            {
                "currency": _string(),
                "available": _money("Can be paid out."),
                "reserved": _money("Held by payouts that are not finished."),
            },
            extension=True,
        ),
        "Balances": _exact_object(
            {"balances": {"type": "array", "items": _schema("Balance")}},
            description="**Extension.** One entry per currency the merchant has ever held.",
            extension=True,
        ),
        "Health": _exact_object({"status": _string(const="ok")}, extension=True),
        "CheckoutStatus": {
            "type": "object",
            "description": "What the hosted page's script polls; the page may add display fields.",
            "required": ["status", "message"],
            "properties": {"status": _schema("CollectionStatus"), "title": _string(), "message": _string()},
            "x-extension": True,
        },
    }


def _list_schemas() -> dict[str, Any]:
    event_summary: dict[str, Any] = {
        "id": _string(pattern=EVENT_ID_PATTERN, description="The event's id: the webhook body's eventId."),
        "type": _schema("EventType"),
        "reference": _string(
            description=f"The collection ({COLLECTION_REFERENCE_PREFIX}...) or payout "
            f"({PAYOUT_REFERENCE_PREFIX}...) the event is about."
        ),
        "createdAt": _timestamp("When the event was written (with the state change it reports)."),
        "deliveryStatus": _schema("DeliveryStatus"),
        "attempts": {"type": "integer", "minimum": 0, "description": "Delivery attempts made so far."},
    }
    return {
        "PayoutList": _page(_schema("PayoutRecord"), "payout records"),
        "CollectionList": _page(
            {"oneOf": [_schema("CollectionRecord"), _schema("LegacyCollectionRecord")]},
            "collection records (a payment created through POST /v1/payments has no method and no "
            "providerCode)",
        ),
        "LedgerEntry": _exact_object(
            {
                "id": _string(description="The entry's id."),
                "createdAt": _timestamp(),
                "type": _string(
                    description="The kind of movement, e.g. a collection credited, a payout reserved, "
                    "paid out or released."
                ),
                "reference": _string(
                    description=f"The collection ({COLLECTION_REFERENCE_PREFIX}...) or payout "
                    f"({PAYOUT_REFERENCE_PREFIX}...) behind it."
                ),
                "amount": _money("Signed: positive adds to the merchant's money, negative takes from it."),
                "available": _money("The available balance right after this entry."),
                "reserved": _money("The reserved balance right after this entry."),
            },
            description="**Extension.** One movement of the merchant's balance in one currency.",
            extension=True,
        ),
        "LedgerEntryList": _page(_schema("LedgerEntry"), "ledger entries"),
        "EventSummary": _exact_object(
            event_summary,
            description="**Extension.** An event written for the merchant and where its delivery stands.",
            extension=True,
        ),
        "EventRecord": _exact_object(
            {
                **event_summary,
                "payload": {
                    "type": "object",
                    "additionalProperties": True,
                    "description": "The event's body (see the `webhooks` section for its shape).",
                },
                "deliveries": {
                    "type": "array",
                    "items": _schema("EventDelivery"),
                    "description": "Every delivery attempt, oldest first.",
                },
            },
            description="**Extension.** An event, its body and every delivery attempt.",
            extension=True,
        ),
        "EventDelivery": _exact_object(
            {
                "at": _timestamp("When the attempt was made."),
                "responseStatus": _nullable(
                    {"type": "integer"}, description="The HTTP status answered; null when none came."
                ),
                "error": _nullable(_string(), description="Why the attempt failed; null when it did not."),
                "durationMs": {"type": "integer", "minimum": 0, "description": "How long it took."},
            },
            description="**Extension.** One delivery attempt of an event.",
            extension=True,
        ),
        "EventList": _page(_schema("EventSummary"), "events"),
    }


def _batch_schemas() -> dict[str, Any]:
    """Bulk payouts (an extension): the request, the batch and its items."""
    counts: dict[str, Any] = {
        "itemCount": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_BATCH_ITEMS,
            "description": "Items in the request.",
        },
        "acceptedCount": {"type": "integer", "minimum": 0, "description": "Items that created a payout."},
        "refusedCount": {"type": "integer", "minimum": 0, "description": "Items refused (with their error)."},
        "totals": {
            "type": "array",
            "items": _schema("BatchTotal"),
            "description": "The accepted items per currency.",
        },
        "progress": {
            "type": "array",
            "items": _schema("BatchProgress"),
            "description": "The batch's payouts now, per status and currency: every status, zeros included, "
            "for each currency of its accepted items (ordered PENDING, SENT, PAID, FAILED, REJECTED).",
        },
    }
    batch_head: dict[str, Any] = {
        "id": _string(pattern=BATCH_ID_PATTERN, description="The batch's id."),
        "mode": _schema("BatchMode"),
        "status": _schema("BatchStatus"),
        "createdAt": _timestamp(),
        "completedAt": _nullable(
            _timestamp(), description="When its last open payout became final; null while PROCESSING."
        ),
    }

    def field(what: str) -> dict[str, Any]:
        return {
            "description": f"{what}, as in the body of POST /v1/disburse. Any value is taken: one that a "
            "single payout refuses refuses this item only (its `error` in the answer), not the request."
        }

    return {
        "BulkPayoutItem": _open_object(
            {
                "amount": field("The amount, a JSON number in the currency's units"),
                "currency": field("The currency"),
                "phone": field("The recipient's local number"),
                "recipientName": field("Who is paid"),
                "provider": field("The network code (detected from the number when not given)"),
                "country": field("The country of the number (CM when not given)"),
                "merchantReference": _string(
                    minLength=1,
                    description="Required, and unique within the batch: how the item's outcome is found "
                    f"(more than {MAX_MERCHANT_REFERENCE_LENGTH} characters refuses the item, as a single "
                    "payout's would be). The alias "
                    "`reference` of a single payout is not read here.",
                ),
            },
            required=["merchantReference"],
            description="**Extension.** One payout of a bulk request: the body of POST /v1/disburse, "
            "checked the same way, but refused alone (the request goes on) when a value is not valid.",
            **{"x-extension": True},
        ),
        "BulkDisburseRequest": _open_object(
            {
                "mode": _schema("BatchMode"),
                "items": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_BATCH_ITEMS,
                    "items": _schema("BulkPayoutItem"),
                    "description": f"1 to {MAX_BATCH_ITEMS:,} payouts, checked in this order.",
                },
            },
            required=["mode", "items"],
            description="**Extension.** A bulk payout request.",
            **{"x-extension": True},
        ),
        "ItemError": _exact_object(
            {
                "code": _schema("ErrorCode"),
                "message": _string(description="Human text; free to change."),
                "param": _string(description="The item's field at fault; absent when not about one."),
                "details": {
                    "type": "object",
                    "description": "The numbers behind the message, as in the Error answer; absent when "
                    "there are none.",
                    "additionalProperties": True,
                },
            },
            required=["code", "message"],
            description="**Extension.** Why an item was refused: the error a single payout with this "
            "item's body answers (without requestId).",
            extension=True,
        ),
        "BatchItemPayout": _exact_object(
            {
                "reference": _string(pattern=PAYOUT_REFERENCE_PATTERN),
                "status": _schema("PayoutStatus"),
                "awaitingReview": {"type": "boolean"},
            },
            description="**Extension.** The payout an accepted item created (its status when read; GET "
            "/v1/disburse/{reference} gives the whole record).",
            extension=True,
        ),
        "BatchItem": _exact_object(
            {
                "index": {"type": "integer", "minimum": 0, "description": "The item's place in the request."},
                "merchantReference": _string(),
                "payout": _nullable(_schema("BatchItemPayout"), description="null when refused."),
                "error": _nullable(_schema("ItemError"), description="null when accepted."),
            },
            description="**Extension.** One item of a bulk request: its payout or its error.",
            extension=True,
        ),
        "BatchTotal": _exact_object(
            {
                "currency": _string(),
                "count": {"type": "integer", "minimum": 0},
                "amount": _money("The sum of the accepted items in this currency."),
            },
            description="**Extension.** The accepted items of a batch in one currency.",
            extension=True,
        ),
        "BatchProgress": _exact_object(
            {
                "status": _schema("PayoutStatus"),
                "currency": _string(),
                "count": {"type": "integer", "minimum": 0},
                "amount": _money("The sum of the batch's payouts in this status and currency."),
            },
            description="**Extension.** A batch's payouts in one status and currency.",
            extension=True,
        ),
        "PayoutBatch": _exact_object(
            {
                **batch_head,
                **counts,
                "items": {
                    "type": "array",
                    "items": _schema("BatchItem"),
                    "description": "In request order: every item in the answer to POST, one page of them "
                    "from GET.",
                },
                "hasMore": {
                    "type": "boolean",
                    "description": "true when more items follow: ask again with startingAfter set to the "
                    "last item's index.",
                },
            },
            description="**Extension.** A bulk payout request: its counts, its payouts' progress and its "
            "items.",
            extension=True,
        ),
        "BatchEventData": _exact_object(
            {
                "reference": _string(pattern=BATCH_ID_PATTERN, description="The batch's id, as `id`."),
                **batch_head,
                **counts,
            },
            description="**Extension.** The batch (without its items), once every accepted item is final.",
            extension=True,
        ),
    }


def _event_schemas() -> dict[str, Any]:
    """The bodies the service POSTs to the merchant's webhook endpoint."""
    event_id = _string(
        pattern=EVENT_ID_PATTERN,
        description="**Extension.** The event's id: the same on every delivery of the event (retries and "
        f"redeliveries); equals the {EVENT_ID_HEADER} header. Store it and ignore repeats.",
        **{"x-extension": True},
    )
    return {
        "CollectionEvent": _exact_object(
            {
                "invoiceReference": _string(
                    pattern=COLLECTION_REFERENCE_PATTERN, description="The collection's reference."
                ),
                "status": _schema("CollectionEventStatus"),
                "amount": _money(
                    "What the payer was charged, fee included (the price if the payer never chose)."
                ),
                "currency": _string(description="Currency of amount."),
                "settledAmount": _money(
                    "What the merchant received (net): the record's amount after SUCCESS; 0 on failure."
                ),
                "settledCurrency": _string(description="Currency of settledAmount."),
                "requestedAmount": _money("The price originally asked."),
                "requestedCurrency": _string(description="Currency of requestedAmount."),
                "paymentMethod": _nullable(
                    _string(),
                    description="The class of payment (MOBILE_MONEY, LIGHTNING, ...); cannot tell mobile "
                    "networks apart; null if the payer never chose.",
                ),
                "providerCode": _nullable(
                    _string(), description="The network that paid; null if the payer never chose."
                ),
                "failureReason": _nullable(_string(), description="Human reason on failure, else null."),
                "timestamp": _timestamp("When the event happened."),
                "eventId": event_id,
            },
            description="The body of collect.succeeded and collect.failed (and of their legacy names): flat.",
        ),
        "PayoutEventData": _exact_object(
            {
                "reference": _string(pattern=PAYOUT_REFERENCE_PATTERN),
                "status": _schema("PayoutStatus"),
                "amount": _money("The amount sent."),
                "currency": _string(),
                "phone": _string(),
                "recipientName": _nullable(_string()),
                "merchantReference": _nullable(_string()),
                "providerReference": _nullable(_string()),
                "statusReason": _nullable(_string()),
            },
            description="The payout, with the Payout record's meanings.",
        ),
        "PayoutEvent": _exact_object(
            {
                "event": _schema("PayoutEventName"),
                "data": _schema("PayoutEventData"),
                "eventId": event_id,
            },
            description="The body of disburse.sent, disburse.succeeded and disburse.failed (and of their "
            "legacy names): the payout wrapped in `{event, data}`.",
        ),
        "BatchEvent": _exact_object(
            {
                "event": _string(const=EventType.DISBURSE_BULK_COMPLETED.value),
                "data": _schema("BatchEventData"),
                "eventId": event_id,
            },
            description="**Extension.** The body of disburse.bulk.completed: the batch wrapped in "
            "`{event, data}`.",
            extension=True,
        ),
    }


def _header_components() -> dict[str, Any]:
    return {
        REQUEST_ID_HEADER: {
            "description": "The request's id; equals `requestId` in an error body.",
            "required": True,
            "schema": _string(minLength=1),
        },
        RATE_LIMIT_LIMIT: {
            "description": "The key's per-minute ceiling.",
            "required": True,
            "schema": {"type": "integer", "minimum": 1},
            "x-extension": True,
        },
        RATE_LIMIT_REMAINING: {
            "description": "Requests left in the current minute.",
            "required": True,
            "schema": {"type": "integer", "minimum": 0},
            "x-extension": True,
        },
        RATE_LIMIT_RESET: {
            "description": "Seconds until the minute window frees a request.",
            "required": True,
            "schema": {"type": "integer", "minimum": 0},
            "x-extension": True,
        },
        RETRY_AFTER_HEADER: {
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


def _response_components() -> dict[str, Any]:
    return {
        "Unauthorized": _error("The API key is missing, malformed, unknown or revoked.", ("UNAUTHORIZED",)),
        "IdempotencyKeyReused": {
            **_error(
                f"The {IDEMPOTENCY_HEADER} was already used with a different body; nothing happened.",
                ("IDEMPOTENCY_KEY_REUSED",),
            ),
            "x-extension": True,
        },
        "PayloadTooLarge": _error("The body is larger than 1 MiB.", ("INVALID_REQUEST",)),
        "RateLimited": _error(
            "The key went over its per-minute or per-hour ceiling; the message names the window.",
            ("RATE_LIMITED",),
            RETRY_AFTER_HEADER,
        ),
        "ServerError": _error("Service-side failure; retry and quote requestId.", ("SERVER_ERROR",)),
        "NotFound": _error("No such path, or no such resource on this account.", ("NOT_FOUND",)),
        "MethodNotAllowed": _error("The path does not accept this method.", ("INVALID_REQUEST",), "Allow"),
    }


def _query(name: str, description: str, schema: dict[str, Any], *, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "description": description, "schema": schema}


def _parameter_components() -> dict[str, Any]:
    def path(name: str, description: str) -> dict[str, Any]:
        return {
            "name": name,
            "in": "path",
            "required": True,
            "description": description,
            "schema": _string(minLength=1),
        }

    return {
        "IdempotencyKey": {
            "name": IDEMPOTENCY_HEADER,
            "in": "header",
            "required": False,
            "description": "Scoped per merchant: a repeat with the same key and body answers the original "
            "status and body and does nothing twice; the same key with another body answers 409.",
            "schema": _string(minLength=1, maxLength=MAX_IDEMPOTENCY_KEY_LENGTH),
        },
        "IdempotencyKeyRequired": {
            "name": IDEMPOTENCY_HEADER,
            "in": "header",
            "required": True,
            "description": "Required on payouts. The same key returns the original payout; nothing moves "
            "twice. The same key with another body answers 409.",
            "schema": _string(minLength=1, maxLength=MAX_IDEMPOTENCY_KEY_LENGTH),
        },
        "CollectionReference": path(
            "reference", f"A collection reference ({COLLECTION_REFERENCE_PREFIX}...)."
        ),
        "PayoutReference": path("reference", f"A payout reference ({PAYOUT_REFERENCE_PREFIX}...)."),
        "Currency": path("currency", "A currency that can be paid out, e.g. XAF."),
        "EventId": path("id", f"An event id ({EVENT_ID_PREFIX}...), as in the webhook body's eventId."),
        "Limit": _query(
            "limit",
            f"How many items a page holds: 1 to {MAX_PAGE_LIMIT}, {DEFAULT_PAGE_LIMIT} when not given.",
            {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_LIMIT, "default": DEFAULT_PAGE_LIMIT},
        ),
        "StartingAfter": _query(
            "startingAfter",
            "Start the page after this item: the `reference` (payouts, collections) or `id` (ledger "
            "entries, events) of the previous page's last item. One that is not in the list answers 400 "
            "INVALID_REQUEST with param startingAfter.",
            _string(),
        ),
        "MerchantReferenceFilter": _query(
            "merchantReference", "Only the records with this merchantReference.", _string()
        ),
        "PayoutStatusFilter": _query("status", "Only the payouts in this status.", _schema("PayoutStatus")),
        "BatchFilter": {
            **_query(
                "batch",
                f"**Extension.** Only the payouts of this bulk request (its id, `{BATCH_ID_PREFIX}...`).",
                _string(),
            ),
            "x-extension": True,
        },
        "BatchId": path("id", f"A bulk payout request's id ({BATCH_ID_PREFIX}...)."),
        "BatchItemsStartingAfter": _query(
            "startingAfter",
            "Start the page of items after this one: the `index` of the previous page's last item. One "
            "that is not an item of the batch answers 400 INVALID_REQUEST with param startingAfter.",
            {"type": "integer", "minimum": 0},
        ),
        "CollectionStatusFilter": _query(
            "status", "Only the collections in this status.", _schema("CollectionStatus")
        ),
        "LedgerCurrency": _query("currency", "The balance's currency, e.g. XAF.", _string(), required=True),
        "EventTypeFilter": _query(
            "type",
            "Only the events of this type (a current name: "
            + ", ".join(f"`{name}`" for name in (*COLLECTION_EVENTS, *PAYOUT_EVENTS))
            + ").",
            _string(),
        ),
        "DeliveryStatusFilter": _query(
            "deliveryStatus", "Only the events whose delivery stands here.", _schema("DeliveryStatus")
        ),
        "WebhookSignature": {
            "name": SIGNATURE_HEADER,
            "in": "header",
            "required": True,
            "description": "`sha256=` and the lowercase hex HMAC-SHA-256, keyed with the signing secret, of "
            f"the {TIMESTAMP_HEADER} value, a full stop, and the raw body bytes. Verify over the raw body "
            "as received and compare in constant time.",
            "schema": _string(pattern=SIGNATURE_PATTERN),
        },
        "WebhookTimestamp": {
            "name": TIMESTAMP_HEADER,
            "in": "header",
            "required": True,
            "description": "Unix time in seconds when this attempt was signed (each retry is signed afresh). "
            f"Refuse a delivery more than {TOLERANCE_SECONDS} seconds away from your clock, even with a "
            "valid signature.",
            "schema": _string(pattern=r"^\d+$"),
        },
        "WebhookEventId": {
            "name": EVENT_ID_HEADER,
            "in": "header",
            "required": True,
            "description": f"**Extension.** The event's stable id (`{EVENT_ID_PREFIX}...`): the same on "
            "every retry and redelivery of the event, and equal to the body's eventId. Not covered by the "
            "signature: de-duplicate on the signed body's eventId, or check that the two agree.",
            "schema": _string(pattern=EVENT_ID_PATTERN),
            "x-extension": True,
        },
    }


def _components() -> dict[str, Any]:
    return {
        "securitySchemes": {
            "bearerAuth": {
                "type": "http",
                "scheme": "bearer",
                "description": "An API key created in the dashboard, with the Collect and/or Disburse scope.",
            }
        },
        "schemas": {
            **_enums(),
            **_request_schemas(),
            **_record_schemas(),
            **_list_schemas(),
            **_batch_schemas(),
            **_event_schemas(),
        },
        "headers": _header_components(),
        "responses": _response_components(),
        "parameters": _parameter_components(),
    }


# --- paths ---------------------------------------------------------------------------------------


def _body(schema_name: str, example: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": _json_content(_schema(schema_name), example)}


def _listing(
    operation_id: str,
    summary: str,
    tag: str,
    page: str,
    *,
    description: str,
    filters: tuple[str, ...] = (),
    forbidden: tuple[str, ...] = ACCESS_403,
    bad_request: tuple[str, ...] = ("INVALID_REQUEST",),
) -> dict[str, Any]:
    """A GET answering one page, ``{"data": [...], "hasMore": bool}`` (an extension)."""
    return _operation(
        operation_id,
        summary,
        tag,
        {
            "200": _ok("One page; `hasMore` tells whether another follows.", _schema(page)),
            **_authenticated_errors(forbidden=forbidden, bad_request=bad_request),
        },
        description=_EXTENSION
        + description
        + f" Pages: `limit` items at most (default {DEFAULT_PAGE_LIMIT}, at most {MAX_PAGE_LIMIT}); the next "
        "page starts after the last "
        "item given as `startingAfter`. A bad `limit`, `startingAfter` or filter answers 400 "
        "INVALID_REQUEST, `param` naming it.",
        parameters=[
            *(_ref("parameters", name) for name in filters),
            _ref("parameters", "Limit"),
            _ref("parameters", "StartingAfter"),
        ],
        extension=True,
    )


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
            description=f"Needs the Collect scope. The same {IDEMPOTENCY_HEADER} returns the same payment.",
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
                f"charged. A repeat with the same {IDEMPOTENCY_HEADER} returns the original charge and sends "
                "no "
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
        "/v1/collect": {
            "get": _listing(
                "listCollections",
                "List collections",
                "collect",
                "CollectionList",
                description="Needs the Collect scope. The merchant's collection records (charges, "
                "checkouts and legacy payments), optionally only those in one status or with one "
                "merchantReference.",
                filters=("CollectionStatusFilter", "MerchantReferenceFilter"),
                forbidden=SCOPED_403,
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
            description=f"Needs the Disburse scope and an {IDEMPOTENCY_HEADER}. Checked before the balance "
            "moves: "
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

    bulk = _operation(
        "disburseBulk",
        f"Send up to {MAX_BATCH_ITEMS:,} payouts in one request",
        "disburse",
        {
            "201": _ok(
                "The batch: every item in request order, with its payout (PENDING, reserved) or its error.",
                _schema("PayoutBatch"),
            ),
            **_authenticated_errors(
                forbidden=TRANSACT_403,
                bad_request=("INVALID_REQUEST", "IDEMPOTENCY_KEY_REQUIRED", "IDEMPOTENCY_KEY_TOO_LONG"),
                body=True,
                idempotent=True,
                bad_request_description="The request is malformed and refused whole, nothing done: `param` "
                f"names the field, header or item at fault (`items`, `items[{MAX_BATCH_ITEMS}]`, "
                "`items[3].merchantReference` for a missing or repeated one, `mode`).",
            ),
            "422": {
                **_error(
                    "Mode `all` and an item was refused: nothing was created or reserved. "
                    "`details.items` lists every refused item (`index`, `merchantReference`, `error`).",
                    ("BATCH_REFUSED",),
                ),
                "x-extension": True,
            },
        },
        description=_EXTENSION
        + f"Needs the Disburse scope and an {IDEMPOTENCY_HEADER}, which covers the whole "
        "request; counts as one request against the key's rate limit. Each item is checked exactly as "
        "POST /v1/disburse checks a payout (amount bounds and precision, currency, number, switches, "
        "per-payout and rolling ceilings, balance, review threshold), in item order: the ceilings and the "
        "balance see the items accepted before it. The batch and its payouts are written in one "
        "transaction. With mode `each` a refused item moves nothing and the others go on; with mode `all` "
        "one refused item refuses the batch (422). `disburse.bulk.completed` is sent once every accepted "
        "item is final.",
        parameters=[_ref("parameters", "IdempotencyKeyRequired")],
        body=_body(
            "BulkDisburseRequest",
            {
                "mode": "each",
                "items": [
                    {"amount": 2500, "currency": "XAF", "phone": "670000000", "merchantReference": "s-1"},
                    {"amount": 1500, "currency": "XAF", "phone": "690000000", "merchantReference": "s-2"},
                ],
            },
        ),
        extension=True,
    )
    get_bulk = _operation(
        "getBulkPayout",
        "Read a bulk payout request: its progress and its items",
        "disburse",
        {
            "200": _ok("The batch, with one page of its items.", _schema("PayoutBatch")),
            **_authenticated_errors(
                forbidden=SCOPED_403,
                bad_request=("INVALID_REQUEST",),
                not_found="No such batch on this account (also for another merchant's id).",
            ),
        },
        description=_EXTENSION + "Needs the Disburse scope. `progress` counts and sums the batch's payouts "
        "per status as they are now; `items` is one page of the items in request order (`limit`, default "
        f"{DEFAULT_PAGE_LIMIT}, at most {MAX_PAGE_LIMIT}; the next page starts after the item whose index is "
        "`startingAfter`). GET "
        "/v1/disburse?batch={id} lists its payout records.",
        parameters=[
            _ref("parameters", "BatchId"),
            _ref("parameters", "Limit"),
            _ref("parameters", "BatchItemsStartingAfter"),
        ],
        extension=True,
    )
    return {
        "/v1/disburse": {
            "post": create(legacy=False),
            "get": _listing(
                "listPayouts",
                "List payouts",
                "disburse",
                "PayoutList",
                description="Needs the Disburse scope. The merchant's payout records, optionally only "
                "those in one status, with one merchantReference, or of one bulk request (`batch`).",
                filters=("PayoutStatusFilter", "MerchantReferenceFilter", "BatchFilter"),
                forbidden=SCOPED_403,
            ),
        },
        "/v1/disburse/bulk": {"post": bulk},
        "/v1/disburse/bulk/{id}": {"get": get_bulk},
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
                description=_EXTENSION + "Any valid key of the merchant may read it.",
                extension=True,
            )
        },
        "/v1/account/ledger": {
            "get": _listing(
                "listLedgerEntries",
                "The movements of one balance",
                "account",
                "LedgerEntryList",
                description="Any valid key of the merchant may read it. The entries of the balance in "
                "`currency`, each with the signed amount it moved and the available and reserved balance "
                "after it.",
                filters=("LedgerCurrency",),
                bad_request=("INVALID_REQUEST", "UNKNOWN_CURRENCY"),
            )
        },
    }


def _event_paths() -> dict[str, Any]:
    event = [_ref("parameters", "EventId")]
    not_found = "No such event on this account."
    return {
        "/v1/events": {
            "get": _listing(
                "listEvents",
                "List the events written for the merchant",
                "events",
                "EventList",
                description="Any valid key of the merchant may read it. Every event written for the "
                "merchant (the ones the `webhooks` section describes), with where its delivery stands.",
                filters=("EventTypeFilter", "DeliveryStatusFilter"),
            )
        },
        "/v1/events/{id}": {
            "get": _operation(
                "getEvent",
                "Read an event, its body and its delivery attempts",
                "events",
                {
                    "200": _ok("The event.", _schema("EventRecord")),
                    **_authenticated_errors(not_found=not_found),
                },
                description=_EXTENSION + "Any valid key of the merchant may read it.",
                parameters=event,
                extension=True,
            )
        },
        "/v1/events/{id}/resend": {
            "post": _operation(
                "resendEvent",
                "Deliver an event again",
                "events",
                {
                    "202": _ok("Queued for one more delivery; the event.", _schema("EventRecord")),
                    **_authenticated_errors(
                        bad_request=("INVALID_REQUEST",),
                        bad_request_description="No webhook endpoint is registered to deliver it to.",
                        not_found=not_found,
                    ),
                },
                description=_EXTENSION
                + "Any valid key of the merchant. Queues one more delivery of the event to the "
                f"registered endpoint: the same body, eventId and {EVENT_ID_HEADER}, signed afresh. Answers "
                "400 INVALID_REQUEST when no webhook endpoint is registered.",
                parameters=event,
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
                {
                    "200": _ok("The server and its database answer.", _schema("Health"), rate_limited=False),
                    **server_error,
                    "503": _error("The database did not answer in time (0.8 s).", ("SERVER_ERROR",)),
                },
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
        "description": f"The payment's reference ({COLLECTION_REFERENCE_PREFIX}...).",
        "schema": _string(minLength=1),
    }

    def page(description: str) -> dict[str, Any]:
        return {
            "description": description,
            "headers": _headers(REQUEST_ID_HEADER),
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
                        "headers": _headers(REQUEST_ID_HEADER, "Location"),
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
                        "headers": _headers(REQUEST_ID_HEADER, "Cache-Control"),
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
                        "headers": _headers(REQUEST_ID_HEADER, "Cache-Control"),
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
                        "headers": _headers(REQUEST_ID_HEADER, "Cache-Control"),
                        "content": {"image/svg+xml": {"schema": _string()}},
                    },
                    "500": _ref("responses", "ServerError"),
                },
                public=True,
                extension=True,
            )
        },
    }


# --- webhooks --------------------------------------------------------------------------------------


def _camel(event_name: str) -> str:
    head, *rest = event_name.replace("_", ".").split(".")
    return head + "".join(part.title() for part in rest)


def _event_example(current: str, delivered: str) -> dict[str, Any]:
    if current in BATCH_EVENTS:
        progress = [
            {"status": status, "currency": "XAF", "count": count, "amount": amount}
            for status, count, amount in (
                ("PENDING", 0, 0),
                ("SENT", 0, 0),
                ("PAID", 2, 4000),
                ("FAILED", 1, 1500),
                ("REJECTED", 0, 0),
            )
        ]
        return {
            "event": delivered,
            "data": {
                "reference": f"{BATCH_ID_PREFIX}5d0c2b7f1e9a4c3b8d6e0f12",
                "id": f"{BATCH_ID_PREFIX}5d0c2b7f1e9a4c3b8d6e0f12",
                "mode": "each",
                "status": "COMPLETED",
                "createdAt": "2026-11-23T17:07:11.374Z",
                "completedAt": "2026-11-23T17:07:14.902Z",
                "itemCount": 4,
                "acceptedCount": 3,
                "refusedCount": 1,
                "totals": [{"currency": "XAF", "count": 3, "amount": 5500}],
                "progress": progress,
            },
            "eventId": f"{EVENT_ID_PREFIX}0b9e8c6d4a2f1e3c5b7d9a1f",
        }
    if current in COLLECTION_EVENTS:
        paid = current == EventType.COLLECT_SUCCEEDED
        return {
            "invoiceReference": f"{COLLECTION_REFERENCE_PREFIX}1795453631291-XF9AGKWJZP",
            "status": "SUCCESS" if paid else "FAILED",
            "amount": 10000,
            "currency": "XAF",
            "settledAmount": 9850 if paid else 0,
            "settledCurrency": "XAF",
            "requestedAmount": 10000,
            "requestedCurrency": "XAF",
            "paymentMethod": "MOBILE_MONEY",
            "providerCode": "orange_cm",
            "failureReason": None if paid else "The payer declined the payment.",
            "timestamp": "2026-11-23T17:07:11.374Z",
            "eventId": f"{EVENT_ID_PREFIX}da7a03cac7c32a4c575b8a4e",
        }
    status = {
        EventType.DISBURSE_SENT: "SENT",
        EventType.DISBURSE_SUCCEEDED: "PAID",
        EventType.DISBURSE_FAILED: "FAILED",
    }[EventType(current)]
    return {
        "event": delivered,
        "data": {
            "reference": f"{PAYOUT_REFERENCE_PREFIX}1795453636671-9MCPC3R79S",
            "status": status,
            "amount": 2500,
            "currency": "XAF",
            "phone": "690000002",
            "recipientName": "Awa N.",
            "merchantReference": "seller-42",
            "providerReference": None if status == "FAILED" else "SBX7AC807D16576DD1B",
            "statusReason": "The network refused the payout." if status == "FAILED" else None,
        },
        "eventId": f"{EVENT_ID_PREFIX}e8fb83646c033659f00bb572",
    }


def _webhook(current: str, delivered: str) -> dict[str, Any]:
    """What the service POSTs for one event name: the body and its four headers."""
    collection = current in COLLECTION_EVENTS
    batch = current in BATCH_EVENTS
    when, status = _EVENT_WHEN[EventType(current)]
    legacy = delivered != current
    if collection:
        shape = f"The flat CollectionEvent body, `status` {status}."
    elif batch:
        shape = (
            "The BatchEvent body, `{event, data}` with `data.status` COMPLETED; an endpoint registered for "
            "legacy names receives it under this same name."
        )
    else:
        shape = (
            f'The PayoutEvent body, `{{event, data}}` with `event` "{delivered}" and `data.status` {status}.'
        )
    description = f"{when} {shape} Answer 2xx once it is verified and recorded."
    if legacy:
        description = (
            f"The legacy name of `{current}`: an endpoint registered for legacy names (`POST /v1/webhooks`, "
            f"or `events: legacy`) receives this one instead, with the same body. " + description
        )
    operation: dict[str, Any] = {
        "operationId": _camel(delivered) + "Webhook",
        "summary": f"The {delivered} event" + (" (legacy name)" if legacy else ""),
        "description": description,
        "tags": ["webhooks"] + (["legacy"] if legacy else []),
        "parameters": [
            _ref("parameters", "WebhookSignature"),
            _ref("parameters", "WebhookTimestamp"),
            {
                "name": EVENT_HEADER,
                "in": "header",
                "required": True,
                "description": "The event name as delivered; branch on it (or on the body). Not covered by "
                "the signature: check that it agrees with the body.",
                "schema": _string(const=delivered),
            },
            _ref("parameters", "WebhookEventId"),
        ],
        "requestBody": {
            "required": True,
            "description": "JSON; verify the signature over these raw bytes before parsing them.",
            "content": _json_content(
                _schema("CollectionEvent" if collection else "BatchEvent" if batch else "PayoutEvent"),
                _event_example(current, delivered),
            ),
        },
        "responses": {
            "2XX": {"description": "Delivered. Answer quickly; do slow work afterwards."},
            "default": {
                "description": "Any other status (a redirect too), no answer within "
                f"{DEFAULT_WEBHOOK_TIMEOUT_SECONDS:g} s or a failed connection is a failed attempt: it is "
                f"retried with backoff, signed afresh, with the same eventId and {EVENT_ID_HEADER}. After "
                f"{DEFAULT_AUTO_DISABLE_AFTER} consecutive failed events the endpoint is disabled."
            },
        },
        "security": [],
    }
    if legacy:
        operation["deprecated"] = True
    if batch:
        operation["x-extension"] = True
    return {"post": operation}


def _webhooks() -> dict[str, Any]:
    """One entry per event name the service delivers: the current names, then the legacy ones."""
    current = (*COLLECTION_EVENTS, *PAYOUT_EVENTS)
    return {
        **{name: _webhook(name, name) for name in current},
        **{LEGACY_EVENT_NAMES[name]: _webhook(name, LEGACY_EVENT_NAMES[name]) for name in current},
        **{name: _webhook(name, name) for name in BATCH_EVENTS},
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
        **_event_paths(),
        **_webhook_paths(),
        **_service_paths(),
        **_page_paths(),
    }
    document["webhooks"] = _webhooks()
    document["components"] = _components()
    return document
