"""Paying money out: reservation, limits, review, dispatch and resolution.

States (explicit table in :mod:`paymentcore._domain.models`)::

    PENDING --dispatched, accepted--> SENT --confirmed--> PAID
    PENDING/SENT --refused or failed--> FAILED (money stays reserved until resolved)
    PENDING (awaiting review) --release--> SENT (dispatched at once) | --reject--> REJECTED (money back)
    FAILED --resolve: money moved--> PAID | --resolve: no money moved--> FAILED, money back

The reservation of a payout resolves once: ``Payout.resolution`` is set by the one transaction that
posts or releases it, and every later attempt is refused.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import attrs

from paymentcore._domain import models as models
from paymentcore._domain import render as render
from paymentcore._domain.catalogue import Catalogue, Currency
from paymentcore._domain.commands import CreateBulkPayouts, CreatePayout
from paymentcore._domain.errors import (
    BatchRefusedError,
    CapabilityDisabledError,
    IdempotencyKeyRequiredError,
    InvalidRequestError,
    InvalidTransitionError,
    MerchantNotApprovedError,
    NotFoundError,
    PaymentError,
    PayoutsNotConfiguredError,
    ProviderBlockedError,
)
from paymentcore._domain.event_types import EventType
from paymentcore._domain.fields import optional_text, required_text, required_value
from paymentcore._domain.limits import (
    MAX_MERCHANT_REFERENCE_LENGTH,
    MAX_PHONE_LENGTH,
    MAX_RECIPIENT_NAME_LENGTH,
)
from paymentcore._domain.models import (
    BatchMode,
    BatchTally,
    IdempotencyRecord,
    Merchant,
    PayoutStatus,
    Settings,
)
from paymentcore._domain.money import parse_amount, to_decimal
from paymentcore._domain.pages import (
    DEFAULT_LIMIT,
    check_cursor,
    check_limit,
    check_member,
    check_text,
    page_of,
    unknown_cursor,
)
from paymentcore._domain.policy import (
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
from paymentcore._domain.queries import BATCH_OPEN_STATUSES, payout_is_due
from paymentcore._domain.records import (
    BatchItem,
    BatchPayout,
    BatchProgress,
    BatchStatus,
    BatchTotal,
    ItemError,
    OperatorBatch,
    Page,
    Payout,
    PayoutAllowance,
    PayoutBatch,
    PayoutItem,
    dump,
    dump_batch,
    from_ms,
    load,
    load_batch,
    payout_from,
)
from paymentcore._domain.references import BATCH_ID_KIND
from paymentcore._services import audit as audit
from paymentcore._services import ledger as ledger
from paymentcore._services.audit import DEFAULT_ACTOR
from paymentcore._services.deps import Deps, require_merchant
from paymentcore._services.idempotency import Answer, Idempotency, check_key
from paymentcore._services.work import LANE_DEPTH, Due, Runner, check_again_at
from paymentcore.ports import (
    NetworkError,
    NetworkOutcome,
    PayoutInputs,
    PayoutRequest,
    PayoutResult,
    Transaction,
)

log = logging.getLogger("paymentcore.worker")

#: the most items a bulk request may hold
MAX_BATCH_ITEMS = 1000


@attrs.frozen
class _Checked:
    """A payout's arguments once the catalogue has checked them (minor units, the detected network)."""

    currency: Currency
    amount: int
    phone: str
    country: str
    provider: str
    recipient_name: str | None
    merchant_reference: str | None


@attrs.frozen
class _NetworkAnswer:
    """What the network said to a hand-over (``handed_over``) or to a status check. After a hand-over
    the network took, also what it said when asked at once for the payout's status (``status``; None
    when that check failed: asked again at the next poll): both are written in one transaction."""

    handed_over: bool
    result: PayoutResult
    status: PayoutResult | None = None
    #: when the status it holds was asked (a wait the network named counts from then)
    asked_at: int | None = None


