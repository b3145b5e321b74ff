"""Exact money: amount validation, JSON numbers that never pass through float, fees and rates."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paymentcore import wire
from paymentcore._domain.money import apply_rate, fee_for, parse_amount, parse_json, to_decimal
from paymentcore.catalogue import Catalogue, Currency
from paymentcore.errors import PaymentError

CATALOGUE = Catalogue.default()
XAF = CATALOGUE.currency("XAF")
XOF = CATALOGUE.currency("XOF")
GHS = CATALOGUE.currency("GHS")
KES = CATALOGUE.currency("KES")
BTC = CATALOGUE.currency("BTC")
ALL_CURRENCIES = sorted(CATALOGUE.currencies)


def refusal(value: object, currency: Currency) -> PaymentError:
    """The error parse_amount raises for ``value``; fails the test when the value is accepted."""
    with pytest.raises(PaymentError) as caught:
        parse_amount(value, currency)
    return caught.value


# --- parse_amount: wrong types and non-positive values ---------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        True,
        False,
        "100",
        "",
        None,
        100.0,
        0.5,
        float("nan"),
        float("inf"),
        [100],
        {"value": 100},
        (100,),
        b"100",
    ],
    ids=repr,
)
def test_non_numbers_are_invalid_request_on_amount(value: object) -> None:
    error = refusal(value, XAF)
    assert error.code == "INVALID_REQUEST"
    assert error.param == "amount"


@pytest.mark.parametrize(
    "value",
    [
        Decimal("NaN"),
        Decimal("-NaN"),
        Decimal("sNaN"),
        Decimal("Infinity"),
        Decimal("-Infinity"),
    ],
    ids=str,
)
def test_non_finite_decimals_are_invalid_request(value: Decimal) -> None:
    error = refusal(value, XAF)
    assert error.code == "INVALID_REQUEST"
    assert error.param == "amount"


@pytest.mark.parametrize(
    "value",
    [0, Decimal("0"), Decimal("0.00"), Decimal("-0"), Decimal("-0.0"), -1, -100, Decimal("-100"), -(10**400)],
    ids=lambda v: repr(v)[:30],
)
def test_zero_and_negative_amounts_are_invalid_request(value: object) -> None:
    error = refusal(value, XAF)
    assert error.code == "INVALID_REQUEST"
    assert error.param == "amount"


def test_a_custom_param_name_is_reported() -> None:
    with pytest.raises(PaymentError) as caught:
        parse_amount("5", XAF, param="price")
    assert caught.value.code == "INVALID_REQUEST"
    assert caught.value.param == "price"


# --- parse_amount: precision ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "currency"),
    [
        (Decimal("100.5"), XAF),
        (Decimal("100.01"), XOF),
        (Decimal("1.005"), GHS),
        (Decimal("12.001"), KES),
        (Decimal("0.000010001"), BTC),  # nine decimals
        (Decimal("0.123456789"), BTC),
    ],
    ids=lambda v: str(v) if isinstance(v, Decimal) else v.code,
)
def test_more_decimals_than_the_currency_has_is_amount_precision(value: Decimal, currency: Currency) -> None:
    error = refusal(value, currency)
    assert error.code == "AMOUNT_PRECISION"
    assert error.param == "amount"


@pytest.mark.parametrize(
    ("value", "currency", "minor"),
    [
        (Decimal("100.00"), XAF, 100),
        (Decimal("100.000000"), XOF, 100),
        (Decimal("1E+2"), XAF, 100),
        (Decimal("1.50"), GHS, 150),
        (Decimal("1.5000"), GHS, 150),
        (Decimal("0.00001000"), BTC, 1000),
        (Decimal("0.000010000000"), BTC, 1000),
        (Decimal("1"), BTC, 100_000_000),
        (250, GHS, 25_000),
        (100, XAF, 100),
        (5_000_000, XAF, 5_000_000),
    ],
    ids=lambda v: str(v) if not isinstance(v, Currency) else v.code,
)
def test_accepted_amounts_become_minor_units(value: int | Decimal, currency: Currency, minor: int) -> None:
    result = parse_amount(value, currency)
    assert result == minor
    assert type(result) is int


@pytest.mark.parametrize(
    ("value", "currency"),
    [
        (Decimal("100.0000000000000000000000000001"), XAF),  # 31 significant digits
        (Decimal("99.999999999999999999999999999999"), XAF),  # would round up to 100 in 28 digits
        (Decimal("1.00000000000000000000000000001"), GHS),
        (Decimal("1E-999999999"), XAF),
        (Decimal("100." + "0" * 200 + "1"), XAF),
    ],
    ids=lambda v: str(v)[:40] if isinstance(v, Decimal) else v.code,
)
def test_precision_is_checked_exactly_beyond_the_decimal_context(value: Decimal, currency: Currency) -> None:
    error = refusal(value, currency)
    assert error.code == "AMOUNT_PRECISION"
    assert error.param == "amount"


@given(
    st.sampled_from(ALL_CURRENCIES),
    st.integers(0, 10**9),
    st.integers(0, 60),
)
@settings(max_examples=100)
def test_trailing_zeros_never_change_the_amount(code: str, minor: int, extra_zeros: int) -> None:
    currency = CATALOGUE.currency(code)
    minor = currency.min_minor + minor % (currency.max_minor - currency.min_minor + 1)
    text = str(to_decimal(minor, currency))
    padded = Decimal(text + ("" if "." in text else ".") + "0" * extra_zeros)
    assert parse_amount(padded, currency) == minor


def test_thousands_of_trailing_zeros_are_still_the_same_amount() -> None:
    parsed = parse_json('{"amount": 100.' + "0" * 5000 + "}")["amount"]
    assert parse_amount(parsed, XAF) == 100


# --- parse_amount: bounds -------------------------------------------------------------------------


@pytest.mark.parametrize("code", ALL_CURRENCIES)
def test_below_the_minimum_is_too_small_with_details_minimum(code: str) -> None:
    currency = CATALOGUE.currency(code)
    error = refusal(to_decimal(currency.min_minor - 1, currency), currency)
    assert error.code == "AMOUNT_TOO_SMALL"
    assert error.param == "amount"
    assert error.details is not None
    minimum = error.details["minimum"]
    assert isinstance(minimum, Decimal)
    assert minimum == to_decimal(currency.min_minor, currency)
    assert parse_amount(minimum, currency) == currency.min_minor


@pytest.mark.parametrize("code", ALL_CURRENCIES)
def test_above_the_maximum_is_too_large_with_details_maximum(code: str) -> None:
    currency = CATALOGUE.currency(code)
    error = refusal(to_decimal(currency.max_minor + 1, currency), currency)
    assert error.code == "AMOUNT_TOO_LARGE"
    assert error.param == "amount"
    assert error.details is not None
    maximum = error.details["maximum"]
    assert isinstance(maximum, Decimal)
    assert maximum == to_decimal(currency.max_minor, currency)
    assert parse_amount(maximum, currency) == currency.max_minor


def test_shipped_bounds_are_the_documented_ones() -> None:
    assert to_decimal(XAF.min_minor, XAF) == Decimal("100")
    assert to_decimal(XAF.max_minor, XAF) == Decimal("5000000")
    assert to_decimal(GHS.min_minor, GHS) == Decimal("1.00")
    assert to_decimal(BTC.min_minor, BTC) == Decimal("0.00001")
    small = refusal(99, XAF)
    assert small.code == "AMOUNT_TOO_SMALL"
    assert small.details is not None
    assert small.details["minimum"] == Decimal(100)
    large = refusal(Decimal("50000.01"), GHS)
    assert large.code == "AMOUNT_TOO_LARGE"
    assert large.details is not None
    assert large.details["maximum"] == Decimal("50000.00")


# --- huge numbers ---------------------------------------------------------------------------------

FIVE_THOUSAND_DIGITS = 7 * 10**4999 + 1


@pytest.mark.parametrize(
    "value",
    [
        10**400,
        FIVE_THOUSAND_DIGITS,
        2**63,
        2**64 + 1,
        Decimal("1e309"),
        Decimal("9" * 5000),
        Decimal("123456789012345678901234567890123.5"),
    ],
    ids=["10**400", "5000-digit int", "2**63", "2**64+1", "1e309", "5000 nines", "34 digits"],
)
def test_huge_numbers_are_too_large_without_hanging(value: int | Decimal) -> None:
    for currency in (XAF, GHS, BTC):
        started = time.perf_counter()
        error = refusal(value, currency)
        assert time.perf_counter() - started < 1.0
        assert error.code == "AMOUNT_TOO_LARGE"
        assert error.param == "amount"


HUGE_IN_A_CHILD = """
from decimal import Decimal
from paymentcore.catalogue import Catalogue
from paymentcore.errors import AmountTooLargeError
from paymentcore._domain.money import parse_amount, parse_json
xaf = Catalogue.default().currency("XAF")
for value in (10**400, Decimal("1E+999999999"), parse_json("1e999999999"), parse_json("9" * 5000)):
    try:
        parse_amount(value, xaf)
    except AmountTooLargeError:
        continue
    raise SystemExit("accepted")
