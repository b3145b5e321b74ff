"""The catalogue: CONTRACT section 7's countries, providers and prefixes, phone rules and lookups."""

from __future__ import annotations

import json
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from paymentcore.catalogue import Catalogue, Country, Provider
from paymentcore.errors import PaymentError

CATALOGUE = Catalogue.default()

# CONTRACT section 7: country -> (currency, decimals, dial code, digits).
COUNTRIES: dict[str, tuple[str, int, str, int]] = {
    "CM": ("XAF", 0, "+237", 9),
    "CI": ("XOF", 0, "+225", 10),
    "SN": ("XOF", 0, "+221", 9),
    "GH": ("GHS", 2, "+233", 9),
    "KE": ("KES", 2, "+254", 9),
    "UG": ("UGX", 0, "+256", 9),
}

# CONTRACT section 7: provider -> (country, prefixes as the table writes them).
PROVIDERS: dict[str, tuple[str, list[str]]] = {
    "mtn_cm": ("CM", ["650-654", "67", "680-683"]),
    "orange_cm": ("CM", ["655-659", "69", "686-689", "640-642"]),
    "orange_ci": ("CI", ["07"]),
    "mtn_ci": ("CI", ["05"]),
    "moov_ci": ("CI", ["01"]),
    "orange_sn": ("SN", ["77", "78", "71"]),
    "free_sn": ("SN", ["76"]),
    "expresso_sn": ("SN", ["70"]),
    "mtn_gh": ("GH", ["24", "25", "53", "54", "55", "59"]),
    "telecel_gh": ("GH", ["20", "50"]),
    "airteltigo_gh": ("GH", ["26", "27", "56", "57"]),
    "mpesa_ke": (
        "KE",
        ["70", "71", "72", "740-743", "745", "746", "748", "749", "757-759", "768", "769", "79", "11"],
    ),
    "airtel_ke": ("KE", ["10", "73", "750-756", "761", "762", "78"]),
    "mtn_ug": ("UG", ["76", "77", "78", "790-794"]),
    "airtel_ug": ("UG", ["70", "74", "75", "795"]),
}

TRUNK_COUNTRIES = ("GH", "KE", "UG")


def expand(prefixes: list[str]) -> set[str]:
    """The table's "650-654" as {"650", ..., "654"}; written here independently of the loader."""
    out: set[str] = set()
    for prefix in prefixes:
        if "-" in prefix:
            low, high = prefix.split("-")
            out.update(str(n).zfill(len(low)) for n in range(int(low), int(high) + 1))
        else:
            out.add(prefix)
    return out


def local_number(prefix: str, digits: int) -> str:
    """A number of ``digits`` digits that starts with ``prefix`` (the rest varied, not all zeros)."""
    filler = "4938271605"
    return (prefix + filler * 2)[:digits]


def error_of(call: Any, *args: Any, **kwargs: Any) -> PaymentError:
    with pytest.raises(PaymentError) as caught:
        call(*args, **kwargs)
    return caught.value


# --- countries and currencies ---------------------------------------------------------------------


@pytest.mark.parametrize("code", sorted(COUNTRIES))
def test_contract_countries_are_present(code: str) -> None:
    currency, decimals, dial, digits = COUNTRIES[code]
    country = CATALOGUE.country(code)
    assert country.code == code
    assert country.currency == currency
    assert country.dial_code == dial
    assert country.phone_digits == digits
    assert CATALOGUE.currency(currency).decimals == decimals
    assert CATALOGUE.currency(currency, settleable=True).code == currency


def test_trunk_zero_only_where_the_contract_allows_it() -> None:
    for code in COUNTRIES:
        expected = "0" if code in TRUNK_COUNTRIES else None
        assert CATALOGUE.country(code).trunk_prefix == expected


def test_xaf_and_xof_are_different_currencies() -> None:
    xaf = CATALOGUE.currency("XAF")
    xof = CATALOGUE.currency("XOF")
    assert xaf != xof
    assert xaf.code == "XAF"
    assert xof.code == "XOF"
    assert CATALOGUE.country("CM").currency == "XAF"
    assert CATALOGUE.country("CI").currency == "XOF"
    assert CATALOGUE.country("SN").currency == "XOF"
    with pytest.raises(PaymentError) as caught:
        CATALOGUE.check_currency_for_country(xaf, CATALOGUE.country("SN"))
    assert caught.value.code == "CURRENCY_MISMATCH"
    assert caught.value.details == {"expected": "XOF"}


