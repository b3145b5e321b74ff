"""The HTTP API read back into the library's records and errors, for ``paymentcore.client``.

Nothing here speaks HTTP: it builds the requests the client sends (:class:`Request`: method, path,
query, body, idempotency key) and reads the answers' JSON into the same records the embedded core
returns: ``Decimal`` amounts (JSON numbers parsed without ever passing through a float), aware UTC
datetimes, enums, ``Page``s. An error answer becomes the library's exception of its code, with
``param`` in the library's argument names, ``details``, ``request_id`` and the real HTTP status. The
sync and the async client share all of it; they differ only in how they wait.

What the wire does not carry, the records cannot say (docs/decisions.md, "The Python client"):
``Collection.kind`` is ``LEGACY`` for the legacy shape (no ``method``), ``CHARGE`` for the answer of
``collect.charge`` and ``CHECKOUT`` otherwise; ``EventDelivery.resent`` is always False.
"""

from __future__ import annotations

import email.utils
import enum
import random
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import attrs

from paymentcore._domain import wire as wire
from paymentcore._domain.errors import (
    ALL_ERRORS,
    BatchRefusedError,
    InvalidRequestError,
    PaymentError,
    RateLimitedError,
    ServerError,
)
from paymentcore._domain.events import CURRENT_NAMES
from paymentcore._domain.limits import IDEMPOTENCY_HEADER
from paymentcore._domain.models import BatchMode, CollectionKind, CollectionStatus, PayoutStatus
from paymentcore._domain.pages import DEFAULT_LIMIT as DEFAULT_LIMIT  # the client's page size: the server's
from paymentcore._domain.records import (
    BatchItem,
    BatchPayout,
    BatchProgress,
    BatchStatus,
    BatchTotal,
    Collection,
    EventDelivery,
    EventDeliveryStatus,
    EventRecord,
    EventSummary,
    ItemError,
    LedgerItem,
    LedgerItemType,
    MerchantBalance,
    Payout,
    PayoutAllowance,
    PayoutBatch,
    PayoutItem,
    WebhookRegistration,
    WebhookSettings,
)

__all__ = [
    "IDEMPOTENCY_HEADER",
    "RETRY_STATUSES",
    "ApiConnectionError",
    "Call",
    "ListCall",
    "Request",
    "RetryPolicy",
    "UnexpectedResponseError",
    "error_from",
    "new_idempotency_key",
    "read_json",
    "retry_after_seconds",
]

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_RNG = random.Random()  # the jitter of retries (not a secret)

T = TypeVar("T")
E = TypeVar("E", bound=enum.Enum)

_ERRORS: Mapping[str, type[PaymentError]] = MappingProxyType({cls.code: cls for cls in ALL_ERRORS})
# the money in an error's details (the library's are Decimal: so are these, in details that name their
# currency); other numbers stay int (``maximum`` is also a batch's item count, which names none)
_MONEY_DETAILS = frozenset({"available", "required", "minimum", "maximum", "ceiling", "spent", "remaining"})


class UnexpectedResponseError(PaymentError):
    """The server answered something this client cannot read: a body that is not the API's JSON, a
    record missing a field or holding the wrong type, or an error code this version does not know.

    ``code`` is the code the answer carried when it had one (``SERVER_ERROR`` otherwise),
    ``http_status`` the answer's status, ``request_id`` its ``X-Request-Id``.
    """

    default_message = "The server's answer could not be read."


class ApiConnectionError(ServerError):
    """No answer came: the connection was refused or cut, or the timeout passed, on every try.

    A create call may have been done by the server all the same: calling it again with the same
    ``idempotency_key`` answers the record it made, if it made one, and never makes a second.
    ``__cause__`` is the httpx exception of the last try.
    """

    default_message = "The server could not be reached."


# --- requests ----------------------------------------------------------------------------------------


