"""In-process benchmarks and database preparation.

- :func:`prepare_server_db`: the database of one benchmark server (a SQLite file, or a PostgreSQL
  schema when given its URL): a merchant with a huge balance, one API key per workload with ceilings of
  10^6 a minute and an hour, collections to read, payouts to replay;
- :func:`compare_payouts`: ``core.disburse.create`` against a hand-written sqlite3 transaction doing the
  same writes, with the same durability;
- :func:`compare_signing`: ``paymentcore._domain.signing.signature`` against bare ``hmac.digest``;
- :func:`growth_records` and :func:`growth_windows`: the per-call cost of a read by reference and of a
  payout with few versus many stored rows (rows written straight into the schema with executemany).
"""

from __future__ import annotations

import cProfile
import gc
import hashlib
import hmac
import io
import json
import pstats
import random
import secrets
import sqlite3
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paymentcore import Config, PaymentCore, Payout
from paymentcore._domain.signing import signature
from paymentcore.testing import fund

CURRENCY = "XAF"
FUNDING = 10**13  # XAF: 10^11 payouts of 100
HUGE = 10**6  # the largest rate-limit ceiling a key accepts
AMOUNT = 100
PAYOUT_PHONE = "670000100"
PREPARE_PHONE_BASE = 9_000_000  # phone indexes >= this are used while preparing, below by the load
DAY_MS = 86_400_000
ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


@dataclass
class Prepared:
    db: Path  # the SQLite file, or (with ``url``) where the reference files are named after
    merchant_id: str
    tokens: dict[str, str]  # workload kind -> API key
    refs_file: Path  # collection references (GET by reference)
    replay_file: Path  # idempotency keys already used for a payout (replay)
    replay_keys: list[str]
    funded: int
    url: str | None = None  # the PostgreSQL database (a schema of its own) instead of ``db``

    @property
    def database(self) -> str:
        """What ``bench_serve.py core --db`` and :func:`open_core` take."""
        return self.url if self.url is not None else str(self.db)


def is_postgres(db: Path | str) -> bool:
    return str(db).startswith(("postgresql://", "postgres://"))


def open_core(db: Path | str, synchronous: str = "FULL", **config: Any) -> PaymentCore:
    """A core on a SQLite file, or on PostgreSQL when ``db`` is a URL (``synchronous`` is SQLite's)."""
    if is_postgres(db):
        return PaymentCore.postgresql(str(db), sender=None, config=Config(**config))
    return PaymentCore.sqlite(Path(db), synchronous=synchronous, sender=None, config=Config(**config))


def create_payout(core: PaymentCore, merchant_id: str, key: str) -> Payout:
    """The payout the load sends (see bench_load.payout_body), as the server makes it from that body."""
    return core.disburse.create(
        merchant_id,
        amount=AMOUNT,
        currency=CURRENCY,
        phone=PAYOUT_PHONE,
        merchant_reference=key,
        idempotency_key=key,
    )


def new_merchant(core: PaymentCore, name: str = "Bench Shop", funding: int = FUNDING) -> str:
    merchant = core.operator.create_merchant(name, settlement_currency=CURRENCY)
    fund(core, merchant.id, CURRENCY, funding)
    return merchant.id


def prepare_server_db(
    db: Path, *, kinds: list[str], references: int = 200, replays: int = 200, url: str | None = None
) -> Prepared:
    """Everything a core server needs for the load, written in-process before the server starts: in the
    SQLite file ``db``, or in the PostgreSQL database ``url`` (then ``db`` only names the files of
    references)."""
    core = open_core(url if url is not None else db)
    try:
        merchant_id = new_merchant(core)
        tokens = {
            kind: core.operator.create_key(
                merchant_id, ["collect", "disburse"], per_minute=HUGE, per_hour=HUGE
            ).api_key
            for kind in kinds
        }
        refs: list[str] = []
        index = PREPARE_PHONE_BASE
        for i in range(references):
            while index % 100 in (11, 12, 13):
                index += 1
            collection = core.collect.charge(
                merchant_id,
                amount=AMOUNT,
                currency=CURRENCY,
                country="CM",
                provider="mtn_cm",
                phone=f"67{index:07d}",
                merchant_reference=f"prep-{i}",
                idempotency_key=f"prep-charge-{i}",
            )
            index += 1
            refs.append(collection.reference)
        keys = [f"replay-{i}" for i in range(replays)]
        for key in keys:
            create_payout(core, merchant_id, key)
    finally:
        core.close()
    refs_file = db.with_suffix(".refs")
    refs_file.write_text("\n".join(refs) + "\n")
    replay_file = db.with_suffix(".replay")
    replay_file.write_text("\n".join(keys) + "\n")
    return Prepared(db, merchant_id, tokens, refs_file, replay_file, keys, FUNDING, url)


