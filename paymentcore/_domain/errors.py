"""The exception tree of paymentcore.

Every failure a caller can act on is a subclass of :class:`PaymentError` with a stable ``code`` (the
spec's error code), a human ``message``, the ``param`` at fault (the library argument's name, or
``None``) and ``details`` (numbers behind the message, or ``None``). The classes are grouped as the spec
groups the codes::

    PaymentError
    ├── AccessError        UnauthorizedError, MerchantNotApprovedError, InsufficientScopeError,
    │                      CapabilityDisabledError, ProviderBlockedError
    ├── RequestError       InvalidRequestError (InvalidTransitionError), IdempotencyKeyRequiredError,
    │                      IdempotencyKeyTooLongError, IdempotencyKeyReusedError, BatchRefusedError
    ├── CatalogueError     UnknownCurrencyError, CurrencyMismatchError, UnknownProviderError,
    │                      ProviderCountryMismatchError, CountryNotSupportedError,
    │                      PhoneNotRecognisedError, PhoneProviderMismatchError
    ├── AmountError        AmountTooSmallError, AmountTooLargeError, AmountPrecisionError,
    │                      InsufficientBalanceError, PayoutLimitExceededError, PayoutsNotConfiguredError
    └── FlowError          NotFoundError, RecipientBusyError, RateLimitedError, ServerError

:data:`HTTP_STATUS` is the one table of the HTTP status each code answers with (the server uses it, and
so can an app that builds its own HTTP layer: ``error.http_status``). The library itself never speaks
HTTP.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Protocol

from paymentcore._domain.limits import MAX_IDEMPOTENCY_KEY_LENGTH

__all__ = [
    "ALL_CODES",
    "ALL_ERRORS",
    "HTTP_STATUS",
    "AccessError",
    "AmountError",
    "AmountPrecisionError",
    "AmountTooLargeError",
    "AmountTooSmallError",
    "BatchRefusedError",
    "CapabilityDisabledError",
    "CatalogueError",
    "CountryNotSupportedError",
    "CurrencyMismatchError",
    "FlowError",
    "IdempotencyKeyRequiredError",
    "IdempotencyKeyReusedError",
    "IdempotencyKeyTooLongError",
    "InsufficientBalanceError",
    "InsufficientScopeError",
    "InvalidRequestError",
    "InvalidTransitionError",
    "MerchantNotApprovedError",
    "NotFoundError",
    "PaymentError",
    "PayoutLimitExceededError",
    "PayoutsNotConfiguredError",
    "PhoneNotRecognisedError",
    "PhoneProviderMismatchError",
    "ProviderBlockedError",
    "ProviderCountryMismatchError",
    "RateLimitedError",
    "RecipientBusyError",
    "RefusedItem",
    "RefusedItemError",
    "RequestError",
    "ServerError",
    "UnauthorizedError",
    "UnknownCurrencyError",
    "UnknownProviderError",
]


class PaymentError(Exception):
    """Root of every error paymentcore raises on purpose."""

    code: ClassVar[str] = "SERVER_ERROR"
    default_message: ClassVar[str] = "Something went wrong on our side."

    def __init__(
        self,
        message: str | None = None,
        *,
        param: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        self.message = message or self.default_message
        self.param = param
        self.details: dict[str, Any] | None = dict(details) if details is not None else None
        #: the ``requestId`` of the answer that carried this error (``paymentcore.client``); None when
        #: the library raised it itself
        self.request_id: str | None = None
        self._http_status: int | None = None
        super().__init__(self.message)

    @property
    def http_status(self) -> int:
        """The HTTP status this error answers with over the API (from :data:`HTTP_STATUS`); for an
        error read from an answer (``paymentcore.client``), the status that answer really had."""
        return HTTP_STATUS[self.code] if self._http_status is None else self._http_status

    @http_status.setter
    def http_status(self, status: int) -> None:
        self._http_status = status

    def to_dict(self) -> dict[str, Any]:
        """The spec's error record, without requestId (the server adds it)."""
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.param is not None:
            body["param"] = self.param
        if self.details is not None:
            body["details"] = self.details
        return body


# --- Access -------------------------------------------------------------------------------------


class AccessError(PaymentError):
    """Access: who is calling, and whether they may (keys, scopes, account state, switches)."""


class UnauthorizedError(AccessError):
    """The API key is missing, malformed, unknown or revoked."""

    code = "UNAUTHORIZED"
    default_message = "A valid API key is required."


class MerchantNotApprovedError(AccessError):
    """The merchant account is not approved, or is suspended, and cannot transact."""

    code = "MERCHANT_NOT_APPROVED"
    default_message = "This merchant account is not approved to transact."


class InsufficientScopeError(AccessError):
    """The key is real but lacks the scope the endpoint needs (Collect or Disburse)."""

    code = "INSUFFICIENT_SCOPE"
    default_message = "This API key lacks the permission for this operation."


