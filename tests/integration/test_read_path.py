"""On SQLite a request that only reads never waits for a writer of the money database.

The rate-limit count every request makes is kept in the database's rate file
(``paymentcore.adapters.sqlite_rates``), not in the database, so while another connection holds the
database's write lock (a long operator command, a burst of payouts, a backup), reads by reference and
replays are still answered at once, and counted.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from paymentcore import Config, PaymentCore
from paymentcore.adapters.sqlite_rates import rate_file_path
from paymentcore.errors import RateLimitedError
from paymentcore.testing import fund
from paymentcore_server.app import create_app

PROMPT = 1.0  # seconds: the busy timeout a blocked read would wait out is a minute


def test_reads_are_answered_and_counted_while_another_connection_holds_the_write_lock(
    tmp_path: Path,
) -> None:
    db = tmp_path / "pc.db"
    core = PaymentCore.sqlite(db, sender=None, config=Config(sandbox_delay=0))
    merchant = core.operator.create_merchant("Reader", settlement_currency="XAF")
    key = core.operator.create_key(merchant.id, ["disburse"], per_minute=5, per_hour=100).api_key
    fund(core, merchant.id, "XAF", 5000)
    payout = core.disburse.create(
        merchant.id, amount=1000, currency="XAF", phone="670000001", idempotency_key="first"
    )
    auth = {"Authorization": f"Bearer {key}"}
    other = core.operator.create_key(merchant.id, ["disburse"]).api_key
    blocker = sqlite3.connect(db, isolation_level=None)
    try:
        with TestClient(create_app(core), raise_server_exceptions=False) as http:
            blocker.execute("BEGIN IMMEDIATE")  # the money database's write lock, held
            remaining = []
            for _ in range(5):
                started = time.monotonic()
                answer = http.get(f"/v1/disburse/{payout.reference}", headers=auth)
                assert time.monotonic() - started < PROMPT
                assert answer.status_code == 200 and answer.json()["reference"] == payout.reference
                remaining.append(int(answer.headers["x-ratelimit-remaining"]))
            assert remaining == [4, 3, 2, 1, 0]
            refused = http.get(f"/v1/disburse/{payout.reference}", headers=auth)
            assert refused.status_code == 429 and refused.json()["code"] == "RATE_LIMITED"

            # a payout, which must write the database, waits for the lock and then goes through
            result: dict[str, int] = {}

            def pay() -> None:
                answer = http.post(
                    "/v1/disburse",
                    json={"amount": 1000, "currency": "XAF", "phone": "670000002"},
                    headers={"Authorization": f"Bearer {other}", "Idempotency-Key": "second"},
                )
                result["status"] = answer.status_code

            writer = threading.Thread(target=pay)
            writer.start()
            time.sleep(0.3)
            assert "status" not in result  # still waiting for the lock
            blocker.execute("ROLLBACK")
            writer.join(timeout=30)
            assert result == {"status": 201}
    finally:
        blocker.close()
        core.close()
    assert rate_file_path(db).exists()


def test_the_counts_outlive_the_core_and_are_shared_by_cores_on_one_database(tmp_path: Path) -> None:
    db = tmp_path / "pc.db"
    first = PaymentCore.sqlite(db, sender=None)
    second = PaymentCore.sqlite(db, sender=None)
    try:
        merchant = first.operator.create_merchant("Counted", settlement_currency="XAF")
        key = first.operator.create_key(merchant.id, ["collect"], per_minute=3, per_hour=100).api_key
        principal = first.access.authenticate(key)
        assert first.access.rate(principal).remaining == 2
        assert second.access.rate(second.access.authenticate(key)).remaining == 1
    finally:
        first.close()
        second.close()
    again = PaymentCore.sqlite(db, sender=None)
    try:
        principal = again.access.authenticate(key)
        assert again.access.rate(principal).remaining == 0
        with pytest.raises(RateLimitedError):
            again.access.rate(principal)  # a fourth request in the minute
    finally:
        again.close()