print("ok")
"""


def test_huge_exponents_cannot_hang_the_process() -> None:
    # In a child with a hard timeout: a computation of 10**999999999 would otherwise hang the test run.
    result = subprocess.run(
        [sys.executable, "-c", HUGE_IN_A_CHILD], capture_output=True, text=True, timeout=20, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_huge_numbers_still_report_the_currency_maximum() -> None:
    for currency in (XAF, GHS, BTC):
        for value in (10**400, Decimal("1e309")):
            error = refusal(value, currency)
            assert error.details is not None
            assert error.details["maximum"] == to_decimal(currency.max_minor, currency)


# --- parse_json -----------------------------------------------------------------------------------


def walk(value: Any) -> list[Any]:
    """Every leaf and container of a parsed JSON document."""
    found = [value]
    if isinstance(value, dict):
        for item in value.values():
            found.extend(walk(item))
    elif isinstance(value, list):
        for item in value:
            found.extend(walk(item))
    return found


def test_parse_json_numbers_are_int_or_decimal_never_float() -> None:
    parsed = parse_json(
        b'{"a": 1, "b": 1.5, "c": -0.0, "d": 1e2, "e": [2.25, 3, {"f": 0.1}], "g": 1E-7, "h": 100.00}'
    )
    assert not any(isinstance(leaf, float) for leaf in walk(parsed))
    assert parsed["a"] == 1
    assert type(parsed["a"]) is int
    assert parsed["b"] == Decimal("1.5")
    assert type(parsed["b"]) is Decimal
    assert str(parsed["e"][2]["f"]) == "0.1"  # exactly one tenth, not 0.1000000000000000055...
    assert parsed["d"] == Decimal(100)
    assert type(parsed["d"]) is Decimal
    assert str(parsed["h"]) == "100.00"
    assert parse_amount(parsed["h"], XAF) == 100
    assert parse_amount(parsed["b"], GHS) == 150


@given(st.floats(allow_nan=False, allow_infinity=False))
@settings(max_examples=50)
def test_parse_json_reads_any_float_text_as_the_exact_decimal(number: float) -> None:
    text = repr(number)
    parsed = parse_json(text)
    assert not isinstance(parsed, float)
    assert Decimal(parsed) == Decimal(text)


@pytest.mark.parametrize(
    "raw",
    ["NaN", "Infinity", "-Infinity", '{"amount": NaN}', '{"amount": Infinity}', "[-Infinity]"],
)
def test_parse_json_refuses_non_finite_literals(raw: str) -> None:
    with pytest.raises(PaymentError) as caught:
        parse_json(raw)
    assert caught.value.code == "INVALID_REQUEST"


def test_parse_json_refuses_duplicate_keys_naming_the_key() -> None:
    with pytest.raises(PaymentError) as caught:
        parse_json('{"amount": 100, "currency": "XAF", "amount": 100000}')
    assert caught.value.code == "INVALID_REQUEST"
    assert caught.value.param == "amount"
    with pytest.raises(PaymentError) as nested:
        parse_json('{"outer": {"x": 1, "x": 1}}')
    assert nested.value.code == "INVALID_REQUEST"


@pytest.mark.parametrize("raw", ["", "{", "{'a': 1}", "[1,]", b"\xff\xfe\x00", "[" * 100_000])
def test_parse_json_refuses_invalid_json(raw: str | bytes) -> None:
    with pytest.raises(PaymentError) as caught:
        parse_json(raw)
    assert caught.value.code == "INVALID_REQUEST"


def test_1e309_parses_to_a_decimal_refused_as_too_large() -> None:
    parsed = parse_json('{"amount": 1e309}')["amount"]
    assert isinstance(parsed, Decimal)
    assert parsed.is_finite()
    assert parsed == Decimal("1e309")
    assert refusal(parsed, XAF).code == "AMOUNT_TOO_LARGE"


def test_a_5000_digit_json_number_is_refused_quickly() -> None:
    started = time.perf_counter()
    parsed = parse_json('{"amount": ' + "9" * 5000 + "}")["amount"]
    error = refusal(parsed, XAF)
    assert time.perf_counter() - started < 1.0
    assert error.code == "AMOUNT_TOO_LARGE"


# --- round trip through the wire ------------------------------------------------------------------


@st.composite
def currency_and_minor(draw: st.DrawFn) -> tuple[Currency, int]:
    currency = CATALOGUE.currency(draw(st.sampled_from(ALL_CURRENCIES)))
    minor = draw(
        st.one_of(
            st.integers(currency.min_minor, currency.max_minor),
            st.sampled_from([currency.min_minor, currency.max_minor]),
        )
    )
    return currency, minor


@given(currency_and_minor())
@settings(max_examples=200)
def test_minor_units_round_trip_through_wire_and_parse(case: tuple[Currency, int]) -> None:
    currency, minor = case
    rendered = to_decimal(minor, currency)
    assert rendered.as_tuple().exponent == -currency.decimals
    text = wire.dumps({"amount": rendered, "currency": currency.code})
    parsed = parse_json(text)
    assert not isinstance(parsed["amount"], float)
    assert parse_amount(parsed["amount"], currency) == minor
    assert wire.loads(text) == parsed


def test_rendered_amounts_keep_the_currency_places_on_the_wire() -> None:
    assert wire.dumps(to_decimal(150, GHS)) == "1.50"
    assert wire.dumps(to_decimal(1000, BTC)) == "0.00001000"
    assert wire.dumps(to_decimal(500, XAF)) == "500"


def finite_decimals() -> st.SearchStrategy[Decimal]:
    return st.builds(
        lambda coefficient, exponent: Decimal(f"{coefficient}E{exponent}"),
        st.integers(-(10**12), 10**12),
        st.integers(-12, 12),
    )


JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**18), 10**18),
    finite_decimals(),
    st.text(max_size=8),
)
JSON_TREES = st.recursive(
    JSON_LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=6), children, max_size=4),
    ),
    max_leaves=12,
)


def assert_reads_back_as(parsed: Any, original: Any) -> None:
    """Strict structural equality: bools are not ints, Decimals keep their places, no floats."""
    assert not isinstance(parsed, float)
    if original is None or isinstance(original, bool | str):
        assert type(parsed) is type(original)
        assert parsed == original
    elif isinstance(original, int):
        assert type(parsed) is int
        assert parsed == original
    elif isinstance(original, Decimal):
        exponent = original.as_tuple().exponent
        assert isinstance(exponent, int)
        if exponent >= 0:
            assert type(parsed) is int
            assert parsed == original
        else:
            assert type(parsed) is Decimal
            assert parsed.as_tuple() == original.as_tuple()
    elif isinstance(original, dict):
        assert isinstance(parsed, dict)
        assert list(parsed) == list(original)
        for key, item in original.items():
            assert_reads_back_as(parsed[key], item)
    else:
        assert isinstance(parsed, list)
        assert len(parsed) == len(original)
        for got, item in zip(parsed, original, strict=True):
            assert_reads_back_as(got, item)


@given(JSON_TREES)
@settings(max_examples=150)
def test_wire_dumps_writes_decimals_exactly_in_any_structure(tree: Any) -> None:
    text = wire.dumps(tree)
    assert_reads_back_as(parse_json(text), tree)


PLAIN_TREES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(10**30), 10**30), st.text(max_size=8)),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(st.text(max_size=6), children, max_size=4),
    ),
    max_leaves=12,
)


@given(PLAIN_TREES)
@settings(max_examples=200)
def test_a_document_without_decimals_is_written_as_compact_json_writes_it(tree: Any) -> None:
    """Byte for byte what ``json.dumps`` writes with no spaces and UTF-8 kept (clients that sign or
    compare bodies see the same text as before the writer was made faster)."""
    assert wire.dumps(tree) == json.dumps(tree, ensure_ascii=False, separators=(",", ":"))


@given(finite_decimals())
@settings(max_examples=100)
def test_a_decimal_is_written_as_its_plain_text(value: Decimal) -> None:
    text = wire.dumps(value)
    assert text == format(value, "f")
    assert "e" not in text.lower()
    assert Decimal(text) == value


@given(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["bare", "list", "dict", "deep"]),
)
@settings(max_examples=50)
def test_wire_dumps_refuses_a_float_anywhere(number: float, shape: str) -> None:
    value: Any = {
        "bare": number,
        "list": [1, number],
        "dict": {"amount": number},
        "deep": {"a": [{"b": (Decimal("1.5"), number)}]},
    }[shape]
    with pytest.raises(TypeError):
        wire.dumps(value)


@pytest.mark.parametrize("value", [Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity")], ids=str)
def test_wire_dumps_refuses_non_finite_decimals(value: Decimal) -> None:
    with pytest.raises(ValueError):
        wire.dumps({"amount": value})


# --- fees and rates -------------------------------------------------------------------------------


@given(st.integers(0, 10**15), st.integers(-1_000, 2_000_000))
@settings(max_examples=200)
def test_fee_is_within_the_amount_and_the_split_is_exact(charged: int, ppm: int) -> None:
    fee = fee_for(charged, ppm)
    assert 0 <= fee <= charged
    net = charged - fee
    assert net + fee == charged
    exact = Decimal(charged) * max(ppm, 0) / Decimal(1_000_000)
    expected = exact.to_integral_value(rounding=ROUND_HALF_UP)
    assert fee == min(int(expected), charged)


@pytest.mark.parametrize(
    ("charged", "ppm", "fee"),
    [
        (10_000, 15_000, 150),  # 1.5 %
        (1, 500_000, 1),  # half a unit rounds up
        (1, 499_999, 0),
        (3, 500_000, 2),  # 1.5 rounds up
        (1_000, 0, 0),
        (1_000, -5, 0),
        (1_000, 1_000_000, 1_000),
        (1_000, 3_000_000, 1_000),  # never above the amount
    ],
)
def test_fee_examples(charged: int, ppm: int, fee: int) -> None:
    assert fee_for(charged, ppm) == fee


@given(st.integers(0, 10**18), st.integers(0, 8))
@settings(max_examples=150)
def test_apply_rate_with_rate_one_and_equal_decimals_is_identity(minor: int, decimals: int) -> None:
    assert apply_rate(minor, decimals, Decimal(1), decimals) == minor
    assert apply_rate(minor, decimals, Decimal("1.000"), decimals) == minor


@pytest.mark.parametrize(
    ("minor", "source", "rate", "target", "expected"),
    [
        (100, 2, Decimal("603.48"), 0, 603),  # USD 1.00 -> XAF 603.48 -> 603
        (150, 2, Decimal(1), 0, 2),  # 1.50 rounds half up to 2
        (149, 2, Decimal(1), 0, 1),
        (250, 2, Decimal(1), 0, 3),  # half up, not half even
        (5, 3, Decimal("0.1"), 3, 1),  # 0.005 * 0.1 = 0.0005 -> 0.001
        (500, 0, Decimal(1), 2, 50_000),  # 500 units with 0 places -> 500.00
        (100, 0, Decimal("603.48") / Decimal("603.48"), 0, 100),  # XAF -> XOF
    ],
)
def test_apply_rate_examples(minor: int, source: int, rate: Decimal, target: int, expected: int) -> None:
    assert apply_rate(minor, source, rate, target) == expected
