"""The catalogue: countries, currencies, providers and exchange rates, loaded from data.

The shipped file is ``paymentcore/data/catalogue.json``; an operator replaces it with their own file
(``paymentcore serve --catalogue PATH``). Validation of a country/currency/provider/phone combination
lives here and raises the spec's codes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from paymentcore._domain.errors import (
    CountryNotSupportedError,
    CurrencyMismatchError,
    InvalidRequestError,
    PhoneNotRecognisedError,
    PhoneProviderMismatchError,
    ProviderCountryMismatchError,
    UnknownCurrencyError,
    UnknownProviderError,
)
from paymentcore._domain.money import minor_to_decimal

__all__ = [
    "Catalogue",
    "Country",
    "Currency",
    "Provider",
    "StaticExchangeRates",
]


@attrs.frozen
class Currency:
    code: str
    name: str
    decimals: int
    min_minor: int
    max_minor: int
    checkout_only: bool  # priced in, never settled or paid out

    def render(self, minor: int) -> Decimal:
        return minor_to_decimal(minor, self.decimals)


@attrs.frozen
class Country:
    code: str
    name: str
    currency: str
    dial_code: str
    phone_digits: int | None
    phone_example: str | None
    trunk_prefix: str | None


@attrs.frozen
class Provider:
    code: str
    name: str
    method: str  # MOBILE_MONEY, CRYPTO, CARD
    channel_method: str  # MOMO, ORANGE, ... as shown by GET /v1/channels
    country: str | None  # None for a borderless provider such as lightning
    currency: str
    prefixes: tuple[str, ...]


@attrs.frozen
class StaticExchangeRates:
    """Exchange rates from a fixed table: units of each currency per one unit of ``base``."""

    base: str
    per_base: Mapping[str, Decimal]

    def rate(self, source: str, target: str) -> Decimal:
        if source == target:
            return Decimal(1)
        return self.per_base[target] / self.per_base[source]


def _expand(prefix: str) -> list[str]:
    if "-" not in prefix:
        return [prefix]
    low, high = prefix.split("-", 1)
    if len(low) != len(high):
        raise ValueError(f"prefix range {prefix!r} mixes lengths")
    return [str(n).zfill(len(low)) for n in range(int(low), int(high) + 1)]


def _minor(text: str, decimals: int) -> int:
    value = Decimal(text).scaleb(decimals)
    if value != value.to_integral_value():
        raise ValueError(f"{text} has more than {decimals} decimals")
    return int(value)


@attrs.frozen
class Catalogue:
    currencies: Mapping[str, Currency]
    countries: Mapping[str, Country]
    providers: Mapping[str, Provider]
    rates: StaticExchangeRates

    # --- loading ---------------------------------------------------------------------------------

    @classmethod
    def default(cls) -> Catalogue:
        text = resources.files("paymentcore").joinpath("data/catalogue.json").read_text("utf-8")
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_file(cls, path: str | Path) -> Catalogue:
        return cls.from_dict(json.loads(Path(path).read_text("utf-8")))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Catalogue:
        currencies = {}
        for c in data["currencies"]:
            decimals = int(c["decimals"])
            currencies[c["code"]] = Currency(
                code=c["code"],
                name=c["name"],
                decimals=decimals,
                min_minor=_minor(str(c["min"]), decimals),
                max_minor=_minor(str(c["max"]), decimals),
                checkout_only=bool(c.get("checkoutOnly", False)),
            )
        countries = {
            c["code"]: Country(
                code=c["code"],
                name=c["name"],
                currency=c["currency"],
                dial_code=c["dialCode"],
                phone_digits=c.get("phoneDigits"),
                phone_example=c.get("phoneExample"),
                trunk_prefix=c.get("trunkPrefix"),
            )
            for c in data["countries"]
        }
        providers = {
            p["code"]: Provider(
                code=p["code"],
                name=p["name"],
                method=p["method"],
                channel_method=p.get("channelMethod", p["method"]),
                country=p.get("country"),
                currency=p["currency"],
                prefixes=tuple(x for prefix in p.get("prefixes", []) for x in _expand(prefix)),
            )
            for p in data["providers"]
        }
        rates_data = data.get("exchangeRates", {"base": "USD", "perBase": {}})
        rates = StaticExchangeRates(
            base=rates_data["base"],
            per_base={code: Decimal(str(v)) for code, v in rates_data["perBase"].items()},
        )
        catalogue = cls(currencies=currencies, countries=countries, providers=providers, rates=rates)
        catalogue._check()
        return catalogue

    def _check(self) -> None:
        for country in self.countries.values():
            if country.currency not in self.currencies:
                raise ValueError(f"country {country.code} uses unknown currency {country.currency}")
        for provider in self.providers.values():
            if provider.country is not None and provider.country not in self.countries:
                raise ValueError(f"provider {provider.code} names unknown country {provider.country}")
            if provider.currency not in self.currencies:
                raise ValueError(f"provider {provider.code} uses unknown currency {provider.currency}")

    # --- lookups ---------------------------------------------------------------------------------

    def currency(self, code: object, *, param: str = "currency", settleable: bool = False) -> Currency:
        """The currency named by ``code``; checkout-only ones are refused when ``settleable``."""
        if not isinstance(code, str) or not code:
            raise InvalidRequestError("currency must be a currency code such as XAF.", param=param)
        currency = self.currencies.get(code)
        if currency is None or (settleable and currency.checkout_only):
            raise UnknownCurrencyError(f"The currency '{code[:12]}' is not supported here.", param=param)
        return currency

    def country(self, code: object, *, param: str = "country") -> Country:
        if not isinstance(code, str) or not code:
            raise InvalidRequestError("country must be an ISO country code such as CM.", param=param)
        country = self.countries.get(code)
        if country is None or not self.providers_in(country.code):
            raise CountryNotSupportedError(
                f"Mobile money numbers in '{code[:12]}' are not supported.", param=param
            )
        return country

    def provider(self, code: object, *, param: str = "provider") -> Provider:
        if not isinstance(code, str) or not code:
            raise InvalidRequestError("provider must be a provider code such as mtn_cm.", param=param)
        provider = self.providers.get(code)
        if provider is None:
            raise UnknownProviderError(f"The provider '{code[:40]}' is not supported.", param=param)
        return provider

    def providers_in(self, country: str) -> list[Provider]:
        return [p for p in self.providers.values() if p.country == country]

    def check_currency_for_country(self, currency: Currency, country: Country) -> None:
        if currency.code != country.currency:
            raise CurrencyMismatchError(
                f"{country.name} transacts in {country.currency}, not {currency.code}.",
                param="currency",
                details={"expected": country.currency},
            )

    # --- phone numbers ---------------------------------------------------------------------------

    def normalise_phone(self, raw: object, country: Country, *, param: str = "phone") -> str:
        """The local number: separators stripped, the trunk 0 dropped where the country has one."""
        if not isinstance(raw, str) or not raw.strip():
            raise InvalidRequestError("phone must be the local mobile number as a string.", param=param)
        text = raw.strip()
        for separator in (" ", ".", "-"):
            text = text.replace(separator, "")
        if text.startswith("+") or text.startswith("00"):
            raise InvalidRequestError(
                f"Send phone as the local number, without '+' or the dial code {country.dial_code}.",
                param=param,
            )
        if not text.isascii() or not text.isdigit():
            raise InvalidRequestError("phone must contain digits only.", param=param)
        digits = country.phone_digits
        dial = country.dial_code.lstrip("+")
        if digits is not None and len(text) == digits + len(dial) and text.startswith(dial):
            raise InvalidRequestError(
                f"Send phone as the local number, without the dial code {country.dial_code}.", param=param
            )
        if (
            country.trunk_prefix
            and digits is not None
            and len(text) == digits + len(country.trunk_prefix)
            and text.startswith(country.trunk_prefix)
        ):
            text = text[len(country.trunk_prefix) :]
        if digits is not None and len(text) != digits:
            raise PhoneNotRecognisedError(
                f"A mobile number in {country.name} has {digits} digits.", param=param
            )
        return text

    def detect_provider(self, phone: str, country: Country, *, param: str = "phone") -> Provider:
        best: Provider | None = None
        best_length = 0
        for provider in self.providers_in(country.code):
            for prefix in provider.prefixes:
                if phone.startswith(prefix) and len(prefix) > best_length:
                    best, best_length = provider, len(prefix)
        if best is None:
            raise PhoneNotRecognisedError(
                f"This is not a recognised mobile money number in {country.name}.", param=param
            )
        return best

    def resolve_mobile(
        self, *, country: Country, phone: object, provider: Provider | None
    ) -> tuple[str, Provider]:
        """Check a provider against the country and the number; detect it when not given."""
        if provider is not None and provider.country != country.code:
            raise ProviderCountryMismatchError(
                f"{provider.code} does not operate in {country.name}.", param="provider"
            )
        local = self.normalise_phone(phone, country)
        detected = self.detect_provider(local, country)
        if provider is not None and detected.code != provider.code:
            raise PhoneProviderMismatchError(
                f"This number belongs to {detected.code}, not {provider.code}.",
                param="phone",
            )
        return local, detected
