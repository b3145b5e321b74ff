"""PostgresStore: the storage port on PostgreSQL, through psycopg 3 and its connection pool.

Several API servers and workers, on several machines, share one database:

- A write unit of work is one transaction (READ COMMITTED) that takes the store's write lock (a
  transaction-level advisory lock, one per schema) before its first statement, so, as on SQLite, a check
  made inside it (a status, an idempotency key, a limit) still holds when it writes, in every process.
  Read views are REPEATABLE READ, READ ONLY transactions: one snapshot, never waiting for a writer.
- A balance moves by one conditional statement (``UPDATE balances SET available = available + %s
  ... WHERE available + %s >= 0``), never read then written; CHECK constraints back the ledger.
- Inside a write unit of work the rows a worker claims (collections, payouts, events) are read with
  ``SELECT ... FOR UPDATE``.
- The rate-limit counters (``tx.rates``) take only their key's advisory lock, not the write lock, so
  counting requests never waits for payouts.
- The schema is created and migrated on first start with the same numbered migrations as SQLite, in
  PostgreSQL's dialect, under an advisory lock: processes starting together on an empty database take
  turns, and the later ones find it migrated.

Everything lives in the connection's current schema (the first of its ``search_path``), so one database
can hold several independent stores (the tests give each test its own schema). Which rows ``due`` and
``spent`` select is generated from ``paymentcore._domain.queries``, as for SQLite.
"""

from __future__ import annotations

import base64
import builtins
import enum
import hashlib
import json
import secrets
import types
import typing
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from decimal import Decimal
from typing import Any

import attrs
import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from paymentcore._domain import wire as wire
from paymentcore._domain.models import (
    ApiKey,
    Balance,
    BatchTally,
    Collection,
    CollectionStatus,
    Delivery,
    DeliveryStatus,
    Event,
    IdempotencyRecord,
    LedgerEntry,
    LedgerLeg,
    Merchant,
    Payout,
    PayoutBatch,
    PayoutLimits,
    PayoutStatus,
    Settings,
    StoredAuditEntry,
    StoredOperator,
    StoredSession,
    WebhookEndpoint,
)
from paymentcore._domain.queries import (
    BATCH_OPEN_STATUSES,
    COLLECTION_CHECK_STATUSES,
    COLLECTION_EXPIRY_STATUSES,
    EVENT_DUE_STATUSES,
    PAYOUT_CHECK_STATUSES,
    PAYOUT_SEND_STATUSES,
    SPENT_STATUSES,
    UNSPENT_STATUSES,
)
from paymentcore.adapters.sqlite import HOUR_MS, hours_plan, merge_tallies, sql_in, sql_not_in
from paymentcore.ports import CurrencyTotal, StoreReadOnlyError, StoreUnavailableError, Tally

__all__ = [
    "DEFAULT_POOL_SIZE",
    "MIGRATIONS",
    "PostgresStore",
    "PostgresTransaction",
]

#: Connections per process (psycopg_pool's max_size): enough for the API's threads and the worker's.
DEFAULT_POOL_SIZE = 10


# --- the schema: SQLite's migrations, in PostgreSQL's dialect ------------------------------------


def _text(script: str) -> str:
    """Text compares byte by byte, as in SQLite and Python (references sort the same everywhere)."""
    return script.replace(" TEXT", ' TEXT COLLATE "C"')


# the spend buckets of migration 2, generated from _queries like SQLite's triggers
_COUNTS = sql_not_in("status", UNSPENT_STATUSES)
_NEW_COUNTS = sql_not_in("NEW.status", UNSPENT_STATUSES)
_OLD_COUNTS = sql_not_in("OLD.status", UNSPENT_STATUSES)
_NEW_STOPS_COUNTING = sql_in("NEW.status", UNSPENT_STATUSES)


def _hourly_counts(table: str, currency: str, amount: str) -> str:
    """Migration 7's hourly counts of ``table`` (as SQLite's ``_hourly_counts``), kept by triggers."""
    hours = f"{table[:-1]}_hours"
    return f"""
    CREATE TABLE {hours} (
        hour BIGINT NOT NULL,
        currency TEXT NOT NULL,
        status TEXT NOT NULL,
        count BIGINT NOT NULL CHECK (count >= 0),
        amount BIGINT NOT NULL CHECK (amount >= 0),
        PRIMARY KEY (hour, currency, status)
    );
    INSERT INTO {hours} (hour, currency, status, count, amount)
        SELECT created_at / 3600000, {currency}, status, count(*), sum({amount}) FROM {table}
        GROUP BY created_at / 3600000, {currency}, status;
    CREATE FUNCTION {hours}_count() RETURNS trigger LANGUAGE plpgsql
        SET search_path FROM CURRENT AS $$
    BEGIN
        IF TG_OP = 'UPDATE' THEN
            UPDATE {hours} SET count = count - 1, amount = amount - OLD.{amount}
                WHERE hour = OLD.created_at / 3600000 AND currency = OLD.{currency}
                AND status = OLD.status;
        END IF;
        INSERT INTO {hours} (hour, currency, status, count, amount)
            VALUES (NEW.created_at / 3600000, NEW.{currency}, NEW.status, 1, NEW.{amount})
            ON CONFLICT (hour, currency, status)
            DO UPDATE SET count = {hours}.count + 1, amount = {hours}.amount + excluded.amount;
        RETURN NULL;
    END $$;
    CREATE TRIGGER {hours}_insert AFTER INSERT ON {table}
        FOR EACH ROW EXECUTE FUNCTION {hours}_count();
    CREATE TRIGGER {hours}_status AFTER UPDATE OF status ON {table}
        FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION {hours}_count();
    CREATE INDEX {table}_created ON {table} (created_at, {currency}, status, {amount});
    """