@attrs.frozen
class Request:
    """One API request, before it is sent (and sent again, unchanged, on a retry)."""

    method: str
    path: str
    query: tuple[tuple[str, str], ...] = ()
    body: Mapping[str, Any] | None = None
    idempotency_key: str | None = None

    def content(self) -> bytes | None:
        return None if self.body is None else wire.dumps(dict(self.body)).encode()


@attrs.frozen
class Call(Generic[T]):
    """A request and how to read its answer's JSON."""

    request: Request
    read: Callable[[Any], T]


@attrs.frozen
class ListCall(Generic[T]):
    """A list request: its page for a cursor, how to read one item, and the cursor an item gives."""

    path: str
    query: tuple[tuple[str, str], ...]
    limit: int
    starting_after: str | None
    item: Callable[[Any], T]
    cursor: Callable[[T], str]

    def request(self, starting_after: str | None) -> Request:
        query = [("limit", str(self.limit)), *self.query]
        if starting_after is not None:
            query.append(("startingAfter", starting_after))
        return Request("GET", self.path, tuple(query))

    def page(self, data: Any) -> tuple[tuple[T, ...], bool]:
        fields = Fields(data, "a page")
        return tuple(self.item(entry) for entry in fields.array("data")), fields.flag("hasMore")


def new_idempotency_key() -> str:
    """A fresh key for one logical create call (kept over its retries)."""
    return "pcc_" + secrets.token_hex(16)


def segment(value: str, name: str) -> str:
    """``value`` as one path segment (quoted: a ``/`` or ``?`` in it cannot reach another route)."""
    if not isinstance(value, str):
        raise InvalidRequestError(f"{name} must be a string.", param=name)
    return quote(value, safe="")


def body(**fields: Any) -> dict[str, Any]:
    """A JSON body: camelCase names, the fields given (None is left out). A float is refused here, as
    the library refuses it: money never passes through binary floating point."""
    return _fields(fields, "")


def _fields(fields: Mapping[str, Any], where: str) -> dict[str, Any]:
    """:func:`body` of ``fields``; a refused field is named ``where`` + its name (``items[3].amount``)."""
    out: dict[str, Any] = {}
    for name, value in fields.items():
        if value is None:
            continue
        param = where + name
        if isinstance(value, float):
            raise InvalidRequestError(
                f"{param} must be a Decimal or an int, never a float (write Decimal('12.50')).", param=param
            )
        try:
            wire.dumps(value)
        except (TypeError, ValueError):  # not JSON (an object, a Decimal NaN): refused as the library does
            raise InvalidRequestError(
                f"{param} cannot be sent: {type(value).__name__}.", param=param
            ) from None
        out[_camel(name)] = value
    return out


def query(**fields: Any) -> tuple[tuple[str, str], ...]:
    """Query parameters: camelCase names, enums by value, the fields given (None is left out)."""
    pairs: list[tuple[str, str]] = []
    for name, value in fields.items():
        if value is None:
            continue
        if isinstance(value, enum.Enum):
            value = value.value
        if not isinstance(value, str):
            raise InvalidRequestError(f"{name} must be a string.", param=name)
        pairs.append((_camel(name), value))
    return tuple(pairs)