# --- timing helpers ----------------------------------------------------------------------------


def time_calls(call: Callable[[int], object], start: int, count: int) -> float:
    """Seconds for ``call(start) ... call(start + count - 1)``, with the collector paused."""
    gc.collect()
    gc.disable()
    try:
        began = time.perf_counter()
        for i in range(start, start + count):
            call(i)
        return time.perf_counter() - began
    finally:
        gc.enable()


def profile_calls(
    call: Callable[[int], object], start: int, count: int, top: int = 14
) -> list[dict[str, Any]]:
    """The functions where ``count`` calls spend their time (cProfile, sorted by own time)."""
    profiler = cProfile.Profile()
    profiler.enable()
    for i in range(start, start + count):
        call(i)
    profiler.disable()
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows: list[dict[str, Any]] = []
    entries: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(value[2] for value in entries.values()) or 1.0
    for (filename, line, name), (_cc, calls, own, cumulative, _callers) in entries.items():
        short = filename.rsplit("/site-packages/", 1)[-1].rsplit("/work/main/", 1)[-1]
        rows.append(
            {
                "function": f"{short}:{line}({name})",
                "calls_per_op": calls / count,
                "own_us_per_op": own / count * 1e6,
                "cumulative_us_per_op": cumulative / count * 1e6,
                "own_share": own / total,
            }
        )
    rows.sort(key=lambda row: row["own_us_per_op"], reverse=True)
    return rows[:top]


