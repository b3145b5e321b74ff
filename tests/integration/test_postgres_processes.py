"""Several OS processes on one PostgreSQL database: the guarantees SQLite gives, across processes.

- payouts racing from several processes on one funded balance: exactly floor(balance / amount) are
  accepted, the rest answer INSUFFICIENT_BALANCE, and the books balance;
- one Idempotency-Key used at once from several processes: one payout, one answer;
- read-modify-write units of work from two processes: no lost update (the write lock);
- processes starting together on an empty schema: they migrate it once, none fails;
- the rate-limit counters: one count per key across processes, kept across a restart.

Each test runs in a schema of its own on ``$PAYMENTCORE_TEST_POSTGRES_URL`` (tests/conftest.py).
"""

from __future__ import annotations

import multiprocessing
import traceback
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier as ProcessBarrier
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest

from paymentcore import Config, PaymentCore
from paymentcore._domain.models import Balance, LedgerEntry, LedgerLeg, PayoutStatus
from paymentcore._services.ledger import check_invariant
from paymentcore.adapters.postgres import MIGRATIONS, PostgresStore
from paymentcore.adapters.sqlite import MIGRATIONS as SQLITE_MIGRATIONS
from paymentcore.errors import InsufficientBalanceError, RateLimitedError
from paymentcore.testing import fund

from conftest import postgres_url  # type: ignore[import-not-found, unused-ignore]

pytestmark = pytest.mark.slow

PROCESSES = 3
THREADS = 4
PER_THREAD = 5
AMOUNT = 700
FUNDED = 21_350  # 30 payouts of 700 fit (21 000), the 31st does not; 60 are asked for
JOIN_TIMEOUT = 120.0

# (tag, accepted references, refused for insufficient balance, formatted exception or None)
Report = tuple[str, list[str], int, str | None]


def open_core(url: str) -> PaymentCore:
    return PaymentCore.postgresql(url, sender=None, config=Config(sandbox_delay=0), pool_size=THREADS + 1)


def run_processes(target: Any, args: list[tuple[Any, ...]]) -> list[Report]:
    """Start one spawned process per argument tuple (each gets a shared barrier and a report queue
    appended), wait for one report from each, and check that every process exited cleanly."""
    ctx = multiprocessing.get_context("spawn")
    reports: Queue[Report] = ctx.Queue()
    start = ctx.Barrier(len(args))
    processes = [ctx.Process(target=target, args=(*each, start, reports)) for each in args]
    got: list[Report] = []
    try:
        for process in processes:
            process.start()
        for _ in processes:
            got.append(reports.get(timeout=JOIN_TIMEOUT))
    finally:
        for process in processes:
            process.join(timeout=JOIN_TIMEOUT)
            if process.is_alive():
                process.kill()
                process.join()
    assert [error for *_, error in got] == [None] * len(args), [error for *_, error in got]
    assert [process.exitcode for process in processes] == [0] * len(args)
    return got


# --- payouts racing on one balance ----------------------------------------------------------------


