"""PostgreSQL's writers partitioned by merchant (issue 26): a merchant's write transaction waits only for
that merchant's writers and for whole-store writers; and the guarantees hold across merchants, with the
worker running, from three processes (payouts exact per balance, one payout per idempotency key, the
ledger equal to the balances)."""

from __future__ import annotations

import multiprocessing
import threading
import time
import traceback
from collections.abc import Callable
from decimal import Decimal
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier as ProcessBarrier
from pathlib import Path
from typing import Any

import attrs
import pytest
from test_store_contract import NOW, event, payout  # type: ignore[import-not-found, unused-ignore]

from paymentcore import (
    Config,
    FakeClock,
    InsufficientBalanceError,
    Merchant,
    MerchantStatus,
    PaymentCore,
    PayoutLimitExceededError,
    UnauthorizedError,
)
from paymentcore._domain.models import PayoutStatus
from paymentcore._services.ledger import check_invariant
from paymentcore._services.operator import SESSION_TOUCH_MS
from paymentcore.adapters.postgres import PostgresStore
from paymentcore.testing import fund, public_resolver

from conftest import postgres_url  # type: ignore[import-not-found, unused-ignore]

WAIT = 30.0  # seconds a thread may take to get somewhere it should get to at once
AMOUNT = 700
FUNDED = 21_350  # 30 payouts of 700 fit, the 31st does not
MERCHANTS = 3
PROCESSES = 3
THREADS = 6
PER_THREAD = 8  # 3 x 6 x 8 = 144 payouts asked for, 48 per merchant: 30 each are accepted

# (tag, {merchant: accepted references}, {merchant: refused}, error or None)
Report = tuple[str, dict[str, list[str]], dict[str, int], str | None]


def _hold(
    store: PostgresStore,
    merchant_id: str | list[str] | None,
    inside: threading.Event,
    release: threading.Event,
) -> None:
    """Hold a unit open until ``release``: the whole store (None), one merchant's, or several's."""
    if merchant_id is None:
        opened = store.transaction()
    elif isinstance(merchant_id, list):
        opened = store.transaction_for_many(merchant_id)
    else:
        opened = store.transaction_for(merchant_id)
    with opened as tx:
        tx.idempotency.purge(0)  # a first statement: the unit takes its locks
        inside.set()
        release.wait(WAIT)


def _writer(store: PostgresStore, merchant_id: str | None, done: threading.Event) -> threading.Thread:
    def run() -> None:
        opened = store.transaction() if merchant_id is None else store.transaction_for(merchant_id)
        with opened as tx:
            tx.idempotency.purge(0)
        done.set()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_merchants_writer_waits_only_for_its_merchant_and_for_whole_store_writers(tmp_path: Path) -> None:
    store = PostgresStore(postgres_url(tmp_path), pool_size=6)
    try:
        inside, release = threading.Event(), threading.Event()
        holder = threading.Thread(target=_hold, args=(store, "mer_a", inside, release))
        holder.start()
        assert inside.wait(WAIT)
        other, same, whole = threading.Event(), threading.Event(), threading.Event()
        threads = [_writer(store, "mer_b", other), _writer(store, "mer_a", same), _writer(store, None, whole)]
        assert other.wait(WAIT), "another merchant's writer waited for mer_a's"
        # mer_a's second writer and a whole-store writer are still waiting: the holder has not let go
        assert not same.wait(0.5) and not whole.is_set()
        release.set()
        assert same.wait(WAIT) and whole.wait(WAIT)
        for thread in [holder, *threads]:
            thread.join(WAIT)
    finally:
        store.close()