MIGRATIONS: tuple[str, ...] = (
    # 1: the first schema (seq columns keep "in the order written" for ties, as SQLite's rowid does)
    _text(
        """
    CREATE TABLE settings (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        api_enabled BOOLEAN NOT NULL,
        payouts_enabled BOOLEAN NOT NULL,
        closed_currencies TEXT NOT NULL
    );
    CREATE TABLE merchants (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        settlement_currency TEXT NOT NULL,
        status TEXT NOT NULL,
        collect_fee_ppm INTEGER NOT NULL CHECK (collect_fee_ppm BETWEEN 0 AND 1000000),
        payouts_enabled BOOLEAN NOT NULL,
        blocked_providers TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        seq BIGINT GENERATED ALWAYS AS IDENTITY
    );
    CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        merchant_id TEXT NOT NULL,
        key_hash TEXT NOT NULL UNIQUE,
        scopes TEXT NOT NULL,
        per_minute INTEGER NOT NULL,
        per_hour INTEGER NOT NULL,
        revoked BOOLEAN NOT NULL,
        created_at BIGINT NOT NULL
    );
    CREATE TABLE payout_limits (
        merchant_id TEXT NOT NULL,
        currency TEXT NOT NULL,
        per_transaction BIGINT,
        per_day BIGINT,
        per_week BIGINT,
        review_threshold BIGINT,
        PRIMARY KEY (merchant_id, currency)
    );
    CREATE TABLE collections (
        reference TEXT PRIMARY KEY,
        merchant_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        requested_amount BIGINT NOT NULL CHECK (requested_amount > 0),
        requested_currency TEXT NOT NULL,
        description TEXT NOT NULL,
        merchant_reference TEXT,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        method TEXT,
        provider TEXT,
        phone TEXT,
        country TEXT,
        submitted_at BIGINT,
        next_check_at BIGINT,
        charged_amount BIGINT,
        charged_currency TEXT,
        settled_amount BIGINT,
        settled_currency TEXT,
        fee_amount BIGINT,
        failure_category TEXT,
        failure_reason TEXT,
        seq BIGINT GENERATED ALWAYS AS IDENTITY,
        CHECK (settled_amount IS NULL OR settled_amount + fee_amount = charged_amount)
    );
    CREATE INDEX collections_open ON collections (status, next_check_at);
    CREATE INDEX collections_expiry ON collections (status, expires_at);
    CREATE INDEX collections_prompts ON collections (phone, submitted_at);
    CREATE TABLE payouts (
        reference TEXT PRIMARY KEY,
        merchant_id TEXT NOT NULL,
        status TEXT NOT NULL,
        amount BIGINT NOT NULL CHECK (amount > 0),
        currency TEXT NOT NULL,
        phone TEXT NOT NULL,
        country TEXT NOT NULL,
        provider TEXT NOT NULL,
        recipient_name TEXT,
        merchant_reference TEXT,
        awaiting_review BOOLEAN NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        provider_reference TEXT,
        status_reason TEXT,
        sent_at BIGINT,
        next_check_at BIGINT,
        resolution TEXT,
        seq BIGINT GENERATED ALWAYS AS IDENTITY
    );
    CREATE INDEX payouts_window ON payouts (merchant_id, currency, created_at);
    CREATE INDEX payouts_due ON payouts (next_check_at) WHERE next_check_at IS NOT NULL;
    CREATE TABLE balances (
        merchant_id TEXT NOT NULL,
        currency TEXT NOT NULL,
        available BIGINT NOT NULL CHECK (available >= 0),
        reserved BIGINT NOT NULL CHECK (reserved >= 0),
        paid_out BIGINT NOT NULL CHECK (paid_out >= 0),
        credited BIGINT NOT NULL,
        CHECK (credited = available + reserved + paid_out),
        PRIMARY KEY (merchant_id, currency)
    );
    CREATE TABLE ledger_entries (
        id TEXT PRIMARY KEY,
        merchant_id TEXT NOT NULL,
        currency TEXT NOT NULL,
        kind TEXT NOT NULL,
        reference TEXT NOT NULL,
        legs TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        seq BIGINT GENERATED ALWAYS AS IDENTITY
    );
    CREATE INDEX ledger_by_account ON ledger_entries (merchant_id, currency, created_at);
    CREATE FUNCTION ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'the ledger is append-only';
    END $$;
    CREATE TRIGGER ledger_append_only_update BEFORE UPDATE OR DELETE ON ledger_entries
        FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
    CREATE TABLE webhooks (
        merchant_id TEXT PRIMARY KEY,
        url TEXT NOT NULL,
        secret_encrypted TEXT NOT NULL,
        events TEXT NOT NULL,
        is_active BOOLEAN NOT NULL,
        disabled_reason TEXT,
        updated_at BIGINT NOT NULL,
        consecutive_failures INTEGER NOT NULL,
        ever_succeeded BOOLEAN NOT NULL
    );
    CREATE TABLE events (
        id TEXT PRIMARY KEY,
        merchant_id TEXT NOT NULL,
        type TEXT NOT NULL,
        data TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        next_attempt_at BIGINT NOT NULL,
        last_error TEXT,
        delivered_at BIGINT,
        seq BIGINT GENERATED ALWAYS AS IDENTITY
    );
    CREATE INDEX events_due ON events (status, next_attempt_at);
    CREATE INDEX events_by_merchant ON events (merchant_id, created_at);
    CREATE TABLE idempotency (
        merchant_id TEXT NOT NULL,
        key TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        status_code INTEGER,
        body TEXT,
        PRIMARY KEY (merchant_id, key)
    );
    CREATE INDEX idempotency_age ON idempotency (created_at);
    """
    ),
    # 2: hourly sums of the payouts that count against the rolling limits, kept by triggers
    _text(
        f"""
    CREATE TABLE payout_spend (
        merchant_id TEXT NOT NULL,
        currency TEXT NOT NULL,
        hour BIGINT NOT NULL,
        amount BIGINT NOT NULL CHECK (amount >= 0),
        PRIMARY KEY (merchant_id, currency, hour)
    );
    INSERT INTO payout_spend (merchant_id, currency, hour, amount)
        SELECT merchant_id, currency, created_at / 3600000, sum(amount) FROM payouts
        WHERE {_COUNTS} GROUP BY merchant_id, currency, created_at / 3600000;
    CREATE FUNCTION payout_spend_insert() RETURNS trigger LANGUAGE plpgsql
        SET search_path FROM CURRENT AS $$
    BEGIN
        INSERT INTO payout_spend (merchant_id, currency, hour, amount)
            VALUES (NEW.merchant_id, NEW.currency, NEW.created_at / 3600000, NEW.amount)
            ON CONFLICT (merchant_id, currency, hour)
            DO UPDATE SET amount = payout_spend.amount + excluded.amount;
        RETURN NULL;
    END $$;
    CREATE TRIGGER payout_spend_insert AFTER INSERT ON payouts
        FOR EACH ROW WHEN ({_NEW_COUNTS}) EXECUTE FUNCTION payout_spend_insert();
    CREATE FUNCTION payout_spend_rejected() RETURNS trigger LANGUAGE plpgsql
        SET search_path FROM CURRENT AS $$
    BEGIN
        UPDATE payout_spend SET amount = amount - OLD.amount
            WHERE merchant_id = OLD.merchant_id AND currency = OLD.currency
            AND hour = OLD.created_at / 3600000;
        RETURN NULL;
    END $$;
    CREATE TRIGGER payout_spend_rejected AFTER UPDATE OF status ON payouts
        FOR EACH ROW WHEN ({_OLD_COUNTS} AND {_NEW_STOPS_COUNTING}) EXECUTE FUNCTION payout_spend_rejected();
    """
    ),
    # 3: the leases workers hold on background work
    _text(
        """
    CREATE TABLE work_leases (
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        until BIGINT NOT NULL,
        PRIMARY KEY (kind, key)
    );
    CREATE INDEX work_leases_until ON work_leases (kind, until);
    """
    ),
    # 4: the per-key rate-limit counters; on PostgreSQL also the server key that every machine shares
    # (the key that encrypts webhook secrets, unless PaymentCore.postgresql is given a key file)
    _text(
        """
    CREATE TABLE rate_counts (
        key_id TEXT NOT NULL,
        width INTEGER NOT NULL,
        start BIGINT NOT NULL,
        hits INTEGER NOT NULL CHECK (hits > 0),
        PRIMARY KEY (key_id, width, start)
    );
    CREATE INDEX rate_counts_start ON rate_counts (start);
    CREATE TABLE server_key (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        fernet_key TEXT NOT NULL
    );
    """
    ),
    # 5: the merchant records API: every delivery attempt of an event, manual redeliveries queued on
    # the event, and the indexes that list a merchant's payouts and collections newest first
    _text(
        """
    ALTER TABLE events ADD COLUMN redeliveries INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE events ADD COLUMN sent_as TEXT;
    ALTER TABLE events ADD COLUMN resend_at BIGINT;
    CREATE INDEX events_resend ON events (resend_at) WHERE resend_at IS NOT NULL;
    CREATE TABLE deliveries (
        id TEXT PRIMARY KEY,
        event_id TEXT NOT NULL,
        at BIGINT NOT NULL,
        name TEXT NOT NULL,
        response_status INTEGER,
        error TEXT,
        duration_ms BIGINT NOT NULL CHECK (duration_ms >= 0),
        resent BOOLEAN NOT NULL,
        seq BIGINT GENERATED ALWAYS AS IDENTITY
    );
    CREATE INDEX deliveries_by_event ON deliveries (event_id, at);
    CREATE INDEX payouts_by_merchant ON payouts (merchant_id, created_at);
    CREATE INDEX collections_by_merchant ON collections (merchant_id, created_at);
    """
    ),
    # 6: the operator's console (issue 18): operators who sign in, their sessions (shared by every
    # server process), and the audit trail of operator actions, append-only like the ledger; the
    # indexes of the work queues (payouts by status, oldest first) and of a merchant's keys
    _text(
        """
    CREATE TABLE operators (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        token_hash TEXT NOT NULL UNIQUE,
        revoked BOOLEAN NOT NULL,
        created_at BIGINT NOT NULL,
        seq BIGINT GENERATED ALWAYS AS IDENTITY
    );
    CREATE TABLE console_sessions (
        id TEXT PRIMARY KEY,
        operator_id TEXT NOT NULL,
        token_hash TEXT NOT NULL UNIQUE,
        created_at BIGINT NOT NULL,
        last_seen_at BIGINT NOT NULL
    );
    CREATE INDEX console_sessions_by_operator ON console_sessions (operator_id);
    CREATE TABLE audit_log (
        id TEXT PRIMARY KEY,
        at BIGINT NOT NULL,
        actor TEXT NOT NULL,
        action TEXT NOT NULL,
        subject TEXT NOT NULL,
        state_before TEXT,
        state_after TEXT,
        seq BIGINT GENERATED ALWAYS AS IDENTITY
    );
    CREATE INDEX audit_by_time ON audit_log (at);
    CREATE INDEX audit_by_subject ON audit_log (subject, at);
    CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'the audit trail is append-only';
    END $$;
    CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit_log
        FOR EACH ROW EXECUTE FUNCTION audit_append_only();
    CREATE TRIGGER audit_append_only_truncate BEFORE TRUNCATE ON audit_log
        FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();
    CREATE INDEX payouts_queue ON payouts (status, created_at);
    ALTER TABLE api_keys ADD COLUMN seq BIGINT GENERATED ALWAYS AS IDENTITY;
    CREATE INDEX api_keys_by_merchant ON api_keys (merchant_id, created_at);
    """
    ),
    # 7: the console's overview (issue 30): payouts and collections counted per UTC hour of creation,
    # currency and status, kept by triggers; an index holding every column the current hour's counts
    # read; the payouts waiting for an operator in partial indexes of those few rows
    _text(
        _hourly_counts("payouts", "currency", "amount")
        + _hourly_counts("collections", "requested_currency", "requested_amount")
        + f"""
    CREATE INDEX payouts_held ON payouts (currency, amount) WHERE awaiting_review;
    CREATE INDEX payouts_failed_unresolved ON payouts (currency, amount)
        WHERE {sql_in("status", [PayoutStatus.FAILED])} AND resolution IS NULL;
    """
    ),
    # 8: append-only whatever the SQL (issue 24): TRUNCATE of the ledger is refused as the audit
    # trail's already was (INSERT ... ON CONFLICT DO UPDATE and MERGE meet the row triggers), and every
    # guard fires ALWAYS, so session_replication_role = replica does not skip it
    """
    CREATE TRIGGER ledger_append_only_truncate BEFORE TRUNCATE ON ledger_entries
        FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();
    ALTER TABLE ledger_entries ENABLE ALWAYS TRIGGER ledger_append_only_update;
    ALTER TABLE ledger_entries ENABLE ALWAYS TRIGGER ledger_append_only_truncate;
    ALTER TABLE audit_log ENABLE ALWAYS TRIGGER audit_append_only;
    ALTER TABLE audit_log ENABLE ALWAYS TRIGGER audit_append_only_truncate;
    """,
    # 9: bulk payouts (issue 28): the batches (a refused item's error kept in `refusals`, JSON), and
    # each payout of a batch carries its id and its item's place
    _text(
        """
    CREATE TABLE payout_batches (
        id TEXT PRIMARY KEY,
        merchant_id TEXT NOT NULL,
        mode TEXT NOT NULL,
        item_count INTEGER NOT NULL CHECK (item_count > 0),
        created_at BIGINT NOT NULL,
        refusals TEXT NOT NULL,
        completed_at BIGINT,
        seq BIGINT GENERATED ALWAYS AS IDENTITY
    );
    CREATE INDEX payout_batches_by_merchant ON payout_batches (merchant_id, created_at);
    ALTER TABLE payouts ADD COLUMN batch_id TEXT;
    ALTER TABLE payouts ADD COLUMN batch_index INTEGER;
    CREATE UNIQUE INDEX payouts_by_batch ON payouts (batch_id, batch_index) WHERE batch_id IS NOT NULL;
    CREATE INDEX payouts_batch_status ON payouts (batch_id, status) WHERE batch_id IS NOT NULL;
    """
    ),
)

