"""One SQL layer (issue 25): a payout's storage work, hand-written adapters against SQLAlchemy Core.

The same work, on the same database, two ways, in interleaved batches:

- **hand-written**: the stores as they are (``SqliteStore`` with ``synchronous=FULL`` and WAL, group
  commit on as the core opens it; ``PostgresStore`` with its pool): SQL text built once per dialect,
  executed with sqlite3 / psycopg, rows decoded to the records of ``paymentcore._domain.models``;
- **SQLAlchemy Core** (2.x): one set of ``Table`` objects for both engines, the same statements built
  once with Core constructs (``select``, ``update().where().returning()``, the dialects' ``insert()``
  with ``on_conflict_do_update``), executed through an ``Engine`` (its pool, one ``engine.begin()`` per
  unit of work, the compiled cache on, as by default), rows decoded to the same records.

A payout's storage work is what ``POST /v1/disburse`` does today (traced from ``access.authenticate``
and ``disburse.create``), for a merchant with daily and weekly ceilings so that both window sums run:

1. read: the API key by its hash, its merchant, the platform settings;
2. read: the idempotency key (a replay is answered without the write lock);
3. write (SQLite ``BEGIN IMMEDIATE``; PostgreSQL ``READ COMMITTED`` and the store's advisory write lock):
   the idempotency key again, settings, merchant, payout limits, the spend since a day and since a week
   ago, the balance moved available -> reserved by one conditional ``UPDATE ... RETURNING``, the ledger
   entry, the payout, the idempotency record (an upsert); COMMIT.

Creating a payout writes no outbox event (``disburse.sent`` and later are written when the worker
moves it), so neither way does. The per-key rate limit (a side file on SQLite, ``tx.rates`` on
PostgreSQL) is left out of both.

Reports per engine: microseconds per payout each way (wall clock, and this process's CPU time), the
ratio SQLAlchemy / hand-written, and the statements per payout each way (counted in one extra payout
each way, outside the timed batches). Run: ``python benchmarks/bench_sql_layer.py [--rounds 3]
[--payouts 300] [--postgres URL] [--no-sqlite] [--json PATH]``. The PostgreSQL URL defaults to
``$PAYMENTCORE_BENCH_POSTGRES_URL`` or ``$PAYMENTCORE_TEST_POSTGRES_URL``; the run makes a schema of
its own there and drops it at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import hashlib
import json
import os
import secrets
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import bench_core
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Engine

from paymentcore._domain.models import (
    ApiKey,
    Balance,
    IdempotencyRecord,
    LedgerEntry,
    LedgerLeg,
    Merchant,
    MerchantStatus,
    Payout,
    PayoutLimits,
    PayoutStatus,
    Scope,
    Settings,
)
from paymentcore._domain.policy import DAY_MS, WEEK_MS
from paymentcore._domain.queries import SPENT_STATUSES
from paymentcore._services.access import hash_key
from paymentcore.adapters.postgres import PostgresStore
from paymentcore.adapters.sqlite import SqliteStore
from paymentcore.ports import Transaction

CURRENCY = bench_core.CURRENCY
AMOUNT = bench_core.AMOUNT
HOUR_MS = 3_600_000
POSTGRES_ENV = ("PAYMENTCORE_BENCH_POSTGRES_URL", "PAYMENTCORE_TEST_POSTGRES_URL")
HAND = "hand-written"
ALCHEMY = "SQLAlchemy Core"


@dataclass(frozen=True)
class Fixture:
    """What a payout needs to find in the database: a merchant, its API key, ceilings, a balance."""

    merchant_id: str
    key_hash: str


@dataclass
class Request:
    """One payout's inputs, identical for both ways (only the storage layer differs)."""

    key: str
    now: int
    payout: Payout
    entry: LedgerEntry
    record: IdempotencyRecord


