"""Payout creation racing on one SQLite file: threads, one idempotency key, and two OS processes.

A merchant funded with 4000 XAF can reserve exactly four payouts of 1000, however many requests arrive
at once; requests sharing one idempotency key create one payout; and the books balance afterwards.
"""

from __future__ import annotations

import multiprocessing
import threading
import traceback
from collections.abc import Iterator
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier as ProcessBarrier
from pathlib import Path

import pytest

import paymentcore
from paymentcore import Payout
from paymentcore._domain.models import Balance, PayoutStatus
from paymentcore._services import ledger as ledger
from paymentcore.errors import InsufficientBalanceError

FUNDED = 4000
AMOUNT = 1000
JOIN_TIMEOUT = 90.0


class Outcomes:
    """What a crowd of create() calls answered, gathered across threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.payouts: list[Payout] = []
        self.insufficient = 0
        self.errors: list[str] = []

    @property
    def references(self) -> list[str]:
        return [payout.reference for payout in self.payouts]


def open_core(path: Path) -> paymentcore.PaymentCore:
    return paymentcore.PaymentCore.sqlite(path, sender=None, config=paymentcore.Config(sandbox_delay=0))


def fund(core: paymentcore.PaymentCore, merchant_id: str, amount: int = FUNDED) -> None:
    with core.store.transaction() as tx:
        ledger.credit(
            tx,
            entry_id=f"led_fund_{merchant_id}",
            merchant_id=merchant_id,
            currency="XAF",
            net=amount,
            fee=0,
            reference="fund",
            now=core.clock.now(),
        )


def balance(core: paymentcore.PaymentCore, merchant_id: str) -> Balance:
    with core.store.read() as tx:
        return tx.ledger.balance(merchant_id, "XAF")


def race(core: paymentcore.PaymentCore, merchant_id: str, keys: list[str]) -> Outcomes:
    """One thread per key, all released at once by a barrier, each calling disburse.create once."""
    outcomes = Outcomes()
    start = threading.Barrier(len(keys))

    def attempt(key: str) -> None:
        try:
            start.wait(timeout=30)
            payout = core.disburse.create(
                merchant_id, amount=AMOUNT, currency="XAF", phone="670000000", idempotency_key=key
            )
        except InsufficientBalanceError:
            with outcomes.lock:
                outcomes.insufficient += 1
        except BaseException:
            with outcomes.lock:
                outcomes.errors.append(traceback.format_exc())
        else:
            with outcomes.lock:
                outcomes.payouts.append(payout)

    threads = [threading.Thread(target=attempt, args=(key,)) for key in keys]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=JOIN_TIMEOUT)
    assert not any(thread.is_alive() for thread in threads)
    return outcomes


def race_worker(
    path: str,
    merchant_id: str,
    prefix: str,
    count: int,
    start: ProcessBarrier,
    reports: Queue[tuple[str, ...]],
) -> None:
    """Runs in a spawned process: its own PaymentCore on the shared file, ``count`` racing threads.

    Reports ("ok", insufficient count, reference...) or ("error", traceback...).
    """
    try:
        core = open_core(Path(path))
        try:
            start.wait(timeout=60)
            outcomes = race(core, merchant_id, [f"{prefix}{i}" for i in range(count)])
        finally:
            core.close()
    except BaseException:
        reports.put(("error", traceback.format_exc()))
        raise
    if outcomes.errors or any(payout.status is not PayoutStatus.PENDING for payout in outcomes.payouts):
        reports.put(("error", *outcomes.errors, *(repr(payout) for payout in outcomes.payouts)))
    else:
        reports.put(("ok", str(outcomes.insufficient), *outcomes.references))


@pytest.fixture
def core(tmp_path: Path) -> Iterator[paymentcore.PaymentCore]:
    made = open_core(tmp_path / "races.db")
    try:
        yield made
    finally:
        made.close()


def assert_books(
    core: paymentcore.PaymentCore, merchant_id: str, *, available: int, reserved: int, paid: int
) -> None:
    checked = core.check_ledger(merchant_id, "XAF")
    assert checked == balance(core, merchant_id)
    assert (checked.available, checked.reserved, checked.paid_out) == (available, reserved, paid)
    assert checked.credited == FUNDED == checked.available + checked.reserved + checked.paid_out


def test_24_threads_reserve_exactly_four_payouts(core: paymentcore.PaymentCore) -> None:
    merchant = core.operator.create_merchant("Shop")
    fund(core, merchant.id)
    outcomes = race(core, merchant.id, [f"k{i}" for i in range(24)])

    assert outcomes.errors == []
    assert [payout.status for payout in outcomes.payouts] == [PayoutStatus.PENDING] * 4
    assert outcomes.insufficient == 20
    assert len(set(outcomes.references)) == 4
    assert_books(core, merchant.id, available=0, reserved=FUNDED, paid=0)
    with core.store.read() as tx:
        payouts = [tx.payouts.get(reference) for reference in outcomes.references]
        assert [p.status if p else None for p in payouts] == [PayoutStatus.PENDING] * 4
        assert tx.payouts.spent(merchant.id, "XAF", 0) == FUNDED
        kinds = [e.kind for e in tx.ledger.entries(merchant.id, "XAF")]
    assert sorted(kinds) == ["credit"] + ["reserve"] * 4

    core.run_until_idle()
    assert_books(core, merchant.id, available=0, reserved=0, paid=FUNDED)
    with core.store.read() as tx:
        paid = [tx.payouts.get(reference) for reference in outcomes.references]
    assert [p.status if p else None for p in paid] == [PayoutStatus.PAID] * 4


def test_16_threads_with_one_key_create_one_payout(core: paymentcore.PaymentCore) -> None:
    merchant = core.operator.create_merchant("Shop")
    fund(core, merchant.id)
    outcomes = race(core, merchant.id, ["same-key"] * 16)

    assert outcomes.errors == []
    assert outcomes.insufficient == 0
    assert [payout.status for payout in outcomes.payouts] == [PayoutStatus.PENDING] * 16
    assert len(set(outcomes.references)) == 1
    assert all(payout == outcomes.payouts[0] for payout in outcomes.payouts)
    assert_books(core, merchant.id, available=FUNDED - AMOUNT, reserved=AMOUNT, paid=0)
    with core.store.read() as tx:
        assert tx.payouts.spent(merchant.id, "XAF", 0) == AMOUNT
        assert sorted(e.kind for e in tx.ledger.entries(merchant.id, "XAF")) == ["credit", "reserve"]

    core.run_until_idle()
    assert_books(core, merchant.id, available=FUNDED - AMOUNT, reserved=0, paid=AMOUNT)


@pytest.mark.slow
def test_two_processes_reserve_exactly_four_payouts(core: paymentcore.PaymentCore, tmp_path: Path) -> None:
    merchant = core.operator.create_merchant("Shop")
    fund(core, merchant.id)  # the file, its schema and the key file exist before the workers start
    ctx = multiprocessing.get_context("spawn")
    reports: Queue[tuple[str, ...]] = ctx.Queue()
    start = ctx.Barrier(2)
    path = str(tmp_path / "races.db")
    workers = [
        ctx.Process(target=race_worker, args=(path, merchant.id, prefix, 12, start, reports))
        for prefix in ("a", "b")
    ]
    try:
        for worker in workers:
            worker.start()
        got = [reports.get(timeout=JOIN_TIMEOUT) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=JOIN_TIMEOUT)
            if worker.is_alive():
                worker.kill()
                worker.join()

    assert [w.exitcode for w in workers] == [0, 0]
    assert [report[0] for report in got] == ["ok", "ok"], got
    insufficient = sum(int(report[1]) for report in got)
    references = [ref for report in got for ref in report[2:]]
    assert len(references) == 4
    assert len(set(references)) == 4
    assert insufficient == 20
    assert_books(core, merchant.id, available=0, reserved=FUNDED, paid=0)
    with core.store.read() as tx:
        assert tx.payouts.spent(merchant.id, "XAF", 0) == FUNDED
        assert all(tx.payouts.get(ref) is not None for ref in references)

    core.run_until_idle()
    assert_books(core, merchant.id, available=0, reserved=0, paid=FUNDED)
    assert core.check_all_ledgers() == [balance(core, merchant.id)]
