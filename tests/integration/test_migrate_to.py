"""``paymentcore --db SQLITE_FILE migrate-to postgresql://...``: a SQLite database moves to PostgreSQL.

A SQLite database with real activity (two merchants in two currencies, keys, settled and failed
collections, a pending checkout, payouts PAID, FAILED, resolved, SENT, awaiting review and rejected,
limits, a webhook with deliveries, idempotency records, the ledger) is moved by the real command in a
subprocess; then a core on PostgreSQL answers exactly what the SQLite core answered (balances, payouts
by reference, lists, the ledger history, the events and their deliveries, the limits and their spend),
replays a request made before the move, and takes new payouts. The refusals leave the target as it was.

The PostgreSQL tests run in a schema of their own on ``$PAYMENTCORE_TEST_POSTGRES_URL`` and skip without
it; the refusals that need no database run everywhere.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography.fernet import Fernet

from paymentcore import Config, FakeClock, PaymentCore, Payout, PayoutStatus
from paymentcore.adapters.sandbox import SandboxNetwork
from paymentcore.adapters.sqlite import MIGRATIONS as SQLITE_MIGRATIONS
from paymentcore.testing import CapturingSender, public_resolver
from paymentcore.transfer import TransferError, copy_sqlite_to_postgresql

from conftest import make_core, postgres_url  # type: ignore[import-not-found, unused-ignore]

ROOT = Path(__file__).resolve().parents[2]
UNREACHABLE = "postgresql://paymentcore@127.0.0.1:1/paymentcore"  # nothing listens on port 1
HOOK_URL = "https://shop.example/hooks"


def migrate_to(db: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """The real command, as an operator runs it."""
    command = [sys.executable, "-m", "paymentcore_server", "--db", str(db), "migrate-to", url, *extra]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


def refused(done: subprocess.CompletedProcess[str], *words: str) -> str:
    """A refusal: exit 1, nothing on stdout, one line on stderr that says why."""
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def postgres_core(url: str, clock: FakeClock) -> PaymentCore:
    return PaymentCore.postgresql(
        url,
        clock=clock,
        config=Config(sandbox_delay=0, webhook_jitter=0.0),
        network=SandboxNetwork(delay_seconds=0),
        sender=CapturingSender(),
        resolver=public_resolver,
    )


def target_tables(url: str) -> dict[str, int]:
    """The tables of the target's schema and their row counts."""
    with psycopg.connect(url, autocommit=True) as conn:
        names = [
            str(row[0])
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            )
        ]
        counts: dict[str, int] = {}
        for name in names:
            row = conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()
            assert row is not None
            counts[name] = int(row[0])
    return counts


