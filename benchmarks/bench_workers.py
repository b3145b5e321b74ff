"""Workers that share the work (issue 26, item 3): ``python benchmarks/bench_workers.py`` (about a minute).

Several ``paymentcore worker`` processes on one PostgreSQL database claim disjoint items without a global
lock (a claim takes only the partitions of the merchants nobody else holds at that moment). This measures
whether adding a worker adds throughput, as an operator would see it:

- a backlog of ``--payouts`` payouts spread over ``--merchants`` merchants is written in-process (no
  worker running), on a scratch schema of its own for each figure;
- then 1, 2 and 3 ``python -m paymentcore_server --db URL worker`` processes are started at once on it
  (the sandbox answering at once: ``--sandbox-delay 0``, so the figure is the workers' and the
  database's, not the network's); the database is polled every 20 ms for the payouts PAID;
- the rate is the payouts paid from the first poll that finds one PAID (the processes' start-up left
  out) until the last, over that time; the ratios 2/1 and 3/1 are taken within a round, and the median over
  ``--rounds`` rounds (the order of 1, 2, 3 reversed every other round) is reported.

The gate: every payout PAID exactly once with its ledger entries (``core.check_all_ledgers()`` and paid
out = payouts x amount per merchant). Writes ``--results`` (default benchmarks/results/workers.json) and
prints a table; exits 0 when the gate passes (the figures are never judged), 1 when not, 2 when the run
broke. ``--quick`` (CI): one round, a small backlog.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import bench_core
from run import PostgresSchemas, machine, postgres_from_env

HERE = Path(__file__).resolve().parent
DEFAULT_RESULTS = HERE / "results" / "workers.json"
AMOUNT = 100
WORKERS = (1, 2, 3)


def backlog(url: str, merchants: int, payouts: int) -> list[str]:
    """Write ``payouts`` payouts spread over ``merchants`` new merchants; their merchant ids."""
    core = bench_core.open_core(url)
    try:
        ids = [bench_core.new_merchant(core, name=f"Workers {n}") for n in range(merchants)]
        for n in range(payouts):
            core.disburse.create(
                ids[n % merchants],
                amount=AMOUNT,
                currency=bench_core.CURRENCY,
                phone=bench_core.PAYOUT_PHONE,
                idempotency_key=f"backlog-{n}",
            )
    finally:
        core.close()
    return ids


def drain(url: str, workers: int, payouts: int, logs: Path, timeout: float) -> float:
    """Start ``workers`` worker processes on ``url``; payouts/s from the first payout seen PAID (the
    processes' start-up left out) until every payout is."""
    import psycopg

    procs: list[subprocess.Popen[bytes]] = []
    command = [sys.executable, "-m", "paymentcore_server", "--db", url, "worker", "--sandbox-delay", "0"]
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.monotonic()
        try:
            for n in range(workers):
                with (logs / f"worker-{workers}-{n}.log").open("wb") as log:  # the child keeps its own copy
                    procs.append(
                        subprocess.Popen(
                            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
                        )
                    )
            first: tuple[float, int] | None = None  # when the first payouts were seen PAID, and how many
            while True:
                row = conn.execute("SELECT count(*) FROM payouts WHERE status = 'PAID'").fetchone()
                done, now = (int(row[0]) if row is not None else 0), time.monotonic()
                if done and first is None:
                    first = (now, done)
                if done >= payouts:
                    assert first is not None
                    if done == first[1] or now == first[0]:
                        raise RuntimeError("the backlog was paid before it could be timed: make it larger")
                    return (done - first[1]) / (now - first[0])
                if time.monotonic() - start > timeout:
                    raise RuntimeError(f"{workers} workers did not pay {payouts} payouts in {timeout:.0f} s")
                for proc in procs:
                    if proc.poll() is not None:
                        raise RuntimeError(f"a worker exited ({proc.returncode}); see {logs}")
                time.sleep(0.02)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=20)


def check(url: str, merchants: list[str], payouts: int) -> list[dict[str, Any]]:
    """The gate on one database: every payout paid once, its money moved, the ledgers consistent."""
    core = bench_core.open_core(url)
    try:
        checks: list[dict[str, Any]] = []
        paid_out = sum(core.check_ledger(merchant, bench_core.CURRENCY).paid_out for merchant in merchants)
        checks.append({"name": "paid out = payouts x amount", "ok": paid_out == payouts * AMOUNT})
        try:
            core.check_all_ledgers()
            checks.append({"name": "ledger invariant", "ok": True})
        except Exception as exc:
            checks.append({"name": "ledger invariant", "ok": False, "detail": f"{type(exc).__name__}: {exc}"})
        return checks
    finally:
        core.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--postgres", default=None, help="a PostgreSQL URL (default: from the environment)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--payouts", type=int, default=1500)
    parser.add_argument("--merchants", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    parser.add_argument("--quick", action="store_true", help="one round of 300 payouts (CI)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.payouts = 1, 300
    base = args.postgres or postgres_from_env()
    if base is None:
        print("error: needs a PostgreSQL URL (--postgres or $PAYMENTCORE_TEST_POSTGRES_URL)", file=sys.stderr)
        return 2
    schemas = PostgresSchemas(base)
    rates: dict[int, list[float]] = {n: [] for n in WORKERS}
    ratios: dict[int, list[float]] = {n: [] for n in WORKERS[1:]}
    checks: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="pc-workers-") as scratch:
            logs = Path(scratch)
            for r in range(args.rounds):
                order = WORKERS if r % 2 == 0 else tuple(reversed(WORKERS))
                within: dict[int, float] = {}
                for workers in order:
                    url = schemas.new(f"w{r}_{workers}")
                    merchants = backlog(url, args.merchants, args.payouts)
                    within[workers] = drain(url, workers, args.payouts, logs, args.timeout)
                    rates[workers].append(within[workers])
                    for one in check(url, merchants, args.payouts):
                        checks.append({**one, "name": f"{workers} workers, round {r + 1}: {one['name']}"})
                    print(f"round {r + 1}: {workers} worker(s): {within[workers]:.1f} payouts/s", flush=True)
                for workers in WORKERS[1:]:
                    ratios[workers].append(within[workers] / within[1])
    except Exception:
        traceback.print_exc()
        return 2
    finally:
        schemas.drop()
    report = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "payouts": args.payouts,
        "merchants": args.merchants,
        "rounds": args.rounds,
        "payouts_per_s": {str(n): statistics.median(values) for n, values in rates.items()},
        "ratio_to_one": {str(n): statistics.median(values) for n, values in ratios.items()},
        "per_round": {"rates": {str(n): v for n, v in rates.items()}},
        "gate": {"passed": all(c["ok"] for c in checks), "checks": checks},
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"\nworkers sharing one PostgreSQL database: {args.payouts} payouts over {args.merchants} merchants"
    )
    print("| workers | payouts/s (median) | ratio to one |\n|---|---|---|")
    for n in WORKERS:
        ratio = report["ratio_to_one"].get(str(n))
        print(
            f"| {n} | {report['payouts_per_s'][str(n)]:.1f} | {'' if ratio is None else f'{ratio:.2f} x'} |"
        )
    print(f"\ncorrectness gate: {'passed' if report['gate']['passed'] else 'FAILED'} ({len(checks)} checks)")
    return 0 if report["gate"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
