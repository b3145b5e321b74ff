"""Paying money out: reservation, limits, review, dispatch and resolution.

States (explicit table in :mod:`paymentcore._models`)::

    PENDING --dispatched, accepted--> SENT --confirmed--> PAID
    PENDING/SENT --refused or failed--> FAILED (money stays reserved until resolved)
    PENDING (awaiting review) --release--> SENT (dispatched at once) | --reject--> REJECTED (money back)
    FAILED --resolve: money moved--> PAID | --resolve: no money moved--> FAILED, money back

The reservation of a payout resolves once: ``Payout.resolution`` is set by the one transaction that
posts or releases it, and every later attempt is refused.
"""

from __future__ import annotations

import builtins
from decimal import Decimal
from typing import Any

import attrs

from paymentcore import _audit as audit
from paymentcore import _ledger as ledger
from paymentcore import _models as models
from paymentcore import _render as render
from paymentcore._audit import DEFAULT_ACTOR
from paymentcore._deps import Deps, require_merchant
from paymentcore._fields import optional_text, required_text, required_value
from paymentcore._idempotency import Idempotency, check_key, fingerprint
from paymentcore._models import PayoutStatus
from paymentcore._money import parse_amount, to_decimal
from paymentcore._pages import (
    DEFAULT_LIMIT,
    check_cursor,
    check_limit,
    check_member,
    check_text,
    page_of,
    unknown_cursor,
)
from paymentcore._policy import (
    DAY_MS,
    REVIEW_REASON,
    WEEK_MS,
    BlockedBy,
    EffectiveLimits,
    blocked_by,
    check_limits,
    effective_limits,
    held_for_review,
)
from paymentcore._queries import payout_is_due, payout_lane
from paymentcore._records import Page, Payout, PayoutAllowance, dump, load, payout_from
from paymentcore._work import LANE_DEPTH, Due, Runner
from paymentcore.errors import (
    CapabilityDisabledError,
    IdempotencyKeyRequiredError,
    InvalidTransitionError,
    MerchantNotApprovedError,
    NotFoundError,
    PayoutsNotConfiguredError,
    ProviderBlockedError,
)
from paymentcore.ports import NetworkError, NetworkOutcome, PayoutRequest, PayoutResult, Transaction


@attrs.frozen
class _NetworkAnswer:
    """What the network said to a hand-over (``handed_over``) or to a status check."""

    handed_over: bool
    result: PayoutResult