class CapabilityDisabledError(AccessError):
    """A capability (the API, or payouts) is switched off for everybody on the platform."""

    code = "CAPABILITY_DISABLED"
    default_message = "This capability is switched off platform-wide."


class ProviderBlockedError(AccessError):
    """The merchant is restricted from the named provider."""

    code = "PROVIDER_BLOCKED"
    default_message = "This account is restricted from that provider."


# --- Request ------------------------------------------------------------------------------------


class RequestError(PaymentError):
    """Request: the arguments or the idempotency key are not acceptable."""


class InvalidRequestError(RequestError):
    """The request failed validation; ``param`` names the field at fault."""

    code = "INVALID_REQUEST"
    default_message = "The request is not valid."


class IdempotencyKeyRequiredError(RequestError):
    """A payout was requested without an idempotency key."""

    code = "IDEMPOTENCY_KEY_REQUIRED"
    default_message = "Payouts need an idempotency key."


class IdempotencyKeyTooLongError(RequestError):
    """The idempotency key is longer than ``MAX_IDEMPOTENCY_KEY_LENGTH`` (200) characters."""

    code = "IDEMPOTENCY_KEY_TOO_LONG"
    default_message = f"The idempotency key must be at most {MAX_IDEMPOTENCY_KEY_LENGTH} characters."


class IdempotencyKeyReusedError(RequestError):
    """Extension: the idempotency key was already used with different arguments."""

    code = "IDEMPOTENCY_KEY_REUSED"
    default_message = "This idempotency key was already used with a different request."


