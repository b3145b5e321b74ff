"""Collecting money: direct charge, hosted checkout, the legacy payments path, and settlement.

States (an explicit table in :mod:`paymentcore._domain.models`)::

    PENDING --prompt handed to the network--> PROCESSING --cleared--> SUCCESS
       |                                          \\--not cleared / unanswered--> FAILED
       \\--checkout link expired before the payer chose--> FAILED (EXPIRED)

A charge is created PENDING with its prompt due; a checkout is PENDING until the payer submits the
hosted page. The worker hands the prompt to the network (PENDING -> PROCESSING) and asks for the
result. Settlement writes, in one transaction: the status, the net amount, the ledger credit and the
outbox event.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import attrs

from paymentcore._domain import models as models
from paymentcore._domain import render as render
from paymentcore._domain.catalogue import Currency, Provider
from paymentcore._domain.commands import Charge, Checkout, LegacyPayment
from paymentcore._domain.errors import (
    InvalidRequestError,
    MerchantNotApprovedError,
    NotFoundError,
    ProviderBlockedError,
    RecipientBusyError,
    UnknownProviderError,
)
from paymentcore._domain.event_types import EventType
from paymentcore._domain.fields import optional_text, optional_whole, required_value
from paymentcore._domain.limits import (
    DEFAULT_CHECKOUT_MINUTES,
    MAX_CHECKOUT_MINUTES,
    MAX_DESCRIPTION_LENGTH,
    MAX_MERCHANT_REFERENCE_LENGTH,
    MIN_CHECKOUT_MINUTES,
)
from paymentcore._domain.models import CollectionKind, CollectionStatus, Merchant
from paymentcore._domain.money import apply_rate, fee_for, parse_amount
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
    Collection,
    Page,
    collection_from,
    converts_on_settling,
    dump,
    is_payable,
    load,
)
from paymentcore._services import ledger as ledger
from paymentcore._services.deps import Deps, require_merchant
from paymentcore._services.idempotency import Answer, Idempotency, check_key
from paymentcore._services.work import LANE_DEPTH, Due, Runner, check_again_at
from paymentcore.ports import CollectionRequest, CollectionResult, NetworkError, NetworkOutcome, Transaction

FINAL = (CollectionStatus.SUCCESS, CollectionStatus.FAILED)
EXPIRED = "EXPIRED"
TIMEOUT = "TIMEOUT"


@attrs.frozen
class PaymentOption:
    """A way the payer can pay a checkout, with what they would be charged."""

    provider: Provider
    amount: int
    currency: Currency


@attrs.frozen
class CheckoutView:
    """What the hosted page shows."""

    collection: models.Collection
    merchant: Merchant
    options: tuple[PaymentOption, ...]
    payable: bool
    invoice: str | None  # the lightning invoice once the payer chose lightning


@attrs.frozen
class _CollectAnswer:
    """What one step learnt: the prompt went out (``submitted``), or the network's status (None when the
    network could not be reached)."""

    submitted: bool
    result: CollectionResult | None
    checked_at: int


class Collect:
    def __init__(self, deps: Deps, idempotency: Idempotency) -> None:
        self._deps = deps
        self._idem = idempotency
        self._answer = Answer[Collection](dump, self._load)
        self._runner: Runner[models.Collection, _CollectAnswer] = Runner(
            self,
            deps.store,
            deps.clock,
            kind="collections",
            lease_ms=deps.config.dispatch_lease_seconds * 1000,
            write=deps.transaction,
            claiming=deps.claiming,
        )

    @property
    def runner(self) -> Runner[models.Collection, _CollectAnswer]:
        """This service's background work, for the worker (:meth:`PaymentCore.start_worker`)."""
        return self._runner

    # --- requests --------------------------------------------------------------------------------

    def charge(
        self,
        merchant_id: str,
        *,
        amount: Decimal | int,
        currency: str,
        country: str,
        provider: str,
        phone: str,
        merchant_reference: str | None = None,
        description: str | None = None,
        idempotency_key: str | None = None,
    ) -> Collection:
        """A direct charge: the payment prompt goes to ``phone`` on ``provider``; PENDING until it clears.

        ``amount`` is in the currency's units (a float is refused). With an ``idempotency_key``, a retry
        with the same arguments answers the first charge and sends no second prompt.
        """
        deps = self._deps
        cat = deps.catalogue
        key = check_key(idempotency_key)
        command = Charge(
            amount=amount,
            currency=currency,
            country=country,
            provider=provider,
            phone=phone,
            merchant_reference=merchant_reference,
            description=description,
        )
        cur = cat.currency(required_value(currency, "currency"), settleable=True)
        minor = parse_amount(required_value(amount, "amount"), cur)
        where = cat.country(required_value(country, "country"))
        cat.check_currency_for_country(cur, where)
        network = cat.provider(required_value(provider, "provider"))
        local_phone, network = cat.resolve_mobile(
            country=where, phone=required_value(phone, "phone"), provider=network
        )
        merchant_reference = optional_text(
            merchant_reference, "merchant_reference", max_length=MAX_MERCHANT_REFERENCE_LENGTH
        )
        description = optional_text(description, "description", max_length=MAX_DESCRIPTION_LENGTH)

        def body(tx: Transaction, now: int) -> Collection:
            merchant = self._transacting_merchant(tx, merchant_id)
            self._check_provider_allowed(merchant, network)
            self._check_prompts(tx, local_phone, now)
            collection = models.Collection(
                reference=deps.refs.collection(now),
                merchant_id=merchant.id,
                kind=CollectionKind.CHARGE,
                status=CollectionStatus.PENDING,
                requested_amount=minor,
                requested_currency=cur.code,
                description=description or _default_description(merchant),
                merchant_reference=merchant_reference,
                created_at=now,
                expires_at=now + deps.config.prompt_timeout_seconds * 1000,
                updated_at=now,
                method=network.method,
                provider=network.code,
                phone=local_phone,
                country=where.code,
                submitted_at=now,
                next_check_at=now,
                charged_amount=minor,
                charged_currency=cur.code,
            )
            return self._add(tx, merchant, collection, now)

        return self._idem.run(deps, merchant_id, key, command, body, self._answer)

    def checkout(
        self,
        merchant_id: str,
        *,
        amount: Decimal | int,
        currency: str,
        description: str | None = None,
        merchant_reference: str | None = None,
        expires_in_minutes: int | None = None,
        idempotency_key: str | None = None,
    ) -> Collection:
        """A hosted checkout: a payment and the link (``checkout_url``) where the payer chooses how to pay.

        The link works for ``expires_in_minutes`` (1 to 10080, default 60: the
        ``*_CHECKOUT_MINUTES`` of ``paymentcore.limits``).
        """
        return self._checkout(
            merchant_id,
            CollectionKind.CHECKOUT,
            amount=amount,
            currency=currency,
            description=description,
            merchant_reference=merchant_reference,
            expires_in_minutes=expires_in_minutes,
            idempotency_key=idempotency_key,
        )

    def legacy_payment(
        self,
        merchant_id: str,
        *,
        amount: Decimal | int,
        currency: str,
        description: str | None = None,
        reference: str | None = None,
        expires_in_minutes: int | None = None,
        idempotency_key: str | None = None,
    ) -> Collection:
        """A payment of the legacy payments API: a checkout shown in the merchant's settlement currency."""
        return self._checkout(
            merchant_id,
            CollectionKind.LEGACY,
            amount=amount,
            currency=currency,
            description=description,
            merchant_reference=reference,
            expires_in_minutes=expires_in_minutes,
            idempotency_key=idempotency_key,
            reference_param="reference",
        )

    def _checkout(
        self,
        merchant_id: str,
        kind: CollectionKind,
        *,
        amount: Decimal | int,
        currency: str,
        description: str | None,
        merchant_reference: str | None,
        expires_in_minutes: int | None,
        idempotency_key: str | None,
        reference_param: str = "merchant_reference",
    ) -> Collection:
        deps = self._deps
        key = check_key(idempotency_key)
        command = (LegacyPayment if kind is CollectionKind.LEGACY else Checkout)(
            amount=amount,
            currency=currency,
            description=description,
            merchant_reference=merchant_reference,
            expires_in_minutes=expires_in_minutes,
        )
        cur = deps.catalogue.currency(required_value(currency, "currency"))
        minor = parse_amount(required_value(amount, "amount"), cur)
        description = optional_text(description, "description", max_length=MAX_DESCRIPTION_LENGTH)
        merchant_reference = optional_text(
            merchant_reference, reference_param, max_length=MAX_MERCHANT_REFERENCE_LENGTH
        )
        minutes = optional_whole(
            expires_in_minutes,
            "expires_in_minutes",
            default=DEFAULT_CHECKOUT_MINUTES,
            low=MIN_CHECKOUT_MINUTES,
            high=MAX_CHECKOUT_MINUTES,
        )

        def body(tx: Transaction, now: int) -> Collection:
            merchant = self._transacting_merchant(tx, merchant_id)
            collection = models.Collection(
                reference=deps.refs.collection(now),
                merchant_id=merchant.id,
                kind=kind,
                status=CollectionStatus.PENDING,
                requested_amount=minor,
                requested_currency=cur.code,
                description=description if description else _default_description(merchant),
                merchant_reference=merchant_reference,
                created_at=now,
                expires_at=now + minutes * 60_000,
                updated_at=now,
            )
            return self._add(tx, merchant, collection, now)

        return self._idem.run(deps, merchant_id, key, command, body, self._answer)

    def _add(
        self, tx: Transaction, merchant: Merchant, collection: models.Collection, now: int
    ) -> Collection:
        tx.collections.add(collection)
        self._tell(collection.status)
        return self._public(collection, merchant, now)

    def _load(self, tx: Transaction, kept: Any, now: int) -> Collection:
        record = load(kept)
        if isinstance(record, Collection):
            return record
        # an answer kept by a version before typed records: the collection it named, as it is now
        found = tx.collections.get(str(kept.get("reference", ""))) if isinstance(kept, dict) else None
        if found is None:
            raise NotFoundError("The collection this idempotency key created is gone.")
        return self._public(found, require_merchant(tx, found.merchant_id), now)

    def get(self, merchant_id: str, reference: str) -> Collection:
        """The merchant's collection ``reference``; NotFoundError also for another merchant's."""
        with self._deps.glance() as tx:
            collection = tx.collections.get(reference)
            if collection is None or collection.merchant_id != merchant_id:
                raise NotFoundError("No such collection on this account.")
            # the merchant's settlement currency shows only in a legacy payment not yet settled (a fact
            # of its own: the glance need not see it as of the collection's read)
            merchant = require_merchant(tx, merchant_id) if converts_on_settling(collection) else None
        return self._public(collection, merchant, self._deps.clock.now())

    def list(
        self,
        merchant_id: str,
        *,
        limit: int = DEFAULT_LIMIT,
        starting_after: str | None = None,
        status: CollectionStatus | None = None,
        merchant_reference: str | None = None,
    ) -> Page[Collection]:
        """The merchant's collections (charges, checkouts, legacy payments), newest first, ``limit``
        (1 to 100) at a time.

        ``starting_after`` is the reference of the previous page's last collection; one that is not the
        merchant's raises InvalidRequestError (param ``starting_after``). ``status`` and
        ``merchant_reference`` keep only the collections that have them.
        """
        limit = check_limit(limit)
        after = check_cursor(starting_after)
        wanted = check_member(status, CollectionStatus, "status")
        reference = check_text(
            merchant_reference, "merchant_reference", max_length=MAX_MERCHANT_REFERENCE_LENGTH
        )
        with self._deps.store.read() as tx:
            merchant = require_merchant(tx, merchant_id)
            rows = tx.collections.page(
                merchant_id, limit=limit + 1, after=after, status=wanted, merchant_reference=reference
            )
        if rows is None:
            raise unknown_cursor("collections")
        now = self._deps.clock.now()
        return page_of(rows, limit, lambda row: self._public(row, merchant, now))

    def _public(self, collection: models.Collection, merchant: Merchant | None, now: int) -> Collection:
        """``merchant``: None only where :func:`converts_on_settling` says its currency is not shown."""
        assert merchant is not None or not converts_on_settling(collection)
        return collection_from(
            collection,
            catalogue=self._deps.catalogue,
            settlement_currency=(
                merchant.settlement_currency if merchant is not None else collection.requested_currency
            ),
            public_url=self._deps.config.public_url,
            now=now,
        )

    def find(self, reference: str) -> models.Collection:
        with self._deps.store.read() as tx:
            collection = tx.collections.get(reference)
        if collection is None:
            raise NotFoundError("No such payment.")
        return collection

    # --- the hosted page -------------------------------------------------------------------------

    def view(self, reference: str) -> CheckoutView:
        deps = self._deps
        with deps.store.read() as tx:
            collection = tx.collections.get(reference)
            if collection is None or collection.kind is CollectionKind.CHARGE:
                raise NotFoundError("No such payment.")
            merchant = require_merchant(tx, collection.merchant_id)
        now = deps.clock.now()
        invoice = None
        if collection.provider == "lightning" and collection.charged_amount is not None:
            invoice = lightning_invoice(collection)
        return CheckoutView(
            collection=collection,
            merchant=merchant,
            options=tuple(self._options(collection, merchant)),
            payable=is_payable(collection, now),
            invoice=invoice,
        )

    def _options(self, collection: models.Collection, merchant: Merchant) -> builtins.list[PaymentOption]:
        cat = self._deps.catalogue
        source = cat.currencies[collection.requested_currency]
        options = []
        for provider in cat.providers.values():
            if provider.code in merchant.blocked_providers:
                continue
            target = cat.currencies[provider.currency]
            try:
                rate = cat.rates.rate(source.code, target.code)
            except KeyError:
                continue
            charged = apply_rate(collection.requested_amount, source.decimals, rate, target.decimals)
            if not target.min_minor <= charged <= target.max_minor:
                continue  # outside what that wallet can pay in one payment
            options.append(PaymentOption(provider=provider, amount=charged, currency=target))
        return options

    def pay(self, reference: str, provider: str, phone: str | None) -> Collection:
        """The payer chose how to pay on the hosted page: validate and queue the prompt.

        ``phone`` is the payer's mobile money number (None for Lightning, which pays an invoice).
        """
        deps = self._deps
        cat = deps.catalogue
        view = self.view(reference)
        if not view.payable:
            raise InvalidRequestError("This payment can no longer be paid.", param="reference")
        chosen = cat.provider(provider)
        option = next((o for o in view.options if o.provider.code == chosen.code), None)
        if option is None:
            if chosen.code in view.merchant.blocked_providers:
                raise ProviderBlockedError(param="provider")
            raise UnknownProviderError("This provider cannot pay this payment.", param="provider")
        local: str | None = None
        country: str | None = None
        if chosen.country is not None:
            country_rec = cat.countries[chosen.country]
            local, chosen = cat.resolve_mobile(country=country_rec, phone=phone, provider=chosen)
            country = country_rec.code
        # the collection's merchant's unit (a collection never changes merchant): the count of prompts to
        # the number spans merchants, and holds the number's own lock (CollectionRepository.prompts_since)
        with deps.transaction(view.merchant.id) as tx:
            now = deps.clock.now()
            collection = tx.collections.get(reference)
            if collection is None or not is_payable(collection, now):
                raise InvalidRequestError("This payment can no longer be paid.", param="reference")
            merchant = self._transacting_merchant(tx, collection.merchant_id)
            self._check_provider_allowed(merchant, chosen)
            if local is not None:
                self._check_prompts(tx, local, now)
            collection = attrs.evolve(
                collection,
                method=chosen.method,
                provider=chosen.code,
                phone=local,
                country=country,
                submitted_at=now,
                next_check_at=now,
                charged_amount=option.amount,
                charged_currency=option.currency.code,
                updated_at=now,
            )
            tx.collections.update(collection)
            return self._public(collection, merchant, now)

    # --- checks ----------------------------------------------------------------------------------

    @staticmethod
    def _transacting_merchant(tx: Transaction, merchant_id: str) -> Merchant:
        merchant = require_merchant(tx, merchant_id)
        if not merchant.approved:
            raise MerchantNotApprovedError()
        return merchant

    @staticmethod
    def _check_provider_allowed(merchant: Merchant, provider: Provider) -> None:
        if provider.code in merchant.blocked_providers:
            raise ProviderBlockedError(f"This account is restricted from {provider.code}.", param="provider")

    def _check_prompts(self, tx: Transaction, phone: str, now: int) -> None:
        config = self._deps.config
        since = now - config.prompt_window_seconds * 1000 + 1  # a prompt exactly a window old has aged out
        if tx.collections.prompts_since(phone, since) >= config.prompt_limit:
            raise RecipientBusyError(
                f"This number received {config.prompt_limit} prompts in the last "
                f"{config.prompt_window_seconds} seconds; wait and retry.",
                param="phone",
            )

    # --- the worker's part (a Task of paymentcore._services.work) -------------------------------------------

    def process_due(self, limit: int = 100) -> int:
        """Advance every open collection whose turn has come; returns how many were looked at."""
        return self._runner.run_due(limit)

    def advance(self, reference: str) -> None:
        """Send a due prompt, or ask the network about a prompt already sent, or expire a checkout (its
        units take only its merchant's lock; a collection never changes merchant); no such collection,
        nothing to do."""
        try:
            merchant_id = self.find(reference).merchant_id
        except NotFoundError:
            return
        self._runner.run_one(reference, merchant_id=merchant_id)

    def due(self, tx: Transaction, now: int, limit: int) -> builtins.list[Due]:
        # a lane per provider: a mobile network that hangs holds up only its own collections
        due = tx.collections.due_refs(now, limit, per_lane=LANE_DEPTH)  # the claims read the records
        return [Due(key=ref.key, lane=ref.lane, merchant=ref.merchant) for ref in due]

    def renew(self, tx: Transaction, key: str, held_until: int, until: int) -> bool:
        collection = tx.collections.get(key)
        if collection is None or collection.next_check_at != held_until:
            return False
        tx.collections.update(attrs.evolve(collection, next_check_at=until))
        return True

    def prefetch(self, tx: Transaction, keys: Sequence[str]) -> None:
        return None  # each item's claim reads its own rows

    def claim(self, tx: Transaction, key: str, now: int) -> models.Collection | None:
        collection = tx.collections.get(key)
        if collection is None or collection.status in FINAL:
            return None
        if collection.submitted_at is None:
            if collection.expires_at <= now:  # nothing to ask the network: the link ran out
                self._fail(tx, collection, EXPIRED, "The checkout link expired.", now)
            return None
        if collection.status is CollectionStatus.PENDING:
            if collection.next_check_at is None or collection.next_check_at > now:
                return None  # another worker is sending this prompt
            lease = now + self._deps.config.dispatch_lease_seconds * 1000
            tx.collections.update(attrs.evolve(collection, next_check_at=lease))
        return collection

    def act(self, claim: models.Collection, now: int) -> _CollectAnswer:
        """Send a PENDING collection's prompt, or ask about one already sent (never both in one step)."""
        network = self._deps.network
        request = _request_of(claim)
        try:
            if claim.status is CollectionStatus.PENDING:
                network.request_collection(request)
                return _CollectAnswer(submitted=True, result=None, checked_at=now)
            return _CollectAnswer(
                submitted=False, result=network.collection_status(request, now), checked_at=now
            )
        except NetworkError:
            return _CollectAnswer(submitted=False, result=None, checked_at=now)

    def record(self, tx: Transaction, claim: models.Collection, outcome: _CollectAnswer, now: int) -> bool:
        current = tx.collections.get(claim.reference)
        if current is None or current.status is not claim.status:
            return False  # another worker moved it meanwhile
        if outcome.submitted:  # the prompt is out: PROCESSING, and its status is asked at once
            tx.collections.update(current.start_processing(now, current.next_check_at or now))
            self._tell(CollectionStatus.PROCESSING)
            return True
        result = outcome.result
        timeout_at = (claim.submitted_at or 0) + self._deps.config.prompt_timeout_seconds * 1000
        if result is None:
            self._recheck(tx, current, now, None, timeout_at)
        elif result.outcome is NetworkOutcome.SUCCESS:
            self._settle(tx, current, now)
        elif result.outcome is NetworkOutcome.FAILED:
            category = result.failure_category or "DECLINED"
            self._fail(tx, current, category, result.failure_reason or "The payment did not clear.", now)
        elif outcome.checked_at >= timeout_at:
            self._fail(tx, current, TIMEOUT, "The payer did not answer in time.", now)
        else:
            self._recheck(tx, current, now, result.check_after_ms, timeout_at, asked_at=outcome.checked_at)
        return False

    def _recheck(
        self,
        tx: Transaction,
        current: models.Collection,
        now: int,
        hint_ms: int | None,
        timeout_at: int,
        *,
        asked_at: int | None = None,
    ) -> None:
        poll = self._deps.config.poll_interval_seconds
        next_at = check_again_at(now, poll, hint_ms, asked_at=asked_at, latest=timeout_at)
        tx.collections.update(attrs.evolve(current, next_check_at=next_at))

    def _settle(self, tx: Transaction, current: models.Collection, now: int) -> None:
        """PROCESSING -> SUCCESS: the status, the net credit and the outbox event, in the caller's tx."""
        assert current.charged_amount is not None and current.charged_currency is not None
        merchant = require_merchant(tx, current.merchant_id)
        fee = fee_for(current.charged_amount, merchant.collect_fee_ppm)
        net = current.charged_amount - fee
        settled = current.settle(net=net, fee=fee, now=now)
        ledger.credit(
            tx,
            entry_id=self._deps.refs.token("led"),
            merchant_id=merchant.id,
            currency=current.charged_currency,
            net=net,
            fee=fee,
            reference=current.reference,
            now=now,
        )
        tx.collections.update(settled)
        self._tell(settled.status)
        self._emit(tx, settled, EventType.COLLECT_SUCCEEDED, now)

    def _fail(
        self, tx: Transaction, current: models.Collection, category: str, reason: str, now: int
    ) -> None:
        failed = current.fail(category, reason, now)
        tx.collections.update(failed)
        self._tell(failed.status)
        self._emit(tx, failed, EventType.COLLECT_FAILED, now)

    def _tell(self, status: CollectionStatus) -> None:
        """Inside the write transaction: the observer hears of ``status`` once it commits."""
        self._deps.tell(lambda observer: observer.collection_status(status))

    def _emit(self, tx: Transaction, collection: models.Collection, event_type: EventType, now: int) -> None:
        deps = self._deps
        data = render.collection_event_data(collection, catalogue=deps.catalogue, now=now)
        deps.emit(tx, collection.merchant_id, event_type, data, now)


def _default_description(merchant: Merchant) -> str:
    return f"Payment to {merchant.name}"


def _request_of(collection: models.Collection) -> CollectionRequest:
    assert collection.provider is not None and collection.submitted_at is not None
    assert collection.charged_amount is not None and collection.charged_currency is not None
    return CollectionRequest(
        reference=collection.reference,
        provider=collection.provider,
        phone=collection.phone,
        amount=collection.charged_amount,
        currency=collection.charged_currency,
        submitted_at=collection.submitted_at,
    )


def lightning_invoice(collection: models.Collection) -> str:
    """A sandbox BOLT11-looking invoice string for a lightning payment (not payable on a real node)."""
    import hashlib

    digest = hashlib.sha256(collection.reference.encode()).hexdigest()
    return f"lnbcrt{collection.charged_amount}n1sandbox{digest[:48]}"
