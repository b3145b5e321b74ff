"""Observability of real processes: `paymentcore serve` and `paymentcore worker` with `--metrics-port`
and `--log-format json`, and `/healthz` while the database goes away and comes back.

Each test starts the command as a subprocess (as an operator would) on a SQLite file prepared
in-process, talks to it over HTTP, and scrapes its metrics port with a plain HTTP GET.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from paymentcore import Config, PaymentCore, wire
from paymentcore.testing import fund

pytestmark = pytest.mark.slow

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

KNOWN_ROUTES = {
    "/healthz",
    "/v1/collect/charge",
    "/v1/collect/{reference}",
    "/v1/disburse",
    "/v1/disburse/{reference}",
    "unmatched",
}


# uvicorn re-raises SIGTERM once it has shut down gracefully: the server's status is -15 (or 0)
STOPPED = (0, -15)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Receiver:
    """A webhook endpoint on 127.0.0.1: ``/fail`` answers 500, ``/hang`` waits for ``release`` then 204."""

    def __init__(self) -> None:
        self.arrivals: list[str] = []
        self.release = threading.Event()
        self.hanging = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                receiver.arrivals.append(self.path)
                if self.path == "/hang":
                    receiver.hanging.set()
                    receiver.release.wait(30)
                    self.send_response(204)
                else:
                    self.send_response(500)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    made.close()


class Shop:
    def __init__(self, merchant_id: str, collect_key: str, disburse_key: str, secret: str) -> None:
        self.merchant_id = merchant_id
        self.collect_key = collect_key
        self.disburse_key = disburse_key
        self.secret = secret


def prepare(db: Path, webhook_url: str) -> Shop:
    """A merchant with both keys, 100 000 XAF and a webhook endpoint, written before any process starts."""
    core = PaymentCore.sqlite(db, sender=None, config=Config(allow_private_webhooks=True))
    try:
        merchant = core.operator.create_merchant("Metrics Shop", settlement_currency="XAF")
        collect = core.operator.create_key(merchant.id, ["collect"]).api_key
        disburse = core.operator.create_key(merchant.id, ["disburse"]).api_key
        fund(core, merchant.id, "XAF", 100_000)
        secret = core.webhooks.register(merchant.id, url=webhook_url).signing_secret
        return Shop(merchant.id, collect, disburse, secret)
    finally:
        core.close()


class Process:
    """A `paymentcore` subprocess whose stderr goes to a file."""

    def __init__(self, db: Path, *args: str) -> None:
        self.log_path = db.with_name(f"{args[0]}-{time.monotonic_ns()}.log")
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "paymentcore_server", "--db", str(db), *args],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
        )

    def output(self) -> str:
        return self.log_path.read_text("utf-8", "replace")

    def wait_until(self, ready: Callable[[], bool], what: str, limit: float = 20) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"{what}: the process exited {self.proc.returncode}:\n{self.output()}")
            try:
                if ready():
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        pytest.fail(f"{what} did not happen within {limit} s:\n{self.output()}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in started:
        process.stop()


def scrape(port: int) -> Samples:
    answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(answer.text):
        for item in family.samples:
            samples[(item.name, frozenset(item.labels.items()))] = item.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every series of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, have), v in samples.items() if n == name and wanted <= have)


def auth(key: str, idempotency_key: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    return headers


def healthy(base: str) -> bool:
    return httpx.get(f"{base}/healthz", timeout=1).status_code == 200


# --- a server's metrics and its JSON request log ---------------------------------------------------


def test_a_real_server_counts_a_charge_a_payout_and_failed_deliveries_and_logs_json(
    tmp_path: Path, receiver: Receiver, processes: list[Process]
) -> None:
    db = tmp_path / "metrics.db"
    shop = prepare(db, receiver.base + "/fail")
    port, metrics_port = free_port(), free_port()
    server = Process(
        db, "serve", "--port", str(port), "--metrics-port", str(metrics_port), "--sandbox-delay", "0",
        "--allow-private-webhooks", "--webhook-retry-delays", "none", "--log-format", "json",
    )  # fmt: skip
    processes.append(server)
    base = f"http://127.0.0.1:{port}"
    server.wait_until(lambda: healthy(base), "the server answering /healthz")

    before = scrape(metrics_port)
    for status in ("PENDING", "PROCESSING", "SUCCESS", "FAILED"):
        assert (value(before, "paymentcore_collections_total", status=status)) == 0
    for status in ("PENDING", "SENT", "PAID", "FAILED", "REJECTED"):
        assert value(before, "paymentcore_payouts_total", status=status) == 0
    assert (("paymentcore_webhook_deliveries_total", frozenset({("outcome", "failed")}))) in before

    polls = {"collect": 0, "disburse": 0}
    with httpx.Client(base_url=base, timeout=10) as http:
        body = {
            "amount": 2500, "currency": "XAF", "country": "CM", "provider": "mtn_cm",
            "phone": "670000001", "description": "Order for Alice Example",
        }  # fmt: skip
        charge = http.post("/v1/collect/charge", content=wire.dumps(body), headers=auth(shop.collect_key))
        assert charge.status_code == 202, charge.text
        collection = charge.json()["reference"]
        while True:
            polls["collect"] += 1
            got = http.get(f"/v1/collect/{collection}", headers=auth(shop.collect_key))
            if got.json()["status"] == "SUCCESS" or polls["collect"] > 300:
                break
            time.sleep(0.05)
        assert got.json()["status"] == "SUCCESS"

        body = {"amount": 1000, "currency": "XAF", "phone": "670000002", "recipient_name": "Alice Example"}
        disburse = http.post(
            "/v1/disburse", content=wire.dumps(body), headers=auth(shop.disburse_key, "metrics-payout-1")
        )
        assert disburse.status_code == 201, disburse.text
        payout = disburse.json()["reference"]
        while True:
            polls["disburse"] += 1
            got = http.get(f"/v1/disburse/{payout}", headers=auth(shop.disburse_key))
            if got.json()["status"] == "PAID" or polls["disburse"] > 300:
                break
            time.sleep(0.05)
        assert got.json()["status"] == "PAID"
        assert http.get("/metrics").status_code == 404  # the API's port never serves the metrics

    # collect.succeeded, disburse.sent and disburse.succeeded: one attempt each, every one answered 500
    def settled() -> bool:
        now = scrape(metrics_port)
        return value(now, "paymentcore_webhook_deliveries_total", outcome="failed") == 3 and all(
            value(now, f"paymentcore_work_{g}", kind=k) == 0
            for g in ("pending", "in_flight")
            for k in ("collections", "payouts", "deliveries")
        )

    server.wait_until(settled, "three failed deliveries and nothing left to do")
    after = scrape(metrics_port)
    assert receiver.arrivals == ["/fail"] * 3
    assert value(after, "paymentcore_webhook_deliveries_total", outcome="delivered") == 0
    assert {
        status: value(after, "paymentcore_collections_total", status=status)
        for status in ("PENDING", "PROCESSING", "SUCCESS", "FAILED")
    } == {"PENDING": 1, "PROCESSING": 1, "SUCCESS": 1, "FAILED": 0}
    assert {
        status: value(after, "paymentcore_payouts_total", status=status)
        for status in ("PENDING", "SENT", "PAID", "FAILED", "REJECTED")
    } == {"PENDING": 1, "SENT": 1, "PAID": 1, "FAILED": 0, "REJECTED": 0}

    requests = "paymentcore_http_requests_total"
    assert value(after, requests, method="POST", route="/v1/collect/charge", status="202") == 1
    assert value(after, requests, method="POST", route="/v1/disburse", status="201") == 1
    collect_route, disburse_route = "/v1/collect/{reference}", "/v1/disburse/{reference}"
    assert value(after, requests, method="GET", route=collect_route, status="200") == polls["collect"]
    assert value(after, requests, method="GET", route=disburse_route, status="200") == polls["disburse"]
    assert value(after, requests, method="GET", route="unmatched", status="404") == 1
    assert total(after, requests) == total(before, requests) + sum(polls.values()) + 3
    assert (
        value(after, "paymentcore_http_request_duration_seconds_count", method="POST", route="/v1/disburse")
        == 1
    )
    routes = {dict(labels)["route"] for (name, labels) in after if name == requests}
    assert routes <= KNOWN_ROUTES, routes

    # no label anywhere carries a reference, a merchant id, a key or a phone number
    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
    for secret in (collection, payout, shop.merchant_id, shop.collect_key, shop.disburse_key, "670000001"):
        assert secret not in text

    # the JSON log: one object a line, one line per request, with its X-Request-Id
    assert server.stop() in STOPPED
    lines = [json.loads(line) for line in server.output().splitlines() if line.strip()]
    by_id = {line["requestId"]: line for line in lines if line.get("message") == "request"}
    charge_line = by_id[charge.headers["x-request-id"]]
    assert {k: charge_line[k] for k in ("method", "route", "status", "merchantId", "logger", "level")} == {
        "method": "POST",
        "route": "/v1/collect/charge",
        "status": 202,
        "merchantId": shop.merchant_id,
        "logger": "paymentcore.http",
        "level": "INFO",
    }
    assert isinstance(charge_line["durationMs"], int | float) and charge_line["durationMs"] >= 0
    payout_line = by_id[disburse.headers["x-request-id"]]
    assert (payout_line["route"], payout_line["status"]) == ("/v1/disburse", 201)
    assert len(by_id) == total(after, requests)  # every request answered so far, each once
    log_text = server.output()
    for secret in (shop.collect_key, shop.disburse_key, shop.secret, "670000001", "670000002", "Alice"):
        assert secret not in log_text


# --- the work gauges and counters with two processes on one database -------------------------------


def test_work_gauges_agree_across_processes_and_counters_are_per_process(
    tmp_path: Path, receiver: Receiver, processes: list[Process]
) -> None:
    db = tmp_path / "shared.db"
    shop = prepare(db, receiver.base + "/hang")
    port, server_metrics, worker_metrics = free_port(), free_port(), free_port()
    server = Process(
        db, "serve", "--port", str(port), "--metrics-port", str(server_metrics), "--no-worker",
        "--allow-private-webhooks",
    )  # fmt: skip
    worker = Process(
        db, "worker", "--metrics-port", str(worker_metrics), "--sandbox-delay", "0",
        "--allow-private-webhooks", "--webhook-retry-delays", "none",
    )  # fmt: skip
    processes += [server, worker]
    base = f"http://127.0.0.1:{port}"
    server.wait_until(lambda: healthy(base), "the server answering /healthz")
    worker.wait_until(lambda: bool(scrape(worker_metrics)), "the worker's metrics port")

    body = {"amount": 2500, "currency": "XAF", "country": "CM", "provider": "mtn_cm", "phone": "670000001"}
    charge = httpx.post(f"{base}/v1/collect/charge", content=wire.dumps(body), headers=auth(shop.collect_key))
    assert charge.status_code == 202, charge.text
    assert receiver.hanging.wait(20), worker.output()  # collect.succeeded is being delivered, and hangs

    def gauges(port: int) -> dict[str, tuple[float, float]]:
        now = scrape(port)
        return {
            kind: (
                value(now, "paymentcore_work_pending", kind=kind),
                value(now, "paymentcore_work_in_flight", kind=kind),
            )
            for kind in ("collections", "payouts", "deliveries")
        }

    holding = {"collections": (0.0, 0.0), "payouts": (0.0, 0.0), "deliveries": (0.0, 1.0)}
    assert gauges(worker_metrics) == holding  # the worker holds the delivery ...
    assert gauges(server_metrics) == holding  # ... and the server, which works on nothing, sees it too

    receiver.release.set()
    idle = {kind: (0.0, 0.0) for kind in ("collections", "payouts", "deliveries")}
    worker.wait_until(lambda: gauges(server_metrics) == idle, "the delivery recorded")
    assert gauges(worker_metrics) == idle

    # counters: what each process did itself (the server created the charge, the worker settled it)
    at_server, at_worker = scrape(server_metrics), scrape(worker_metrics)
    counted = "paymentcore_collections_total"
    assert [value(at_server, counted, status=s) for s in ("PENDING", "PROCESSING", "SUCCESS")] == [1, 0, 0]
    assert [value(at_worker, counted, status=s) for s in ("PENDING", "PROCESSING", "SUCCESS")] == [0, 1, 1]
    assert value(at_worker, "paymentcore_webhook_deliveries_total", outcome="delivered") == 1
    assert value(at_server, "paymentcore_webhook_deliveries_total", outcome="delivered") == 0
    assert total(at_worker, "paymentcore_http_requests_total") == 0  # the worker serves no API
    assert total(at_server, "paymentcore_http_requests_total", route="/v1/collect/charge") == 1
    assert worker.stop() == 0
    assert server.stop() in STOPPED


# --- /healthz follows the database ----------------------------------------------------------------


def test_healthz_turns_503_while_the_database_is_unreachable_and_200_when_it_is_back(
    tmp_path: Path, processes: list[Process]
) -> None:
    """The database's directory is renamed away (as a volume that goes away) and back.

    Connections the server opened before keep their open file, so this is exactly what /healthz must
    see through: it opens the file afresh, never creating it, so a file no longer at its path answers
    503. The server runs without the worker and gets no other request meanwhile, so nothing opens a
    new connection to the path while it is away.
    """
    folder = tmp_path / "data"
    folder.mkdir()
    db = folder / "pay.db"
    port = free_port()
    server = Process(db, "serve", "--port", str(port), "--no-worker")
    processes.append(server)
    base = f"http://127.0.0.1:{port}"
    server.wait_until(lambda: healthy(base), "the server answering /healthz")

    away = tmp_path / "away"
    folder.rename(away)
    try:
        for _ in range(3):
            started = time.monotonic()
            answer = httpx.get(f"{base}/healthz", timeout=5)
            elapsed = time.monotonic() - started
            assert answer.status_code == 503, answer.text
            assert elapsed < 1.0
            assert answer.json() == {
                "code": "SERVER_ERROR",
                "message": "The database is not reachable.",
                "requestId": answer.headers["x-request-id"],
            }
        assert not folder.exists()  # the health check created nothing in its place
    finally:
        away.rename(folder)
    started = time.monotonic()
    answer = httpx.get(f"{base}/healthz", timeout=5)
    assert (answer.status_code, answer.json()) == (200, {"status": "ok"})
    assert time.monotonic() - started < 1.0
    assert "health check failed" in server.output()


# --- the flags -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "status"),
    [
        (["serve", "--log-format", "xml"], 2),
        (["worker", "--metrics-port", "0"], 2),
        (["serve", "--metrics-port", "not-a-port"], 2),
        (["serve", "--port", "18999", "--metrics-port", "18999"], 1),
    ],
)
def test_bad_observability_flags_are_refused_in_one_line(
    tmp_path: Path, args: list[str], status: int
) -> None:
    db = tmp_path / "flags.db"
    done = subprocess.run(
        [sys.executable, "-m", "paymentcore_server", "--db", str(db), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == status, done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("error:")
    assert not db.exists()
