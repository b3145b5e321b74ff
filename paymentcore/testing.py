"""A testing kit for integrators: a core on the memory store with a fake clock, a network you drive by
hand, captured webhook deliveries, and a helper that funds a balance.

Use it directly::

    kit = TestKit.create()
    shop = kit.merchant("My shop")
    secret = kit.webhook(shop.id)
    ref = kit.core.collect.charge(
        shop.id, amount=2500, currency="XAF", country="CM", provider="mtn_cm", phone="670000001"
    ).reference
    kit.settle()
    kit.network.complete(ref)
    kit.settle()
    assert kit.deliveries[-1].event == "collect.succeeded"
    event = construct_event(secret, kit.deliveries[-1].headers, kit.deliveries[-1].body)  # no clock

or through the pytest plugin, which installing paymentcore registers (the ``pytest11`` entry point) and
which provides the ``payment_kit`` fixture.

An application that talks to a paymentcore server is tested with the client it runs with:
``kit.client(shop.id)`` is a :class:`paymentcore.client.Client` (``kit.async_client`` an
``AsyncClient``) for a new key of the merchant, wired to the kit's core through the server's real app in
this process (httpx's ASGI transport), so the JSON, the errors and the retries are the real ones. The
server and httpx are imported then, never when this module is.

Signatures and the two clocks. The core signs each delivery with *its* clock, and the kit's core runs
on a :class:`FakeClock`, while the application under test verifies with the real one
(:func:`~paymentcore._domain.events.construct_event` and
:func:`~paymentcore._domain.signing.verify_webhook` default to ``time.time()``). The kit bridges the two
honestly:

1. the kit's fake clock starts at the wall-clock time, so what the core signs is already fresh for a
   receiver on the real clock, and a test that moves the fake clock on by 301 s still sees a replay
   refused when it verifies with ``now=kit.clock.now() / 1000``;
2. a delivery signed when the fake clock is more than :data:`RESTAMP_AFTER` seconds away from the
   wall clock (the test advanced it past an expiry, a review, ...) is re-signed at wall time by the
   kit, with the endpoint's real secret, which the kit reads from its own core (the sender alone does
   not know it). It re-signs only a delivery whose original signature it has first checked with that
   same secret, so a core that signs wrongly is never hidden. Only ``X-Service-Timestamp`` and
   ``X-Service-Signature`` change; the body and the other headers are exactly the core's, and
   ``CapturedDelivery.sent_headers`` keeps the headers exactly as the core handed them over.

So ``construct_event(secret, delivery.headers, delivery.body)``, with no clock, accepts a kit delivery
(for the five minutes a real one would be accepted), and ``delivery.construct(secret)`` checks its
authenticity at the time it was signed. A :class:`CapturingSender` used on its own records what it is
given and never re-signs.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import attrs

from paymentcore._domain.errors import PaymentError
from paymentcore._domain.events import WebhookEvent, construct_event
from paymentcore._domain.models import Merchant, Scope
from paymentcore._domain.money import parse_json, parse_positive_minor
from paymentcore._domain.signing import (
    EVENT_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    WebhookVerificationError,
    signature,
    verify_webhook,
)
from paymentcore._domain.signing import (
    header as _header,
)
from paymentcore._root.core import PaymentCore
from paymentcore._services import ledger as ledger
from paymentcore.adapters.clock import FakeClock
from paymentcore.config import Config
from paymentcore.ports import (
    CollectionRequest,
    CollectionResult,
    DeliveryResult,
    DeliveryTarget,
    NetworkError,
    NetworkOutcome,
    PayoutRequest,
    PayoutResult,
)

if TYPE_CHECKING:  # the kit's clients load httpx (and the server) only when a test asks for one
    from paymentcore._kit_http import AppThread
    from paymentcore.client import AsyncClient, Client

__all__ = [
    "RESTAMP_AFTER",
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
    resolution. ``hang(provider)`` makes every call for that provider block (as a mobile network that
    does not answer) until ``unhang(provider)``, or fail as unanswered after ``hang_timeout`` seconds:
    with a running worker, the other providers' work goes on meanwhile.
    """

    def __init__(self, *, hang_timeout: float = 30.0) -> None:
        self.hang_timeout = hang_timeout
        self._hanging: dict[str, threading.Event] = {}
        self.hung_calls: Counter[str] = Counter()  # provider -> calls that were held
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

    def hang(self, provider: str) -> None:
        """Every call for ``provider`` (a code such as ``mtn_cm``) blocks from now on."""
        with self._lock:
            self._hanging.setdefault(provider, threading.Event())

    def unhang(self, provider: str) -> None:
        """The provider answers again: calls held so far fail as unanswered, new ones go through."""
        with self._lock:
            released = self._hanging.pop(provider, None)
        if released is not None:
            released.set()

    def _hold(self, provider: str) -> None:
        with self._lock:
            hanging = self._hanging.get(provider)
            if hanging is not None:
                self.hung_calls[provider] += 1
        if hanging is not None:
            hanging.wait(self.hang_timeout)
            raise NetworkError(f"the test network's provider {provider} did not answer")

    # --- the Network port ------------------------------------------------------------------------

    def request_collection(self, request: CollectionRequest) -> None:
        self._hold(request.provider)
        with self._lock:
            self.collections[request.reference] = request

    def collection_status(self, request: CollectionRequest, now: int) -> CollectionResult:
        self._hold(request.provider)
        with self._lock:
            outcome, category = self._outcomes.get(request.reference, (NetworkOutcome.PENDING, None))
        if outcome is NetworkOutcome.FAILED:
            return CollectionResult(outcome, category, f"Failed in the test network ({category}).")
        return CollectionResult(outcome)

    def send_payout(self, request: PayoutRequest) -> PayoutResult:
        self._hold(request.provider)
        with self._lock:
            self.payouts[request.reference] = request
            self.send_count[request.reference] = self.send_count.get(request.reference, 0) + 1
            if request.reference in self._refused:
                return PayoutResult(NetworkOutcome.FAILED, reason="Refused by the test network.")
        return PayoutResult(NetworkOutcome.SUCCESS, provider_reference="TEST-" + request.reference)

    def payout_status(self, request: PayoutRequest, now: int) -> PayoutResult:
        self._hold(request.provider)
        with self._lock:
            outcome, category = self._outcomes.get(request.reference, (NetworkOutcome.PENDING, None))
        return PayoutResult(outcome, provider_reference="TEST-" + request.reference, reason=category)

    def money_moved(self, request: PayoutRequest) -> bool:
        with self._lock:
            return self._moved.get(request.reference, False)


