"""Operator actions (the spec's "dashboard"): merchants, keys, switches, limits, balances; the people
who run them (operators, their console sessions); the work queues; and the audit trail.

The CLI and the console are thin layers over these calls; library users call them directly. Payout
review and resolution live in :mod:`paymentcore._services.disburse`, webhook reactivation in
:mod:`paymentcore._services.webhooks`. Every action takes ``actor`` (who acts: an operator id for the console,
``cli:<os user>`` for the CLI, ``library`` when not given) and writes its audit entry
(:mod:`paymentcore._services.audit`) in the unit of work that makes its change.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from contextlib import AbstractContextManager
from datetime import datetime
from decimal import Decimal, InvalidOperation
from types import MappingProxyType
from typing import Any, NoReturn

import attrs

from paymentcore._domain import wire as wire
from paymentcore._domain.catalogue import Currency
from paymentcore._domain.errors import (
    AmountTooLargeError,
    InvalidRequestError,
    NotFoundError,
    UnauthorizedError,
)
from paymentcore._domain.models import (
    ApiKey,
    CollectionStatus,
    Merchant,
    MerchantStatus,
    PayoutLimits,
    PayoutStatus,
    Scope,
    Settings,
)
from paymentcore._domain.money import MAX_STORED_MINOR, parse_decimal_text, parse_positive_minor, to_decimal
from paymentcore._domain.pages import (
    DEFAULT_LIMIT,
    check_cursor,
    check_limit,
    check_member,
    check_text,
    page_of,
    unknown_cursor,
)
from paymentcore._domain.records import (
    AuditEntry,
    ConsoleSession,
    CreatedOperator,
    LedgerItem,
    MerchantBalance,
    OperatorAccount,
    OperatorCollection,
    OperatorPayout,
    Page,
    SignedIn,
    collection_from,
    from_ms,
    payout_from,
    to_ms,
)
from paymentcore._services import audit as audit
from paymentcore._services import ledger as ledger
from paymentcore._services.access import SignInThrottle, client_name, hash_key, new_secret
from paymentcore._services.audit import (
    DEFAULT_ACTOR,
    PLATFORM,
    StoredAuditEntry,
    StoredOperator,
    StoredSession,
)
from paymentcore._services.deps import Deps, require_merchant
from paymentcore._services.overview import DueItem, Overview, build_overview, due_items
from paymentcore.observe import WORK_KINDS
from paymentcore.ports import Transaction

#: a sign-in token (shown once by ``create_operator``) and a session secret (the console's cookie)
OPERATOR_TOKEN_PREFIX = "pco_"
SESSION_SECRET_PREFIX = "pcs_"
#: a session ends after this long unused ...
SESSION_IDLE_MS = 30 * 60_000
#: ... and this long after sign-in in any case
SESSION_MAX_MS = 12 * 3_600_000
#: a session's last use is written at most this often (each write takes the store's write lock)
SESSION_TOUCH_MS = 60_000
SIGN_IN_REFUSED = "That token is not valid."
#: the record a refused console sign-in is recorded against in the audit trail
CONSOLE = "console"
_log = logging.getLogger("paymentcore.console")

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
    def __init__(self, deps: Deps, sign_ins: SignInThrottle | None = None) -> None:
        self._deps = deps
        config = deps.config
        self._sign_ins = sign_ins or SignInThrottle(
            deps.store,
            per_client=config.sign_in_failures_per_client,
            overall=config.sign_in_failures_overall,
            window_seconds=config.sign_in_window_seconds,
        )

    def _write(
        self,
        tx: Transaction,
        actor: str,
        action: str,
        subject: str,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
    ) -> None:
        audit.write(tx, self._deps, actor=actor, action=action, subject=subject, before=before, after=after)

    # --- merchants -------------------------------------------------------------------------------

    def create_merchant(
        self,
        name: str,
        *,
        settlement_currency: str = "XAF",
        approved: bool = True,
        fee_percent: object = 0,
        actor: str = DEFAULT_ACTOR,
    ) -> Merchant:
        actor = audit.check_actor(actor)
        name = _check_name(name)
        currency = self._deps.catalogue.currency(settlement_currency, settleable=True)
        merchant = Merchant(
            id=self._deps.refs.token("mer"),
            name=name,
            settlement_currency=currency.code,
            status=MerchantStatus.APPROVED if approved else MerchantStatus.NOT_APPROVED,
            collect_fee_ppm=_percent_to_ppm(fee_percent),
            payouts_enabled=True,
            blocked_providers=frozenset(),
            created_at=self._deps.clock.now(),
        )
        with self._unit_of(merchant.id) as tx:  # a new merchant's rows: no other merchant waits for it
            tx.merchants.put(merchant)
            self._write(tx, actor, "merchant.create", merchant.id, None, audit.merchant_state(merchant))
        return merchant

    def get_merchant(self, merchant_id: str) -> Merchant:
        with self._deps.store.read() as tx:
            return require_merchant(tx, merchant_id)

    def list_merchants(self) -> list[Merchant]:
        with self._deps.store.read() as tx:
            return tx.merchants.list()

    def _unit_of(self, merchant_id: object) -> AbstractContextManager[Transaction]:
        """The write transaction of a change to one merchant (its row, keys or limits): on a store
        partitioned by merchant, that merchant's unit, which no other merchant's writer waits for (a
        payout reads what it changes under the same lock); an id that is no text finds no merchant in
        a unit of the whole store."""
        return self._deps.transaction(merchant_id if isinstance(merchant_id, str) else None)

    def _change_merchant(self, merchant_id: str, action: str, actor: str, **changes: Any) -> Merchant:
        actor = audit.check_actor(actor)
        with self._unit_of(merchant_id) as tx:
            before = require_merchant(tx, merchant_id)
            merchant = attrs.evolve(before, **changes)
            tx.merchants.put(merchant)
            self._write(
                tx, actor, action, merchant.id, audit.merchant_state(before), audit.merchant_state(merchant)
            )
            return merchant

    def approve_merchant(self, merchant_id: str, *, actor: str = DEFAULT_ACTOR) -> Merchant:
        return self._change_merchant(merchant_id, "merchant.approve", actor, status=MerchantStatus.APPROVED)

    def suspend_merchant(self, merchant_id: str, *, actor: str = DEFAULT_ACTOR) -> Merchant:
        suspended = MerchantStatus.SUSPENDED
        return self._change_merchant(merchant_id, "merchant.suspend", actor, status=suspended)

    def set_merchant_payouts(
        self, merchant_id: str, enabled: bool, *, actor: str = DEFAULT_ACTOR
    ) -> Merchant:
        action = "merchant.payouts_enable" if enabled else "merchant.payouts_disable"
        return self._change_merchant(merchant_id, action, actor, payouts_enabled=enabled)

    def set_collect_fee(self, merchant_id: str, percent: object, *, actor: str = DEFAULT_ACTOR) -> Merchant:
        ppm = _percent_to_ppm(percent)
        return self._change_merchant(merchant_id, "merchant.fee", actor, collect_fee_ppm=ppm)

    @staticmethod
    def check_collect_fee(percent: object) -> Decimal:
        """The percentage ``set_collect_fee`` would set, or the error it would raise; changes nothing
        (a form can refuse a value before asking to confirm it)."""
        return Decimal(_percent_to_ppm(percent)) / Decimal(10_000)

    def block_provider(
        self, merchant_id: str, provider: str, blocked: bool = True, *, actor: str = DEFAULT_ACTOR
    ) -> Merchant:
        actor = audit.check_actor(actor)
        self._deps.catalogue.provider(provider)
        with self._unit_of(merchant_id) as tx:
            before = require_merchant(tx, merchant_id)
            providers = set(before.blocked_providers)
            if blocked:
                providers.add(provider)
            else:
                providers.discard(provider)
            merchant = attrs.evolve(before, blocked_providers=frozenset(providers))
            tx.merchants.put(merchant)
            action = "provider.block" if blocked else "provider.unblock"
            self._write(
                tx, actor, action, merchant.id, audit.merchant_state(before), audit.merchant_state(merchant)
            )
            return merchant

    # --- keys ------------------------------------------------------------------------------------

    def create_key(
        self,
        merchant_id: str,
        scopes: list[Scope] | list[str],
        *,
        per_minute: int | None = None,
        per_hour: int | None = None,
        actor: str = DEFAULT_ACTOR,
    ) -> CreatedKey:
        actor = audit.check_actor(actor)
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
        with self._unit_of(merchant_id) as tx:
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
            self._write(tx, actor, "key.create", key.id, None, audit.key_state(key))
        return CreatedKey(key=key, api_key=secret)

    def get_key(self, key_id: str) -> ApiKey:
        """The key ``key_id`` (never its secret, which is not kept); NotFoundError when unknown."""
        with self._deps.store.read() as tx:
            return self._require_key(tx, key_id)

    def keys(self, merchant_id: str) -> list[ApiKey]:
        """The merchant's keys, oldest first, revoked ones included."""
        with self._deps.store.read() as tx:
            require_merchant(tx, merchant_id)
            return tx.keys.list(merchant_id)

    @staticmethod
    def _require_key(tx: Transaction, key_id: str) -> ApiKey:
        key = tx.keys.get(key_id) if isinstance(key_id, str) else None
        if key is None:
            raise NotFoundError(f"No API key {str(key_id)[:80]}.", param="key")
        return key

    def _change_key(self, key_id: str, action: str, actor: str, **changes: Any) -> ApiKey:
        actor = audit.check_actor(actor)
        with self._deps.glance() as view:  # a key never changes merchant: its merchant's unit, then
            merchant_id = self._require_key(view, key_id).merchant_id
        with self._unit_of(merchant_id) as tx:
            before = self._require_key(tx, key_id)
            key = attrs.evolve(before, **changes)
            tx.keys.put(key)
            self._write(tx, actor, action, key.id, audit.key_state(before), audit.key_state(key))
            return key

    def revoke_key(self, key_id: str, *, actor: str = DEFAULT_ACTOR) -> ApiKey:
        return self._change_key(key_id, "key.revoke", actor, revoked=True)

    def set_rate_limit(
        self,
        key_id: str,
        *,
        per_minute: int | None = None,
        per_hour: int | None = None,
        actor: str = DEFAULT_ACTOR,
    ) -> ApiKey:
        changes: dict[str, int] = {}
        if per_minute is not None:
            changes["per_minute"] = _ceiling(per_minute, "per-minute")
        if per_hour is not None:
            changes["per_hour"] = _ceiling(per_hour, "per-hour")
        if not changes:
            raise InvalidRequestError("Give --per-minute, --per-hour or both.", param="per-minute")
        return self._change_key(key_id, "key.rate_limit", actor, **changes)

    # --- platform switches -----------------------------------------------------------------------

    def settings(self) -> Settings:
        with self._deps.store.read() as tx:
            return tx.settings.get()

    def _change_settings(self, action: str, actor: str, **changes: Any) -> Settings:
        actor = audit.check_actor(actor)
        with self._deps.store.transaction() as tx:
            before = tx.settings.get()
            settings = attrs.evolve(before, **changes)
            tx.settings.put(settings)
            self._write(
                tx, actor, action, PLATFORM, audit.settings_state(before), audit.settings_state(settings)
            )
            return settings

    def set_platform_payouts(self, enabled: bool, *, actor: str = DEFAULT_ACTOR) -> Settings:
        action = "platform.payouts_enable" if enabled else "platform.payouts_disable"
        return self._change_settings(action, actor, payouts_enabled=enabled)

    def set_platform_api(self, enabled: bool, *, actor: str = DEFAULT_ACTOR) -> Settings:
        action = "platform.api_enable" if enabled else "platform.api_disable"
        return self._change_settings(action, actor, api_enabled=enabled)

    def set_currency_payouts(self, currency: str, open_: bool, *, actor: str = DEFAULT_ACTOR) -> Settings:
        actor = audit.check_actor(actor)
        code = self._deps.catalogue.currency(currency, settleable=True).code
        with self._deps.store.transaction() as tx:
            before = tx.settings.get()
            closed = set(before.closed_currencies)
            if open_:
                closed.discard(code)
            else:
                closed.add(code)
            settings = attrs.evolve(before, closed_currencies=frozenset(closed))
            tx.settings.put(settings)
            action = f"currency.payouts_{'open' if open_ else 'close'}"
            self._write(
                tx, actor, action, PLATFORM, audit.settings_state(before), audit.settings_state(settings)
            )
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
        actor: str = DEFAULT_ACTOR,
    ) -> PayoutLimits:
        """Change payout ceilings. A value is a Decimal, int or decimal string; None (or "none") clears it.

        A value must be positive, have no more decimal places than the currency and be at most what the
        store holds (``2**63 - 1`` minor units): else INVALID_REQUEST, AMOUNT_PRECISION or
        AMOUNT_TOO_LARGE naming the field (``per-day``, ...), and nothing changes.
        """
        actor = audit.check_actor(actor)
        cur = self._deps.catalogue.currency(currency, settleable=True)
        changes = self._limit_changes(
            cur,
            per_transaction=per_transaction,
            per_day=per_day,
            per_week=per_week,
            review_threshold=review_threshold,
        )
        with self._unit_of(merchant_id) as tx:
            require_merchant(tx, merchant_id)
            before = tx.limits.get(merchant_id, cur.code) or PayoutLimits(
                merchant_id=merchant_id, currency=cur.code
            )
            limits = attrs.evolve(before, **changes)  # type: ignore[arg-type]
            tx.limits.put(limits)
            cat = self._deps.catalogue
            self._write(
                tx,
                actor,
                "limits.set",
                merchant_id,
                audit.limits_state(before, cat),
                audit.limits_state(limits, cat),
            )
            return limits

    def check_limits(
        self,
        currency: str,
        *,
        per_transaction: object = UNSET,
        per_day: object = UNSET,
        per_week: object = UNSET,
        review_threshold: object = UNSET,
    ) -> dict[str, Decimal | None]:
        """The limits ``set_limits`` would set (the given ones, in the currency's units; None clears),
        or the error it would raise; changes nothing."""
        cur = self._deps.catalogue.currency(currency, settleable=True)
        changes = self._limit_changes(
            cur,
            per_transaction=per_transaction,
            per_day=per_day,
            per_week=per_week,
            review_threshold=review_threshold,
        )
        return {name: None if minor is None else to_decimal(minor, cur) for name, minor in changes.items()}

    @staticmethod
    def _limit_changes(cur: Currency, **values: object) -> dict[str, int | None]:
        return {name: _limit_value(value, cur, name) for name, value in values.items() if value is not UNSET}

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

    # --- the work queues -------------------------------------------------------------------------

    def payouts(
        self,
        *,
        status: PayoutStatus | str | None = None,
        awaiting_review: bool | None = None,
        unresolved: bool | None = None,
        merchant_id: str | None = None,
        currency: str | None = None,
        created_from: datetime | None = None,
        created_before: datetime | None = None,
        limit: int = DEFAULT_LIMIT,
        starting_after: str | None = None,
    ) -> Page[OperatorPayout]:
        """Every merchant's payouts, oldest first (a work queue), ``limit`` (1 to 100) at a time.

        The review queue is ``payouts(awaiting_review=True)``; the failed payouts awaiting resolution
        ``payouts(status=PayoutStatus.FAILED, unresolved=True)``. ``starting_after`` is the reference
        of the previous page's last payout; ``merchant_id`` keeps one merchant's, ``currency`` those in
        that currency, ``created_from`` and ``created_before`` (aware datetimes) those created in
        ``[created_from, created_before)``.
        """
        limit = check_limit(limit)
        after = check_cursor(starting_after)
        wanted = check_member(status, PayoutStatus, "status")
        merchant = check_text(merchant_id, "merchant_id", max_length=200)
        code = check_text(currency, "currency", max_length=16)
        since, until = _moment(created_from, "created_from"), _moment(created_before, "created_before")
        for name, flag in (("awaiting_review", awaiting_review), ("unresolved", unresolved)):
            if flag is not None and not isinstance(flag, bool):
                raise InvalidRequestError(f"{name} must be True, False or None.", param=name)
        with self._deps.store.read() as tx:
            if merchant is not None:
                require_merchant(tx, merchant)
            rows = tx.payouts.queue(
                limit=limit + 1,
                after=after,
                merchant_id=merchant,
                status=wanted,
                awaiting_review=awaiting_review,
                unresolved=unresolved,
                currency=code,
                created_from=since,
                created_before=until,
            )
        if rows is None:
            raise InvalidRequestError("starting_after is not a payout reference.", param="starting_after")
        return page_of(rows, limit, self._operator_payout)

    def payout(self, reference: str) -> OperatorPayout:
        """Any merchant's payout ``reference``, as the operator sees it; NotFoundError when unknown."""
        with self._deps.store.read() as tx:
            found = tx.payouts.get(reference) if isinstance(reference, str) and reference else None
        if found is None:
            raise NotFoundError(f"No payout {str(reference)[:80]}.", param="reference")
        return self._operator_payout(found)

    def _operator_payout(self, payout: Any) -> OperatorPayout:
        return OperatorPayout(
            merchant_id=payout.merchant_id,
            payout=payout_from(payout, catalogue=self._deps.catalogue),
            resolution=None if payout.resolution is None else payout.resolution.value,
            updated_at=from_ms(payout.updated_at),
            batch_id=payout.batch_id,
        )

    def collections(
        self,
        *,
        status: CollectionStatus | str | None = None,
        merchant_id: str | None = None,
        currency: str | None = None,
        created_from: datetime | None = None,
        created_before: datetime | None = None,
        limit: int = DEFAULT_LIMIT,
        starting_after: str | None = None,
    ) -> Page[OperatorCollection]:
        """Every merchant's collections, oldest first, ``limit`` (1 to 100) at a time; the filters as
        for :meth:`payouts` (``currency`` is the requested currency)."""
        limit = check_limit(limit)
        after = check_cursor(starting_after)
        wanted = check_member(status, CollectionStatus, "status")
        merchant = check_text(merchant_id, "merchant_id", max_length=200)
        code = check_text(currency, "currency", max_length=16)
        since, until = _moment(created_from, "created_from"), _moment(created_before, "created_before")
        with self._deps.store.read() as tx:
            now = self._deps.clock.now()
            if merchant is not None:
                require_merchant(tx, merchant)
            rows = tx.collections.queue(
                limit=limit + 1,
                after=after,
                merchant_id=merchant,
                currency=code,
                status=wanted,
                created_from=since,
                created_before=until,
            )
            if rows is None:
                raise InvalidRequestError(
                    "starting_after is not a collection reference.", param="starting_after"
                )
            settlement = {}
            for row in rows:
                if row.merchant_id not in settlement:
                    owner = tx.merchants.get(row.merchant_id)
                    settlement[row.merchant_id] = (
                        owner.settlement_currency if owner is not None else row.requested_currency
                    )
        config = self._deps.config

        def item(row: Any) -> OperatorCollection:
            return OperatorCollection(
                merchant_id=row.merchant_id,
                collection=collection_from(
                    row,
                    catalogue=self._deps.catalogue,
                    settlement_currency=settlement[row.merchant_id],
                    public_url=config.public_url,
                    now=now,
                ),
                updated_at=from_ms(row.updated_at),
            )

        return page_of(rows, limit, item)

    # --- the overview --------------------------------------------------------------------------

    def overview(self) -> Overview:
        """Is money moving? The console's overview: payouts and collections of the last hour and of
        today per currency, the last 24 hours by hour, what waits for an operator, the background
        work, and the webhook endpoints that fail (:mod:`paymentcore._services.overview` says how each is
        counted), from one snapshot of the store."""
        return build_overview(self._deps)

    def due_work(self, kind: str, *, limit: int = DEFAULT_LIMIT) -> list[DueItem]:
        """The due items of one kind of background work (``collections``, ``payouts`` or
        ``deliveries``) waiting for a worker, at most ``limit``, in the order the worker takes them."""
        if kind not in WORK_KINDS:
            raise InvalidRequestError(f"kind must be one of {', '.join(WORK_KINDS)}.", param="kind")
        return due_items(self._deps, kind, check_limit(limit))

    # --- operators and their console sessions ----------------------------------------------------

    def create_operator(self, name: str, *, actor: str = DEFAULT_ACTOR) -> CreatedOperator:
        """A new operator who may sign in to the console, and the sign-in token, shown this once."""
        actor = audit.check_actor(actor)
        name = _check_name(name)
        token = OPERATOR_TOKEN_PREFIX + secrets.token_urlsafe(32)
        operator = StoredOperator(
            id=self._deps.refs.token("op"),
            name=name,
            token_hash=_digest(token),
            revoked=False,
            created_at=self._deps.clock.now(),
        )
        with self._deps.apart() as tx:  # the console's rows: no merchant's writer waits for it
            tx.operators.put(operator)
            self._write(tx, actor, "operator.create", operator.id, None, audit.operator_state(operator))
        return CreatedOperator(operator=_account(operator), token=token)

    def revoke_operator(self, operator_id: str, *, actor: str = DEFAULT_ACTOR) -> OperatorAccount:
        """The operator's token no longer signs in, and every session of the operator ends now."""
        actor = audit.check_actor(actor)
        with self._deps.apart() as tx:  # a session made meanwhile is refused: its operator is revoked
            before = self._require_operator(tx, operator_id)
            operator = attrs.evolve(before, revoked=True)
            tx.operators.put(operator)
            tx.sessions.end_all(operator.id)
            self._write(
                tx,
                actor,
                "operator.revoke",
                operator.id,
                audit.operator_state(before),
                audit.operator_state(operator),
            )
            return _account(operator)

    def operators(self) -> list[OperatorAccount]:
        """Every operator, oldest first, revoked ones included."""
        with self._deps.store.read() as tx:
            return [_account(operator) for operator in tx.operators.list()]

    @staticmethod
    def _require_operator(tx: Transaction, operator_id: str) -> StoredOperator:
        operator = tx.operators.get(operator_id) if isinstance(operator_id, str) else None
        if operator is None:
            raise NotFoundError(f"No operator {str(operator_id)[:80]}.", param="operator")
        return operator

    def sign_in(self, token: str, *, client: str | None = None) -> SignedIn:
        """A new console session for the operator whose sign-in token this is.

        Refused with UnauthorizedError, always with the same message, for an unknown, malformed or
        revoked token (whether an operator exists is not told). The sign-in is in the audit trail, and
        so is a refused one (``operator.sign_in_failed``, by ``client:<address>``; never the token).

        ``client`` is the address the attempt came from (the console passes the request's). Failed
        sign-ins are throttled (:class:`paymentcore._services.access.SignInThrottle`): at
        ``Config.sign_in_failures_per_client`` failures from one address within
        ``Config.sign_in_window_seconds``, or ``Config.sign_in_failures_overall`` from all together,
        an attempt is refused with RateLimitedError (``retry_after`` seconds) before its token is
        looked at, the right token included.
        """
        who = client_name(client)
        digest = _digest(token) if _plausible(token, OPERATOR_TOKEN_PREFIX) else None
        with self._sign_ins.turn:
            now = self._deps.clock.now()
            self._sign_ins.check(who, now)
            with self._deps.store.read() as tx:
                operator = tx.operators.by_hash(digest) if digest is not None else None
            accepted = _accepts(operator, digest)
            failures = (0, 0) if accepted else self._sign_ins.failed(who, now)
        if not accepted:
            self._sign_in_failed(who, *failures)
        secret = SESSION_SECRET_PREFIX + secrets.token_urlsafe(32)
        with self._deps.apart() as tx:  # a revocation committed meanwhile is seen here or at the next use
            now = self._deps.clock.now()
            operator = tx.operators.by_hash(digest) if digest is not None else None
            if operator is None or not _accepts(operator, digest):  # revoked meanwhile
                raise UnauthorizedError(SIGN_IN_REFUSED)
            tx.sessions.purge(seen_before=now - SESSION_IDLE_MS, created_before=now - SESSION_MAX_MS)
            session = StoredSession(
                id=self._deps.refs.token("ses"),
                operator_id=operator.id,
                token_hash=_digest(secret),
                created_at=now,
                last_seen_at=now,
            )
            tx.sessions.put(session)
            self._write(tx, operator.id, "operator.sign_in", operator.id, None, {"sessionId": session.id})
        return SignedIn(session=_session(session, operator), secret=secret)

    def _sign_in_failed(self, client: str, failures: int, overall: int) -> NoReturn:
        """Record a refused sign-in (who tried from where; never the token) and refuse it."""
        sign_ins = self._sign_ins
        seconds = sign_ins.window.length // 1000
        if failures == sign_ins.per_client:
            _log.warning(
                "console sign-in: %d failed from %s within %d s; that address is refused for a while",
                failures,
                client,
                seconds,
            )
        if overall == sign_ins.overall:
            _log.warning(
                "console sign-in: %d failed from all addresses within %d s; every address is refused a while",
                overall,
                seconds,
            )
        throttled = failures >= sign_ins.per_client or overall >= sign_ins.overall
        with self._deps.apart() as tx:
            self._write(
                tx,
                f"client:{client}",
                "operator.sign_in_failed",
                CONSOLE,
                None,
                {
                    "client": client,
                    "failuresInWindow": failures,
                    "windowSeconds": seconds,
                    "throttled": throttled,
                },
            )
        raise UnauthorizedError(SIGN_IN_REFUSED)

    def session(self, secret: str) -> ConsoleSession:
        """The live session whose secret this is (its use recorded), or UnauthorizedError when there is
        none: unknown, signed out, unused for too long, too old, or its operator revoked."""
        if not _plausible(secret, SESSION_SECRET_PREFIX):
            raise UnauthorizedError("Sign in to the console.")
        digest = _digest(secret)
        with self._deps.store.read() as tx:
            now = self._deps.clock.now()
            found = tx.sessions.by_hash(digest)
            operator = tx.operators.get(found.operator_id) if found is not None else None
        if (
            found is None
            or operator is None
            or not hmac.compare_digest(found.token_hash, digest)
            or operator.revoked
            or now - found.last_seen_at > SESSION_IDLE_MS
            or now - found.created_at > SESSION_MAX_MS
        ):
            raise UnauthorizedError("Sign in to the console.")
        if now - found.last_seen_at >= SESSION_TOUCH_MS:
            found = attrs.evolve(found, last_seen_at=now)
            with self._deps.apart() as tx:
                current = tx.sessions.by_hash(digest)
                if current is None:  # signed out meanwhile
                    raise UnauthorizedError("Sign in to the console.")
                tx.sessions.put(attrs.evolve(current, last_seen_at=max(current.last_seen_at, now)))
        return _session(found, operator)

    def sign_out(self, secret: str) -> None:
        """End the session whose secret this is (nothing happens for an unknown one)."""
        if not _plausible(secret, SESSION_SECRET_PREFIX):
            return
        with self._deps.apart() as tx:
            found = tx.sessions.by_hash(_digest(secret))
            if found is None:
                return
            tx.sessions.delete(found.id)
            self._write(
                tx, found.operator_id, "operator.sign_out", found.operator_id, {"sessionId": found.id}, None
            )

    # --- the audit trail -------------------------------------------------------------------------

    def audit_log(
        self,
        *,
        record: str | None = None,
        limit: int = DEFAULT_LIMIT,
        starting_after: str | None = None,
    ) -> Page[AuditEntry]:
        """The audit trail, newest first, ``limit`` (1 to 100) at a time; only the entries about
        ``record`` (a payout reference, a merchant, key or operator id, ``platform``) when given.
        ``starting_after`` is the id of the previous page's last entry."""
        limit = check_limit(limit)
        after = check_cursor(starting_after)
        subject = check_text(record, "record", max_length=200)
        with self._deps.store.read() as tx:
            rows = tx.audit.page(limit=limit + 1, after=after, subject=subject)
        if rows is None:
            raise InvalidRequestError("starting_after is not an audit entry id.", param="starting_after")
        return page_of(rows, limit, _entry)