def whole(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(f"{name} must be a whole number.", param=name)
    return value


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _library_param(param: str, message: str) -> tuple[str, str]:
    """A wire ``param`` by the library's name, and ``message`` saying that name: the inverse of the
    server's renaming (``recipientName`` -> ``recipient_name`` in both)."""
    name = _snake(param)
    if name == param:
        return param, message
    return name, re.sub(rf"\b{re.escape(param)}\b", name, message)


def _snake(name: str) -> str:
    """A wire name as the library's argument name: ``merchantReference`` -> ``merchant_reference``,
    ``Idempotency-Key`` -> ``idempotency_key``."""
    if "-" in name:
        return name.replace("-", "_").lower()
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


# --- answers -----------------------------------------------------------------------------------------


def read_json(content: bytes, *, status: int, request_id: str | None) -> Any:
    """The JSON of an answer, numbers exact (never a float); an unreadable body raises
    :class:`UnexpectedResponseError`."""
    try:
        return wire.loads(content)
    except PaymentError:
        raise _unexpected(
            f"The answer (HTTP {status}) is not JSON: {content[:80]!r}", status, request_id
        ) from None


def _unexpected(message: str, status: int | None, request_id: str | None) -> UnexpectedResponseError:
    error = UnexpectedResponseError(message)
    if status is not None:
        error.http_status = status
    error.request_id = request_id
    return error


class Fields:
    """One JSON object of an answer, read field by field with the type each must have."""

    def __init__(self, data: Any, what: str) -> None:
        if not isinstance(data, dict):
            raise UnexpectedResponseError(f"Expected {what} as a JSON object, got {type(data).__name__}.")
        self.data: dict[str, Any] = data
        self.what = what

    def _wrong(self, name: str, wanted: str) -> UnexpectedResponseError:
        shown = repr(self.data.get(name))[:60]
        return UnexpectedResponseError(f"{self.what}: {name} should be {wanted}, got {shown}.")

    def has(self, name: str) -> bool:
        return name in self.data

    def text(self, name: str) -> str:
        value = self.data.get(name)
        if not isinstance(value, str):
            raise self._wrong(name, "a string")
        return value

    def opt_text(self, name: str) -> str | None:
        return None if self.data.get(name) is None else self.text(name)

    def flag(self, name: str) -> bool:
        value = self.data.get(name)
        if not isinstance(value, bool):
            raise self._wrong(name, "true or false")
        return value

    def whole(self, name: str) -> int:
        value = self.data.get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(name, "a whole number")
        return value

    def opt_whole(self, name: str) -> int | None:
        return None if self.data.get(name) is None else self.whole(name)

    def money(self, name: str) -> Decimal:
        value = self.data.get(name)
        if isinstance(value, bool) or not isinstance(value, int | Decimal):
            raise self._wrong(name, "a number")
        if isinstance(value, Decimal) and not value.is_finite():
            raise self._wrong(name, "a finite number")
        return Decimal(value)

    def opt_money(self, name: str) -> Decimal | None:
        return None if self.data.get(name) is None else self.money(name)

    def opt_time(self, name: str) -> datetime | None:
        return None if self.data.get(name) is None else self.time(name)

    def time(self, name: str) -> datetime:
        value = self.data.get(name)
        if not isinstance(value, str):
            raise self._wrong(name, "a timestamp")
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise self._wrong(name, "an ISO 8601 timestamp") from None
        if moment.tzinfo is None:
            raise self._wrong(name, "a timestamp with its time zone")
        return moment.astimezone(UTC)

    def member(self, name: str, kind: type[E]) -> E:
        value = self.data.get(name)
        for member in kind:
            if member.value == value:
                return member
        raise self._wrong(name, "one of " + ", ".join(str(m.value) for m in kind))

    def object(self, name: str) -> dict[str, Any]:
        value = self.data.get(name)
        if not isinstance(value, dict):
            raise self._wrong(name, "a JSON object")
        return value

    def array(self, name: str) -> list[Any]:
        value = self.data.get(name)
        if not isinstance(value, list):
            raise self._wrong(name, "a JSON array")
        return value


def payout(data: Any) -> Payout:
    f = Fields(data, "a payout")
    return Payout(
        reference=f.text("reference"),
        status=f.member("status", PayoutStatus),
        amount=f.money("amount"),
        currency=f.text("currency"),
        phone=f.text("phone"),
        recipient_name=f.opt_text("recipientName"),
        merchant_reference=f.opt_text("merchantReference"),
        provider_reference=f.opt_text("providerReference"),
        awaiting_review=f.flag("awaitingReview"),
        status_reason=f.opt_text("statusReason"),
        created_at=f.time("createdAt"),
    )


def collection(data: Any, *, kind: CollectionKind = CollectionKind.CHECKOUT) -> Collection:
    f = Fields(data, "a collection")
    legacy = not f.has("method")  # the legacy payments API's shape has no method nor providerCode
    return Collection(
        reference=f.text("reference"),
        status=f.member("status", CollectionStatus),
        amount=f.money("amount"),
        currency=f.text("currency"),
        requested_amount=f.money("requestedAmount"),
        requested_currency=f.text("requestedCurrency"),
        description=f.text("description"),
        merchant_reference=f.opt_text("merchantReference"),
        checkout_url=f.opt_text("checkoutUrl"),
        method=None if legacy else f.opt_text("method"),
        provider_code=None if legacy else f.opt_text("providerCode"),
        expires_at=f.time("expiresAt"),
        created_at=f.time("createdAt"),
        failure_category=f.opt_text("failureCategory"),
        kind=CollectionKind.LEGACY if legacy else kind,
    )


def charged_reference(data: Any) -> str:
    """The reference in the answer to a direct charge (the record itself is read with a GET)."""
    return Fields(data, "a charge").text("reference")


def allowance(data: Any) -> PayoutAllowance:
    f = Fields(data, "payout limits")
    return PayoutAllowance(
        currency=f.text("currency"),
        enabled=f.flag("enabled"),
        platform_enabled=f.flag("platformEnabled"),
        configured=f.flag("configured"),
        blocked_by=f.opt_text("blockedBy"),
        message=f.opt_text("message"),
        per_transaction=f.opt_money("perTransaction"),
        per_day=f.opt_money("perDay"),
        per_week=f.opt_money("perWeek"),
        review_threshold=f.opt_money("reviewThreshold"),
        spent_today=f.opt_money("spentToday"),
        spent_this_week=f.opt_money("spentThisWeek"),
        remaining_today=f.opt_money("remainingToday"),
        remaining_this_week=f.opt_money("remainingThisWeek"),
    )


def balances(data: Any) -> list[MerchantBalance]:
    found = []
    for entry in Fields(data, "the balances").array("balances"):
        f = Fields(entry, "a balance")
        found.append(
            MerchantBalance(
                currency=f.text("currency"), available=f.money("available"), reserved=f.money("reserved")
            )
        )
    return found


def ledger_item(currency: str) -> Callable[[Any], LedgerItem]:
    def read(data: Any) -> LedgerItem:
        f = Fields(data, "a ledger item")
        return LedgerItem(
            id=f.text("id"),
            created_at=f.time("createdAt"),
            type=f.member("type", LedgerItemType),
            reference=f.text("reference"),
            currency=currency,  # the list's own currency: the wire does not repeat it
            amount=f.money("amount"),
            available=f.money("available"),
            reserved=f.money("reserved"),
        )

    return read


def registration(data: Any) -> WebhookRegistration:
    f = Fields(data, "a webhook registration")
    return WebhookRegistration(
        url=f.text("url"),
        signing_secret=f.text("signingSecret"),
        is_active=f.flag("isActive"),
        updated_at=f.time("updatedAt"),
        events=f.text("events"),
    )


def webhook_settings(data: Any) -> WebhookSettings:
    f = Fields(data, "a webhook endpoint")
    return WebhookSettings(
        url=f.text("url"),
        is_active=f.flag("isActive"),
        disabled_reason=f.opt_text("disabledReason"),
        updated_at=f.time("updatedAt"),
        events=f.text("events"),
    )


def event_summary(data: Any) -> EventSummary:
    f = Fields(data, "an event")
    name = f.text("type")  # as delivered: a legacy name for an endpoint registered for legacy names
    return EventSummary(
        id=f.text("id"),
        type=CURRENT_NAMES.get(name, name),
        name=name,
        reference=f.text("reference"),
        created_at=f.time("createdAt"),
        delivery_status=f.member("deliveryStatus", EventDeliveryStatus),
        attempts=f.whole("attempts"),
    )


def _delivery(data: Any) -> EventDelivery:
    f = Fields(data, "a delivery attempt")
    return EventDelivery(
        at=f.time("at"),
        response_status=f.opt_whole("responseStatus"),
        error=f.opt_text("error"),
        duration_ms=f.whole("durationMs"),
    )


def event_record(data: Any) -> EventRecord:
    summary = event_summary(data)
    f = Fields(data, "an event")
    return EventRecord(
        id=summary.id,
        type=summary.type,
        name=summary.name,
        reference=summary.reference,
        created_at=summary.created_at,
        delivery_status=summary.delivery_status,
        attempts=summary.attempts,
        payload=MappingProxyType(f.object("payload")),
        deliveries=tuple(_delivery(entry) for entry in f.array("deliveries")),
    )


def item_error(data: Any) -> ItemError:
    """A refused item's error, as the library has it: ``param`` and ``message`` by the library's names,
    money in ``details`` as Decimal."""
    f = Fields(data, "an item's error")
    code, message, param = f.text("code"), f.text("message"), f.opt_text("param")
    if param is not None:
        param, message = _library_param(param, message)
    details = f.object("details") if f.data.get("details") is not None else None
    return ItemError(
        code=code, message=message, param=param, details=None if details is None else _details(details)
    )


def batch_item(data: Any) -> BatchItem:
    f = Fields(data, "a batch item")
    made = None
    if f.data.get("payout") is not None:
        p = Fields(f.object("payout"), "a batch item's payout")
        made = BatchPayout(p.text("reference"), p.member("status", PayoutStatus), p.flag("awaitingReview"))
    refused = None if f.data.get("error") is None else item_error(f.object("error"))
    return BatchItem(f.whole("index"), f.text("merchantReference"), payout=made, error=refused)


def batch(data: Any) -> PayoutBatch:
    f = Fields(data, "a batch")
    totals = []
    for entry in f.array("totals"):
        t = Fields(entry, "a batch total")
        totals.append(BatchTotal(t.text("currency"), t.whole("count"), t.money("amount")))
    progress = []
    for entry in f.array("progress"):
        p = Fields(entry, "a batch's progress")
        progress.append(
            BatchProgress(
                p.member("status", PayoutStatus), p.text("currency"), p.whole("count"), p.money("amount")
            )
        )
    return PayoutBatch(
        id=f.text("id"),
        mode=f.member("mode", BatchMode),
        status=f.member("status", BatchStatus),
        created_at=f.time("createdAt"),
        completed_at=f.opt_time("completedAt"),
        item_count=f.whole("itemCount"),
        accepted=f.whole("acceptedCount"),
        refused=f.whole("refusedCount"),
        totals=tuple(totals),
        progress=tuple(progress),
        items=tuple(batch_item(entry) for entry in f.array("items")),
        has_more=f.flag("hasMore"),
    )


# --- errors ------------------------------------------------------------------------------------------


def error_from(status: int, headers: Mapping[str, str], content: bytes) -> PaymentError:
    """The library's exception for an error answer: the class of its ``code``, with ``param`` in the
    library's argument names, ``details`` (money as Decimal), ``request_id`` and the HTTP status."""
    request_id = headers.get("x-request-id")
    try:
        data = wire.loads(content)
    except PaymentError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("code"), str):
        # not the API's error shape: a proxy's or a load balancer's page
        cls: type[PaymentError] = ServerError if status >= 500 else UnexpectedResponseError
        shown = content[:80].decode("utf-8", "replace")
        error = cls(f"HTTP {status} without the API's error body: {shown!r}")
        error.http_status = status
        error.request_id = request_id
        return error
    code: str = data["code"]
    message = data.get("message") if isinstance(data.get("message"), str) else None
    param = data.get("param") if isinstance(data.get("param"), str) else None
    raw_details = data.get("details")
    details = _details(raw_details) if isinstance(raw_details, dict) else None
    known = _ERRORS.get(code)
    if known is RateLimitedError:
        error = RateLimitedError(
            message,
            retry_after=int(retry_after_seconds(headers.get("retry-after")) or 1),
            limit=_header_int(headers.get("x-ratelimit-limit")),
        )
        error.details = details
    elif known is BatchRefusedError:
        error = _batch_refused(message, param, details)
    elif known is not None:
        error = known(message, param=None if param is None else _snake(param), details=details)
    else:
        error = UnexpectedResponseError(message, param=param, details=details)
        error.__dict__["code"] = code  # a code this version does not know: kept as the answer said
    error.http_status = status
    error.request_id = data.get("requestId") if isinstance(data.get("requestId"), str) else request_id
    return error