def test_a_batch_of_several_merchants_holds_back_those_merchants_only(tmp_path: Path) -> None:
    """The worker writes a batch of items of several merchants in one unit (transaction_for_many): it
    waits for, and holds back, the writers of those merchants alone."""
    store = PostgresStore(postgres_url(tmp_path), pool_size=6)
    try:
        inside, release = threading.Event(), threading.Event()
        holder = threading.Thread(target=_hold, args=(store, ["mer_b", "mer_a", "mer_a"], inside, release))
        holder.start()
        assert inside.wait(WAIT)
        a, b, c = threading.Event(), threading.Event(), threading.Event()
        threads = [_writer(store, "mer_a", a), _writer(store, "mer_b", b), _writer(store, "mer_c", c)]
        assert c.wait(WAIT), "a merchant outside the batch waited for it"
        assert not a.wait(0.5) and not b.is_set()  # both merchants of the batch wait for it
        release.set()
        assert a.wait(WAIT) and b.wait(WAIT)
        for thread in [holder, *threads]:
            thread.join(WAIT)
    finally:
        store.close()


def _lock_row(
    store: PostgresStore,
    merchant_id: str,
    read: Callable[[Any], object],
    inside: threading.Event,
    release: threading.Event,
) -> None:
    """Hold the row ``read`` reads for update, in its merchant's partition (as an operator's action on a
    payout does, or the unit recording an event's delivery)."""
    with store.transaction_for(merchant_id) as tx:
        assert read(tx) is not None  # read for update: the row is locked
        inside.set()
        release.wait(WAIT)


def test_a_claims_unit_passes_over_held_rows_and_waits_for_no_merchant(tmp_path: Path) -> None:
    """A worker's claim (transaction_for_claims) takes no merchant's partition and passes over the item
    rows another unit holds (FOR UPDATE SKIP LOCKED): with one merchant's partition held, one payout's
    row and one event's row locked, it reads the other items at once, and not the held ones, even once
    they are free again within the same transaction (what it passed over stays passed over)."""
    store = PostgresStore(postgres_url(tmp_path), pool_size=8)
    try:
        with store.transaction() as tx:
            tx.payouts.add_many(
                [
                    payout("PO-held", merchant_id="mer_a"),
                    payout("PO-free", merchant_id="mer_a"),
                    payout("PO-other", merchant_id="mer_b"),
                ]
            )
            for event_id in ("evt_held", "evt_free"):
                tx.outbox.add(event(event_id))
        inside = [threading.Event() for _ in range(3)]
        release, release_row = threading.Event(), threading.Event()
        holders = [  # mer_b's partition; mer_a's and PO-held's row; mer_1's and evt_held's row
            threading.Thread(target=_hold, args=(store, "mer_b", inside[0], release)),
            threading.Thread(
                target=_lock_row,
                args=(store, "mer_a", lambda tx: tx.payouts.get("PO-held"), inside[1], release_row),
            ),
            threading.Thread(
                target=_lock_row,
                args=(store, "mer_1", lambda tx: tx.outbox.get("evt_held"), inside[2], release),
            ),
        ]
        for thread in holders:
            thread.start()
        try:
            assert all(one.wait(WAIT) for one in inside)
            read: list[object] = []

            def claim() -> None:
                with store.transaction_for_claims() as tx:
                    read.append(sorted(tx.payouts.get_many(["PO-other", "PO-held", "PO-free"])))
                    release_row.set()  # PO-held's holder commits: the row is free, but was passed over
                    holders[1].join(WAIT)
                    read.append(tx.payouts.get("PO-held"))
                    read.append([tx.outbox.get("evt_held"), tx.outbox.get("evt_free") is not None])
                    tx.leases.take("payouts", "PO-free", NOW)  # it writes, still waiting for nobody

            claiming = threading.Thread(target=claim)
            claiming.start()
            claiming.join(WAIT / 3)
            assert not claiming.is_alive()
            assert read == [["PO-free", "PO-other"], None, [None, True]]
        finally:
            release.set()
            release_row.set()
            for thread in holders:
                thread.join(WAIT)
        with store.transaction_for_claims() as tx:  # free again: read and locked as usual
            assert sorted(tx.payouts.get_many(["PO-held", "PO-free"])) == ["PO-free", "PO-held"]
            assert tx.outbox.get("evt_held") is not None
    finally:
        store.close()