def test_currency_mismatch_names_the_expected_currency() -> None:
    error = error_of(CATALOGUE.check_currency_for_country, CATALOGUE.currency("XOF"), CATALOGUE.country("CM"))
    assert error.code == "CURRENCY_MISMATCH"
    assert error.param == "currency"
    assert error.details == {"expected": "XAF"}


@pytest.mark.parametrize("code", sorted(COUNTRIES))
def test_each_country_accepts_its_own_currency(code: str) -> None:
    country = CATALOGUE.country(code)
    CATALOGUE.check_currency_for_country(CATALOGUE.currency(country.currency), country)


@pytest.mark.parametrize("code", ["USD", "EUR"])
def test_usd_and_eur_are_checkout_only(code: str) -> None:
    currency = CATALOGUE.currency(code)
    assert currency.checkout_only
    assert currency.decimals == 2
    error = error_of(CATALOGUE.currency, code, settleable=True)
    assert error.code == "UNKNOWN_CURRENCY"
    assert error.param == "currency"


def test_settleable_currencies_are_not_checkout_only() -> None:
    for code in ("XAF", "XOF", "GHS", "KES", "UGX", "BTC"):
        assert not CATALOGUE.currency(code).checkout_only


@pytest.mark.parametrize("code", ["ZZZ", "xaf", "XAF ", "FRF"])
def test_unknown_currency(code: str) -> None:
    error = error_of(CATALOGUE.currency, code)
    assert error.code == "UNKNOWN_CURRENCY"
    assert error.param == "currency"


@pytest.mark.parametrize("code", [None, "", 978])
def test_currency_that_is_not_a_code_is_invalid_request(code: object) -> None:
    error = error_of(CATALOGUE.currency, code)
    assert error.code == "INVALID_REQUEST"
    assert error.param == "currency"


@pytest.mark.parametrize("code", ["FR", "NG", "cm", "XX"])
def test_country_not_supported(code: str) -> None:
    error = error_of(CATALOGUE.country, code)
    assert error.code == "COUNTRY_NOT_SUPPORTED"
    assert error.param == "country"


def test_country_that_is_not_a_code_is_invalid_request() -> None:
    assert error_of(CATALOGUE.country, None).code == "INVALID_REQUEST"
    assert error_of(CATALOGUE.country, "").code == "INVALID_REQUEST"


# --- providers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", sorted(PROVIDERS))
def test_provider_has_exactly_the_contract_prefixes(code: str) -> None:
    country, prefixes = PROVIDERS[code]
    provider = CATALOGUE.provider(code)
    assert provider.method == "MOBILE_MONEY"
    assert provider.country == country
    assert provider.currency == COUNTRIES[country][0]
    assert set(provider.prefixes) == expand(prefixes)


@pytest.mark.parametrize("code", sorted(PROVIDERS))
def test_a_number_in_each_prefix_is_detected_as_its_provider(code: str) -> None:
    country_code, prefixes = PROVIDERS[code]
    country = CATALOGUE.country(country_code)
    provider = CATALOGUE.provider(code)
    digits = COUNTRIES[country_code][3]
    for prefix in sorted(expand(prefixes)):
        number = local_number(prefix, digits)
        assert CATALOGUE.detect_provider(number, country).code == code, number
        assert CATALOGUE.resolve_mobile(country=country, phone=number, provider=None) == (number, provider)
        assert CATALOGUE.resolve_mobile(country=country, phone=number, provider=provider) == (
            number,
            provider,
        )
        if country_code in TRUNK_COUNTRIES:
            with_trunk = "0" + number
            assert CATALOGUE.resolve_mobile(country=country, phone=with_trunk, provider=provider) == (
                number,
                provider,
            )


def test_every_mobile_provider_of_the_contract_countries_is_listed() -> None:
    shipped = {p.code for p in CATALOGUE.providers.values() if p.country in COUNTRIES}
    assert shipped == set(PROVIDERS)


@pytest.mark.parametrize(
    ("number", "code"),
    [
        ("650123456", "mtn_cm"),
        ("654999999", "mtn_cm"),
        ("671234567", "mtn_cm"),
        ("679000000", "mtn_cm"),
        ("680000000", "mtn_cm"),
        ("683999999", "mtn_cm"),
        ("655000000", "orange_cm"),
        ("659999999", "orange_cm"),
        ("690000000", "orange_cm"),
        ("699999999", "orange_cm"),
        ("686000000", "orange_cm"),
        ("689123456", "orange_cm"),
        ("640000000", "orange_cm"),
        ("642999999", "orange_cm"),
    ],
)
def test_cameroon_ranges(number: str, code: str) -> None:
    assert CATALOGUE.detect_provider(number, CATALOGUE.country("CM")).code == code