class RefusedItemError(Protocol):
    """Why an item of a bulk request was refused: what :class:`paymentcore.ItemError` offers.

    Described here, not imported, so that this module needs no record module (the records need the
    error classes: ``ItemError.exception`` looks its class up by code).
    """

    @property
    def code(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def param(self) -> str | None: ...
    @property
    def details(self) -> Mapping[str, Any] | None: ...
    def exception(self) -> PaymentError:
        """The refusal as the typed exception a single payout raises."""
        ...


class RefusedItem(Protocol):
    """An item of a refused bulk request: what :class:`paymentcore.BatchItem` offers (its ``payout`` is
    None for a refused item)."""

    @property
    def index(self) -> int: ...
    @property
    def merchant_reference(self) -> str: ...
    @property
    def error(self) -> RefusedItemError | None: ...
    @property
    def payout(self) -> object | None:
        """None: a refused item created no payout (a ``BatchPayout`` for an accepted one)."""
        ...

    @property
    def accepted(self) -> bool: ...


class BatchRefusedError(RequestError):
    """Extension: a bulk payout request in mode ``all`` had an item refused, so the whole batch is
    refused: no payout was created and nothing was reserved.

    ``items`` are the refused items, in request order, each with the error a single payout with its
    arguments would have raised; ``details`` says the same as plain data (``itemCount``,
    ``refusedCount``, ``items``).
    """

    code = "BATCH_REFUSED"
    default_message = "An item of this all-or-none batch was refused; nothing was accepted."

    def __init__(
        self,
        message: str | None = None,
        *,
        param: str | None = None,
        details: Mapping[str, Any] | None = None,
        items: Iterable[RefusedItem] = (),
    ) -> None:
        super().__init__(message, param=param, details=details)
        # BatchItem records at run time, typed by what they offer (RefusedItem)
        self.items: tuple[RefusedItem, ...] = tuple(items)


# --- Currency, country, network -------------------------------------------------------------------


class CatalogueError(PaymentError):
    """Currency, country and network: the combination is not one the catalogue supports."""


class UnknownCurrencyError(CatalogueError):
    """The currency is not one the platform supports (for this operation)."""

    code = "UNKNOWN_CURRENCY"
    default_message = "This currency is not supported."


class CurrencyMismatchError(CatalogueError):
    """The currency is not the country's currency; ``details.expected`` names the right one."""

    code = "CURRENCY_MISMATCH"
    default_message = "The currency is not the currency of that country."


class UnknownProviderError(CatalogueError):
    """The provider code is not a usable provider."""

    code = "UNKNOWN_PROVIDER"
    default_message = "This provider is not supported."


class ProviderCountryMismatchError(CatalogueError):
    """The provider does not operate in the given country."""

    code = "PROVIDER_COUNTRY_MISMATCH"
    default_message = "This provider does not operate in that country."


class CountryNotSupportedError(CatalogueError):
    """Mobile money numbers cannot be placed in that country."""

    code = "COUNTRY_NOT_SUPPORTED"
    default_message = "This country is not supported."


class PhoneNotRecognisedError(CatalogueError):
    """The number is not a recognised mobile money number of the country."""

    code = "PHONE_NOT_RECOGNISED"
    default_message = "This is not a recognised mobile money number in that country."


class PhoneProviderMismatchError(CatalogueError):
    """The number belongs to a different network than the one named."""

    code = "PHONE_PROVIDER_MISMATCH"
    default_message = "This number belongs to a different network than the provider named."


# --- Amount and balance ---------------------------------------------------------------------------


class AmountError(PaymentError):
    """Amount and balance: the money asked for is outside what may move."""


class AmountTooSmallError(AmountError):
    """The amount is below the currency's minimum; ``details.minimum`` holds it."""

    code = "AMOUNT_TOO_SMALL"
    default_message = "The amount is below the currency's minimum."


class AmountTooLargeError(AmountError):
    """The amount is above the currency's maximum; ``details.maximum`` holds it."""

    code = "AMOUNT_TOO_LARGE"
    default_message = "The amount is above the currency's maximum."


class AmountPrecisionError(AmountError):
    """The amount has more decimal places than the currency has."""

    code = "AMOUNT_PRECISION"
    default_message = "The amount has more decimal places than the currency allows."


class InsufficientBalanceError(AmountError):
    """The available balance cannot cover the payout (details.available, required, currency)."""

    code = "INSUFFICIENT_BALANCE"
    default_message = "The available balance is not enough for this payout."


class PayoutLimitExceededError(AmountError):
    """The payout is past a per-payout, rolling 24-hour or rolling 7-day ceiling."""

    code = "PAYOUT_LIMIT_EXCEEDED"
    default_message = "This payout is over a payout limit."


class PayoutsNotConfiguredError(AmountError):
    """Payouts are stopped for this currency, for the account or because the currency is closed."""

    code = "PAYOUTS_NOT_CONFIGURED"
    default_message = "Payouts are not available for this currency on this account."


# --- Flow ---------------------------------------------------------------------------------------


class FlowError(PaymentError):
    """Flow: the thing asked for is missing, busy, rate-limited or failed on our side."""


class NotFoundError(FlowError):
    """No such resource on this account (also for another merchant's reference)."""

    code = "NOT_FOUND"
    default_message = "No such resource."


class RecipientBusyError(FlowError):
    """The number has received too many prompts in the recent window."""

    code = "RECIPIENT_BUSY"
    default_message = "This number has received too many payment prompts recently; wait and retry."


class RateLimitedError(FlowError):
    """The API key went over one of its rate-limit windows."""

    code = "RATE_LIMITED"
    default_message = "Too many requests."

    def __init__(self, message: str | None = None, *, retry_after: int = 1, limit: int = 0) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.limit = limit


class ServerError(FlowError):
    """A failure on the service's side; safe to retry, quoting the requestId."""

    code = "SERVER_ERROR"


class InvalidTransitionError(FlowError):
    """A state machine was asked for a transition its table does not allow.

    Operator actions surface it (for example a second ``payout resolve``); it is an INVALID_REQUEST on
    the wire.
    """

    code = "INVALID_REQUEST"
    default_message = "This action is not allowed in the record's current state."


HTTP_STATUS: Mapping[str, int] = {
    "INVALID_REQUEST": 400,
    "IDEMPOTENCY_KEY_REQUIRED": 400,
    "IDEMPOTENCY_KEY_TOO_LONG": 400,
    "UNKNOWN_CURRENCY": 400,
    "CURRENCY_MISMATCH": 400,
    "UNKNOWN_PROVIDER": 400,
    "PROVIDER_COUNTRY_MISMATCH": 400,
    "COUNTRY_NOT_SUPPORTED": 400,
    "PHONE_NOT_RECOGNISED": 400,
    "PHONE_PROVIDER_MISMATCH": 400,
    "AMOUNT_TOO_SMALL": 400,
    "AMOUNT_TOO_LARGE": 400,
    "AMOUNT_PRECISION": 400,
    "INSUFFICIENT_BALANCE": 400,
    "UNAUTHORIZED": 401,
    "MERCHANT_NOT_APPROVED": 403,
    "INSUFFICIENT_SCOPE": 403,
    "CAPABILITY_DISABLED": 403,
    "PROVIDER_BLOCKED": 403,
    "PAYOUT_LIMIT_EXCEEDED": 403,
    "PAYOUTS_NOT_CONFIGURED": 403,
    "RECIPIENT_BUSY": 403,
    "NOT_FOUND": 404,
    "IDEMPOTENCY_KEY_REUSED": 409,
    "BATCH_REFUSED": 422,
    "RATE_LIMITED": 429,
    "SERVER_ERROR": 500,
}
"""The HTTP status of every error code (CONTRACT §6): the one table."""

_GROUPS = (AccessError, RequestError, CatalogueError, AmountError, FlowError)


def _leaves() -> tuple[type[PaymentError], ...]:
    found: list[type[PaymentError]] = []
    for group in _GROUPS:
        pending: list[type[PaymentError]] = list(group.__subclasses__())
        while pending:
            cls = pending.pop(0)
            if cls.__module__ == __name__ and cls is not InvalidTransitionError:
                found.append(cls)
            pending.extend(cls.__subclasses__())
    return tuple(found)


ALL_ERRORS: tuple[type[PaymentError], ...] = _leaves()
"""Every error class of the tree, one per code, in the spec's order of groups."""

ALL_CODES: tuple[str, ...] = tuple(cls.code for cls in ALL_ERRORS)