def new_request(fixture: Fixture, tag: str, i: int) -> Request:
    now = time.time_ns() // 1_000_000
    key = f"{tag}-{i}"
    reference = f"PO-{now}-{tag}{i}"
    mid = fixture.merchant_id
    payout = Payout(
        reference=reference,
        merchant_id=mid,
        status=PayoutStatus.PENDING,
        amount=AMOUNT,
        currency=CURRENCY,
        phone=bench_core.PAYOUT_PHONE,
        country="CM",
        provider="mtn_cm",
        recipient_name=None,
        merchant_reference=key,
        awaiting_review=False,
        created_at=now,
        updated_at=now,
        next_check_at=now,
    )
    entry = LedgerEntry(
        id="led_" + secrets.token_hex(12),
        merchant_id=mid,
        currency=CURRENCY,
        kind="reserve",
        reference=reference,
        legs=(LedgerLeg(f"merchant:{mid}:available", -AMOUNT), LedgerLeg(f"merchant:{mid}:reserved", AMOUNT)),
        created_at=now,
    )
    body = json.dumps(
        {"type": "payout", "record": {"reference": reference, "status": "PENDING", "amount": str(AMOUNT)}},
        separators=(",", ":"),
    )
    record = IdempotencyRecord(mid, key, hashlib.sha256(key.encode()).hexdigest(), now, None, body)
    return Request(key, now, payout, entry, record)


def check_read(key: ApiKey | None, merchant: Merchant | None, settings: Settings) -> str:
    if key is None or merchant is None or not settings.api_enabled:
        raise AssertionError("the API key, its merchant or the platform is gone")
    return key.merchant_id


def check_write(
    limits: PayoutLimits | None, day: int, week: int, moved: Balance | None, replay: IdempotencyRecord | None
) -> None:
    if replay is not None:
        raise AssertionError("a fresh key found a replay")
    if limits is None or limits.per_day is None or limits.per_week is None:
        raise AssertionError("the benchmark's merchant has no ceilings")
    if day + AMOUNT > limits.per_day or week + AMOUNT > limits.per_week:
        raise AssertionError("a ceiling refused the payout")
    if moved is None:
        raise AssertionError("the balance refused the reservation")


# --- (a) hand-written: the stores of paymentcore/adapters ---------------------------------------


Store = SqliteStore | PostgresStore


def hand_payout(store: Store, fixture: Fixture, request: Request) -> Payout:
    """The payout's storage work through the store's repositories, as the services call them."""
    tx: Transaction
    with store.read() as tx:  # access.authenticate
        key = tx.keys.by_hash(fixture.key_hash)
        merchant = tx.merchants.get(key.merchant_id) if key is not None else None
        mid = check_read(key, merchant, tx.settings.get())
    with store.read() as tx:  # disburse.create: a replay is answered from a read
        if tx.idempotency.get(mid, request.key) is not None:
            raise AssertionError("a fresh key found a replay")
    with store.transaction() as tx:
        replay = tx.idempotency.get(mid, request.key)
        tx.settings.get()
        tx.merchants.get(mid)
        limits = tx.limits.get(mid, CURRENCY)
        day = tx.payouts.spent(mid, CURRENCY, request.now - DAY_MS)
        week = tx.payouts.spent(mid, CURRENCY, request.now - WEEK_MS)
        moved = tx.ledger.move(mid, CURRENCY, available=-AMOUNT, reserved=AMOUNT)
        check_write(limits, day, week, moved, replay)
        tx.ledger.append(request.entry)
        tx.payouts.add(request.payout)
        tx.idempotency.put(request.record)
    return request.payout


# --- (b) SQLAlchemy Core ---------------------------------------------------------------------------

