"""Several writers on one SQLite file at once, through SqliteStore: OS processes and threads.

Every writer does read-modify-write increments of one Balance inside ``store.transaction()`` and appends
a ledger entry each time. ``BEGIN IMMEDIATE`` plus the busy timeout must serialise them: no lost
update, no "database is locked" escaping, and a file that passes ``PRAGMA integrity_check``.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time
import traceback
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier as ProcessBarrier
from pathlib import Path

import attrs
import pytest

from paymentcore._domain.models import Balance, LedgerEntry, LedgerLeg
from paymentcore._services.ledger import check_invariant
from paymentcore.adapters.sqlite import MIGRATIONS, SqliteStore

MERCHANT = "m1"
CURRENCY = "XAF"
PER_PROCESS = 200
THREADS = 8
PER_THREAD = 50
JOIN_TIMEOUT = 90.0

# (worker tag, time its first transaction began, time its last one ended, formatted exception or None)
Report = tuple[str, float, float, str | None]

pytestmark = pytest.mark.slow


def increment(store: SqliteStore, tag: str, i: int) -> None:
    """One unit of work: read the balance, add 1, write it back, and journal it."""
    with store.transaction() as tx:
        balance = tx.ledger.balance(MERCHANT, CURRENCY)
        tx.ledger.put_balance(
            attrs.evolve(balance, available=balance.available + 1, credited=balance.credited + 1)
        )
        tx.ledger.append(
            LedgerEntry(
                id=f"{tag}-{i:04d}",
                merchant_id=MERCHANT,
                currency=CURRENCY,
                kind="credit",
                reference=f"{tag}-{i}",
                legs=(LedgerLeg("network", -1), LedgerLeg(f"merchant:{MERCHANT}:available", 1)),
                created_at=i,
            )
        )


def increment_worker(path: str, tag: str, count: int, start: ProcessBarrier, reports: Queue[Report]) -> None:
    """Runs in a spawned process: ``count`` increments on its own SqliteStore, then one report."""
    first = last = 0.0
    try:
        store = SqliteStore(path)
        try:
            start.wait(timeout=60)
            first = time.monotonic()
            for i in range(count):
                increment(store, tag, i)
            last = time.monotonic()
        finally:
            store.close()
    except BaseException:
        reports.put((tag, first, last, traceback.format_exc()))
        raise
    reports.put((tag, first, last, None))


def collect(reports: Queue[Report], count: int) -> dict[str, Report]:
    """Wait for one report per worker (before joining, so no queue feeder can block)."""
    got: dict[str, Report] = {}
    for _ in range(count):
        report = reports.get(timeout=JOIN_TIMEOUT)
        got[report[0]] = report
    return got


def entries_by_tag(store: SqliteStore) -> dict[str, int]:
    counts: dict[str, int] = {}
    with store.read() as tx:
        for entry in tx.ledger.entries(MERCHANT, CURRENCY):
            tag = entry.id.rsplit("-", 1)[0]
            counts[tag] = counts.get(tag, 0) + 1
    return counts


def test_two_processes_increment_one_balance_without_lost_updates(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    parent = SqliteStore(path)  # migrates and switches to WAL before the workers start
    ctx = multiprocessing.get_context("spawn")
    reports: Queue[Report] = ctx.Queue()
    start = ctx.Barrier(2)
    workers = [
        ctx.Process(target=increment_worker, args=(path, tag, PER_PROCESS, start, reports))
        for tag in ("p0", "p1")
    ]
    try:
        for worker in workers:
            worker.start()
        got = collect(reports, len(workers))
    finally:
        for worker in workers:
            worker.join(timeout=JOIN_TIMEOUT)
            if worker.is_alive():
                worker.kill()
                worker.join()
    try:
        assert [w.exitcode for w in workers] == [0, 0]
        assert {tag: report[3] for tag, report in got.items()} == {"p0": None, "p1": None}
        # the two processes really ran at the same time
        (_, start0, end0, _), (_, start1, end1, _) = got["p0"], got["p1"]
        assert start0 < end1 and start1 < end0
        with parent.read() as tx:
            balance = tx.ledger.balance(MERCHANT, CURRENCY)
            assert balance == Balance(MERCHANT, CURRENCY, available=2 * PER_PROCESS, credited=2 * PER_PROCESS)
            assert check_invariant(tx, MERCHANT, CURRENCY) == balance
        assert entries_by_tag(parent) == {"p0": PER_PROCESS, "p1": PER_PROCESS}
        assert parent.integrity_check() == "ok"
    finally:
        parent.close()


def test_opening_a_fresh_file_waits_for_a_writer_holding_the_lock(tmp_path: Path) -> None:
    """What a second process sees when it starts while the first one is still creating the file."""
    path = tmp_path / "fresh.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE first_process_was_here (x INTEGER)")
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO first_process_was_here VALUES (1)")
    releaser = threading.Timer(0.3, holder.execute, args=("COMMIT",))
    began = time.monotonic()
    releaser.start()
    try:
        store = SqliteStore(path, busy_timeout_ms=10_000)
    finally:
        releaser.join()
        holder.close()
    try:
        assert time.monotonic() - began >= 0.25  # it waited for the lock instead of failing
        assert store.schema_version() == len(MIGRATIONS)
        increment(store, "fresh", 0)
        with store.read() as tx:
            assert tx.ledger.balance(MERCHANT, CURRENCY).available == 1
        assert store.integrity_check() == "ok"
    finally:
        store.close()


def test_threads_share_one_store_without_lost_updates(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "threads.db")
    start = threading.Barrier(THREADS)
    errors: list[BaseException] = []
    errors_lock = threading.Lock()

    def run(tag: str) -> None:
        try:
            start.wait(timeout=30)
            for i in range(PER_THREAD):
                increment(store, tag, i)
        except BaseException as exc:
            with errors_lock:
                errors.append(exc)

    threads = [threading.Thread(target=run, args=(f"t{n}",)) for n in range(THREADS)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=JOIN_TIMEOUT)
        assert not any(thread.is_alive() for thread in threads)
        assert errors == []
        with store.read() as tx:
            balance = tx.ledger.balance(MERCHANT, CURRENCY)
            assert balance.available == balance.credited == THREADS * PER_THREAD
            assert check_invariant(tx, MERCHANT, CURRENCY) == balance
        assert entries_by_tag(store) == {f"t{n}": PER_THREAD for n in range(THREADS)}
        assert store.integrity_check() == "ok"
    finally:
        store.close()


def test_a_units_savepoint_journal_stays_in_memory(tmp_path: Path) -> None:
    """Every write unit runs in a savepoint (a refused request rolls back only its own writes), and
    SQLite keeps the pages a savepoint changes in a statement journal. Kept in a temporary file, as
    SQLite does by default, that file is opened and written in every write transaction: about 130 us of
    a payout's 1.2 ms (docs/performance.md). The writer and the readers keep it in memory."""
    store = SqliteStore(tmp_path / "p.db")
    try:
        with store.transaction() as tx:
            tx.ledger.put_balance(Balance(MERCHANT, CURRENCY))
            writer = tx.unit_rows.conn
            assert writer.execute("PRAGMA temp_store").fetchone()[0] == 2  # MEMORY
        with store.read() as view:
            reader = view.unit_rows.conn
            assert reader.execute("PRAGMA temp_store").fetchone()[0] == 2
    finally:
        store.close()
