"""One merchant's bad webhook endpoint never holds up another merchant's money (a real server).

Merchant A's endpoint accepts the connection and never answers, with ten events queued; merchant B's
answers after 20 s, with ten events queued. Merchant C's charge must still settle, C's payout be paid
and C's webhook be delivered at the normal pace (about a second with the sandbox answering at once).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from paymentcore import PaymentCore, wire

pytestmark = pytest.mark.slow

NORMAL_PACE = 5.0  # seconds the issue allows beyond the normal pace
EVENTS_QUEUED = 10


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Receivers:
    """Three webhook endpoints on one local server: /hang, /slow (20 s) and /ok (records arrivals)."""

    def __init__(self) -> None:
        self.arrivals: dict[str, float] = {}  # event id -> when /ok got it
        self.release = threading.Event()
        receivers = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                if self.path == "/hang":
                    receivers.release.wait(60)  # never answers while the test runs
                    return
                if self.path == "/slow":
                    receivers.release.wait(20)
                else:
                    event = wire.loads(body)
                    receivers.arrivals.setdefault(str(event.get("eventId")), time.monotonic())
                self.send_response(204)
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
def receivers() -> Iterator[Receivers]:
    made = Receivers()
    yield made
    made.close()


def make_merchants(db: Path) -> dict[str, tuple[str, str]]:
    """Merchants A, B and C, each with a Collect and a Disburse key."""
    core = PaymentCore.sqlite(db)
    try:
        keys = {}
        for name in "ABC":
            merchant = core.operator.create_merchant(f"Shop {name}", settlement_currency="XAF")
            collect = core.operator.create_key(merchant.id, ["collect"])
            disburse = core.operator.create_key(merchant.id, ["disburse"])
            keys[name] = (collect.api_key, disburse.api_key)
        return keys
    finally:
        core.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, dict[str, tuple[str, str]]]]:
    db = tmp_path / "isolation.db"
    keys = make_merchants(db)
    port = free_port()
    log = (tmp_path / "server.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "paymentcore_server", "--db", str(db), "serve", "--port", str(port),
            "--sandbox-delay", "0", "--allow-private-webhooks",
        ],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("the server did not start")
    try:
        yield base, keys
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def charge(http: httpx.Client, key: str, phone: str, amount: int = 5000) -> str:
    body = {"amount": amount, "currency": "XAF", "country": "CM", "provider": "mtn_cm", "phone": phone}
    answer = http.post("/v1/collect/charge", content=wire.dumps(body), headers=auth(key))
    assert answer.status_code == 202, answer.text
    return str(answer.json()["reference"])


def auth(key: str, idempotency_key: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    return headers


def wait_for(http: httpx.Client, path: str, key: str, status: str, limit: float) -> float:
    """Seconds until the record at ``path`` has ``status`` (fails after ``limit``)."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if http.get(path, headers=auth(key)).json().get("status") == status:
            return time.monotonic() - started
        time.sleep(0.05)
    pytest.fail(f"{path} did not reach {status} within {limit} s")


def test_a_hanging_and_a_slow_endpoint_hold_up_no_other_merchant(
    server: tuple[str, dict[str, tuple[str, str]]], receivers: Receivers
) -> None:
    base, keys = server
    with httpx.Client(base_url=base, timeout=10) as http:
        for name, path in (("A", "/hang"), ("B", "/slow"), ("C", "/ok")):
            registered = http.put(
                "/v1/webhook", content=wire.dumps({"url": receivers.base + path}), headers=auth(keys[name][0])
            )
            assert registered.status_code == 200, registered.text
        # ten events each for A and B: ten settled charges on fresh numbers (3 prompts per number)
        queued = []
        for n in range(EVENTS_QUEUED):
            queued.append((charge(http, keys["A"][0], f"67100{n:04d}"), keys["A"][0]))
            queued.append((charge(http, keys["B"][0], f"67200{n:04d}"), keys["B"][0]))
        for reference, key in queued:
            wait_for(http, f"/v1/collect/{reference}", key, "SUCCESS", 15)

        # C's money moves at the normal pace while A's and B's deliveries hang
        sent = time.monotonic()
        reference = charge(http, keys["C"][0], "673000000", amount=10_000)
        settled_after = wait_for(http, f"/v1/collect/{reference}", keys["C"][0], "SUCCESS", 15)
        assert settled_after < NORMAL_PACE + 1
        payout = http.post(
            "/v1/disburse",
            content=wire.dumps({"amount": 4000, "currency": "XAF", "phone": "673000001"}),
            headers=auth(keys["C"][1], "c-payout"),
        )
        assert payout.status_code == 201, payout.text
        paid_after = wait_for(http, f"/v1/disburse/{payout.json()['reference']}", keys["C"][1], "PAID", 15)
        assert paid_after < NORMAL_PACE + 1
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and len(receivers.arrivals) < 3:  # collect + sent + succeeded
            time.sleep(0.05)
        assert len(receivers.arrivals) >= 3, "C's webhooks were not delivered"
        first = min(receivers.arrivals.values()) - sent
        assert first < settled_after + NORMAL_PACE


