"""Money invariants under random operation (hypothesis stateful), on both storage adapters.

After every step, per merchant and currency: credited = available + reserved + paid out, available >= 0,
reserved = the sum of the open payouts' amounts, and no reservation was resolved twice. Run longer with
``PAYMENTCORE_STATEFUL_EXAMPLES=2000 python3 -m pytest tests/property``.
"""

from __future__ import annotations

import os
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from paymentcore import Config, FakeClock, PaymentCore
from paymentcore._domain.models import PayoutStatus, Resolution
from paymentcore.errors import InvalidTransitionError, PaymentError
from paymentcore.testing import CapturingSender, ManualNetwork, public_resolver

EXAMPLES = int(os.environ.get("PAYMENTCORE_STATEFUL_EXAMPLES", "40"))
PHONES = ["670000000", "670000011", "690000000", "650000021", "670000022", "670000023"]


class MoneyMachine(RuleBasedStateMachine):
    """Drives a core through collections, payouts, reviews, resolutions, replays and time."""

    store_kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.network = ManualNetwork()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        kwargs: dict[str, Any] = {
            "clock": self.clock,
            "network": self.network,
            "sender": CapturingSender(),
            "resolver": public_resolver,
            "config": Config(webhook_retry_delays=(), webhook_jitter=0.0),
        }
        if self.store_kind == "sqlite":
            self._tmp = tempfile.TemporaryDirectory()
            self.core = PaymentCore.sqlite(Path(self._tmp.name) / "m.db", synchronous="NORMAL", **kwargs)
        else:
            self.core = PaymentCore.memory(**kwargs)
        self.collections: list[str] = []
        self.payouts: list[str] = []
        self.keys: dict[str, tuple[int, str]] = {}  # idempotency key -> (amount, phone) it was used with
        self.key_used_at: dict[str, int] = {}  # idempotency key -> when its answer was kept (ms)
        self.counter = 0

    @initialize()
    def merchant(self) -> None:
        self.merchant_id = self.core.operator.create_merchant("Shop", fee_percent="1.5").id

    def teardown(self) -> None:
        self.core.close()
        if self._tmp is not None:
            self._tmp.cleanup()

    def _next(self) -> int:
        self.counter += 1
        return self.counter

    # --- collections --------------------------------------------------------------------------------

    @rule(amount=st.integers(100, 50_000), phone=st.sampled_from(PHONES[:3]))
    def charge(self, amount: int, phone: str) -> None:
        provider = "orange_cm" if phone.startswith("69") else "mtn_cm"
        try:
            collection = self.core.collect.charge(
                self.merchant_id,
                amount=amount,
                currency="XAF",
                country="CM",
                provider=provider,
                phone=phone,
                idempotency_key=f"c{self._next()}",
            )
        except PaymentError as error:
            assert error.code == "RECIPIENT_BUSY"
            return
        self.collections.append(collection.reference)
        self.core.tick()

    @precondition(lambda self: bool(self.collections))
    @rule(data=st.data(), succeed=st.booleans())
    def decide_collection(self, data: st.DataObject, succeed: bool) -> None:
        reference = data.draw(st.sampled_from(self.collections))
        if succeed:
            self.network.complete(reference)
        else:
            self.network.fail(reference, "PAYER_DECLINED")
        self.core.tick()

    # --- payouts ------------------------------------------------------------------------------------

    @rule(amount=st.integers(100, 30_000), phone=st.sampled_from(PHONES), replay=st.booleans())
    def payout(self, amount: int, phone: str, replay: bool) -> None:
        key = f"p{self._next()}"
        if replay and self.keys:
            key = next(iter(self.keys))
        asked = (amount, phone)
        retention_ms = self.core.config.idempotency_retention_hours * 3_600_000
        if key in self.keys and self.key_used_at[key] < self.clock.now() - retention_ms:
            del self.keys[key]  # its answer is no longer kept: the key is new again (CONTRACT §5)
        try:
            payout = self.core.disburse.create(
                self.merchant_id, amount=amount, currency="XAF", phone=phone, idempotency_key=key
            )
        except PaymentError as error:
            assert error.code in {"INSUFFICIENT_BALANCE", "PAYOUT_LIMIT_EXCEEDED", "IDEMPOTENCY_KEY_REUSED"}
            if error.code == "IDEMPOTENCY_KEY_REUSED":
                assert replay and self.keys[key] != asked
            return
        reference = payout.reference
        if key in self.keys:
            assert self.keys[key] == asked and reference in self.payouts  # a replay moves nothing
            return
        self.keys[key] = asked
        self.key_used_at[key] = self.clock.now()
        self.payouts.append(reference)
        if phone.endswith("21"):
            self.network.refuse(reference)
        self.core.tick()

    @precondition(lambda self: bool(self.payouts))
    @rule(data=st.data(), outcome=st.sampled_from(["complete", "fail", "moved", "not-moved"]))
    def drive_payout(self, data: st.DataObject, outcome: str) -> None:
        reference = data.draw(st.sampled_from(self.payouts))
        if outcome == "complete":
            self.network.complete(reference)
        elif outcome == "fail":
            self.network.fail(reference, "network said no")
        else:
            self.network.moved(reference, outcome == "moved")
        self.core.tick()

    @precondition(lambda self: bool(self.payouts))
    @rule(data=st.data(), action=st.sampled_from(["release", "reject", "resolve"]))
    def operator_action(self, data: st.DataObject, action: str) -> None:
        reference = data.draw(st.sampled_from(self.payouts))
        before = self.core.disburse.find(reference)
        try:
            getattr(self.core.disburse, action)(reference)
        except InvalidTransitionError:
            assert self.core.disburse.find(reference) == before  # a refused action changes nothing

    @rule(
        per_day=st.one_of(st.none(), st.integers(1_000, 100_000)),
        threshold=st.one_of(st.none(), st.integers(1_000, 20_000)),
    )
    def limits(self, per_day: int | None, threshold: int | None) -> None:
        self.core.operator.set_limits(
            self.merchant_id,
            "XAF",
            per_day=None if per_day is None else Decimal(per_day),
            review_threshold=None if threshold is None else Decimal(threshold),
        )

    @rule(seconds=st.sampled_from([1, 60, 3600, 86_401]))
    def advance(self, seconds: int) -> None:
        self.clock.advance(seconds)
        self.core.tick()

    # --- invariants ---------------------------------------------------------------------------------

    @invariant()
    def books_balance(self) -> None:
        if not hasattr(self, "merchant_id"):
            return
        balance = self.core.check_ledger(self.merchant_id, "XAF")  # credited = available + reserved + paid
        assert balance.available >= 0
        open_sum = 0
        posted = 0
        with self.core.store.read() as tx:
            for reference in self.payouts:
                payout = tx.payouts.get(reference)
                assert payout is not None
                if payout.resolution is None:
                    assert payout.status is not PayoutStatus.REJECTED
                    assert payout.status is not PayoutStatus.PAID
                    open_sum += payout.amount
                elif payout.resolution is Resolution.POSTED:
                    assert payout.status is PayoutStatus.PAID
                    posted += payout.amount
            entries = tx.ledger.entries(self.merchant_id, "XAF")
        assert balance.reserved == open_sum
        assert balance.paid_out == posted
        resolutions = [e.reference for e in entries if e.kind in ("post", "release")]
        assert len(resolutions) == len(set(resolutions)), "a reservation was resolved twice"


class SqliteMoneyMachine(MoneyMachine):
    store_kind = "sqlite"


common = settings(
    max_examples=EXAMPLES,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMoneyOnMemory = MoneyMachine.TestCase
TestMoneyOnMemory.settings = common
TestMoneyOnSqlite = SqliteMoneyMachine.TestCase
TestMoneyOnSqlite.settings = settings(common, max_examples=max(10, EXAMPLES // 2))
