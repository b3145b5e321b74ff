"""Paying money out: reservation, limits, review, dispatch and resolution.

States (explicit table in :mod:`paymentcore.models`)::

    PENDING --dispatched, accepted--> SENT --confirmed--> PAID
    PENDING/SENT --refused or failed--> FAILED (money stays reserved until resolved)
    PENDING (awaiting review) --release--> SENT (dispatched at once) | --reject--> REJECTED (money back)
    FAILED --resolve: money moved--> PAID | --resolve: no money moved--> FAILED, money back

The reservation of a payout resolves once: ``Payout.resolution`` is set by the one transaction that
posts or releases it, and every later attempt is refused.
"""

from __future__ import annotations

from typing import Any

import attrs

from paymentcore import ledger, render
from paymentcore.deps import Deps, require_merchant
from paymentcore.errors import (
    CapabilityDisabledError,
    IdempotencyKeyRequiredError,
    InvalidTransitionError,
    MerchantNotApprovedError,
    NotFoundError,
    PayoutLimitExceededError,
    PayoutsNotConfiguredError,
    ProviderBlockedError,
)
from paymentcore.fields import optional_string, require_object, required, required_string
from paymentcore.idempotency import Idempotency, Reply, fingerprint
from paymentcore.models import (
    PAYOUT_TRANSITIONS,
    Merchant,
    Payout,
    PayoutLimits,
    PayoutStatus,
    Resolution,
    Settings,
    check_transition,
)
from paymentcore.money import parse_amount, to_decimal
from paymentcore.ports import NetworkError, NetworkOutcome, PayoutRequest, Transaction

DAY_MS = 86_400_000
WEEK_MS = 7 * DAY_MS
REVIEW_REASON = "Held for review: the amount is above the review threshold."
REJECTED_REASON = "Declined during review; the money is back in the balance."


@attrs.frozen
class Effective:
    """A merchant's payout limits for one currency as they apply now (minor units)."""

    per_transaction: int | None
    per_day: int | None
    per_week: int | None
    review_threshold: int | None


