"""Collection states on the memory store with a fake clock: expiry, the prompt window, transitions."""

from __future__ import annotations

import pytest

from paymentcore import Config, FakeClock, PaymentCore
from paymentcore.adapters.sandbox import SandboxNetwork
from paymentcore.errors import InvalidRequestError, InvalidTransitionError, RecipientBusyError
from paymentcore.models import COLLECTION_TRANSITIONS, CollectionStatus, check_transition
from paymentcore.testing import TestKit

CHARGE = {"amount": 1000, "currency": "XAF", "country": "CM", "provider": "mtn_cm", "phone": "670000000"}


@pytest.fixture
def core() -> PaymentCore:
    return PaymentCore.memory(clock=FakeClock(), config=Config(sandbox_delay=2))


def test_unpaid_checkout_expires_with_category_expired(core: PaymentCore) -> None:
    clock = core.clock
    assert isinstance(clock, FakeClock)
    merchant = core.operator.create_merchant("Shop")
    record = core.collect.checkout(
        merchant.id, {"amount": 1000, "currency": "XAF", "expiresInMinutes": 5}
    ).body
    clock.advance(minutes=4, seconds=59)
    core.run_until_idle()
    assert core.collect.get(merchant.id, record["reference"])["status"] == "PENDING"
    clock.advance(seconds=1)
    fresh = core.collect.get(merchant.id, record["reference"])
    assert fresh["checkoutUrl"] is None  # not payable any more, even before the worker ran
    with pytest.raises(InvalidRequestError):
        core.collect.pay(record["reference"], "mtn_cm", "670000000")
    core.run_until_idle()
    final = core.collect.get(merchant.id, record["reference"])
    assert final["status"] == "FAILED" and final["failureCategory"] == "EXPIRED"
    with core.store.read() as tx:
        assert [e.type for e in tx.list_events(merchant.id)] == ["collect.failed"]


def test_a_checkout_being_paid_is_not_expired(core: PaymentCore) -> None:
    clock = core.clock
    assert isinstance(clock, FakeClock)
    merchant = core.operator.create_merchant("Shop")
    reference = core.collect.checkout(
        merchant.id, {"amount": 1000, "currency": "XAF", "expiresInMinutes": 1}
    ).body["reference"]
    core.collect.pay(reference, "mtn_cm", "670000000")
    core.run_until_idle()
    assert core.collect.get(merchant.id, reference)["status"] == "PROCESSING"
    clock.advance(seconds=61)
    core.run_until_idle()
    assert core.collect.get(merchant.id, reference)["status"] == "SUCCESS"


def test_prompt_window(core: PaymentCore) -> None:
    clock = core.clock
    assert isinstance(clock, FakeClock)
    merchant = core.operator.create_merchant("Shop")
    for _ in range(core.config.prompt_limit):
        core.collect.charge(merchant.id, CHARGE)
    with pytest.raises(RecipientBusyError):
        core.collect.charge(merchant.id, CHARGE)
    core.collect.charge(merchant.id, {**CHARGE, "phone": "670000001"})  # another number is fine
    clock.advance(seconds=core.config.prompt_window_seconds - 1)
    with pytest.raises(RecipientBusyError):
        core.collect.charge(merchant.id, CHARGE)
    clock.advance(seconds=1)
    core.collect.charge(merchant.id, CHARGE)


def test_configurable_prompt_window() -> None:
    core = PaymentCore.memory(clock=FakeClock(), config=Config(prompt_limit=1, prompt_window_seconds=10))
    merchant = core.operator.create_merchant("Shop")
    core.collect.charge(merchant.id, CHARGE)
    with pytest.raises(RecipientBusyError):
        core.collect.charge(merchant.id, CHARGE)


def test_states_move_through_processing(core: PaymentCore) -> None:
    clock = core.clock
    assert isinstance(clock, FakeClock)
    merchant = core.operator.create_merchant("Shop")
    reference = core.collect.charge(merchant.id, CHARGE).body["reference"]
    assert core.collect.get(merchant.id, reference)["status"] == "PENDING"
    core.tick()
    assert core.collect.get(merchant.id, reference)["status"] == "PROCESSING"
    clock.advance(seconds=2)
    core.tick()
    assert core.collect.get(merchant.id, reference)["status"] == "SUCCESS"
    network = core.network
    assert isinstance(network, SandboxNetwork)
    assert network.prompts[reference] == 1


def test_an_unanswered_prompt_times_out() -> None:
    kit = TestKit.create()
    merchant = kit.merchant()
    reference = kit.core.collect.charge(merchant.id, CHARGE).body["reference"]
    kit.settle()
    assert kit.core.collect.get(merchant.id, reference)["status"] == "PROCESSING"
    kit.advance(seconds=kit.core.config.prompt_timeout_seconds)
    record = kit.core.collect.get(merchant.id, reference)
    assert record["status"] == "FAILED" and record["failureCategory"] == "TIMEOUT"


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
    reference = kit.core.collect.charge(merchant.id, CHARGE).body["reference"]
    kit.settle()
    kit.network.complete(reference)
    kit.core.collect.advance(reference)
    kit.core.collect.advance(reference)
    kit.settle()
    balance = kit.core.check_ledger(merchant.id, "XAF")
    assert balance.credited == 1000
    assert [d.event for d in kit.deliveries] == []  # no endpoint registered: nothing sent