_SPENT = sql_in("status", SPENT_STATUSES)
_DUE_PAYOUT = (
    f"(({sql_in('status', PAYOUT_SEND_STATUSES)} AND NOT awaiting_review)"
    f" OR {sql_in('status', PAYOUT_CHECK_STATUSES)})"
)
_CHECK_COLLECTION = sql_in("status", COLLECTION_CHECK_STATUSES)
_EXPIRE_COLLECTION = sql_in("status", COLLECTION_EXPIRY_STATUSES)
_DUE_EVENT = sql_in("status", EVENT_DUE_STATUSES)
_BATCH_OPEN = sql_in("status", BATCH_OPEN_STATUSES)


def _lock_key(*parts: str) -> int:
    """A signed 64-bit advisory-lock key, the same in every process."""
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _lock_half(*parts: str) -> int:
    """A signed 32-bit half of a two-part advisory-lock key (a key space apart from the 64-bit one)."""
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return int.from_bytes(digest[:4], "big", signed=True)


# --- rows <-> records ---------------------------------------------------------------------------


def _encode(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, frozenset):
        return json.dumps(sorted(v.value if isinstance(v, enum.Enum) else v for v in value))
    if isinstance(value, tuple):
        return json.dumps([[leg.account, leg.amount] for leg in value])
    if isinstance(value, dict):
        return wire.dumps(value)
    return value


def _load_data(text: str) -> Any:
    """Event data: every number comes back as a Decimal, as it went in."""
    return json.loads(text, parse_float=Decimal, parse_int=Decimal)


