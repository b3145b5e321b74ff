"""One merchant's requests waiting for its lock hold no other merchant's back (``paymentcore serve`` on
PostgreSQL).

A merchant's payouts take that merchant's lock. Before the request threads were handed out by merchant
(``paymentcore_server._threads``), a merchant sending many payouts at once filled every request thread
with requests waiting for its lock, and another merchant's payout queued behind them until they were
done. Here merchant A's lock is held by the test while A sends 48 payouts at once; merchant B's payout
and B's read of it are answered meanwhile, and A's all succeed once the lock is let go.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import psycopg
import pytest
from test_postgres_server import Serve  # type: ignore[import-not-found, unused-ignore]

from paymentcore import PaymentCore
from paymentcore.adapters.postgres import PostgresStore
from paymentcore.testing import fund

from conftest import postgres_url  # type: ignore[import-not-found, unused-ignore]

pytestmark = pytest.mark.slow

FLOOD = 48  # more than the server's request threads (40)
WAIT = 60.0


def hold_lock(
    store: PostgresStore, merchant_id: str, inside: threading.Event, release: threading.Event
) -> None:
    with store.transaction_for(merchant_id) as tx:
        tx.idempotency.purge(0)  # a first statement: the unit takes the merchant's lock
        inside.set()
        release.wait(WAIT)


def waiting_for_locks(url: str) -> int:
    """Sessions of the database waiting for an advisory lock (a merchant's)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_merchant_waiting_for_its_lock_holds_up_no_other_merchant(tmp_path: Path) -> None:
    url = postgres_url(tmp_path)
    server = Serve(url, tmp_path, "fair").wait_ready()
    core = PaymentCore.postgresql(url, sender=None)
    release = threading.Event()
    holder: threading.Thread | None = None
    flood: list[threading.Thread] = []
    answers: list[int] = []
    try:
        keys = {}
        for name in ("A", "B"):
            merchant = core.operator.create_merchant(f"Shop {name}", settlement_currency="XAF")
            keys[name] = (
                merchant.id,
                core.operator.create_key(
                    merchant.id, ["disburse"], per_minute=10_000, per_hour=100_000
                ).api_key,
            )
            fund(core, merchant.id, "XAF", 1_000_000)
        store = core.store
        assert isinstance(store, PostgresStore)
        inside = threading.Event()
        holder = threading.Thread(target=hold_lock, args=(store, keys["A"][0], inside, release))
        holder.start()
        assert inside.wait(WAIT)

        def pay(name: str, n: int, timeout: float) -> httpx.Response:
            body = {"amount": 100, "currency": "XAF", "phone": f"6700{n:05d}"}
            headers = {"Authorization": f"Bearer {keys[name][1]}", "Idempotency-Key": f"{name}-{n}"}
            return httpx.post(f"{server.base}/v1/disburse", json=body, headers=headers, timeout=timeout)

        def flood_one(n: int) -> None:
            answers.append(pay("A", n, WAIT).status_code)

        flood = [threading.Thread(target=flood_one, args=(n,)) for n in range(FLOOD)]
        for thread in flood:
            thread.start()
        deadline = time.monotonic() + WAIT
        while waiting_for_locks(url) < 8:  # A's payouts are in the server, waiting for A's lock
            assert time.monotonic() < deadline, "A's payouts never reached A's lock"
            time.sleep(0.05)

        began = time.monotonic()
        paid = pay("B", 1, 10.0)  # before: queued behind A's 48 until A's lock was let go
        assert paid.status_code == 201, paid.text
        read = httpx.get(
            f"{server.base}/v1/disburse/{paid.json()['reference']}",
            headers={"Authorization": f"Bearer {keys['B'][1]}"},
            timeout=10.0,
        )
        assert read.status_code == 200 and read.json()["reference"] == paid.json()["reference"]
        assert time.monotonic() - began < 10.0
        assert not release.is_set() and answers == []  # A's lock is still held: none of A's answered

        release.set()
        for thread in flood:
            thread.join(WAIT)
        assert answers == [201] * FLOOD
    finally:
        release.set()
        if holder is not None:
            holder.join(WAIT)
        for thread in flood:
            thread.join(WAIT)
        server.stop()
        core.close()