@pytest.mark.parametrize(
    ("country", "number"),
    [
        ("CM", "643000000"),
        ("CM", "649999999"),
        ("CM", "660000000"),
        ("CM", "684000000"),
        ("CM", "685000000"),
        ("CM", "600000000"),
        ("CM", "222000000"),  # a landline
        ("CI", "0200000000"),
        ("CI", "7001020304"),  # ten digits, but not starting with a network's 0x
        ("SN", "720000000"),
        ("SN", "330000000"),
        ("GH", "210000000"),
        ("GH", "300000000"),
        ("KE", "744000000"),
        ("KE", "747000000"),
        ("KE", "760000000"),
        ("KE", "770000000"),
        ("UG", "710000000"),
        ("UG", "796000000"),
    ],
)
def test_unknown_prefix_is_phone_not_recognised(country: str, number: str) -> None:
    place = CATALOGUE.country(country)
    error = error_of(CATALOGUE.detect_provider, number, place)
    assert error.code == "PHONE_NOT_RECOGNISED"
    assert error.param == "phone"
    error = error_of(CATALOGUE.resolve_mobile, country=place, phone=number, provider=None)
    assert error.code == "PHONE_NOT_RECOGNISED"
    assert error.param == "phone"


def test_ivory_coast_numbers_keep_their_leading_zero() -> None:
    ci = CATALOGUE.country("CI")
    assert CATALOGUE.resolve_mobile(country=ci, phone="0701020304", provider=None)[0] == "0701020304"
    assert CATALOGUE.detect_provider("0701020304", ci).code == "orange_ci"
    assert CATALOGUE.detect_provider("0501020304", ci).code == "mtn_ci"
    assert CATALOGUE.detect_provider("0101020304", ci).code == "moov_ci"
    error = error_of(CATALOGUE.normalise_phone, "701020304", ci)
    assert error.code == "PHONE_NOT_RECOGNISED"


@pytest.mark.parametrize(
    ("country", "with_trunk", "local", "provider"),
    [
        ("GH", "0241234567", "241234567", "mtn_gh"),
        ("GH", "0201234567", "201234567", "telecel_gh"),
        ("KE", "0712345678", "712345678", "mpesa_ke"),
        ("KE", "0110123456", "110123456", "mpesa_ke"),
        ("KE", "0101234567", "101234567", "airtel_ke"),
        ("UG", "0771234567", "771234567", "mtn_ug"),
        ("UG", "0701234567", "701234567", "airtel_ug"),
    ],
)
def test_trunk_zero_is_the_same_number(country: str, with_trunk: str, local: str, provider: str) -> None:
    place = CATALOGUE.country(country)
    assert CATALOGUE.normalise_phone(with_trunk, place) == local
    assert CATALOGUE.normalise_phone(local, place) == local
    assert CATALOGUE.resolve_mobile(country=place, phone=with_trunk, provider=None)[1].code == provider
    assert CATALOGUE.resolve_mobile(country=place, phone=local, provider=None)[1].code == provider


def test_the_same_prefix_means_different_networks_in_different_countries() -> None:
    assert CATALOGUE.detect_provider("781234567", CATALOGUE.country("UG")).code == "mtn_ug"
    assert CATALOGUE.detect_provider("781234567", CATALOGUE.country("KE")).code == "airtel_ke"
    assert CATALOGUE.detect_provider("781234567", CATALOGUE.country("SN")).code == "orange_sn"


def test_lightning_is_a_borderless_bitcoin_provider() -> None:
    lightning = CATALOGUE.provider("lightning")
    assert lightning.method == "CRYPTO"
    assert lightning.country is None
    assert lightning.currency == "BTC"
    assert CATALOGUE.currency("BTC").decimals == 8
    assert lightning not in CATALOGUE.providers_in("CM")


@pytest.mark.parametrize("code", ["nope", "MTN_CM", "mtn", "mtn_cm "])
def test_unknown_provider(code: str) -> None:
    error = error_of(CATALOGUE.provider, code)
    assert error.code == "UNKNOWN_PROVIDER"
    assert error.param == "provider"