#: a kit delivery whose signature timestamp is further than this from the wall clock is re-signed
RESTAMP_AFTER = 60

Restamp = Callable[[Mapping[str, str], bytes], Mapping[str, str]]


@attrs.frozen
class CapturedDelivery:
    """One webhook delivery as the receiver would have seen it.

    ``headers`` are what the application should verify (for a kit delivery possibly re-signed at wall
    time, see the module's docstring); ``sent_headers`` are the headers exactly as the core handed them
    to the sender (the same as ``headers`` unless the kit re-signed the delivery).
    """

    url: str
    headers: Mapping[str, str]
    body: bytes
    sent_headers: Mapping[str, str] = attrs.field(
        default=attrs.Factory(lambda self: self.headers, takes_self=True), repr=False
    )

    @property
    def event(self) -> str:
        return self.headers[EVENT_HEADER]

    @property
    def timestamp(self) -> int | None:
        """The ``X-Service-Timestamp`` of :attr:`headers` (Unix seconds); None if missing or malformed."""
        stamp = _header(self.headers, TIMESTAMP_HEADER)
        if stamp is None or not stamp.isascii() or not stamp.isdigit() or len(stamp) > 12:
            return None
        return int(stamp)

    @property
    def restamped(self) -> bool:
        """True when the kit re-signed this delivery at wall time (:attr:`sent_headers` are the core's)."""
        return dict(self.headers) != dict(self.sent_headers)

    def json(self) -> Any:
        return json.loads(self.body, parse_float=Decimal)

    def verify(self, secret: str, *, now: float | None = None) -> int:
        """``verify_webhook`` over this delivery; ``now`` defaults to the wall clock, as a receiver's."""
        return verify_webhook(secret, self.headers, self.body, now=now)

    def construct(self, secret: str, *, now: float | None = None) -> WebhookEvent:
        """``construct_event`` over this delivery, by default at the time it was signed.

        Without ``now`` this checks authenticity (the secret, the untouched body) but not freshness, so
        it works however far a test has moved either clock; pass ``now`` to check freshness as well.
        A delivery without a usable timestamp is refused as ``construct_event`` refuses it.
        """
        return construct_event(secret, self.headers, self.body, now=self.timestamp if now is None else now)