def _decoder(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        decode = _decoder(inner)
        return lambda v: None if v is None else decode(v)
    if origin is frozenset:
        (item,) = typing.get_args(tp)
        return lambda v: frozenset(item(x) for x in json.loads(v))
    if origin is tuple:
        return lambda v: tuple(LedgerLeg(a, n) for a, n in json.loads(v))
    if origin is dict:
        return _load_data
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp
    if tp is bool:
        return bool
    return lambda v: v


@attrs.frozen
class _Codec:
    cls: type[Any]
    table: str
    keys: tuple[str, ...]
    columns: tuple[str, ...]
    decoders: tuple[Any, ...]
    insert_sql: str
    upsert_sql: str
    update_sql: str
    select_sql: str

    @classmethod
    def of(cls, record: type[Any], table: str, keys: tuple[str, ...]) -> _Codec:
        hints = typing.get_type_hints(record)
        columns = tuple(f.name for f in attrs.fields(record))
        names = ", ".join(columns)
        marks = ", ".join("%s" for _ in columns)
        others = [c for c in columns if c not in keys]
        where = " AND ".join(f"{k} = %s" for k in keys)
        return cls(
            cls=record,
            table=table,
            keys=keys,
            columns=columns,
            decoders=tuple(_decoder(hints[c]) for c in columns),
            insert_sql=f"INSERT INTO {table} ({names}) VALUES ({marks})",
            upsert_sql=(
                f"INSERT INTO {table} ({names}) VALUES ({marks}) "
                f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET "
                + ", ".join(f"{c} = excluded.{c}" for c in others)
            ),
            update_sql=f"UPDATE {table} SET {', '.join(f'{c} = %s' for c in others)} WHERE {where}",
            select_sql=f"SELECT {names} FROM {table}",
        )

    def values(self, record: Any) -> list[Any]:
        return [_encode(getattr(record, c)) for c in self.columns]

    def update_values(self, record: Any) -> list[Any]:
        others = [_encode(getattr(record, c)) for c in self.columns if c not in self.keys]
        return others + [_encode(getattr(record, k)) for k in self.keys]

    def decode(self, row: tuple[Any, ...]) -> Any:
        return self.cls(*(d(v) for d, v in zip(self.decoders, row, strict=True)))


_MERCHANTS = _Codec.of(Merchant, "merchants", ("id",))
_KEYS = _Codec.of(ApiKey, "api_keys", ("id",))
_LIMITS = _Codec.of(PayoutLimits, "payout_limits", ("merchant_id", "currency"))
_COLLECTIONS = _Codec.of(Collection, "collections", ("reference",))
_PAYOUTS = _Codec.of(Payout, "payouts", ("reference",))
_BATCHES = _Codec.of(PayoutBatch, "payout_batches", ("id",))
_BALANCES = _Codec.of(Balance, "balances", ("merchant_id", "currency"))
_ENTRIES = _Codec.of(LedgerEntry, "ledger_entries", ("id",))
_WEBHOOKS = _Codec.of(WebhookEndpoint, "webhooks", ("merchant_id",))
_EVENTS = _Codec.of(Event, "events", ("id",))
_IDEMPOTENCY = _Codec.of(IdempotencyRecord, "idempotency", ("merchant_id", "key"))
_DELIVERIES = _Codec.of(Delivery, "deliveries", ("id",))
_OPERATORS = _Codec.of(StoredOperator, "operators", ("id",))
_SESSIONS = _Codec.of(StoredSession, "console_sessions", ("id",))
_AUDIT = _Codec.of(StoredAuditEntry, "audit_log", ("id",))
_BALANCE_COLUMNS = "merchant_id, currency, available, reserved, paid_out, credited"


class _Rows:
    """Statements on one transaction's connection, through the codecs: what every repository uses.

    In a write unit of work the first statement of an aggregate repository takes the store's write
    lock (``locked``); the rate counters take their key's lock instead (``unlocked``).
    """

    def __init__(self, conn: psycopg.Connection[Any], *, writable: bool, write_lock: int) -> None:
        self.conn = conn
        self.writable = writable
        self._write_lock = write_lock
        self._holds_write_lock = False
        self.rate_keys: set[str] = set()

    def _hold(self) -> None:
        if self.writable and not self._holds_write_lock:
            self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._write_lock,))
            self._holds_write_lock = True

    def locked(self, sql: str, params: Any = None) -> psycopg.Cursor[Any]:
        self._hold()
        return self.conn.execute(sql, params)

    def unlocked(self, sql: str, params: Any = None) -> psycopg.Cursor[Any]:
        return self.conn.execute(sql, params)

    def write(self, sql: str, params: Any = None) -> psycopg.Cursor[Any]:
        if not self.writable:
            raise RuntimeError("write through a read-only transaction")
        return self.locked(sql, params)

    def one(self, codec: _Codec, where: str, params: tuple[Any, ...], *, for_update: bool = False) -> Any:
        lock = " FOR UPDATE" if for_update and self.writable else ""
        row = self.locked(f"{codec.select_sql} WHERE {where}{lock}", params).fetchone()
        return None if row is None else codec.decode(row)

    def many(self, codec: _Codec, rest: str, params: Any) -> list[Any]:
        return [codec.decode(r) for r in self.locked(f"{codec.select_sql} {rest}", params).fetchall()]

    def scalar(self, sql: str, params: Any = None) -> int:
        row = self.locked(sql, params).fetchone()
        assert row is not None
        return int(row[0])

    def upsert(self, codec: _Codec, record: Any) -> None:
        self.write(codec.upsert_sql, codec.values(record))

    def insert(self, codec: _Codec, record: Any) -> None:
        self.write(codec.insert_sql, codec.values(record))

    def insert_many(self, codec: _Codec, records: list[Any]) -> None:
        """Every record in one round of statements (psycopg sends them in a pipeline)."""
        if not self.writable:
            raise RuntimeError("write through a read-only transaction")
        self._hold()
        with self.conn.cursor() as cursor:
            cursor.executemany(codec.insert_sql, [codec.values(record) for record in records])

    def update(self, codec: _Codec, record: Any) -> None:
        cursor = self.write(codec.update_sql, codec.update_values(record))
        if cursor.rowcount != 1:
            raise KeyError(f"{codec.table}: no row to update")

    def page(
        self,
        codec: _Codec,
        *,
        scope: dict[str, Any],
        key: str,
        after: str | None,
        filters: list[tuple[str, tuple[Any, ...]]],
        limit: int,
    ) -> list[Any] | None:
        """``ports``' page order: the rows of ``scope`` (column = value) newest first, ties the last
        written first (``seq``), after the row whose ``key`` is ``after``, that meet every
        ``(condition, parameters)``."""
        where = [f"{column} = %s" for column in scope]
        params: list[Any] = list(scope.values())
        if after is not None:
            place = self.locked(
                f"SELECT created_at, seq FROM {codec.table} WHERE {key} = %s AND {' AND '.join(where)}",
                (after, *params),
            ).fetchone()
            if place is None:
                return None
            where.append("(created_at, seq) < (%s, %s)")
            params.extend(place)
        for condition, values in filters:
            where.append(condition)
            params.extend(values)
        rest = f"WHERE {' AND '.join(where)} ORDER BY created_at DESC, seq DESC LIMIT %s"
        return self.many(codec, rest, (*params, limit))


def _in_turns(table: str, key: str, lane: str, due: str, order: str) -> str:
    """The rest of a SELECT over ``table`` listing the rows meeting ``due`` in turns over ``lane``
    (``_queries.in_turns``): each row ranked within its lane in ``order``, at most ``%(per_lane)s`` of
    a lane, every lane's first row before any lane's second; then ``LIMIT %(limit)s``."""
    return (
        f"JOIN (SELECT {key} AS turn_key, row_number() OVER (PARTITION BY {lane} ORDER BY {order})"
        f" AS turn FROM {table} WHERE {due}) AS turns ON turns.turn_key = {table}.{key}"
        f" WHERE turn <= %(per_lane)s ORDER BY turn, {order} LIMIT %(limit)s"
    )


class _Repository:
    def __init__(self, rows: _Rows) -> None:
        self._rows = rows


# --- settings, merchants, keys, limits -----------------------------------------------------------


class _Settings(_Repository):
    def get(self) -> Settings:
        row = self._rows.locked(
            "SELECT api_enabled, payouts_enabled, closed_currencies FROM settings WHERE id = 1"
        ).fetchone()
        if row is None:
            return Settings()
        return Settings(bool(row[0]), bool(row[1]), frozenset(json.loads(row[2])))

    def put(self, settings: Settings) -> None:
        self._rows.write(
            "INSERT INTO settings (id, api_enabled, payouts_enabled, closed_currencies)"
            " VALUES (1, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET api_enabled = excluded.api_enabled,"
            " payouts_enabled = excluded.payouts_enabled, closed_currencies = excluded.closed_currencies",
            (settings.api_enabled, settings.payouts_enabled, _encode(settings.closed_currencies)),
        )


class _Merchants(_Repository):
    def get(self, merchant_id: str) -> Merchant | None:
        merchant: Merchant | None = self._rows.one(_MERCHANTS, "id = %s", (merchant_id,))
        return merchant

    def put(self, merchant: Merchant) -> None:
        self._rows.upsert(_MERCHANTS, merchant)

    def list(self) -> builtins.list[Merchant]:
        return self._rows.many(_MERCHANTS, "ORDER BY created_at, seq", ())


class _Keys(_Repository):
    def get(self, key_id: str) -> ApiKey | None:
        key: ApiKey | None = self._rows.one(_KEYS, "id = %s", (key_id,))
        return key

    def by_hash(self, key_hash: str) -> ApiKey | None:
        key: ApiKey | None = self._rows.one(_KEYS, "key_hash = %s", (key_hash,))
        return key

    def put(self, key: ApiKey) -> None:
        self._rows.upsert(_KEYS, key)

    def list(self, merchant_id: str) -> builtins.list[ApiKey]:
        return self._rows.many(_KEYS, "WHERE merchant_id = %s ORDER BY created_at, seq", (merchant_id,))


class _Limits(_Repository):
    def get(self, merchant_id: str, currency: str) -> PayoutLimits | None:
        limits: PayoutLimits | None = self._rows.one(
            _LIMITS, "merchant_id = %s AND currency = %s", (merchant_id, currency)
        )
        return limits

    def put(self, limits: PayoutLimits) -> None:
        self._rows.upsert(_LIMITS, limits)


# --- collections and payouts ---------------------------------------------------------------------


