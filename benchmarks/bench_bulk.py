"""Bulk payouts (issue 28) against single payouts, on one server on SQLite with synchronous=FULL.

In interleaved rounds on the same server and database:

- single: ``POST /v1/disburse`` at concurrency ``c`` for ``duration`` seconds, by the suite's load
  generator (wrk, else the Python one): payouts accepted per second;
- bulk: ``POST /v1/disburse/bulk`` with ``batch`` items (mode ``each``), ``requests`` of them one after
  the other on one connection (the client a merchant writes): payouts accepted per second, and the time
  each request of ``batch`` items took to be answered (accepted, reserved, durable);

and, in-process for reference, ``core.disburse.create_bulk`` of ``batch`` items on a file of its own.

Reported: the two rates and their ratio per round (the median of the rounds is the figure), and the
latencies of the bulk requests. The machine is shared, so the figures are indicative; only ratios
measured in one run are compared. The gate: every bulk item accepted, every accepted payout stored once,
the balance conserved (the ledger invariant).
"""

from __future__ import annotations

import http.client
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_core
from bench_load import PAYOUT_AMOUNT, PAYOUT_PHONE, LoadResult, Workload

from paymentcore import PayoutItem

Check = Callable[[str, bool, str], None]
Load = Callable[[int, Workload, int, float], LoadResult]  # (port, workload, concurrency, seconds)


def bulk_body(prefix: str, size: int) -> bytes:
    items = [
        {
            "amount": PAYOUT_AMOUNT,
            "currency": "XAF",
            "phone": PAYOUT_PHONE,
            "merchantReference": f"{prefix}-{n}",
        }
        for n in range(size)
    ]
    return json.dumps({"mode": "each", "items": items}, separators=(",", ":")).encode()


def send_bulk(host: str, port: int, token: str, prefix: str, size: int, count: int) -> dict[str, Any]:
    """``count`` bulk requests of ``size`` items, one after the other on one connection."""
    conn = http.client.HTTPConnection(host, port, timeout=120)
    latencies: list[float] = []
    accepted = 0
    statuses: dict[str, int] = {}
    began = time.perf_counter()
    try:
        for n in range(count):
            body = bulk_body(f"{prefix}-{n}", size)
            headers = {
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/json",
                "Idempotency-Key": f"{prefix}-{n}",
            }
            start = time.perf_counter()
            conn.request("POST", "/v1/disburse/bulk", body=body, headers=headers)
            response = conn.getresponse()
            answer = response.read()
            latencies.append(time.perf_counter() - start)
            statuses[str(response.status)] = statuses.get(str(response.status), 0) + 1
            if response.status == 201:
                accepted += int(json.loads(answer)["acceptedCount"])
    finally:
        conn.close()
    elapsed = time.perf_counter() - began
    return {
        "requests": count,
        "items": size * count,
        "accepted": accepted,
        "statuses": statuses,
        "duration_s": elapsed,
        "payouts_per_s": accepted / elapsed if elapsed else 0.0,
        "latency_s": latencies,
    }


