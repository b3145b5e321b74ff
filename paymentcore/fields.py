"""Reading request bodies field by field, with the spec's errors and ``param`` names."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from paymentcore.errors import InvalidRequestError


def require_object(body: object) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise InvalidRequestError("The body must be a JSON object.")
    return body


def required(body: Mapping[str, Any], name: str) -> Any:
    if name not in body or body[name] is None:
        raise InvalidRequestError(f"{name} is required.", param=name)
    return body[name]


def optional_string(
    body: Mapping[str, Any], name: str, *, max_length: int, alias: str | None = None
) -> str | None:
    value = _string_or_none(body, name, max_length)
    if alias is not None:
        alias_value = _string_or_none(body, alias, max_length)  # checked even when unused
        if value is None:
            value = alias_value
    return value


def _string_or_none(body: Mapping[str, Any], param: str, max_length: int) -> str | None:
    value = body.get(param)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequestError(f"{param} must be a string.", param=param)
    if len(value) > max_length:
        raise InvalidRequestError(f"{param} must be at most {max_length} characters.", param=param)
    return value


def required_string(body: Mapping[str, Any], name: str, *, max_length: int = 200) -> str:
    value = required(body, name)
    if not isinstance(value, str) or not value:
        raise InvalidRequestError(f"{name} must be a non-empty string.", param=name)
    if len(value) > max_length:
        raise InvalidRequestError(f"{name} must be at most {max_length} characters.", param=name)
    return value


def optional_int(body: Mapping[str, Any], name: str, *, default: int, low: int, high: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(f"{name} must be a whole number.", param=name)
    if value < low or value > high:
        raise InvalidRequestError(f"{name} must be between {low} and {high}.", param=name)
    return value


# --- typed arguments of the library's methods (``param`` is the argument's name) -------------------


def required_text(value: object, param: str, *, max_length: int = 200) -> str:
    """A required, non-empty string argument."""
    if value is None:
        raise InvalidRequestError(f"{param} is required.", param=param)
    if not isinstance(value, str) or not value:
        raise InvalidRequestError(f"{param} must be a non-empty string.", param=param)
    if len(value) > max_length:
        raise InvalidRequestError(f"{param} must be at most {max_length} characters.", param=param)
    return value


def optional_text(value: object, param: str, *, max_length: int) -> str | None:
    """An optional string argument: None, or a string of at most ``max_length`` characters."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequestError(f"{param} must be a string.", param=param)
    if len(value) > max_length:
        raise InvalidRequestError(f"{param} must be at most {max_length} characters.", param=param)
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
