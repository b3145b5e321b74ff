"""A testing kit for integrators: a core on the memory store with a fake clock, a network you drive by
hand, captured webhook deliveries, and a helper that funds a balance.

Use it directly::

    kit = TestKit.create()
    shop = kit.merchant("My shop")
    ref = kit.core.collect.charge(shop.id, {...}).body["reference"]
    kit.network.complete(ref)
    kit.settle()
    assert kit.deliveries[-1].event == "collect.succeeded"

or through the pytest plugin, which installing paymentcore registers (the ``pytest11`` entry point) and
which provides the ``payment_kit`` fixture.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal
from typing import Any

import attrs

from paymentcore import ledger
from paymentcore.adapters.clock import FakeClock
from paymentcore.bootstrap import PaymentCore
from paymentcore.config import Config
from paymentcore.models import Merchant
from paymentcore.money import parse_positive_minor
from paymentcore.ports import (
    CollectionRequest,
    CollectionResult,
    DeliveryResult,
    DeliveryTarget,
    NetworkOutcome,
    PayoutRequest,
    PayoutResult,
)
from paymentcore.signing import EVENT_HEADER, verify_webhook

__all__ = [
    "CapturedDelivery",
    "CapturingSender",
    "ManualNetwork",
    "TestKit",
    "fund",
    "public_resolver",
]


class ManualNetwork:
    """A network that answers only what the test tells it: every request hangs until decided.

    ``complete(ref)`` / ``fail(ref, category)`` decide a collection or a payout; an undecided one stays
    pending for ever. ``refuse(ref)`` makes a payout's dispatch fail; ``moved(ref, bool)`` answers a
    resolution.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.on_decision: list[Callable[[str], None]] = []  # told the reference of each decision
        self.collections: dict[str, CollectionRequest] = {}
        self.payouts: dict[str, PayoutRequest] = {}
        self.send_count: dict[str, int] = {}
        self._outcomes: dict[str, tuple[NetworkOutcome, str | None]] = {}
        self._refused: set[str] = set()
        self._moved: dict[str, bool] = {}

    # --- the test's controls ---------------------------------------------------------------------

    def complete(self, reference: str) -> None:
        with self._lock:
            self._outcomes[reference] = (NetworkOutcome.SUCCESS, None)
        self._decided(reference)

    def fail(self, reference: str, category: str = "PAYER_DECLINED") -> None:
        with self._lock:
            self._outcomes[reference] = (NetworkOutcome.FAILED, category)
        self._decided(reference)

    def _decided(self, reference: str) -> None:
        for listener in self.on_decision:
            listener(reference)

    def refuse(self, reference: str) -> None:
        with self._lock:
            self._refused.add(reference)

    def moved(self, reference: str, moved: bool) -> None:
        with self._lock:
            self._moved[reference] = moved

    # --- the Network port ------------------------------------------------------------------------

    def request_collection(self, request: CollectionRequest) -> None:
        with self._lock:
            self.collections[request.reference] = request

    def collection_status(self, request: CollectionRequest, now: int) -> CollectionResult:
        with self._lock:
            outcome, category = self._outcomes.get(request.reference, (NetworkOutcome.PENDING, None))
        if outcome is NetworkOutcome.FAILED:
            return CollectionResult(outcome, category, f"Failed in the test network ({category}).")
        return CollectionResult(outcome)

    def send_payout(self, request: PayoutRequest) -> PayoutResult:
        with self._lock:
            self.payouts[request.reference] = request
            self.send_count[request.reference] = self.send_count.get(request.reference, 0) + 1
            if request.reference in self._refused:
                return PayoutResult(NetworkOutcome.FAILED, reason="Refused by the test network.")
        return PayoutResult(NetworkOutcome.SUCCESS, provider_reference="TEST-" + request.reference)

    def payout_status(self, request: PayoutRequest, now: int) -> PayoutResult:
        with self._lock:
            outcome, category = self._outcomes.get(request.reference, (NetworkOutcome.PENDING, None))
        return PayoutResult(outcome, provider_reference="TEST-" + request.reference, reason=category)

    def money_moved(self, request: PayoutRequest) -> bool:
        with self._lock:
            return self._moved.get(request.reference, False)


