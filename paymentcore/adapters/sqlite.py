"""SqliteStore: the storage port on one SQLite file, through sqlite-utils over connections we open.

Each thread gets its own connection (``isolation_level=None``, WAL, ``synchronous=FULL`` by default,
a busy timeout). A write transaction starts with ``BEGIN IMMEDIATE``, so it holds the write lock from
its first statement and a balance read inside it is still true when it writes. Amounts are INTEGER
columns (sqlite-utils would store a Decimal as REAL); CHECK constraints back the ledger's promises.
The schema is migrated forward with ``PRAGMA user_version``.

Which rows ``due`` and ``spent`` select is not decided here: the SQL is generated from the status sets
of ``paymentcore._domain.queries`` (the queries below and the spend-bucket triggers of migration 2), the same
definitions MemoryStore filters with.
"""

from __future__ import annotations

import builtins
import enum
import json
import operator
import os
import sqlite3
import threading
import time
import types
import typing
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import attrs
import sqlite_utils

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
from paymentcore.ports import CurrencyTotal, StoreReadOnlyError, StoreUnavailableError, Tally

__all__ = [
    "MIGRATIONS",
    "SqliteStore",
    "SqliteTransaction",
    "T",
    "check_writes",
    "ping_file",
    "sql_in",
    "sql_not_in",
]

T = TypeVar("T")


# --- SQL generated from the definitions in paymentcore._domain.queries ----------------------------------


def _literals(values: Iterable[enum.Enum]) -> list[str]:
    """SQL string literals of enum members, in the enum's own order (a frozenset has none)."""
    members = list(values)
    for member in members:
        if "'" in str(member.value):
            raise ValueError(f"a status value with a quote: {member.value!r}")
    members.sort(key=lambda member: list(type(member)).index(member))
    return [f"'{member.value}'" for member in members]


def sql_in(column: str, values: Iterable[enum.Enum]) -> str:
    """``column = 'A'`` for one value, ``column IN ('A', 'B')`` for several."""
    literals = _literals(values)
    if len(literals) == 1:
        return f"{column} = {literals[0]}"
    return f"{column} IN ({', '.join(literals)})"


def sql_not_in(column: str, values: Iterable[enum.Enum]) -> str:
    """``column != 'A'`` for one value, ``column NOT IN ('A', 'B')`` for several."""
    literals = _literals(values)
    if len(literals) == 1:
        return f"{column} != {literals[0]}"
    return f"{column} NOT IN ({', '.join(literals)})"


# A payout counts as spent when its status is not one of UNSPENT_STATUSES (the complement of
# SPENT_STATUSES, which keeps migration 2 byte for byte as first written: "status != 'REJECTED'").
# The triggers add a payout when it is inserted counting, and take it back when an update moves it from
# counting to not counting; no allowed transition goes the other way (tests/integration/
# test_store_contract.py checks that against PAYOUT_TRANSITIONS). Existing files keep the triggers they
# were migrated with: a change to SPENT_STATUSES needs a new migration that recreates them and rebuilds
# payout_spend (the contract tests pin the text of every migration, so they say so).
_COUNTS = sql_not_in("status", UNSPENT_STATUSES)
_NEW_COUNTS = sql_not_in("new.status", UNSPENT_STATUSES)
_OLD_COUNTS = sql_not_in("old.status", UNSPENT_STATUSES)
_NEW_STOPS_COUNTING = sql_in("new.status", UNSPENT_STATUSES)
_SPEND_BUCKETS = f"""
    CREATE TABLE payout_spend (
        merchant_id TEXT NOT NULL,
        currency TEXT NOT NULL,
        hour INTEGER NOT NULL,
        amount INTEGER NOT NULL CHECK (amount >= 0),
        PRIMARY KEY (merchant_id, currency, hour)
    );
    INSERT INTO payout_spend (merchant_id, currency, hour, amount)
        SELECT merchant_id, currency, created_at / 3600000, sum(amount) FROM payouts
        WHERE {_COUNTS} GROUP BY merchant_id, currency, created_at / 3600000;
    CREATE TRIGGER payout_spend_insert AFTER INSERT ON payouts WHEN {_NEW_COUNTS}
    BEGIN
        INSERT INTO payout_spend (merchant_id, currency, hour, amount)
            VALUES (new.merchant_id, new.currency, new.created_at / 3600000, new.amount)
            ON CONFLICT (merchant_id, currency, hour) DO UPDATE SET amount = amount + excluded.amount;
    END;
    CREATE TRIGGER payout_spend_rejected AFTER UPDATE OF status ON payouts
        WHEN {_OLD_COUNTS} AND {_NEW_STOPS_COUNTING}
    BEGIN
        UPDATE payout_spend SET amount = amount - old.amount
            WHERE merchant_id = old.merchant_id AND currency = old.currency
            AND hour = old.created_at / 3600000;
    END;
    """


# migration 7: (hour, currency, status) -> how many records created in that UTC hour are in that status
# now, and their amounts summed. A record's creation hour, currency and amount never change once it is
# written, its status only by an UPDATE, and records are never deleted: so the triggers keep it exact.
def _hourly_counts(table: str, currency: str, amount: str) -> str:
    hours = f"{table[:-1]}_hours"
    return f"""
    CREATE TABLE {hours} (
        hour INTEGER NOT NULL,
        currency TEXT NOT NULL,
        status TEXT NOT NULL,
        count INTEGER NOT NULL CHECK (count >= 0),
        amount INTEGER NOT NULL CHECK (amount >= 0),
        PRIMARY KEY (hour, currency, status)
    );
    INSERT INTO {hours} (hour, currency, status, count, amount)
        SELECT created_at / 3600000, {currency}, status, count(*), sum({amount}) FROM {table}
        GROUP BY created_at / 3600000, {currency}, status;
    CREATE TRIGGER {hours}_insert AFTER INSERT ON {table}
    BEGIN
        INSERT INTO {hours} (hour, currency, status, count, amount)
            VALUES (new.created_at / 3600000, new.{currency}, new.status, 1, new.{amount})
            ON CONFLICT (hour, currency, status)
            DO UPDATE SET count = count + 1, amount = amount + excluded.amount;
    END;
    CREATE TRIGGER {hours}_status AFTER UPDATE OF status ON {table} WHEN old.status != new.status
    BEGIN
        UPDATE {hours} SET count = count - 1, amount = amount - old.{amount}
            WHERE hour = old.created_at / 3600000 AND currency = old.{currency} AND status = old.status;
        INSERT INTO {hours} (hour, currency, status, count, amount)
            VALUES (new.created_at / 3600000, new.{currency}, new.status, 1, new.{amount})
            ON CONFLICT (hour, currency, status)
            DO UPDATE SET count = count + 1, amount = amount + excluded.amount;
    END;
    CREATE INDEX {table}_created ON {table} (created_at, {currency}, status, {amount});
    """


_HOURLY_COUNTS = (
    _hourly_counts("payouts", "currency", "amount")
    + _hourly_counts("collections", "requested_currency", "requested_amount")
    + f"""
    CREATE INDEX payouts_held ON payouts (currency, amount) WHERE awaiting_review = 1;
    CREATE INDEX payouts_failed_unresolved ON payouts (currency, amount)
        WHERE {sql_in("status", [PayoutStatus.FAILED])} AND resolution IS NULL;
    """
)
HOUR_MS = 3_600_000


