"""Collection states on the memory store with a fake clock: expiry, the prompt window, transitions."""

from __future__ import annotations

import pytest

from paymentcore import Collection, CollectionStatus, Config, FakeClock, PaymentCore
from paymentcore._domain.models import COLLECTION_TRANSITIONS, check_transition
from paymentcore.adapters.sandbox import SandboxNetwork
from paymentcore.errors import InvalidRequestError, InvalidTransitionError, RecipientBusyError
from paymentcore.testing import TestKit


def charge(core: PaymentCore, merchant_id: str, phone: str = "670000000") -> Collection:
    """A direct charge of 1000 XAF to an MTN Cameroon number."""
    return core.collect.charge(
        merchant_id, amount=1000, currency="XAF", country="CM", provider="mtn_cm", phone=phone
    )


@pytest.fixture
def core() -> PaymentCore:
    return PaymentCore.memory(clock=FakeClock(), config=Config(sandbox_delay=2))


def test_unpaid_checkout_expires_with_category_expired(core: PaymentCore) -> None:
    clock = core.clock
    assert isinstance(clock, FakeClock)
    merchant = core.operator.create_merchant("Shop")
    reference = core.collect.checkout(
        merchant.id, amount=1000, currency="XAF", expires_in_minutes=5
    ).reference
    clock.advance(minutes=4, seconds=59)
    core.run_until_idle()
    assert core.collect.get(merchant.id, reference).status is CollectionStatus.PENDING
    clock.advance(seconds=1)
    fresh = core.collect.get(merchant.id, reference)
    assert fresh.checkout_url is None  # not payable any more, even before the worker ran
    with pytest.raises(InvalidRequestError):
        core.collect.pay(reference, "mtn_cm", "670000000")
    core.run_until_idle()
    final = core.collect.get(merchant.id, reference)
    assert final.status is CollectionStatus.FAILED and final.failure_category == "EXPIRED"
    with core.store.read() as tx:
        assert [e.type for e in tx.outbox.list(merchant.id)] == ["collect.failed"]


def test_a_checkout_being_paid_is_not_expired(core: PaymentCore) -> None:
    clock = core.clock
    assert isinstance(clock, FakeClock)
    merchant = core.operator.create_merchant("Shop")
    reference = core.collect.checkout(
        merchant.id, amount=1000, currency="XAF", expires_in_minutes=1
    ).reference
    core.collect.pay(reference, "mtn_cm", "670000000")
    core.run_until_idle()
    assert core.collect.get(merchant.id, reference).status is CollectionStatus.PROCESSING
    clock.advance(seconds=61)
    core.run_until_idle()
    assert core.collect.get(merchant.id, reference).status is CollectionStatus.SUCCESS


def test_prompt_window(core: PaymentCore) -> None:
    clock = core.clock
    assert isinstance(clock, FakeClock)
    merchant = core.operator.create_merchant("Shop")
    for _ in range(core.config.prompt_limit):
        charge(core, merchant.id)
    with pytest.raises(RecipientBusyError):
        charge(core, merchant.id)
    charge(core, merchant.id, phone="670000001")  # another number is fine
    clock.advance(seconds=core.config.prompt_window_seconds - 1)
    with pytest.raises(RecipientBusyError):
        charge(core, merchant.id)
    clock.advance(seconds=1)
    charge(core, merchant.id)


def test_configurable_prompt_window() -> None:
    core = PaymentCore.memory(clock=FakeClock(), config=Config(prompt_limit=1, prompt_window_seconds=10))
    merchant = core.operator.create_merchant("Shop")
    charge(core, merchant.id)
    with pytest.raises(RecipientBusyError):
        charge(core, merchant.id)


def test_states_move_through_processing(core: PaymentCore) -> None:
    clock = core.clock
    assert isinstance(clock, FakeClock)
    merchant = core.operator.create_merchant("Shop")
    reference = charge(core, merchant.id).reference
    assert core.collect.get(merchant.id, reference).status is CollectionStatus.PENDING
    core.tick()
    assert core.collect.get(merchant.id, reference).status is CollectionStatus.PROCESSING
    clock.advance(seconds=2)
    core.tick()
    assert core.collect.get(merchant.id, reference).status is CollectionStatus.SUCCESS
    network = core.network
    assert isinstance(network, SandboxNetwork)
    assert network.prompts[reference] == 1


def test_an_unanswered_prompt_times_out() -> None:
    kit = TestKit.create()
    merchant = kit.merchant()
    reference = charge(kit.core, merchant.id).reference
    kit.settle()
    assert kit.core.collect.get(merchant.id, reference).status is CollectionStatus.PROCESSING
    kit.advance(seconds=kit.core.config.prompt_timeout_seconds)
    collection = kit.core.collect.get(merchant.id, reference)
    assert collection.status is CollectionStatus.FAILED and collection.failure_category == "TIMEOUT"


def test_transition_table_refuses_the_rest() -> None:
    check_transition(COLLECTION_TRANSITIONS, CollectionStatus.PENDING, CollectionStatus.PROCESSING, "c")
    for current, target in [
        (CollectionStatus.SUCCESS, CollectionStatus.FAILED),
        (CollectionStatus.FAILED, CollectionStatus.SUCCESS),
        (CollectionStatus.PENDING, CollectionStatus.SUCCESS),
        (CollectionStatus.SUCCESS, CollectionStatus.PENDING),
    ]:
        with pytest.raises(InvalidTransitionError):
            check_transition(COLLECTION_TRANSITIONS, current, target, "collection")


def test_two_workers_settle_once() -> None:
    kit = TestKit.create()
    merchant = kit.merchant()
    reference = charge(kit.core, merchant.id).reference
    kit.settle()
    kit.network.complete(reference)
    kit.core.collect.advance(reference)
    kit.core.collect.advance(reference)
    kit.settle()
    balance = kit.core.check_ledger(merchant.id, "XAF")
    assert balance.credited == 1000
    assert [d.event for d in kit.deliveries] == []  # no endpoint registered: nothing sent
