"""The worker's listings of due work against the size of the backlog, on SQLite and PostgreSQL.

The worker lists what is due (``payouts.due_refs``, ``outbox.due_refs`` and ``collections.due_refs``
with ``per_lane`` = ``LANE_DEPTH``) again every few rounds while it works through a backlog, so a
listing that costs what the whole backlog does makes a deep queue drain ever slower. This measures
one listing of each at backlogs of 500, 5,000 and 20,000 due items, from one merchant and spread over
20, on a store made for the run: milliseconds a listing (median of ``--repeats``) and the ratio of
the deepest backlog's listing to the shallowest's (1.0: the listing does not grow with the backlog;
40: it grows with it).

The backlog is written through the store's repositories (``payouts.add_many``, ``outbox.add``,
``collections.add``), not the API: PENDING payouts due now, PENDING events for the merchants'
endpoints and PROCESSING collections due for a status check, plus as many finished payouts (PAID),
delivered events and settled collections, which a listing must not read.

``python benchmarks/bench_listing.py [--sizes 500,5000,20000] [--merchants 1,20] [--repeats 15]
[--postgres URL] [--no-sqlite] [--json PATH]``; the PostgreSQL URL defaults to
``$PAYMENTCORE_BENCH_POSTGRES_URL`` or ``$PAYMENTCORE_TEST_POSTGRES_URL`` (a schema of its own is made
there and dropped at the end). Figures are reported, never judged.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from paymentcore._domain.models import (
    Collection,
    CollectionKind,
    CollectionStatus,
    DeliveryStatus,
    Event,
    Payout,
    PayoutStatus,
)
from paymentcore._services.work import LANE_DEPTH
from paymentcore.adapters.postgres import PostgresStore
from paymentcore.adapters.sqlite import SqliteStore
from paymentcore.ports import Store

NOW = 1_795_000_000_000
LIMIT = 1000
KINDS = ("payouts", "events", "collections")


def _payout(reference: str, merchant_id: str, at: int, *, done: bool) -> Payout:
    return Payout(
        reference=reference,
        merchant_id=merchant_id,
        status=PayoutStatus.PAID if done else PayoutStatus.PENDING,
        amount=100,
        currency="XAF",
        phone="670000000",
        country="CM",
        provider="mtn_cm",
        recipient_name=None,
        merchant_reference=None,
        awaiting_review=False,
        created_at=at,
        updated_at=at,
        next_check_at=None if done else at,
    )


def _event(event_id: str, merchant_id: str, at: int, *, done: bool) -> Event:
    return Event(
        id=event_id,
        merchant_id=merchant_id,
        type="disburse.succeeded",
        data={"reference": event_id},
        created_at=at,
        status=DeliveryStatus.DELIVERED if done else DeliveryStatus.PENDING,
        next_attempt_at=at,
    )


def _collection(reference: str, merchant_id: str, at: int, *, done: bool) -> Collection:
    return Collection(
        reference=reference,
        merchant_id=merchant_id,
        kind=CollectionKind.CHARGE,
        status=CollectionStatus.SUCCESS if done else CollectionStatus.PROCESSING,
        requested_amount=100,
        requested_currency="XAF",
        description="Order",
        merchant_reference=None,
        created_at=at,
        expires_at=NOW + 300_000,
        updated_at=at,
        phone="670000000",
        provider="mtn_cm",
        submitted_at=at,
        next_check_at=None if done else at,
    )


def fill(store: Store, size: int, merchants: int, tag: str) -> None:
    """``size`` due payouts, events and collections over ``merchants`` merchants, and as many finished
    ones."""
    owners = [f"mer_{tag}_{n}" for n in range(merchants)]
    for start in range(0, 2 * size, 5000):
        with store.transaction() as tx:
            rows = range(start, min(start + 5000, 2 * size))
            tx.payouts.add_many(
                [
                    _payout(f"PO-{tag}-{i}", owners[i % merchants], NOW - 2 * size + i, done=i < size)
                    for i in rows
                ]
            )
            for i in rows:
                at, owner, done = NOW - 2 * size + i, owners[i % merchants], i < size
                tx.outbox.add(_event(f"evt_{tag}_{i}", owner, at, done=done))
                tx.collections.add(_collection(f"REQ-{tag}-{i}", owner, at, done=done))


def time_listing(store: Store, kind: str, repeats: int) -> tuple[float, int]:
    """Milliseconds a listing (median), and how many items it named."""

    def listing() -> int:
        with store.read() as tx:
            if kind == "payouts":
                return len(tx.payouts.due_refs(NOW, LIMIT, per_lane=LANE_DEPTH))
            if kind == "events":
                return len(tx.outbox.due_refs(NOW, LIMIT, per_lane=LANE_DEPTH))
            return len(tx.collections.due_refs(NOW, LIMIT, per_lane=LANE_DEPTH))

    listed = listing()  # statements prepared, pages read
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        listing()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples), listed


@contextmanager
def sqlite_store(workdir: Path, label: str) -> Iterator[tuple[Store, Callable[[], None]]]:
    store = SqliteStore(workdir / f"listing-{label}.db")
    try:
        yield store, lambda: None
    finally:
        store.close()


@contextmanager
def postgres_store(url: str) -> Iterator[tuple[Store, Callable[[], None]]]:
    """A store on a schema of its own; the callable gathers the planner's statistics (as autovacuum
    would, a while after the rows were written)."""
    import psycopg

    schema = "listing_" + secrets.token_hex(4)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    joiner = "&" if "?" in url else "?"
    scoped = f"{url}{joiner}options=-csearch_path%3D{schema}"
    store = PostgresStore(scoped, pool_size=2)

    def analyze() -> None:
        with psycopg.connect(scoped, autocommit=True) as conn:
            conn.execute("ANALYZE")

    try:
        yield store, analyze
    finally:
        store.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def measure(
    engine: str, opener: Callable[[str], Any], sizes: list[int], spreads: list[int], repeats: int
) -> list[dict[str, Any]]:
    results = []
    for merchants in spreads:
        for kind in KINDS:
            per_size: dict[int, float] = {}
            named: dict[int, int] = {}
            for size in sizes:
                with opener(f"{kind}-{merchants}-{size}") as (store, settle):
                    fill(store, size, merchants, secrets.token_hex(3))
                    settle()
                    per_size[size], named[size] = time_listing(store, kind, repeats)
                print(
                    f"{engine:10s} {kind:7s} {merchants:3d} merchant(s) {size:6d} due:"
                    f" {per_size[size]:7.2f} ms, {named[size]} listed",
                    flush=True,
                )
            results.append(
                {
                    "engine": engine,
                    "kind": kind,
                    "merchants": merchants,
                    "ms_per_listing": {str(size): round(per_size[size], 3) for size in sizes},
                    "listed": {str(size): named[size] for size in sizes},
                    "growth": round(per_size[sizes[-1]] / per_size[sizes[0]], 2),
                }
            )
    return results


def report(results: list[dict[str, Any]], sizes: list[int]) -> str:
    head = " | ".join(f"{size:,} due" for size in sizes)
    lines = [
        f"| engine | listing | merchants | {head} | deepest / shallowest |",
        "|---" * (len(sizes) + 4) + "|",
    ]
    for r in results:
        cells = " | ".join(f"{r['ms_per_listing'][str(size)]:.2f} ms" for size in sizes)
        lines.append(f"| {r['engine']} | {r['kind']} | {r['merchants']} | {cells} | {r['growth']:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="500,5000,20000")
    parser.add_argument("--merchants", default="1,20")
    parser.add_argument("--repeats", type=int, default=15)
    default_pg = os.environ.get("PAYMENTCORE_BENCH_POSTGRES_URL") or os.environ.get(
        "PAYMENTCORE_TEST_POSTGRES_URL"
    )
    parser.add_argument("--postgres", default=default_pg or "")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    spreads = [int(m) for m in args.merchants.split(",")]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        if not args.no_sqlite:
            results += measure(
                "sqlite", lambda label: sqlite_store(Path(scratch), label), sizes, spreads, args.repeats
            )
        if args.postgres:
            results += measure(
                "postgresql", lambda _: postgres_store(args.postgres), sizes, spreads, args.repeats
            )
    print(report(results, sizes))
    if args.json is not None:
        args.json.write_text(json.dumps({"sizes": sizes, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