def test_the_worker_claims_while_a_merchant_is_busy_and_passes_over_a_payout_being_acted_on(
    tmp_path: Path,
) -> None:
    """A merchant whose partition is held (its API requests, another worker's outcomes) does not hold up
    the worker's claims, its own items' included; a payout another unit holds (an operator's action,
    another worker's claim) is passed over and stays due, then is claimed once it is free."""
    core = PaymentCore.postgresql(postgres_url(tmp_path), sender=None, config=Config(sandbox_delay=0))
    try:
        merchants, references = [], []
        for name in ("A", "B", "C"):
            merchant = core.operator.create_merchant(name, settlement_currency="XAF")
            fund(core, merchant.id, "XAF", 10_000)
            created = core.disburse.create(
                merchant.id, amount=AMOUNT, currency="XAF", phone="670000000", idempotency_key="k"
            )
            merchants.append(merchant.id)
            references.append(created.reference)
        busy, acted_on, free = merchants
        store = core.store
        assert isinstance(store, PostgresStore)
        runner = core.disburse.runner
        due = runner.due(10)
        assert {item.merchant for item in due} == set(merchants)
        partition, row, release = threading.Event(), threading.Event(), threading.Event()
        holders = [
            threading.Thread(target=_hold, args=(store, busy, partition, release)),
            threading.Thread(
                target=_lock_row,
                args=(store, acted_on, lambda tx: tx.payouts.get(references[1]), row, release),
            ),
        ]
        for thread in holders:
            thread.start()
        try:
            assert partition.wait(WAIT) and row.wait(WAIT)
            claimed = runner.claim_many(due)  # would wait if it took the partitions or the held row
            assert sorted(str(one.item.merchant) for one in claimed) == sorted([busy, free])
        finally:
            release.set()
            for thread in holders:
                thread.join(WAIT)
        later = runner.claim_many(runner.due(10))
        assert [one.item.merchant for one in later] == [acted_on]
    finally:
        core.close()


def _due_payouts(core: PaymentCore, names: list[str]) -> list[str]:
    """A merchant per name, each with one payout due, to MTN and Orange in turn (two lanes: a worker's
    tick takes one item of each lane per batch); their ids."""
    merchants = []
    for n, name in enumerate(names):
        merchant = core.operator.create_merchant(name, settlement_currency="XAF")
        fund(core, merchant.id, "XAF", 10_000)
        phone = ("670000000", "690000000")[n % 2]
        core.disburse.create(merchant.id, amount=AMOUNT, currency="XAF", phone=phone, idempotency_key="k")
        merchants.append(merchant.id)
    return merchants


def test_tick_waits_for_a_busy_merchant_rather_than_leaving_its_items(tmp_path: Path) -> None:
    """``Worker.tick`` / ``Runner.run_due`` works every due item once: a busy merchant is waited for."""
    core = PaymentCore.postgresql(postgres_url(tmp_path), sender=None, config=Config(sandbox_delay=0))
    try:
        busy, other = _due_payouts(core, ["Busy", "Other"])
        store = core.store
        assert isinstance(store, PostgresStore)
        inside, release = threading.Event(), threading.Event()
        holder = threading.Thread(target=_hold, args=(store, busy, inside, release))
        holder.start()
        done = threading.Event()
        try:
            assert inside.wait(WAIT)

            def tick() -> None:
                core.disburse.runner.run_due(10)
                done.set()

            ticking = threading.Thread(target=tick)
            ticking.start()
            assert not done.wait(0.5)
        finally:
            release.set()
            holder.join(WAIT)
        assert done.wait(WAIT)
        ticking.join(WAIT)
        for merchant_id in (busy, other):
            with core.store.read() as tx:
                assert check_invariant(tx, merchant_id, "XAF").paid_out == AMOUNT  # sent and paid
    finally:
        core.close()


