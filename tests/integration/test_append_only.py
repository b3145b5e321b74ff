"""The ledger and the audit trail are append-only whatever the SQL (issue 24, point 3).

Through the library no repository can change or remove an entry; these tests go round it, with the
statements someone holding the database could type: on SQLite ``INSERT OR REPLACE`` / ``REPLACE INTO``
on an existing id or rowid (a REPLACE deletes the old row without firing DELETE triggers) and an upsert;
on PostgreSQL ``TRUNCATE`` (with ``CASCADE`` too), ``INSERT ... ON CONFLICT DO UPDATE`` and ``MERGE``.
Every form is refused, on both tables, and the entry is still there, unchanged. A file or database
migrated before these guards existed gets them on its next start.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import attrs
import psycopg
import pytest

from paymentcore._domain.models import LedgerEntry, LedgerLeg
from paymentcore._services.audit import StoredAuditEntry
from paymentcore.adapters.postgres import MIGRATIONS as POSTGRES_MIGRATIONS
from paymentcore.adapters.postgres import PostgresStore
from paymentcore.adapters.sqlite import MIGRATIONS, SqliteStore

from conftest import postgres_url  # type: ignore[import-not-found, unused-ignore]

NOW = 1_767_225_600_000
LEDGER = "the ledger is append-only"
AUDIT = "the audit trail is append-only"


@attrs.frozen
class Table:
    """One append-only table, a row of it as written, and the refusal its guards give."""

    name: str
    message: str
    columns: tuple[str, ...]
    row: tuple[object, ...]

    def marks(self, mark: str) -> str:
        return ", ".join(mark for _ in self.columns)

    def forged(self) -> tuple[object, ...]:
        """The same id with every other text column changed: what a rewrite would leave."""
        return tuple(
            value if column == "id" or not isinstance(value, str) else "forged"
            for column, value in zip(self.columns, self.row, strict=True)
        )


TABLES = [
    Table(
        "ledger_entries",
        LEDGER,
        ("id", "merchant_id", "currency", "kind", "reference", "legs", "created_at"),
        ("led_1", "mer_1", "XAF", "COLLECTION_SETTLED", "CO-1", '[["available", 500]]', NOW),
    ),
    Table(
        "audit_log",
        AUDIT,
        ("id", "at", "actor", "action", "subject", "state_before", "state_after"),
        ("aud_1", NOW, "cli:alice", "merchant.suspend", "mer_1", '{"status":"APPROVED"}', None),
    ),
]


def write_entries(store: SqliteStore | PostgresStore) -> None:
    """One ledger entry and one audit entry, through the repositories."""
    with store.transaction() as tx:
        tx.ledger.append(
            LedgerEntry(
                id="led_1",
                merchant_id="mer_1",
                currency="XAF",
                kind="COLLECTION_SETTLED",
                reference="CO-1",
                legs=(LedgerLeg("available", 500),),
                created_at=NOW,
            )
        )
        tx.audit.add(
            StoredAuditEntry(
                id="aud_1",
                at=NOW,
                actor="cli:alice",
                action="merchant.suspend",
                subject="mer_1",
                state_before={"status": "APPROVED"},
                state_after=None,
            )
        )


# --- SQLite ----------------------------------------------------------------------------------------


def sqlite_statements(table: Table) -> list[tuple[str, tuple[object, ...]]]:
    names = ", ".join(table.columns)
    values = table.forged()
    others = ", ".join(f"{c} = excluded.{c}" for c in table.columns if c != "id")
    return [
        (
            f"UPDATE {table.name} SET created_at = 0"
            if "created_at" in table.columns
            else f"UPDATE {table.name} SET at = 0",
            (),
        ),
        (f"DELETE FROM {table.name}", ()),
        (f"DELETE FROM {table.name} WHERE id = 'led_1' OR id = 'aud_1'", ()),
        (f"INSERT OR REPLACE INTO {table.name} ({names}) VALUES ({table.marks('?')})", values),
        (f"REPLACE INTO {table.name} ({names}) VALUES ({table.marks('?')})", values),
        # a new id on the existing row's rowid: REPLACE would delete the old entry to make room
        (
            f"INSERT OR REPLACE INTO {table.name} (rowid, {names}) VALUES (1, {table.marks('?')})",
            ("other_id", *values[1:]),
        ),
        (
            f"INSERT INTO {table.name} ({names}) VALUES ({table.marks('?')})"
            f" ON CONFLICT (id) DO UPDATE SET {others}",
            values,
        ),
        (f"UPDATE OR REPLACE {table.name} SET id = id", ()),
    ]


@pytest.fixture
def sqlite_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "a.db"
    store = SqliteStore(path)
    try:
        write_entries(store)
    finally:
        store.close()
    yield path


def sqlite_rows(path: Path, table: Table) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"SELECT rowid, {', '.join(table.columns)} FROM {table.name}").fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
def test_sqlite_refuses_every_way_to_rewrite_or_remove_an_entry(sqlite_file: Path, table: Table) -> None:
    before = sqlite_rows(sqlite_file, table)
    assert before == [(1, *table.row)]
    conn = sqlite3.connect(sqlite_file, isolation_level=None)
    try:
        for statement, params in sqlite_statements(table):
            with pytest.raises(sqlite3.IntegrityError, match=table.message):
                conn.execute(statement, params)
        # INSERT OR IGNORE of an existing id is refused too (it never rewrote, but it is not an append)
        with pytest.raises(sqlite3.IntegrityError, match=table.message):
            conn.execute(
                f"INSERT OR IGNORE INTO {table.name} ({', '.join(table.columns)})"
                f" VALUES ({table.marks('?')})",
                table.forged(),
            )
    finally:
        conn.close()
    assert sqlite_rows(sqlite_file, table) == before


def test_sqlite_still_appends_new_entries(sqlite_file: Path) -> None:
    conn = sqlite3.connect(sqlite_file, isolation_level=None)
    try:
        for table in TABLES:
            fresh = ("new_id", *table.row[1:])
            conn.execute(
                f"INSERT INTO {table.name} ({', '.join(table.columns)}) VALUES ({table.marks('?')})", fresh
            )
            assert len(sqlite_rows(sqlite_file, table)) == 2
    finally:
        conn.close()


def test_a_sqlite_file_from_before_the_guards_gets_them_on_its_next_start(tmp_path: Path) -> None:
    (guards,) = [n for n, script in enumerate(MIGRATIONS, 1) if "audit_append_only_insert" in script]
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for script in MIGRATIONS[: guards - 1]:
            conn.executescript(script)
        conn.execute(f"PRAGMA user_version = {guards - 1}")
    finally:
        conn.close()
    store = SqliteStore(path)
    try:
        assert store.schema_version() == len(MIGRATIONS)
        write_entries(store)
    finally:
        store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for table in TABLES:
            with pytest.raises(sqlite3.IntegrityError, match=table.message):
                conn.execute(
                    f"REPLACE INTO {table.name} ({', '.join(table.columns)}) VALUES ({table.marks('?')})",
                    table.forged(),
                )
    finally:
        conn.close()


# --- PostgreSQL ------------------------------------------------------------------------------------


def postgres_statements(table: Table) -> list[tuple[str, tuple[object, ...]]]:
    names = ", ".join(table.columns)
    values = table.forged()
    others = ", ".join(f"{c} = EXCLUDED.{c}" for c in table.columns if c != "id")
    merge_set = ", ".join(f"{c} = s.{c}" for c in table.columns if c != "id")
    source = ", ".join(f"%s AS {c}" for c in table.columns)
    return [
        (f"UPDATE {table.name} SET id = id", ()),
        (f"DELETE FROM {table.name}", ()),
        (f"TRUNCATE {table.name}", ()),
        (f"TRUNCATE {table.name} CASCADE", ()),
        (f"TRUNCATE {table.name} RESTART IDENTITY", ()),
        (
            f"INSERT INTO {table.name} ({names}) VALUES ({table.marks('%s')})"
            f" ON CONFLICT (id) DO UPDATE SET {others}",
            values,
        ),
        (
            f"MERGE INTO {table.name} t USING (SELECT {source}) s ON t.id = s.id"
            f" WHEN MATCHED THEN UPDATE SET {merge_set}",
            values,
        ),
        (
            f"MERGE INTO {table.name} t USING (SELECT {source}) s ON t.id = s.id WHEN MATCHED THEN DELETE",
            values,
        ),
    ]


@pytest.fixture
def postgres_database(tmp_path: Path) -> str:
    url: str = postgres_url(tmp_path)
    store = PostgresStore(url)
    try:
        write_entries(store)
    finally:
        store.close()
    return url


def postgres_rows(conn: psycopg.Connection[tuple[object, ...]], table: Table) -> list[tuple[object, ...]]:
    return conn.execute(f"SELECT {', '.join(table.columns)} FROM {table.name}").fetchall()


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
def test_postgresql_refuses_every_way_to_rewrite_or_remove_an_entry(
    postgres_database: str, table: Table
) -> None:
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        before = postgres_rows(conn, table)
        assert len(before) == 1
        for statement, params in postgres_statements(table):
            with pytest.raises(psycopg.errors.RaiseException, match=table.message):
                conn.execute(statement.encode(), params)
        assert postgres_rows(conn, table) == before


def test_postgresql_guards_fire_in_every_replication_role(postgres_database: str) -> None:
    """``session_replication_role = replica`` skips ordinary triggers; these are ENABLE ALWAYS."""
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT c.relname, t.tgname, t.tgenabled FROM pg_trigger t"
            " JOIN pg_class c ON c.oid = t.tgrelid"
            " WHERE c.relname IN ('ledger_entries', 'audit_log')"
            " AND c.relnamespace = current_schema()::regnamespace"
            " AND NOT t.tgisinternal ORDER BY c.relname, t.tgname"
        ).fetchall()
    guards = {(table, name): enabled for table, name, enabled in rows}
    assert guards == {
        ("audit_log", "audit_append_only"): "A",
        ("audit_log", "audit_append_only_truncate"): "A",
        ("ledger_entries", "ledger_append_only_truncate"): "A",
        ("ledger_entries", "ledger_append_only_update"): "A",
    }


def test_the_guards_are_the_same_migration_number_on_both_engines() -> None:
    (sqlite_number,) = [n for n, script in enumerate(MIGRATIONS, 1) if "audit_append_only_insert" in script]
    (postgres_number,) = [
        n for n, script in enumerate(POSTGRES_MIGRATIONS, 1) if "ledger_append_only_truncate" in script
    ]
    assert sqlite_number == postgres_number == 8