def source_counts(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(db)
    try:
        names = [
            str(row[0])
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return {name: int(conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]) for name in names}
    finally:
        conn.close()


# --- a database with real activity ---------------------------------------------------------------------


class Activity:
    """What was done on the SQLite core, to ask both cores about."""

    def __init__(self, core: PaymentCore) -> None:
        op = core.operator
        shop = op.create_merchant("Douala Shop", settlement_currency="XAF")
        op.set_collect_fee(shop.id, "1.5")
        accra = op.create_merchant("Accra Shop", settlement_currency="GHS")
        op.create_key(shop.id, ["collect"])
        op.create_key(shop.id, ["disburse"], per_minute=120, per_hour=2000)
        revoked = op.create_key(accra.id, ["collect", "disburse"])
        op.revoke_key(revoked.key.id)
        self.shop, self.accra = shop.id, accra.id
        self.registration = core.webhooks.register(shop.id, url=HOOK_URL, idempotency_key="hook-1")

        charge = core.collect.charge
        collections = [
            charge(shop.id, amount=25_000, currency="XAF", country="CM", provider="mtn_cm",
                   phone="670000001", merchant_reference="order-1", idempotency_key="c-1"),
            charge(shop.id, amount=4_000, currency="XAF", country="CM", provider="orange_cm",
                   phone="690000002", idempotency_key="c-2"),
            charge(shop.id, amount=3_000, currency="XAF", country="CM", provider="mtn_cm",
                   phone="670000011", idempotency_key="c-declined"),
            charge(accra.id, amount=Decimal("125.50"), currency="GHS", country="GH", provider="mtn_gh",
                   phone="241234567", idempotency_key="c-gh"),
            core.collect.checkout(shop.id, amount=1_500, currency="XAF", idempotency_key="checkout-1"),
        ]  # fmt: skip
        core.run_until_idle()
        op.set_limits(shop.id, "XAF", per_day="20000", per_week="50000", review_threshold="5000")

        def pay(key: str, amount: int | Decimal, phone: str, merchant: str = shop.id, **kw: Any) -> Payout:
            currency = "XAF" if merchant == shop.id else "GHS"
            return core.disburse.create(
                merchant, amount=amount, currency=currency, phone=phone, idempotency_key=key, **kw
            )

        self.first_answer = pay("p-paid", 1_000, "670000100", merchant_reference="salary-1")
        payouts = [
            self.first_answer,
            pay("p-failed", 1_100, "670000021"),
            pay("p-resolved", 1_200, "670000121"),
            pay("p-sent", 1_300, "670000023"),
            pay("p-review", 6_000, "670000200", recipient_name="Awa"),
            pay("p-rejected", 7_000, "670000300"),
            pay("p-gh", Decimal("20.25"), "241234500", merchant=accra.id, country="GH"),
        ]
        core.run_until_idle()
        core.disburse.reject(payouts[5].reference)
        core.disburse.resolve(payouts[2].reference)
        core.run_until_idle()
        owners = [shop.id] * 6 + [accra.id]
        self.payouts = [(owner, p.reference) for owner, p in zip(owners, payouts, strict=True)]
        owners = [shop.id] * 3 + [accra.id, shop.id]
        self.collections = [(owner, c.reference) for owner, c in zip(owners, collections, strict=True)]

    def answers(self, core: PaymentCore) -> dict[str, Any]:
        """Everything a merchant or an operator can read, through the library."""
        merchants = (self.shop, self.accra)
        seen: dict[str, Any] = {
            "merchants": core.operator.list_merchants(),
            "settings": core.operator.settings(),
            "payouts": [core.disburse.get(merchant, ref) for merchant, ref in self.payouts],
            "stored payouts": [core.disburse.find(ref) for _, ref in self.payouts],
            "collections": [core.collect.get(merchant, ref) for merchant, ref in self.collections],
            "stored collections": [core.collect.find(ref) for _, ref in self.collections],
            "webhook": core.webhooks.get(self.shop),
        }
        for merchant in merchants:
            balances = core.operator.balances(merchant)
            seen[f"{merchant} balances"] = balances
            seen[f"{merchant} payout list"] = core.disburse.list(merchant, limit=100)
            seen[f"{merchant} collection list"] = core.collect.list(merchant, limit=100)
            for balance in balances:
                seen[f"{merchant} ledger {balance.currency}"] = core.operator.ledger(
                    merchant, balance.currency, limit=100
                )
        events = core.webhooks.events(self.shop, limit=100)
        seen["events"] = events
        seen["event records"] = [core.webhooks.event(self.shop, e.id) for e in events.data]
        seen["XAF limits"] = core.disburse.limits(self.shop, "XAF")
        return seen


def test_a_database_moves_to_postgresql_and_answers_the_same(tmp_path: Path, clock: FakeClock) -> None:
    url = postgres_url(tmp_path)
    source = make_core("sqlite", tmp_path, clock)
    activity = Activity(source)
    before = activity.answers(source)
    source.close()
    db = tmp_path / "test.db"
    counts = source_counts(db)

    done = migrate_to(db, url, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["tables"] == counts and report["rows"] == sum(counts.values())
    assert report["ledger"] == {
        "ok": True,
        "merchants": 2,
        "balances": 2,
        "entries": report["ledger"]["entries"],
    }
    assert report["ledger"]["entries"] == counts["ledger_entries"]
    assert report["serverKey"] == f"{db}.key" and report["replacedServerKey"] is False
    after_copy = target_tables(url)
    assert {name: after_copy[name] for name in counts} == counts  # derived tables not counted twice

    core = postgres_core(url, clock)
    try:
        after = activity.answers(core)
        assert after.keys() == before.keys()
        for name, value in before.items():
            assert after[name] == value, name
        statuses = {p.status for p in before["payouts"]}
        assert {PayoutStatus.PAID, PayoutStatus.FAILED, PayoutStatus.SENT, PayoutStatus.REJECTED} <= statuses
        assert any(p.awaiting_review for p in before["payouts"])
        assert before["XAF limits"].spent_today > 0
        core.check_all_ledgers()

        # a request made before the move is replayed, not done again
        replay = core.disburse.create(
            activity.shop, amount=1_000, currency="XAF", phone="670000100",
            merchant_reference="salary-1", idempotency_key="p-paid",
        )  # fmt: skip
        assert replay == activity.first_answer
        assert core.disburse.list(activity.shop, limit=100) == before[f"{activity.shop} payout list"]
        # the registration's stored answer (encrypted with the SQLite file's key) opens on PostgreSQL
        again = core.webhooks.register(activity.shop, url=HOOK_URL, idempotency_key="hook-1")
        assert again == activity.registration

        # new work after the move: a payout is reserved, counted against the limits, paid, delivered
        available = before[f"{activity.shop} balances"][0].available
        new = core.disburse.create(
            activity.shop, amount=2_500, currency="XAF", phone="670000400", idempotency_key="after-move"
        )
        core.run_until_idle()
        assert core.disburse.get(activity.shop, new.reference).status is PayoutStatus.PAID
        assert core.operator.balances(activity.shop)[0].available == available - 2_500
        limits = core.disburse.limits(activity.shop, "XAF")
        assert limits.spent_today == before["XAF limits"].spent_today + 2_500
        core.check_all_ledgers()
        sender = core.deps.sender
        assert isinstance(sender, CapturingSender)
        paid = [d for d in sender.deliveries if d.json()["data"].get("reference") == new.reference]
        assert len(paid) == 2  # disburse.sent and disburse.succeeded
        for delivery in paid:
            delivery.construct(activity.registration.signing_secret)  # signed with the pre-move secret
    finally:
        core.close()


def test_the_human_summary(tmp_path: Path, clock: FakeClock) -> None:
    url = postgres_url(tmp_path)
    source = make_core("sqlite", tmp_path, clock)
    source.operator.create_merchant("Shop")
    source.close()
    done = migrate_to(tmp_path / "test.db", url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"copied {tmp_path / 'test.db'} (schema {len(SQLITE_MIGRATIONS)})")
    assert "merchants 1" in lines[1]
    assert lines[-1].startswith("  ledger check: ok (1 merchants")


def test_a_table_of_a_newer_migration_is_carried(tmp_path: Path, clock: FakeClock) -> None:
    """Tables are found in the schema, not listed in the code: one that only a later migration (say an
    audit trail) creates on both sides is copied as well, booleans and integers exact."""
    url = postgres_url(tmp_path)
    source = make_core("sqlite", tmp_path, clock)
    source.operator.create_merchant("Shop")
    source.close()
    db = tmp_path / "test.db"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE audit_trail (id TEXT PRIMARY KEY, at INTEGER NOT NULL, ok INTEGER NOT NULL)"
        )
        conn.executemany(
            "INSERT INTO audit_trail VALUES (?, ?, ?)", [("a1", 2**53 + 1, 1), ("a2", 1_700_000_000_000, 0)]
        )
    PaymentCore.postgresql(url, sender=None).close()  # the schema, migrated
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE audit_trail (id TEXT PRIMARY KEY, at BIGINT NOT NULL, ok BOOLEAN NOT NULL)"
        )
    done = migrate_to(db, url, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tables"]["audit_trail"] == 2
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT id, at, ok FROM audit_trail ORDER BY id").fetchall()
    assert rows == [("a1", 2**53 + 1, True), ("a2", 1_700_000_000_000, False)]


def test_a_target_a_process_already_started_on_takes_the_sqlite_key(tmp_path: Path, clock: FakeClock) -> None:
    """A process started on the empty database made a server key of its own: the SQLite file's key
    replaces it, so the webhook secrets encrypted on SQLite open on PostgreSQL."""
    url = postgres_url(tmp_path)
    source = make_core("sqlite", tmp_path, clock)
    shop = source.operator.create_merchant("Shop")
    secret = source.webhooks.register(shop.id, url=HOOK_URL).signing_secret
    source.close()
    postgres_core(url, clock).close()  # the schema and a server key, no data
    done = migrate_to(tmp_path / "test.db", url, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["replacedServerKey"] is True
    core = postgres_core(url, clock)
    try:
        assert core.webhooks.secret_of(shop.id) == secret
    finally:
        core.close()


def test_an_older_source_is_migrated_forward_first(tmp_path: Path) -> None:
    url = postgres_url(tmp_path)
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:
        for script in SQLITE_MIGRATIONS[:4]:
            conn.executescript(script)
        conn.execute("PRAGMA user_version = 4")
    done = migrate_to(db, url, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["sourceUpgradedFrom"], report["schemaVersion"]) == (4, len(SQLITE_MIGRATIONS))
    assert report["serverKey"] is None  # no key file and nothing encrypted: the target makes its own


# --- refusals: one line, exit 1, nothing written ---------------------------------------------------------


def test_refuses_a_target_that_already_holds_data(tmp_path: Path, clock: FakeClock) -> None:
    url = postgres_url(tmp_path)
    source = make_core("sqlite", tmp_path, clock)
    source.operator.create_merchant("Source Shop")
    source.close()
    target = postgres_core(url, clock)
    try:
        there = target.operator.create_merchant("Already There")
        refused(migrate_to(tmp_path / "test.db", url), "already holds data", "merchants")
        assert target.operator.list_merchants() == [there]
    finally:
        target.close()


@pytest.mark.parametrize("kind", ["missing", "other sqlite", "not sqlite", "empty"])
def test_refuses_a_source_that_is_not_a_paymentcore_database(tmp_path: Path, kind: str) -> None:
    url = postgres_url(tmp_path)
    db = tmp_path / "source.db"
    if kind == "other sqlite":
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
    elif kind == "not sqlite":
        db.write_text("merchant,amount\nshop,100\n" * 100)
    elif kind == "empty":
        sqlite3.connect(db).close()
    line = refused(migrate_to(db, url))
    assert ("no such SQLite database" if kind == "missing" else "not a") in line
    assert db.exists() == (kind != "missing")  # never created
    assert target_tables(url) == {}  # the target schema was not even created


def test_refuses_an_unreachable_target(tmp_path: Path) -> None:
    db = tmp_path / "shop.db"
    PaymentCore.sqlite(db, sender=None).close()
    refused(migrate_to(db, UNREACHABLE), "cannot use the PostgreSQL database")


def test_refuses_what_is_not_a_sqlite_file_to_a_postgresql_url(tmp_path: Path) -> None:
    db = tmp_path / "shop.db"
    PaymentCore.sqlite(db, sender=None).close()
    refused(migrate_to(db, str(tmp_path / "other.db")), "postgresql:// URL")
    command = [sys.executable, "-m", "paymentcore_server", "--db", UNREACHABLE, "migrate-to", UNREACHABLE]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    refused(done, "SQLite database to copy from")


def test_refuses_a_server_key_that_does_not_open_the_secrets(tmp_path: Path, clock: FakeClock) -> None:
    source = make_core("sqlite", tmp_path, clock)
    shop = source.operator.create_merchant("Shop")
    source.webhooks.register(shop.id, url=HOOK_URL)
    source.close()
    other = tmp_path / "other.key"
    other.write_bytes(Fernet.generate_key())
    db = tmp_path / "test.db"
    refused(migrate_to(db, UNREACHABLE, "--key-file", str(other)), "does not open the webhook secrets")
    Path(f"{db}.key").unlink()
    refused(migrate_to(db, UNREACHABLE), "no server key at")


def test_refuses_a_target_schema_newer_than_this_paymentcore(tmp_path: Path, clock: FakeClock) -> None:
    url = postgres_url(tmp_path)
    make_core("sqlite", tmp_path, clock).close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (999)")
    refused(migrate_to(tmp_path / "test.db", url), "version 999, newer")
    assert target_tables(url) == {"schema_version": 1}


def test_refuses_a_table_the_target_schema_does_not_have(tmp_path: Path, clock: FakeClock) -> None:
    url = postgres_url(tmp_path)
    source = make_core("sqlite", tmp_path, clock)
    source.operator.create_merchant("Shop")
    source.close()
    with sqlite3.connect(tmp_path / "test.db") as conn:
        conn.execute("CREATE TABLE local_notes (id TEXT PRIMARY KEY)")
    refused(migrate_to(tmp_path / "test.db", url), "local_notes", "no counterpart")
    assert target_tables(url)["merchants"] == 0


def test_a_value_that_is_not_exact_is_refused_and_nothing_is_copied(tmp_path: Path, clock: FakeClock) -> None:
    url = postgres_url(tmp_path)
    source = make_core("sqlite", tmp_path, clock)
    shop = source.operator.create_merchant("Shop")
    source.close()
    with sqlite3.connect(tmp_path / "test.db") as conn:  # SQLite keeps a REAL in an INTEGER column
        conn.execute("INSERT INTO payout_limits VALUES (?, 'XAF', NULL, 1500.5, NULL, NULL)", (shop.id,))
    refused(migrate_to(tmp_path / "test.db", url), "payout_limits.per_day", "1500.5", "not an integer")
    assert target_tables(url)["merchants"] == 0


def test_refuses_while_the_target_tables_are_in_use(tmp_path: Path, clock: FakeClock) -> None:
    """A process still reading the target holds its tables: the move waits a moment, then gives up."""
    url = postgres_url(tmp_path)
    source = make_core("sqlite", tmp_path, clock)
    source.operator.create_merchant("Shop")
    source.close()
    postgres_core(url, clock).close()
    with psycopg.connect(url) as reader:  # a transaction left open on a table
        reader.execute("SELECT count(*) FROM merchants").fetchone()
        with pytest.raises(TransferError, match="tables are in use"):
            copy_sqlite_to_postgresql(tmp_path / "test.db", url, lock_timeout=0.5)
        reader.rollback()
    assert target_tables(url)["merchants"] == 0
    report = copy_sqlite_to_postgresql(tmp_path / "test.db", url)  # once they are free
    assert dict(report.tables)["merchants"] == 1