meta = sa.MetaData()
T = sa.Text
N = sa.BigInteger
settings_t = sa.Table(
    "settings", meta, sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("api_enabled", sa.Boolean), sa.Column("payouts_enabled", sa.Boolean),
    sa.Column("closed_currencies", T),
)  # fmt: skip
merchants_t = sa.Table(
    "merchants", meta, sa.Column("id", T, primary_key=True), sa.Column("name", T),
    sa.Column("settlement_currency", T), sa.Column("status", T), sa.Column("collect_fee_ppm", N),
    sa.Column("payouts_enabled", sa.Boolean), sa.Column("blocked_providers", T), sa.Column("created_at", N),
)  # fmt: skip
keys_t = sa.Table(
    "api_keys", meta, sa.Column("id", T, primary_key=True), sa.Column("merchant_id", T),
    sa.Column("key_hash", T), sa.Column("scopes", T), sa.Column("per_minute", N), sa.Column("per_hour", N),
    sa.Column("revoked", sa.Boolean), sa.Column("created_at", N),
)  # fmt: skip
limits_t = sa.Table(
    "payout_limits", meta, sa.Column("merchant_id", T, primary_key=True),
    sa.Column("currency", T, primary_key=True), sa.Column("per_transaction", N), sa.Column("per_day", N),
    sa.Column("per_week", N), sa.Column("review_threshold", N),
)  # fmt: skip
spend_t = sa.Table(
    "payout_spend", meta, sa.Column("merchant_id", T, primary_key=True),
    sa.Column("currency", T, primary_key=True), sa.Column("hour", N, primary_key=True),
    sa.Column("amount", N),
)  # fmt: skip
balances_t = sa.Table(
    "balances", meta, sa.Column("merchant_id", T, primary_key=True),
    sa.Column("currency", T, primary_key=True),
    sa.Column("available", N), sa.Column("reserved", N), sa.Column("paid_out", N), sa.Column("credited", N),
)  # fmt: skip
ledger_t = sa.Table(
    "ledger_entries", meta, sa.Column("id", T, primary_key=True), sa.Column("merchant_id", T),
    sa.Column("currency", T), sa.Column("kind", T), sa.Column("reference", T), sa.Column("legs", T),
    sa.Column("created_at", N),
)  # fmt: skip
payouts_t = sa.Table(
    "payouts", meta, sa.Column("reference", T, primary_key=True), sa.Column("merchant_id", T),
    sa.Column("status", T), sa.Column("amount", N), sa.Column("currency", T), sa.Column("phone", T),
    sa.Column("country", T), sa.Column("provider", T), sa.Column("recipient_name", T),
    sa.Column("merchant_reference", T), sa.Column("awaiting_review", sa.Boolean), sa.Column("created_at", N),
    sa.Column("updated_at", N), sa.Column("provider_reference", T), sa.Column("status_reason", T),
    sa.Column("sent_at", N), sa.Column("next_check_at", N), sa.Column("resolution", T),
    sa.Column("batch_id", T), sa.Column("batch_index", N),
)  # fmt: skip
idem_t = sa.Table(
    "idempotency", meta, sa.Column("merchant_id", T, primary_key=True), sa.Column("key", T, primary_key=True),
    sa.Column("fingerprint", T), sa.Column("created_at", N), sa.Column("status_code", sa.Integer),
    sa.Column("body", T),
)  # fmt: skip