def test_two_workers_on_one_database_share_the_payouts_and_pay_each_once(tmp_path: Path) -> None:
    """Two workers (two cores on one database, as two processes would be) claim disjoint payouts: every
    payout is paid once, each worker pays a share, and every merchant's money adds up."""
    url = postgres_url(tmp_path)
    cores = [PaymentCore.postgresql(url, sender=None, config=Config(sandbox_delay=0)) for _ in range(2)]
    try:
        merchants = []
        for n in range(8):
            merchant = cores[0].operator.create_merchant(f"M{n}", settlement_currency="XAF")
            fund(cores[0], merchant.id, "XAF", 100 * AMOUNT)
            merchants.append(merchant.id)
        for n in range(160):
            cores[0].disburse.create(
                merchants[n % 8], amount=AMOUNT, currency="XAF", phone="670000000", idempotency_key=f"k{n}"
            )
        claimed: list[list[str]] = [[], []]
        for core, mine in zip(cores, claimed, strict=True):
            runner = core.disburse.runner
            claim_many = runner.claim_many

            def counted(
                items: Any,
                *,
                isolate: bool = True,
                skip_busy: bool = True,
                _claim: Any = claim_many,
                _mine: Any = mine,
            ) -> Any:
                taken = _claim(items, isolate=isolate, skip_busy=skip_busy)
                _mine.extend(
                    one.item.key for one in taken if one.step == 1 and one.claim.status.value == "PENDING"
                )
                return taken

            runner.claim_many = counted  # type: ignore[method-assign]
        for core in cores:
            core.start_worker()
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            with cores[0].store.read() as tx:
                if tx.payouts.count_due(2**62) == 0:
                    break
            time.sleep(0.05)
        for core in cores:
            core.stop_worker()
        with cores[0].store.read() as tx:
            assert tx.payouts.count_due(2**62) == 0
        first, second = claimed
        assert first and second, (len(first), len(second))  # both took a share ...
        assert not set(first) & set(second) and len(first) + len(second) == 160  # ... each payout once
        for merchant_id in merchants:
            with cores[0].store.read() as tx:
                assert check_invariant(tx, merchant_id, "XAF").paid_out == 20 * AMOUNT
    finally:
        for core in cores:
            core.close()


def test_a_whole_store_writer_holds_back_every_merchant(tmp_path: Path) -> None:
    store = PostgresStore(postgres_url(tmp_path), pool_size=4)
    try:
        inside, release = threading.Event(), threading.Event()
        holder = threading.Thread(target=_hold, args=(store, None, inside, release))
        holder.start()
        assert inside.wait(WAIT)
        done = threading.Event()
        writer = _writer(store, "mer_b", done)
        assert not done.wait(0.5)
        release.set()
        assert done.wait(WAIT)
        for thread in (holder, writer):
            thread.join(WAIT)
    finally:
        store.close()


def test_the_workers_sweep_waits_for_no_busy_merchant_and_holds_back_no_other(tmp_path: Path) -> None:
    """The worker's housekeeping (expired idempotency answers, dead leases) ran as a whole-store
    writer: it waited for a busy merchant's unit, and every other merchant's unit queued behind it (a
    request for the store's lock shared waits behind one waiting for it exclusively), so one merchant's
    long unit stopped every merchant's payouts until it ended."""
    retention_hours = 1
    clock = FakeClock()
    config = Config(sandbox_delay=0, idempotency_retention_hours=retention_hours)
    core = PaymentCore.postgresql(postgres_url(tmp_path), sender=None, clock=clock, config=config)
    try:
        busy = core.operator.create_merchant("Busy", settlement_currency="XAF").id
        other = core.operator.create_merchant("Other", settlement_currency="XAF").id
        fund(core, other, "XAF", 10 * AMOUNT)
        kept = core.disburse.create(
            other, amount=AMOUNT, currency="XAF", phone="670000000", idempotency_key="old"
        )
        clock.advance(retention_hours * 3600 + 1)  # its answer has expired: the sweep deletes it
        store = core.store
        assert isinstance(store, PostgresStore)
        inside, release = threading.Event(), threading.Event()
        holder = threading.Thread(target=_hold, args=(store, busy, inside, release))
        holder.start()
        swept, paid = threading.Event(), threading.Event()
        try:
            assert inside.wait(WAIT)

            def sweep() -> None:
                core.tick()  # the first round sweeps
                swept.set()

            sweeping = threading.Thread(target=sweep)
            sweeping.start()
            assert swept.wait(WAIT), "the sweep waited for the busy merchant's unit"

            def pay() -> None:
                core.disburse.create(
                    other, amount=AMOUNT, currency="XAF", phone="670000000", idempotency_key="new"
                )
                paid.set()

            paying = threading.Thread(target=pay)
            paying.start()
            assert paid.wait(WAIT), "another merchant's payout waited for the busy merchant"
            assert holder.is_alive() and not release.is_set()  # the busy merchant's unit is still open
        finally:
            release.set()
            holder.join(WAIT)
        sweeping.join(WAIT)
        paying.join(WAIT)
        with store.read() as tx:
            assert tx.idempotency.get(other, "old") is None  # swept
            assert tx.idempotency.get(other, "new") is not None
        assert core.disburse.get(other, kept.reference).reference == kept.reference
    finally:
        core.close()