# --- phone normalisation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    ["670000000", "670 000 000", "670.000.000", "670-000-000", " 67 00-00.000 ", "6.7-0 0.0-0 0.0-0"],
)
def test_separators_are_stripped(raw: str) -> None:
    assert CATALOGUE.normalise_phone(raw, CATALOGUE.country("CM")) == "670000000"


@pytest.mark.parametrize(
    "raw", ["+237670000000", "237670000000", "+237 670 000 000", "237-670-000-000", "00237670000000"]
)
def test_dial_code_is_refused_naming_phone(raw: str) -> None:
    error = error_of(CATALOGUE.normalise_phone, raw, CATALOGUE.country("CM"))
    assert error.code == "INVALID_REQUEST"
    assert error.param == "phone"


@pytest.mark.parametrize(
    ("country", "raw"), [("GH", "+233241234567"), ("GH", "233241234567"), ("CI", "2250701020304")]
)
def test_dial_code_is_refused_in_other_countries(country: str, raw: str) -> None:
    error = error_of(CATALOGUE.normalise_phone, raw, CATALOGUE.country(country))
    assert error.code == "INVALID_REQUEST"
    assert error.param == "phone"


@pytest.mark.parametrize(
    "raw",
    ["67000000a", "six seven", "670O00000", "670_000_000", "(670)000000", "６７００００００0", "", "   "],
)
def test_non_digits_are_invalid_request(raw: str) -> None:
    error = error_of(CATALOGUE.normalise_phone, raw, CATALOGUE.country("CM"))
    assert error.code == "INVALID_REQUEST"
    assert error.param == "phone"


@pytest.mark.parametrize("raw", [None, 670000000, ["670000000"]])
def test_phone_that_is_not_a_string_is_invalid_request(raw: object) -> None:
    error = error_of(CATALOGUE.normalise_phone, raw, CATALOGUE.country("CM"))
    assert error.code == "INVALID_REQUEST"
    assert error.param == "phone"


@pytest.mark.parametrize(
    ("country", "raw"),
    [
        ("CM", "67000000"),
        ("CM", "6700000000"),
        ("CM", "0670000000"),  # no trunk 0 in Cameroon
        ("CI", "070102030"),
        ("CI", "07010203040"),
        ("GH", "24123456"),
        ("GH", "02412345678"),  # trunk 0 plus ten digits
        ("KE", "7123456789"),
    ],
)
def test_wrong_length_is_phone_not_recognised(country: str, raw: str) -> None:
    error = error_of(CATALOGUE.normalise_phone, raw, CATALOGUE.country(country))
    assert error.code == "PHONE_NOT_RECOGNISED"
    assert error.param == "phone"


# --- resolve_mobile mismatches --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("country", "provider", "phone"),
    [
        ("CM", "mtn_gh", "670000000"),
        ("CM", "orange_ci", "690000000"),
        ("GH", "mtn_cm", "241234567"),
        ("SN", "orange_ci", "771234567"),
        ("CM", "lightning", "670000000"),
    ],
)
def test_provider_of_another_country(country: str, provider: str, phone: str) -> None:
    error = error_of(
        CATALOGUE.resolve_mobile,
        country=CATALOGUE.country(country),
        phone=phone,
        provider=CATALOGUE.provider(provider),
    )
    assert error.code == "PROVIDER_COUNTRY_MISMATCH"
    assert error.param == "provider"


@pytest.mark.parametrize(
    ("country", "provider", "phone"),
    [
        ("CM", "orange_cm", "670000000"),
        ("CM", "mtn_cm", "690000000"),
        ("CM", "mtn_cm", "655000000"),
        ("CI", "mtn_ci", "0701020304"),
        ("GH", "telecel_gh", "0241234567"),
        ("KE", "airtel_ke", "712345678"),
        ("UG", "airtel_ug", "781234567"),
    ],
)
def test_number_of_another_network(country: str, provider: str, phone: str) -> None:
    error = error_of(
        CATALOGUE.resolve_mobile,
        country=CATALOGUE.country(country),
        phone=phone,
        provider=CATALOGUE.provider(provider),
    )
    assert error.code == "PHONE_PROVIDER_MISMATCH"
    assert error.param == "phone"


# --- an operator's own catalogue ------------------------------------------------------------------