class SlowForOneNumber:
    """The sandbox, except that every call about one phone number takes ``delay`` seconds."""

    def __init__(self, slow_phone: str, delay: float) -> None:
        from paymentcore import SandboxNetwork

        self.inner = SandboxNetwork(delay_seconds=0)
        self.slow_phone = slow_phone
        self.delay = delay
        self.release = threading.Event()

    def _maybe_wait(self, phone: str | None) -> None:
        if phone == self.slow_phone:
            self.release.wait(self.delay)

    def request_collection(self, request: Any) -> None:
        self._maybe_wait(request.phone)
        self.inner.request_collection(request)

    def collection_status(self, request: Any, now: int) -> Any:
        self._maybe_wait(request.phone)
        return self.inner.collection_status(request, now)

    def send_payout(self, request: Any) -> Any:
        self._maybe_wait(request.phone)
        return self.inner.send_payout(request)

    def payout_status(self, request: Any, now: int) -> Any:
        self._maybe_wait(request.phone)
        return self.inner.payout_status(request, now)

    def money_moved(self, request: Any) -> bool:
        return self.inner.money_moved(request)


def test_one_slow_network_answer_does_not_hold_up_other_payouts_or_collections() -> None:
    from decimal import Decimal

    from paymentcore import CollectionStatus, Config, PayoutStatus
    from paymentcore.testing import fund

    network = SlowForOneNumber("670000099", delay=20)
    core = PaymentCore.memory(config=Config(sandbox_delay=0), network=network)
    try:
        shop = core.operator.create_merchant("Shop", settlement_currency="XAF")
        fund(core, shop.id, "XAF", 100_000)
        core.start_worker(interval=0.05)
        stuck = core.disburse.create(
            shop.id, amount=Decimal(1000), currency="XAF", phone="670000099", idempotency_key="slow"
        )
        stuck_charge = core.collect.charge(
            shop.id, amount=1000, currency="XAF", country="CM", provider="mtn_cm", phone="670000099"
        )
        time.sleep(0.3)  # the slow calls are in flight
        started = time.monotonic()
        payout = core.disburse.create(
            shop.id, amount=Decimal(1000), currency="XAF", phone="670000001", idempotency_key="fast"
        )
        collection = core.collect.charge(
            shop.id, amount=1000, currency="XAF", country="CM", provider="mtn_cm", phone="670000002"
        )
        while time.monotonic() - started < 10:
            paid = core.disburse.get(shop.id, payout.reference).status is PayoutStatus.PAID
            settled = core.collect.get(shop.id, collection.reference).status is CollectionStatus.SUCCESS
            if paid and settled:
                break
            time.sleep(0.02)
        assert core.disburse.get(shop.id, payout.reference).status is PayoutStatus.PAID
        assert core.collect.get(shop.id, collection.reference).status is CollectionStatus.SUCCESS
        assert time.monotonic() - started < 3
        assert core.disburse.get(shop.id, stuck.reference).status is PayoutStatus.PENDING
        assert core.collect.get(shop.id, stuck_charge.reference).status is CollectionStatus.PENDING
    finally:
        network.release.set()
        core.close()
