"""No number of misbehaving merchants, endpoints or providers delays anyone else (a real server).

The webhook endpoints of many merchants accept the connection and never answer (or answer after 20 s,
beyond the 10 s timeout), with events queued for each when the server starts. An unrelated merchant C
then charges, pays out and expects its webhook: each must happen at C's normal pace (within 6 s), and
C's event must show one attempt, DELIVERED. A mobile network (provider) that hangs must likewise leave
another provider's payouts at their normal pace. The server's threads and sockets stay bounded.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

import attrs
import httpx
import pytest

from paymentcore import Config, PaymentCore, wire
from paymentcore.testing import fund

from conftest import HTTP_ENGINES, postgres_url  # type: ignore[import-not-found, unused-ignore]

pytestmark = pytest.mark.slow

ON_TIME = 6.0  # seconds: C's charge, payout and webhook, each
START_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Receivers:
    """Webhook endpoints on one local server: ``/hang/N`` never answers, ``/slow/N`` answers after 20 s,
    ``/ok`` answers 204 at once and records each event's arrival."""

    def __init__(self) -> None:
        self.arrivals: dict[str, tuple[float, dict[str, Any]]] = {}  # event id -> (when, body)
        self.hung = 0  # requests held by /hang and /slow
        self.release = threading.Event()
        self._lock = threading.Lock()
        receivers = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path.startswith(("/hang", "/slow")):
                    with receivers._lock:
                        receivers.hung += 1
                    if self.path.startswith("/hang"):
                        receivers.release.wait(120)
                        return
                    receivers.release.wait(20)
                else:
                    event = wire.loads(body)
                    with receivers._lock:
                        receivers.arrivals.setdefault(str(event.get("eventId")), (time.monotonic(), event))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.request_queue_size = 1024
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