P = sa.bindparam
GET_SETTINGS = sa.select(
    settings_t.c.api_enabled, settings_t.c.payouts_enabled, settings_t.c.closed_currencies
).where(settings_t.c.id == 1)
GET_MERCHANT = sa.select(*merchants_t.c).where(merchants_t.c.id == P("m"))
GET_KEY = sa.select(*keys_t.c).where(keys_t.c.key_hash == P("h"))
GET_LIMITS = sa.select(*limits_t.c).where(limits_t.c.merchant_id == P("m"), limits_t.c.currency == P("c"))
GET_IDEM = sa.select(*idem_t.c).where(idem_t.c.merchant_id == P("m"), idem_t.c.key == P("k"))
SPENT = sa.select(
    sa.select(sa.func.coalesce(sa.func.sum(spend_t.c.amount), 0))
    .where(spend_t.c.merchant_id == P("m"), spend_t.c.currency == P("c"), spend_t.c.hour >= P("hour"))
    .scalar_subquery()
    + sa.select(sa.func.coalesce(sa.func.sum(payouts_t.c.amount), 0))
    .where(
        payouts_t.c.merchant_id == P("m"),
        payouts_t.c.currency == P("c"),
        payouts_t.c.created_at >= P("since"),
        payouts_t.c.created_at < P("next"),
        payouts_t.c.status.in_(sorted(s.value for s in SPENT_STATUSES)),
    )
    .scalar_subquery()
)
b = balances_t.c
MOVE = (
    sa.update(balances_t)
    .where(
        b.merchant_id == P("m"),
        b.currency == P("c"),
        b.available + P("a", type_=N) >= 0,
        b.reserved + P("r", type_=N) >= 0,
        b.paid_out + P("p", type_=N) >= 0,
    )
    .values(
        available=b.available + P("a", type_=N),
        reserved=b.reserved + P("r", type_=N),
        paid_out=b.paid_out + P("p", type_=N),
        credited=b.credited + P("k", type_=N),
    )
    .returning(*balances_t.c)
)
ADD_ENTRY = sa.insert(ledger_t)
ADD_PAYOUT = sa.insert(payouts_t)
WRITE_LOCK = sa.select(sa.func.pg_advisory_xact_lock(P("lock", type_=N)))


def upsert(insert: Callable[[sa.Table], Any], table: sa.Table, keys: tuple[str, ...]) -> Any:
    """``INSERT ... ON CONFLICT (keys) DO UPDATE SET`` every other column, in a dialect's construct."""
    stmt = insert(table)
    others = {c.name: stmt.excluded[c.name] for c in table.c if c.name not in keys}
    return stmt.on_conflict_do_update(index_elements=list(keys), set_=others)


PUT_IDEM = {
    "sqlite": upsert(sqlite_dialect.insert, idem_t, ("merchant_id", "key")),
    "postgresql": upsert(pg_dialect.insert, idem_t, ("merchant_id", "key")),
}


def as_set(text: str) -> frozenset[str]:
    return frozenset(json.loads(text))


def decode_settings(row: Sequence[Any] | None) -> Settings:
    if row is None:
        return Settings()
    return Settings(bool(row[0]), bool(row[1]), as_set(row[2]))


def decode_merchant(row: Sequence[Any] | None) -> Merchant | None:
    if row is None:
        return None
    return Merchant(
        row[0], row[1], row[2], MerchantStatus(row[3]), row[4], bool(row[5]), as_set(row[6]), row[7]
    )


def decode_key(row: Sequence[Any] | None) -> ApiKey | None:
    if row is None:
        return None
    scopes = frozenset(Scope(s) for s in json.loads(row[3]))
    return ApiKey(row[0], row[1], row[2], scopes, row[4], row[5], bool(row[6]), row[7])


def decode_limits(row: Sequence[Any] | None) -> PayoutLimits | None:
    return None if row is None else PayoutLimits(*row)


def decode_idem(row: Sequence[Any] | None) -> IdempotencyRecord | None:
    return None if row is None else IdempotencyRecord(*row)


def decode_balance(row: Sequence[Any] | None) -> Balance | None:
    return None if row is None else Balance(*row)


