"""Merchant-supplied text is inert in the CLI's output: control characters become visible escapes in the
text output, and ``--json`` stays exact JSON while never writing a character a terminal acts on."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from paymentcore import wire
from paymentcore_server._console_text import human_lines, is_unsafe, json_line, visible

FORGED_NAME = "Bob\r\nstatus: PAID"
SCREEN_CLEARING = "\x1b[2J\x1b[31mFAKE: approved\x07"


def test_line_breaks_and_escape_sequences_become_visible_escapes() -> None:
    assert visible(FORGED_NAME) == "Bob\\r\\nstatus: PAID"
    assert visible(SCREEN_CLEARING) == "\\x1b[2J\\x1b[31mFAKE: approved\\x07"
    assert visible("tab\there") == "tab\\there"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x00", "\\x00"),
        ("\x7f", "\\x7f"),  # DEL
        ("\x9b31m", "\\x9b31m"),  # the one-byte C1 CSI
        ("\x85", "\\x85"),  # NEL: a line break to some terminals
        ("\u2028", "\\u2028"),  # line separator
        ("abc\u202edcba", "abc\\u202edcba"),  # right-to-left override (Trojan Source)
        ("\u2066x\u2069", "\\u2066x\\u2069"),  # bidi isolates
        ("\ud800", "\\ud800"),  # a lone surrogate could not even be written out
    ],
)
def test_every_character_a_terminal_acts_on_is_escaped(raw: str, shown: str) -> None:
    assert visible(raw) == shown
    assert all(not is_unsafe(char) for char in visible(raw))


def test_a_backslash_is_doubled_so_that_an_escape_cannot_be_faked() -> None:
    typed = "Bob\\r\\nstatus: PAID"  # the characters backslash, r, backslash, n typed by a merchant
    assert visible(typed) == "Bob\\\\r\\\\nstatus: PAID"
    assert visible(typed) != visible(FORGED_NAME)


def test_ordinary_text_is_left_alone() -> None:
    for plain in ("Kiosk Ltd", "Émilie Ngono", "Order #1042 — 2 bags of rice", "支付", "👩‍👩‍👧 family"):
        assert visible(plain) == plain


def test_json_stays_exact_and_writes_no_raw_control_character() -> None:
    value = {
        "recipientName": FORGED_NAME,
        "merchantReference": SCREEN_CLEARING,
        "other": "\x9b\u202e\u2028\x7fé",
        "amount": Decimal("12.50"),
        "count": 3,
    }
    line = json_line(value)
    assert "\n" not in line and "\r" not in line
    assert not any(is_unsafe(char) for char in line)
    assert "é" in line  # ordinary non-ASCII text stays readable
    assert json.loads(line, parse_float=Decimal) == value  # the same values, exactly
    assert wire.loads(line) == value


def test_human_lines_are_one_line_per_field_whatever_the_values_hold() -> None:
    result = {
        "reference": "PO-1",
        "recipientName": FORGED_NAME,
        "merchantReference": SCREEN_CLEARING,
        "before": {"recipientName": FORGED_NAME},
        "data": [{"recipientName": FORGED_NAME, "amount": Decimal("6000")}],
    }
    lines = human_lines(result)
    assert lines == [
        "reference: PO-1",
        "recipientName: Bob\\r\\nstatus: PAID",
        "merchantReference: \\x1b[2J\\x1b[31mFAKE: approved\\x07",
        'before: {"recipientName":"Bob\\r\\nstatus: PAID"}',
        "data:",
        "  recipientName=Bob\\r\\nstatus: PAID  amount=6000",
    ]
    joined = "\n".join(lines)
    assert not any(is_unsafe(char) for char in joined.replace("\n", ""))
    assert not any(line.startswith("status:") for line in lines)