def _beside_busy(core: PaymentCore, busy: str, act: Callable[[], None]) -> None:
    """Run ``act`` on a thread while merchant ``busy``'s unit of work is held open: it must end before
    that unit does (it waited for no lock of ``busy``'s, nor for the whole store's)."""
    store = core.store
    assert isinstance(store, PostgresStore)
    inside, release, acted = threading.Event(), threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold, args=(store, busy, inside, release))
    holder.start()

    def run() -> None:
        act()
        acted.set()

    acting = threading.Thread(target=run)
    try:
        assert inside.wait(WAIT)
        acting.start()
        assert acted.wait(WAIT), "it waited for the busy merchant"
        assert holder.is_alive() and not release.is_set()
    finally:
        release.set()
        holder.join(WAIT)
        if acting.ident is not None:  # started
            acting.join(WAIT)


def test_review_actions_on_one_merchants_payouts_wait_for_no_other_merchant(tmp_path: Path) -> None:
    """An operator's release, rejection and resolution of a payout, the reactivation of a merchant's
    webhook endpoint and a payer's choice on the hosted page take only that merchant's lock: a busy
    merchant's long unit holds none of them back (they were whole-store writers)."""
    core = PaymentCore.postgresql(
        postgres_url(tmp_path), sender=None, resolver=public_resolver, config=Config(sandbox_delay=0)
    )
    try:
        busy = core.operator.create_merchant("Busy", settlement_currency="XAF").id
        other = core.operator.create_merchant("Other", settlement_currency="XAF").id
        fund(core, other, "XAF", 10 * AMOUNT)
        core.operator.set_limits(other, "XAF", review_threshold=Decimal(AMOUNT - 1))
        held = [
            core.disburse.create(other, amount=AMOUNT, currency="XAF", phone="670000000", idempotency_key=k)
            for k in ("to-release", "to-reject")
        ]
        failing = core.disburse.create(
            other, amount=100, currency="XAF", phone="670000021", idempotency_key="refused"
        )  # under the threshold: sent, and refused by the sandbox
        core.run_until_idle()
        assert core.disburse.find(failing.reference).status is PayoutStatus.FAILED
        core.webhooks.register(other, url="https://shop.example/hooks")
        checkout = core.collect.checkout(other, amount=500, currency="XAF", idempotency_key="checkout")
        done: list[str] = []

        def act() -> None:
            done.append(core.disburse.release(held[0].reference, actor="op_1").status.value)
            done.append(core.disburse.reject(held[1].reference, actor="op_1").status.value)
            done.append(core.disburse.resolve(failing.reference, actor="op_1").status.value)
            done.append(core.collect.pay(checkout.reference, "mtn_cm", "670000000").status.value)
            core.collect.advance(checkout.reference)  # its prompt sent (the testing kit's step)
            done.append(core.collect.find(checkout.reference).status.value)
            done.append(str(core.webhooks.reactivate(other, actor="op_1").is_active))

        _beside_busy(core, busy, act)
        assert done[0] in ("SENT", "PAID")
        assert done[1:] == ["REJECTED", "FAILED", "PENDING", "SUCCESS", "True"]
        with core.store.read() as tx:
            balance = check_invariant(tx, other, "XAF")
        assert balance.reserved + balance.paid_out == AMOUNT  # the released one only
        assert balance.credited > 10 * AMOUNT  # the funding and the collection paid on the page
        assert balance.available == balance.credited - AMOUNT
    finally:
        core.close()