def summarise(samples: list[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


# --- payout creation: the core against a raw sqlite3 transaction -------------------------------


def raw_connection(db: Path, synchronous: str) -> sqlite3.Connection:
    """A connection set up as SqliteStore sets up its own (WAL, the same synchronous)."""
    conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False, timeout=60)
    conn.execute("PRAGMA busy_timeout = 60000")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def raw_payout(conn: sqlite3.Connection, merchant_id: str, key: str) -> str:
    """The payout's writes by hand: BEGIN IMMEDIATE, balance check, the same inserts and updates, COMMIT."""
    now = time.time_ns() // 1_000_000
    reference = f"PO-{now}-{''.join(secrets.choice(ALPHABET) for _ in range(10))}"
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute(
            "SELECT available FROM balances WHERE merchant_id = ? AND currency = ?", (merchant_id, CURRENCY)
        ).fetchone()
        if row is None or row[0] < AMOUNT:
            raise RuntimeError("insufficient balance")
        legs = json.dumps(
            [[f"merchant:{merchant_id}:available", -AMOUNT], [f"merchant:{merchant_id}:reserved", AMOUNT]]
        )
        conn.execute(
            "INSERT INTO ledger_entries (id, merchant_id, currency, kind, reference, legs, created_at)"
            " VALUES (?, ?, ?, 'reserve', ?, ?, ?)",
            (f"led_{secrets.token_hex(12)}", merchant_id, CURRENCY, reference, legs, now),
        )
        conn.execute(
            "UPDATE balances SET available = available - ?, reserved = reserved + ?"
            " WHERE merchant_id = ? AND currency = ?",
            (AMOUNT, AMOUNT, merchant_id, CURRENCY),
        )
        conn.execute(
            "INSERT INTO payouts (reference, merchant_id, status, amount, currency, phone, country,"
            " provider, recipient_name, merchant_reference, awaiting_review, created_at, updated_at,"
            " provider_reference, status_reason, sent_at, next_check_at, resolution)"
            " VALUES (?, ?, 'PENDING', ?, ?, ?, 'CM', 'mtn_cm', NULL, ?, 0, ?, ?, NULL, NULL, NULL, ?, NULL)",
            (reference, merchant_id, AMOUNT, CURRENCY, PAYOUT_PHONE, key, now, now, now),
        )
        body = json.dumps(
            {"reference": reference, "status": "PENDING", "amount": AMOUNT, "currency": CURRENCY}
        )
        conn.execute(
            "INSERT INTO idempotency (merchant_id, key, fingerprint, created_at, status_code, body)"
            " VALUES (?, ?, ?, ?, 201, ?)",
            (merchant_id, key, hashlib.sha256(key.encode()).hexdigest(), now, body),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return reference


def compare_payouts(
    workdir: Path, synchronous: str, *, batch: int, batches: int, profile: bool = False
) -> dict[str, Any]:
    """Payouts per second, core and raw, in alternating batches on two files of the same schema."""
    core_db = workdir / f"payouts-core-{synchronous}.db"
    raw_db = workdir / f"payouts-raw-{synchronous}.db"
    core = open_core(core_db, synchronous)
    setup = open_core(raw_db, synchronous)
    raw_merchant = new_merchant(setup)
    setup.close()
    conn = raw_connection(raw_db, synchronous)
    try:
        merchant_id = new_merchant(core)
        tag = secrets.token_hex(3)

        def core_call(i: int) -> object:
            return create_payout(core, merchant_id, f"core-{tag}-{i}")

        def raw_call(i: int) -> object:
            return raw_payout(conn, raw_merchant, f"raw-{tag}-{i}")

        core_call(-1)  # warm: first statements compiled, pages read
        raw_call(-1)
        core_rates: list[float] = []
        raw_rates: list[float] = []
        for b in range(batches):
            start = b * batch
            if b % 2 == 0:
                core_rates.append(batch / time_calls(core_call, start, batch))
                raw_rates.append(batch / time_calls(raw_call, start, batch))
            else:
                raw_rates.append(batch / time_calls(raw_call, start, batch))
                core_rates.append(batch / time_calls(core_call, start, batch))
        ratios = [c / r for c, r in zip(core_rates, raw_rates, strict=True)]
        result: dict[str, Any] = {
            "synchronous": synchronous,
            "batch": batch,
            "batches": batches,
            "core_per_s": summarise(core_rates),
            "raw_per_s": summarise(raw_rates),
            "ratio": statistics.median(core_rates) / statistics.median(raw_rates),
            "ratio_per_batch": summarise(ratios),
        }
        if profile:
            result["profile"] = profile_calls(core_call, batches * batch, batch)
        core.check_all_ledgers()
        return result
    finally:
        conn.close()
        core.close()


# --- webhook signing ---------------------------------------------------------------------------


def compare_signing(iterations: int, repeats: int) -> dict[str, Any]:
    secret = "whsec_" + secrets.token_urlsafe(32)
    key = secret.encode()
    stamp = int(time.time())
    event = {
        "id": "evt_" + secrets.token_hex(12),
        "type": "disburse.succeeded",
        "createdAt": "2026-01-01T00:00:00.000Z",
        "data": {
            "reference": "PO-1767225600000-ABCDEFGHJK",
            "status": "PAID",
            "amount": 100,
            "currency": "XAF",
            "phone": PAYOUT_PHONE,
            "recipientName": None,
            "merchantReference": "order-12345",
            "providerReference": "SBX0123456789ABCDEF",
            "statusReason": None,
        },
    }
    body = json.dumps(event).encode()

    def ours() -> None:
        for _ in range(iterations):
            signature(secret, stamp, body)

    def bare() -> None:
        for _ in range(iterations):
            hmac.digest(key, b"%d." % stamp + body, hashlib.sha256)

    ours_rates: list[float] = []
    bare_rates: list[float] = []
    for _ in range(repeats):
        for fn, rates in ((ours, ours_rates), (bare, bare_rates)):
            began = time.perf_counter()
            fn()
            rates.append(iterations / (time.perf_counter() - began))
    if signature(secret, stamp, body) != "sha256=" + hmac.digest(key, b"%d." % stamp + body, "sha256").hex():
        raise AssertionError("signature() does not match hmac.digest")
    return {
        "body_bytes": len(body),
        "signature_per_s": summarise(ours_rates),
        "hmac_digest_per_s": summarise(bare_rates),
        "ratio": statistics.median(ours_rates) / statistics.median(bare_rates),
    }


# --- growth: many stored rows ------------------------------------------------------------------


def _suffix(i: int) -> str:
    out = []
    for _ in range(10):
        out.append(ALPHABET[i % 32])
        i //= 32
    return "".join(out)


def _bulk_connection(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA cache_size = -262144")  # 256 MiB while building
    return conn


def _chunks(rows: Iterator[tuple[Any, ...]], size: int = 50_000) -> Iterator[list[tuple[Any, ...]]]:
    chunk: list[tuple[Any, ...]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def bulk_records(db: Path, count: int, merchant_id: str, now: int) -> list[str]:
    """``count`` rows each in collections, payouts, ledger_entries and idempotency, over a year.

    One row in a hundred belongs to ``merchant_id`` (collections and payouts; its references are
    returned), the rest to 997 other merchants. Ledger rows go to the others only, so the merchant's
    books stay exact. Times are older than a week: no window or prompt limit sees them.
    """
    year = 365 * DAY_MS
    oldest = now - year - 8 * DAY_MS
    step = year / max(count, 1)

    def owner(i: int) -> str:
        return merchant_id if i % 100 == 0 else f"mer_bulk_{i % 997}"

    def created(i: int) -> int:
        return int(oldest + i * step)

    mine: list[str] = []

    def collections() -> Iterator[tuple[Any, ...]]:
        for i in range(count):
            at = created(i)
            reference = f"REQ-{at}-{_suffix(i)}"
            if i % 100 == 0:
                mine.append(reference)
            yield (
                reference, owner(i), "CHARGE", "SUCCESS", AMOUNT, CURRENCY, "Payment to Bench Shop",
                f"bulk-{i}", at, at + 300_000, at + 5_000, "MOBILE_MONEY", "mtn_cm",
                f"67{(i * 7919) % 10_000_000:07d}", "CM", at, None, AMOUNT, CURRENCY, AMOUNT, CURRENCY,
                0, None, None,
            )  # fmt: skip

    def payouts() -> Iterator[tuple[Any, ...]]:
        for i in range(count):
            at = created(i)
            yield (
                f"PO-{at}-{_suffix(i)}", owner(i), "PAID", AMOUNT, CURRENCY, PAYOUT_PHONE, "CM", "mtn_cm",
                None, f"bulk-{i}", 0, at, at + 5_000, f"SBX{i:016X}", None, at + 100, None, "POSTED",
                None, None,
            )  # fmt: skip

    def entries() -> Iterator[tuple[Any, ...]]:
        for i in range(count):
            other = f"mer_bulk_{i % 997}"
            legs = f'[["network", -{AMOUNT}], ["merchant:{other}:available", {AMOUNT}]]'
            yield (f"led_{i:024x}", other, CURRENCY, "credit", f"REQ-bulk-{i}", legs, created(i))

    def idempotency() -> Iterator[tuple[Any, ...]]:
        for i in range(count):
            yield (owner(i), f"bulk-{i:08d}-{_suffix(i * 31)}", "0" * 64, created(i), 201, '{"bulk":true}')

    conn = _bulk_connection(db)
    try:
        conn.execute("BEGIN")
        for sql, rows in (
            ("INSERT INTO collections VALUES (" + ", ".join("?" * 24) + ")", collections()),
            ("INSERT INTO payouts VALUES (" + ", ".join("?" * 20) + ")", payouts()),
            ("INSERT INTO ledger_entries VALUES (?, ?, ?, ?, ?, ?, ?)", entries()),
            ("INSERT INTO idempotency VALUES (?, ?, ?, ?, ?, ?)", idempotency()),
        ):
            for chunk in _chunks(rows):
                conn.executemany(sql, chunk)
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("ANALYZE")
    finally:
        conn.close()
    return mine


def bulk_window_payouts(db: Path, count: int, merchant_id: str, now: int) -> None:
    """``count`` payouts of ``merchant_id`` created in the last 23 hours (inside both rolling windows)."""
    span = 23 * 3_600_000
    step = span / max(count, 1)

    def rows() -> Iterator[tuple[Any, ...]]:
        for i in range(count):
            at = int(now - span + i * step)
            yield (
                f"PO-{at}-{_suffix(i)}", merchant_id, "PAID", AMOUNT, CURRENCY, PAYOUT_PHONE, "CM", "mtn_cm",
                None, f"window-{i}", 0, at, at + 5_000, f"SBX{i:016X}", None, at + 100, None, "POSTED",
                None, None,
            )  # fmt: skip

    conn = _bulk_connection(db)
    try:
        conn.execute("BEGIN")
        for chunk in _chunks(rows()):
            conn.executemany("INSERT INTO payouts VALUES (" + ", ".join("?" * 20) + ")", chunk)
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("ANALYZE")
    finally:
        conn.close()


@dataclass
class GrowthDb:
    label: str
    rows: int
    core: PaymentCore
    merchant_id: str
    refs: list[str]
    build_s: float
    size_bytes: int


def build_growth_db(workdir: Path, label: str, rows: int, *, windows: bool, synchronous: str) -> GrowthDb:
    db = workdir / f"growth-{label}.db"
    began = time.perf_counter()
    core = open_core(db, synchronous)
    merchant_id = new_merchant(core)
    now = core.clock.now()
    if windows:
        core.operator.set_limits(merchant_id, CURRENCY, per_day=10**12, per_week=10**12)
    core.close()
    refs: list[str] = []
    if windows:
        bulk_window_payouts(db, rows, merchant_id, now)
    else:
        refs = bulk_records(db, rows, merchant_id, now)
    core = open_core(db, synchronous)
    random.Random(rows).shuffle(refs)
    return GrowthDb(label, rows, core, merchant_id, refs, time.perf_counter() - began, db.stat().st_size)


def _interleaved(
    small: GrowthDb,
    large: GrowthDb,
    make: Callable[[GrowthDb], Callable[[int], object]],
    batch: int,
    reps: int,
) -> dict[str, Any]:
    calls = {db.label: make(db) for db in (small, large)}
    for call in calls.values():
        for i in range(min(batch, 50)):  # warm: statements compiled, hot pages read
            call(-1 - i)
    costs: dict[str, list[float]] = {small.label: [], large.label: []}
    for rep in range(reps):
        order = (small, large) if rep % 2 == 0 else (large, small)
        for db in order:
            costs[db.label].append(time_calls(calls[db.label], rep * batch, batch) / batch * 1e6)
    small_us = statistics.median(costs[small.label])
    large_us = statistics.median(costs[large.label])
    return {
        "small_rows": small.rows,
        "large_rows": large.rows,
        "small_us": summarise(costs[small.label]),
        "large_us": summarise(costs[large.label]),
        "ratio": large_us / small_us,
        "batch": batch,
        "reps": reps,
    }


def _get_by_reference(db: GrowthDb) -> Callable[[int], object]:
    def call(i: int) -> object:
        return db.core.collect.get(db.merchant_id, db.refs[i % len(db.refs)])

    return call


def _payout(tag: str) -> Callable[[GrowthDb], Callable[[int], object]]:
    def make(db: GrowthDb) -> Callable[[int], object]:
        def call(i: int) -> object:
            return create_payout(db.core, db.merchant_id, f"growth-{tag}-{i}")

        return call

    return make


def growth_records(
    workdir: Path, small_rows: int, large_rows: int, *, batch: int, reps: int, synchronous: str
) -> dict[str, Any]:
    """GET by reference and payout creation with ``small_rows`` versus ``large_rows`` records per table."""
    small = build_growth_db(workdir, "records-small", small_rows, windows=False, synchronous=synchronous)
    large = build_growth_db(workdir, "records-large", large_rows, windows=False, synchronous=synchronous)
    try:
        result = {
            "synchronous": synchronous,
            "build_s": {"small": small.build_s, "large": large.build_s},
            "size_bytes": {"small": small.size_bytes, "large": large.size_bytes},
            "get": _interleaved(small, large, _get_by_reference, batch, reps),
            "payout": _interleaved(small, large, _payout(secrets.token_hex(3)), batch, reps),
        }
        for db in (small, large):
            db.core.check_all_ledgers()
        return result
    finally:
        small.core.close()
        large.core.close()


def growth_windows(
    workdir: Path, small_rows: int, large_rows: int, *, batch: int, reps: int, synchronous: str
) -> dict[str, Any]:
    """Payout creation with per_day and per_week limits set and ``small_rows`` versus ``large_rows``
    payouts of the merchant inside both windows (so both window sums are computed)."""
    small = build_growth_db(workdir, "windows-small", small_rows, windows=True, synchronous=synchronous)
    large = build_growth_db(workdir, "windows-large", large_rows, windows=True, synchronous=synchronous)
    try:
        tag = secrets.token_hex(3)
        result = {
            "synchronous": synchronous,
            "build_s": {"small": small.build_s, "large": large.build_s},
            "payout": _interleaved(small, large, _payout(tag), batch, reps),
            "profile_large": profile_calls(_payout(tag + "p")(large), 0, max(batch // 2, 5)),
        }
        for db in (small, large):
            db.core.check_all_ledgers()
        return result
    finally:
        small.core.close()
        large.core.close()