def _details(raw: Mapping[str, Any]) -> dict[str, Any]:
    money = "currency" in raw
    return {
        key: Decimal(value)
        if money and key in _MONEY_DETAILS and isinstance(value, int) and not isinstance(value, bool)
        else value
        for key, value in raw.items()
    }


def _batch_refused(message: str | None, param: str | None, details: dict[str, Any] | None) -> PaymentError:
    """BATCH_REFUSED as the embedded core raises it: ``.items`` the refused items (each error by the
    library's names), ``details.items`` the same as plain data, the message by the library's names."""
    try:
        items = tuple(
            _refused_item(entry) for entry in Fields(details, "BATCH_REFUSED details").array("items")
        )
    except UnexpectedResponseError as unreadable:
        error = UnexpectedResponseError(f"BATCH_REFUSED: {unreadable.message}", details=details)
        error.__dict__["code"] = BatchRefusedError.code
        return error
    assert details is not None  # read above
    shaped = {**details, "items": [_item_refusal(item) for item in items]}
    first = items[0].error if items else None
    if message is not None and first is not None and first.param is not None:
        message = re.sub(rf"\b{re.escape(_camel(first.param))}\b", first.param, message)
    return BatchRefusedError(
        message, param=None if param is None else _snake(param), details=shaped, items=items
    )


