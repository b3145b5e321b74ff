"""Operator actions (the spec's "dashboard"): merchants, keys, switches, limits, balances.

The CLI is a thin layer over these calls; library users call them directly. Payout review and
resolution live in :mod:`paymentcore._disburse`, webhook reactivation in :mod:`paymentcore._webhooks`.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

import attrs

from paymentcore import _ledger as ledger
from paymentcore._access import hash_key, new_secret
from paymentcore._deps import Deps, require_merchant
from paymentcore._models import ApiKey, Merchant, MerchantStatus, PayoutLimits, Scope, Settings
from paymentcore._money import to_decimal
from paymentcore._pages import DEFAULT_LIMIT, check_cursor, check_limit, page_of, unknown_cursor
from paymentcore._records import LedgerItem, MerchantBalance, Page, from_ms
from paymentcore.errors import InvalidRequestError, NotFoundError

UNSET: Any = object()


@attrs.frozen
class CreatedKey:
    """A new API key. ``api_key`` is the secret: it is shown here once and never stored."""

    key: ApiKey
    api_key: str


def _percent_to_ppm(percent: object) -> int:
    try:
        value = Decimal(str(percent))
    except InvalidOperation:
        raise InvalidRequestError(f"'{percent}' is not a percentage.", param="collect-percent") from None
    if not value.is_finite() or value < 0 or value > 100:
        raise InvalidRequestError("The fee must be between 0 and 100 percent.", param="collect-percent")
    ppm = value * 10_000
    if ppm != ppm.to_integral_value():
        raise InvalidRequestError("The fee has more than 4 decimal places.", param="collect-percent")
    return int(ppm)


class Operator:
    def __init__(self, deps: Deps) -> None:
        self._deps = deps

    # --- merchants -------------------------------------------------------------------------------

    def create_merchant(
        self, name: str, *, settlement_currency: str = "XAF", approved: bool = True, fee_percent: object = 0
    ) -> Merchant:
        if not name or not name.strip() or len(name) > 120:
            raise InvalidRequestError("A merchant name of 1 to 120 characters is required.", param="name")
        currency = self._deps.catalogue.currency(settlement_currency, settleable=True)
        merchant = Merchant(
            id=self._deps.refs.token("mer"),
            name=name.strip(),
            settlement_currency=currency.code,
            status=MerchantStatus.APPROVED if approved else MerchantStatus.NOT_APPROVED,
            collect_fee_ppm=_percent_to_ppm(fee_percent),
            payouts_enabled=True,
            blocked_providers=frozenset(),
            created_at=self._deps.clock.now(),
        )
        with self._deps.store.transaction() as tx:
            tx.merchants.put(merchant)
        return merchant

    def get_merchant(self, merchant_id: str) -> Merchant:
        with self._deps.store.read() as tx:
            return require_merchant(tx, merchant_id)

    def list_merchants(self) -> list[Merchant]:
        with self._deps.store.read() as tx:
            return tx.merchants.list()

    def _change_merchant(self, merchant_id: str, **changes: Any) -> Merchant:
        with self._deps.store.transaction() as tx:
            merchant = attrs.evolve(require_merchant(tx, merchant_id), **changes)
            tx.merchants.put(merchant)
            return merchant

    def approve_merchant(self, merchant_id: str) -> Merchant:
        return self._change_merchant(merchant_id, status=MerchantStatus.APPROVED)

    def suspend_merchant(self, merchant_id: str) -> Merchant:
        return self._change_merchant(merchant_id, status=MerchantStatus.SUSPENDED)

    def set_merchant_payouts(self, merchant_id: str, enabled: bool) -> Merchant:
        return self._change_merchant(merchant_id, payouts_enabled=enabled)

    def set_collect_fee(self, merchant_id: str, percent: object) -> Merchant:
        return self._change_merchant(merchant_id, collect_fee_ppm=_percent_to_ppm(percent))

    def block_provider(self, merchant_id: str, provider: str, blocked: bool = True) -> Merchant:
        self._deps.catalogue.provider(provider)
        with self._deps.store.transaction() as tx:
            merchant = require_merchant(tx, merchant_id)
            providers = set(merchant.blocked_providers)
            if blocked:
                providers.add(provider)
            else:
                providers.discard(provider)
            merchant = attrs.evolve(merchant, blocked_providers=frozenset(providers))
            tx.merchants.put(merchant)
            return merchant

    # --- keys ------------------------------------------------------------------------------------

    def create_key(
        self,
        merchant_id: str,
        scopes: list[Scope] | list[str],
        *,
        per_minute: int | None = None,
        per_hour: int | None = None,
    ) -> CreatedKey:
        parsed: set[Scope] = set()
        for scope in scopes:
            try:
                parsed.add(scope if isinstance(scope, Scope) else Scope(str(scope).lower()))
            except ValueError:
                raise InvalidRequestError(
                    f"Unknown scope '{scope}': use collect or disburse.", param="scope"
                ) from None
        if not parsed:
            raise InvalidRequestError("A key needs at least one scope.", param="scope")
        config = self._deps.config
        minute = _ceiling(per_minute if per_minute is not None else config.default_per_minute, "per-minute")
        hour = _ceiling(per_hour if per_hour is not None else config.default_per_hour, "per-hour")
        secret = new_secret()
        with self._deps.store.transaction() as tx:
            require_merchant(tx, merchant_id)
            key = ApiKey(
                id=self._deps.refs.token("key"),
                merchant_id=merchant_id,
                key_hash=hash_key(secret),
                scopes=frozenset(parsed),
                per_minute=minute,
                per_hour=hour,
                revoked=False,
                created_at=self._deps.clock.now(),
            )
            tx.keys.put(key)
        return CreatedKey(key=key, api_key=secret)

    def _change_key(self, key_id: str, **changes: Any) -> ApiKey:
        with self._deps.store.transaction() as tx:
            key = tx.keys.get(key_id)
            if key is None:
                raise NotFoundError(f"No API key {key_id}.", param="key")
            key = attrs.evolve(key, **changes)
            tx.keys.put(key)
            return key

    def revoke_key(self, key_id: str) -> ApiKey:
        return self._change_key(key_id, revoked=True)

    def set_rate_limit(
        self, key_id: str, *, per_minute: int | None = None, per_hour: int | None = None
    ) -> ApiKey:
        changes: dict[str, int] = {}
        if per_minute is not None:
            changes["per_minute"] = _ceiling(per_minute, "per-minute")
        if per_hour is not None:
            changes["per_hour"] = _ceiling(per_hour, "per-hour")
        if not changes:
            raise InvalidRequestError("Give --per-minute, --per-hour or both.", param="per-minute")
        return self._change_key(key_id, **changes)

    # --- platform switches -----------------------------------------------------------------------

    def settings(self) -> Settings:
        with self._deps.store.read() as tx:
            return tx.settings.get()

    def _change_settings(self, **changes: Any) -> Settings:
        with self._deps.store.transaction() as tx:
            settings = attrs.evolve(tx.settings.get(), **changes)
            tx.settings.put(settings)
            return settings

    def set_platform_payouts(self, enabled: bool) -> Settings:
        return self._change_settings(payouts_enabled=enabled)

    def set_platform_api(self, enabled: bool) -> Settings:
        return self._change_settings(api_enabled=enabled)

    def set_currency_payouts(self, currency: str, open_: bool) -> Settings:
        code = self._deps.catalogue.currency(currency, settleable=True).code
        with self._deps.store.transaction() as tx:
            settings = tx.settings.get()
            closed = set(settings.closed_currencies)
            if open_:
                closed.discard(code)
            else:
                closed.add(code)
            settings = attrs.evolve(settings, closed_currencies=frozenset(closed))
            tx.settings.put(settings)
            return settings

    # --- payout limits ---------------------------------------------------------------------------

    def set_limits(
        self,
        merchant_id: str,
        currency: str,
        *,
        per_transaction: object = UNSET,
        per_day: object = UNSET,
        per_week: object = UNSET,
        review_threshold: object = UNSET,
    ) -> PayoutLimits:
        """Change payout ceilings. A value is a Decimal, int or decimal string; None (or "none") clears it."""
        cur = self._deps.catalogue.currency(currency, settleable=True)
        changes: dict[str, int | None] = {}
        for name, value in (
            ("per_transaction", per_transaction),
            ("per_day", per_day),
            ("per_week", per_week),
            ("review_threshold", review_threshold),
        ):
            if value is UNSET:
                continue
            changes[name] = _limit_value(value, cur.decimals, name)
        with self._deps.store.transaction() as tx:
            require_merchant(tx, merchant_id)
            limits = tx.limits.get(merchant_id, cur.code) or PayoutLimits(
                merchant_id=merchant_id, currency=cur.code
            )
            limits = attrs.evolve(limits, **changes)  # type: ignore[arg-type]
            tx.limits.put(limits)
            return limits

    # --- balances --------------------------------------------------------------------------------

    def balances(self, merchant_id: str) -> list[MerchantBalance]:
        """Available and reserved money per currency, in the currencies' units."""
        with self._deps.store.read() as tx:
            require_merchant(tx, merchant_id)
            balances = tx.ledger.balances(merchant_id)
        result = []
        for balance in balances:
            currency = self._deps.catalogue.currencies[balance.currency]
            result.append(
                MerchantBalance(
                    currency=balance.currency,
                    available=to_decimal(balance.available, currency),
                    reserved=to_decimal(balance.reserved, currency),
                )
            )
        return result

    def ledger(
        self,
        merchant_id: str,
        currency: str,
        *,
        limit: int = DEFAULT_LIMIT,
        starting_after: str | None = None,
    ) -> Page[LedgerItem]:
        """The history of the merchant's balance in ``currency``, newest first: one item per movement,
        with the available and reserved balance right after it.

        Applying the items from the oldest on (:meth:`LedgerItem.apply`) ends at the current balance.
        ``starting_after`` is the id of the previous page's last item. An unknown (or checkout-only)
        currency raises UnknownCurrencyError.
        """
        cur = self._deps.catalogue.currency(currency, settleable=True)
        limit = check_limit(limit)
        after = check_cursor(starting_after)
        with self._deps.store.read() as tx:
            require_merchant(tx, merchant_id)
            lines = ledger.history(tx, merchant_id, cur.code, limit=limit + 1, after=after)
        if lines is None:
            raise unknown_cursor(f"{cur.code} ledger items")

        def item(line: ledger.HistoryLine) -> LedgerItem:
            entry = line.entry
            return LedgerItem(
                id=entry.id,
                created_at=from_ms(entry.created_at),
                type=ledger.ITEM_TYPES[entry.kind],
                reference=entry.reference,
                currency=cur.code,
                amount=to_decimal(line.movement.signed_amount(entry.kind), cur),
                available=to_decimal(line.available, cur),
                reserved=to_decimal(line.reserved, cur),
            )

        return page_of(lines, limit, item)


def _ceiling(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value > 1_000_000:
        raise InvalidRequestError(f"--{name} must be a whole number from 1 to 1000000.", param=name)
    return value


def _limit_value(value: object, decimals: int, name: str) -> int | None:
    from paymentcore._money import parse_decimal_text, parse_positive_minor

    if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
        return None
    param = name.replace("_", "-")
    if isinstance(value, str):
        return parse_decimal_text(value, decimals, param=param)
    return parse_positive_minor(value, decimals, param=param)
