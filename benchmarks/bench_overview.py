"""How long the console's overview takes with 100,000 payouts (issue 30: under 200 ms).

For each engine (SQLite, and PostgreSQL when ``--postgres URL`` or ``$PAYMENTCORE_TEST_POSTGRES_URL``
names a server), a fresh database gets ``--payouts`` payouts and ``--collections`` collections of a few
merchants in two currencies, created over the last ``--hours`` hours (24 by default: the worst case,
every record inside the overview's windows), with realistic statuses (most paid, some failed, some
held for review), written straight into the schema. Then:

- ``core.operator.overview()`` is timed (median and worst of ``--runs``), and
- ``GET /console`` (the whole page, signed in, through Starlette's test client) likewise;
- the baseline: the same overview counted from the rows alone (as without the hourly counts of
  migration 7; its indexes kept), in the same run: the ratio says what the hourly counts buy. Both
  must give the same figures.

Run: ``python benchmarks/bench_overview.py [--payouts 100000] [--postgres URL]``. Prints a table and,
with ``--json PATH``, writes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from paymentcore import Config, PaymentCore
from paymentcore._domain.models import (
    Collection,
    CollectionKind,
    CollectionStatus,
    Merchant,
    MerchantStatus,
    Payout,
    PayoutStatus,
    Resolution,
)

HOUR_MS = 3_600_000
PAYOUT_MIX = [
    (PayoutStatus.PAID, 85),
    (PayoutStatus.FAILED, 8),
    (PayoutStatus.PENDING, 3),
    (PayoutStatus.SENT, 2),
    (PayoutStatus.REJECTED, 2),
]
COLLECTION_MIX = [
    (CollectionStatus.SUCCESS, 80),
    (CollectionStatus.FAILED, 12),
    (CollectionStatus.PENDING, 5),
    (CollectionStatus.PROCESSING, 3),
]


_OPEN_PAYOUTS = (PayoutStatus.PENDING, PayoutStatus.SENT)
_OPEN_COLLECTIONS = (CollectionStatus.PENDING, CollectionStatus.PROCESSING)


def _pick(rng: random.Random, mix: list[tuple[Any, int]]) -> Any:
    return rng.choices([value for value, _ in mix], weights=[weight for _, weight in mix])[0]


def records(
    n_payouts: int, n_collections: int, hours: int, now: int, seed: int = 7
) -> tuple[list[Merchant], list[Payout], list[Collection]]:
    rng = random.Random(seed)
    merchants = [
        Merchant(
            id=f"mer_bench{i}",
            name=f"Bench shop {i}",
            settlement_currency="XAF",
            status=MerchantStatus.APPROVED,
            collect_fee_ppm=0,
            payouts_enabled=True,
            blocked_providers=frozenset(),
            created_at=now - 400 * 86_400_000,
        )
        for i in range(5)
    ]
    span = hours * HOUR_MS
    settled = now - 10 * 60_000  # older records have their final status, but for payouts held for review
    payouts = []
    for i in range(n_payouts):
        created = now - rng.randrange(span)
        status = _pick(rng, PAYOUT_MIX)
        held = status is PayoutStatus.PENDING and (created < settled or rng.random() < 0.3)
        if created < settled and status is PayoutStatus.SENT:
            status = PayoutStatus.PAID
        payouts.append(
            Payout(
                reference=f"PO-{created}-{i:07d}",
                merchant_id=rng.choice(merchants).id,
                status=status,
                amount=rng.randrange(100, 500_000),
                currency=rng.choice(["XAF", "XAF", "XAF", "XOF"]),
                phone="670000000",
                country="CM",
                provider="mtn_cm",
                recipient_name="Bench",
                merchant_reference=None,
                awaiting_review=held,
                created_at=created,
                updated_at=created,
                next_check_at=None if held or status not in _OPEN_PAYOUTS else created + 60_000,
                resolution=(
                    Resolution.POSTED
                    if status is PayoutStatus.PAID
                    else Resolution.RELEASED
                    if status is PayoutStatus.REJECTED
                    or (status is PayoutStatus.FAILED and rng.random() < 0.5)
                    else None
                ),
            )
        )
    collections = []
    for i in range(n_collections):
        created = now - rng.randrange(span)
        status = _pick(rng, COLLECTION_MIX)
        if created < settled and status in _OPEN_COLLECTIONS:
            status = CollectionStatus.FAILED if rng.random() < 0.5 else CollectionStatus.SUCCESS
        collections.append(
            Collection(
                reference=f"REQ-{created}-{i:07d}",
                merchant_id=rng.choice(merchants).id,
                kind=CollectionKind.CHARGE,
                status=status,
                requested_amount=rng.randrange(100, 500_000),
                requested_currency=rng.choice(["XAF", "XAF", "XOF"]),
                description="bench",
                merchant_reference=None,
                created_at=created,
                expires_at=created + 900_000,
                updated_at=created,
                submitted_at=created,
                next_check_at=created + 30_000 if status in _OPEN_COLLECTIONS else None,
            )
        )
    return merchants, payouts, collections


def fill(
    core: PaymentCore, merchants: list[Merchant], payouts: list[Payout], collections: list[Collection]
) -> None:
    """Write the records straight into the store's schema (its own codecs, ``executemany``), in
    transactions of 10,000 rows; the schema's triggers run as for any insert."""
    adapter = sys.modules[type(core.store).__module__]
    with core.store.transaction() as tx:
        for merchant in merchants:
            tx.merchants.put(merchant)
    for rows, codec in ((payouts, adapter._PAYOUTS), (collections, adapter._COLLECTIONS)):
        for start in range(0, len(rows), 10_000):
            with core.store.transaction() as tx:
                writer: Any = tx.payouts
                conn = writer._rows.conn
                if hasattr(writer._rows, "locked"):  # PostgreSQL: take the store's write lock first
                    writer._rows.locked("SELECT 1")
                    with conn.cursor() as cursor:
                        cursor.executemany(
                            codec.insert_sql, [codec.values(r) for r in rows[start : start + 10_000]]
                        )
                else:
                    conn.executemany(
                        codec.insert_sql, [codec.values(r) for r in rows[start : start + 10_000]]
                    )


