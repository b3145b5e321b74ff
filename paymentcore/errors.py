"""The exception tree of paymentcore.

Every failure a caller can act on is a subclass of :class:`PaymentError` with a stable ``code`` (the
spec's error code), a human ``message``, the ``param`` at fault (or ``None``) and ``details`` (numbers
behind the message, or ``None``). The HTTP server maps each class to a status in one table
(``paymentcore_server.errors``); the library never knows about HTTP.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar


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
        super().__init__(self.message)

    def to_dict(self) -> dict[str, Any]:
        """The spec's error record, without requestId (the server adds it)."""
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.param is not None:
            body["param"] = self.param
        if self.details is not None:
            body["details"] = self.details
        return body


# --- Access -------------------------------------------------------------------------------------


class UnauthorizedError(PaymentError):
    """The API key is missing, malformed, unknown or revoked."""

    code = "UNAUTHORIZED"
    default_message = "A valid API key is required: send Authorization: Bearer <API_KEY>."


class MerchantNotApprovedError(PaymentError):
    """The merchant account is not approved, or is suspended, and cannot transact."""

    code = "MERCHANT_NOT_APPROVED"
    default_message = "This merchant account is not approved to transact."


class InsufficientScopeError(PaymentError):
    """The key is real but lacks the scope the endpoint needs (Collect or Disburse)."""

    code = "INSUFFICIENT_SCOPE"
    default_message = "This API key lacks the permission for this operation."


class CapabilityDisabledError(PaymentError):
    """A capability (the API, or payouts) is switched off for everybody on the platform."""

    code = "CAPABILITY_DISABLED"
    default_message = "This capability is switched off platform-wide."


class ProviderBlockedError(PaymentError):
    """The merchant is restricted from the named provider."""

    code = "PROVIDER_BLOCKED"
    default_message = "This account is restricted from that provider."


# --- Request ------------------------------------------------------------------------------------


class InvalidRequestError(PaymentError):
    """The request failed validation; ``param`` names the field at fault."""

    code = "INVALID_REQUEST"
    default_message = "The request is not valid."


class MethodNotAllowedError(InvalidRequestError):
    """The path exists but does not accept this HTTP method (INVALID_REQUEST, HTTP 405)."""


class BodyTooLargeError(InvalidRequestError):
    """The request body is larger than the server accepts (INVALID_REQUEST, HTTP 413)."""


class IdempotencyKeyRequiredError(PaymentError):
    """A payout was requested without an Idempotency-Key header."""

    code = "IDEMPOTENCY_KEY_REQUIRED"
    default_message = "Payouts need an Idempotency-Key header."


class IdempotencyKeyTooLongError(PaymentError):
    """The Idempotency-Key header is longer than 200 characters."""

    code = "IDEMPOTENCY_KEY_TOO_LONG"
    default_message = "The Idempotency-Key header must be at most 200 characters."


class IdempotencyKeyReusedError(PaymentError):
    """Extension: the Idempotency-Key was already used with a different request body."""

    code = "IDEMPOTENCY_KEY_REUSED"
    default_message = "This Idempotency-Key was already used with a different request."


# --- Currency, country, network -------------------------------------------------------------------


class UnknownCurrencyError(PaymentError):
    """The currency is not one the platform supports (for this operation)."""

    code = "UNKNOWN_CURRENCY"
    default_message = "This currency is not supported."


class CurrencyMismatchError(PaymentError):
    """The currency is not the country's currency; ``details.expected`` names the right one."""

    code = "CURRENCY_MISMATCH"
    default_message = "The currency is not the currency of that country."


class UnknownProviderError(PaymentError):
    """The provider code is not a usable provider."""

    code = "UNKNOWN_PROVIDER"
    default_message = "This provider is not supported."


class ProviderCountryMismatchError(PaymentError):
    """The provider does not operate in the given country."""

    code = "PROVIDER_COUNTRY_MISMATCH"
    default_message = "This provider does not operate in that country."