def inprocess_batch(workdir: Path, size: int, repeats: int) -> dict[str, Any]:
    """``core.disburse.create_bulk`` of ``size`` items, ``repeats`` times, on a SQLite FULL file."""
    db = workdir / "bulk-inprocess.db"
    core = bench_core.open_core(db, "FULL")
    try:
        merchant_id = bench_core.new_merchant(core)
        seconds = []
        for n in range(repeats):
            items = [
                PayoutItem(
                    amount=bench_core.AMOUNT,
                    currency=bench_core.CURRENCY,
                    phone=bench_core.PAYOUT_PHONE,
                    merchant_reference=f"in-{n}-{i}",
                )
                for i in range(size)
            ]
            start = time.perf_counter()
            batch = core.disburse.create_bulk(
                merchant_id, items=items, mode="each", idempotency_key=f"in-{n}"
            )
            seconds.append(time.perf_counter() - start)
            assert batch.accepted == size
    finally:
        core.close()
    for suffix in ("", "-wal", "-shm", ".key", "-rates", "-rates-wal", "-rates-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    return {"items": size, "repeats": repeats, "seconds": seconds, "median_s": statistics.median(seconds)}


def compare(
    *,
    host: str,
    port: int,
    prepared: bench_core.Prepared,
    load: Load,
    workload: Callable[[str], Workload],
    rounds: int,
    concurrency: int,
    duration: float,
    batch: int,
    requests: int,
) -> dict[str, Any]:
    """The interleaved rounds of single and bulk payouts on one running server (see the module)."""
    runs: list[dict[str, Any]] = []
    for round_no in range(rounds):
        single = load(port, workload("single"), concurrency, duration)
        singles_ok = single.requests - single.non_2xx
        single_rate = singles_ok / single.duration_s if single.duration_s else 0.0
        bulk = send_bulk(host, port, prepared.tokens["bulk"], f"bulk-{round_no}", batch, requests)
        ratio = bulk["payouts_per_s"] / single_rate if single_rate else 0.0
        runs.append(
            {
                "single": single.to_json(),
                "single_payouts_per_s": single_rate,
                "single_accepted": singles_ok,
                "single_in_flight": max(0, single.generated - single.requests),
                "bulk": bulk,
                "ratio": ratio,
            }
        )
        print(
            f"bulk round {round_no + 1}/{rounds}: single c={concurrency} {single_rate:8.0f} payouts/s; "
            f"bulk of {batch} {bulk['payouts_per_s']:8.0f} payouts/s ({ratio:.1f}x); "
            f"a batch answered in {statistics.median(bulk['latency_s']) * 1000:.0f} ms (median)",
            flush=True,
        )
    latencies = [seconds for run in runs for seconds in run["bulk"]["latency_s"]]
    ratios = [run["ratio"] for run in runs]
    return {
        "synchronous": "FULL",
        "batch": batch,
        "bulk_requests_per_round": requests,
        "single_concurrency": concurrency,
        "single_seconds_per_round": duration,
        "runs": runs,
        "ratio": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
        "single_payouts_per_s": statistics.median(run["single_payouts_per_s"] for run in runs),
        "bulk_payouts_per_s": statistics.median(run["bulk"]["payouts_per_s"] for run in runs),
        "batch_latency_s": {
            "median": statistics.median(latencies),
            "max": max(latencies),
            "min": min(latencies),
            "count": len(latencies),
        },
        "accepted": {
            "single": sum(run["single_accepted"] for run in runs),
            "single_in_flight": sum(run["single_in_flight"] for run in runs),
            "bulk": sum(run["bulk"]["accepted"] for run in runs),
            "bulk_items": sum(run["bulk"]["items"] for run in runs),
        },
    }


def check(gate: Check, prepared: bench_core.Prepared, result: dict[str, Any]) -> None:
    """Every bulk item accepted, every accepted payout stored once, the ledger conserved."""
    accepted = result["accepted"]
    gate("bulk: every item accepted", accepted["bulk"] == accepted["bulk_items"], f"{accepted}")
    core = bench_core.open_core(prepared.db, "FULL")
    try:
        with core.store.read() as tx:
            listed = tx.payouts.page(prepared.merchant_id, limit=10**9)
            stored = len(listed or [])
            reserved = tx.ledger.balance(prepared.merchant_id, bench_core.CURRENCY).reserved
        expected = accepted["single"] + accepted["bulk"] + len(prepared.replay_keys)
        in_flight = accepted["single_in_flight"]  # sent when a timed run ended: stored or not
        gate(
            "bulk: every accepted payout stored once",
            expected <= stored <= expected + in_flight,
            f"{stored} stored, {expected} accepted, {in_flight} in flight at the end of a run",
        )
        gate(
            "bulk: the reserved balance is the stored payouts'",
            reserved == stored * bench_core.AMOUNT,
            f"{reserved} reserved for {stored} payouts",
        )
        try:
            core.check_ledger(prepared.merchant_id, bench_core.CURRENCY)
            gate("bulk: ledger invariant", True, "")
        except AssertionError as exc:
            gate("bulk: ledger invariant", False, str(exc))
    finally:
        core.close()