def hours_plan(since: int, until: int, width: int) -> tuple[int, int] | None:
    """Which whole UTC hours of ``[since, until)`` a tally may take from the hourly counts: ``(first,
    end)``, hour numbers (ms / 3,600,000), when every such hour falls in one span of ``width`` from
    ``since`` (``since`` and ``width`` whole hours, or one span for everything); None otherwise, or when
    there is no whole hour: then every record is counted from the rows."""
    first = -(-since // HOUR_MS)
    end = until // HOUR_MS
    aligned = since % HOUR_MS == 0 and width % HOUR_MS == 0
    if end <= first or not (aligned or until - since <= width):
        return None
    return first, end


def merge_tallies(rows: Iterable[tuple[Any, ...]]) -> list[Tally]:
    """(bucket, currency, status, count, amount) rows, those of one key added up, in key order, none
    with a count of 0."""
    sums: dict[tuple[int, str, str], list[int]] = {}
    for bucket, currency, status, count, amount in rows:
        if int(count):
            total = sums.setdefault((int(bucket), str(currency), str(status)), [0, 0])
            total[0] += int(count)
            total[1] += int(amount)
    return [Tally(b, c, s, n, a) for (b, c, s), (n, a) in sorted(sums.items())]


_SPENT = sql_in("status", SPENT_STATUSES)
_DUE_PAYOUT = (
    f"(({sql_in('status', PAYOUT_SEND_STATUSES)} AND awaiting_review = 0)"
    f" OR {sql_in('status', PAYOUT_CHECK_STATUSES)})"
)
_CHECK_COLLECTION = sql_in("status", COLLECTION_CHECK_STATUSES)
_EXPIRE_COLLECTION = sql_in("status", COLLECTION_EXPIRY_STATUSES)
_DUE_EVENT = sql_in("status", EVENT_DUE_STATUSES)
_BATCH_OPEN = sql_in("status", BATCH_OPEN_STATUSES)


MIGRATIONS: tuple[str, ...] = (
    # 1: the first schema
    """
    CREATE TABLE settings (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        api_enabled INTEGER NOT NULL,
        payouts_enabled INTEGER NOT NULL,
        closed_currencies TEXT NOT NULL
    );
    CREATE TABLE merchants (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        settlement_currency TEXT NOT NULL,
        status TEXT NOT NULL,
        collect_fee_ppm INTEGER NOT NULL CHECK (collect_fee_ppm BETWEEN 0 AND 1000000),
        payouts_enabled INTEGER NOT NULL,
        blocked_providers TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        merchant_id TEXT NOT NULL,
        key_hash TEXT NOT NULL UNIQUE,
        scopes TEXT NOT NULL,
        per_minute INTEGER NOT NULL,
        per_hour INTEGER NOT NULL,
        revoked INTEGER NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE payout_limits (
        merchant_id TEXT NOT NULL,
        currency TEXT NOT NULL,
        per_transaction INTEGER,
        per_day INTEGER,
        per_week INTEGER,
        review_threshold INTEGER,
        PRIMARY KEY (merchant_id, currency)
    );
    CREATE TABLE collections (
        reference TEXT PRIMARY KEY,
        merchant_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        requested_amount INTEGER NOT NULL CHECK (requested_amount > 0),
        requested_currency TEXT NOT NULL,
        description TEXT NOT NULL,
        merchant_reference TEXT,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        method TEXT,
        provider TEXT,
        phone TEXT,
        country TEXT,
        submitted_at INTEGER,
        next_check_at INTEGER,
        charged_amount INTEGER,
        charged_currency TEXT,
        settled_amount INTEGER,
        settled_currency TEXT,
        fee_amount INTEGER,
        failure_category TEXT,
        failure_reason TEXT,
        CHECK (settled_amount IS NULL OR settled_amount + fee_amount = charged_amount)
    );
    CREATE INDEX collections_open ON collections (status, next_check_at);
    CREATE INDEX collections_expiry ON collections (status, expires_at);
    CREATE INDEX collections_prompts ON collections (phone, submitted_at);
    CREATE TABLE payouts (
        reference TEXT PRIMARY KEY,
        merchant_id TEXT NOT NULL,
        status TEXT NOT NULL,
        amount INTEGER NOT NULL CHECK (amount > 0),
        currency TEXT NOT NULL,
        phone TEXT NOT NULL,
        country TEXT NOT NULL,
        provider TEXT NOT NULL,
        recipient_name TEXT,
        merchant_reference TEXT,
        awaiting_review INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        provider_reference TEXT,
        status_reason TEXT,
        sent_at INTEGER,
        next_check_at INTEGER,
        resolution TEXT
    );
    CREATE INDEX payouts_window ON payouts (merchant_id, currency, created_at);
    CREATE INDEX payouts_due ON payouts (next_check_at) WHERE next_check_at IS NOT NULL;
    CREATE TABLE balances (
        merchant_id TEXT NOT NULL,
        currency TEXT NOT NULL,
        available INTEGER NOT NULL CHECK (available >= 0),
        reserved INTEGER NOT NULL CHECK (reserved >= 0),
        paid_out INTEGER NOT NULL CHECK (paid_out >= 0),
        credited INTEGER NOT NULL,
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
        created_at INTEGER NOT NULL
    );
    CREATE INDEX ledger_by_account ON ledger_entries (merchant_id, currency, created_at);
    CREATE TRIGGER ledger_append_only_update BEFORE UPDATE ON ledger_entries
        BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
    CREATE TRIGGER ledger_append_only_delete BEFORE DELETE ON ledger_entries
        BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
    CREATE TABLE webhooks (
        merchant_id TEXT PRIMARY KEY,
        url TEXT NOT NULL,
        secret_encrypted TEXT NOT NULL,
        events TEXT NOT NULL,
        is_active INTEGER NOT NULL,
        disabled_reason TEXT,
        updated_at INTEGER NOT NULL,
        consecutive_failures INTEGER NOT NULL,
        ever_succeeded INTEGER NOT NULL
    );
    CREATE TABLE events (
        id TEXT PRIMARY KEY,
        merchant_id TEXT NOT NULL,
        type TEXT NOT NULL,
        data TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        next_attempt_at INTEGER NOT NULL,
        last_error TEXT,
        delivered_at INTEGER
    );
    CREATE INDEX events_due ON events (status, next_attempt_at);
    CREATE INDEX events_by_merchant ON events (merchant_id, created_at);
    CREATE TABLE idempotency (
        merchant_id TEXT NOT NULL,
        key TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        status_code INTEGER,
        body TEXT,
        PRIMARY KEY (merchant_id, key)
    );
    CREATE INDEX idempotency_age ON idempotency (created_at);
    """,
    # 2: hourly sums of the payouts that count against the rolling limits, kept by triggers, so the
    # 24-hour and 7-day windows cost at most 168 bucket rows plus one partial hour of payouts
    _SPEND_BUCKETS,
    # 3: the leases workers hold on background work (taken with a claim, dropped with the outcome), so
    # any process can count the work in flight in every process (the metrics' in-flight gauges)
    """
    CREATE TABLE work_leases (
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        until INTEGER NOT NULL,
        PRIMARY KEY (kind, key)
    );
    CREATE INDEX work_leases_until ON work_leases (kind, until);
    """,
    # 4: the per-key rate-limit counters, in the store so every API process on it shares them (and a
    # restart keeps them): requests per key in buckets of `width` ms starting at `start`
    """
    CREATE TABLE rate_counts (
        key_id TEXT NOT NULL,
        width INTEGER NOT NULL,
        start INTEGER NOT NULL,
        hits INTEGER NOT NULL CHECK (hits > 0),
        PRIMARY KEY (key_id, width, start)
    );
    CREATE INDEX rate_counts_start ON rate_counts (start);
    """,
    # 5: the merchant records API: every delivery attempt of an event, manual redeliveries queued on
    # the event, and the indexes that list a merchant's payouts and collections newest first
    """
    ALTER TABLE events ADD COLUMN redeliveries INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE events ADD COLUMN sent_as TEXT;
    ALTER TABLE events ADD COLUMN resend_at INTEGER;
    CREATE INDEX events_resend ON events (resend_at) WHERE resend_at IS NOT NULL;
    CREATE TABLE deliveries (
        id TEXT PRIMARY KEY,
        event_id TEXT NOT NULL,
        at INTEGER NOT NULL,
        name TEXT NOT NULL,
        response_status INTEGER,
        error TEXT,
        duration_ms INTEGER NOT NULL CHECK (duration_ms >= 0),
        resent INTEGER NOT NULL
    );
    CREATE INDEX deliveries_by_event ON deliveries (event_id, at);
    CREATE INDEX payouts_by_merchant ON payouts (merchant_id, created_at);
    CREATE INDEX collections_by_merchant ON collections (merchant_id, created_at);
    """,
    # 6: the operator's console (issue 18): operators who sign in, their sessions (shared by every
    # server process), and the audit trail of operator actions, append-only like the ledger; the
    # indexes of the work queues (payouts by status, oldest first) and of a merchant's keys
    """
    CREATE TABLE operators (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        token_hash TEXT NOT NULL UNIQUE,
        revoked INTEGER NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE console_sessions (
        id TEXT PRIMARY KEY,
        operator_id TEXT NOT NULL,
        token_hash TEXT NOT NULL UNIQUE,
        created_at INTEGER NOT NULL,
        last_seen_at INTEGER NOT NULL
    );
    CREATE INDEX console_sessions_by_operator ON console_sessions (operator_id);
    CREATE TABLE audit_log (
        id TEXT PRIMARY KEY,
        at INTEGER NOT NULL,
        actor TEXT NOT NULL,
        action TEXT NOT NULL,
        subject TEXT NOT NULL,
        state_before TEXT,
        state_after TEXT
    );
    CREATE INDEX audit_by_time ON audit_log (at);
    CREATE INDEX audit_by_subject ON audit_log (subject, at);
    CREATE TRIGGER audit_append_only_update BEFORE UPDATE ON audit_log
        BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
    CREATE TRIGGER audit_append_only_delete BEFORE DELETE ON audit_log
        BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
    CREATE INDEX payouts_queue ON payouts (status, created_at);
    CREATE INDEX api_keys_by_merchant ON api_keys (merchant_id, created_at);
    """,
    # 7: the console's overview (issue 30): payouts and collections counted per UTC hour of creation,
    # currency and status, kept by triggers (the 24-hour charts read at most a few hundred rows
    # whatever the volume; only the current hour and the last 60 minutes are counted from the records,
    # through an index holding every column they read), and the payouts waiting for an operator (held
    # for review, failed and unresolved) in partial indexes of those few rows
    _HOURLY_COUNTS,
    # 8: append-only whatever the SQL (issue 24): INSERT OR REPLACE (or REPLACE INTO) on an existing
    # id, or on an existing rowid, deletes the old row without firing the DELETE triggers (SQLite fires
    # them for a REPLACE only with recursive_triggers on), so an insert that meets an entry is refused
    # before it happens; UPDATE and DELETE stay refused by the triggers of migrations 1 and 6
    """
    CREATE TRIGGER ledger_append_only_insert BEFORE INSERT ON ledger_entries
        WHEN EXISTS (SELECT 1 FROM ledger_entries WHERE id = new.id OR rowid = new.rowid)
        BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
    CREATE TRIGGER audit_append_only_insert BEFORE INSERT ON audit_log
        WHEN EXISTS (SELECT 1 FROM audit_log WHERE id = new.id OR rowid = new.rowid)
        BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
    """,
    # 9: bulk payouts (issue 28): the batches (a refused item's error is kept in `refusals`, JSON), and
    # each payout of a batch carries its id and its item's place; the indexes read a batch's payouts in
    # request order and count those still open (both only over payouts of a batch)
    """
    CREATE TABLE payout_batches (
        id TEXT PRIMARY KEY,
        merchant_id TEXT NOT NULL,
        mode TEXT NOT NULL,
        item_count INTEGER NOT NULL CHECK (item_count > 0),
        created_at INTEGER NOT NULL,
        refusals TEXT NOT NULL,
        completed_at INTEGER
    );
    CREATE INDEX payout_batches_by_merchant ON payout_batches (merchant_id, created_at);
    ALTER TABLE payouts ADD COLUMN batch_id TEXT;
    ALTER TABLE payouts ADD COLUMN batch_index INTEGER;
    CREATE UNIQUE INDEX payouts_by_batch ON payouts (batch_id, batch_index) WHERE batch_id IS NOT NULL;
    CREATE INDEX payouts_batch_status ON payouts (batch_id, status) WHERE batch_id IS NOT NULL;
    """,
)


# --- rows <-> records ---------------------------------------------------------------------------


def _encode(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, frozenset):
        return json.dumps(sorted(v.value if isinstance(v, enum.Enum) else v for v in value))
    if isinstance(value, tuple):
        return json.dumps([[leg.account, leg.amount] for leg in value])
    if isinstance(value, dict):
        return wire.dumps(value)
    return value


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


def _load_data(text: str) -> Any:
    """Event data: every number comes back as a Decimal, as it went in."""
    return json.loads(text, parse_float=Decimal, parse_int=Decimal)


_STORED_AS_IS = (str, int, str | None, int | None)  # column types that need no _encode


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
    # every column's value in one call, and the places of the columns that _encode must convert (an
    # insert of many rows spends its time here otherwise)
    getter: Any = None
    encoded: tuple[int, ...] = ()
    update_order: tuple[int, ...] = ()

    @classmethod
    def of(cls, record: type[Any], table: str, keys: tuple[str, ...]) -> _Codec:
        hints = typing.get_type_hints(record)
        columns = tuple(f.name for f in attrs.fields(record))
        decoders = tuple(_decoder(hints[c]) for c in columns)
        names = ", ".join(columns)
        marks = ", ".join("?" for _ in columns)
        others = [c for c in columns if c not in keys]
        where = " AND ".join(f"{k} = ?" for k in keys)
        return cls(
            cls=record,
            table=table,
            keys=keys,
            columns=columns,
            decoders=decoders,
            getter=operator.attrgetter(*columns),
            encoded=tuple(i for i, c in enumerate(columns) if hints[c] not in _STORED_AS_IS),
            update_order=tuple(
                [i for i, c in enumerate(columns) if c not in keys] + [columns.index(k) for k in keys]
            ),
            insert_sql=f"INSERT INTO {table} ({names}) VALUES ({marks})",
            upsert_sql=(
                f"INSERT INTO {table} ({names}) VALUES ({marks}) "
                f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET "
                + ", ".join(f"{c} = excluded.{c}" for c in others)
            ),
            update_sql=f"UPDATE {table} SET {', '.join(f'{c} = ?' for c in others)} WHERE {where}",
            select_sql=f"SELECT {names} FROM {table}",
        )

    def values(self, record: Any) -> list[Any]:
        row = list(self.getter(record))
        for place in self.encoded:
            row[place] = _encode(row[place])
        return row

    def update_values(self, record: Any) -> list[Any]:
        row = self.values(record)
        return [row[place] for place in self.update_order]

    def decode(self, row: tuple[Any, ...]) -> Any:
        return self.cls(*(d(v) for d, v in zip(self.decoders, row, strict=True)))


_SETTINGS = _Codec.of(Settings, "settings", ())
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


class _Rows:
    """Row access on one connection, through the codecs: what every SQLite repository uses."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def one(self, codec: _Codec, where: str, params: tuple[Any, ...]) -> Any:
        row = self.conn.execute(f"{codec.select_sql} WHERE {where}", params).fetchone()
        return None if row is None else codec.decode(row)

    def many(self, codec: _Codec, rest: str, params: tuple[Any, ...]) -> list[Any]:
        return [codec.decode(r) for r in self.conn.execute(f"{codec.select_sql} {rest}", params)]

    def upsert(self, codec: _Codec, record: Any) -> None:
        self.conn.execute(codec.upsert_sql, codec.values(record))

    def insert(self, codec: _Codec, record: Any) -> None:
        self.conn.execute(codec.insert_sql, codec.values(record))

    def insert_many(self, codec: _Codec, records: Iterable[Any]) -> None:
        self.conn.executemany(codec.insert_sql, [codec.values(record) for record in records])

    def update(self, codec: _Codec, record: Any) -> None:
        cursor = self.conn.execute(codec.update_sql, codec.update_values(record))
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
        written first (``rowid``: these tables are appended to, and an update keeps a row's rowid),
        after the row whose ``key`` is ``after``, that meet every ``(condition, parameters)``."""
        where = [f"{column} = ?" for column in scope]
        params: list[Any] = list(scope.values())
        if after is not None:
            place = self.conn.execute(
                f"SELECT created_at, rowid FROM {codec.table} WHERE {key} = ? AND {' AND '.join(where)}",
                (after, *params),
            ).fetchone()
            if place is None:
                return None
            where.append("(created_at, rowid) < (?, ?)")
            params.extend(place)
        for condition, values in filters:
            where.append(condition)
            params.extend(values)
        rest = f"WHERE {' AND '.join(where)} ORDER BY created_at DESC, rowid DESC LIMIT ?"
        return self.many(codec, rest, (*params, limit))


def _in_turns(table: str, key: str, lane: str, due: str, order: str) -> str:
    """The rest of a SELECT over ``table`` listing the rows meeting ``due`` in turns over ``lane``
    (``_queries.in_turns``): each row ranked within its lane in ``order``, at most ``?`` (per lane) of a
    lane, every lane's first row before any lane's second; then ``LIMIT ?``. ``key`` names a row."""
    return (
        f"JOIN (SELECT {key} AS turn_key, row_number() OVER (PARTITION BY {lane} ORDER BY {order})"
        f" AS turn FROM {table} WHERE {due}) AS turns ON turns.turn_key = {table}.{key}"
        f" WHERE turn <= ? ORDER BY turn, {order} LIMIT ?"
    )


class _Repository:
    def __init__(self, rows: _Rows) -> None:
        self._rows = rows


# --- settings, merchants, keys, limits -----------------------------------------------------------


class _Settings(_Repository):
    def get(self) -> Settings:
        row = self._rows.conn.execute(
            "SELECT api_enabled, payouts_enabled, closed_currencies FROM settings WHERE id = 1"
        ).fetchone()
        if row is None:
            return Settings()
        return Settings(bool(row[0]), bool(row[1]), frozenset(json.loads(row[2])))

    def put(self, settings: Settings) -> None:
        self._rows.conn.execute(
            "INSERT INTO settings (id, api_enabled, payouts_enabled, closed_currencies) VALUES (1, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET api_enabled = excluded.api_enabled, "
            "payouts_enabled = excluded.payouts_enabled, closed_currencies = excluded.closed_currencies",
            (
                int(settings.api_enabled),
                int(settings.payouts_enabled),
                _encode(settings.closed_currencies),
            ),
        )


class _Merchants(_Repository):
    def get(self, merchant_id: str) -> Merchant | None:
        merchant: Merchant | None = self._rows.one(_MERCHANTS, "id = ?", (merchant_id,))
        return merchant

    def put(self, merchant: Merchant) -> None:
        self._rows.upsert(_MERCHANTS, merchant)

    def list(self) -> builtins.list[Merchant]:
        return self._rows.many(_MERCHANTS, "ORDER BY created_at, rowid", ())


class _Keys(_Repository):
    def get(self, key_id: str) -> ApiKey | None:
        key: ApiKey | None = self._rows.one(_KEYS, "id = ?", (key_id,))
        return key

    def by_hash(self, key_hash: str) -> ApiKey | None:
        key: ApiKey | None = self._rows.one(_KEYS, "key_hash = ?", (key_hash,))
        return key

    def put(self, key: ApiKey) -> None:
        self._rows.upsert(_KEYS, key)

    def list(self, merchant_id: str) -> builtins.list[ApiKey]:
        return self._rows.many(_KEYS, "WHERE merchant_id = ? ORDER BY created_at, rowid", (merchant_id,))


class _Limits(_Repository):
    def get(self, merchant_id: str, currency: str) -> PayoutLimits | None:
        limits: PayoutLimits | None = self._rows.one(
            _LIMITS, "merchant_id = ? AND currency = ?", (merchant_id, currency)
        )
        return limits

    def put(self, limits: PayoutLimits) -> None:
        self._rows.upsert(_LIMITS, limits)


# --- collections and payouts ---------------------------------------------------------------------


class _Collections(_Repository):
    def get(self, reference: str) -> Collection | None:
        collection: Collection | None = self._rows.one(_COLLECTIONS, "reference = ?", (reference,))
        return collection

    def add(self, collection: Collection) -> None:
        self._rows.insert(_COLLECTIONS, collection)

    def update(self, collection: Collection) -> None:
        self._rows.update(_COLLECTIONS, collection)

    def due(self, now: int, limit: int, *, per_lane: int | None = None) -> list[Collection]:
        # _queries.collection_is_due, one indexed branch each, in _queries.collection_due_order
        due = (
            "reference IN ("
            f" SELECT reference FROM collections WHERE {_CHECK_COLLECTION}"
            "  AND next_check_at <= ?"
            f" UNION SELECT reference FROM collections WHERE {_EXPIRE_COLLECTION}"
            "  AND submitted_at IS NULL AND expires_at <= ?)"
        )
        order = "min(expires_at, coalesce(next_check_at, expires_at)), reference"
        if per_lane is not None:  # _queries.in_turns over _queries.collection_lane
            return self._rows.many(
                _COLLECTIONS,
                _in_turns("collections", "reference", "coalesce(provider, '')", due, order),
                (now, now, per_lane, limit),
            )
        return self._rows.many(_COLLECTIONS, f"WHERE {due} ORDER BY {order} LIMIT ?", (now, now, limit))

    def count_due(self, now: int) -> int:
        row = self._rows.conn.execute(
            "SELECT count(*) FROM ("
            f" SELECT reference FROM collections WHERE {_CHECK_COLLECTION} AND next_check_at <= ?"
            f" UNION SELECT reference FROM collections WHERE {_EXPIRE_COLLECTION}"
            "  AND submitted_at IS NULL AND expires_at <= ?)",
            (now, now),
        ).fetchone()
        return int(row[0])

    def prompts_since(self, phone: str, since: int) -> int:
        row = self._rows.conn.execute(
            "SELECT count(*) FROM collections WHERE phone = ? AND submitted_at >= ?", (phone, since)
        ).fetchone()
        return int(row[0])

    def oldest_due(self, now: int) -> int | None:
        # _queries.collection_due_since: the earliest of each branch of collection_is_due
        row = self._rows.conn.execute(
            "SELECT min(since) FROM ("
            f" SELECT min(next_check_at) AS since FROM collections WHERE {_CHECK_COLLECTION}"
            "  AND next_check_at <= ?1"
            f" UNION ALL SELECT min(expires_at) FROM collections WHERE {_EXPIRE_COLLECTION}"
            "  AND submitted_at IS NULL AND expires_at <= ?1)",
            (now,),
        ).fetchone()
        return None if row[0] is None else int(row[0])

    def tally(self, since: int, until: int, width: int) -> list[Tally]:
        return _tally(
            self._rows.conn, "collections", "requested_currency", "requested_amount", since, until, width
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
        payout: Payout | None = self._rows.one(_PAYOUTS, "reference = ?", (reference,))
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
        rows = self._rows.conn.execute(
            f"SELECT {names} FROM (SELECT reference, next_check_at, row_number() OVER"
            " (PARTITION BY merchant_id ORDER BY next_check_at, reference) AS turn FROM payouts"
            f" WHERE next_check_at IS NOT NULL AND next_check_at <= ? AND {_DUE_PAYOUT}"
            " ORDER BY turn, next_check_at, reference LIMIT ?) AS due"
            " JOIN payouts AS p ON p.reference = due.reference"
            " ORDER BY due.turn, due.next_check_at, due.reference",
            (now, limit),
        )
        return [_PAYOUTS.decode(row) for row in rows]

    def count_due(self, now: int) -> int:
        row = self._rows.conn.execute(
            "SELECT count(*) FROM payouts"
            f" WHERE next_check_at IS NOT NULL AND next_check_at <= ? AND {_DUE_PAYOUT}",
            (now,),
        ).fetchone()
        return int(row[0])

    def oldest_due(self, now: int) -> int | None:
        row = self._rows.conn.execute(
            "SELECT min(next_check_at) FROM payouts"
            f" WHERE next_check_at IS NOT NULL AND next_check_at <= ? AND {_DUE_PAYOUT}",
            (now,),
        ).fetchone()
        return None if row[0] is None else int(row[0])

    def tally(self, since: int, until: int, width: int) -> builtins.list[Tally]:
        return _tally(self._rows.conn, "payouts", "currency", "amount", since, until, width)

    def totals(
        self,
        *,
        status: PayoutStatus | None = None,
        awaiting_review: bool | None = None,
        unresolved: bool | None = None,
    ) -> builtins.list[CurrencyTotal]:
        # literals, not parameters: the planner then sees which index entries can match
        where = ["1"]
        if status is not None:
            where.append(sql_in("status", [status]))
        if awaiting_review is not None:
            where.append(f"awaiting_review = {int(awaiting_review)}")
        if unresolved is not None:
            where.append("resolution IS NULL" if unresolved else "resolution IS NOT NULL")
        # without statistics SQLite would rather walk payouts_queue (status, ...): name the partial
        # index of migration 7 that holds exactly the rows asked for
        index = ""
        if awaiting_review is True:
            index = " INDEXED BY payouts_held"
        elif status is PayoutStatus.FAILED and unresolved is True:
            index = " INDEXED BY payouts_failed_unresolved"
        rows = self._rows.conn.execute(
            f"SELECT currency, count(*), sum(amount) FROM payouts{index} WHERE {' AND '.join(where)}"
            " GROUP BY currency ORDER BY currency"
        )
        return [CurrencyTotal(str(c), int(n), int(a)) for c, n, a in rows]

    def spent(self, merchant_id: str, currency: str, since: int) -> int:
        # whole hours after the one holding `since` come from the trigger-kept buckets; that first,
        # partial hour is summed exactly from the payouts themselves
        next_hour = (since // 3_600_000 + 1) * 3_600_000
        row = self._rows.conn.execute(
            "SELECT (SELECT coalesce(sum(amount), 0) FROM payout_spend"
            "        WHERE merchant_id = ?1 AND currency = ?2 AND hour >= ?4 / 3600000)"
            " + (SELECT coalesce(sum(amount), 0) FROM payouts"
            "        WHERE merchant_id = ?1 AND currency = ?2 AND created_at >= ?3 AND created_at < ?4"
            f"        AND {_SPENT})",
            (merchant_id, currency, since, next_hour),
        ).fetchone()
        return int(row[0])

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
            filters.append(("batch_id = ?", (batch_id,)))
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
            "WHERE batch_id = ? AND batch_index > ? ORDER BY batch_index LIMIT ?",
            (batch_id, -1 if after is None else after, limit),
        )

    def batch_tally(self, batch_id: str) -> builtins.list[BatchTally]:
        rows = self._rows.conn.execute(
            "SELECT status, currency, count(*), sum(amount) FROM payouts WHERE batch_id = ?"
            " GROUP BY status, currency",
            (batch_id,),
        )
        return [
            BatchTally(PayoutStatus(status), currency, int(count), int(total))
            for status, currency, count, total in rows
        ]

    def batch_open(self, batch_id: str) -> int:
        row = self._rows.conn.execute(
            f"SELECT count(*) FROM payouts WHERE batch_id = ? AND {_BATCH_OPEN}", (batch_id,)
        ).fetchone()
        return int(row[0])


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
            "awaiting_review": None if awaiting_review is None else int(awaiting_review),
            "currency": currency,
        }
        return _queue(
            self._rows, _PAYOUTS, "reference", after=after, equal=equal, conditions=conditions, limit=limit
        )


def _tally(
    conn: sqlite3.Connection, table: str, currency: str, amount: str, since: int, until: int, width: int
) -> list[Tally]:
    """``ports``' tally: whole hours from the hourly counts of migration 7 (``hours_plan``), the rest
    (at most the two partial hours at the ends) from the rows, through their creation-time index."""
    plan = hours_plan(since, until, width)
    rows_sql = (
        f"SELECT (created_at - :since) / :width, {currency}, status, count(*), sum({amount}) FROM {table}"
        " WHERE created_at >= :low AND created_at < :high GROUP BY 1, 2, 3"
    )
    if plan is None:
        return merge_tallies(
            conn.execute(rows_sql, {"since": since, "width": width, "low": since, "high": until})
        )
    first, end = plan
    found = list(
        conn.execute(
            "SELECT (hour * 3600000 - :since) / :width, currency, status, sum(count), sum(amount)"
            f" FROM {table[:-1]}_hours WHERE hour >= :first AND hour < :end GROUP BY 1, 2, 3",
            {"since": since, "width": width, "first": first, "end": end},
        )
    )
    for low, high in ((since, first * HOUR_MS), (end * HOUR_MS, until)):
        if low < high:
            found += conn.execute(rows_sql, {"since": since, "width": width, "low": low, "high": high})
    return merge_tallies(found)


def _created(created_from: int | None, created_before: int | None) -> list[tuple[str, tuple[Any, ...]]]:
    conditions: list[tuple[str, tuple[Any, ...]]] = []
    if created_from is not None:
        conditions.append(("created_at >= ?", (created_from,)))
    if created_before is not None:
        conditions.append(("created_at < ?", (created_before,)))
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
    """An operator's list across merchants: oldest first (ties in the order written: ``rowid``), after
    the row whose ``key`` is ``after`` (None when there is none), the columns of ``equal`` that are not
    None equal to their values (an enum by its value), and every ``(condition, parameters)`` met."""
    where: list[str] = []
    params: list[Any] = []
    if after is not None:
        place = rows.conn.execute(
            f"SELECT created_at, rowid FROM {codec.table} WHERE {key} = ?", (after,)
        ).fetchone()
        if place is None:
            return None
        where.append("(created_at, rowid) > (?, ?)")
        params.extend(place)
    for column, value in equal.items():
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value.value if isinstance(value, enum.Enum) else value)
    for condition, values in conditions:
        where.append(condition)
        params.extend(values)
    condition = f"WHERE {' AND '.join(where)} " if where else ""
    return rows.many(codec, f"{condition}ORDER BY created_at, rowid LIMIT ?", (*params, limit))


