"""JSON on the wire with exact numbers: Decimal is written as a JSON number, never through float."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from paymentcore._domain.money import parse_json

__all__ = ["dumps", "loads"]

_encode_string = json.JSONEncoder(ensure_ascii=False).encode


def _write(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_encode_string(value))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError("non-finite Decimal cannot be written as JSON")
        out.append(format(value, "f"))
    elif isinstance(value, dict):
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            if i:
                out.append(",")
            out.append(_encode_string(str(key)))
            out.append(":")
            _write(item, out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    elif isinstance(value, float):
        raise TypeError("floats are never written as money; use Decimal")
    else:
        raise TypeError(f"cannot write {type(value).__name__} as JSON")


def dumps(value: Any) -> str:
    out: list[str] = []
    _write(value, out)
    return "".join(out)


def loads(text: str | bytes) -> Any:
    return parse_json(text)