class Alchemy:
    """The payout's storage work through SQLAlchemy Core on one database: a writer engine and a reader
    (SQLite: its own engine, whose transactions begin deferred; PostgreSQL: the same pool, REPEATABLE
    READ READ ONLY), each opening one transaction per unit of work as the stores do."""

    def __init__(self, writer: Engine, reader: Engine, lock: int | None) -> None:
        self.writer = writer
        self.reader = reader
        self.lock = lock
        self.put_idem = PUT_IDEM[writer.dialect.name]

    @classmethod
    def sqlite(cls, path: Path) -> Alchemy:
        def engine(begin: str) -> Engine:
            made = sa.create_engine(
                f"sqlite:///{path}", connect_args={"timeout": 60, "check_same_thread": False}
            )

            @sa.event.listens_for(made, "connect")
            def connect(dbapi_connection: Any, _record: Any) -> None:
                dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN (below), not sqlite3
                for pragma in ("busy_timeout = 60000", "journal_mode = WAL", "synchronous = FULL"):
                    dbapi_connection.execute(f"PRAGMA {pragma}")
                dbapi_connection.execute("PRAGMA foreign_keys = ON")

            @sa.event.listens_for(made, "begin")
            def do_begin(conn: sa.Connection) -> None:
                conn.exec_driver_sql(begin)

            return made

        return cls(engine("BEGIN IMMEDIATE"), engine("BEGIN"), None)

    @classmethod
    def postgresql(cls, url: str, lock: int) -> Alchemy:
        engine = sa.create_engine(sa.make_url(url).set(drivername="postgresql+psycopg"))
        reader = engine.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
        return cls(engine, reader, lock)

    @contextmanager
    def read(self) -> Iterator[sa.Connection]:
        with self.reader.connect() as conn:
            tx = conn.begin()
            try:
                yield conn
            finally:
                tx.rollback()

    def payout(self, fixture: Fixture, request: Request) -> Payout:
        with self.read() as conn:  # access.authenticate
            key = decode_key(conn.execute(GET_KEY, {"h": fixture.key_hash}).first())
            merchant = (
                decode_merchant(conn.execute(GET_MERCHANT, {"m": key.merchant_id}).first())
                if key is not None
                else None
            )
            mid = check_read(key, merchant, decode_settings(conn.execute(GET_SETTINGS).first()))
        with self.read() as conn:  # disburse.create: a replay is answered from a read
            if decode_idem(conn.execute(GET_IDEM, {"m": mid, "k": request.key}).first()) is not None:
                raise AssertionError("a fresh key found a replay")
        with self.writer.begin() as conn:
            if self.lock is not None:
                conn.execute(WRITE_LOCK, {"lock": self.lock})
            replay = decode_idem(conn.execute(GET_IDEM, {"m": mid, "k": request.key}).first())
            decode_settings(conn.execute(GET_SETTINGS).first())
            decode_merchant(conn.execute(GET_MERCHANT, {"m": mid}).first())
            limits = decode_limits(conn.execute(GET_LIMITS, {"m": mid, "c": CURRENCY}).first())
            day = self.spent(conn, mid, request.now - DAY_MS)
            week = self.spent(conn, mid, request.now - WEEK_MS)
            moved = decode_balance(
                conn.execute(
                    MOVE, {"m": mid, "c": CURRENCY, "a": -AMOUNT, "r": AMOUNT, "p": 0, "k": 0}
                ).first()
            )
            check_write(limits, day, week, moved, replay)
            entry = request.entry
            legs = json.dumps([[leg.account, leg.amount] for leg in entry.legs])
            conn.execute(
                ADD_ENTRY,
                {
                    "id": entry.id, "merchant_id": entry.merchant_id, "currency": entry.currency,
                    "kind": entry.kind, "reference": entry.reference, "legs": legs,
                    "created_at": entry.created_at,
                },
            )  # fmt: skip
            p = request.payout
            conn.execute(
                ADD_PAYOUT,
                {
                    "reference": p.reference, "merchant_id": p.merchant_id, "status": p.status.value,
                    "amount": p.amount, "currency": p.currency, "phone": p.phone, "country": p.country,
                    "provider": p.provider, "recipient_name": p.recipient_name,
                    "merchant_reference": p.merchant_reference, "awaiting_review": p.awaiting_review,
                    "created_at": p.created_at, "updated_at": p.updated_at,
                    "provider_reference": p.provider_reference, "status_reason": p.status_reason,
                    "sent_at": p.sent_at, "next_check_at": p.next_check_at,
                    "resolution": None if p.resolution is None else p.resolution.value,
                    "batch_id": p.batch_id, "batch_index": p.batch_index,
                },
            )  # fmt: skip
            r = request.record
            conn.execute(
                self.put_idem,
                {
                    "merchant_id": r.merchant_id, "key": r.key, "fingerprint": r.fingerprint,
                    "created_at": r.created_at, "status_code": r.status_code, "body": r.body,
                },
            )  # fmt: skip
        return p

    def spent(self, conn: sa.Connection, mid: str, since: int) -> int:
        next_hour = (since // HOUR_MS + 1) * HOUR_MS
        params = {"m": mid, "c": CURRENCY, "hour": next_hour // HOUR_MS, "since": since, "next": next_hour}
        return int(conn.execute(SPENT, params).scalar_one())

    def same_records(self, store: Store, fixture: Fixture) -> None:
        """The records this way decodes are those the store decodes (the comparison is like for like)."""
        with store.read() as tx:
            theirs = (
                tx.keys.by_hash(fixture.key_hash),
                tx.merchants.get(fixture.merchant_id),
                tx.settings.get(),
                tx.limits.get(fixture.merchant_id, CURRENCY),
                tx.ledger.balance(fixture.merchant_id, CURRENCY),
            )
        with self.read() as conn:
            mid = fixture.merchant_id
            ours = (
                decode_key(conn.execute(GET_KEY, {"h": fixture.key_hash}).first()),
                decode_merchant(conn.execute(GET_MERCHANT, {"m": mid}).first()),
                decode_settings(conn.execute(GET_SETTINGS).first()),
                decode_limits(conn.execute(GET_LIMITS, {"m": mid, "c": CURRENCY}).first()),
                decode_balance(
                    conn.execute(
                        sa.select(*balances_t.c).where(b.merchant_id == mid, b.currency == CURRENCY)
                    ).first()
                ),
            )
        if ours != theirs:
            raise AssertionError(f"SQLAlchemy decoded {ours!r}, the store {theirs!r}")

    def close(self) -> None:
        self.writer.dispose()
        self.reader.dispose()


# --- counting statements -------------------------------------------------------------------------


class Counter:
    """Statements sent to the database while ``on``: SQLite through a trace callback on every sqlite3
    connection made after :meth:`install` (a trigger's statements, reported again with their statement's
    text, are counted once), PostgreSQL through psycopg's cursor ``execute`` and its own transaction
    commands (the BEGIN and COMMIT psycopg sends for a connection outside autocommit), and for the
    PostgreSQL store, which binds each statement on the client and sends several in one query, through
    its connections' binder (``_Prepared.bound``), once per statement kept to send."""

    def __init__(self) -> None:
        self.on = False
        self.seen: list[str] = []
        self._connections: list[sqlite3.Connection] = []

    def _note(self, statement: str) -> None:
        if self.on:
            self.seen.append(statement)

    def _note_sqlite(self, statement: str) -> None:
        if self.on and (not self.seen or self.seen[-1] != statement):
            self.seen.append(statement)

    def install(self) -> None:
        import psycopg

        real_connect = sqlite3.connect
        counter = self

        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            conn: sqlite3.Connection = real_connect(*args, **kwargs)
            conn.set_trace_callback(counter._note_sqlite)
            counter._connections.append(conn)
            return conn

        # the stores call sqlite3.connect, SQLAlchemy's pysqlite dialect sqlite3.dbapi2.connect
        sqlite3.connect = sqlite3.dbapi2.connect = connect  # type: ignore[assignment]
        real_execute = psycopg.Cursor.execute
        real_command = psycopg.Connection._exec_command

        from paymentcore.adapters import postgres

        real_bound = postgres._Prepared.bound

        def execute(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            if not isinstance(cursor, psycopg.ClientCursor):  # its statements were bound one by one
                counter._note(f"{id(cursor)} {query}")
            return real_execute(cursor, query, *args, **kwargs)

        def bound(prepared: Any, conn: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            counter._note(f"{id(conn)} {query}")  # one statement the PostgreSQL store keeps to send
            return real_bound(prepared, conn, query, *args, **kwargs)

        def command(conn: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            counter._note(f"{id(conn)} {query!r}")
            return real_command(conn, query, *args, **kwargs)

        psycopg.Cursor.execute = execute  # type: ignore[method-assign, assignment]
        postgres._Prepared.bound = bound  # type: ignore[method-assign, assignment]
        psycopg.Connection._exec_command = command  # type: ignore[method-assign, assignment]

    def quiet(self) -> None:
        """Stop tracing SQLite connections (the timed batches run without a callback)."""
        for conn in self._connections:
            with contextlib.suppress(sqlite3.ProgrammingError):  # closed since
                conn.set_trace_callback(None)
        self._connections.clear()

    def count(self, call: Callable[[], object]) -> int:
        self.seen.clear()
        self.on = True
        try:
            call()
        finally:
            self.on = False
        if os.environ.get("BENCH_SQL_LAYER_SHOW"):
            print("\n".join(" ".join(s.split())[:160] for s in self.seen), "\n")
        return len(self.seen)


# --- the comparison --------------------------------------------------------------------------------


def prepare(database: str) -> Fixture:
    """A merchant with a huge balance, daily and weekly ceilings far above the run, and an API key."""
    core = bench_core.open_core(database)
    try:
        merchant_id = bench_core.new_merchant(core)
        core.operator.set_limits(merchant_id, CURRENCY, per_day=10**12, per_week=10**12)
        token = core.operator.create_key(merchant_id, ["disburse"]).api_key
    finally:
        core.close()
    return Fixture(merchant_id, hash_key(token))


def check_ledgers(database: str) -> None:
    core = bench_core.open_core(database)
    try:
        core.check_all_ledgers()
    finally:
        core.close()


def timed(call: Callable[[int], object], start: int, count: int) -> tuple[float, float]:
    """Microseconds per call, wall clock and this process's CPU, with the collector paused."""
    gc.collect()
    gc.disable()
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(start, start + count):
            call(i)
        return (time.perf_counter() - wall) / count * 1e6, (time.process_time() - cpu) / count * 1e6
    finally:
        gc.enable()


def compare(
    engine: str, database: str, store: Store, alchemy: Alchemy, counter: Counter, *, rounds: int, payouts: int
) -> dict[str, Any]:
    fixture = prepare(database)
    tag = secrets.token_hex(2)
    calls: dict[str, Callable[[int], object]] = {
        HAND: lambda i: hand_payout(store, fixture, new_request(fixture, f"h{tag}", i)),
        ALCHEMY: lambda i: alchemy.payout(fixture, new_request(fixture, f"s{tag}", i)),
    }
    alchemy.same_records(store, fixture)
    for call in calls.values():  # warm: connections opened, statements prepared and compiled, pages read
        for i in range(min(payouts, 30)):
            call(-2 - i)
    statements = {name: counter.count(functools.partial(call, -1)) for name, call in calls.items()}
    counter.quiet()
    wall: dict[str, list[float]] = {HAND: [], ALCHEMY: []}
    cpu: dict[str, list[float]] = {HAND: [], ALCHEMY: []}
    for r in range(rounds):
        order = (HAND, ALCHEMY) if r % 2 == 0 else (ALCHEMY, HAND)
        for name in order:
            us, cpu_us = timed(calls[name], r * payouts, payouts)
            wall[name].append(us)
            cpu[name].append(cpu_us)
    alchemy.same_records(store, fixture)
    hand_us, alchemy_us = statistics.median(wall[HAND]), statistics.median(wall[ALCHEMY])
    hand_cpu, alchemy_cpu = statistics.median(cpu[HAND]), statistics.median(cpu[ALCHEMY])
    return {
        "engine": engine,
        "rounds": rounds,
        "payouts_per_batch": payouts,
        "us_per_payout": {HAND: hand_us, ALCHEMY: alchemy_us},
        "cpu_us_per_payout": {HAND: hand_cpu, ALCHEMY: alchemy_cpu},
        "ratio": alchemy_us / hand_us,
        "cpu_ratio": alchemy_cpu / hand_cpu,
        "ratio_per_round": [a / h for a, h in zip(wall[ALCHEMY], wall[HAND], strict=True)],
        "statements_per_payout": statements,
        "samples_us": wall,
        "samples_cpu_us": cpu,
    }


def bench_sqlite(workdir: Path, counter: Counter, *, rounds: int, payouts: int) -> dict[str, Any]:
    path = workdir / "sql-layer.db"
    database = str(path)
    store = SqliteStore(path, synchronous="FULL")  # migrates the new file
    alchemy = Alchemy.sqlite(path)
    try:
        result = compare("sqlite", database, store, alchemy, counter, rounds=rounds, payouts=payouts)
    finally:
        alchemy.close()
        store.close()
    check_ledgers(database)
    result["sqlite"] = sqlite3.sqlite_version
    return result


def bench_postgres(base: str, counter: Counter, *, rounds: int, payouts: int) -> dict[str, Any]:
    import psycopg

    schema = f"pcbench_sql_{secrets.token_hex(3)}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        separator = "&" if "?" in base else "?"
        url = f"{base}{separator}options={quote(f'-csearch_path={schema}', safe='')}"
        store = PostgresStore(url)
        lock = int.from_bytes(
            hashlib.sha256(f"paymentcore.write/{schema}".encode()).digest()[:8], "big", signed=True
        )
        alchemy = Alchemy.postgresql(url, lock)
        try:
            result = compare("postgresql", url, store, alchemy, counter, rounds=rounds, payouts=payouts)
            with psycopg.connect(url, autocommit=True) as conn:
                row = conn.execute("SHOW server_version").fetchone()
            result["postgres"] = str(row[0]).split()[0] if row else "?"
        finally:
            alchemy.close()
            store.close()
        check_ledgers(url)
        return result
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def postgres_from_env() -> str:
    for name in POSTGRES_ENV:
        url = os.environ.get(name, "").strip()
        if url:
            return url
    return ""


def report(results: list[dict[str, Any]]) -> str:
    lines = [
        f"| engine | {HAND} µs | {ALCHEMY} µs | ratio | CPU µs hand | CPU µs SQLAlchemy | CPU ratio "
        "| statements hand / SQLAlchemy |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        us, cpu, st = r["us_per_payout"], r["cpu_us_per_payout"], r["statements_per_payout"]
        lines.append(
            f"| {r['engine']} | {us[HAND]:.0f} | {us[ALCHEMY]:.0f} | {r['ratio']:.2f} | {cpu[HAND]:.0f} "
            f"| {cpu[ALCHEMY]:.0f} | {r['cpu_ratio']:.2f} | {st[HAND]} / {st[ALCHEMY]} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (batches each way)")
    parser.add_argument("--payouts", type=int, default=300, help="payouts per batch")
    parser.add_argument("--postgres", default=postgres_from_env(), help="PostgreSQL URL ('' to skip)")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    counter = Counter()
    counter.install()
    results: list[dict[str, Any]] = []
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory(prefix="pc-sql-layer-") as tmp:
            results.append(bench_sqlite(Path(tmp), counter, rounds=args.rounds, payouts=args.payouts))
    if args.postgres:
        results.append(bench_postgres(args.postgres, counter, rounds=args.rounds, payouts=args.payouts))
    else:
        print("PostgreSQL: skipped (no --postgres and no $PAYMENTCORE_TEST_POSTGRES_URL)")
    print(
        f"SQLAlchemy {sa.__version__}; {args.rounds} rounds of {args.payouts} payouts each way, interleaved"
    )
    print(report(results))
    if args.json is not None:
        args.json.write_text(json.dumps({"sqlalchemy": sa.__version__, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