class _Batches(_Repository):
    def add(self, batch: PayoutBatch) -> None:
        self._rows.insert(_BATCHES, batch)

    def get(self, batch_id: str) -> PayoutBatch | None:
        batch: PayoutBatch | None = self._rows.one(_BATCHES, "id = ?", (batch_id,))
        return batch

    def update(self, batch: PayoutBatch) -> None:
        self._rows.update(_BATCHES, batch)


def _record_filters(
    status: enum.Enum | None, merchant_reference: str | None
) -> list[tuple[str, tuple[Any, ...]]]:
    """The conditions of a payout or collection list's filters."""
    filters: list[tuple[str, tuple[Any, ...]]] = []
    if status is not None:
        filters.append(("status = ?", (status.value,)))
    if merchant_reference is not None:
        filters.append(("merchant_reference = ?", (merchant_reference,)))
    return filters


# --- the ledger ------------------------------------------------------------------------------------


class _Ledger(_Repository):
    def balance(self, merchant_id: str, currency: str) -> Balance:
        balance: Balance | None = self._rows.one(
            _BALANCES, "merchant_id = ? AND currency = ?", (merchant_id, currency)
        )
        return balance if balance is not None else Balance(merchant_id=merchant_id, currency=currency)

    def balances(self, merchant_id: str) -> list[Balance]:
        return self._rows.many(_BALANCES, "WHERE merchant_id = ? ORDER BY currency", (merchant_id,))

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
        # one conditional statement: the row changes only if no account goes below zero
        row = self._rows.conn.execute(
            "UPDATE balances SET available = available + ?1, reserved = reserved + ?2,"
            " paid_out = paid_out + ?3, credited = credited + ?4"
            " WHERE merchant_id = ?5 AND currency = ?6"
            " AND available + ?1 >= 0 AND reserved + ?2 >= 0 AND paid_out + ?3 >= 0"
            " RETURNING merchant_id, currency, available, reserved, paid_out, credited",
            (available, reserved, paid_out, credited, merchant_id, currency),
        ).fetchone()
        if row is not None:
            moved: Balance = _BALANCES.decode(row)
            return moved
        if min(available, reserved, paid_out) < 0:
            return None  # a missing balance is all zeros: nothing to take from
        row = self._rows.conn.execute(
            "INSERT INTO balances (merchant_id, currency, available, reserved, paid_out, credited)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (merchant_id, currency) DO NOTHING"
            " RETURNING merchant_id, currency, available, reserved, paid_out, credited",
            (merchant_id, currency, available, reserved, paid_out, credited),
        ).fetchone()
        created: Balance | None = None if row is None else _BALANCES.decode(row)
        return created

    def append(self, entry: LedgerEntry) -> None:
        self._rows.insert(_ENTRIES, entry)

    def append_many(self, entries: list[LedgerEntry]) -> None:
        self._rows.insert_many(_ENTRIES, entries)

    def entries(self, merchant_id: str, currency: str) -> list[LedgerEntry]:
        return self._rows.many(
            _ENTRIES,
            "WHERE merchant_id = ? AND currency = ? ORDER BY created_at, rowid",
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


# --- webhooks, the outbox, idempotency -------------------------------------------------------------


class _Webhooks(_Repository):
    def get(self, merchant_id: str) -> WebhookEndpoint | None:
        endpoint: WebhookEndpoint | None = self._rows.one(_WEBHOOKS, "merchant_id = ?", (merchant_id,))
        return endpoint

    def put(self, endpoint: WebhookEndpoint) -> None:
        self._rows.upsert(_WEBHOOKS, endpoint)

    # _queries.endpoint_is_troubled and endpoint_trouble_order
    _TROUBLED = "(is_active = 0 OR consecutive_failures > 0)"

    def count_troubled(self) -> tuple[int, int]:
        row = self._rows.conn.execute(
            "SELECT coalesce(sum(is_active), 0), coalesce(sum(1 - is_active), 0) FROM webhooks"
            f" WHERE {self._TROUBLED}"
        ).fetchone()
        return int(row[0]), int(row[1])

    def troubled(self, limit: int) -> list[WebhookEndpoint]:
        return self._rows.many(
            _WEBHOOKS,
            f"WHERE {self._TROUBLED} ORDER BY is_active, consecutive_failures DESC, merchant_id LIMIT ?",
            (limit,),
        )


class _Outbox(_Repository):
    def add(self, event: Event) -> None:
        self._rows.insert(_EVENTS, event)

    def get(self, event_id: str) -> Event | None:
        event: Event | None = self._rows.one(_EVENTS, "id = ?", (event_id,))
        return event

    def update(self, event: Event) -> None:
        self._rows.update(_EVENTS, event)

    def due(self, now: int, limit: int, *, per_lane: int | None = None) -> list[Event]:
        # _queries.event_is_due, oldest first
        due = f"{_DUE_EVENT} AND next_attempt_at <= ?"
        if per_lane is not None:  # _queries.in_turns over _queries.event_lane
            return self._rows.many(
                _EVENTS,
                _in_turns("events", "rowid", "merchant_id", due, "events.created_at, events.rowid"),
                (now, per_lane, limit),
            )
        return self._rows.many(_EVENTS, f"WHERE {due} ORDER BY created_at, rowid LIMIT ?", (now, limit))

    def defer(self, merchant_id: str, until: int) -> int:
        cursor = self._rows.conn.execute(
            f"UPDATE events SET next_attempt_at = ? WHERE merchant_id = ? AND {_DUE_EVENT}"
            " AND next_attempt_at < ?",
            (until, merchant_id, until),
        )
        return cursor.rowcount

    def count_due(self, now: int) -> int:
        row = self._rows.conn.execute(
            f"SELECT count(*) FROM events WHERE {_DUE_EVENT} AND next_attempt_at <= ?", (now,)
        ).fetchone()
        return int(row[0])

    def oldest_due(self, now: int) -> int | None:
        row = self._rows.conn.execute(
            f"SELECT min(next_attempt_at) FROM events WHERE {_DUE_EVENT} AND next_attempt_at <= ?", (now,)
        ).fetchone()
        return None if row[0] is None else int(row[0])

    def list(self, merchant_id: str) -> builtins.list[Event]:
        return self._rows.many(_EVENTS, "WHERE merchant_id = ? ORDER BY created_at, rowid", (merchant_id,))

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
            filters.append(("type = ?", (event_type,)))
        if statuses is not None:
            values = sorted(status.value for status in statuses)
            filters.append((f"status IN ({', '.join('?' for _ in values) or 'NULL'})", tuple(values)))
        return self._rows.page(
            _EVENTS, scope={"merchant_id": merchant_id}, key="id", after=after, filters=filters, limit=limit
        )

    def resends_due(self, now: int, limit: int) -> builtins.list[Event]:
        return self._rows.many(
            _EVENTS,
            "WHERE resend_at IS NOT NULL AND resend_at <= ? ORDER BY resend_at, rowid LIMIT ?",
            (now, limit),
        )


class _Deliveries(_Repository):
    def add(self, delivery: Delivery) -> None:
        self._rows.insert(_DELIVERIES, delivery)

    def list(self, event_id: str) -> builtins.list[Delivery]:
        return self._rows.many(_DELIVERIES, "WHERE event_id = ? ORDER BY at, rowid", (event_id,))


class _Idempotency(_Repository):
    def get(self, merchant_id: str, key: str) -> IdempotencyRecord | None:
        record: IdempotencyRecord | None = self._rows.one(
            _IDEMPOTENCY, "merchant_id = ? AND key = ?", (merchant_id, key)
        )
        return record

    def put(self, record: IdempotencyRecord) -> None:
        self._rows.upsert(_IDEMPOTENCY, record)

    def delete(self, merchant_id: str, key: str) -> None:
        self._rows.conn.execute(
            "DELETE FROM idempotency WHERE merchant_id = ? AND key = ?", (merchant_id, key)
        )

    def purge(self, before: int) -> int:
        return self._rows.conn.execute("DELETE FROM idempotency WHERE created_at < ?", (before,)).rowcount


class _Leases(_Repository):
    def take(self, kind: str, key: str, until: int) -> None:
        self._rows.conn.execute(
            "INSERT INTO work_leases (kind, key, until) VALUES (?, ?, ?)"
            " ON CONFLICT (kind, key) DO UPDATE SET until = excluded.until",
            (kind, key, until),
        )

    def drop(self, kind: str, key: str) -> None:
        self._rows.conn.execute("DELETE FROM work_leases WHERE kind = ? AND key = ?", (kind, key))

    def held(self, kind: str, now: int) -> int:
        row = self._rows.conn.execute(
            "SELECT count(*) FROM work_leases WHERE kind = ? AND until > ?", (kind, now)
        ).fetchone()
        return int(row[0])

    def purge(self, before: int) -> int:
        return self._rows.conn.execute("DELETE FROM work_leases WHERE until < ?", (before,)).rowcount


class _Rates(_Repository):
    def buckets(self, key_id: str, width: int, since: int) -> builtins.list[tuple[int, int]]:
        # BEGIN IMMEDIATE (or the group commit's shared transaction) already holds the write lock
        rows = self._rows.conn.execute(
            "SELECT start, hits FROM rate_counts WHERE key_id = ? AND width = ? AND start >= ?"
            " ORDER BY start",
            (key_id, width, since),
        ).fetchall()
        return [(int(start), int(hits)) for start, hits in rows]

    def add(self, key_id: str, width: int, start: int, hits: int = 1) -> None:
        self._rows.conn.execute(
            "INSERT INTO rate_counts (key_id, width, start, hits) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (key_id, width, start) DO UPDATE SET hits = hits + excluded.hits",
            (key_id, width, start, hits),
        )

    def purge(self, before: int) -> int:
        return self._rows.conn.execute("DELETE FROM rate_counts WHERE start < ?", (before,)).rowcount


# --- operators, console sessions, the audit trail ---------------------------------------------------


class _Operators(_Repository):
    def get(self, operator_id: str) -> StoredOperator | None:
        operator: StoredOperator | None = self._rows.one(_OPERATORS, "id = ?", (operator_id,))
        return operator

    def by_hash(self, token_hash: str) -> StoredOperator | None:
        operator: StoredOperator | None = self._rows.one(_OPERATORS, "token_hash = ?", (token_hash,))
        return operator

    def put(self, operator: StoredOperator) -> None:
        self._rows.upsert(_OPERATORS, operator)

    def list(self) -> builtins.list[StoredOperator]:
        return self._rows.many(_OPERATORS, "ORDER BY created_at, rowid", ())


class _Sessions(_Repository):
    def by_hash(self, token_hash: str) -> StoredSession | None:
        session: StoredSession | None = self._rows.one(_SESSIONS, "token_hash = ?", (token_hash,))
        return session

    def put(self, session: StoredSession) -> None:
        self._rows.upsert(_SESSIONS, session)

    def delete(self, session_id: str) -> None:
        self._rows.conn.execute("DELETE FROM console_sessions WHERE id = ?", (session_id,))

    def end_all(self, operator_id: str) -> int:
        return self._rows.conn.execute(
            "DELETE FROM console_sessions WHERE operator_id = ?", (operator_id,)
        ).rowcount

    def purge(self, *, seen_before: int, created_before: int) -> int:
        return self._rows.conn.execute(
            "DELETE FROM console_sessions WHERE last_seen_at < ? OR created_at < ?",
            (seen_before, created_before),
        ).rowcount


class _Audit(_Repository):
    """Append-only: triggers of migration 6 refuse UPDATE and DELETE of ``audit_log``."""

    def add(self, entry: StoredAuditEntry) -> None:
        self._rows.insert(_AUDIT, entry)

    def page(
        self, *, limit: int, after: str | None = None, subject: str | None = None
    ) -> builtins.list[StoredAuditEntry] | None:
        where: builtins.list[str] = []
        params: builtins.list[Any] = []
        if after is not None:
            place = self._rows.conn.execute(
                "SELECT at, rowid FROM audit_log WHERE id = ?", (after,)
            ).fetchone()
            if place is None:
                return None
            where.append("(at, rowid) < (?, ?)")
            params.extend(place)
        if subject is not None:
            where.append("subject = ?")
            params.append(subject)
        condition = f"WHERE {' AND '.join(where)} " if where else ""
        return self._rows.many(_AUDIT, f"{condition}ORDER BY at DESC, rowid DESC LIMIT ?", (*params, limit))


class SqliteTransaction:
    """One unit of work on one connection: the repositories of ``ports.UnitOfWork``."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        rows = _Rows(conn)
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
        self.rates = _Rates(rows)
        self.operators = _Operators(rows)
        self.sessions = _Sessions(rows)
        self.audit = _Audit(rows)


class SqliteStore:
    """The storage port on a SQLite file. ``synchronous`` is FULL (the default) or NORMAL."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "FULL",
        busy_timeout_ms: int = 60_000,
        group_commit: bool = True,
        max_batch: int = 64,
    ) -> None:
        if synchronous not in ("FULL", "NORMAL", "EXTRA"):
            raise ValueError("synchronous must be FULL, NORMAL or EXTRA")
        self.path = str(path)
        self._synchronous = synchronous
        self._busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self.migrate()
        self._group = _GroupCommit(self._connect, max_batch) if group_commit else None

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            isolation_level=None,
            check_same_thread=False,
            timeout=self._busy_timeout_ms / 1000,
        )
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        self._enable_wal(conn)
        conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    def _enable_wal(self, conn: sqlite3.Connection) -> None:
        """Switch to WAL, waiting (as the busy timeout would) while another connection holds the lock.

        Changing the journal mode ignores the busy handler, so a second process opening a fresh file
        while the first creates it retries here instead of failing with "database is locked".
        """
        deadline = time.monotonic() + self._busy_timeout_ms / 1000
        delay = 0.005
        while True:
            try:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
                continue
            if str(mode).lower() == "wal":
                return
            raise sqlite3.OperationalError(f"could not switch {self.path} to WAL (mode {mode})")

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    def migrate(self) -> None:
        """Bring the schema up to date (idempotent; safe with several processes starting at once).

        A file already up to date is still made to take a write (rolled back), so a read-only file is
        refused here, at start, rather than by the first request that writes (SQLite opens a file it
        may not write read-only, without a word, and in WAL mode even ``BEGIN IMMEDIATE`` succeeds).
        """
        db = sqlite_utils.Database(self._conn())
        db.execute("BEGIN IMMEDIATE")
        try:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if version >= len(MIGRATIONS):
                check_writes(db.conn)
                db.execute("ROLLBACK")
                return
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                for statement in _statements(script):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {number}")
            db.execute("COMMIT")
        except BaseException:
            if db.conn.in_transaction:
                db.execute("ROLLBACK")
            raise

    def schema_version(self) -> int:
        return int(self._conn().execute("PRAGMA user_version").fetchone()[0])

    @contextmanager
    def transaction(self) -> Iterator[SqliteTransaction]:
        """A write transaction, durable when the block exits without an exception.

        With group commit (the default) every write transaction of this process runs on one writer
        connection inside a SAVEPOINT of a shared SQLite transaction; the last writer of a burst (or
        the 64th) commits, and every writer returns only after that COMMIT. One fsync then makes a
        whole burst durable, and a failing block rolls back only its own savepoint.
        """
        if self._group is None:
            conn = self._conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield SqliteTransaction(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return
        with self._group.transaction() as tx:
            yield tx

    @contextmanager
    def read(self) -> Iterator[SqliteTransaction]:
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            yield SqliteTransaction(conn)
        finally:
            conn.execute("ROLLBACK")

    def ping(self, timeout: float = 0.5) -> None:
        """Open the file afresh (never creating it), read its schema and check that it takes writes,
        within about ``timeout`` s (:func:`ping_file`).

        A fresh connection, not this thread's: a file moved, deleted, made unreadable or read-only
        since the process opened it is found out (connections already open keep the old file), and the
        busy timeout is ``timeout``, not the store's minute, so a held lock makes the ping fail quickly.
        In WAL mode a reader does not wait for a writer at all.
        """
        ping_file(self.path, timeout)

    def integrity_check(self) -> str:
        return str(self._conn().execute("PRAGMA integrity_check").fetchone()[0])

    def close(self) -> None:
        if self._group is not None:
            self._group.close()
        with self._all_lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()


class _Batch:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.size = 0


class _GroupCommit:
    """Leader/follower group commit on one writer connection (see SqliteStore.transaction)."""

    def __init__(self, connect: Any, max_batch: int) -> None:
        self._connect = connect
        self._conn: sqlite3.Connection | None = None
        self._max_batch = max_batch
        self._mutex = threading.Lock()  # who may run a transaction body on the writer connection
        self._count_lock = threading.Lock()
        self._waiting = 0  # threads queued for the mutex
        self._batch: _Batch | None = None
        self._owner: int | None = None

    def _writer(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    @contextmanager
    def transaction(self) -> Iterator[SqliteTransaction]:
        if self._owner == threading.get_ident():
            raise RuntimeError("write transactions do not nest")
        with self._count_lock:
            self._waiting += 1
        self._mutex.acquire()
        with self._count_lock:
            self._waiting -= 1
        self._owner = threading.get_ident()
        failure: BaseException | None = None
        batch: _Batch | None = None
        try:
            conn = self._writer()
            if self._batch is None:
                conn.execute("BEGIN IMMEDIATE")
                self._batch = _Batch()
            batch = self._batch
            conn.execute("SAVEPOINT unit")
            try:
                yield SqliteTransaction(conn)
            except BaseException as exc:
                failure = exc
                conn.execute("ROLLBACK TO unit")
                conn.execute("RELEASE unit")
            else:
                conn.execute("RELEASE unit")
                batch.size += 1
            with self._count_lock:
                alone = self._waiting == 0
            if alone or batch.size >= self._max_batch:
                self._commit(conn, batch)
        except BaseException as exc:  # BEGIN or the commit itself failed
            if batch is not None and not batch.done.is_set():
                self._abort(batch, exc)
            failure = failure or exc
        finally:
            self._owner = None
            self._mutex.release()
        if failure is not None:
            raise failure
        assert batch is not None
        batch.done.wait()
        if batch.error is not None:
            raise batch.error

    def _commit(self, conn: sqlite3.Connection, batch: _Batch) -> None:
        self._batch = None
        try:
            conn.execute("COMMIT")
        except BaseException as exc:
            self._abort(batch, exc, rollback=True)
            raise
        batch.done.set()

    def _abort(self, batch: _Batch, exc: BaseException, *, rollback: bool = True) -> None:
        self._batch = None
        if rollback and self._conn is not None and self._conn.in_transaction:
            self._conn.execute("ROLLBACK")
        batch.error = exc
        batch.done.set()

    def close(self) -> None:
        with self._mutex:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


READ_ONLY = "the file is read-only"


def check_writes(conn: sqlite3.Connection) -> None:
    """Make ``conn`` (inside a write transaction the caller rolls back) write its file once, or raise
    ``sqlite3.OperationalError`` saying that the file is read-only.

    SQLite opens a file it may not write read-only, without an error; a WAL file then even grants
    ``BEGIN IMMEDIATE``, and only the first page written fails. Setting the schema's ``user_version``
    to what it is writes page 1 (in memory: nothing reaches the file before a COMMIT).
    """
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    try:
        conn.execute(f"PRAGMA user_version = {version}")
    except sqlite3.OperationalError as exc:
        if "readonly" not in str(exc):
            raise
        raise sqlite3.OperationalError(f"{READ_ONLY} ({exc})") from exc


def ping_file(path: str, timeout: float) -> None:
    """Open the SQLite file ``path`` afresh (never creating it), read its schema and check that it
    takes writes, within about ``timeout`` s; raise StoreUnavailableError, or StoreReadOnlyError.

    Writes are checked twice, both without waiting for the write lock: the process's own access to
    the file (what a mode of 444, the immutable attribute or a read-only mount refuses), then a write
    of the schema's ``user_version`` rolled back at once (:func:`check_writes`) in a ``BEGIN
    IMMEDIATE`` that does not wait (busy timeout 0): when another connection holds the write lock, the
    file is being written and that is answer enough; otherwise the lock is held for two statements.
    """
    uri = Path(path).resolve().as_uri() + "?mode=rw"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout = {max(1, int(timeout * 1000))}")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            if not os.access(path, os.W_OK):
                raise StoreReadOnlyError(f"{path}: {READ_ONLY}")
            conn.execute("PRAGMA busy_timeout = 0")
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    return  # another connection is writing the file
                raise
            try:
                check_writes(conn)
            finally:
                conn.execute("ROLLBACK")
        finally:
            conn.close()
    except sqlite3.OperationalError as exc:
        if str(exc).startswith(READ_ONLY):
            raise StoreReadOnlyError(f"{path}: {exc}") from exc
        raise StoreUnavailableError(f"{type(exc).__name__}: {exc}") from exc
    except sqlite3.Error as exc:
        raise StoreUnavailableError(f"{type(exc).__name__}: {exc}") from exc


def _statements(script: str) -> Iterator[str]:
    """Split a migration into statements, keeping trigger bodies whole."""
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statement = buffer.strip()
            if statement:
                yield statement
            buffer = ""
    if buffer.strip():
        yield buffer.strip()