def test_an_operators_changes_to_one_merchant_wait_for_no_other_merchant(tmp_path: Path) -> None:
    """An operator's change to a merchant (its status, payouts switch, fee, blocked providers, payout
    limits, a key made, limited or revoked) takes only that merchant's lock: a busy merchant's long unit
    holds none of them back (they were whole-store writers), and a payout of the changed merchant sees
    the change."""
    core = PaymentCore.postgresql(postgres_url(tmp_path), sender=None, config=Config(sandbox_delay=0))
    try:
        busy = core.operator.create_merchant("Busy", settlement_currency="XAF").id
        other = core.operator.create_merchant("Other", settlement_currency="XAF").id
        fund(core, other, "XAF", 10 * AMOUNT)
        key = core.operator.create_key(other, ["disburse"]).key.id
        done: list[str] = []

        def act() -> None:
            op = core.operator
            done.append(op.suspend_merchant(other, actor="op_1").status.value)
            done.append(op.approve_merchant(other, actor="op_1").status.value)
            done.append(str(op.set_merchant_payouts(other, True, actor="op_1").payouts_enabled))
            done.append(str(op.set_collect_fee(other, "1.5", actor="op_1").collect_fee_ppm))
            done.append(",".join(op.block_provider(other, "orange_cm", actor="op_1").blocked_providers))
            limits = op.set_limits(other, "XAF", per_transaction=Decimal(AMOUNT), actor="op_1")
            done.append(str(limits.per_transaction))
            done.append(str(op.create_key(other, ["collect"], actor="op_1").key.revoked))
            done.append(str(op.set_rate_limit(key, per_minute=30, actor="op_1").per_minute))
            done.append(str(op.revoke_key(key, actor="op_1").revoked))

        _beside_busy(core, busy, act)
        assert done == ["SUSPENDED", "APPROVED", "True", "15000", "orange_cm", "700", "False", "30", "True"]
        with pytest.raises(PayoutLimitExceededError):  # the new ceiling holds for the next payout
            core.disburse.create(
                other, amount=AMOUNT + 1, currency="XAF", phone="670000000", idempotency_key="k"
            )
    finally:
        core.close()


def test_a_new_merchant_is_made_and_set_up_while_another_merchant_is_busy(tmp_path: Path) -> None:
    """Onboarding (a merchant made, approved or not, its key, its limits, its webhook endpoint) writes
    only the new merchant's rows and takes only its lock: a busy merchant's long unit holds none of it
    back (making a merchant took the whole store's lock), and the new merchant is whole afterwards."""
    core = PaymentCore.postgresql(
        postgres_url(tmp_path), sender=None, resolver=public_resolver, config=Config(sandbox_delay=0)
    )
    try:
        busy = core.operator.create_merchant("Busy", settlement_currency="XAF").id
        made: list[Merchant] = []

        def act() -> None:
            op = core.operator
            made.append(op.create_merchant("New Shop", settlement_currency="XAF", actor="op_1"))
            made.append(op.create_merchant("Waiting Shop", approved=False, fee_percent="2", actor="op_1"))
            new = made[0].id
            op.create_key(new, ["disburse"], actor="op_1")
            op.set_limits(new, "XAF", per_transaction=Decimal(AMOUNT), actor="op_1")
            core.webhooks.register(new, url="https://shop.example/hooks")

        _beside_busy(core, busy, act)
        assert [m.status for m in made] == [MerchantStatus.APPROVED, MerchantStatus.NOT_APPROVED]
        assert made[1].collect_fee_ppm == 20_000
        listed = {m.id: m for m in core.operator.list_merchants()}
        assert listed[made[0].id] == made[0] and listed[made[1].id] == made[1]
        assert [k.merchant_id for k in core.operator.keys(made[0].id)] == [made[0].id]
        assert core.webhooks.get(made[0].id).url == "https://shop.example/hooks"
        subjects = [e.record for e in core.operator.audit_log(limit=20).data if e.action == "merchant.create"]
        assert made[0].id in subjects and made[1].id in subjects
        fund(core, made[0].id, "XAF", 10 * AMOUNT)  # and it pays out at once, within its new limits
        paid = core.disburse.create(
            made[0].id, amount=AMOUNT, currency="XAF", phone="670000000", idempotency_key="first"
        )
        assert paid.amount == AMOUNT
    finally:
        core.close()


