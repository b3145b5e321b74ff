"""The public API as an integrator uses it, written so that mypy --strict catches an accidental break.

Nothing runs at import: the module only defines functions and protocols. mypy checks it with the rest
of ``tests``; ``tests/e2e/test_examples.py`` imports it and calls the functions, so every line here also
runs against a real core.

How a break shows up:

- a renamed or removed name exported by ``paymentcore`` or ``paymentcore.testing``: an import error;
- a renamed method, a renamed or removed parameter, a narrowed parameter type or a widened return
  type: the bound method no longer matches its ``Protocol`` below (``*Fn`` classes pin exact
  signatures; adding a new optional parameter stays compatible, as it should);
- a renamed attribute of a returned record: the record no longer matches its ``*View`` protocol;
- a renamed enum member or ``Config`` field: an attribute or keyword error.

Records such as ``Merchant`` and ``Payout`` are not exported by ``paymentcore``; they are described
here structurally (read-only properties), the way an integrator can rely on them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

from paymentcore import (
    Catalogue,
    CollectionStatus,
    Config,
    FakeClock,
    LedgerInvariantError,
    MemoryStore,
    PaymentCore,
    PaymentError,
    PayoutStatus,
    RandomReferences,
    Reply,
    SandboxNetwork,
    Scope,
    StaticExchangeRates,
    SystemClock,
    WebhookVerificationError,
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

# --- the shapes of returned records -----------------------------------------------------------------


class MerchantView(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def settlement_currency(self) -> str: ...
    @property
    def approved(self) -> bool: ...
    @property
    def payouts_enabled(self) -> bool: ...
    @property
    def blocked_providers(self) -> frozenset[str]: ...


class ApiKeyView(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def merchant_id(self) -> str: ...
    @property
    def scopes(self) -> frozenset[Scope]: ...
    @property
    def revoked(self) -> bool: ...


class CreatedKeyView(Protocol):
    @property
    def key(self) -> ApiKeyView: ...
    @property
    def api_key(self) -> str: ...


class PayoutView(Protocol):
    @property
    def reference(self) -> str: ...
    @property
    def status(self) -> PayoutStatus: ...
    @property
    def amount(self) -> int: ...
    @property
    def currency(self) -> str: ...
    @property
    def awaiting_review(self) -> bool: ...
    @property
    def status_reason(self) -> str | None: ...


class BalanceView(Protocol):
    @property
    def currency(self) -> str: ...
    @property
    def available(self) -> int: ...
    @property
    def reserved(self) -> int: ...


class SettingsView(Protocol):
    @property
    def api_enabled(self) -> bool: ...
    @property
    def payouts_enabled(self) -> bool: ...
    @property
    def closed_currencies(self) -> frozenset[str]: ...


# --- exact signatures of the service methods ------------------------------------------------------


class ChargeFn(Protocol):
    def __call__(self, merchant_id: str, body: object, *, idempotency_key: str | None = ...) -> Reply: ...


class CheckoutFn(Protocol):
    def __call__(
        self, merchant_id: str, body: object, *, idempotency_key: str | None = ..., legacy: bool = ...
    ) -> Reply: ...


class GetRecordFn(Protocol):
    def __call__(self, merchant_id: str, reference: str) -> dict[str, Any]: ...


class DisburseFn(Protocol):
    def __call__(self, merchant_id: str, body: object, *, idempotency_key: str | None) -> Reply: ...


class DisburseLimitsFn(Protocol):
    def __call__(self, merchant_id: str, currency_code: object) -> dict[str, Any]: ...


class PayoutActionFn(Protocol):
    def __call__(self, reference: str) -> PayoutView: ...


class RegisterWebhookFn(Protocol):
    def __call__(
        self, merchant_id: str, body: object, *, legacy: bool = ..., idempotency_key: str | None = ...
    ) -> Reply: ...


class CreateMerchantFn(Protocol):
    def __call__(
        self, name: str, *, settlement_currency: str = ..., approved: bool = ..., fee_percent: object = ...
    ) -> MerchantView: ...


class CreateKeyFn(Protocol):
    def __call__(
        self,
        merchant_id: str,
        scopes: list[Scope] | list[str],
        *,
        per_minute: int | None = ...,
        per_hour: int | None = ...,
    ) -> CreatedKeyView: ...


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
    ) -> object: ...


class BalancesFn(Protocol):
    def __call__(self, merchant_id: str) -> list[dict[str, Any]]: ...


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


def pin_signatures(core: PaymentCore) -> None:
    """Bind every service method to its protocol: mypy compares the signatures."""
    charge: ChargeFn = core.collect.charge
    checkout: CheckoutFn = core.collect.checkout
    get_collection: GetRecordFn = core.collect.get
    disburse: DisburseFn = core.disburse.create
    get_payout: GetRecordFn = core.disburse.get
    limits: DisburseLimitsFn = core.disburse.limits
    release: PayoutActionFn = core.disburse.release
    reject: PayoutActionFn = core.disburse.reject
    resolve: PayoutActionFn = core.disburse.resolve
    register: RegisterWebhookFn = core.webhooks.register
    create_merchant: CreateMerchantFn = core.operator.create_merchant
    create_key: CreateKeyFn = core.operator.create_key
    set_limits: SetLimitsFn = core.operator.set_limits
    balances: BalancesFn = core.operator.balances
    verify: VerifyWebhookFn = verify_webhook
    pinned: list[object] = [
        charge,
        checkout,
        get_collection,
        disburse,
        get_payout,
        limits,
        release,
        reject,
        resolve,
        register,
        create_merchant,
        create_key,
        set_limits,
        balances,
        verify,
    ]
    assert all(callable(fn) for fn in pinned)


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
    """Operator set-up, a charge, a checkout, a payout, review and the books. Returns final statuses."""
    op = core.operator
    merchant: MerchantView = op.create_merchant("Typed Shop", settlement_currency="XAF", fee_percent=0)
    created: CreatedKeyView = op.create_key(merchant.id, [Scope.COLLECT, Scope.DISBURSE], per_minute=60)
    api_key: str = created.api_key
    assert api_key and created.key.scopes == frozenset({Scope.COLLECT, Scope.DISBURSE})
    listed: Sequence[MerchantView] = op.list_merchants()
    assert merchant.id in {m.id for m in listed}
    same: MerchantView = op.get_merchant(merchant.id)
    assert same.approved

    charge: Reply = core.collect.charge(
        merchant.id,
        {"amount": 10_000, "currency": "XAF", "country": "CM", "provider": "mtn_cm", "phone": "670000000"},
        idempotency_key="typed-charge",
    )
    status: int = charge.status
    body: dict[str, Any] = charge.body
    assert status == 202 and body["status"] == CollectionStatus.PENDING.value
    checkout: Reply = core.collect.checkout(
        merchant.id, {"amount": Decimal("1500"), "currency": "XAF"}, idempotency_key="typed-checkout"
    )
    assert checkout.body["checkoutUrl"]
    looked_at: int = core.tick()
    assert looked_at >= 1
    core.run_until_idle(max_rounds=20)
    record: dict[str, Any] = core.collect.get(merchant.id, body["reference"])

    op.set_limits(merchant.id, "XAF", review_threshold=Decimal(5000), per_day=None)
    held = core.disburse.create(
        merchant.id, {"amount": 6000, "currency": "XAF", "phone": "690000000"}, idempotency_key="typed-held"
    )
    rejected: PayoutView = core.disburse.reject(held.body["reference"])
    assert rejected.status is PayoutStatus.REJECTED
    payout = core.disburse.create(
        merchant.id,
        {"amount": 2500, "currency": "XAF", "phone": "690000000", "country": "CM", "provider": "orange_cm"},
        idempotency_key="typed-payout",
    )
    core.run_until_idle()
    paid: dict[str, Any] = core.disburse.get(merchant.id, payout.body["reference"])
    limits: dict[str, Any] = core.disburse.limits(merchant.id, "XAF")
    assert limits["enabled"] is True

    balance: BalanceView = core.check_ledger(merchant.id, "XAF")
    every: Sequence[BalanceView] = core.check_all_ledgers()
    assert balance.available == 7500 and balance.reserved == 0 and len(every) == 1
    shown: list[dict[str, Any]] = op.balances(merchant.id)
    assert shown == [{"currency": "XAF", "available": Decimal(7500), "reserved": Decimal(0)}]
    return {"charge": record["status"], "payout": paid["status"], "rejected": rejected.status.value}


def operator_switches(core: PaymentCore) -> None:
    """The dashboard actions of CONTRACT §2 as library calls."""
    op = core.operator
    merchant: MerchantView = op.create_merchant("Switches", approved=False)
    assert not merchant.approved
    merchant = op.approve_merchant(merchant.id)
    merchant = op.suspend_merchant(merchant.id)
    merchant = op.set_merchant_payouts(merchant.id, False)
    merchant = op.set_collect_fee(merchant.id, Decimal("1.5"))
    merchant = op.block_provider(merchant.id, "mtn_cm", blocked=True)
    assert "mtn_cm" in merchant.blocked_providers and not merchant.payouts_enabled
    created: CreatedKeyView = op.create_key(merchant.id, ["collect"])
    key: ApiKeyView = op.set_rate_limit(created.key.id, per_minute=5, per_hour=50)
    key = op.revoke_key(key.id)
    assert key.revoked
    settings: SettingsView = op.set_platform_payouts(False)
    settings = op.set_platform_api(True)
    settings = op.set_currency_payouts("XAF", False)
    assert "XAF" in settings.closed_currencies and not settings.payouts_enabled
    settings = op.set_currency_payouts("XAF", True)
    settings = op.set_platform_payouts(True)
    current: SettingsView = op.settings()
    assert current.payouts_enabled


def errors_and_enums() -> list[str]:
    """The error record, the enums' members and the ledger's own error type."""
    codes: list[str] = []
    core = PaymentCore.memory(config=Config(sandbox_delay=0))
    try:
        merchant = core.operator.create_merchant("Errors")
        body = {"amount": 100, "currency": "XAF", "phone": "690000000"}
        core.disburse.create(merchant.id, body, idempotency_key=None)
    except PaymentError as error:
        code: str = error.code
        message: str = error.message
        param: str | None = error.param
        details: dict[str, Any] | None = error.details
        as_dict: dict[str, Any] = error.to_dict()
        assert message and as_dict["code"] == code and details is None and param == "Idempotency-Key"
        codes.append(code)
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
    payout_states: list[PayoutStatus] = [
        PayoutStatus.PENDING,
        PayoutStatus.SENT,
        PayoutStatus.PAID,
        PayoutStatus.FAILED,
        PayoutStatus.REJECTED,
    ]
    scopes: list[Scope] = [Scope.COLLECT, Scope.DISBURSE]
    codes.extend(s.value for s in [*collection_states, *payout_states, *scopes])
    return codes


# --- the testing kit ------------------------------------------------------------------------------


def testing_kit() -> list[str]:
    """paymentcore.testing: fake clock, manual network, captured and verifiable deliveries."""
    kit: TestKit = TestKit.create(prompt_limit=5)
    core: PaymentCore = kit.core
    clock: FakeClock = kit.clock
    network: ManualNetwork = kit.network
    sender: CapturingSender = kit.sender
    try:
        merchant: MerchantView = kit.merchant("Kit Shop", settlement_currency="XAF")
        secret: str = kit.webhook(merchant.id, url="https://shop.example/hooks")
        kit.fund(merchant.id, "XAF", Decimal(1000))
        fund(core, merchant.id, "XAF", "500")
        reference: str = core.collect.charge(
            merchant.id,
            {"amount": 500, "currency": "XAF", "country": "CM", "provider": "mtn_cm", "phone": "670000000"},
        ).body["reference"]
        network.complete(reference)
        kit.settle()
        failing: str = core.collect.charge(
            merchant.id,
            {"amount": 500, "currency": "XAF", "country": "CM", "provider": "mtn_cm", "phone": "670000001"},
        ).body["reference"]
        kit.settle()
        network.fail(failing, "PAYER_DECLINED")
        now_ms: int = clock.advance(seconds=1)
        kit.advance(0)
        refused_body = {"amount": 700, "currency": "XAF", "phone": "690000021"}
        payout_ref: str = core.disburse.create(merchant.id, refused_body, idempotency_key="kit-payout").body[
            "reference"
        ]
        network.refuse(payout_ref)
        network.moved(payout_ref, False)
        kit.settle()
        resolved: PayoutView = core.disburse.resolve(payout_ref)
        assert resolved.status is PayoutStatus.FAILED
        deliveries: list[CapturedDelivery] = kit.deliveries
        assert deliveries == sender.deliveries
        names: list[str] = []
        for delivery in deliveries:
            stamp: int = delivery.verify(secret, now=now_ms / 1000)
            assert stamp == verify_webhook(secret, delivery.headers, delivery.body, now=now_ms / 1000)
            parsed: Any = delivery.json()
            assert parsed["eventId"]
            names.append(delivery.event)
        try:
            verify_webhook(secret, deliveries[0].headers, deliveries[0].body + b" ", now=now_ms / 1000)
        except WebhookVerificationError:
            names.append("forgery refused")
        return names
    finally:
        core.close()
