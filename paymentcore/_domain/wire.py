"""JSON on the wire with exact numbers: Decimal is written as a JSON number, never through float.

The standard library's C encoder cannot write a Decimal as a number, so the documents are written here:
each value's JSON text is found by its exact type (one lookup for the built-in types that make up every
document the API writes), strings are quoted by the C function ``json.dumps`` itself uses, and an object's
keys, which are the same few dozen field names over and over, are quoted once and kept.
"""

from __future__ import annotations

from decimal import Decimal
from json.encoder import encode_basestring as _quote
from typing import Any

from paymentcore._domain.money import parse_json

__all__ = ["dumps", "loads"]

_HEADS_KEPT = 4096  # quoted keys kept at most (a document's keys can come from a merchant: bounded),
_HEAD_KEPT_LENGTH = 64  # each of at most this many characters (field names, not one-off data)
_heads: dict[str, str] = {}


def _decimal(value: Decimal) -> str:
    if not value.is_finite():
        raise ValueError("non-finite Decimal cannot be written as JSON")
    return format(value, "f")


def _head(key: Any) -> str:
    """``"key":``, the key written as JSON text (``str(key)`` for a key that is not a string)."""
    head = _heads.get(key) if type(key) is str else None
    if head is None:
        head = _quote(key if type(key) is str else str(key)) + ":"
        if type(key) is str and len(key) <= _HEAD_KEPT_LENGTH and len(_heads) < _HEADS_KEPT:
            _heads[key] = head
    return head


def _text(value: Any) -> str:
    kind = type(value)
    if kind is str:
        return _quote(value)
    if value is None:
        return "null"
    if kind is int:
        return int.__repr__(value)
    if kind is Decimal:
        return _decimal(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is dict or isinstance(value, dict):
        parts: list[str] = []  # loops, not comprehensions: on Python 3.11 a comprehension is a frame
        for key, item in value.items():  # more a level, halving the nesting a document may have
            parts.append(_head(key) + _text(item))
        return "{" + ",".join(parts) + "}"
    if kind is list or kind is tuple or isinstance(value, list | tuple):
        parts = []
        for item in value:
            parts.append(_text(item))
        return "[" + ",".join(parts) + "]"
    return _subclassed(value)


def _subclassed(value: Any) -> str:
    """The JSON text of a leaf of a subclass of the types above (an enum's member, an ``IntEnum``...),
    as ``isinstance`` decides, a bool before an int and an int or a str before an enum."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        return _decimal(value)
    if isinstance(value, float):
        raise TypeError("floats are never written as money; use Decimal")
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def dumps(value: Any) -> str:
    return _text(value)


def loads(text: str | bytes) -> Any:
    return parse_json(text)