def timed(call: Callable[[], object], runs: int) -> dict[str, float]:
    call()  # warm: connections, caches
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return {"median_ms": round(statistics.median(samples), 1), "max_ms": round(max(samples), 1)}


@contextmanager
def signed_in_client(core: PaymentCore) -> Iterator[Any]:
    from starlette.testclient import TestClient

    from paymentcore_server.app import create_app

    token = core.operator.create_operator("Bench").token
    with TestClient(create_app(core)) as http:
        form = http.get("/console/sign-in").text
        found = re.search(r'name="csrf" value="([A-Za-z0-9_-]{43})"', form)
        assert found is not None
        answer = http.post(
            "/console/sign-in", data={"token": token, "csrf": found.group(1)}, follow_redirects=False
        )
        assert answer.status_code == 303, answer.text
        yield http


def _hours(overview: Any) -> list[dict[str, int]]:
    return [dict(h.counts) for h in (*overview.payout_hours, *overview.collection_hours)]


@contextmanager
def rows_only() -> Iterator[None]:
    """The overview counted from the rows alone, as without the hourly counts of migration 7."""
    from paymentcore.adapters import sql

    kept = sql.hours_plan

    def never(since: int, until: int, width: int) -> None:
        return None

    for module in (sql,):
        setattr(module, "hours_plan", never)  # noqa: B010 (a benchmark's switch, not an API)
    try:
        yield
    finally:
        for module in (sql,):
            setattr(module, "hours_plan", kept)  # noqa: B010


def measure(core: PaymentCore, runs: int) -> dict[str, Any]:
    overview = core.operator.overview()
    today = sum(a.count for a in overview.today.payouts)
    result: dict[str, Any] = {"payouts_today": today, "overview": timed(core.operator.overview, runs)}
    with signed_in_client(core) as http:

        def page() -> None:
            answer = http.get("/console")
            assert answer.status_code == 200 and "<svg" in answer.text, answer.text[:500]

        result["page"] = timed(page, runs)
    return result


def bench(engine: str, database: str, args: argparse.Namespace) -> dict[str, Any]:
    now = int(time.time() * 1000)
    merchants, payouts, collections = records(args.payouts, args.collections, args.hours, now)
    config = Config(sandbox_delay=0)
    core = (
        PaymentCore.postgresql(database, config=config, sender=None)
        if engine == "postgresql"
        else PaymentCore.sqlite(database, config=config, sender=None)
    )
    try:
        started = time.perf_counter()
        fill(core, merchants, payouts, collections)
        if engine == "postgresql":
            with core.store.transaction() as tx:
                analyzer: Any = tx.payouts
                analyzer._rows.conn.execute("ANALYZE payouts; ANALYZE collections")
        written = time.perf_counter() - started
        measured = measure(core, args.runs)
        with rows_only():
            counted = core.operator.overview()
            rows = {"overview": timed(core.operator.overview, max(3, args.runs // 4))}
        assert _hours(counted) == _hours(core.operator.overview()), "the two ways count alike"
    finally:
        core.close()
    ratio = rows["overview"]["median_ms"] / max(measured["overview"]["median_ms"], 0.01)
    return {
        "engine": engine,
        "payouts": args.payouts,
        "collections": args.collections,
        "hours": args.hours,
        "fill_s": round(written, 1),
        "hourly_counts": measured,
        "rows_only": rows,
        "speedup": round(ratio, 1),
    }


def postgres_schema(base: str) -> str:
    import psycopg

    schema = f"pcbench_overview_{os.getpid()}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in base else "?"
    return f"{base}{separator}options={quote(f'-csearch_path={schema}', safe='')}"


def drop_schema(base: str, url: str) -> None:
    import psycopg

    schema = re.search(r"search_path%3D(\w+)", url)
    if schema:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema.group(1)} CASCADE")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--payouts", type=int, default=100_000)
    parser.add_argument("--collections", type=int, default=100_000)
    parser.add_argument("--hours", type=int, default=24, help="spread the records over this many hours")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--postgres", default=os.environ.get("PAYMENTCORE_TEST_POSTGRES_URL", ""))
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results = []
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory() as tmp:
            results.append(bench("sqlite", str(Path(tmp) / "overview.db"), args))
    if args.postgres:
        url = postgres_schema(args.postgres)
        try:
            results.append(bench("postgresql", url, args))
        finally:
            drop_schema(args.postgres, url)
    print(f"overview with {args.payouts:,} payouts and {args.collections:,} collections over {args.hours} h")
    print("engine      overview median/max   page median/max   rows only   speedup")
    for r in results:
        w, wo = r["hourly_counts"], r["rows_only"]
        print(
            f"{r['engine']:<11} {w['overview']['median_ms']:>7} / {w['overview']['max_ms']:<7} ms"
            f"  {w['page']['median_ms']:>6} / {w['page']['max_ms']:<6} ms"
            f"  {wo['overview']['median_ms']:>9} ms      x{r['speedup']}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