class Disburse:
    def __init__(self, deps: Deps, idempotency: Idempotency) -> None:
        self._deps = deps
        self._idem = idempotency
        self._payout_answer = Answer[Payout](dump, self._load_payout)
        self._batch_answer = Answer[PayoutBatch](dump_batch, lambda tx, kept, now: load_batch(kept))
        self._runner: Runner[models.Payout, _NetworkAnswer] = Runner(
            self,
            deps.store,
            deps.clock,
            kind="payouts",
            lease_ms=deps.config.dispatch_lease_seconds * 1000,
            write=deps.transaction,
            claiming=deps.claiming,
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
        key = check_key(idempotency_key)
        if key is None:
            raise IdempotencyKeyRequiredError(param="idempotency_key")
        asked = CreatePayout(
            amount=amount,
            currency=currency,
            phone=phone,
            recipient_name=recipient_name,
            provider=provider,
            country=country,
            merchant_reference=merchant_reference,
        )

        try:  # the arguments' checks need no database: made first, told in the API's order in the body
            checked: _Checked | None = self._check(asked)
            refused: PaymentError | None = None
        except PaymentError as error:
            checked, refused = None, error
        code = None if checked is None else checked.currency.code
        read: list[PayoutInputs] = []  # by prepare, in the body's own transaction

        def read_inputs(tx: Transaction, now: int) -> PayoutInputs:
            """Everything the checks read, and the key's kept answer, in one statement."""
            day, week = now - DAY_MS, now - WEEK_MS
            return tx.payouts.inputs(merchant_id, code, day_since=day, week_since=week, idempotency_key=key)

        def prepare(tx: Transaction, now: int) -> IdempotencyRecord | None:
            read.append(read_inputs(tx, now))
            return read[-1].kept

        def body(tx: Transaction, now: int) -> Payout:
            inputs = read.pop() if read else read_inputs(tx, now)
            if not inputs.settings.payouts_enabled:  # before any other check, as the API documents
                raise CapabilityDisabledError(BlockedBy.PLATFORM.message(""))
            if refused is not None:
                raise refused
            assert checked is not None
            merchant = inputs.merchant
            if merchant is None:
                raise NotFoundError(f"No merchant {merchant_id}.", param="merchant")
            if not merchant.approved:
                raise MerchantNotApprovedError()
            spends = {now - DAY_MS: inputs.spent_day, now - WEEK_MS: inputs.spent_week}

            def spent_since(since: int) -> int:
                known = spends.get(since)
                if known is not None:
                    return known
                return tx.payouts.spent(merchant_id, checked.currency.code, since)

            maximum = checked.currency.max_minor
            payout = self._admit(
                tx,
                merchant,
                inputs.settings,
                checked,
                now,
                limits_for=lambda code: effective_limits(inputs.limits, maximum),
                spent_since=spent_since,
                available=inputs.available or 0,  # read under the merchant's lock: no balance is none
            )
            return payout_from(payout, catalogue=self._deps.catalogue)

        # a replay needs no write lock: answered from a read first (the original answer, whatever changed
        # since), then again under the lock
        return self._idem.run(
            self._deps, merchant_id, key, asked, body, self._payout_answer, read_first=True, prepare=prepare
        )

    def _check(self, asked: CreatePayout | PayoutItem) -> _Checked:
        """The checks of a payout's arguments that need no database (the catalogue's), in the order the
        API reports them; the first refusal raises."""
        cat = self._deps.catalogue
        cur = cat.currency(required_value(asked.currency, "currency"), settleable=True)
        minor = parse_amount(required_value(asked.amount, "amount"), cur)
        raw_phone = required_text(asked.phone, "phone", max_length=MAX_PHONE_LENGTH)
        recipient_name = optional_text(
            asked.recipient_name, "recipient_name", max_length=MAX_RECIPIENT_NAME_LENGTH
        )
        merchant_reference = optional_text(
            asked.merchant_reference, "merchant_reference", max_length=MAX_MERCHANT_REFERENCE_LENGTH
        )
        where = cat.country(asked.country if asked.country is not None else "CM")
        cat.check_currency_for_country(cur, where)
        named = cat.provider(asked.provider) if asked.provider is not None else None
        local_phone, network = cat.resolve_mobile(country=where, phone=raw_phone, provider=named)
        return _Checked(
            currency=cur,
            amount=minor,
            phone=local_phone,
            country=where.code,
            provider=network.code,
            recipient_name=recipient_name,
            merchant_reference=merchant_reference,
        )

    def _admit(
        self,
        tx: Transaction,
        merchant: Merchant,
        settings: Settings,
        checked: _Checked,
        now: int,
        *,
        limits_for: Callable[[str], EffectiveLimits],
        spent_since: Callable[[int], int],
        batch: _BatchWrites | None = None,
        index: int = 0,
        available: int | None = None,
    ) -> models.Payout:
        """The checks that need the database (switches, provider, ceilings, the live balance), then the
        reservation and the PENDING payout. Nothing is written unless every check passes, so a refusal
        leaves the transaction as it was (a bulk request goes on with its next item). ``available``:
        the balance read with the payout's inputs, in this unit (:func:`ledger.reserve`).

        Alone, the reservation and the payout are written here. In a bulk request (``batch``) the
        balance check is the same (:func:`ledger.check_funds`), against the balance the earlier items
        left, but the writes are kept and made together once every item is checked."""
        deps = self._deps
        cur = checked.currency
        blocked = blocked_by(settings, merchant, cur.code)
        if blocked is not None:
            raise PayoutsNotConfiguredError(blocked.message(cur.code), param="currency")
        if checked.provider in merchant.blocked_providers:
            raise ProviderBlockedError(
                f"This account is restricted from {checked.provider}.", param="provider"
            )
        limits = limits_for(cur.code)
        check_limits(limits, checked.amount, cur, now=now, spent_since=spent_since)
        reference = deps.refs.payout(now)
        entry_id = deps.refs.token("led")
        if batch is None:  # the one conditional step that can still refuse: it writes only if it moves
            ledger.reserve(
                tx,
                entry_id=entry_id,
                merchant_id=merchant.id,
                currency=cur.code,
                amount=checked.amount,
                reference=reference,
                now=now,
                decimals=cur.decimals,
                available=available,
            )
        else:
            batch.reservations.reserve(
                entry_id=entry_id,
                currency=cur.code,
                amount=checked.amount,
                reference=reference,
                now=now,
                decimals=cur.decimals,
            )
        held = held_for_review(limits, checked.amount)
        payout = models.Payout(
            reference=reference,
            merchant_id=merchant.id,
            status=PayoutStatus.PENDING,
            amount=checked.amount,
            currency=cur.code,
            phone=checked.phone,
            country=checked.country,
            provider=checked.provider,
            recipient_name=checked.recipient_name,
            merchant_reference=checked.merchant_reference,
            awaiting_review=held,
            created_at=now,
            updated_at=now,
            status_reason=REVIEW_REASON if held else None,
            next_check_at=None if held else now,
            batch_id=None if batch is None else batch.batch_id,
            batch_index=None if batch is None else index,
        )
        if batch is None:
            tx.payouts.add(payout)
        else:
            batch.payouts.append(payout)
        self._tell(payout.status)
        return payout

    def _load_payout(self, tx: Transaction, kept: Any, now: int) -> Payout:
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

    # --- bulk requests ---------------------------------------------------------------------------

    def create_bulk(
        self,
        merchant_id: str,
        *,
        items: Sequence[PayoutItem],
        mode: BatchMode | str,
        idempotency_key: str,
    ) -> PayoutBatch:
        """Create up to 1,000 payouts at once, in one transaction; the batch, with every item's outcome.

        Each item is checked exactly as :meth:`create` checks a payout, in request order: the ceilings
        and the balance see the items accepted before it. ``mode`` ``each`` (:attr:`BatchMode.EACH`)
        accepts or refuses every item on its own (a refused item is in ``items`` with its ``error``, and
        moves nothing); ``all`` refuses the whole request with :class:`BatchRefusedError` when one item
        is refused, and then nothing is created or reserved.

        Refused whole, with nothing written (InvalidRequestError, ``param`` naming the item as
        ``items[3].merchant_reference``): ``items`` not a sequence of 1 to 1,000 :class:`PayoutItem`, an
        item without a ``merchant_reference``, or two items with the same one. Refused whole as well,
        as a single payout is: payouts off platform-wide, the merchant not approved. The same
        ``idempotency_key`` with the same request answers the batch as it was created; with another
        request it raises IdempotencyKeyReusedError. A request refused whole keeps nothing, so it can be
        sent again with the same key.
        """
        deps = self._deps
        key = check_key(idempotency_key)
        if key is None:
            raise IdempotencyKeyRequiredError(param="idempotency_key")
        wanted = _check_mode(mode)
        asked = _check_items(items)
        command = CreateBulkPayouts(
            mode=wanted, items=tuple(CreatePayout(**attrs.asdict(item, recurse=False)) for item in asked)
        )

        def body(tx: Transaction, now: int) -> PayoutBatch:
            settings = tx.settings.get()
            if not settings.payouts_enabled:  # refuses every item alike: the request, as a payout's
                raise CapabilityDisabledError(BlockedBy.PLATFORM.message(""))
            merchant = require_merchant(tx, merchant_id)
            if not merchant.approved:
                raise MerchantNotApprovedError()
            writes = _BatchWrites(deps.refs.token(BATCH_ID_KIND), ledger.Reservations(tx, merchant.id))
            limits: dict[str, EffectiveLimits] = {}  # per currency, read once: they cannot change meanwhile

            def limits_for(code: str) -> EffectiveLimits:
                if code not in limits:
                    limits[code] = self._effective(tx, merchant.id, code)
                return limits[code]

            spend = _BatchSpend(tx, merchant.id)
            outcomes: list[BatchItem] = []
            refusals: dict[str, Any] = {}
            for index, item in enumerate(asked):
                try:
                    checked = self._check(item)
                    payout = self._admit(
                        tx,
                        merchant,
                        settings,
                        checked,
                        now,
                        limits_for=limits_for,
                        spent_since=spend.since(checked.currency.code),
                        batch=writes,
                        index=index,
                    )
                except PaymentError as error:
                    refused = ItemError(
                        code=error.code, message=error.message, param=error.param, details=error.details
                    )
                    outcomes.append(BatchItem(index, item.merchant_reference, error=refused))
                    refusals[str(index)] = {
                        "merchantReference": item.merchant_reference,
                        "code": refused.code,
                        "message": refused.message,
                        "param": refused.param,
                        "details": refused.details,
                    }
                    continue
                spend.add(payout.currency, payout.amount)
                outcomes.append(
                    BatchItem(
                        index,
                        item.merchant_reference,
                        payout=BatchPayout(payout.reference, payout.status, payout.awaiting_review),
                    )
                )
            if wanted is BatchMode.ALL and refusals:
                raise _refused(outcomes)  # rolls the transaction back: nothing was created or reserved
            made = writes.payouts
            batch = models.PayoutBatch(
                id=writes.batch_id,
                merchant_id=merchant.id,
                mode=wanted,
                item_count=len(asked),
                created_at=now,
                refusals=refusals,
                completed_at=None if made else now,  # nothing accepted: nothing left to wait for
            )
            writes.reservations.write()  # one balance move per currency, every journal entry
            tx.payouts.add_many(made)
            tx.batches.add(batch)
            record = _batch_record(batch, _tally(made), outcomes, deps.catalogue, has_more=False)
            if not made:
                self._emit_completed(tx, batch, record, now)
            return record

        return self._idem.run(deps, merchant_id, key, command, body, self._batch_answer, read_first=True)

    def get_bulk(
        self,
        merchant_id: str,
        batch_id: str,
        *,
        limit: int = DEFAULT_LIMIT,
        starting_after: int | None = None,
    ) -> PayoutBatch:
        """The merchant's batch ``batch_id`` as it is now: its progress (the payouts per status) and one
        page of its items in request order (``limit``, 1 to 100, after the item whose index is
        ``starting_after``). NotFoundError also for another merchant's batch."""
        limit = check_limit(limit)
        after = _check_index(starting_after)
        with self._deps.store.read() as tx:
            known = isinstance(batch_id, str) and batch_id and "\x00" not in batch_id
            batch = tx.batches.get(batch_id) if known else None
            if batch is None or batch.merchant_id != merchant_id:
                raise NotFoundError("No such batch on this account.")
            return self._read_batch(tx, batch, limit=limit, after=after)

    def inspect_bulk(
        self, batch_id: str, *, limit: int = DEFAULT_LIMIT, starting_after: int | None = None
    ) -> OperatorBatch:
        """Any merchant's batch, as an operator sees it (the console); NotFoundError when unknown."""
        limit = check_limit(limit)
        after = _check_index(starting_after)
        with self._deps.store.read() as tx:
            known = isinstance(batch_id, str) and batch_id and "\x00" not in batch_id
            batch = tx.batches.get(batch_id) if known else None
            if batch is None:
                raise NotFoundError(f"No batch {str(batch_id)[:80]!r}.", param="batch_id")
            return OperatorBatch(batch.merchant_id, self._read_batch(tx, batch, limit=limit, after=after))

    def _read_batch(
        self, tx: Transaction, batch: models.PayoutBatch, *, limit: int, after: int | None
    ) -> PayoutBatch:
        if after is not None and after >= batch.item_count:
            raise InvalidRequestError(
                f"starting_after must be the index of an item of this batch (0 to {batch.item_count - 1}).",
                param="starting_after",
            )
        first = 0 if after is None else after + 1
        last = min(first + limit, batch.item_count)  # the page holds the indexes first .. last - 1
        payouts = {
            payout.batch_index: payout
            for payout in tx.payouts.in_batch(batch.id, after=after, limit=last - first)
        }
        items = []
        for index in range(first, last):
            payout = payouts.get(index)
            refusal = batch.refusals.get(str(index))
            if payout is not None:
                reference = payout.merchant_reference or ""
                items.append(
                    BatchItem(
                        index,
                        reference,
                        payout=BatchPayout(payout.reference, payout.status, payout.awaiting_review),
                    )
                )
            elif refusal is not None:
                items.append(BatchItem(index, str(refusal["merchantReference"]), error=_item_error(refusal)))
        return _batch_record(
            batch,
            tx.payouts.batch_tally(batch.id),
            items,
            self._deps.catalogue,
            has_more=last < batch.item_count,
        )

    def _emit_completed(
        self, tx: Transaction, batch: models.PayoutBatch, record: PayoutBatch, now: int
    ) -> None:
        self._deps.emit(
            tx, batch.merchant_id, EventType.DISBURSE_BULK_COMPLETED, render.batch_event_data(record), now
        )

    def _after_final(self, tx: Transaction, before: models.Payout, after: models.Payout, now: int) -> None:
        """Inside the transaction that made a payout final: if it was its batch's last open payout, the
        batch completes here, once (``completed_at``), with ``disburse.bulk.completed``."""
        if after.batch_id is None or before.status not in BATCH_OPEN_STATUSES:
            return
        if after.status in BATCH_OPEN_STATUSES or tx.payouts.batch_open(after.batch_id):
            return
        batch = tx.batches.get(after.batch_id)
        if batch is None or batch.completed_at is not None:
            return
        done = attrs.evolve(batch, completed_at=now)
        tx.batches.update(done)
        record = _batch_record(
            done, tx.payouts.batch_tally(done.id), (), self._deps.catalogue, has_more=False
        )
        self._emit_completed(tx, done, record, now)

    # --- reading ---------------------------------------------------------------------------------

    def get(self, merchant_id: str, reference: str) -> Payout:
        """The merchant's payout ``reference``; NotFoundError also for another merchant's."""
        with self._deps.glance() as tx:
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
        batch: str | None = None,
    ) -> Page[Payout]:
        """The merchant's payouts, newest first, ``limit`` (1 to 100) at a time.

        ``starting_after`` is the reference of the previous page's last payout; one that is not the
        merchant's raises InvalidRequestError (param ``starting_after``). ``status``,
        ``merchant_reference`` and ``batch`` (a bulk request's id, ``bat_...``) keep only the payouts
        that have them.
        """
        limit = check_limit(limit)
        after = check_cursor(starting_after)
        wanted = check_member(status, PayoutStatus, "status")
        reference = check_text(
            merchant_reference, "merchant_reference", max_length=MAX_MERCHANT_REFERENCE_LENGTH
        )
        batch_id = check_text(batch, "batch", max_length=200)
        with self._deps.store.read() as tx:
            rows = tx.payouts.page(
                merchant_id,
                limit=limit + 1,
                after=after,
                status=wanted,
                merchant_reference=reference,
                batch_id=batch_id,
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

        ``actor`` is who releases it (see :mod:`paymentcore._services.audit`); the release is audited.
        """
        deps = self._deps
        actor = audit.check_actor(actor)
        merchant_id = self.find(reference).merchant_id  # its unit takes only this merchant's lock
        with deps.transaction(merchant_id) as tx:
            payout = self._require(tx, reference)
            released = payout.release_from_review(deps.clock.now())
            tx.payouts.update(released)
            self._audit(tx, actor, "payout.release", payout, released)
        self._runner.run_one(reference, merchant_id=merchant_id)
        return self._public(self.find(reference))

    def reject(self, reference: str, *, actor: str = DEFAULT_ACTOR) -> Payout:
        """Review decline: REJECTED, the reservation released, event disburse.failed (audited)."""
        deps = self._deps
        actor = audit.check_actor(actor)
        with deps.transaction(self.find(reference).merchant_id) as tx:  # only this merchant's lock
            payout = self._require(tx, reference)
            now = deps.clock.now()
            rejected = payout.reject(now)
            self._move_money(tx, payout, ledger.release, now)
            tx.payouts.update(rejected)
            self._tell(rejected.status)
            self._emit(tx, rejected, EventType.DISBURSE_FAILED, now)
            self._after_final(tx, payout, rejected, now)
            self._audit(tx, actor, "payout.reject", payout, rejected)
            return self._public(rejected)

    def resolve(self, reference: str, *, actor: str = DEFAULT_ACTOR) -> Payout:
        """Ask the network whether a FAILED (or never-confirmed SENT) payout's money moved, and settle it
        (audited)."""
        deps = self._deps
        actor = audit.check_actor(actor)
        payout = self.find(reference)
        refused = payout.why_not_resolve()
        if refused is not None:
            raise InvalidTransitionError(refused)
        moved = deps.network.money_moved(_request_of(payout))
        with deps.transaction(payout.merchant_id) as tx:
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
                self._emit(tx, resolved, EventType.DISBURSE_FAILED, now)
            self._after_final(tx, current, resolved, now)
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

    # --- the worker's part (a Task of paymentcore._services.work) -------------------------------------------

    def process_due(self, limit: int = 100) -> int:
        return self._runner.run_due(limit)

    def advance(self, reference: str) -> None:
        """Dispatch a due PENDING payout, or ask the network about a SENT one (its units take only its
        merchant's lock; a payout never changes merchant); no such payout, nothing to do."""
        try:
            merchant_id = self.find(reference).merchant_id
        except NotFoundError:
            return
        self._runner.run_one(reference, merchant_id=merchant_id)

    def due(self, tx: Transaction, now: int, limit: int) -> builtins.list[Due]:
        # the store lists a round over the merchants with work (_queries.payouts_in_due_order), so the
        # payouts of a merchant's batch of 1,000 do not go before every other merchant's payouts; a lane
        # per provider: a mobile network that hangs holds up only its own payouts (LANE_DEPTH of each
        # listed: the rest would only be decoded to wait for the next listing)
        due = tx.payouts.due_refs(now, limit, per_lane=LANE_DEPTH)  # the claims read the records
        return [Due(ref.key, ref.lane, merchant=ref.merchant) for ref in due]

    def renew(self, tx: Transaction, key: str, held_until: int, until: int) -> bool:
        payout = tx.payouts.get(key)
        if payout is None or payout.next_check_at != held_until:
            return False
        tx.payouts.update(attrs.evolve(payout, next_check_at=until))
        return True

    def prefetch(self, tx: Transaction, keys: Sequence[str]) -> None:
        tx.payouts.get_many(keys)  # a batch's payouts in one statement; each claim's get reads none

    def claim(self, tx: Transaction, key: str, now: int) -> models.Payout | None:
        payout = tx.payouts.get(key)
        if payout is None or not payout_is_due(payout, now):
            return None
        # another worker skips it until the lease runs out
        lease = now + self._deps.config.dispatch_lease_seconds * 1000
        if payout.status is PayoutStatus.PENDING and payout.sent_at is None:
            payout = attrs.evolve(payout, next_check_at=lease, sent_at=now)
        else:
            payout = attrs.evolve(payout, next_check_at=lease)
        tx.payouts.update(payout)
        return payout

    def act(self, claim: models.Payout, now: int) -> _NetworkAnswer | None:
        """Hand a PENDING payout over and, when the network takes it, ask for its status at once; or ask
        about a SENT one."""
        network = self._deps.network
        request = _request_of(claim)
        try:
            if claim.status is not PayoutStatus.PENDING:
                return _NetworkAnswer(
                    handed_over=False, result=network.payout_status(request, now), asked_at=now
                )
            sent = network.send_payout(request)
        except NetworkError:
            return None  # the lease runs out and a worker tries again, with the same reference
        if sent.outcome is NetworkOutcome.FAILED:
            return _NetworkAnswer(handed_over=True, result=sent)
        asked_at = self._deps.clock.now()
        try:  # what the step after the hand-over would ask, asked before it is written (one write)
            status: PayoutResult | None = network.payout_status(request, asked_at)
        except Exception as error:  # nothing of it may cost the hand-over: written, asked at the next poll
            if not isinstance(error, NetworkError):
                log.exception("payout %s: the status check after its hand-over failed", claim.reference)
            status = None
        return _NetworkAnswer(handed_over=True, result=sent, status=status, asked_at=asked_at)

    def record(self, tx: Transaction, claim: models.Payout, outcome: _NetworkAnswer, now: int) -> bool:
        """Write what the network said; never a next step at once: a status check that failed right
        after the hand-over is made again at the next poll, as any status check that fails."""
        status, asked_at = outcome.status, outcome.asked_at
        if not outcome.handed_over:
            self._after_check(tx, claim.reference, outcome.result, now, asked_at=asked_at)
        elif status is None or status.outcome is NetworkOutcome.PENDING:
            # refused; taken and its status not learnt; or taken and not completed yet: one write, the
            # status asked again at the next poll (or when the network said it would know)
            check_at = self._check_again(now, status, asked_at)
            self._after_send(tx, claim.reference, outcome.result, now, check_at=check_at, status=status)
        else:  # taken and already completed (or failed): SENT and the outcome in one write of the row
            sent = self._after_send(tx, claim.reference, outcome.result, now, check_at=now, write=False)
            if sent is not None:
                self._after_check(tx, claim.reference, status, now, asked_at=asked_at, payout=sent)
        return False

    def _check_again(self, now: int, status: PayoutResult | None, asked_at: int | None) -> int:
        hint = None if status is None else status.check_after_ms
        return check_again_at(now, self._deps.config.poll_interval_seconds, hint, asked_at=asked_at)

    def _after_send(
        self,
        tx: Transaction,
        reference: str,
        result: PayoutResult,
        now: int,
        *,
        check_at: int,
        status: PayoutResult | None = None,
        write: bool = True,
    ) -> models.Payout | None:
        """Record the hand-over (SENT, its status asked at ``check_at``); the SENT payout when the
        network took it, else None. ``status``: a PENDING answer asked right after, whose reference is
        kept if the hand-over had none. ``write=False``: the row is not written here, because the caller
        writes the outcome the network already gave in the same unit (the event is emitted either way)."""
        payout = self._require(tx, reference)
        if payout.status is not PayoutStatus.PENDING:
            return None
        if result.outcome is NetworkOutcome.FAILED:
            self._fail(tx, payout, result.reason or "The network refused the payout.", now)
            return None
        provider_reference = result.provider_reference or (status.provider_reference if status else None)
        sent = payout.mark_sent(now, provider_reference=provider_reference, next_check_at=check_at)
        if write:
            tx.payouts.update(sent)
        self._tell(sent.status)
        self._emit(tx, sent, EventType.DISBURSE_SENT, now)
        return sent

    def _after_check(
        self,
        tx: Transaction,
        reference: str,
        result: PayoutResult,
        now: int,
        *,
        asked_at: int | None = None,
        payout: models.Payout | None = None,
    ) -> None:
        """Record a status answer for the SENT payout ``reference`` (``payout``: its SENT record not yet
        written, which every branch below writes)."""
        payout = payout if payout is not None else self._require(tx, reference)
        if payout.status is not PayoutStatus.SENT:
            return
        if result.provider_reference and not payout.provider_reference:
            payout = attrs.evolve(payout, provider_reference=result.provider_reference)
        if result.outcome is NetworkOutcome.SUCCESS:
            self._pay(tx, payout, now)
        elif result.outcome is NetworkOutcome.FAILED:
            self._fail(tx, payout, result.reason or "The network did not complete the payout.", now)
        else:
            tx.payouts.update(attrs.evolve(payout, next_check_at=self._check_again(now, result, asked_at)))

    # --- shared steps ----------------------------------------------------------------------------

    def _pay(self, tx: Transaction, payout: models.Payout, now: int) -> models.Payout:
        paid = payout.mark_paid(now)
        self._move_money(tx, payout, ledger.post, now)
        tx.payouts.update(paid)
        self._tell(paid.status)
        self._emit(tx, paid, EventType.DISBURSE_SUCCEEDED, now)
        self._after_final(tx, payout, paid, now)
        return paid

    def _fail(self, tx: Transaction, payout: models.Payout, reason: str, now: int) -> None:
        """PENDING or SENT -> FAILED: the money stays reserved until the payout is resolved."""
        failed = payout.mark_failed(reason, now)
        tx.payouts.update(failed)
        self._tell(failed.status)
        self._emit(tx, failed, EventType.DISBURSE_FAILED, now)
        self._after_final(tx, payout, failed, now)

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

    def _emit(self, tx: Transaction, payout: models.Payout, event_type: EventType, now: int) -> None:
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


# --- bulk requests: the checks of the request as a whole, and the batch record --------------------------


def _check_mode(mode: object) -> BatchMode:
    if isinstance(mode, BatchMode):
        return mode
    for member in BatchMode:
        if isinstance(mode, str) and mode == member.value:
            return member
    raise InvalidRequestError("mode must be each or all.", param="mode")


def _check_items(items: object) -> list[PayoutItem]:
    """The items of a bulk request, or InvalidRequestError naming the first item that makes it
    malformed (nothing of such a request is done)."""
    if isinstance(items, str | bytes) or not isinstance(items, Sequence) or not items:
        raise InvalidRequestError(f"items must be a list of 1 to {MAX_BATCH_ITEMS:,} payouts.", param="items")
    if len(items) > MAX_BATCH_ITEMS:
        raise InvalidRequestError(
            f"A batch holds at most {MAX_BATCH_ITEMS:,} items: items[{MAX_BATCH_ITEMS}] is one too many"
            f" ({len(items):,} given).",
            param=f"items[{MAX_BATCH_ITEMS}]",
            details={"index": MAX_BATCH_ITEMS, "maximum": MAX_BATCH_ITEMS, "count": len(items)},
        )
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        if not isinstance(item, PayoutItem):
            raise InvalidRequestError(
                f"items[{index}] must be a payout.", param=f"items[{index}]", details={"index": index}
            )
        param = f"items[{index}].merchant_reference"
        reference = item.merchant_reference
        if not isinstance(reference, str) or not reference:
            raise InvalidRequestError(
                f"{param} is required: each item of a batch has its own.",
                param=param,
                details={"index": index},
            )
        if reference in seen:
            raise InvalidRequestError(
                f"{param} repeats the one of item {seen[reference]}: each item of a batch has its own.",
                param=param,
                details={"index": index, "sameAs": seen[reference]},
            )
        seen[reference] = index
    return list(items)


def _check_index(value: object) -> int | None:
    """None, or the index of the item the previous page of a batch's items ended with."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidRequestError(
            "starting_after must be the index of the last item of the previous page.", param="starting_after"
        )
    return value


@attrs.define
class _BatchWrites:
    """What a bulk request has accepted so far, written together once every item is checked: the
    reservations (their balance checks made as each item came) and the payouts, in item order."""

    batch_id: str
    reservations: ledger.Reservations
    payouts: list[models.Payout] = attrs.field(factory=list)


class _BatchSpend:
    """What a bulk request's rolling ceilings see, item after item: what was spent before the request
    (read once per currency and window; the batch's own payouts are written only at its end) plus the
    items it accepted so far, all created now, so inside every window."""

    def __init__(self, tx: Transaction, merchant_id: str) -> None:
        self._tx = tx
        self._merchant_id = merchant_id
        self._before: dict[tuple[str, int], int] = {}
        self._accepted: dict[str, int] = {}

    def since(self, currency: str) -> Callable[[int], int]:
        def spent(since: int) -> int:
            if (currency, since) not in self._before:
                self._before[(currency, since)] = self._tx.payouts.spent(self._merchant_id, currency, since)
            return self._before[(currency, since)] + self._accepted.get(currency, 0)

        return spent

    def add(self, currency: str, amount: int) -> None:
        self._accepted[currency] = self._accepted.get(currency, 0) + amount


def _tally(payouts: Sequence[models.Payout]) -> list[BatchTally]:
    sums: dict[tuple[PayoutStatus, str], tuple[int, int]] = {}
    for payout in payouts:
        count, amount = sums.get((payout.status, payout.currency), (0, 0))
        sums[(payout.status, payout.currency)] = (count + 1, amount + payout.amount)
    return [
        BatchTally(status, currency, count, amount) for (status, currency), (count, amount) in sums.items()
    ]


def _batch_record(
    batch: models.PayoutBatch,
    tally: Sequence[BatchTally],
    items: Sequence[BatchItem],
    catalogue: Catalogue,
    *,
    has_more: bool,
) -> PayoutBatch:
    """The batch as its merchant sees it: counts, totals and progress per currency (every status, zeros
    included), and the ``items`` given."""
    found = {(row.status, row.currency): row for row in tally}
    currencies = sorted({row.currency for row in tally})
    progress: list[BatchProgress] = []
    totals: list[BatchTotal] = []
    for code in currencies:
        render_amount = catalogue.currencies[code].render
        rows = [found.get((status, code)) for status in PayoutStatus]
        progress.extend(
            BatchProgress(
                status,
                code,
                row.count if row is not None else 0,
                render_amount(row.amount if row is not None else 0),
            )
            for status, row in zip(PayoutStatus, rows, strict=True)
        )
        totals.append(
            BatchTotal(
                code,
                sum(row.count for row in rows if row is not None),
                render_amount(sum(row.amount for row in rows if row is not None)),
            )
        )
    return PayoutBatch(
        id=batch.id,
        mode=batch.mode,
        status=BatchStatus.PROCESSING if batch.completed_at is None else BatchStatus.COMPLETED,
        created_at=from_ms(batch.created_at),
        completed_at=None if batch.completed_at is None else from_ms(batch.completed_at),
        item_count=batch.item_count,
        accepted=sum(total.count for total in totals),
        refused=len(batch.refusals),
        totals=tuple(totals),
        progress=tuple(progress),
        items=tuple(items),
        has_more=has_more,
    )


def _item_error(refusal: Mapping[str, Any]) -> ItemError:
    param = refusal.get("param")
    details = refusal.get("details")
    return ItemError(
        code=str(refusal["code"]),
        message=str(refusal["message"]),
        param=param if isinstance(param, str) else None,
        details=details if isinstance(details, dict) else None,
    )


def _refused(outcomes: Sequence[BatchItem]) -> BatchRefusedError:
    """The refusal of an all-or-none batch: every refused item, with its own error."""
    refused = [item for item in outcomes if item.error is not None]
    first = refused[0]
    assert first.error is not None
    return BatchRefusedError(
        f"{len(refused)} of {len(outcomes)} items were refused, so none was accepted (mode all); the first"
        f" is item {first.index}: {first.error.message}",
        details={
            "itemCount": len(outcomes),
            "refusedCount": len(refused),
            "items": [
                {
                    "index": item.index,
                    "merchantReference": item.merchant_reference,
                    "error": _error_dict(item.error),
                }
                for item in refused
                if item.error is not None
            ],
        },
        items=refused,
    )


def _error_dict(error: ItemError) -> dict[str, Any]:
    """An item's error in the API's error shape (``param`` and ``details`` only when there are some)."""
    shaped: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.param is not None:
        shaped["param"] = error.param
    if error.details is not None:
        shaped["details"] = dict(error.details)
    return shaped
