"""Collecting money: direct charge, hosted checkout, the legacy payments path, and settlement.

States (an explicit table in :mod:`paymentcore.models`)::

    PENDING --prompt handed to the network--> PROCESSING --cleared--> SUCCESS
       |                                          \\--not cleared / unanswered--> FAILED
       \\--checkout link expired before the payer chose--> FAILED (EXPIRED)

A charge is created PENDING with its prompt due; a checkout is PENDING until the payer submits the
hosted page. The worker hands the prompt to the network (PENDING -> PROCESSING) and asks for the
result. Settlement writes, in one transaction: the status, the net amount, the ledger credit and the
outbox event.
"""

from __future__ import annotations

from typing import Any

import attrs

from paymentcore import ledger, render
from paymentcore.catalogue import Currency, Provider
from paymentcore.deps import Deps, require_merchant
from paymentcore.errors import (
    InvalidRequestError,
    MerchantNotApprovedError,
    NotFoundError,
    ProviderBlockedError,
    RecipientBusyError,
    UnknownProviderError,
)
from paymentcore.fields import optional_int, optional_string, require_object, required
from paymentcore.idempotency import Idempotency, Reply, fingerprint
from paymentcore.models import (
    COLLECTION_TRANSITIONS,
    Collection,
    CollectionKind,
    CollectionStatus,
    Merchant,
    check_transition,
)
from paymentcore.money import apply_rate, fee_for, parse_amount
from paymentcore.ports import CollectionRequest, NetworkError, NetworkOutcome, Transaction

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

    collection: Collection
    merchant: Merchant
    options: tuple[PaymentOption, ...]
    payable: bool
    invoice: str | None  # the lightning invoice once the payer chose lightning