def test_the_consoles_sign_ins_and_sessions_wait_for_no_busy_merchant(tmp_path: Path) -> None:
    """The console's writes (an operator made or revoked, a sign-in, a failed one, a session's use
    recorded, a sign-out) touch no merchant's rows: while a merchant's unit is held, they all go
    through (they took the whole store's lock, which waits for every merchant's unit, and every
    merchant's next unit queued behind them: a console page stopped every merchant's payouts)."""
    clock = FakeClock()
    core = PaymentCore.postgresql(postgres_url(tmp_path), sender=None, clock=clock)
    try:
        busy = core.operator.create_merchant("Busy", settlement_currency="XAF").id
        done: list[str] = []

        def act() -> None:
            op = core.operator
            made = op.create_operator("Ops", actor="op_root")
            signed = op.sign_in(made.token, client="203.0.113.9")
            clock.advance(seconds=SESSION_TOUCH_MS / 1000)  # the next use records itself
            done.append(op.session(signed.secret).operator.id)
            with pytest.raises(UnauthorizedError):
                op.sign_in("pco_" + "x" * 43, client="203.0.113.10")
            op.sign_out(signed.secret)
            with pytest.raises(UnauthorizedError):
                op.session(signed.secret)
            again = op.sign_in(made.token, client="203.0.113.9")
            done.append(str(op.revoke_operator(made.operator.id, actor="op_root").revoked))
            with pytest.raises(UnauthorizedError):
                op.session(again.secret)
            done.append(made.operator.id)

        _beside_busy(core, busy, act)
        assert done == [done[2], "True", done[2]]
        actions = [entry.action for entry in core.operator.audit_log(limit=20).data]
        for action in ("operator.create", "operator.sign_in", "operator.sign_in_failed", "operator.sign_out"):
            assert action in actions, actions
    finally:
        core.close()


def test_payouts_of_two_merchants_in_one_currency_and_hour_do_not_wait_for_each_other(tmp_path: Path) -> None:
    """The hourly counts the overview reads are shared by every merchant: a payout adds a row of its own
    to them (folded in later), so a merchant's payout never waits for another's count row."""
    store = PostgresStore(postgres_url(tmp_path), pool_size=4)
    try:
        inside, release = threading.Event(), threading.Event()

        def hold() -> None:
            with store.transaction_for("mer_a") as tx:
                tx.payouts.add(payout("PO-A", merchant_id="mer_a"))
                inside.set()
                release.wait(WAIT)

        holder = threading.Thread(target=hold)
        holder.start()
        assert inside.wait(WAIT)
        done = threading.Event()

        def other() -> None:
            with store.transaction_for("mer_b") as tx:
                tx.payouts.add(payout("PO-B", merchant_id="mer_b"))
            done.set()

        writer = threading.Thread(target=other)
        writer.start()
        assert done.wait(WAIT), "mer_b's payout waited for mer_a's (a shared count row?)"
        release.set()
        for thread in (holder, writer):
            thread.join(WAIT)
        with store.read() as tx:
            before = tx.payouts.tally(NOW - NOW % 3_600_000, NOW + 3_600_000, 3_600_000)
        assert store.fold_counts() == 2  # each payout's +1, now in the counts
        with store.read() as tx:
            assert tx.payouts.tally(NOW - NOW % 3_600_000, NOW + 3_600_000, 3_600_000) == before
            assert sum(t.count for t in before) == 2
        assert store.fold_counts() == 0
        # later moves take one from a status already folded: the fold adds -1 to its count row
        with store.transaction_for("mer_a") as tx:
            sent = tx.payouts.get("PO-A")
            assert sent is not None
            tx.payouts.update(attrs.evolve(sent, status=PayoutStatus.SENT))
        assert store.fold_counts() == 2  # PENDING -1, SENT +1
        with store.read() as tx:
            after = tx.payouts.tally(NOW - NOW % 3_600_000, NOW + 3_600_000, 3_600_000)
            assert {(t.status, t.count) for t in after} == {("PENDING", 1), ("SENT", 1)}
            assert tx.rows.value("SELECT count(*) FROM payout_hours_moves") == 0  # nothing left behind
    finally:
        store.close()


