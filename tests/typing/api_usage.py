"""The public API as an integrator uses it, written so that mypy --strict catches an accidental break.

Nothing runs at import: the module only defines functions and protocols. mypy checks it with the rest
of ``tests``; ``tests/e2e/test_examples.py`` imports it and calls the functions, so every line here also
runs against a real core, and the ``assert``s check that the values really have their annotated types.

How a break shows up:

- a renamed or removed name exported by ``paymentcore`` or ``paymentcore.testing``: an import error;
- a renamed method, a renamed or removed parameter, a narrowed parameter type or a widened return
  type: the bound method no longer matches its ``Protocol`` below (``*Fn`` classes pin exact
  signatures; adding a new optional parameter stays compatible, as it should);
- a renamed attribute of a returned record, or a widened attribute type (``Payout.amount`` no longer
  a ``Decimal``): an attribute or assignment error in the ``read_*`` functions, which read every
  documented attribute of the exported record classes into a variable of its documented type;
- a renamed enum member, error attribute or ``Config`` field: an attribute or keyword error.

The other direction (what must *not* type-check: a float amount, a misspelt attribute, an assignment to
a frozen record, a missing idempotency key, ...) is pinned by ``samples/misuse.py``, which
``test_api_types.py`` runs mypy on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

from paymentcore import (
    HTTP_STATUS,
    AccessError,
    AmountError,
    ApiKey,
    Balance,
    Catalogue,
    CatalogueError,
    Collection,
    CollectionKind,
    CollectionStatus,
    Config,
    CreatedKey,
    FakeClock,
    FlowError,
    IdempotencyKeyRequiredError,
    InsufficientBalanceError,
    LedgerInvariantError,
    MemoryStore,
    Merchant,
    MerchantBalance,
    MerchantNotApprovedError,
    MerchantStatus,
    NotFoundError,
    PaymentCore,
    PaymentError,
    Payout,
    PayoutAllowance,
    PayoutLimits,
    PayoutStatus,
    RandomReferences,
    RequestError,
    SandboxNetwork,
    Scope,
    Settings,
    StaticExchangeRates,
    SystemClock,
    UnknownCurrencyError,
    WebhookEvent,
    WebhookRegistration,
    WebhookSettings,
    WebhookVerificationError,
    construct_event,
    verify_webhook,
)
from paymentcore.testing import (
    CapturedDelivery,
    CapturingSender,
    ManualNetwork,
    TestKit,
    fund,
    public_resolver,
)

# --- exact signatures of the service methods ------------------------------------------------------


class ChargeFn(Protocol):
    def __call__(
        self,
        merchant_id: str,
        *,
        amount: Decimal | int,
        currency: str,
        country: str,
        provider: str,
        phone: str,
        merchant_reference: str | None = ...,
        description: str | None = ...,
        idempotency_key: str | None = ...,
    ) -> Collection: ...


class CheckoutFn(Protocol):
    def __call__(
        self,
        merchant_id: str,
        *,
        amount: Decimal | int,
        currency: str,
        description: str | None = ...,
        merchant_reference: str | None = ...,
        expires_in_minutes: int | None = ...,
        idempotency_key: str | None = ...,
    ) -> Collection: ...


class GetCollectionFn(Protocol):
    def __call__(self, merchant_id: str, reference: str) -> Collection: ...


class PayFn(Protocol):
    def __call__(self, reference: str, provider: str, phone: str | None) -> Collection: ...


class DisburseFn(Protocol):
    def __call__(
        self,
        merchant_id: str,
        *,
        amount: Decimal | int,
        currency: str,
        phone: str,
        idempotency_key: str,
        recipient_name: str | None = ...,
        provider: str | None = ...,
        country: str | None = ...,
        merchant_reference: str | None = ...,
    ) -> Payout: ...


class GetPayoutFn(Protocol):
    def __call__(self, merchant_id: str, reference: str) -> Payout: ...


class PayoutActionFn(Protocol):
    def __call__(self, reference: str) -> Payout: ...


class DisburseLimitsFn(Protocol):
    def __call__(self, merchant_id: str, currency: str) -> PayoutAllowance: ...


class RegisterWebhookFn(Protocol):
    def __call__(
        self,
        merchant_id: str,
        *,
        url: str,
        events: str | None = ...,
        legacy: bool = ...,
        idempotency_key: str | None = ...,
    ) -> WebhookRegistration: ...


class GetWebhookFn(Protocol):
    def __call__(self, merchant_id: str) -> WebhookSettings: ...


class CreateMerchantFn(Protocol):
    def __call__(
        self, name: str, *, settlement_currency: str = ..., approved: bool = ..., fee_percent: object = ...
    ) -> Merchant: ...


class CreateKeyFn(Protocol):
    def __call__(
        self,
        merchant_id: str,
        scopes: list[Scope] | list[str],
        *,
        per_minute: int | None = ...,
        per_hour: int | None = ...,
    ) -> CreatedKey: ...


class SetLimitsFn(Protocol):
    def __call__(
        self,
        merchant_id: str,
        currency: str,
        *,
        per_transaction: object = ...,
        per_day: object = ...,
        per_week: object = ...,
        review_threshold: object = ...,
    ) -> PayoutLimits: ...


class BalancesFn(Protocol):
    def __call__(self, merchant_id: str) -> list[MerchantBalance]: ...


class VerifyWebhookFn(Protocol):
    def __call__(
        self,
        secret: str,
        headers: Mapping[str, str],
        body: bytes,
        *,
        now: float | None = ...,
        tolerance: int = ...,
    ) -> int: ...


class ConstructEventFn(Protocol):
    def __call__(
        self,
        secret: str,
        headers: Mapping[str, str],
        body: bytes,
        *,
        now: float | None = ...,
        tolerance: int = ...,
    ) -> WebhookEvent: ...


def pin_signatures(core: PaymentCore) -> None:
    """Bind every service method to its protocol: mypy compares the signatures."""
    charge: ChargeFn = core.collect.charge
    checkout: CheckoutFn = core.collect.checkout
    get_collection: GetCollectionFn = core.collect.get
    pay: PayFn = core.collect.pay
    disburse: DisburseFn = core.disburse.create
    get_payout: GetPayoutFn = core.disburse.get
    limits: DisburseLimitsFn = core.disburse.limits
    release: PayoutActionFn = core.disburse.release
    reject: PayoutActionFn = core.disburse.reject
    resolve: PayoutActionFn = core.disburse.resolve
    register: RegisterWebhookFn = core.webhooks.register
    get_webhook: GetWebhookFn = core.webhooks.get
    create_merchant: CreateMerchantFn = core.operator.create_merchant
    create_key: CreateKeyFn = core.operator.create_key
    set_limits: SetLimitsFn = core.operator.set_limits
    balances: BalancesFn = core.operator.balances
    verify: VerifyWebhookFn = verify_webhook
    construct: ConstructEventFn = construct_event
    pinned: list[object] = [
        charge,
        checkout,
        get_collection,
        pay,
        disburse,
        get_payout,
        limits,
        release,
        reject,
        resolve,
        register,
        get_webhook,
        create_merchant,
        create_key,
        set_limits,
        balances,
        verify,
        construct,
    ]
    assert all(callable(fn) for fn in pinned)


# --- the shapes of returned records ---------------------------------------------------------------


def is_utc(moment: datetime) -> bool:
    """An aware datetime in UTC (the records' times are never naive)."""
    return moment.utcoffset() == timedelta(0)


def read_payout(payout: Payout) -> None:
    """Every documented attribute of a :class:`Payout`, read into a variable of its documented type."""
    reference: str = payout.reference
    status: PayoutStatus = payout.status
    amount: Decimal = payout.amount
    currency: str = payout.currency
    phone: str = payout.phone
    recipient_name: str | None = payout.recipient_name
    merchant_reference: str | None = payout.merchant_reference
    provider_reference: str | None = payout.provider_reference
    awaiting_review: bool = payout.awaiting_review
    status_reason: str | None = payout.status_reason
    created_at: datetime = payout.created_at
    assert all(type(text) is str for text in (reference, currency, phone))
    optional = (recipient_name, merchant_reference, provider_reference, status_reason)
    assert all(text is None or type(text) is str for text in optional)
    assert type(status) is PayoutStatus and type(amount) is Decimal and type(awaiting_review) is bool
    assert is_utc(created_at)


def read_collection(collection: Collection) -> None:
    """Every documented attribute of a :class:`Collection`, read into a variable of its documented type."""
    reference: str = collection.reference
    status: CollectionStatus = collection.status
    amount: Decimal = collection.amount
    currency: str = collection.currency
    requested_amount: Decimal = collection.requested_amount
    requested_currency: str = collection.requested_currency
    description: str = collection.description
    merchant_reference: str | None = collection.merchant_reference
    checkout_url: str | None = collection.checkout_url
    method: str | None = collection.method
    provider_code: str | None = collection.provider_code
    expires_at: datetime = collection.expires_at
    created_at: datetime = collection.created_at
    failure_category: str | None = collection.failure_category
    kind: CollectionKind = collection.kind
    assert all(type(text) is str for text in (reference, currency, requested_currency, description))
    optional = (merchant_reference, checkout_url, method, provider_code, failure_category)
    assert all(text is None or type(text) is str for text in optional)
    assert type(amount) is Decimal and type(requested_amount) is Decimal
    assert type(status) is CollectionStatus and type(kind) is CollectionKind
    assert is_utc(expires_at) and is_utc(created_at)


def read_event(event: WebhookEvent) -> None:
    """Every documented attribute of a :class:`WebhookEvent`, read into a variable of its type."""
    event_id: str | None = event.id
    event_type: str = event.type
    name: str = event.name
    reference: str = event.reference
    status: str = event.status
    data: Mapping[str, Any] = event.data
    timestamp: datetime = event.timestamp
    amount: Decimal | None = event.amount
    currency: str | None = event.currency
    is_collection: bool = event.is_collection
    is_payout: bool = event.is_payout
    assert event_id is None or type(event_id) is str
    assert all(type(text) is str for text in (event_type, name, reference, status))
    assert amount is None or type(amount) is Decimal
    assert currency is None or type(currency) is str
    assert not (is_collection and is_payout) and isinstance(data, Mapping) and is_utc(timestamp)


# --- building cores -------------------------------------------------------------------------------


def build_cores(workdir: Path) -> list[PaymentCore]:
    """Every documented way to build a core; each keyword of the constructor named."""
    catalogue = Catalogue.default()
    rates = StaticExchangeRates(base="EUR", per_base={"EUR": Decimal(1), "XAF": Decimal("655.957")})
    rate: Decimal = rates.rate("EUR", "XAF")
    assert rate == Decimal("655.957")
    config = Config(
        public_url="https://pay.example",
        sandbox_delay=0,
        webhook_retry_delays=(1, 5),
        webhook_jitter=0.0,
        webhook_timeout=5.0,
        allow_private_webhooks=False,
        auto_disable_after=10,
        prompt_limit=3,
        prompt_window_seconds=300,
        prompt_timeout_seconds=300,
        poll_interval_seconds=1.0,
        dispatch_lease_seconds=30,
        idempotency_retention_hours=48,
        default_per_minute=30,
        default_per_hour=600,
    )
    explicit = PaymentCore(
        store=MemoryStore(),
        network=SandboxNetwork(delay_seconds=0),
        clock=SystemClock(),
        refs=RandomReferences(),
        catalogue=Catalogue(
            currencies=catalogue.currencies,
            countries=catalogue.countries,
            providers=catalogue.providers,
            rates=catalogue.rates,
        ),
        config=config,
        sender=CapturingSender(),
        resolver=public_resolver,
    )
    memory = PaymentCore.memory(config=Config(sandbox_delay=0))
    sqlite = PaymentCore.sqlite(workdir / "api.db", synchronous="NORMAL", config=Config(sandbox_delay=0))
    return [explicit, memory, sqlite]


# --- one pass through the services ----------------------------------------------------------------


def collect_and_disburse(core: PaymentCore) -> dict[str, str]:
    """Operator set-up, a charge, a checkout paid on its page, payouts, review and the books.

    Returns the final statuses' values.
    """
    op = core.operator
    merchant: Merchant = op.create_merchant("Typed Shop", settlement_currency="XAF", fee_percent=0)
    created: CreatedKey = op.create_key(merchant.id, [Scope.COLLECT, Scope.DISBURSE], per_minute=60)
    api_key: str = created.api_key
    key: ApiKey = created.key
    assert api_key and key.scopes == frozenset({Scope.COLLECT, Scope.DISBURSE})
    listed: Sequence[Merchant] = op.list_merchants()
    assert merchant.id in {m.id for m in listed}
    same: Merchant = op.get_merchant(merchant.id)
    assert same.approved and same.status is MerchantStatus.APPROVED

    charge: Collection = core.collect.charge(
        merchant.id,
        amount=10_000,
        currency="XAF",
        country="CM",
        provider="mtn_cm",
        phone="670000000",
        merchant_reference="order-1001",
        description="Typed order",
        idempotency_key="typed-charge",
    )
    read_collection(charge)
    assert charge.status is CollectionStatus.PENDING and charge.kind is CollectionKind.CHARGE
    assert charge.requested_amount == Decimal(10_000) and charge.checkout_url is None
    checkout: Collection = core.collect.checkout(
        merchant.id,
        amount=Decimal("1500"),
        currency="XAF",
        description="Typed checkout",
        merchant_reference="order-1002",
        expires_in_minutes=30,
        idempotency_key="typed-checkout",
    )
    read_collection(checkout)
    link: str | None = checkout.checkout_url
    assert link is not None and checkout.kind is CollectionKind.CHECKOUT
    assert checkout.expires_at - checkout.created_at == timedelta(minutes=30)
    chosen: Collection = core.collect.pay(checkout.reference, "mtn_cm", "670000000")
    read_collection(chosen)
    assert chosen.checkout_url is None  # chosen: the page can no longer be paid
    looked_at: int = core.tick()
    assert looked_at >= 1
    core.run_until_idle(max_rounds=20)
    record: Collection = core.collect.get(merchant.id, charge.reference)
    read_collection(record)
    paid_page: Collection = core.collect.get(merchant.id, checkout.reference)
    assert paid_page.status is CollectionStatus.SUCCESS and paid_page.provider_code == "mtn_cm"

    op.set_limits(merchant.id, "XAF", review_threshold=Decimal(5000), per_day=None)
    held: Payout = core.disburse.create(
        merchant.id, amount=6000, currency="XAF", phone="690000000", idempotency_key="typed-held"
    )
    assert held.awaiting_review and held.status is PayoutStatus.PENDING
    rejected: Payout = core.disburse.reject(held.reference)
    read_payout(rejected)
    assert rejected.status is PayoutStatus.REJECTED
    payout: Payout = core.disburse.create(
        merchant.id,
        amount=Decimal("2500"),
        currency="XAF",
        phone="690000000",
        idempotency_key="typed-payout",
        recipient_name="Ada",
        provider="orange_cm",
        country="CM",
        merchant_reference="refund-1001",
    )
    read_payout(payout)
    replayed: Payout = core.disburse.create(
        merchant.id,
        amount=Decimal("2500"),
        currency="XAF",
        phone="690000000",
        idempotency_key="typed-payout",
        recipient_name="Ada",
        provider="orange_cm",
        country="CM",
        merchant_reference="refund-1001",
    )
    assert replayed == payout  # the same key and arguments answer the original payout
    core.run_until_idle()
    paid: Payout = core.disburse.get(merchant.id, payout.reference)
    read_payout(paid)
    assert paid.amount == Decimal(2500) and paid.recipient_name == "Ada"
    limits: PayoutAllowance = core.disburse.limits(merchant.id, "XAF")
    assert limits.enabled is True and limits.spent_today == Decimal(2500)

    balance: Balance = core.check_ledger(merchant.id, "XAF")
    every: Sequence[Balance] = core.check_all_ledgers()
    assert balance.available == 9000 and balance.reserved == 0 and len(every) == 1
    shown: list[MerchantBalance] = op.balances(merchant.id)
    assert shown == [MerchantBalance(currency="XAF", available=Decimal(9000), reserved=Decimal(0))]
    return {"charge": record.status.value, "payout": paid.status.value, "rejected": rejected.status.value}


def operator_switches(core: PaymentCore) -> None:
    """The dashboard actions of CONTRACT §2 as library calls."""
    op = core.operator
    merchant: Merchant = op.create_merchant("Switches", approved=False)
    assert not merchant.approved
    merchant = op.approve_merchant(merchant.id)
    merchant = op.suspend_merchant(merchant.id)
    merchant = op.set_merchant_payouts(merchant.id, False)
    merchant = op.set_collect_fee(merchant.id, Decimal("1.5"))
    merchant = op.block_provider(merchant.id, "mtn_cm", blocked=True)
    assert "mtn_cm" in merchant.blocked_providers and not merchant.payouts_enabled
    created: CreatedKey = op.create_key(merchant.id, ["collect"])
    key: ApiKey = op.set_rate_limit(created.key.id, per_minute=5, per_hour=50)
    key = op.revoke_key(key.id)
    assert key.revoked
    settings: Settings = op.set_platform_payouts(False)
    settings = op.set_platform_api(True)
    settings = op.set_currency_payouts("XAF", False)
    assert "XAF" in settings.closed_currencies and not settings.payouts_enabled
    settings = op.set_currency_payouts("XAF", True)
    settings = op.set_platform_payouts(True)
    current: Settings = op.settings()
    assert current.payouts_enabled


def refusal(action: Callable[[], object]) -> PaymentError:
    """The PaymentError ``action`` raises (it must raise one)."""
    try:
        action()
    except PaymentError as error:
        return error
    raise AssertionError("the core accepted what it must refuse")


def errors_and_enums() -> list[str]:
    """The error tree and its record, the enums' members and the ledger's own error type.

    Returns the codes of the refusals (IDEMPOTENCY_KEY_REQUIRED first), then the enums' values.
    """
    codes: list[str] = []
    core = PaymentCore.memory(config=Config(sandbox_delay=0))
    try:
        merchant: Merchant = core.operator.create_merchant("Errors")
        # A caller without a type checker can still leave the key out; the core refuses it at run time.
        untyped_key: Any = None
        missing_key = refusal(
            lambda: core.disburse.create(
                merchant.id, amount=100, currency="XAF", phone="690000000", idempotency_key=untyped_key
            )
        )
        code: str = missing_key.code
        message: str = missing_key.message
        param: str | None = missing_key.param
        details: dict[str, Any] | None = missing_key.details
        status: int = missing_key.http_status
        as_dict: dict[str, Any] = missing_key.to_dict()
        assert isinstance(missing_key, IdempotencyKeyRequiredError) and isinstance(missing_key, RequestError)
        assert message and as_dict["code"] == code and details is None and param == "idempotency_key"
        assert status == HTTP_STATUS[code] == 400
        broke = refusal(
            lambda: core.disburse.create(
                merchant.id, amount=100, currency="XAF", phone="690000000", idempotency_key="broke"
            )
        )
        assert isinstance(broke, InsufficientBalanceError) and isinstance(broke, AmountError)
        unknown = refusal(
            lambda: core.disburse.create(
                merchant.id, amount=100, currency="ZZZ", phone="690000000", idempotency_key="unknown"
            )
        )
        assert isinstance(unknown, UnknownCurrencyError) and isinstance(unknown, CatalogueError)
        missing = refusal(lambda: core.disburse.get(merchant.id, "PO-0-none"))
        assert isinstance(missing, NotFoundError) and isinstance(missing, FlowError)
        waiting: Merchant = core.operator.create_merchant("Waiting", approved=False)
        barred = refusal(
            lambda: core.collect.checkout(waiting.id, amount=100, currency="XAF", idempotency_key="barred")
        )
        assert isinstance(barred, MerchantNotApprovedError) and isinstance(barred, AccessError)
        codes.extend(error.code for error in [missing_key, broke, unknown, missing, barred])
    finally:
        core.close()
    broken: AssertionError = LedgerInvariantError("books off")
    assert isinstance(broken, AssertionError)
    collection_states: list[CollectionStatus] = [
        CollectionStatus.PENDING,
        CollectionStatus.PROCESSING,
        CollectionStatus.SUCCESS,
        CollectionStatus.FAILED,
    ]
    collection_kinds: list[CollectionKind] = [
        CollectionKind.CHARGE,
        CollectionKind.CHECKOUT,
        CollectionKind.LEGACY,
    ]
    payout_states: list[PayoutStatus] = [
        PayoutStatus.PENDING,
        PayoutStatus.SENT,
        PayoutStatus.PAID,
        PayoutStatus.FAILED,
        PayoutStatus.REJECTED,
    ]
    scopes: list[Scope] = [Scope.COLLECT, Scope.DISBURSE]
    codes.extend(s.value for s in [*collection_states, *collection_kinds, *payout_states, *scopes])
    return codes


# --- the testing kit ------------------------------------------------------------------------------


def testing_kit() -> list[str]:
    """paymentcore.testing: fake clock, manual network, captured deliveries, verified and parsed."""
    kit: TestKit = TestKit.create(prompt_limit=5)
    core: PaymentCore = kit.core
    clock: FakeClock = kit.clock
    network: ManualNetwork = kit.network
    sender: CapturingSender = kit.sender
    try:
        merchant: Merchant = kit.merchant("Kit Shop", settlement_currency="XAF")
        secret: str = kit.webhook(merchant.id, url="https://shop.example/hooks")
        endpoint: WebhookSettings = core.webhooks.get(merchant.id)
        assert endpoint.url == "https://shop.example/hooks" and endpoint.is_active
        kit.fund(merchant.id, "XAF", Decimal(1000))
        fund(core, merchant.id, "XAF", "500")
        reference: str = core.collect.charge(
            merchant.id, amount=500, currency="XAF", country="CM", provider="mtn_cm", phone="670000000"
        ).reference
        network.complete(reference)
        kit.settle()
        failing: str = core.collect.charge(
            merchant.id, amount=500, currency="XAF", country="CM", provider="mtn_cm", phone="670000001"
        ).reference
        kit.settle()
        network.fail(failing, "PAYER_DECLINED")
        now_ms: int = clock.advance(seconds=1)
        kit.advance(0)
        payout_ref: str = core.disburse.create(
            merchant.id, amount=700, currency="XAF", phone="690000021", idempotency_key="kit-payout"
        ).reference
        network.refuse(payout_ref)
        network.moved(payout_ref, False)
        kit.settle()
        resolved: Payout = core.disburse.resolve(payout_ref)
        assert resolved.status is PayoutStatus.FAILED
        deliveries: list[CapturedDelivery] = kit.deliveries
        assert deliveries == sender.deliveries
        names: list[str] = []
        for delivery in deliveries:
            stamp: int = delivery.verify(secret, now=now_ms / 1000)
            assert stamp == verify_webhook(secret, delivery.headers, delivery.body, now=now_ms / 1000)
            event: WebhookEvent = construct_event(secret, delivery.headers, delivery.body, now=now_ms / 1000)
            read_event(event)
            assert delivery.construct(secret) == event
            assert event.timestamp == datetime.fromtimestamp(stamp, tz=UTC)
            parsed: Any = delivery.json()
            assert parsed["eventId"] and event.id == parsed["eventId"]
            assert event.type == delivery.event and event.currency == "XAF"
            assert event.reference in {reference, failing, payout_ref}
            names.append(event.type)
        forged = deliveries[0].body + b" "
        try:
            verify_webhook(secret, deliveries[0].headers, forged, now=now_ms / 1000)
        except WebhookVerificationError:
            try:
                construct_event(secret, deliveries[0].headers, forged, now=now_ms / 1000)
            except WebhookVerificationError:
                names.append("forgery refused")
        return names
    finally:
        core.close()