def payout_worker(
    url: str, merchant_id: str, tag: str, same_key: str | None, start: ProcessBarrier, reports: Queue[Report]
) -> None:
    """Runs in a spawned process: THREADS threads, each creating PER_THREAD payouts (or one with
    ``same_key``), all released together across processes."""
    import threading

    accepted: list[str] = []
    refused = 0
    errors: list[str] = []
    lock = threading.Lock()
    try:
        core = open_core(url)
        try:
            inner = threading.Barrier(THREADS)

            def run(thread: int) -> None:
                nonlocal refused
                inner.wait(timeout=60)
                for i in range(1 if same_key else PER_THREAD):
                    key = same_key or f"{tag}-{thread}-{i}"
                    try:
                        payout = core.disburse.create(
                            merchant_id, amount=AMOUNT, currency="XAF", phone="670000000", idempotency_key=key
                        )
                    except InsufficientBalanceError:
                        with lock:
                            refused += 1
                    except BaseException:
                        with lock:
                            errors.append(traceback.format_exc())
                    else:
                        with lock:
                            accepted.append(payout.reference)

            start.wait(timeout=60)
            threads = [threading.Thread(target=run, args=(n,)) for n in range(THREADS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=JOIN_TIMEOUT)
        finally:
            core.close()
    except BaseException:
        errors.append(traceback.format_exc())
    reports.put((tag, accepted, refused, "\n".join(errors) or None))


def funded_merchant(url: str, amount: int = FUNDED) -> str:
    core = open_core(url)
    try:
        merchant = core.operator.create_merchant("Race Shop", settlement_currency="XAF")
        fund(core, merchant.id, "XAF", amount)
        return merchant.id
    finally:
        core.close()


def test_payouts_racing_from_several_processes_take_exactly_what_the_balance_holds(tmp_path: Path) -> None:
    url = postgres_url(tmp_path)
    merchant_id = funded_merchant(url)
    got = run_processes(payout_worker, [(url, merchant_id, f"p{n}", None) for n in range(PROCESSES)])
    accepted = [reference for _, references, _, _ in got for reference in references]
    refused = sum(count for _, _, count, _ in got)
    asked = PROCESSES * THREADS * PER_THREAD
    assert len(accepted) == FUNDED // AMOUNT == 30
    assert len(set(accepted)) == len(accepted)
    assert refused == asked - len(accepted)
    core = open_core(url)
    try:
        with core.store.read() as tx:
            balance = tx.ledger.balance(merchant_id, "XAF")
            assert balance == Balance(
                merchant_id, "XAF", available=FUNDED - 30 * AMOUNT, reserved=30 * AMOUNT, credited=FUNDED
            )
            assert check_invariant(tx, merchant_id, "XAF") == balance
            reserves = [e for e in tx.ledger.entries(merchant_id, "XAF") if e.kind == "reserve"]
            assert sorted(e.reference for e in reserves) == sorted(accepted)
            assert all(tx.payouts.get(r).status is PayoutStatus.PENDING for r in accepted)  # type: ignore[union-attr]
    finally:
        core.close()


def test_one_idempotency_key_from_several_processes_makes_one_payout(tmp_path: Path) -> None:
    url = postgres_url(tmp_path)
    merchant_id = funded_merchant(url)
    got = run_processes(payout_worker, [(url, merchant_id, f"p{n}", "one-payout") for n in range(PROCESSES)])
    accepted = [reference for _, references, _, _ in got for reference in references]
    assert len(accepted) == PROCESSES * THREADS  # every caller got an answer ...
    assert len(set(accepted)) == 1  # ... and it is the same payout
    core = open_core(url)
    try:
        with core.store.read() as tx:
            balance = tx.ledger.balance(merchant_id, "XAF")
            assert (balance.available, balance.reserved) == (FUNDED - AMOUNT, AMOUNT)  # reserved once
            assert [e.kind for e in tx.ledger.entries(merchant_id, "XAF")] == ["credit", "reserve"]
    finally:
        core.close()


# --- read-modify-write units of work ---------------------------------------------------------------


def increment_worker(url: str, tag: str, count: int, start: ProcessBarrier, reports: Queue[Report]) -> None:
    """Read the balance, add 1, write it back (put_balance, not move), journal it: ``count`` times."""
    try:
        store = PostgresStore(url, pool_size=2)
        try:
            start.wait(timeout=60)
            for i in range(count):
                with store.transaction() as tx:
                    balance = tx.ledger.balance("m1", "XAF")
                    tx.ledger.put_balance(
                        attrs.evolve(balance, available=balance.available + 1, credited=balance.credited + 1)
                    )
                    tx.ledger.append(
                        LedgerEntry(
                            id=f"{tag}-{i:04d}",
                            merchant_id="m1",
                            currency="XAF",
                            kind="credit",
                            reference=f"{tag}-{i}",
                            legs=(LedgerLeg("network", -1), LedgerLeg("merchant:m1:available", 1)),
                            created_at=i,
                        )
                    )
        finally:
            store.close()
    except BaseException:
        reports.put((tag, [], 0, traceback.format_exc()))
        return
    reports.put((tag, [], 0, None))


def test_two_processes_read_modify_write_one_balance_without_lost_updates(tmp_path: Path) -> None:
    url = postgres_url(tmp_path)
    PostgresStore(url).close()
    run_processes(increment_worker, [(url, tag, 100) for tag in ("p0", "p1")])
    store = PostgresStore(url)
    try:
        with store.read() as tx:
            balance = tx.ledger.balance("m1", "XAF")
            assert balance == Balance("m1", "XAF", available=200, credited=200)
            assert check_invariant(tx, "m1", "XAF") == balance
    finally:
        store.close()


# --- migrations --------------------------------------------------------------------------------------


def migrate_worker(url: str, tag: str, start: ProcessBarrier, reports: Queue[Report]) -> None:
    try:
        start.wait(timeout=60)
        store = PostgresStore(url, pool_size=1)
        try:
            version = store.schema_version()
        finally:
            store.close()
    except BaseException:
        reports.put((tag, [], 0, traceback.format_exc()))
        return
    reports.put((tag, [str(version)], 0, None))


def test_processes_starting_together_on_an_empty_database_migrate_it_once(tmp_path: Path) -> None:
    url = postgres_url(tmp_path)
    got = run_processes(migrate_worker, [(url, f"p{n}") for n in range(4)])
    assert {versions[0] for _, versions, _, _ in got} == {str(len(MIGRATIONS))}
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT version FROM schema_version").fetchall()
        tables = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()"
        ).fetchone()
    assert rows == [(len(MIGRATIONS),)]
    assert tables is not None and tables[0] >= 14


def test_the_postgresql_migrations_are_sqlites_numbered_alike() -> None:
    """One numbered migration per SQLite migration, so a version means the same schema on both."""
    assert len(MIGRATIONS) == len(SQLITE_MIGRATIONS)


# --- rate limits shared by every process -------------------------------------------------------------