class Disburse:
    def __init__(self, deps: Deps, idempotency: Idempotency) -> None:
        self._deps = deps
        self._idem = idempotency
        self._runner: Runner[models.Payout, _NetworkAnswer] = Runner(
            self,
            deps.store,
            deps.clock,
            kind="payouts",
            lease_ms=deps.config.dispatch_lease_seconds * 1000,
            write=deps.transaction,
        )

    @property
    def runner(self) -> Runner[models.Payout, _NetworkAnswer]:
        """This service's background work, for the worker (:meth:`PaymentCore.start_worker`)."""
        return self._runner

    # --- creating --------------------------------------------------------------------------------

    def create(
        self,
        merchant_id: str,
        *,
        amount: Decimal | int,
        currency: str,
        phone: str,
        idempotency_key: str,
        recipient_name: str | None = None,
        provider: str | None = None,
        country: str | None = None,
        merchant_reference: str | None = None,
    ) -> Payout:
        """Create a payout: checks, reservation and the PENDING payout, in one transaction.

        ``amount`` is in the currency's units (``Decimal("12.50")`` or ``2500``; a float is refused).
        ``country`` defaults to CM; ``provider`` is detected from the number when not given. The same
        ``idempotency_key`` with the same arguments answers the original payout and moves nothing again;
        with other arguments it raises :class:`IdempotencyKeyReusedError`.
        """
        deps = self._deps
        cat = deps.catalogue
        key = check_key(idempotency_key)
        if key is None:
            raise IdempotencyKeyRequiredError(param="idempotency_key")
        print_ = fingerprint(
            "disburse",
            {
                "amount": amount,
                "currency": currency,
                "phone": phone,
                "recipient_name": recipient_name,
                "provider": provider,
                "country": country,
                "merchant_reference": merchant_reference,
            },
        )
        with deps.store.read() as view:  # a replay needs no write lock: answer it from a read
            replay = self._replay(view, merchant_id, key, print_, deps.clock.now())
        if replay is not None:  # the original answer, whatever changed since
            return replay
        with deps.transaction() as tx:
            now = deps.clock.now()
            # again under the write lock: a request with this key may have committed since the read
            replay = self._replay(tx, merchant_id, key, print_, now)
            if replay is not None:
                return replay
            settings = tx.settings.get()
            if not settings.payouts_enabled:  # before any other check, as the API documents
                raise CapabilityDisabledError(BlockedBy.PLATFORM.message(""))
            cur = cat.currency(required_value(currency, "currency"), settleable=True)
            minor = parse_amount(required_value(amount, "amount"), cur)
            raw_phone = required_text(phone, "phone", max_length=32)
            recipient_name = optional_text(recipient_name, "recipient_name", max_length=120)
            merchant_reference = optional_text(merchant_reference, "merchant_reference", max_length=120)
            where = cat.country(country if country is not None else "CM")
            cat.check_currency_for_country(cur, where)
            named = cat.provider(provider) if provider is not None else None
            local_phone, network = cat.resolve_mobile(country=where, phone=raw_phone, provider=named)
            merchant = require_merchant(tx, merchant_id)
            if not merchant.approved:
                raise MerchantNotApprovedError()
            blocked = blocked_by(settings, merchant, cur.code)
            if blocked is not None:
                raise PayoutsNotConfiguredError(blocked.message(cur.code), param="currency")
            if network.code in merchant.blocked_providers:
                raise ProviderBlockedError(
                    f"This account is restricted from {network.code}.", param="provider"
                )
            limits = self._effective(tx, merchant.id, cur.code)
            check_limits(
                limits,
                minor,
                cur,
                now=now,
                spent_since=lambda since: tx.payouts.spent(merchant.id, cur.code, since),
            )
            reference = deps.refs.payout(now)
            ledger.reserve(
                tx,
                entry_id=deps.refs.token("led"),
                merchant_id=merchant.id,
                currency=cur.code,
                amount=minor,
                reference=reference,
                now=now,
                decimals=cur.decimals,
            )
            held = held_for_review(limits, minor)
            payout = models.Payout(
                reference=reference,
                merchant_id=merchant.id,
                status=PayoutStatus.PENDING,
                amount=minor,
                currency=cur.code,
                phone=local_phone,
                country=where.code,
                provider=network.code,
                recipient_name=recipient_name,
                merchant_reference=merchant_reference,
                awaiting_review=held,
                created_at=now,
                updated_at=now,
                status_reason=REVIEW_REASON if held else None,
                next_check_at=None if held else now,
            )
            tx.payouts.add(payout)
            self._tell(payout.status)
            record = payout_from(payout, catalogue=cat)
            self._idem.save(tx, merchant_id, key, print_, dump(record), now)
            return record

    def _replay(self, tx: Transaction, merchant_id: str, key: str, print_: str, now: int) -> Payout | None:
        kept = self._idem.lookup(tx, merchant_id, key, print_, now)
        if kept is None:
            return None
        record = load(kept)
        if isinstance(record, Payout):
            return record
        # an answer kept by a version before typed records: the payout it named, as it is now
        payout = tx.payouts.get(str(kept.get("reference", ""))) if isinstance(kept, dict) else None
        if payout is None:
            raise NotFoundError("The payout this idempotency key created is gone.")
        return payout_from(payout, catalogue=self._deps.catalogue)

    def _effective(self, tx: Transaction, merchant_id: str, currency: str) -> EffectiveLimits:
        maximum = self._deps.catalogue.currencies[currency].max_minor
        return effective_limits(tx.limits.get(merchant_id, currency), maximum)

    # --- reading ---------------------------------------------------------------------------------

    def get(self, merchant_id: str, reference: str) -> Payout:
        """The merchant's payout ``reference``; NotFoundError also for another merchant's."""
        with self._deps.store.read() as tx:
            payout = tx.payouts.get(reference)
        if payout is None or payout.merchant_id != merchant_id:
            raise NotFoundError("No such payout on this account.")
        return payout_from(payout, catalogue=self._deps.catalogue)

    def list(
        self,
        merchant_id: str,
        *,
        limit: int = DEFAULT_LIMIT,
        starting_after: str | None = None,
        status: PayoutStatus | None = None,
        merchant_reference: str | None = None,
    ) -> Page[Payout]:
        """The merchant's payouts, newest first, ``limit`` (1 to 100) at a time.

        ``starting_after`` is the reference of the previous page's last payout; one that is not the
        merchant's raises InvalidRequestError (param ``starting_after``). ``status`` and
        ``merchant_reference`` keep only the payouts that have them.
        """
        limit = check_limit(limit)
        after = check_cursor(starting_after)
        wanted = check_member(status, PayoutStatus, "status")
        reference = check_text(merchant_reference, "merchant_reference", max_length=120)
        with self._deps.store.read() as tx:
            rows = tx.payouts.page(
                merchant_id, limit=limit + 1, after=after, status=wanted, merchant_reference=reference
            )
        if rows is None:
            raise unknown_cursor("payouts")
        return page_of(rows, limit, self._public)

    def _public(self, payout: models.Payout) -> Payout:
        return payout_from(payout, catalogue=self._deps.catalogue)

    def find(self, reference: str) -> models.Payout:
        with self._deps.store.read() as tx:
            payout = tx.payouts.get(reference)
        if payout is None:
            raise NotFoundError(f"No payout {reference[:80]}.", param="reference")
        return payout

    def limits(self, merchant_id: str, currency: str) -> PayoutAllowance:
        """What the merchant may pay out in ``currency`` now: switches, ceilings, rolling spend."""
        deps = self._deps
        cur = deps.catalogue.currency(currency, settleable=True)
        now = deps.clock.now()
        with deps.store.read() as tx:
            merchant = require_merchant(tx, merchant_id)
            settings = tx.settings.get()
            blocked = blocked_by(settings, merchant, cur.code)
            allowance = PayoutAllowance(
                currency=cur.code,
                enabled=blocked is None,
                platform_enabled=settings.payouts_enabled,
                configured=merchant.payouts_enabled and cur.code not in settings.closed_currencies,
                blocked_by=None if blocked is None else blocked.value,
                message=None if blocked is None else blocked.message(cur.code),
            )
            if blocked is not None:
                return allowance
            limits = self._effective(tx, merchant.id, cur.code)
            spent_day = tx.payouts.spent(merchant.id, cur.code, now - DAY_MS)
            spent_week = tx.payouts.spent(merchant.id, cur.code, now - WEEK_MS)

        def show(value: int | None) -> Decimal | None:
            return None if value is None else to_decimal(value, cur)

        return attrs.evolve(
            allowance,
            per_transaction=show(limits.per_transaction),
            per_day=show(limits.per_day),
            per_week=show(limits.per_week),
            review_threshold=show(limits.review_threshold),
            spent_today=to_decimal(spent_day, cur),
            spent_this_week=to_decimal(spent_week, cur),
            remaining_today=None if limits.per_day is None else show(max(0, limits.per_day - spent_day)),
            remaining_this_week=(
                None if limits.per_week is None else show(max(0, limits.per_week - spent_week))
            ),
        )

    # --- operator actions ------------------------------------------------------------------------

    def release(self, reference: str, *, actor: str = DEFAULT_ACTOR) -> Payout:
        """Review release: the held payout goes to the network at once (SENT, or FAILED if refused).

        ``actor`` is who releases it (see :mod:`paymentcore._audit`); the release is in the audit trail.
        """
        deps = self._deps
        actor = audit.check_actor(actor)
        with deps.transaction() as tx:
            payout = self._require(tx, reference)
            released = payout.release_from_review(deps.clock.now())
            tx.payouts.update(released)
            self._audit(tx, actor, "payout.release", payout, released)
        self.advance(reference)
        return self._public(self.find(reference))

    def reject(self, reference: str, *, actor: str = DEFAULT_ACTOR) -> Payout:
        """Review decline: REJECTED, the reservation released, event disburse.failed (audited)."""
        deps = self._deps
        actor = audit.check_actor(actor)
        with deps.transaction() as tx:
            payout = self._require(tx, reference)
            now = deps.clock.now()
            rejected = payout.reject(now)
            self._move_money(tx, payout, ledger.release, now)
            tx.payouts.update(rejected)
            self._tell(rejected.status)
            self._emit(tx, rejected, "disburse.failed", now)
            self._audit(tx, actor, "payout.reject", payout, rejected)
            return self._public(rejected)

    def resolve(self, reference: str, *, actor: str = DEFAULT_ACTOR) -> Payout:
        """Ask the network whether a FAILED (or never-confirmed SENT) payout's money moved, and settle it
        (audited)."""
        deps = self._deps
        actor = audit.check_actor(actor)
        payout = self.find(reference)
        if payout.resolution is not None or payout.status not in (PayoutStatus.FAILED, PayoutStatus.SENT):
            raise InvalidTransitionError(
                f"Payout {reference} is {payout.status.value}"
                + (" and already resolved" if payout.resolution is not None else "")
                + "; only an unresolved FAILED or SENT payout can be resolved."
            )
        moved = deps.network.money_moved(_request_of(payout))
        with deps.transaction() as tx:
            current = self._require(tx, reference)
            if current.resolution is not None or current.status is not payout.status:
                raise InvalidTransitionError(f"Payout {reference} changed meanwhile; nothing was done.")
            now = deps.clock.now()
            if moved:
                paid = self._pay(tx, current, now)
                self._audit(tx, actor, "payout.resolve", current, paid)
                return self._public(paid)
            resolved = current.resolve_released(now)
            self._move_money(tx, current, ledger.release, now)
            tx.payouts.update(resolved)
            if resolved.status is not current.status:  # SENT -> FAILED; a FAILED one stays FAILED
                self._tell(resolved.status)
            if current.status is PayoutStatus.SENT:
                self._emit(tx, resolved, "disburse.failed", now)
            self._audit(tx, actor, "payout.resolve", current, resolved)
            return self._public(resolved)

    def _audit(
        self, tx: Transaction, actor: str, action: str, before: models.Payout, after: models.Payout
    ) -> None:
        cat = self._deps.catalogue
        audit.write(
            tx,
            self._deps,
            actor=actor,
            action=action,
            subject=before.reference,
            before=audit.payout_state(before, cat),
            after=audit.payout_state(after, cat),
        )

    # --- the worker's part (a Task of paymentcore._work) -------------------------------------------

    def process_due(self, limit: int = 100) -> int:
        return self._runner.run_due(limit)

    def advance(self, reference: str) -> None:
        """Dispatch a due PENDING payout, or ask the network about a SENT one."""
        self._runner.run_one(reference)

    def due(self, tx: Transaction, now: int, limit: int) -> builtins.list[Due]:
        # a lane per provider: a mobile network that hangs holds up only its own payouts
        due = tx.payouts.due(now, limit, per_lane=LANE_DEPTH)
        return [Due(key=payout.reference, lane=payout_lane(payout)) for payout in due]

    def renew(self, tx: Transaction, key: str, held_until: int, until: int) -> bool:
        payout = tx.payouts.get(key)
        if payout is None or payout.next_check_at != held_until:
            return False
        tx.payouts.update(attrs.evolve(payout, next_check_at=until))
        return True

    def claim(self, tx: Transaction, key: str, now: int) -> models.Payout | None:
        payout = tx.payouts.get(key)
        if payout is None or not payout_is_due(payout, now):
            return None
        # another worker skips it until the lease runs out
        payout = attrs.evolve(payout, next_check_at=now + self._deps.config.dispatch_lease_seconds * 1000)
        if payout.status is PayoutStatus.PENDING and payout.sent_at is None:
            payout = attrs.evolve(payout, sent_at=now)
        tx.payouts.update(payout)
        return payout

    def act(self, claim: models.Payout, now: int) -> _NetworkAnswer | None:
        """Hand a PENDING payout over, or ask about a SENT one (never both in one step)."""
        network = self._deps.network
        request = _request_of(claim)
        try:
            if claim.status is PayoutStatus.PENDING:
                return _NetworkAnswer(handed_over=True, result=network.send_payout(request))
            return _NetworkAnswer(handed_over=False, result=network.payout_status(request, now))
        except NetworkError:
            return None  # the lease runs out and a worker tries again, with the same reference

    def record(self, tx: Transaction, claim: models.Payout, outcome: _NetworkAnswer, now: int) -> bool:
        if outcome.handed_over:
            return self._after_send(tx, claim.reference, outcome.result, now)
        self._after_check(tx, claim.reference, outcome.result, now)
        return False

    def _after_send(self, tx: Transaction, reference: str, result: PayoutResult, now: int) -> bool:
        """Record the hand-over; True when accepted (SENT), so that its status is asked at once."""
        payout = self._require(tx, reference)
        if payout.status is not PayoutStatus.PENDING:
            return False
        if result.outcome is NetworkOutcome.FAILED:
            self._fail(tx, payout, result.reason or "The network refused the payout.", now)
            return False
        sent = payout.mark_sent(now, provider_reference=result.provider_reference, next_check_at=now)
        tx.payouts.update(sent)
        self._tell(sent.status)
        self._emit(tx, sent, "disburse.sent", now)
        return True

    def _after_check(self, tx: Transaction, reference: str, result: PayoutResult, now: int) -> None:
        payout = self._require(tx, reference)
        if payout.status is not PayoutStatus.SENT:
            return
        if result.provider_reference and not payout.provider_reference:
            payout = attrs.evolve(payout, provider_reference=result.provider_reference)
        if result.outcome is NetworkOutcome.SUCCESS:
            self._pay(tx, payout, now)
        elif result.outcome is NetworkOutcome.FAILED:
            self._fail(tx, payout, result.reason or "The network did not complete the payout.", now)
        else:
            next_at = now + int(self._deps.config.poll_interval_seconds * 1000)
            tx.payouts.update(attrs.evolve(payout, next_check_at=next_at))

    # --- shared steps ----------------------------------------------------------------------------

    def _pay(self, tx: Transaction, payout: models.Payout, now: int) -> models.Payout:
        paid = payout.mark_paid(now)
        self._move_money(tx, payout, ledger.post, now)
        tx.payouts.update(paid)
        self._tell(paid.status)
        self._emit(tx, paid, "disburse.succeeded", now)
        return paid

    def _fail(self, tx: Transaction, payout: models.Payout, reason: str, now: int) -> None:
        """PENDING or SENT -> FAILED: the money stays reserved until the payout is resolved."""
        failed = payout.mark_failed(reason, now)
        tx.payouts.update(failed)
        self._tell(failed.status)
        self._emit(tx, failed, "disburse.failed", now)

    def _move_money(self, tx: Transaction, payout: models.Payout, movement: Any, now: int) -> None:
        """Post or release a payout's reservation (the record's transition has refused a second one)."""
        movement(
            tx,
            entry_id=self._deps.refs.token("led"),
            merchant_id=payout.merchant_id,
            currency=payout.currency,
            amount=payout.amount,
            reference=payout.reference,
            now=now,
        )

    def _emit(self, tx: Transaction, payout: models.Payout, event_type: str, now: int) -> None:
        self._deps.emit(
            tx,
            payout.merchant_id,
            event_type,
            render.payout_event_data(payout, catalogue=self._deps.catalogue),
            now,
        )

    def _tell(self, status: PayoutStatus) -> None:
        """Inside the write transaction: the observer hears of ``status`` once it commits."""
        self._deps.tell(lambda observer: observer.payout_status(status))

    @staticmethod
    def _require(tx: Transaction, reference: str) -> models.Payout:
        payout = tx.payouts.get(reference)
        if payout is None:
            raise NotFoundError(f"No payout {reference[:80]}.", param="reference")
        return payout


def _request_of(payout: models.Payout) -> PayoutRequest:
    return PayoutRequest(
        reference=payout.reference,
        provider=payout.provider,
        phone=payout.phone,
        amount=payout.amount,
        currency=payout.currency,
        sent_at=payout.sent_at if payout.sent_at is not None else payout.created_at,
    )
