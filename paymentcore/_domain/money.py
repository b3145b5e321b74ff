"""Exact money: integer minor units plus a currency. A float never becomes money.

Request JSON is parsed with :func:`parse_json` (numbers become ``int`` or ``Decimal``, never ``float``);
:func:`parse_amount` turns such a number into minor units after checking type, sign, precision and the
currency's bounds; :func:`to_decimal` renders minor units back as a Decimal with the currency's places.
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

import attrs

from paymentcore._domain.errors import (
    AmountPrecisionError,
    AmountTooLargeError,
    AmountTooSmallError,
    InvalidRequestError,
)


class CurrencyBounds(Protocol):
    """What the amount rules read of a currency (``paymentcore._domain.catalogue.Currency`` has it): a
    structural type, so that this module stays below the catalogue, which imports it."""

    @property
    def code(self) -> str: ...
    @property
    def decimals(self) -> int: ...
    @property
    def min_minor(self) -> int: ...
    @property
    def max_minor(self) -> int: ...


# Far beyond any currency's maximum, small enough that Decimal work on it is cheap.
_MAX_DIGITS = 30
#: The most minor units a stored amount may hold: the stores' columns are signed 64-bit integers
#: (SQLite INTEGER, PostgreSQL BIGINT). Amounts are bounded far below by their currency; an operator's
#: limits are checked against this.
MAX_STORED_MINOR = 2**63 - 1


@attrs.frozen
class Money:
    """An amount in minor units of a currency (XAF 500 is Money(500, "XAF"); GHS 1.50 is 150)."""

    minor: int
    currency: str


class _DuplicateKeyError(ValueError):
    pass


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKeyError(key)
        result[key] = value
    return result


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def _parse_float(text: str) -> Decimal:
    try:
        return Decimal(text)
    except ArithmeticError:
        # an exponent beyond what Decimal holds: kept as a non-number, so the field that holds it is
        # refused by its own check (an amount answers INVALID_REQUEST naming "amount")
        return Decimal("NaN")


def _parse_int(text: str) -> int | Decimal:
    if len(text.lstrip("-")) > _MAX_DIGITS:
        # Kept as Decimal so the amount check reports "too large" instead of converting a huge int.
        return Decimal(text)
    return int(text)


def parse_json(raw: bytes | str) -> Any:
    """Parse a request body: numbers never pass through float; NaN, Infinity and duplicate keys refused.

    Raises InvalidRequestError for anything that is not valid JSON.
    """
    try:
        value = json.loads(
            raw,
            parse_float=_parse_float,
            parse_int=_parse_int,
            parse_constant=_refuse_constant,
            object_pairs_hook=_object_without_duplicates,
        )
        _check_text(value)
        return value
    except _DuplicateKeyError as exc:
        raise InvalidRequestError(f"The body repeats the field '{exc.args[0]}'.", param=exc.args[0]) from None
    except (ValueError, RecursionError, UnicodeDecodeError, ArithmeticError):
        # ArithmeticError: decimal refuses a number whose exponent is beyond its range
        raise InvalidRequestError("The body is not valid JSON.") from None


def _check_text(value: Any) -> None:
    """Refuse strings that are not Unicode text (lone surrogates from escapes such as "\\ud800")."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRequestError("The body holds a string that is not valid Unicode text.") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key)
            _check_text(item)
    elif isinstance(value, list):
        for item in value:
            _check_text(item)


def minor_to_decimal(minor: int, decimals: int) -> Decimal:
    """Minor units as a Decimal with exactly ``decimals`` places."""
    return Decimal(minor).scaleb(-decimals)


def to_decimal(minor: int, currency: CurrencyBounds) -> Decimal:
    return minor_to_decimal(minor, currency.decimals)