class Server:
    """One ``paymentcore serve`` on ``db`` with the sandbox answering at once."""

    def __init__(self, db: str, logs: Path, *extra: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = logs / "server.log"
        command = [sys.executable, "-m", "paymentcore_server", "--db", db, "serve", "--port", str(self.port)]
        command += ["--sandbox-delay", "0", "--allow-private-webhooks", *extra]
        self._log: IO[bytes] = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, cwd=logs
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"the server exited:\n{self.output()}")
            try:
                if httpx.get(f"{self.base}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.stop()
        pytest.fail(f"the server did not start:\n{self.output()}")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def resources(self) -> dict[str, int]:
        """The server process's threads, open sockets and resident memory (KiB), from /proc."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        fds = Path(f"/proc/{self.proc.pid}/fd")
        sockets = 0
        for fd in fds.iterdir():
            try:
                sockets += os.readlink(fd).startswith("socket:")
            except OSError:
                continue
        return {
            "threads": int(fields["Threads"].strip()),
            "sockets": sockets,
            "rss_kib": int(fields["VmRSS"].split()[0]),
        }

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()


@attrs.frozen
class Shop:
    merchant_id: str
    collect_key: str
    disburse_key: str


def library(db: str) -> PaymentCore:
    config = Config(sandbox_delay=0, allow_private_webhooks=True)
    if db.startswith("postgresql://"):
        return PaymentCore.postgresql(db, config=config)
    return PaymentCore.sqlite(db, config=config)


def make_shop(core: PaymentCore, name: str) -> Shop:
    merchant = core.operator.create_merchant(name, settlement_currency="XAF")
    keys = []
    for scope in ("collect", "disburse"):
        made = core.operator.create_key(merchant.id, [scope], per_minute=100_000, per_hour=1_000_000)
        keys.append(made.api_key)
    return Shop(merchant.id, keys[0], keys[1])


def queue_events(db: str, receivers: Receivers, *, hanging: int, slow: int, events: int) -> Shop:
    """Merchants whose endpoints hang (or are slow), ``events`` settled charges each, their
    ``collect.succeeded`` events queued and not yet attempted; and merchant C, endpoint healthy."""
    core = library(db)
    try:
        phones = iter(range(10_000_000))
        for n in range(hanging + slow):
            shop = make_shop(core, f"Misbehaving {n}")
            path = f"/hang/{n}" if n < hanging else f"/slow/{n}"
            core.webhooks.register(shop.merchant_id, url=receivers.base + path)
            for _ in range(events):
                core.collect.charge(
                    shop.merchant_id,
                    amount=1000,
                    currency="XAF",
                    country="CM",
                    provider="mtn_cm",
                    phone=f"67{next(phones):07d}",
                )
        # the charges settle here; the webhooks are left to the server
        while core.collect.process_due(1000):
            pass
        c = make_shop(core, "Merchant C")
        core.webhooks.register(c.merchant_id, url=receivers.base + "/ok")
        return c
    finally:
        core.close()


def auth(key: str, idem: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    if idem is not None:
        headers["Idempotency-Key"] = idem
    return headers


def seconds_until(http: httpx.Client, path: str, key: str, status: str, limit: float) -> float:
    started = time.monotonic()
    record: dict[str, Any] = {}
    while time.monotonic() - started < limit:
        record = http.get(path, headers=auth(key)).json()
        if record.get("status") == status:
            return time.monotonic() - started
        time.sleep(0.05)
    pytest.fail(f"{path} was {record.get('status')} after {limit} s, not {status}")


def c_on_time(server: Server, receivers: Receivers, c: Shop) -> dict[str, float]:
    """C charges, is paid out, and gets its webhook: each within ON_TIME; its event has one attempt."""
    with httpx.Client(base_url=server.base, timeout=10) as http:
        sent = time.monotonic()
        body = {
            "amount": 10_000,
            "currency": "XAF",
            "country": "CM",
            "provider": "mtn_cm",
            "phone": "677000001",
        }
        charged = http.post("/v1/collect/charge", content=wire.dumps(body), headers=auth(c.collect_key))
        assert charged.status_code == 202, charged.text
        reference = charged.json()["reference"]
        settled = seconds_until(http, f"/v1/collect/{reference}", c.collect_key, "SUCCESS", ON_TIME)

        payout = http.post(
            "/v1/disburse",
            content=wire.dumps({"amount": 4000, "currency": "XAF", "phone": "677000002"}),
            headers=auth(c.disburse_key, "c-payout"),
        )
        assert payout.status_code == 201, payout.text
        paid = seconds_until(
            http, f"/v1/disburse/{payout.json()['reference']}", c.disburse_key, "PAID", ON_TIME
        )

        arrived: tuple[float, dict[str, Any]] | None = None
        while time.monotonic() - sent < ON_TIME + 1:
            arrived = next(
                (got for got in receivers.arrivals.values() if got[1].get("invoiceReference") == reference),
                None,
            )
            if arrived is not None:
                break
            time.sleep(0.02)
        assert arrived is not None, f"C's collect.succeeded did not arrive:\n{server.output()}"
        webhook = arrived[0] - sent
        assert webhook < ON_TIME, webhook
        event: dict[str, Any] = {}
        while time.monotonic() - sent < ON_TIME + 1:  # the attempt is recorded just after it is answered
            event = http.get(f"/v1/events/{arrived[1]['eventId']}", headers=auth(c.collect_key)).json()
            if event["deliveryStatus"] != "PENDING":
                break
            time.sleep(0.02)
        assert event["deliveryStatus"] == "DELIVERED", event
        assert event["attempts"] == 1, event
        assert len(event["deliveries"]) == 1 and event["deliveries"][0]["responseStatus"] == 204, event
        return {"settled": settled, "paid": paid, "webhook": webhook}


@pytest.mark.parametrize("engine", HTTP_ENGINES)
def test_twelve_hanging_and_four_slow_endpoints_leave_merchant_c_on_time(
    engine: str, tmp_path: Path, receivers: Receivers
) -> None:
    db = postgres_url(tmp_path) if engine == "postgres" else str(tmp_path / "partitioned.db")
    c = queue_events(db, receivers, hanging=12, slow=4, events=12)
    server = Server(db, tmp_path)
    try:
        took = c_on_time(server, receivers, c)
        assert receivers.hung >= 1, "the misbehaving endpoints were never tried"
        print(f"\n{engine}: C on time with 12 hanging and 4 slow endpoints: {took}")
    finally:
        server.stop()


def test_a_hundred_hanging_endpoints_leave_c_on_time_with_bounded_threads_and_sockets(
    tmp_path: Path, receivers: Receivers
) -> None:
    db = str(tmp_path / "hundred.db")
    c = queue_events(db, receivers, hanging=100, slow=0, events=3)
    server = Server(db, tmp_path)
    try:
        took = c_on_time(server, receivers, c)
        time.sleep(3)  # every hanging endpoint has been tried by now, most of them held
        used = server.resources()
        print(f"\nC on time with 100 hanging endpoints: {took}; server resources: {used}")
        config = Config()
        # deliveries: fresh + slow pool; collections and payouts: fresh + slow pool each (threads only
        # start as work needs them), and the server's own few threads
        bound = config.delivery_concurrency + config.delivery_slow_concurrency
        bound += 2 * (config.worker_concurrency + config.network_slow_concurrency) + 32
        assert used["threads"] <= bound, used
        # every delivery in flight holds one socket at most, whatever the number of endpoints
        assert used["sockets"] <= config.delivery_concurrency + config.delivery_slow_concurrency + 32, used
        assert receivers.hung <= config.delivery_concurrency + config.delivery_slow_concurrency, (
            receivers.hung
        )
    finally:
        server.stop()


@pytest.mark.parametrize("engine", HTTP_ENGINES)
def test_a_provider_that_hangs_leaves_another_providers_payouts_on_time(engine: str, tmp_path: Path) -> None:
    db = postgres_url(tmp_path) if engine == "postgres" else str(tmp_path / "provider.db")
    core = library(db)
    try:
        shop = make_shop(core, "Two networks")
        fund(core, shop.merchant_id, "XAF", 1_000_000)
    finally:
        core.close()
    server = Server(db, tmp_path, "--sandbox-hang", "mtn_cm", "--sandbox-hang-seconds", "60")
    try:
        with httpx.Client(base_url=server.base, timeout=10) as http:
            stuck = []
            for n in range(40):  # more MTN payouts than a provider may hold at once
                answer = http.post(
                    "/v1/disburse",
                    content=wire.dumps({"amount": 1000, "currency": "XAF", "phone": f"6770001{n:02d}"}),
                    headers=auth(shop.disburse_key, f"mtn-{n}"),
                )
                assert answer.status_code == 201, answer.text
                stuck.append(answer.json()["reference"])
            time.sleep(0.5)  # MTN's calls are hanging now
            taken = []
            for n in range(3):
                answer = http.post(
                    "/v1/disburse",
                    content=wire.dumps({"amount": 1000, "currency": "XAF", "phone": f"69900000{n}"}),
                    headers=auth(shop.disburse_key, f"orange-{n}"),
                )
                assert answer.status_code == 201, answer.text
                reference = answer.json()["reference"]
                taken.append(
                    seconds_until(http, f"/v1/disburse/{reference}", shop.disburse_key, "PAID", ON_TIME)
                )
            for reference in stuck:  # MTN's payouts wait for their network, unharmed
                record = http.get(f"/v1/disburse/{reference}", headers=auth(shop.disburse_key)).json()
                assert record["status"] == "PENDING", record
            print(f"\n{engine}: Orange payouts PAID in {taken} s while MTN hangs")
    finally:
        server.stop()


def test_the_testing_kits_manual_network_hangs_one_provider_and_the_other_goes_on() -> None:
    from paymentcore import PayoutStatus
    from paymentcore.testing import ManualNetwork

    network = ManualNetwork(hang_timeout=30)
    network.hang("mtn_cm")
    core = PaymentCore.memory(config=Config(sandbox_delay=0), network=network)
    try:
        shop = core.operator.create_merchant("Shop", settlement_currency="XAF")
        fund(core, shop.id, "XAF", 1_000_000)
        core.start_worker(interval=0.02)
        held = [
            core.disburse.create(
                shop.id,
                amount=Decimal(1000),
                currency="XAF",
                phone=f"6770002{n:02d}",
                idempotency_key=f"m{n}",
            )
            for n in range(30)
        ]
        time.sleep(0.3)
        other = core.disburse.create(
            shop.id, amount=Decimal(1000), currency="XAF", phone="699000010", idempotency_key="orange"
        )
        started = time.monotonic()
        while time.monotonic() - started < ON_TIME:
            if other.reference in network.payouts:
                network.complete(other.reference)
            if core.disburse.get(shop.id, other.reference).status is PayoutStatus.PAID:
                break
            time.sleep(0.02)
        assert core.disburse.get(shop.id, other.reference).status is PayoutStatus.PAID
        assert network.hung_calls["mtn_cm"] >= 1
        assert all(core.disburse.get(shop.id, p.reference).status is PayoutStatus.PENDING for p in held)
    finally:
        network.unhang("mtn_cm")
        core.close()
