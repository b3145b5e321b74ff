"""End to end: does the background work keep up with the API? ``python3 benchmarks/bench_e2e.py``.

A real ``paymentcore serve`` (SQLite, synchronous=FULL, sandbox answering at once, the worker in the
server process) takes POST /v1/disburse at ``--concurrency`` for ``--seconds``, with a webhook endpoint
registered (a local receiver that counts deliveries). Every second the backlog (payouts not yet PAID)
is sampled from the database. After the load, it waits until every accepted payout is PAID and both of
its events (disburse.sent, disburse.succeeded) are delivered.

Reported, from one run: the API's accepted payouts per second, the end-to-end rate (payouts PAID per
second from the start of the load to the last one paid), their ratio, the backlog over time, and how
long the backlog took to drain after the load. Writes benchmarks/results/e2e.json. Exits 1 when an
accepted payout was not paid or a delivery is missing (never on a speed figure).
"""

from __future__ import annotations

import argparse
import json
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import bench_core
import httpx
from bench_load import Workload, have_wrk, run_load
from bench_serve import HOST

from paymentcore import Config, PaymentCore

HERE = Path(__file__).resolve().parent


class Receiver:
    """A webhook endpoint that answers 204 at once and counts what it got."""

    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                with receiver.lock:
                    receiver.count += 1
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((HOST, 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{HOST}:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def wait_ready(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://{HOST}:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError("the server did not start")


def unpaid(db: Path) -> tuple[int, int]:
    """(payouts not yet PAID, payouts PAID), read from the file without disturbing the writer."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        rows = dict(conn.execute("SELECT status = 'PAID', COUNT(*) FROM payouts GROUP BY 1").fetchall())
    finally:
        conn.close()
    return int(rows.get(0, 0)), int(rows.get(1, 0))


def run(seconds: float, concurrency: int, tool: str, workdir: Path) -> dict[str, Any]:
    db = workdir / "e2e.db"
    prepared = bench_core.prepare_server_db(db, kinds=["disburse"], references=0, replays=0)
    receiver = Receiver()
    core = PaymentCore.sqlite(db, sender=None, config=Config(allow_private_webhooks=True))
    try:
        core.webhooks.register(prepared.merchant_id, url=receiver.url)
    finally:
        core.close()
    port = free_port()
    log = (workdir / "server.log").open("wb")
    server = subprocess.Popen(
        [
            sys.executable, "-m", "paymentcore_server", "--db", str(db), "serve", "--host", HOST,
            "--port", str(port), "--sandbox-delay", "0", "--allow-private-webhooks",
        ],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log,
    )
    samples: list[dict[str, float]] = []
    try:
        wait_ready(port)
        started = time.monotonic()
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(1.0):
                pending, paid = unpaid(db)
                samples.append({"t": round(time.monotonic() - started, 1), "unpaid": pending, "paid": paid})

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        workload = Workload("disburse", prepared.tokens["disburse"], "e2e")
        result = run_load(tool, HOST, port, workload, concurrency, seconds)
        load_ended = time.monotonic()
        accepted = result.requests - result.non_2xx
        drain_deadline = load_ended + 120
        drained = False
        while time.monotonic() < drain_deadline:
            pending, paid = unpaid(db)
            if pending == 0:
                drained = True
                break
            time.sleep(0.05)
        # the last payout paid, or (not drained) the rate so far: paid over the whole wait
        last_paid = time.monotonic()
        while time.monotonic() < drain_deadline and receiver.count < 2 * paid:
            time.sleep(0.05)
        delivered_at = time.monotonic()
        stop.set()
        sampler.join()
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        receiver.close()
    pending, paid = unpaid(db)
    api_rate = accepted / result.duration_s
    e2e_rate = paid / (last_paid - started)
    during = [s["unpaid"] for s in samples if s["t"] <= seconds]
    return {
        "seconds": seconds,
        "concurrency": concurrency,
        "tool": tool,
        "accepted": accepted,
        "paid": paid,
        "unpaid_after": pending,
        "deliveries": receiver.count,
        "api_payouts_per_s": round(api_rate, 1),
        "end_to_end_payouts_per_s": round(e2e_rate, 1),
        "ratio": round(e2e_rate / api_rate, 3) if api_rate else None,
        "backlog_max_during_load": max(during) if during else 0,
        "backlog_first_half_max": max(during[: len(during) // 2] or [0]),
        "backlog_second_half_max": max(during[len(during) // 2 :] or [0]),
        "drained": drained,
        "drain_seconds": round(last_paid - load_ended, 2),
        "deliveries_done_seconds": round(delivered_at - load_ended, 2),
        "samples": samples,
        "p99_ms": result.p99_ms,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--tool", choices=["wrk", "python"], default="wrk" if have_wrk() else "python")
    parser.add_argument("--results", type=Path, default=HERE / "results")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="paymentcore-e2e-") as tmp:
        report = run(args.seconds, args.concurrency, args.tool, Path(tmp))
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "e2e.json").write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"API accepted {report['api_payouts_per_s']}/s; end to end {report['end_to_end_payouts_per_s']}/s "
        f"(ratio {report['ratio']}); backlog max {report['backlog_max_during_load']} "
        f"(first half {report['backlog_first_half_max']}, second half {report['backlog_second_half_max']}); "
        + (
            f"drained {report['drain_seconds']} s after the load; "
            if report["drained"]
            else f"NOT drained {report['drain_seconds']} s after the load ({report['unpaid_after']} unpaid); "
        )
        + f"deliveries {report['deliveries']} "
        f"for {report['paid']} payouts"
    )
    ok = report["unpaid_after"] == 0 and report["paid"] == report["accepted"]
    ok = ok and report["deliveries"] >= 2 * report["paid"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