def _open(url: str) -> PaymentCore:
    return PaymentCore.postgresql(url, sender=None, config=Config(sandbox_delay=0), pool_size=THREADS + 2)


def payout_process(
    url: str, merchants: list[str], tag: str, worker: bool, start: ProcessBarrier, reports: Queue[Report]
) -> None:
    """Runs in a spawned process: THREADS threads paying out from every merchant in turn; half of the
    idempotency keys are shared by every process (the same payout asked for three times)."""
    accepted: dict[str, list[str]] = {m: [] for m in merchants}
    refused = dict.fromkeys(merchants, 0)
    errors: list[str] = []
    lock = threading.Lock()
    try:
        core = _open(url)
        if worker:  # the worker sends and settles payouts while the others are being created
            core.start_worker(interval=0.05)
        try:
            inner = threading.Barrier(THREADS)

            def run(thread: int) -> None:
                inner.wait(timeout=60)
                for i in range(PER_THREAD):
                    merchant = merchants[(thread + i) % len(merchants)]
                    key = f"shared-{thread}-{i}" if i % 2 else f"{tag}-{thread}-{i}"
                    try:
                        payout = core.disburse.create(
                            merchant, amount=AMOUNT, currency="XAF", phone="670000000", idempotency_key=key
                        )
                    except InsufficientBalanceError:
                        with lock:
                            refused[merchant] += 1
                    except BaseException:
                        with lock:
                            errors.append(traceback.format_exc())
                    else:
                        with lock:
                            accepted[merchant].append(payout.reference)

            start.wait(timeout=60)
            threads = [threading.Thread(target=run, args=(n,)) for n in range(THREADS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=120)
        finally:
            core.close()
    except BaseException:
        errors.append(traceback.format_exc())
    reports.put((tag, accepted, refused, "\n".join(errors) or None))


def test_payouts_of_several_merchants_from_three_processes_with_the_worker_are_exact(tmp_path: Path) -> None:
    url = postgres_url(tmp_path)
    core = _open(url)
    try:
        merchants: list[str] = []
        for n in range(MERCHANTS):
            shop = core.operator.create_merchant(f"Shop {n}", settlement_currency="XAF")
            fund(core, shop.id, "XAF", FUNDED)
            merchants.append(shop.id)
    finally:
        core.close()
    ctx = multiprocessing.get_context("spawn")
    reports: Queue[Report] = ctx.Queue()
    start = ctx.Barrier(PROCESSES)
    processes = [
        ctx.Process(target=payout_process, args=(url, merchants, f"p{n}", n == 0, start, reports))
        for n in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    got = [reports.get(timeout=180) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    assert [error for *_, error in got] == [None] * PROCESSES
    core = _open(url)
    try:
        with core.store.read() as tx:
            for merchant in merchants:
                answered = [ref for _, accepted, _, _ in got for ref in accepted[merchant]]
                stored = tx.payouts.page(merchant, limit=1000) or []
                # a shared key answers every process the same payout: one payout per key, 30 in all
                assert len(stored) == FUNDED // AMOUNT == 30, merchant
                assert set(answered) == {p.reference for p in stored}
                balance = check_invariant(tx, merchant, "XAF")
                assert balance.available == FUNDED - 30 * AMOUNT
                assert balance.reserved + balance.paid_out == 30 * AMOUNT
    finally:
        core.close()