class Disburse:
    def __init__(self, deps: Deps, idempotency: Idempotency) -> None:
        self._deps = deps
        self._idem = idempotency

    # --- creating --------------------------------------------------------------------------------

    def create(self, merchant_id: str, body: object, *, idempotency_key: str | None) -> Reply:
        """POST /v1/disburse: checks, reservation and the PENDING payout, in one transaction; 201."""
        if idempotency_key is None:
            raise IdempotencyKeyRequiredError(param="Idempotency-Key")
        deps = self._deps
        cat = deps.catalogue
        data = require_object(body)
        print_ = fingerprint("disburse", data)
        with deps.store.transaction() as tx:  # a replay answers the original, whatever changed since
            replay = self._idem.lookup(tx, merchant_id, idempotency_key, print_, deps.clock.now())
            if replay is not None:
                return replay
            settings = tx.get_settings()
        if not settings.payouts_enabled:
            raise CapabilityDisabledError("Payouts are switched off platform-wide.")
        currency = cat.currency(required(data, "currency"), settleable=True)
        amount = parse_amount(required(data, "amount"), currency)
        raw_phone = required_string(data, "phone", max_length=32)
        recipient_name = optional_string(data, "recipientName", max_length=120)
        merchant_reference = optional_string(data, "merchantReference", max_length=120, alias="reference")
        country = cat.country(data.get("country") if data.get("country") is not None else "CM")
        cat.check_currency_for_country(currency, country)
        named = cat.provider(data["provider"]) if data.get("provider") is not None else None
        phone, provider = cat.resolve_mobile(country=country, phone=raw_phone, provider=named)
        with deps.store.transaction() as tx:
            now = deps.clock.now()
            replay = self._idem.lookup(tx, merchant_id, idempotency_key, print_, now)
            if replay is not None:
                return replay
            merchant = require_merchant(tx, merchant_id)
            if not merchant.approved:
                raise MerchantNotApprovedError()
            settings = tx.get_settings()
            if not settings.payouts_enabled:
                raise CapabilityDisabledError("Payouts are switched off platform-wide.")
            blocked = _blocked_by(settings, merchant, currency.code)
            if blocked is not None:
                raise PayoutsNotConfiguredError(_blocked_message(blocked, currency.code), param="currency")
            if provider.code in merchant.blocked_providers:
                raise ProviderBlockedError(
                    f"This account is restricted from {provider.code}.", param="provider"
                )
            limits = self._effective(tx, merchant.id, currency.code)
            self._check_limits(tx, merchant.id, currency.code, amount, limits, now)
            reference = deps.refs.payout(now)
            ledger.reserve(
                tx,
                entry_id=deps.refs.token("led"),
                merchant_id=merchant.id,
                currency=currency.code,
                amount=amount,
                reference=reference,
                now=now,
                decimals=currency.decimals,
            )
            held = limits.review_threshold is not None and amount > limits.review_threshold
            payout = Payout(
                reference=reference,
                merchant_id=merchant.id,
                status=PayoutStatus.PENDING,
                amount=amount,
                currency=currency.code,
                phone=phone,
                country=country.code,
                provider=provider.code,
                recipient_name=recipient_name,
                merchant_reference=merchant_reference,
                awaiting_review=held,
                created_at=now,
                updated_at=now,
                status_reason=REVIEW_REASON if held else None,
                next_check_at=None if held else now,
            )
            tx.insert_payout(payout)
            reply = Reply(201, render.payout_record(payout, catalogue=cat))
            self._idem.save(tx, merchant_id, idempotency_key, print_, reply, now)
            return reply

    def _effective(self, tx: Transaction, merchant_id: str, currency: str) -> Effective:
        limits = tx.get_limits(merchant_id, currency) or PayoutLimits(merchant_id, currency)
        maximum = self._deps.catalogue.currencies[currency].max_minor
        return Effective(
            per_transaction=limits.per_transaction if limits.per_transaction is not None else maximum,
            per_day=limits.per_day,
            per_week=limits.per_week,
            review_threshold=limits.review_threshold,
        )

    def _check_limits(
        self, tx: Transaction, merchant_id: str, currency: str, amount: int, limits: Effective, now: int
    ) -> None:
        cur = self._deps.catalogue.currencies[currency]

        def refuse(name: str, ceiling: int, spent: int | None) -> PayoutLimitExceededError:
            details: dict[str, Any] = {
                "limit": name,
                "ceiling": to_decimal(ceiling, cur),
                "currency": currency,
            }
            if spent is not None:
                details["spent"] = to_decimal(spent, cur)
                details["remaining"] = to_decimal(max(0, ceiling - spent), cur)
            label = {"perTransaction": "per-payout", "perDay": "rolling 24-hour", "perWeek": "rolling 7-day"}
            return PayoutLimitExceededError(
                f"This payout is over the {label[name]} ceiling of {to_decimal(ceiling, cur)} {currency}.",
                param="amount",
                details=details,
            )

        if limits.per_transaction is not None and amount > limits.per_transaction:
            raise refuse("perTransaction", limits.per_transaction, None)
        if limits.per_day is not None:
            spent = tx.spent(merchant_id, currency, now - DAY_MS)
            if spent + amount > limits.per_day:
                raise refuse("perDay", limits.per_day, spent)
        if limits.per_week is not None:
            spent = tx.spent(merchant_id, currency, now - WEEK_MS)
            if spent + amount > limits.per_week:
                raise refuse("perWeek", limits.per_week, spent)

    # --- reading ---------------------------------------------------------------------------------

    def get(self, merchant_id: str, reference: str) -> dict[str, Any]:
        with self._deps.store.read() as tx:
            payout = tx.get_payout(reference)
        if payout is None or payout.merchant_id != merchant_id:
            raise NotFoundError("No such payout on this account.")
        return render.payout_record(payout, catalogue=self._deps.catalogue)

    def find(self, reference: str) -> Payout:
        with self._deps.store.read() as tx:
            payout = tx.get_payout(reference)
        if payout is None:
            raise NotFoundError(f"No payout {reference[:80]}.", param="reference")
        return payout

    def limits(self, merchant_id: str, currency_code: object) -> dict[str, Any]:
        """GET /v1/account/disburse-limits/{currency}."""
        deps = self._deps
        currency = deps.catalogue.currency(currency_code, settleable=True)
        now = deps.clock.now()
        with deps.store.read() as tx:
            merchant = require_merchant(tx, merchant_id)
            settings = tx.get_settings()
            blocked = _blocked_by(settings, merchant, currency.code)
            record: dict[str, Any] = {
                "currency": currency.code,
                "enabled": blocked is None,
                "platformEnabled": settings.payouts_enabled,
                "configured": merchant.payouts_enabled and currency.code not in settings.closed_currencies,
                "blockedBy": blocked,
                "message": None if blocked is None else _blocked_message(blocked, currency.code),
            }
            if blocked is not None:
                return record
            limits = self._effective(tx, merchant.id, currency.code)
            spent_day = tx.spent(merchant.id, currency.code, now - DAY_MS)
            spent_week = tx.spent(merchant.id, currency.code, now - WEEK_MS)

        def show(value: int | None) -> Any:
            return None if value is None else to_decimal(value, currency)

        record.update(
            {
                "perTransaction": show(limits.per_transaction),
                "perDay": show(limits.per_day),
                "perWeek": show(limits.per_week),
                "reviewThreshold": show(limits.review_threshold),
                "spentToday": to_decimal(spent_day, currency),
                "spentThisWeek": to_decimal(spent_week, currency),
                "remainingToday": None
                if limits.per_day is None
                else show(max(0, limits.per_day - spent_day)),
                "remainingThisWeek": (
                    None if limits.per_week is None else show(max(0, limits.per_week - spent_week))
                ),
            }
        )
        return record

    # --- operator actions ------------------------------------------------------------------------

    def release(self, reference: str) -> Payout:
        """Review release: the held payout goes to the network at once (SENT, or FAILED if refused)."""
        deps = self._deps
        with deps.store.transaction() as tx:
            payout = self._require(tx, reference)
            if payout.status is not PayoutStatus.PENDING or not payout.awaiting_review:
                raise InvalidTransitionError(
                    f"Payout {reference} is {payout.status.value} and not held for review; nothing released."
                )
            now = deps.clock.now()
            tx.update_payout(
                attrs.evolve(
                    payout, awaiting_review=False, status_reason=None, next_check_at=now, updated_at=now
                )
            )
        self.advance(reference)
        return self.find(reference)

    def reject(self, reference: str) -> Payout:
        """Review decline: REJECTED, the reservation released, event disburse.failed."""
        deps = self._deps
        with deps.store.transaction() as tx:
            payout = self._require(tx, reference)
            if payout.status is not PayoutStatus.PENDING or not payout.awaiting_review:
                raise InvalidTransitionError(
                    f"Payout {reference} is {payout.status.value} and not held for review; nothing rejected."
                )
            check_transition(PAYOUT_TRANSITIONS, payout.status, PayoutStatus.REJECTED, "payout")
            now = deps.clock.now()
            self._release_money(tx, payout, now)
            rejected = attrs.evolve(
                payout,
                status=PayoutStatus.REJECTED,
                awaiting_review=False,
                status_reason=REJECTED_REASON,
                resolution=Resolution.RELEASED,
                next_check_at=None,
                updated_at=now,
            )
            tx.update_payout(rejected)
            self._emit(tx, rejected, "disburse.failed", now)
            return rejected

    def resolve(self, reference: str) -> Payout:
        """Ask the network whether a FAILED (or never-confirmed SENT) payout's money moved, and settle it."""
        deps = self._deps
        payout = self.find(reference)
        if payout.resolution is not None or payout.status not in (PayoutStatus.FAILED, PayoutStatus.SENT):
            raise InvalidTransitionError(
                f"Payout {reference} is {payout.status.value}"
                + (" and already resolved" if payout.resolution is not None else "")
                + "; only an unresolved FAILED or SENT payout can be resolved."
            )
        moved = deps.network.money_moved(_request_of(payout))
        with deps.store.transaction() as tx:
            current = self._require(tx, reference)
            if current.resolution is not None or current.status is not payout.status:
                raise InvalidTransitionError(f"Payout {reference} changed meanwhile; nothing was done.")
            now = deps.clock.now()
            if moved:
                check_transition(PAYOUT_TRANSITIONS, current.status, PayoutStatus.PAID, "payout")
                resolved = self._pay(tx, current, now, reason=None)
            else:
                if current.status is PayoutStatus.SENT:
                    check_transition(PAYOUT_TRANSITIONS, current.status, PayoutStatus.FAILED, "payout")
                self._release_money(tx, current, now)
                resolved = attrs.evolve(
                    current,
                    status=PayoutStatus.FAILED,
                    status_reason=(current.status_reason or "The network did not complete the payout.")
                    + " Resolved: no money moved; returned to the balance.",
                    resolution=Resolution.RELEASED,
                    next_check_at=None,
                    updated_at=now,
                )
                tx.update_payout(resolved)
                if current.status is PayoutStatus.SENT:
                    self._emit(tx, resolved, "disburse.failed", now)
            return resolved

    # --- the worker's part -----------------------------------------------------------------------

    def process_due(self, limit: int = 100) -> int:
        now = self._deps.clock.now()
        with self._deps.store.read() as tx:
            due = tx.due_payouts(now, limit)
        for payout in due:
            self.advance(payout.reference)
        return len(due)

    def advance(self, reference: str) -> None:
        """Dispatch a due PENDING payout, or ask the network about a SENT one."""
        deps = self._deps
        lease_ms = deps.config.dispatch_lease_seconds * 1000
        with deps.store.transaction() as tx:
            payout = tx.get_payout(reference)
            now = deps.clock.now()
            if (
                payout is None
                or payout.next_check_at is None
                or payout.next_check_at > now
                or payout.status not in (PayoutStatus.PENDING, PayoutStatus.SENT)
                or payout.awaiting_review
            ):
                return
            # claim it: another worker skips it until the lease runs out
            payout = attrs.evolve(payout, next_check_at=now + lease_ms)
            if payout.status is PayoutStatus.PENDING and payout.sent_at is None:
                payout = attrs.evolve(payout, sent_at=now)
            tx.update_payout(payout)
        request = _request_of(payout)
        try:
            if payout.status is PayoutStatus.PENDING:
                result = deps.network.send_payout(request)
                self._after_send(reference, result.outcome, result.provider_reference, result.reason)
            result = deps.network.payout_status(request, deps.clock.now())
        except NetworkError:
            return  # the lease runs out and a worker tries again, with the same reference
        self._after_check(reference, result.outcome, result.provider_reference, result.reason)

    def _after_send(
        self, reference: str, outcome: NetworkOutcome, provider_reference: str | None, reason: str | None
    ) -> None:
        deps = self._deps
        with deps.store.transaction() as tx:
            payout = self._require(tx, reference)
            if payout.status is not PayoutStatus.PENDING:
                return
            now = deps.clock.now()
            if outcome is NetworkOutcome.FAILED:
                self._fail(tx, payout, reason or "The network refused the payout.", now)
                return
            check_transition(PAYOUT_TRANSITIONS, payout.status, PayoutStatus.SENT, "payout")
            sent = attrs.evolve(
                payout,
                status=PayoutStatus.SENT,
                provider_reference=provider_reference or payout.provider_reference,
                status_reason=None,
                next_check_at=now + int(deps.config.poll_interval_seconds * 1000),
                updated_at=now,
            )
            tx.update_payout(sent)
            self._emit(tx, sent, "disburse.sent", now)

    def _after_check(
        self, reference: str, outcome: NetworkOutcome, provider_reference: str | None, reason: str | None
    ) -> None:
        deps = self._deps
        with deps.store.transaction() as tx:
            payout = self._require(tx, reference)
            if payout.status is not PayoutStatus.SENT:
                return
            now = deps.clock.now()
            if provider_reference and not payout.provider_reference:
                payout = attrs.evolve(payout, provider_reference=provider_reference)
            if outcome is NetworkOutcome.SUCCESS:
                self._pay(tx, payout, now, reason=None)
            elif outcome is NetworkOutcome.FAILED:
                self._fail(tx, payout, reason or "The network did not complete the payout.", now)
            else:
                tx.update_payout(
                    attrs.evolve(payout, next_check_at=now + int(deps.config.poll_interval_seconds * 1000))
                )

    # --- shared steps ----------------------------------------------------------------------------

    def _pay(self, tx: Transaction, payout: Payout, now: int, *, reason: str | None) -> Payout:
        check_transition(PAYOUT_TRANSITIONS, payout.status, PayoutStatus.PAID, "payout")
        self._resolve_money(tx, payout, ledger.post, now)
        paid = attrs.evolve(
            payout,
            status=PayoutStatus.PAID,
            status_reason=reason,
            resolution=Resolution.POSTED,
            next_check_at=None,
            updated_at=now,
        )
        tx.update_payout(paid)
        self._emit(tx, paid, "disburse.succeeded", now)
        return paid

    def _fail(self, tx: Transaction, payout: Payout, reason: str, now: int) -> None:
        """PENDING or SENT -> FAILED: the money stays reserved until the payout is resolved."""
        check_transition(PAYOUT_TRANSITIONS, payout.status, PayoutStatus.FAILED, "payout")
        failed = attrs.evolve(
            payout, status=PayoutStatus.FAILED, status_reason=reason, next_check_at=None, updated_at=now
        )
        tx.update_payout(failed)
        self._emit(tx, failed, "disburse.failed", now)

    def _release_money(self, tx: Transaction, payout: Payout, now: int) -> None:
        self._resolve_money(tx, payout, ledger.release, now)

    def _resolve_money(self, tx: Transaction, payout: Payout, movement: Any, now: int) -> None:
        """Post or release a payout's reservation: at most once per payout."""
        if payout.resolution is not None:
            raise InvalidTransitionError(f"Payout {payout.reference} is already resolved.")
        movement(
            tx,
            entry_id=self._deps.refs.token("led"),
            merchant_id=payout.merchant_id,
            currency=payout.currency,
            amount=payout.amount,
            reference=payout.reference,
            now=now,
        )

    def _emit(self, tx: Transaction, payout: Payout, event_type: str, now: int) -> None:
        self._deps.emit(
            tx,
            payout.merchant_id,
            event_type,
            render.payout_event_data(payout, catalogue=self._deps.catalogue),
            now,
        )

    @staticmethod
    def _require(tx: Transaction, reference: str) -> Payout:
        payout = tx.get_payout(reference)
        if payout is None:
            raise NotFoundError(f"No payout {reference[:80]}.", param="reference")
        return payout


def _blocked_by(settings: Settings, merchant: Merchant, currency: str) -> str | None:
    if not settings.payouts_enabled:
        return "PLATFORM"
    if not merchant.payouts_enabled:
        return "ACCOUNT_DISABLED"
    if currency in settings.closed_currencies:
        return "CURRENCY_CLOSED"
    return None


def _blocked_message(blocked: str, currency: str) -> str:
    return {
        "PLATFORM": "Payouts are switched off platform-wide.",
        "ACCOUNT_DISABLED": "Payouts are disabled for this account.",
        "CURRENCY_CLOSED": f"Payouts in {currency} are closed.",
    }[blocked]


def _request_of(payout: Payout) -> PayoutRequest:
    return PayoutRequest(
        reference=payout.reference,
        provider=payout.provider,
        phone=payout.phone,
        amount=payout.amount,
        currency=payout.currency,
        sent_at=payout.sent_at if payout.sent_at is not None else payout.created_at,
    )