class CountryNotSupportedError(PaymentError):
    """Mobile money numbers cannot be placed in that country."""

    code = "COUNTRY_NOT_SUPPORTED"
    default_message = "This country is not supported."


class PhoneNotRecognisedError(PaymentError):
    """The number is not a recognised mobile money number of the country."""

    code = "PHONE_NOT_RECOGNISED"
    default_message = "This is not a recognised mobile money number in that country."


class PhoneProviderMismatchError(PaymentError):
    """The number belongs to a different network than the one named."""

    code = "PHONE_PROVIDER_MISMATCH"
    default_message = "This number belongs to a different network than the provider named."


# --- Amount and balance ---------------------------------------------------------------------------


class AmountTooSmallError(PaymentError):
    """The amount is below the currency's minimum; ``details.minimum`` holds it."""

    code = "AMOUNT_TOO_SMALL"
    default_message = "The amount is below the currency's minimum."


class AmountTooLargeError(PaymentError):
    """The amount is above the currency's maximum; ``details.maximum`` holds it."""

    code = "AMOUNT_TOO_LARGE"
    default_message = "The amount is above the currency's maximum."


class AmountPrecisionError(PaymentError):
    """The amount has more decimal places than the currency has."""

    code = "AMOUNT_PRECISION"
    default_message = "The amount has more decimal places than the currency allows."


class InsufficientBalanceError(PaymentError):
    """The available balance cannot cover the payout (details.available, required, currency)."""

    code = "INSUFFICIENT_BALANCE"
    default_message = "The available balance is not enough for this payout."


class PayoutLimitExceededError(PaymentError):
    """The payout is past a per-payout, rolling 24-hour or rolling 7-day ceiling."""

    code = "PAYOUT_LIMIT_EXCEEDED"
    default_message = "This payout is over a payout limit."


class PayoutsNotConfiguredError(PaymentError):
    """Payouts are stopped for this currency, for the account or because the currency is closed."""

    code = "PAYOUTS_NOT_CONFIGURED"
    default_message = "Payouts are not available for this currency on this account."


# --- Flow ---------------------------------------------------------------------------------------


class NotFoundError(PaymentError):
    """No such resource on this account (also for another merchant's reference)."""

    code = "NOT_FOUND"
    default_message = "No such resource."


class RecipientBusyError(PaymentError):
    """The number has received too many prompts in the recent window."""

    code = "RECIPIENT_BUSY"
    default_message = "This number has received too many payment prompts recently; wait and retry."


class RateLimitedError(PaymentError):
    """The API key went over one of its rate-limit windows."""

    code = "RATE_LIMITED"
    default_message = "Too many requests."

    def __init__(self, message: str | None = None, *, retry_after: int = 1, limit: int = 0) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.limit = limit


class ServerError(PaymentError):
    """A failure on the service's side; safe to retry, quoting the requestId."""

    code = "SERVER_ERROR"


class InvalidTransitionError(PaymentError):
    """A state machine was asked for a transition its table does not allow.

    Operator actions surface it (for example a second ``payout resolve``); it is an INVALID_REQUEST on
    the wire.
    """

    code = "INVALID_REQUEST"
    default_message = "This action is not allowed in the record's current state."


ALL_ERRORS: tuple[type[PaymentError], ...] = (
    UnauthorizedError,
    MerchantNotApprovedError,
    InsufficientScopeError,
    CapabilityDisabledError,
    ProviderBlockedError,
    InvalidRequestError,
    IdempotencyKeyRequiredError,
    IdempotencyKeyTooLongError,
    IdempotencyKeyReusedError,
    UnknownCurrencyError,
    CurrencyMismatchError,
    UnknownProviderError,
    ProviderCountryMismatchError,
    CountryNotSupportedError,
    PhoneNotRecognisedError,
    PhoneProviderMismatchError,
    AmountTooSmallError,
    AmountTooLargeError,
    AmountPrecisionError,
    InsufficientBalanceError,
    PayoutLimitExceededError,
    PayoutsNotConfiguredError,
    NotFoundError,
    RecipientBusyError,
    RateLimitedError,
    ServerError,
)