def parse_amount(value: object, currency: CurrencyBounds, *, param: str = "amount") -> int:
    """Validate a JSON amount for ``currency`` and return its minor units.

    Refuses booleans, strings, null and other non-numbers (INVALID_REQUEST), non-finite and non-positive
    values (INVALID_REQUEST), numbers too large to be money (AMOUNT_TOO_LARGE), more decimal places than
    the currency has (AMOUNT_PRECISION), and values outside the currency's bounds (AMOUNT_TOO_SMALL with
    details.minimum, AMOUNT_TOO_LARGE with details.maximum).
    """
    try:
        minor = parse_positive_minor(value, currency.decimals, param=param)
    except AmountTooLargeError:
        minor = currency.max_minor + 1  # too large to be money: reported against the maximum below
    if minor < currency.min_minor:
        raise AmountTooSmallError(
            f"The amount is below the {currency.code} minimum of {to_decimal(currency.min_minor, currency)}.",
            param=param,
            details={"minimum": to_decimal(currency.min_minor, currency), "currency": currency.code},
        )
    if minor > currency.max_minor:
        raise AmountTooLargeError(
            f"The amount is above the {currency.code} maximum of {to_decimal(currency.max_minor, currency)}.",
            param=param,
            details={"maximum": to_decimal(currency.max_minor, currency), "currency": currency.code},
        )
    return minor


def parse_positive_minor(value: object, decimals: int, *, param: str = "amount") -> int:
    """A positive JSON number (int or Decimal, never bool or float) as minor units with ``decimals``."""
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        if isinstance(value, float):
            raise InvalidRequestError(
                "Amounts must not be floats; pass a Decimal, an int or a JSON number.", param=param
            )
        raise InvalidRequestError("The amount must be a JSON number.", param=param)
    number = Decimal(value)
    if not number.is_finite():
        raise InvalidRequestError("The amount must be a finite number.", param=param)
    if number <= 0:
        raise InvalidRequestError("The amount must be greater than zero.", param=param)
    if number.adjusted() >= _MAX_DIGITS:
        raise AmountTooLargeError("The amount is too large to be money.", param=param)
    if _places(number) > decimals:
        raise AmountPrecisionError(
            f"The amount has more than {decimals} decimal place{'s' if decimals != 1 else ''}.",
            param=param,
            details={"decimals": decimals},
        )
    # exact integer arithmetic on the digits: the Decimal context never rounds money. Trailing zeros
    # are folded into the exponent first, so a number written with thousands of zeros stays cheap.
    _, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    significant = text.rstrip("0")
    exponent += len(text) - len(significant)
    coefficient = int(significant)
    shift = exponent + decimals
    scale: int = 10 ** abs(shift)
    return coefficient * scale if shift >= 0 else coefficient // scale  # the dropped digits are zeros


def _places(number: Decimal) -> int:
    """Decimal places that carry a non-zero digit, exactly (no rounding by the Decimal context)."""
    _, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)  # finite numbers have an integer exponent
    trailing_zeros = len(digits) - len("".join(map(str, digits)).rstrip("0"))
    return max(0, -(exponent + trailing_zeros)) if any(digits) else 0


def parse_decimal_text(text: str, decimals: int, *, param: str = "amount") -> int:
    """An operator's amount typed as text ("1500", "12.50") as minor units."""
    try:
        number = Decimal(text.strip())
    except InvalidOperation:
        raise InvalidRequestError(f"'{text}' is not a number.", param=param) from None
    return parse_positive_minor(number, decimals, param=param)


def apply_rate(minor: int, source_decimals: int, rate: Decimal, target_decimals: int) -> int:
    """Convert minor units through an exchange rate, rounding half up to the target's minor unit."""
    value = minor_to_decimal(minor, source_decimals) * rate
    scaled = value.scaleb(target_decimals)
    return int(scaled.to_integral_value(rounding="ROUND_HALF_UP"))


def fee_for(minor: int, fee_ppm: int) -> int:
    """The platform fee on a charged amount, rounded half up to the minor unit (never above the amount)."""
    if fee_ppm <= 0:
        return 0
    fee = (minor * fee_ppm * 2 + 1_000_000) // 2_000_000
    return min(fee, minor)
