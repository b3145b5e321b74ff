"""Checking the library's arguments, with the spec's errors; ``param`` is the argument's name."""

from __future__ import annotations

from decimal import Decimal

from paymentcore._domain.errors import InvalidRequestError

# --- typed arguments of the library's methods (``param`` is the argument's name) -------------------


def required_text(value: object, param: str, *, max_length: int = 200) -> str:
    """A required, non-empty string argument."""
    if value is None:
        raise InvalidRequestError(f"{param} is required.", param=param)
    if not isinstance(value, str) or not value:
        raise InvalidRequestError(f"{param} must be a non-empty string.", param=param)
    if len(value) > max_length:
        raise InvalidRequestError(f"{param} must be at most {max_length} characters.", param=param)
    return refuse_nul(value, param)


def optional_text(value: object, param: str, *, max_length: int) -> str | None:
    """An optional string argument: None, or a string of at most ``max_length`` characters."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequestError(f"{param} must be a string.", param=param)
    if len(value) > max_length:
        raise InvalidRequestError(f"{param} must be at most {max_length} characters.", param=param)
    return refuse_nul(value, param)


def refuse_nul(value: str, param: str) -> str:
    """Text with no NUL character (no store keeps one: PostgreSQL refuses it in any text column)."""
    if "\x00" in value:
        raise InvalidRequestError(f"{param} must not contain a NUL character.", param=param)
    return value


def optional_whole(value: object, param: str, *, default: int, low: int, high: int) -> int:
    """An optional whole-number argument within ``low``..``high``."""
    if value is None:
        return default
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(f"{param} must be a whole number.", param=param)
    if value < low or value > high:
        raise InvalidRequestError(f"{param} must be between {low} and {high}.", param=param)
    return value


def required_value(value: object, param: str) -> object:
    """Any value that must be given (the lookup that follows checks its type)."""
    if value is None:
        raise InvalidRequestError(f"{param} is required.", param=param)
    return value