def operator_catalogue() -> dict[str, Any]:
    return {
        "currencies": [
            {"code": "RWF", "name": "Rwandan franc", "decimals": 0, "min": "100", "max": "2000000"},
        ],
        "countries": [
            {
                "code": "RW",
                "name": "Rwanda",
                "currency": "RWF",
                "dialCode": "+250",
                "phoneDigits": 9,
                "trunkPrefix": "0",
            },
            {"code": "BI", "name": "Burundi", "currency": "RWF", "dialCode": "+257", "phoneDigits": 8},
        ],
        "providers": [
            {
                "code": "mtn_rw",
                "name": "MTN MoMo",
                "method": "MOBILE_MONEY",
                "country": "RW",
                "currency": "RWF",
                "prefixes": ["78", "790-792"],
            }
        ],
    }


def test_from_file_loads_an_operators_catalogue(tmp_path: Path) -> None:
    path = tmp_path / "catalogue.json"
    path.write_text(json.dumps(operator_catalogue()), "utf-8")
    catalogue = Catalogue.from_file(path)
    assert catalogue.from_file(str(path)) == catalogue
    rw = catalogue.country("RW")
    assert rw == Country(
        code="RW",
        name="Rwanda",
        currency="RWF",
        dial_code="+250",
        phone_digits=9,
        phone_example=None,
        trunk_prefix="0",
    )
    rwf = catalogue.currency("RWF", settleable=True)
    assert (rwf.decimals, rwf.min_minor, rwf.max_minor) == (0, 100, 2_000_000)
    mtn = catalogue.provider("mtn_rw")
    assert mtn == Provider(
        code="mtn_rw",
        name="MTN MoMo",
        method="MOBILE_MONEY",
        channel_method="MOBILE_MONEY",
        country="RW",
        currency="RWF",
        prefixes=("78", "790", "791", "792"),
    )
    assert catalogue.resolve_mobile(country=rw, phone="0781234567", provider=None) == ("781234567", mtn)
    assert catalogue.detect_provider("791234567", rw) == mtn
    assert error_of(catalogue.detect_provider, "793234567", rw).code == "PHONE_NOT_RECOGNISED"
    # A country listed without any provider cannot take mobile numbers.
    assert "BI" in catalogue.countries
    assert error_of(catalogue.country, "BI").code == "COUNTRY_NOT_SUPPORTED"
    # The operator's file replaces the shipped one.
    assert error_of(catalogue.country, "CM").code == "COUNTRY_NOT_SUPPORTED"
    assert error_of(catalogue.provider, "mtn_cm").code == "UNKNOWN_PROVIDER"
    assert error_of(catalogue.currency, "XAF").code == "UNKNOWN_CURRENCY"


def test_from_file_rejects_a_provider_naming_an_unknown_country(tmp_path: Path) -> None:
    data = operator_catalogue()
    data["providers"][0]["country"] = "UG"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data), "utf-8")
    with pytest.raises(ValueError, match="unknown country"):
        Catalogue.from_file(path)


def test_from_file_rejects_unknown_currencies(tmp_path: Path) -> None:
    provider_currency = operator_catalogue()
    provider_currency["providers"][0]["currency"] = "XAF"
    country_currency = operator_catalogue()
    country_currency["countries"][0]["currency"] = "XAF"
    for index, data in enumerate((provider_currency, country_currency)):
        path = tmp_path / f"bad{index}.json"
        path.write_text(json.dumps(data), "utf-8")
        with pytest.raises(ValueError, match="unknown currency"):
            Catalogue.from_file(path)


# --- exchange rates -------------------------------------------------------------------------------


def shipped_rates() -> dict[str, Decimal]:
    text = resources.files("paymentcore").joinpath("data/catalogue.json").read_text("utf-8")
    per_base = json.loads(text)["exchangeRates"]["perBase"]
    return {code: Decimal(str(value)) for code, value in per_base.items()}


def test_xaf_to_xof_is_exactly_one() -> None:
    rate = CATALOGUE.rates.rate("XAF", "XOF")
    assert isinstance(rate, Decimal)
    assert rate == 1
    assert CATALOGUE.rates.rate("XOF", "XAF") == 1


def test_usd_to_xaf_is_the_tables_value() -> None:
    assert CATALOGUE.rates.base == "USD"
    rate = CATALOGUE.rates.rate("USD", "XAF")
    assert isinstance(rate, Decimal)
    assert rate == shipped_rates()["XAF"]
    assert rate == Decimal("603.48")


def test_rates_between_two_non_base_currencies_go_through_the_base() -> None:
    table = shipped_rates()
    assert CATALOGUE.rates.rate("EUR", "XAF") == table["XAF"] / table["EUR"]
    assert CATALOGUE.rates.rate("GHS", "GHS") == 1