class Collect:
    def __init__(self, deps: Deps, idempotency: Idempotency) -> None:
        self._deps = deps
        self._idem = idempotency

    # --- requests --------------------------------------------------------------------------------

    def charge(self, merchant_id: str, body: object, *, idempotency_key: str | None = None) -> Reply:
        """POST /v1/collect/charge: validate, record the charge with its prompt due; 202."""
        deps = self._deps
        cat = deps.catalogue
        data = require_object(body)
        currency = cat.currency(required(data, "currency"), settleable=True)
        amount = parse_amount(required(data, "amount"), currency)
        country = cat.country(required(data, "country"))
        cat.check_currency_for_country(currency, country)
        provider = cat.provider(required(data, "provider"))
        phone, provider = cat.resolve_mobile(
            country=country, phone=required(data, "phone"), provider=provider
        )
        merchant_reference = optional_string(data, "merchantReference", max_length=120, alias="reference")
        description = optional_string(data, "description", max_length=200)
        print_ = fingerprint("collect.charge", data)
        with deps.store.transaction() as tx:
            now = deps.clock.now()
            replay = self._idem.lookup(tx, merchant_id, idempotency_key, print_, now)
            if replay is not None:
                return replay
            merchant = self._transacting_merchant(tx, merchant_id)
            self._check_provider_allowed(merchant, provider)
            self._check_prompts(tx, phone, now)
            collection = Collection(
                reference=deps.refs.collection(now),
                merchant_id=merchant.id,
                kind=CollectionKind.CHARGE,
                status=CollectionStatus.PENDING,
                requested_amount=amount,
                requested_currency=currency.code,
                description=description or _default_description(merchant),
                merchant_reference=merchant_reference,
                created_at=now,
                expires_at=now + deps.config.prompt_timeout_seconds * 1000,
                updated_at=now,
                method=provider.method,
                provider=provider.code,
                phone=phone,
                country=country.code,
                submitted_at=now,
                next_check_at=now,
                charged_amount=amount,
                charged_currency=currency.code,
            )
            tx.insert_collection(collection)
            reply = Reply(202, render.charge_response(collection, catalogue=cat))
            self._idem.save(tx, merchant_id, idempotency_key, print_, reply, now)
            return reply

    def checkout(
        self,
        merchant_id: str,
        body: object,
        *,
        idempotency_key: str | None = None,
        legacy: bool = False,
    ) -> Reply:
        """POST /v1/collect/checkout (or the legacy POST /v1/payments): a payment and its link; 201."""
        deps = self._deps
        data = require_object(body)
        currency = deps.catalogue.currency(required(data, "currency"))
        amount = parse_amount(required(data, "amount"), currency)
        description = optional_string(data, "description", max_length=200)
        if legacy:
            merchant_reference = optional_string(data, "reference", max_length=120)
        else:
            merchant_reference = optional_string(data, "merchantReference", max_length=120, alias="reference")
        minutes = optional_int(data, "expiresInMinutes", default=60, low=1, high=10080)
        print_ = fingerprint("collect.checkout.legacy" if legacy else "collect.checkout", data)
        with deps.store.transaction() as tx:
            now = deps.clock.now()
            replay = self._idem.lookup(tx, merchant_id, idempotency_key, print_, now)
            if replay is not None:
                return replay
            merchant = self._transacting_merchant(tx, merchant_id)
            collection = Collection(
                reference=deps.refs.collection(now),
                merchant_id=merchant.id,
                kind=CollectionKind.LEGACY if legacy else CollectionKind.CHECKOUT,
                status=CollectionStatus.PENDING,
                requested_amount=amount,
                requested_currency=currency.code,
                description=description if description else _default_description(merchant),
                merchant_reference=merchant_reference,
                created_at=now,
                expires_at=now + minutes * 60_000,
                updated_at=now,
            )
            tx.insert_collection(collection)
            reply = Reply(201, self._render(collection, merchant, now))
            self._idem.save(tx, merchant_id, idempotency_key, print_, reply, now)
            return reply

    def get(self, merchant_id: str, reference: str) -> dict[str, Any]:
        """GET /v1/collect/{reference}: the record, or NOT_FOUND (also for another merchant's)."""
        with self._deps.store.read() as tx:
            collection = tx.get_collection(reference)
            if collection is None or collection.merchant_id != merchant_id:
                raise NotFoundError("No such collection on this account.")
            merchant = require_merchant(tx, merchant_id)
        return self._render(collection, merchant, self._deps.clock.now())

    def find(self, reference: str) -> Collection:
        with self._deps.store.read() as tx:
            collection = tx.get_collection(reference)
        if collection is None:
            raise NotFoundError("No such payment.")
        return collection

    def _render(self, collection: Collection, merchant: Merchant, now: int) -> dict[str, Any]:
        return render.collection_record(
            collection,
            catalogue=self._deps.catalogue,
            merchant=merchant,
            public_url=self._deps.config.public_url,
            now=now,
        )

    # --- the hosted page -------------------------------------------------------------------------

    def view(self, reference: str) -> CheckoutView:
        deps = self._deps
        with deps.store.read() as tx:
            collection = tx.get_collection(reference)
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
            payable=render.is_payable(collection, now),
            invoice=invoice,
        )

    def _options(self, collection: Collection, merchant: Merchant) -> list[PaymentOption]:
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

    def pay(self, reference: str, provider_code: object, phone: object) -> Collection:
        """The payer chose how to pay on the hosted page: validate and queue the prompt."""
        deps = self._deps
        cat = deps.catalogue
        view = self.view(reference)
        if not view.payable:
            raise InvalidRequestError("This payment can no longer be paid.", param="reference")
        provider = cat.provider(provider_code)
        option = next((o for o in view.options if o.provider.code == provider.code), None)
        if option is None:
            if provider.code in view.merchant.blocked_providers:
                raise ProviderBlockedError(param="provider")
            raise UnknownProviderError("This provider cannot pay this payment.", param="provider")
        local: str | None = None
        country: str | None = None
        if provider.country is not None:
            country_rec = cat.countries[provider.country]
            local, provider = cat.resolve_mobile(country=country_rec, phone=phone, provider=provider)
            country = country_rec.code
        with deps.store.transaction() as tx:
            now = deps.clock.now()
            collection = tx.get_collection(reference)
            if collection is None or not render.is_payable(collection, now):
                raise InvalidRequestError("This payment can no longer be paid.", param="reference")
            merchant = self._transacting_merchant(tx, collection.merchant_id)
            self._check_provider_allowed(merchant, provider)
            if local is not None:
                self._check_prompts(tx, local, now)
            collection = attrs.evolve(
                collection,
                method=provider.method,
                provider=provider.code,
                phone=local,
                country=country,
                submitted_at=now,
                next_check_at=now,
                charged_amount=option.amount,
                charged_currency=option.currency.code,
                updated_at=now,
            )
            tx.update_collection(collection)
            return collection

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
        if tx.count_prompts(phone, since) >= config.prompt_limit:
            raise RecipientBusyError(
                f"This number received {config.prompt_limit} prompts in the last "
                f"{config.prompt_window_seconds} seconds; wait and retry.",
                param="phone",
            )

    # --- the worker's part -----------------------------------------------------------------------

    def process_due(self, limit: int = 100) -> int:
        """Advance every open collection whose turn has come; returns how many were looked at."""
        now = self._deps.clock.now()
        with self._deps.store.read() as tx:
            due = tx.due_collections(now, limit)
        for collection in due:
            self.advance(collection.reference)
        return len(due)

    def advance(self, reference: str) -> None:
        deps = self._deps
        now = deps.clock.now()
        with deps.store.read() as tx:
            collection = tx.get_collection(reference)
        if collection is None or collection.status in FINAL:
            return
        if collection.submitted_at is None:
            if collection.expires_at <= now:
                self._fail(reference, CollectionStatus.PENDING, EXPIRED, "The checkout link expired.")
            return
        request = _request_of(collection)
        if collection.status is CollectionStatus.PENDING:
            if not self._claim(reference, now):
                return  # another worker is sending this prompt
            try:
                deps.network.request_collection(request)
            except NetworkError:
                self._recheck(reference, CollectionStatus.PENDING)
                return
            with deps.store.transaction() as tx:
                current = tx.get_collection(reference)
                if current is None or current.status is not CollectionStatus.PENDING:
                    return
                check_transition(
                    COLLECTION_TRANSITIONS, current.status, CollectionStatus.PROCESSING, "collection"
                )
                tx.update_collection(
                    attrs.evolve(current, status=CollectionStatus.PROCESSING, updated_at=deps.clock.now())
                )
        now = deps.clock.now()
        try:
            result = deps.network.collection_status(request, now)
        except NetworkError:
            self._recheck(reference, CollectionStatus.PROCESSING)
            return
        if result.outcome is NetworkOutcome.SUCCESS:
            self._settle(reference)
        elif result.outcome is NetworkOutcome.FAILED:
            self._fail(
                reference,
                CollectionStatus.PROCESSING,
                result.failure_category or "DECLINED",
                result.failure_reason or "The payment did not clear.",
            )
        elif now >= request.submitted_at + deps.config.prompt_timeout_seconds * 1000:
            self._fail(reference, CollectionStatus.PROCESSING, TIMEOUT, "The payer did not answer in time.")
        else:
            self._recheck(reference, CollectionStatus.PROCESSING)

    def _claim(self, reference: str, now: int) -> bool:
        """Take a PENDING collection's prompt for this worker for a lease period."""
        deps = self._deps
        with deps.store.transaction() as tx:
            current = tx.get_collection(reference)
            if (
                current is None
                or current.status is not CollectionStatus.PENDING
                or current.next_check_at is None
                or current.next_check_at > now
            ):
                return False
            lease = now + deps.config.dispatch_lease_seconds * 1000
            tx.update_collection(attrs.evolve(current, next_check_at=lease))
            return True

    def _recheck(self, reference: str, expected: CollectionStatus) -> None:
        deps = self._deps
        with deps.store.transaction() as tx:
            current = tx.get_collection(reference)
            if current is None or current.status is not expected:
                return
            next_at = deps.clock.now() + int(deps.config.poll_interval_seconds * 1000)
            tx.update_collection(attrs.evolve(current, next_check_at=next_at))

    def _settle(self, reference: str) -> None:
        deps = self._deps
        with deps.store.transaction() as tx:
            current = tx.get_collection(reference)
            if current is None or current.status is not CollectionStatus.PROCESSING:
                return  # another worker settled it
            check_transition(COLLECTION_TRANSITIONS, current.status, CollectionStatus.SUCCESS, "collection")
            assert current.charged_amount is not None and current.charged_currency is not None
            merchant = require_merchant(tx, current.merchant_id)
            now = deps.clock.now()
            fee = fee_for(current.charged_amount, merchant.collect_fee_ppm)
            net = current.charged_amount - fee
            ledger.credit(
                tx,
                entry_id=deps.refs.token("led"),
                merchant_id=merchant.id,
                currency=current.charged_currency,
                net=net,
                fee=fee,
                reference=reference,
                now=now,
            )
            settled = attrs.evolve(
                current,
                status=CollectionStatus.SUCCESS,
                settled_amount=net,
                settled_currency=current.charged_currency,
                fee_amount=fee,
                next_check_at=None,
                updated_at=now,
            )
            tx.update_collection(settled)
            deps.emit(
                tx,
                merchant.id,
                "collect.succeeded",
                render.collection_event_data(settled, catalogue=deps.catalogue, now=now),
                now,
            )

    def _fail(self, reference: str, expected: CollectionStatus, category: str, reason: str) -> None:
        deps = self._deps
        with deps.store.transaction() as tx:
            current = tx.get_collection(reference)
            if current is None or current.status is not expected:
                return
            check_transition(COLLECTION_TRANSITIONS, current.status, CollectionStatus.FAILED, "collection")
            now = deps.clock.now()
            failed = attrs.evolve(
                current,
                status=CollectionStatus.FAILED,
                failure_category=category,
                failure_reason=reason,
                next_check_at=None,
                updated_at=now,
            )
            tx.update_collection(failed)
            deps.emit(
                tx,
                current.merchant_id,
                "collect.failed",
                render.collection_event_data(failed, catalogue=deps.catalogue, now=now),
                now,
            )


def _default_description(merchant: Merchant) -> str:
    return f"Payment to {merchant.name}"


def _request_of(collection: Collection) -> CollectionRequest:
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


def lightning_invoice(collection: Collection) -> str:
    """A sandbox BOLT11-looking invoice string for a lightning payment (not payable on a real node)."""
    import hashlib

    digest = hashlib.sha256(collection.reference.encode()).hexdigest()
    return f"lnbcrt{collection.charged_amount}n1sandbox{digest[:48]}"
