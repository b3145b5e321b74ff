"""Untrusted text made inert for a terminal (the CLI) and shown unambiguously (the console).

Merchants supply recipient names, merchant references, descriptions and webhook URLs; an operator reads
them. Written raw to a terminal, a carriage return or line feed forges lines (``Bob\\r\\nstatus: PAID``),
an escape sequence clears the screen or recolours it, a bell rings, a bidi override reorders what
follows. :func:`visible` shows every such character as a visible escape instead (``\\r``, ``\\x1b``,
``\\u202e``), and a backslash as ``\\\\`` so that an escape cannot be faked by typing one.
:func:`json_line` keeps ``--json`` exact JSON (the same values once parsed) while writing those
characters as ``\\u`` escapes, which JSON already does for the other control characters.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from paymentcore import wire

__all__ = ["human_lines", "is_unsafe", "json_line", "visible"]

_NAMED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# bidi controls (Trojan Source): marks, embeddings, overrides, isolates
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# what JSON leaves raw that a terminal may act on: DEL, the C1 controls, line and paragraph separators,
# bidi controls, lone surrogates (which could not even be written as UTF-8)
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def is_unsafe(char: str) -> bool:
    """A character a terminal may act on or that reorders text: every control character (C0, DEL,
    C1), line and paragraph separators, bidi controls, surrogates."""
    return unicodedata.category(char) in ("Cc", "Zl", "Zp", "Cs") or char in _BIDI


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def visible(text: str) -> str:
    """``text`` with every unsafe character (and the backslash) written as a visible escape."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(_NAMED.get(char) or (_escape(char) if is_unsafe(char) else char) for char in text)


def json_line(value: Any) -> str:
    """``value`` as one line of exact JSON that is safe to write to a terminal."""
    return _JSON_UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", wire.dumps(value))


def _value(value: Any) -> str:
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, Mapping | list | tuple):
        return json_line(value)  # JSON escapes every control character itself
    if value is None:
        return "None"
    return visible(str(value))


def human_lines(result: Mapping[str, Any]) -> list[str]:
    """A result as ``key: value`` lines (a list of records as one indented line each), every value made
    visible: whatever a merchant wrote, each line printed is one line, and nothing reaches the terminal
    as a control sequence."""
    lines: list[str] = []
    for key, value in result.items():
        if isinstance(value, list) and value and all(isinstance(item, Mapping) for item in value):
            lines.append(f"{visible(str(key))}:")
            for item in value:
                lines.append("  " + "  ".join(f"{visible(str(k))}={_value(v)}" for k, v in item.items()))
        else:
            lines.append(f"{visible(str(key))}: {_value(value)}")
    return lines
