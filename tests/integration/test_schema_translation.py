"""PostgreSQL's schema is SQLite's migrations translated (issue 25): both engines end with the same tables
and columns, each record's booleans are booleans on PostgreSQL, and the tables that order ties by
SQLite's rowid have PostgreSQL's ``seq`` in its place."""

from __future__ import annotations

import sqlite3
import typing
from pathlib import Path

import attrs
import psycopg

from paymentcore._domain import models
from paymentcore.adapters.postgres import PostgresStore
from paymentcore.adapters.sqlite import SqliteStore

from conftest import postgres_url  # type: ignore[import-not-found, unused-ignore]

#: the stored records and their tables (what the repositories read and write)
TABLES = {
    "merchants": models.Merchant,
    "api_keys": models.ApiKey,
    "payout_limits": models.PayoutLimits,
    "collections": models.Collection,
    "payouts": models.Payout,
    "payout_batches": models.PayoutBatch,
    "balances": models.Balance,
    "ledger_entries": models.LedgerEntry,
    "webhooks": models.WebhookEndpoint,
    "events": models.Event,
    "idempotency": models.IdempotencyRecord,
    "deliveries": models.Delivery,
    "operators": models.StoredOperator,
    "console_sessions": models.StoredSession,
    "audit_log": models.StoredAuditEntry,
}


def _sqlite_columns(path: Path) -> dict[str, set[str]]:
    SqliteStore(path, group_commit=False).close()
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: {r[1] for r in conn.execute(f"PRAGMA table_info({t})")} for t in tables}


def _postgres_columns(url: str) -> dict[str, dict[str, str]]:
    PostgresStore(url, pool_size=1).close()
    found: dict[str, dict[str, str]] = {}
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = current_schema()"
        ).fetchall()
    for table, column, kind in rows:
        found.setdefault(str(table), {})[str(column)] = str(kind)
    return found


def test_both_engines_have_the_same_tables_and_columns_but_postgresqls_own(tmp_path: Path) -> None:
    sqlite = _sqlite_columns(tmp_path / "schema.db")
    postgres = _postgres_columns(postgres_url(tmp_path))
    # PostgreSQL's migration counter, shared key, and the hourly counts' moves (migration 10)
    own = {"schema_version", "server_key", "payout_hours_moves", "collection_hours_moves"}
    assert set(postgres) - own == set(sqlite)
    for table, columns in sqlite.items():
        assert set(postgres[table]) - {"seq"} == columns, table


def test_postgresql_types_follow_the_records(tmp_path: Path) -> None:
    postgres = _postgres_columns(postgres_url(tmp_path))
    for table, record in TABLES.items():
        hints = typing.get_type_hints(record)
        for field in attrs.fields(record):
            kind = postgres[table][field.name]
            if hints[field.name] in (bool, bool | None):
                assert kind == "boolean", (table, field.name)
            elif kind in ("integer", "bigint"):
                assert hints[field.name] in (int, int | None), (table, field.name)
        # ties in the order written: rowid on SQLite, seq here, on every table a list pages through
        if table not in ("payout_limits", "balances", "webhooks", "idempotency", "console_sessions"):
            assert postgres[table]["seq"] == "bigint", table


def test_amounts_and_times_are_64_bit_on_postgresql(tmp_path: Path) -> None:
    postgres = _postgres_columns(postgres_url(tmp_path))
    for table, column in (
        ("payouts", "amount"),
        ("payouts", "created_at"),
        ("balances", "available"),
        ("collections", "requested_amount"),
        ("payout_spend", "amount"),
        ("payout_hours", "amount"),
        ("events", "next_attempt_at"),
    ):
        assert postgres[table][column] == "bigint", (table, column)