def _moment(value: object, param: str) -> int | None:
    """An optional aware datetime, as milliseconds since the epoch."""
    if value is None:
        return None
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidRequestError(f"{param} must be an aware datetime.", param=param)
    return to_ms(value)


def _ceiling(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value > 1_000_000:
        raise InvalidRequestError(f"--{name} must be a whole number from 1 to 1000000.", param=name)
    return value


def _limit_value(value: object, cur: Currency, name: str) -> int | None:
    """A limit in minor units (None clears it), at most what the store holds."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
        return None
    param = name.replace("_", "-")
    largest = f"A limit is at most {to_decimal(MAX_STORED_MINOR, cur)} {cur.code}, the most the store holds."
    details = {"maximum": to_decimal(MAX_STORED_MINOR, cur), "currency": cur.code}
    try:
        if isinstance(value, str):
            minor = parse_decimal_text(value, cur.decimals, param=param)
        else:
            minor = parse_positive_minor(value, cur.decimals, param=param)
    except AmountTooLargeError:  # too many digits to be money at all
        raise AmountTooLargeError(largest, param=param, details=details) from None
    if minor > MAX_STORED_MINOR:
        raise AmountTooLargeError(largest, param=param, details=details)
    return minor


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > 120 or not name.isprintable():
        raise InvalidRequestError("A name of 1 to 120 printable characters is required.", param="name")
    return name.strip()


def _accepts(operator: StoredOperator | None, digest: str | None) -> bool:
    """The operator found by a token's digest signs in: found, the digest matches, not revoked."""
    return (
        operator is not None
        and digest is not None
        and hmac.compare_digest(operator.token_hash, digest)
        and not operator.revoked
    )


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _plausible(value: object, prefix: str) -> bool:
    """Worth looking up: a string of the right form (a sign-in token, a session secret)."""
    return isinstance(value, str) and value.startswith(prefix) and len(value) <= 200 and value.isascii()


def _account(operator: StoredOperator) -> OperatorAccount:
    return OperatorAccount(
        id=operator.id, name=operator.name, revoked=operator.revoked, created_at=from_ms(operator.created_at)
    )


def _session(session: StoredSession, operator: StoredOperator) -> ConsoleSession:
    return ConsoleSession(
        id=session.id,
        operator=_account(operator),
        created_at=from_ms(session.created_at),
        last_seen_at=from_ms(session.last_seen_at),
        expires_at=from_ms(min(session.last_seen_at + SESSION_IDLE_MS, session.created_at + SESSION_MAX_MS)),
        ends_at=from_ms(session.created_at + SESSION_MAX_MS),
    )


def _plain(state: dict[str, Any] | None) -> dict[str, Any] | None:
    """A stored state as plain JSON values, the same from every store (whole numbers as ``int``)."""
    if state is None:
        return None
    value: dict[str, Any] = wire.loads(wire.dumps(state))
    return value


def _entry(entry: StoredAuditEntry) -> AuditEntry:
    before, after = _plain(entry.state_before), _plain(entry.state_after)
    return AuditEntry(
        id=entry.id,
        at=from_ms(entry.at),
        actor=entry.actor,
        action=entry.action,
        record=entry.subject,
        before=None if before is None else MappingProxyType(before),
        after=None if after is None else MappingProxyType(after),
    )