class CapturingSender:
    """A WebhookSender that records deliveries and answers ``status`` (200 unless told otherwise).

    ``restamp``, when set (the :class:`TestKit` sets it), is given the headers and body of each delivery
    and returns the headers to record; the headers as sent are kept in ``sent_headers``. Without it the
    sender records exactly what it is given.
    """

    def __init__(self, status: int = 200, *, restamp: Restamp | None = None) -> None:
        self.status = status
        self.restamp = restamp
        self.deliveries: list[CapturedDelivery] = []
        self._lock = threading.Lock()

    def send(
        self, target: DeliveryTarget, headers: Mapping[str, str], body: bytes, timeout: float
    ) -> DeliveryResult:
        sent = dict(headers)
        restamp = self.restamp
        shown = dict(restamp(sent, body)) if restamp is not None else sent
        with self._lock:
            self.deliveries.append(
                CapturedDelivery(url=target.url, headers=shown, body=body, sent_headers=sent)
            )
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
    _app: AppThread | None = attrs.field(default=None, init=False, repr=False)
    _clients: list[Client | AsyncClient] = attrs.field(factory=list, init=False, repr=False)
    _closed: bool = attrs.field(default=False, init=False, repr=False)

    @classmethod
    def create(cls, **config: Any) -> TestKit:
        """A fresh kit; ``config`` are :class:`Config` fields.

        The fake clock starts at the wall-clock time (to the millisecond), so that deliveries are
        signed with a timestamp a receiver on the real clock accepts (see the module's docstring).
        """
        clock = FakeClock(time.time_ns() // 1_000_000)
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
        kit = cls(core=core, clock=clock, network=network, sender=sender)
        sender.restamp = kit.restamp
        return kit

    def restamp(self, headers: Mapping[str, str], body: bytes) -> Mapping[str, str]:
        """The headers a receiver on the wall clock can verify: ``headers`` themselves when their
        timestamp is within :data:`RESTAMP_AFTER` seconds of the wall clock, else the same headers
        re-signed at wall time with the endpoint's secret.

        The secret is the one of the merchant whose event this is (``eventId`` in the body). Nothing is
        re-signed unless the original signature verifies with that secret at its own timestamp: a
        delivery the core signed wrongly, or with a secret rotated meanwhile, is recorded as sent.
        """
        stamp = _header(headers, TIMESTAMP_HEADER)
        wall = time.time()
        if stamp is None or not stamp.isascii() or not stamp.isdigit() or len(stamp) > 12:
            return headers
        if abs(wall - int(stamp)) <= RESTAMP_AFTER:
            return headers
        secret = self._secret_for(body)
        if secret is None:
            return headers
        try:
            verify_webhook(secret, headers, body, now=int(stamp))
        except WebhookVerificationError:
            return headers
        fresh = int(wall)
        replaced = {
            TIMESTAMP_HEADER.lower(): str(fresh),
            SIGNATURE_HEADER.lower(): signature(secret, fresh, body),
        }
        return {key: replaced.get(key.lower(), value) for key, value in headers.items()}

    def _secret_for(self, body: bytes) -> str | None:
        """The current signing secret of the merchant whose event ``body`` carries, if any."""
        try:
            event_id = parse_json(body).get("eventId")
        except (PaymentError, AttributeError):
            return None
        if not isinstance(event_id, str):
            return None
        with self.core.store.read() as tx:
            event = tx.outbox.get(event_id)
        if event is None:
            return None
        try:
            return self.core.webhooks.secret_of(event.merchant_id)
        except Exception:  # no endpoint any more, or a secret the server key cannot read
            return None

    @property
    def deliveries(self) -> list[CapturedDelivery]:
        return self.sender.deliveries

    def merchant(self, name: str = "Test Shop", **kwargs: Any) -> Merchant:
        return self.core.operator.create_merchant(name, **kwargs)

    def fund(self, merchant_id: str, currency: str, amount: Decimal | int | str) -> None:
        fund(self.core, merchant_id, currency, amount)

    def webhook(self, merchant_id: str, url: str = "https://shop.example/webhooks") -> str:
        """Register a webhook endpoint and return its signing secret."""
        return self.core.webhooks.register(merchant_id, url=url).signing_secret

    def settle(self) -> None:
        """Run the background work until nothing is due (prompts, dispatch, deliveries)."""
        self.core.run_until_idle()

    def batch_references(self, merchant_id: str, batch_id: str) -> list[str]:
        """The references of the payouts a bulk request created, in item order (every page read), to
        decide them on :attr:`network` (``complete``, ``fail``, ``refuse``) one by one."""
        references: list[str] = []
        after: int | None = None
        while True:
            batch = self.core.disburse.get_bulk(merchant_id, batch_id, limit=100, starting_after=after)
            references += [item.payout.reference for item in batch.items if item.payout is not None]
            if not batch.has_more or not batch.items:
                return references
            after = batch.items[-1].index

    def advance(self, seconds: float = 0, **kwargs: float) -> None:
        self.clock.advance(seconds, **kwargs)
        self.settle()

    # --- the HTTP client, wired to this kit's core -----------------------------------------------

    def client(
        self,
        merchant_id: str,
        *,
        scopes: Sequence[Scope | str] = ("collect", "disburse"),
        max_retries: int = 2,
        timeout: float = 30.0,
    ) -> Client:
        """A :class:`paymentcore.client.Client` for a new API key of ``merchant_id`` (with ``scopes``),
        talking to this kit's core through the real HTTP app in this process (httpx's ASGI transport):
        the same client, the same JSON and the same errors as against a server, without a port.

        The key has the largest rate limits (1,000,000 a minute and an hour). The background work runs
        only when the test calls :meth:`settle` or :meth:`advance`, as for the core. The kit closes
        its clients in :meth:`close`.
        """
        from paymentcore._kit_http import SyncBridge
        from paymentcore.client import Client

        made = Client(
            self.core.config.public_url,
            self._key(merchant_id, scopes),
            transport=SyncBridge(self._served()),
            max_retries=max_retries,
            timeout=timeout,
        )
        self._clients.append(made)
        return made

    def async_client(
        self,
        merchant_id: str,
        *,
        scopes: Sequence[Scope | str] = ("collect", "disburse"),
        max_retries: int = 2,
        timeout: float = 30.0,
    ) -> AsyncClient:
        """:meth:`client` for asyncio: a :class:`paymentcore.client.AsyncClient`, usable on any event
        loop (the app runs on a loop of its own)."""
        from paymentcore._kit_http import AsyncBridge
        from paymentcore.client import AsyncClient

        made = AsyncClient(
            self.core.config.public_url,
            self._key(merchant_id, scopes),
            transport=AsyncBridge(self._served()),
            max_retries=max_retries,
            timeout=timeout,
        )
        self._clients.append(made)
        return made

    def _key(self, merchant_id: str, scopes: Sequence[Scope | str]) -> str:
        created = self.core.operator.create_key(
            merchant_id,
            [str(s.value if isinstance(s, Scope) else s) for s in scopes],
            per_minute=1_000_000,
            per_hour=1_000_000,
        )
        return created.api_key

    def _served(self) -> AppThread:
        """The server's app on this kit's core, started on first use (the worker never runs in it)."""
        if self._app is None:
            from paymentcore._kit_http import AppThread
            from paymentcore_server.app import create_app  # the testing kit may wire the server

            self._app = AppThread(create_app(self.core, console=False))
        return self._app

    def close(self) -> None:
        """Close the kit's clients, stop its app and close the core (once; again does nothing)."""
        if self._closed:
            return
        self._closed = True
        from paymentcore.client import Client

        for made in self._clients:
            if isinstance(made, Client):
                made.close()
            # an AsyncClient over the kit's bridge holds no connection: nothing is left open
        self._clients.clear()
        if self._app is not None:
            self._app.close()
            self._app = None
        self.core.close()


try:  # the pytest plugin part: only when pytest is there
    import pytest

    @pytest.fixture
    def payment_kit() -> Iterator[TestKit]:
        """A fresh TestKit for one test."""
        kit = TestKit.create()
        yield kit
        kit.close()

except ImportError:  # pragma: no cover
    pass