class _Collections(_Repository):
    def get(self, reference: str) -> Collection | None:
        collection: Collection | None = self._rows.one(
            _COLLECTIONS, "reference = %s", (reference,), for_update=True
        )
        return collection

    def add(self, collection: Collection) -> None:
        self._rows.insert(_COLLECTIONS, collection)

    def update(self, collection: Collection) -> None:
        self._rows.update(_COLLECTIONS, collection)

    _DUE = (
        f"SELECT reference FROM collections WHERE {_CHECK_COLLECTION} AND next_check_at <= %(now)s"
        f" UNION SELECT reference FROM collections WHERE {_EXPIRE_COLLECTION}"
        " AND submitted_at IS NULL AND expires_at <= %(now)s"
    )

    def due(self, now: int, limit: int, *, per_lane: int | None = None) -> list[Collection]:
        # _queries.collection_is_due, one indexed branch each, in _queries.collection_due_order
        order = "LEAST(expires_at, coalesce(next_check_at, expires_at)), collections.reference"
        if per_lane is not None:  # _queries.in_turns over _queries.collection_lane
            return self._rows.many(
                _COLLECTIONS,
                _in_turns(
                    "collections", "reference", "coalesce(provider, '')", f"reference IN ({self._DUE})", order
                ),
                {"now": now, "per_lane": per_lane, "limit": limit},
            )
        return self._rows.many(
            _COLLECTIONS,
            f"WHERE reference IN ({self._DUE}) ORDER BY {order} LIMIT %(limit)s",
            {"now": now, "limit": limit},
        )

    def count_due(self, now: int) -> int:
        return self._rows.scalar(f"SELECT count(*) FROM ({self._DUE}) AS due", {"now": now})

    def prompts_since(self, phone: str, since: int) -> int:
        return self._rows.scalar(
            "SELECT count(*) FROM collections WHERE phone = %s AND submitted_at >= %s", (phone, since)
        )

    def oldest_due(self, now: int) -> int | None:
        # _queries.collection_due_since: the earliest of each branch of collection_is_due
        row = self._rows.locked(
            "SELECT min(since) FROM ("
            f" SELECT min(next_check_at) AS since FROM collections WHERE {_CHECK_COLLECTION}"
            "  AND next_check_at <= %(now)s"
            f" UNION ALL SELECT min(expires_at) FROM collections WHERE {_EXPIRE_COLLECTION}"
            "  AND submitted_at IS NULL AND expires_at <= %(now)s) AS due",
            {"now": now},
        ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def tally(self, since: int, until: int, width: int) -> list[Tally]:
        return _tally(
            self._rows, "collections", "requested_currency", "requested_amount", since, until, width
        )

    def queue(
        self,
        *,
        limit: int,
        after: str | None = None,
        merchant_id: str | None = None,
        currency: str | None = None,
        status: CollectionStatus | None = None,
        created_from: int | None = None,
        created_before: int | None = None,
    ) -> list[Collection] | None:
        filters = {"merchant_id": merchant_id, "requested_currency": currency, "status": status}
        return _queue(
            self._rows,
            _COLLECTIONS,
            "reference",
            after=after,
            equal=filters,
            conditions=_created(created_from, created_before),
            limit=limit,
        )

    def page(
        self,
        merchant_id: str,
        *,
        limit: int,
        after: str | None = None,
        status: CollectionStatus | None = None,
        merchant_reference: str | None = None,
    ) -> list[Collection] | None:
        return self._rows.page(
            _COLLECTIONS,
            scope={"merchant_id": merchant_id},
            key="reference",
            after=after,
            filters=_record_filters(status, merchant_reference),
            limit=limit,
        )


class _Payouts(_Repository):
    def get(self, reference: str) -> Payout | None:
        payout: Payout | None = self._rows.one(_PAYOUTS, "reference = %s", (reference,), for_update=True)
        return payout

    def add(self, payout: Payout) -> None:
        self._rows.insert(_PAYOUTS, payout)

    def add_many(self, payouts: builtins.list[Payout]) -> None:
        self._rows.insert_many(_PAYOUTS, payouts)

    def update(self, payout: Payout) -> None:
        self._rows.update(_PAYOUTS, payout)

    def due(self, now: int, limit: int) -> list[Payout]:
        # _queries.payout_is_due, in _queries.payouts_in_due_order: each merchant's payouts numbered in
        # their own order (next_check_at, reference), then every merchant's first, every second, ...;
        # numbered on the narrow rows, and only the `limit` chosen are read whole
        names = ", ".join(f"p.{column}" for column in _PAYOUTS.columns)
        rows = self._rows.locked(
            f"SELECT {names} FROM (SELECT reference, next_check_at, row_number() OVER"
            " (PARTITION BY merchant_id ORDER BY next_check_at, reference) AS turn FROM payouts"
            f" WHERE next_check_at IS NOT NULL AND next_check_at <= %s AND {_DUE_PAYOUT}"
            " ORDER BY turn, next_check_at, reference LIMIT %s) AS due"
            " JOIN payouts AS p ON p.reference = due.reference"
            " ORDER BY due.turn, due.next_check_at, due.reference",
            (now, limit),
        ).fetchall()
        return [_PAYOUTS.decode(row) for row in rows]

    def count_due(self, now: int) -> int:
        return self._rows.scalar(
            f"SELECT count(*) FROM payouts WHERE next_check_at IS NOT NULL AND next_check_at <= %s"
            f" AND {_DUE_PAYOUT}",
            (now,),
        )

    def oldest_due(self, now: int) -> int | None:
        row = self._rows.locked(
            "SELECT min(next_check_at) FROM payouts WHERE next_check_at IS NOT NULL"
            f" AND next_check_at <= %s AND {_DUE_PAYOUT}",
            (now,),
        ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def tally(self, since: int, until: int, width: int) -> builtins.list[Tally]:
        return _tally(self._rows, "payouts", "currency", "amount", since, until, width)

    def totals(
        self,
        *,
        status: PayoutStatus | None = None,
        awaiting_review: bool | None = None,
        unresolved: bool | None = None,
    ) -> builtins.list[CurrencyTotal]:
        # literals, not parameters: the planner then sees which partial index holds the rows
        where = ["TRUE"]
        if status is not None:
            where.append(sql_in("status", [status]))
        if awaiting_review is not None:
            where.append("awaiting_review" if awaiting_review else "NOT awaiting_review")
        if unresolved is not None:
            where.append("resolution IS NULL" if unresolved else "resolution IS NOT NULL")
        rows = self._rows.locked(
            f"SELECT currency, count(*), sum(amount) FROM payouts WHERE {' AND '.join(where)}"
            " GROUP BY currency ORDER BY currency"
        ).fetchall()
        return [CurrencyTotal(str(c), int(n), int(a)) for c, n, a in rows]

    def spent(self, merchant_id: str, currency: str, since: int) -> int:
        # whole hours after the one holding `since` come from the trigger-kept buckets; that first,
        # partial hour is summed exactly from the payouts themselves
        next_hour = (since // 3_600_000 + 1) * 3_600_000
        return self._rows.scalar(
            "SELECT (SELECT coalesce(sum(amount), 0) FROM payout_spend"
            "        WHERE merchant_id = %(m)s AND currency = %(c)s AND hour >= %(hour)s)"
            " + (SELECT coalesce(sum(amount), 0) FROM payouts"
            "        WHERE merchant_id = %(m)s AND currency = %(c)s"
            f"       AND created_at >= %(since)s AND created_at < %(next)s AND {_SPENT})",
            {
                "m": merchant_id,
                "c": currency,
                "hour": next_hour // 3_600_000,
                "since": since,
                "next": next_hour,
            },
        )

    def page(
        self,
        merchant_id: str,
        *,
        limit: int,
        after: str | None = None,
        status: PayoutStatus | None = None,
        merchant_reference: str | None = None,
        batch_id: str | None = None,
    ) -> list[Payout] | None:
        filters = _record_filters(status, merchant_reference)
        if batch_id is not None:
            filters.append(("batch_id = %s", (batch_id,)))
        return self._rows.page(
            _PAYOUTS,
            scope={"merchant_id": merchant_id},
            key="reference",
            after=after,
            filters=filters,
            limit=limit,
        )

    def in_batch(self, batch_id: str, *, after: int | None, limit: int) -> builtins.list[Payout]:
        return self._rows.many(
            _PAYOUTS,
            "WHERE batch_id = %s AND batch_index > %s ORDER BY batch_index LIMIT %s",
            (batch_id, -1 if after is None else after, limit),
        )

    def batch_tally(self, batch_id: str) -> builtins.list[BatchTally]:
        rows = self._rows.locked(
            "SELECT status, currency, count(*), sum(amount) FROM payouts WHERE batch_id = %s"
            " GROUP BY status, currency",
            (batch_id,),
        ).fetchall()
        return [
            BatchTally(PayoutStatus(status), currency, int(count), int(total))
            for status, currency, count, total in rows
        ]

    def batch_open(self, batch_id: str) -> int:
        return self._rows.scalar(
            f"SELECT count(*) FROM payouts WHERE batch_id = %s AND {_BATCH_OPEN}", (batch_id,)
        )


    def queue(
        self,
        *,
        limit: int,
        after: str | None = None,
        merchant_id: str | None = None,
        status: PayoutStatus | None = None,
        awaiting_review: bool | None = None,
        unresolved: bool | None = None,
        currency: str | None = None,
        created_from: int | None = None,
        created_before: int | None = None,
    ) -> builtins.list[Payout] | None:
        conditions = _created(created_from, created_before)
        if unresolved is not None:
            conditions.append(("resolution IS NULL" if unresolved else "resolution IS NOT NULL", ()))
        equal = {
            "merchant_id": merchant_id,
            "status": status,
            "awaiting_review": awaiting_review,
            "currency": currency,
        }
        return _queue(
            self._rows, _PAYOUTS, "reference", after=after, equal=equal, conditions=conditions, limit=limit
        )


def _tally(
    rows: _Rows, table: str, currency: str, amount: str, since: int, until: int, width: int
) -> list[Tally]:
    """``ports``' tally: whole hours from the hourly counts of migration 7 (``hours_plan``), the rest
    (at most the two partial hours at the ends) from the rows, through their creation-time index."""
    plan = hours_plan(since, until, width)
    rows_sql = (
        f"SELECT (created_at - %(since)s) / %(width)s, {currency}, status, count(*), sum({amount})"
        f" FROM {table} WHERE created_at >= %(low)s AND created_at < %(high)s GROUP BY 1, 2, 3"
    )
    spans = [(since, until)]
    found: list[Any] = []
    if plan is not None:
        first, end = plan
        found += rows.locked(
            "SELECT (hour * 3600000 - %(since)s) / %(width)s, currency, status, sum(count), sum(amount)"
            f" FROM {table[:-1]}_hours WHERE hour >= %(first)s AND hour < %(end)s GROUP BY 1, 2, 3",
            {"since": since, "width": width, "first": first, "end": end},
        ).fetchall()
        spans = [(since, first * HOUR_MS), (end * HOUR_MS, until)]
    for low, high in spans:
        if low < high:
            params = {"since": since, "width": width, "low": low, "high": high}
            found += rows.locked(rows_sql, params).fetchall()
    return merge_tallies(found)


def _created(created_from: int | None, created_before: int | None) -> list[tuple[str, tuple[Any, ...]]]:
    conditions: list[tuple[str, tuple[Any, ...]]] = []
    if created_from is not None:
        conditions.append(("created_at >= %s", (created_from,)))
    if created_before is not None:
        conditions.append(("created_at < %s", (created_before,)))
    return conditions


def _queue(
    rows: _Rows,
    codec: _Codec,
    key: str,
    *,
    after: str | None,
    equal: dict[str, Any],
    conditions: list[tuple[str, tuple[Any, ...]]],
    limit: int,
) -> list[Any] | None:
    """An operator's list across merchants: oldest first (ties in the order written: ``seq``), after
    the row whose ``key`` is ``after`` (None when there is none), the columns of ``equal`` that are not
    None equal to their values (an enum by its value), and every ``(condition, parameters)`` met."""
    where: list[str] = []
    params: list[Any] = []
    if after is not None:
        found = rows.locked(f"SELECT created_at, seq FROM {codec.table} WHERE {key} = %s", (after,))
        place = found.fetchone()
        if place is None:
            return None
        where.append("(created_at, seq) > (%s, %s)")
        params.extend(place)
    for column, value in equal.items():
        if value is not None:
            where.append(f"{column} = %s")
            params.append(value.value if isinstance(value, enum.Enum) else value)
    for condition, values in conditions:
        where.append(condition)
        params.extend(values)
    condition = f"WHERE {' AND '.join(where)} " if where else ""
    return rows.many(codec, f"{condition}ORDER BY created_at, seq LIMIT %s", (*params, limit))


class _Batches(_Repository):
    def add(self, batch: PayoutBatch) -> None:
        self._rows.insert(_BATCHES, batch)

    def get(self, batch_id: str) -> PayoutBatch | None:
        batch: PayoutBatch | None = self._rows.one(_BATCHES, "id = %s", (batch_id,), for_update=True)
        return batch

    def update(self, batch: PayoutBatch) -> None:
        self._rows.update(_BATCHES, batch)


def _record_filters(
    status: enum.Enum | None, merchant_reference: str | None
) -> list[tuple[str, tuple[Any, ...]]]:
    """The conditions of a payout or collection list's filters."""
    filters: list[tuple[str, tuple[Any, ...]]] = []
    if status is not None:
        filters.append(("status = %s", (status.value,)))
    if merchant_reference is not None:
        filters.append(("merchant_reference = %s", (merchant_reference,)))
    return filters


# --- the ledger ------------------------------------------------------------------------------------


class _Ledger(_Repository):
    def balance(self, merchant_id: str, currency: str) -> Balance:
        balance: Balance | None = self._rows.one(
            _BALANCES, "merchant_id = %s AND currency = %s", (merchant_id, currency)
        )
        return balance if balance is not None else Balance(merchant_id=merchant_id, currency=currency)

    def balances(self, merchant_id: str) -> list[Balance]:
        return self._rows.many(_BALANCES, "WHERE merchant_id = %s ORDER BY currency", (merchant_id,))

    def put_balance(self, balance: Balance) -> None:
        self._rows.upsert(_BALANCES, balance)

    def move(
        self,
        merchant_id: str,
        currency: str,
        *,
        available: int = 0,
        reserved: int = 0,
        paid_out: int = 0,
        credited: int = 0,
    ) -> Balance | None:
        amounts = {
            "m": merchant_id,
            "c": currency,
            "a": available,
            "r": reserved,
            "p": paid_out,
            "k": credited,
        }
        update = (
            "UPDATE balances SET available = available + %(a)s, reserved = reserved + %(r)s,"
            " paid_out = paid_out + %(p)s, credited = credited + %(k)s"
            " WHERE merchant_id = %(m)s AND currency = %(c)s"
            " AND available + %(a)s >= 0 AND reserved + %(r)s >= 0 AND paid_out + %(p)s >= 0"
            f" RETURNING {_BALANCE_COLUMNS}"
        )
        # one conditional statement: a concurrent move of the same row is waited for and the condition
        # checked again on the row it left (READ COMMITTED), so no money is taken twice
        row = self._rows.write(update, amounts).fetchone()
        if row is None and min(available, reserved, paid_out) >= 0:
            # only a missing row refuses an addition: create it (or, if another transaction just did,
            # add to theirs)
            row = self._rows.write(
                f"INSERT INTO balances ({_BALANCE_COLUMNS}) VALUES (%(m)s, %(c)s, %(a)s, %(r)s, %(p)s, %(k)s)"
                f" ON CONFLICT (merchant_id, currency) DO NOTHING RETURNING {_BALANCE_COLUMNS}",
                amounts,
            ).fetchone()
            if row is None:
                row = self._rows.write(update, amounts).fetchone()
        moved: Balance | None = None if row is None else _BALANCES.decode(row)
        return moved

    def append(self, entry: LedgerEntry) -> None:
        self._rows.insert(_ENTRIES, entry)

    def append_many(self, entries: list[LedgerEntry]) -> None:
        self._rows.insert_many(_ENTRIES, entries)

    def entries(self, merchant_id: str, currency: str) -> list[LedgerEntry]:
        return self._rows.many(
            _ENTRIES,
            "WHERE merchant_id = %s AND currency = %s ORDER BY created_at, seq",
            (merchant_id, currency),
        )

    def page(
        self, merchant_id: str, currency: str, *, limit: int, after: str | None = None
    ) -> list[LedgerEntry] | None:
        return self._rows.page(
            _ENTRIES,
            scope={"merchant_id": merchant_id, "currency": currency},
            key="id",
            after=after,
            filters=[],
            limit=limit,
        )


# --- webhooks, the outbox, idempotency, leases, rates -------------------------------------------


class _Webhooks(_Repository):
    def get(self, merchant_id: str) -> WebhookEndpoint | None:
        endpoint: WebhookEndpoint | None = self._rows.one(_WEBHOOKS, "merchant_id = %s", (merchant_id,))
        return endpoint

    def put(self, endpoint: WebhookEndpoint) -> None:
        self._rows.upsert(_WEBHOOKS, endpoint)

    # _queries.endpoint_is_troubled and endpoint_trouble_order
    _TROUBLED = "(NOT is_active OR consecutive_failures > 0)"

    def count_troubled(self) -> tuple[int, int]:
        row = self._rows.locked(
            "SELECT count(*) FILTER (WHERE is_active), count(*) FILTER (WHERE NOT is_active) FROM webhooks"
            f" WHERE {self._TROUBLED}"
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def troubled(self, limit: int) -> list[WebhookEndpoint]:
        return self._rows.many(
            _WEBHOOKS,
            f"WHERE {self._TROUBLED} ORDER BY is_active, consecutive_failures DESC, merchant_id LIMIT %s",
            (limit,),
        )


class _Outbox(_Repository):
    def add(self, event: Event) -> None:
        self._rows.insert(_EVENTS, event)

    def get(self, event_id: str) -> Event | None:
        event: Event | None = self._rows.one(_EVENTS, "id = %s", (event_id,), for_update=True)
        return event

    def update(self, event: Event) -> None:
        self._rows.update(_EVENTS, event)

    def due(self, now: int, limit: int, *, per_lane: int | None = None) -> list[Event]:
        # _queries.event_is_due, oldest first
        due = f"{_DUE_EVENT} AND next_attempt_at <= %(now)s"
        order = "events.created_at, events.seq"
        if per_lane is not None:  # _queries.in_turns over _queries.event_lane
            return self._rows.many(
                _EVENTS,
                _in_turns("events", "id", "merchant_id", due, order),
                {"now": now, "per_lane": per_lane, "limit": limit},
            )
        return self._rows.many(
            _EVENTS, f"WHERE {due} ORDER BY {order} LIMIT %(limit)s", {"now": now, "limit": limit}
        )

    def defer(self, merchant_id: str, until: int) -> int:
        cursor = self._rows.write(
            f"UPDATE events SET next_attempt_at = %s WHERE merchant_id = %s AND {_DUE_EVENT}"
            " AND next_attempt_at < %s",
            (until, merchant_id, until),
        )
        return cursor.rowcount

    def count_due(self, now: int) -> int:
        return self._rows.scalar(
            f"SELECT count(*) FROM events WHERE {_DUE_EVENT} AND next_attempt_at <= %s", (now,)
        )

    def oldest_due(self, now: int) -> int | None:
        row = self._rows.locked(
            f"SELECT min(next_attempt_at) FROM events WHERE {_DUE_EVENT} AND next_attempt_at <= %s", (now,)
        ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def list(self, merchant_id: str) -> builtins.list[Event]:
        return self._rows.many(_EVENTS, "WHERE merchant_id = %s ORDER BY created_at, seq", (merchant_id,))

    def page(
        self,
        merchant_id: str,
        *,
        limit: int,
        after: str | None = None,
        event_type: str | None = None,
        statuses: frozenset[DeliveryStatus] | None = None,
    ) -> builtins.list[Event] | None:
        filters: builtins.list[tuple[str, tuple[Any, ...]]] = []
        if event_type is not None:
            filters.append(("type = %s", (event_type,)))
        if statuses is not None:
            values = sorted(status.value for status in statuses)
            filters.append((f"status IN ({', '.join('%s' for _ in values) or 'NULL'})", tuple(values)))
        return self._rows.page(
            _EVENTS, scope={"merchant_id": merchant_id}, key="id", after=after, filters=filters, limit=limit
        )

    def resends_due(self, now: int, limit: int) -> builtins.list[Event]:
        return self._rows.many(
            _EVENTS,
            "WHERE resend_at IS NOT NULL AND resend_at <= %s ORDER BY resend_at, seq LIMIT %s",
            (now, limit),
        )


class _Deliveries(_Repository):
    def add(self, delivery: Delivery) -> None:
        self._rows.insert(_DELIVERIES, delivery)

    def list(self, event_id: str) -> builtins.list[Delivery]:
        return self._rows.many(_DELIVERIES, "WHERE event_id = %s ORDER BY at, seq", (event_id,))


class _Idempotency(_Repository):
    def get(self, merchant_id: str, key: str) -> IdempotencyRecord | None:
        record: IdempotencyRecord | None = self._rows.one(
            _IDEMPOTENCY, "merchant_id = %s AND key = %s", (merchant_id, key)
        )
        return record

    def put(self, record: IdempotencyRecord) -> None:
        self._rows.upsert(_IDEMPOTENCY, record)

    def delete(self, merchant_id: str, key: str) -> None:
        self._rows.write("DELETE FROM idempotency WHERE merchant_id = %s AND key = %s", (merchant_id, key))

    def purge(self, before: int) -> int:
        return self._rows.write("DELETE FROM idempotency WHERE created_at < %s", (before,)).rowcount


class _Leases(_Repository):
    def take(self, kind: str, key: str, until: int) -> None:
        self._rows.write(
            "INSERT INTO work_leases (kind, key, until) VALUES (%s, %s, %s)"
            " ON CONFLICT (kind, key) DO UPDATE SET until = excluded.until",
            (kind, key, until),
        )

    def drop(self, kind: str, key: str) -> None:
        self._rows.write("DELETE FROM work_leases WHERE kind = %s AND key = %s", (kind, key))

    def held(self, kind: str, now: int) -> int:
        return self._rows.scalar(
            "SELECT count(*) FROM work_leases WHERE kind = %s AND until > %s", (kind, now)
        )

    def purge(self, before: int) -> int:
        return self._rows.write("DELETE FROM work_leases WHERE until < %s", (before,)).rowcount


class _Rates(_Repository):
    """The rate counters: each key's own advisory lock, never the store's write lock."""

    def __init__(self, rows: _Rows, namespace: int) -> None:
        super().__init__(rows)
        self._namespace = namespace

    def _hold(self, key_id: str) -> None:
        if self._rows.writable and key_id not in self._rows.rate_keys:
            self._rows.unlocked(
                "SELECT pg_advisory_xact_lock(%s, %s)", (self._namespace, _lock_half("rate", key_id))
            )
            self._rows.rate_keys.add(key_id)

    def buckets(self, key_id: str, width: int, since: int) -> builtins.list[tuple[int, int]]:
        self._hold(key_id)  # before the read: its snapshot then holds the last holder's counts
        rows = self._rows.unlocked(
            "SELECT start, hits FROM rate_counts WHERE key_id = %s AND width = %s AND start >= %s"
            " ORDER BY start",
            (key_id, width, since),
        ).fetchall()
        return [(int(start), int(hits)) for start, hits in rows]

    def add(self, key_id: str, width: int, start: int, hits: int = 1) -> None:
        if not self._rows.writable:
            raise RuntimeError("write through a read-only transaction")
        self._hold(key_id)
        self._rows.unlocked(
            "INSERT INTO rate_counts (key_id, width, start, hits) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (key_id, width, start) DO UPDATE SET hits = rate_counts.hits + excluded.hits",
            (key_id, width, start, hits),
        )

    def purge(self, before: int) -> int:
        if not self._rows.writable:
            raise RuntimeError("write through a read-only transaction")
        return self._rows.unlocked("DELETE FROM rate_counts WHERE start < %s", (before,)).rowcount


# --- operators, console sessions, the audit trail ---------------------------------------------------


class _Operators(_Repository):
    def get(self, operator_id: str) -> StoredOperator | None:
        operator: StoredOperator | None = self._rows.one(_OPERATORS, "id = %s", (operator_id,))
        return operator

    def by_hash(self, token_hash: str) -> StoredOperator | None:
        operator: StoredOperator | None = self._rows.one(_OPERATORS, "token_hash = %s", (token_hash,))
        return operator

    def put(self, operator: StoredOperator) -> None:
        self._rows.upsert(_OPERATORS, operator)

    def list(self) -> builtins.list[StoredOperator]:
        return self._rows.many(_OPERATORS, "ORDER BY created_at, seq", ())


class _Sessions(_Repository):
    def by_hash(self, token_hash: str) -> StoredSession | None:
        session: StoredSession | None = self._rows.one(_SESSIONS, "token_hash = %s", (token_hash,))
        return session

    def put(self, session: StoredSession) -> None:
        self._rows.upsert(_SESSIONS, session)

    def delete(self, session_id: str) -> None:
        self._rows.write("DELETE FROM console_sessions WHERE id = %s", (session_id,))

    def end_all(self, operator_id: str) -> int:
        return self._rows.write(
            "DELETE FROM console_sessions WHERE operator_id = %s", (operator_id,)
        ).rowcount

    def purge(self, *, seen_before: int, created_before: int) -> int:
        return self._rows.write(
            "DELETE FROM console_sessions WHERE last_seen_at < %s OR created_at < %s",
            (seen_before, created_before),
        ).rowcount


class _Audit(_Repository):
    """Append-only: triggers of migration 6 refuse UPDATE, DELETE and TRUNCATE of ``audit_log``."""

    def add(self, entry: StoredAuditEntry) -> None:
        self._rows.insert(_AUDIT, entry)

    def page(
        self, *, limit: int, after: str | None = None, subject: str | None = None
    ) -> builtins.list[StoredAuditEntry] | None:
        where: builtins.list[str] = []
        params: builtins.list[Any] = []
        if after is not None:
            place = self._rows.locked("SELECT at, seq FROM audit_log WHERE id = %s", (after,)).fetchone()
            if place is None:
                return None
            where.append("(at, seq) < (%s, %s)")
            params.extend(place)
        if subject is not None:
            where.append("subject = %s")
            params.append(subject)
        condition = f"WHERE {' AND '.join(where)} " if where else ""
        return self._rows.many(_AUDIT, f"{condition}ORDER BY at DESC, seq DESC LIMIT %s", (*params, limit))


class PostgresTransaction:
    """One unit of work on one pooled connection: the repositories of ``ports.UnitOfWork``."""

    def __init__(
        self, conn: psycopg.Connection[Any], *, writable: bool, write_lock: int, rate_namespace: int
    ) -> None:
        rows = _Rows(conn, writable=writable, write_lock=write_lock)
        self.settings = _Settings(rows)
        self.merchants = _Merchants(rows)
        self.keys = _Keys(rows)
        self.limits = _Limits(rows)
        self.collections = _Collections(rows)
        self.payouts = _Payouts(rows)
        self.batches = _Batches(rows)
        self.ledger = _Ledger(rows)
        self.webhooks = _Webhooks(rows)
        self.outbox = _Outbox(rows)
        self.deliveries = _Deliveries(rows)
        self.idempotency = _Idempotency(rows)
        self.leases = _Leases(rows)
        self.rates = _Rates(rows, rate_namespace)
        self.operators = _Operators(rows)
        self.sessions = _Sessions(rows)
        self.audit = _Audit(rows)


class PostgresStore:
    """The storage port on a PostgreSQL database named by a libpq URL (or any conninfo string).

    ``pool_size`` connections at most per process (``DEFAULT_POOL_SIZE``); a unit of work waits up to
    ``timeout`` seconds for one. The schema is migrated on construction unless ``migrate=False``.
    """

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        timeout: float = 30.0,
        migrate: bool = True,
    ) -> None:
        if pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        self.url = url
        try:  # one connection first: a wrong URL, a refused login or a server that is down fail at once
            with psycopg.connect(url, autocommit=True, connect_timeout=max(1, int(timeout))) as conn:
                row = conn.execute("SELECT current_database(), current_schema()").fetchone()
        except psycopg.Error as exc:
            reason = " ".join(str(exc).split())  # libpq's message runs over several lines
            raise StoreUnavailableError(f"cannot use the PostgreSQL database: {reason}") from exc
        assert row is not None
        database, schema = str(row[0]), row[1]
        if schema is None:
            raise StoreUnavailableError(f"{database}: no schema of the search_path exists")
        self.schema = str(schema)
        self._write_lock = _lock_key("paymentcore.write", self.schema)
        self._migrate_lock = _lock_key("paymentcore.migrate", self.schema)
        self._rate_namespace = _lock_half("paymentcore.rate", self.schema)
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            timeout=timeout,
            kwargs={"autocommit": True, "application_name": "paymentcore"},
            open=False,
            name="paymentcore",
        )
        self._pool.open(wait=True, timeout=timeout)
        try:
            if migrate:
                self.migrate()
        except BaseException:
            self._pool.close()
            raise

    # --- schema ------------------------------------------------------------------------------

    def migrate(self) -> None:
        """Bring the schema up to date, in one transaction under an advisory lock (idempotent; safe with
        several processes starting at once on an empty database: the later ones wait, then find it done)."""
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._migrate_lock,))
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT version FROM schema_version").fetchone()
            if row is None:
                conn.execute("INSERT INTO schema_version (version) VALUES (0)")
                version = 0
            else:
                version = int(row[0])
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                conn.execute(script.encode())
                conn.execute("UPDATE schema_version SET version = %s", (number,))

    def schema_version(self) -> int:
        with self._pool.connection() as conn:
            row = conn.execute("SELECT version FROM schema_version").fetchone()
        return 0 if row is None else int(row[0])

    def server_key(self) -> bytes:
        """The Fernet key kept in the database (made once, by whichever process asks first)."""
        with self._pool.connection() as conn, conn.transaction():
            candidate = secrets.token_bytes(32)  # what Fernet.generate_key() makes
            conn.execute(
                "INSERT INTO server_key (id, fernet_key) VALUES (1, %s) ON CONFLICT (id) DO NOTHING",
                (base64.urlsafe_b64encode(candidate).decode(),),
            )
            row = conn.execute("SELECT fernet_key FROM server_key WHERE id = 1").fetchone()
        assert row is not None
        return str(row[0]).encode()

    # --- units of work -------------------------------------------------------------------------

    @contextmanager
    def _unit(self, begin: str, *, writable: bool) -> Iterator[PostgresTransaction]:
        with self._pool.connection() as conn:
            conn.execute(begin)
            try:
                yield PostgresTransaction(
                    conn,
                    writable=writable,
                    write_lock=self._write_lock,
                    rate_namespace=self._rate_namespace,
                )
            except BaseException:
                if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    with suppress(psycopg.Error):  # a broken connection: the pool throws it away
                        conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT" if writable else "ROLLBACK")

    @contextmanager
    def transaction(self) -> Iterator[PostgresTransaction]:
        """A write transaction, durable once the block has exited without an exception (COMMIT)."""
        with self._unit("BEGIN ISOLATION LEVEL READ COMMITTED", writable=True) as tx:
            yield tx

    @contextmanager
    def read(self) -> Iterator[PostgresTransaction]:
        """A read-only view: one snapshot of the database, never waiting for a writer."""
        with self._unit("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", writable=False) as tx:
            yield tx

    def ping(self, timeout: float = 0.5) -> None:
        """A trivial query on a pooled connection, giving up after about ``timeout`` seconds; a server
        that would refuse writes (a standby, ``default_transaction_read_only``) raises
        StoreReadOnlyError. No lock is taken."""
        try:
            with self._pool.connection(timeout=timeout) as conn:
                conn.execute(f"SET statement_timeout = {max(1, int(timeout * 1000))}")
                try:
                    row = conn.execute(
                        "SELECT count(*), current_setting('transaction_read_only') FROM schema_version"
                    ).fetchone()
                finally:
                    conn.execute("SET statement_timeout = DEFAULT")
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreUnavailableError(f"{type(exc).__name__}: {exc}") from exc
        if row is not None and row[1] == "on":
            raise StoreReadOnlyError("the database server takes no writes (transaction_read_only is on)")

    def close(self) -> None:
        self._pool.close()