@attrs.frozen
class CapturedDelivery:
    """One webhook delivery as the receiver would have seen it."""

    url: str
    headers: Mapping[str, str]
    body: bytes

    @property
    def event(self) -> str:
        return self.headers[EVENT_HEADER]

    def json(self) -> Any:
        return json.loads(self.body, parse_float=Decimal)

    def verify(self, secret: str, *, now: float) -> int:
        return verify_webhook(secret, self.headers, self.body, now=now)


class CapturingSender:
    """A WebhookSender that records deliveries and answers ``status`` (200 unless told otherwise)."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.deliveries: list[CapturedDelivery] = []
        self._lock = threading.Lock()

    def send(
        self, target: DeliveryTarget, headers: Mapping[str, str], body: bytes, timeout: float
    ) -> DeliveryResult:
        with self._lock:
            self.deliveries.append(CapturedDelivery(url=target.url, headers=dict(headers), body=body))
            status = self.status
        return DeliveryResult(status=status)


def public_resolver(host: str, port: int) -> list[str]:
    """A resolver that answers a public documentation-free address for every name (no DNS in tests)."""
    return ["93.184.216.34"]


def fund(core: PaymentCore, merchant_id: str, currency: str, amount: Decimal | int | str) -> None:
    """Credit a balance directly through the ledger, as if a collection had settled."""
    cur = core.catalogue.currency(currency, settleable=True)
    value = Decimal(amount) if isinstance(amount, str) else amount
    minor = parse_positive_minor(value, cur.decimals)
    with core.store.transaction() as tx:
        ledger.credit(
            tx,
            entry_id=core.deps.refs.token("led"),
            merchant_id=merchant_id,
            currency=cur.code,
            net=minor,
            fee=0,
            reference="test-funding",
            now=core.clock.now(),
        )


@attrs.define
class TestKit:
    """A core on the memory store with a fake clock, a hand-driven network and captured webhooks."""

    __test__ = False  # not a pytest test class

    core: PaymentCore
    clock: FakeClock
    network: ManualNetwork
    sender: CapturingSender

    @classmethod
    def create(cls, **config: Any) -> TestKit:
        clock = FakeClock()
        network = ManualNetwork()
        sender = CapturingSender()
        settings = {"webhook_retry_delays": (), "webhook_jitter": 0.0, **config}
        core = PaymentCore.memory(
            clock=clock,
            network=network,
            sender=sender,
            resolver=public_resolver,
            config=Config(**settings),
        )
        network.on_decision.append(core.make_due)  # a decision is picked up by the next settle()
        return cls(core=core, clock=clock, network=network, sender=sender)

    @property
    def deliveries(self) -> list[CapturedDelivery]:
        return self.sender.deliveries

    def merchant(self, name: str = "Test Shop", **kwargs: Any) -> Merchant:
        return self.core.operator.create_merchant(name, **kwargs)

    def fund(self, merchant_id: str, currency: str, amount: Decimal | int | str) -> None:
        fund(self.core, merchant_id, currency, amount)

    def webhook(self, merchant_id: str, url: str = "https://shop.example/webhooks") -> str:
        """Register a webhook endpoint and return its signing secret."""
        reply = self.core.webhooks.register(merchant_id, {"url": url})
        secret: str = reply.body["signingSecret"]
        return secret

    def settle(self) -> None:
        """Run the background work until nothing is due (prompts, dispatch, deliveries)."""
        self.core.run_until_idle()

    def advance(self, seconds: float = 0, **kwargs: float) -> None:
        self.clock.advance(seconds, **kwargs)
        self.settle()


try:  # the pytest plugin part: only when pytest is there
    import pytest

    @pytest.fixture
    def payment_kit() -> Iterator[TestKit]:
        """A fresh TestKit for one test."""
        kit = TestKit.create()
        yield kit
        kit.core.close()

except ImportError:  # pragma: no cover
    pass
