"""The operator's overview (``core.operator.overview()``) on the memory store with a fake clock.

Payouts paid, failed (refused), held for review; collections that succeed and fail; an earlier payout
the same UTC day; work left due while the clock moves on; a webhook endpoint whose deliveries fail: each
figure must say what happened, in the right window and hour. And the metrics gauges that come from the
same queries (the oldest pending item's wait, the endpoints failing or disabled).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal

import attrs
import pytest
from prometheus_client import generate_latest

from paymentcore import Config, FakeClock, PaymentCore, PayoutStatus, QueueTotal, WorkBacklog
from paymentcore.errors import InvalidRequestError
from paymentcore.testing import CapturingSender, ManualNetwork, fund, public_resolver
from paymentcore_server.metrics import Metrics

T0 = datetime(2026, 3, 10, 7, 40, tzinfo=UTC)  # an earlier payout at 07:40; the rest at 09:20 and later
HOUR_S = 3600


@attrs.define
class World:
    core: PaymentCore
    clock: FakeClock
    network: ManualNetwork
    merchant_id: str
    n: int = 0

    def payout(self, amount: int, **extra: str) -> str:
        self.n += 1
        return self.core.disburse.create(
            self.merchant_id,
            amount=amount,
            currency="XAF",
            phone="670000001",
            idempotency_key=f"k{self.n}",
            **extra,
        ).reference

    def charge(self, amount: int) -> str:
        return self.core.collect.charge(
            self.merchant_id,
            amount=amount,
            currency="XAF",
            country="CM",
            provider="mtn_cm",
            phone="670000002",
        ).reference


@pytest.fixture
def world() -> Iterator[World]:
    clock = FakeClock(int(T0.timestamp() * 1000))
    network = ManualNetwork()
    core = PaymentCore.memory(
        clock=clock,
        network=network,
        sender=CapturingSender(status=500),  # every webhook delivery fails
        resolver=public_resolver,
        config=Config(webhook_retry_delays=(), webhook_jitter=0.0, sandbox_delay=0),
    )
    network.on_decision.append(core.make_due)
    shop = core.operator.create_merchant("Chez Amina")
    fund(core, shop.id, "XAF", 1_000_000)
    core.operator.set_limits(shop.id, "XAF", review_threshold="5000")
    yield World(core, clock, network, shop.id)
    core.close()


def test_the_figures_say_what_happened_in_each_window_and_hour(world: World) -> None:
    core, network = world.core, world.network
    early = world.payout(1000)  # 07:40: today, not in the last hour
    core.run_until_idle()
    network.complete(early)
    core.run_until_idle()
    world.clock.advance(100 * 60)  # 09:20
    core.webhooks.register(world.merchant_id, url="https://shop.example/hooks")

    paid = world.payout(2500)
    refused = world.payout(1500)
    network.refuse(refused)
    held = world.payout(7000)  # above the review threshold
    core.run_until_idle()
    network.complete(paid)
    succeeded, declined = world.charge(1000), world.charge(3000)
    core.run_until_idle()
    network.complete(succeeded)
    network.fail(declined)
    core.run_until_idle()

    o = core.operator.overview()
    assert o.at == datetime(2026, 3, 10, 9, 20, tzinfo=UTC)
    assert o.last_hour.start == datetime(2026, 3, 10, 8, 20, tzinfo=UTC)
    assert o.today.start == datetime(2026, 3, 10, tzinfo=UTC)
    [hour] = o.last_hour.payouts
    assert (hour.currency, hour.count, hour.amount) == ("XAF", 3, Decimal(11_000))
    assert (hour.succeeded, hour.failed, hour.failed_share) == (1, 1, Decimal("0.5"))
    [today] = o.today.payouts
    assert (today.count, today.amount, today.succeeded, today.failed) == (4, Decimal(12_000), 2, 1)
    [collections] = o.today.collections
    assert (collections.count, collections.amount, collections.succeeded, collections.failed) == (
        2,
        Decimal(4000),
        1,
        1,
    )
    assert o.last_hour.collections == o.today.collections

    assert len(o.payout_hours) == 24 and o.payout_hours[-1].start == datetime(2026, 3, 10, 9, tzinfo=UTC)
    now_hour, seven = o.payout_hours[-1].counts, o.payout_hours[-3].counts
    assert (now_hour["PAID"], now_hour["FAILED"], now_hour["PENDING"], now_hour["SENT"]) == (1, 1, 1, 0)
    assert o.payout_hours[-3].start == datetime(2026, 3, 10, 7, tzinfo=UTC) and seven["PAID"] == 1
    assert sum(h.total for h in o.payout_hours) == 4
    assert o.collection_hours[-1].counts == {"PENDING": 0, "PROCESSING": 0, "SUCCESS": 1, "FAILED": 1}

    assert o.held_for_review == (QueueTotal("XAF", 1, Decimal(7000)),)
    assert o.failed_unresolved == (QueueTotal("XAF", 1, Decimal(1500)),)
    assert core.disburse.find(held).status is PayoutStatus.PENDING

    assert (o.endpoints_failing, o.endpoints_disabled) == (1, 0)
    [endpoint] = o.troubled_endpoints
    assert (endpoint.merchant_name, endpoint.active) == ("Chez Amina", True)
    assert endpoint.consecutive_failures >= 1 and endpoint.url == "https://shop.example/hooks"

    core.disburse.resolve(refused)  # no money moved: resolved, no longer waiting
    assert core.operator.overview().failed_unresolved == ()


def test_the_work_queues_say_how_long_the_oldest_due_item_has_waited(world: World) -> None:
    core = world.core
    assert [w.pending for w in core.operator.overview().work] == [0, 0, 0]
    world.payout(1000)  # due for dispatch at once, and no worker runs
    world.clock.advance(90)
    world.payout(1000)
    world.clock.advance(30)
    work = {w.kind: w for w in core.operator.overview().work}
    assert work["payouts"] == WorkBacklog("payouts", 2, 0, 120.0)
    assert work["collections"] == WorkBacklog("collections", 0, 0, 0.0)
    [first, second] = core.operator.due_work("payouts")
    assert (first.due_since, second.due_since) == (T0, datetime(2026, 3, 10, 7, 41, 30, tzinfo=UTC))
    assert first.state == "PENDING" and first.merchant_id == world.merchant_id
    with pytest.raises(InvalidRequestError):
        core.operator.due_work("refunds")

    metrics = Metrics()
    metrics.watch(core)
    try:
        text = generate_latest(metrics.registry).decode()
        assert 'paymentcore_work_oldest_pending_seconds{kind="payouts"} 120.0' in text
        assert 'paymentcore_work_oldest_pending_seconds{kind="deliveries"} 0.0' in text
        assert 'paymentcore_webhook_endpoints{state="failing"} 0.0' in text
        core.run_until_idle()
        assert (
            metrics.registry.get_sample_value("paymentcore_work_oldest_pending_seconds", {"kind": "payouts"})
            == 0
        )
    finally:
        metrics.close()


def test_an_endpoint_disabled_is_counted_apart_and_named_first(world: World) -> None:
    core = world.core
    other = core.operator.create_merchant("Boutique <Bleue>")
    for merchant in (world.merchant_id, other.id):
        core.webhooks.register(merchant, url="https://shop.example/hooks")
    with core.store.transaction() as tx:
        endpoint = tx.webhooks.get(other.id)
        assert endpoint is not None
        tx.webhooks.put(attrs.evolve(endpoint, is_active=False, disabled_reason="Disabled after 10 failed."))
        mine = tx.webhooks.get(world.merchant_id)
        assert mine is not None
        tx.webhooks.put(attrs.evolve(mine, consecutive_failures=3))
    o = core.operator.overview()
    assert (o.endpoints_failing, o.endpoints_disabled) == (1, 1)
    assert [e.merchant_name for e in o.troubled_endpoints] == ["Boutique <Bleue>", "Chez Amina"]
    metrics = Metrics()
    metrics.watch(core)
    try:
        assert metrics.registry.get_sample_value("paymentcore_webhook_endpoints", {"state": "disabled"}) == 1
        assert metrics.registry.get_sample_value("paymentcore_webhook_endpoints", {"state": "failing"}) == 1
    finally:
        metrics.close()


def test_operator_lists_take_currency_and_creation_time(world: World) -> None:
    core = world.core
    first = world.payout(1000)
    world.clock.advance(HOUR_S)
    second = world.payout(1200)
    middle = datetime(2026, 3, 10, 8, 10, tzinfo=UTC)
    late = core.operator.payouts(currency="XAF", created_from=middle)
    assert [p.payout.reference for p in late.data] == [second]
    early = core.operator.payouts(created_before=middle)
    assert [p.payout.reference for p in early.data] == [first]
    assert core.operator.payouts(currency="XOF").data == ()
    with pytest.raises(InvalidRequestError):
        core.operator.payouts(created_from=datetime(2026, 3, 10))  # naive: which zone?
    charged = world.charge(1000)
    found = core.operator.collections(currency="XAF", status="PENDING")
    assert [(c.collection.reference, c.merchant_id) for c in found.data] == [(charged, world.merchant_id)]
    assert core.operator.collections(created_before=middle).data == ()