def rate_worker(
    url: str, key_id: str, tag: str, tries: int, start: ProcessBarrier, reports: Queue[Report]
) -> None:
    import threading

    passed: list[str] = []
    limited = 0
    lock = threading.Lock()
    try:
        core = open_core(url)
        try:
            with core.store.read() as tx:
                key = tx.keys.get(key_id)
            assert key is not None

            def run() -> None:
                nonlocal limited
                for _ in range(tries):
                    try:
                        state = core.access.limiter.hit(key, core.clock.now())
                    except RateLimitedError:
                        with lock:
                            limited += 1
                    else:
                        with lock:
                            passed.append(str(state.remaining))

            start.wait(timeout=60)
            threads = [threading.Thread(target=run) for _ in range(THREADS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=JOIN_TIMEOUT)
        finally:
            core.close()
    except BaseException:
        reports.put((tag, [], 0, traceback.format_exc()))
        return
    reports.put((tag, passed, limited, None))


def test_a_key_gets_its_30_a_minute_across_processes_and_after_a_restart(tmp_path: Path) -> None:
    url = postgres_url(tmp_path)
    core = open_core(url)
    try:
        merchant = core.operator.create_merchant("Busy Shop")
        key = core.operator.create_key(merchant.id, ["collect"]).key
    finally:
        core.close()
    got = run_processes(rate_worker, [(url, key.id, f"p{n}", 5) for n in range(PROCESSES)])
    remaining = sorted(int(r) for _, passed, _, _ in got for r in passed)
    assert remaining == list(range(30))  # 30 in all, each slot taken once
    assert sum(limited for _, _, limited, _ in got) == PROCESSES * THREADS * 5 - 30
    # a new process (a restart) finds the minute still full
    again = open_core(url)
    try:
        with pytest.raises(RateLimitedError) as refused:
            again.access.limiter.hit(key, again.clock.now())
        assert refused.value.retry_after >= 1
    finally:
        again.close()


# --- background work shared by several workers --------------------------------------------------------


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_two_workers_on_one_database_share_the_work_and_never_do_it_twice(kind: str, tmp_path: Path) -> None:
    """Two cores, each with its own connections and its own worker threads, on one database: every
    payout is handed to the network once, every webhook event delivered once, every charge settled."""
    import json
    import time

    from paymentcore import CollectionStatus, SandboxNetwork
    from paymentcore.testing import CapturingSender, public_resolver

    url = postgres_url(tmp_path) if kind == "postgres" else str(tmp_path / "shared.db")
    network = SandboxNetwork(delay_seconds=0)  # one network for both: it counts what each was sent
    sender = CapturingSender()
    config = Config(sandbox_delay=0, webhook_jitter=0.0)

    def core() -> PaymentCore:
        kwargs: dict[str, Any] = {"network": network, "sender": sender, "resolver": public_resolver}
        if kind == "postgres":
            return PaymentCore.postgresql(url, config=config, key_file=tmp_path / "server.key", **kwargs)
        return PaymentCore.sqlite(url, config=config, key_file=tmp_path / "server.key", **kwargs)

    setup = core()
    workers = [core(), core()]
    try:
        merchant = setup.operator.create_merchant("Busy Shop", settlement_currency="XAF")
        setup.webhooks.register(merchant.id, url="https://shop.example/hooks")
        fund(setup, merchant.id, "XAF", 100_000)
        payouts = [
            setup.disburse.create(
                merchant.id, amount=1000, currency="XAF", phone=f"67000{n:04d}", idempotency_key=f"p{n}"
            ).reference
            for n in range(20)
        ]
        charges = [
            setup.collect.charge(
                merchant.id,
                amount=1000,
                currency="XAF",
                country="CM",
                provider="mtn_cm",
                phone=f"67100{n:04d}",
            ).reference
            for n in range(10)
        ]
        for worker in workers:
            worker.start_worker(interval=0.05)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            paid = all(setup.disburse.get(merchant.id, r).status is PayoutStatus.PAID for r in payouts)
            settled = all(
                setup.collect.get(merchant.id, r).status is CollectionStatus.SUCCESS for r in charges
            )
            with setup.store.read() as tx:
                undelivered = tx.outbox.count_due(setup.clock.now() + 3_600_000)
            if paid and settled and undelivered == 0:
                break
            time.sleep(0.1)
        for worker in workers:
            worker.stop_worker()
        assert all(setup.disburse.get(merchant.id, r).status is PayoutStatus.PAID for r in payouts)
        assert all(setup.collect.get(merchant.id, r).status is CollectionStatus.SUCCESS for r in charges)
        assert sorted(network.payouts_sent) == sorted(payouts)
        assert set(network.payouts_sent.values()) == {1}  # each payout handed to the network once
        delivered = [json.loads(d.body)["eventId"] for d in sender.deliveries]
        with setup.store.read() as tx:
            events = [e.id for e in tx.outbox.list(merchant.id)]
            posts = [e.reference for e in tx.ledger.entries(merchant.id, "XAF") if e.kind == "post"]
        assert sorted(delivered) == sorted(events)  # every event delivered, none twice
        assert sorted(posts) == sorted(payouts)  # each payout's money moved once
        setup.check_all_ledgers()
    finally:
        for each in (*workers, setup):
            each.close()