def _refused_item(data: Any) -> BatchItem:
    f = Fields(data, "a refused item")
    return BatchItem(f.whole("index"), f.text("merchantReference"), error=item_error(f.object("error")))


def _item_refusal(item: BatchItem) -> dict[str, Any]:
    """A refused item in ``BatchRefusedError.details["items"]``, as the embedded core writes it."""
    assert item.error is not None
    shaped: dict[str, Any] = {"code": item.error.code, "message": item.error.message}
    if item.error.param is not None:
        shaped["param"] = item.error.param
    if item.error.details is not None:
        shaped["details"] = dict(item.error.details)
    return {"index": item.index, "merchantReference": item.merchant_reference, "error": shaped}


def _header_int(value: str | None) -> int:
    return int(value) if value is not None and value.isascii() and value.isdigit() else 0


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """``Retry-After`` in seconds: a number of seconds or an HTTP date; None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if seconds != seconds or seconds in (float("inf"), float("-inf")):  # NaN, infinities
        return None
    return max(0.0, seconds)


# --- retries -----------------------------------------------------------------------------------------


@attrs.frozen
class RetryPolicy:
    """When to try a request again, and how long to wait first.

    A request is tried again after a connection error or a timeout, and after an answer of 429 or
    500/502/503/504, at most ``max_retries`` times. The wait before retry ``n`` (from 0) is a random
    time between half of and the whole of ``min(max_backoff, backoff * 2**n)`` seconds (jitter, so
    clients that failed together do not return together); after an answer with ``Retry-After`` it is
    at least that. A ``Retry-After`` longer than ``max_retry_after`` is not waited for: the error is
    raised at once.
    """

    max_retries: int = 2
    backoff: float = 0.5
    max_backoff: float = 8.0
    max_retry_after: float = 60.0

    def __attrs_post_init__(self) -> None:
        tries = self.max_retries
        if isinstance(tries, bool) or not isinstance(tries, int) or tries < 0:
            raise ValueError("max_retries must be a whole number, 0 or more")
        for name in ("backoff", "max_backoff", "max_retry_after"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise ValueError(f"{name} must be a number of seconds, 0 or more")

    def wait(
        self, attempt: int, retry_after: float | None, *, rng: random.Random | None = None
    ) -> float | None:
        """Seconds to wait before retry number ``attempt`` (0 for the first), or None: no retry."""
        if attempt >= self.max_retries:
            return None
        if retry_after is not None and retry_after > self.max_retry_after:
            return None
        ceiling = min(self.max_backoff, self.backoff * 2.0**attempt)
        delay = ceiling / 2 + (rng or _RNG).uniform(0, ceiling / 2)
        return max(delay, retry_after or 0.0)


# --- the calls (one per client method; the sync and the async client send the same) -------------------


def _key(idempotency_key: str | None) -> str:
    if idempotency_key is None:
        return new_idempotency_key()
    if not isinstance(idempotency_key, str):
        raise InvalidRequestError("idempotency_key must be a string.", param="idempotency_key")
    return idempotency_key


def charge(
    *,
    amount: Decimal | int,
    currency: str,
    country: str,
    provider: str,
    phone: str,
    merchant_reference: str | None,
    description: str | None,
    idempotency_key: str | None,
) -> Call[str]:
    fields = body(
        amount=amount,
        currency=currency,
        country=country,
        provider=provider,
        phone=phone,
        merchant_reference=merchant_reference,
        description=description,
    )
    return Call(
        Request("POST", "/v1/collect/charge", body=fields, idempotency_key=_key(idempotency_key)),
        charged_reference,
    )


def checkout(
    *,
    amount: Decimal | int,
    currency: str,
    description: str | None,
    merchant_reference: str | None,
    expires_in_minutes: int | None,
    idempotency_key: str | None,
) -> Call[Collection]:
    fields = body(
        amount=amount,
        currency=currency,
        description=description,
        merchant_reference=merchant_reference,
        expires_in_minutes=expires_in_minutes,
    )
    return Call(
        Request("POST", "/v1/collect/checkout", body=fields, idempotency_key=_key(idempotency_key)),
        collection,
    )


def collection_get(reference: str, *, kind: CollectionKind = CollectionKind.CHECKOUT) -> Call[Collection]:
    return Call(
        Request("GET", f"/v1/collect/{segment(reference, 'reference')}"),
        lambda data: collection(data, kind=kind),
    )


def collections(
    *, limit: int, starting_after: str | None, status: CollectionStatus | None, merchant_reference: str | None
) -> ListCall[Collection]:
    return ListCall(
        "/v1/collect",
        query(status=status, merchant_reference=merchant_reference),
        whole(limit, "limit"),
        starting_after,
        collection,
        lambda item: item.reference,
    )


def payout_create(
    *,
    amount: Decimal | int,
    currency: str,
    phone: str,
    idempotency_key: str | None,
    recipient_name: str | None,
    provider: str | None,
    country: str | None,
    merchant_reference: str | None,
) -> Call[Payout]:
    fields = body(
        amount=amount,
        currency=currency,
        phone=phone,
        recipient_name=recipient_name,
        provider=provider,
        country=country,
        merchant_reference=merchant_reference,
    )
    return Call(Request("POST", "/v1/disburse", body=fields, idempotency_key=_key(idempotency_key)), payout)


def bulk_create(
    *, items: Sequence[PayoutItem], mode: BatchMode | str, idempotency_key: str | None
) -> Call[PayoutBatch]:
    """``POST /v1/disburse/bulk``. What JSON cannot carry is refused before anything is sent, named as
    the library names it: ``items`` not a sequence, ``items[3]`` not a :class:`PayoutItem`, a float
    (``items[3].amount``). The rest (how many items, their references, the mode) the server checks."""
    if isinstance(items, str | bytes) or not isinstance(items, Sequence):
        raise InvalidRequestError("items must be a list of 1 to 1,000 payouts.", param="items")
    sent: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        if not isinstance(item, PayoutItem):
            raise InvalidRequestError(
                f"items[{index}] must be a payout.", param=f"items[{index}]", details={"index": index}
            )
        sent.append(
            _fields(
                {
                    "amount": item.amount,
                    "currency": item.currency,
                    "phone": item.phone,
                    "recipient_name": item.recipient_name,
                    "provider": item.provider,
                    "country": item.country,
                    "merchant_reference": item.merchant_reference,
                },
                f"items[{index}].",
            )
        )
    fields = body(mode=mode.value if isinstance(mode, BatchMode) else mode)
    fields["items"] = sent
    return Call(
        Request("POST", "/v1/disburse/bulk", body=fields, idempotency_key=_key(idempotency_key)), batch
    )


def bulk_get(batch_id: str, *, limit: int, starting_after: int | None) -> Call[PayoutBatch]:
    pairs = [("limit", str(whole(limit, "limit")))]
    if starting_after is not None:
        pairs.append(("startingAfter", str(whole(starting_after, "starting_after"))))
    return Call(Request("GET", f"/v1/disburse/bulk/{segment(batch_id, 'batch_id')}", tuple(pairs)), batch)


def payout_get(reference: str) -> Call[Payout]:
    return Call(Request("GET", f"/v1/disburse/{segment(reference, 'reference')}"), payout)


def payouts(
    *, limit: int, starting_after: str | None, status: PayoutStatus | None, merchant_reference: str | None
) -> ListCall[Payout]:
    return ListCall(
        "/v1/disburse",
        query(status=status, merchant_reference=merchant_reference),
        whole(limit, "limit"),
        starting_after,
        payout,
        lambda item: item.reference,
    )


def payout_limits(currency: str) -> Call[PayoutAllowance]:
    return Call(Request("GET", f"/v1/account/disburse-limits/{segment(currency, 'currency')}"), allowance)


def balances_get() -> Call[list[MerchantBalance]]:
    return Call(Request("GET", "/v1/account/balances"), balances)


def ledger(currency: str, *, limit: int, starting_after: str | None) -> ListCall[LedgerItem]:
    return ListCall(
        "/v1/account/ledger",
        query(currency=currency),
        whole(limit, "limit"),
        starting_after,
        ledger_item(currency),
        lambda item: item.id,
    )


def webhook_register(
    *, url: str, events: str | None, idempotency_key: str | None
) -> Call[WebhookRegistration]:
    return Call(
        Request(
            "PUT", "/v1/webhook", body=body(url=url, events=events), idempotency_key=_key(idempotency_key)
        ),
        registration,
    )


def webhook_get() -> Call[WebhookSettings]:
    return Call(Request("GET", "/v1/webhook"), webhook_settings)


def events(
    *, limit: int, starting_after: str | None, type: str | None, delivery_status: EventDeliveryStatus | None
) -> ListCall[EventSummary]:
    return ListCall(
        "/v1/events",
        query(type=type, delivery_status=delivery_status),
        whole(limit, "limit"),
        starting_after,
        event_summary,
        lambda item: item.id,
    )


def event_get(event_id: str) -> Call[EventRecord]:
    return Call(Request("GET", f"/v1/events/{segment(event_id, 'event_id')}"), event_record)


def event_resend(event_id: str, *, idempotency_key: str | None) -> Call[EventRecord]:
    return Call(
        Request(
            "POST",
            f"/v1/events/{segment(event_id, 'event_id')}/resend",
            idempotency_key=_key(idempotency_key),
        ),
        event_record,
    )
