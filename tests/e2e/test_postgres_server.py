"""The real ``paymentcore`` command on PostgreSQL, and several API processes on one database.

- ``paymentcore serve --db postgresql://...`` serves a charge and a payout end to end;
- the operator commands take ``--db postgresql://...`` and a core already open sees their changes;
- two ``paymentcore serve`` processes on one database (SQLite file or PostgreSQL) accept exactly 4 of 40
  racing payouts of a quarter of the balance each, give a key of 30 a minute 30 requests in all, not 30
  each, and a restart keeps the count.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from paymentcore import Config, PaymentCore, PayoutStatus
from paymentcore.testing import fund

from conftest import postgres_url  # type: ignore[import-not-found, unused-ignore]

pytestmark = pytest.mark.slow

START_TIMEOUT = 30.0
WRONG_URL = "postgresql://nobody@127.0.0.1:1/none"  # nothing listens on port 1
SETTLE_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Serve:
    """One ``paymentcore serve`` process on ``db`` (a SQLite path or a PostgreSQL URL)."""

    def __init__(
        self, db: str, logs: Path, name: str, *, demo: bool = False, private_webhooks: bool = False
    ) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.out_path = logs / f"{name}.out"
        self.err_path = logs / f"{name}.err"
        command = [sys.executable, "-m", "paymentcore_server", "--db", db, "serve"]
        command += ["--port", str(self.port), "--sandbox-delay", "0"]
        if demo:
            command.append("--demo")
        if private_webhooks:
            command.append("--allow-private-webhooks")
        self._files: list[IO[bytes]] = [self.out_path.open("wb"), self.err_path.open("wb")]
        self.proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=self._files[0], stderr=self._files[1], cwd=logs
        )

    def output(self) -> str:
        return self.out_path.read_text(errors="replace") + self.err_path.read_text(errors="replace")

    def wait_ready(self) -> Serve:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"the server exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(f"{self.base}/healthz", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        pytest.fail(f"the server did not answer /healthz in {START_TIMEOUT} s:\n{self.output()}")

    def demo_keys(self) -> tuple[str, str]:
        found: dict[str, str] = {}
        for line in self.out_path.read_text().splitlines():
            for label in ("Collect key:", "Disburse key:"):
                if label in line:
                    found[label] = line.split(label, 1)[1].split()[0]
        assert set(found) == {"Collect key:", "Disburse key:"}, self.output()
        return found["Collect key:"], found["Disburse key:"]

    def stop(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=10)
        finally:
            for handle in self._files:
                handle.close()


def database(kind: str, tmp_path: Path) -> str:
    return postgres_url(tmp_path) if kind == "postgres" else str(tmp_path / "shared.db")


def wait_for(http: httpx.Client, path: str, key: str, status: str) -> dict[str, Any]:
    deadline = time.monotonic() + SETTLE_TIMEOUT
    record: dict[str, Any] = {}
    while time.monotonic() < deadline:
        record = http.get(path, headers={"Authorization": f"Bearer {key}"}).json()
        if record.get("status") == status:
            return record
        time.sleep(0.1)
    pytest.fail(f"{path} stayed {record.get('status')} (wanted {status}): {record}")


# --- serve on PostgreSQL -------------------------------------------------------------------------


def test_serve_on_postgresql_collects_and_pays_out_end_to_end(tmp_path: Path) -> None:
    url = postgres_url(tmp_path)
    server = Serve(url, tmp_path, "pg", demo=True)
    try:
        server.wait_ready()
        collect_key, disburse_key = server.demo_keys()
        with httpx.Client(base_url=server.base, timeout=30.0) as http:
            charge = http.post(
                "/v1/collect/charge",
                json={
                    "amount": 5000,
                    "currency": "XAF",
                    "country": "CM",
                    "provider": "mtn_cm",
                    "phone": "670000000",
                },
                headers={"Authorization": f"Bearer {collect_key}", "Idempotency-Key": "charge-1"},
            )
            assert charge.status_code == 202, charge.text
            reference = charge.json()["reference"]
            wait_for(http, f"/v1/collect/{reference}", collect_key, "SUCCESS")
            payout = http.post(
                "/v1/disburse",
                json={"amount": 1000, "currency": "XAF", "phone": "670000000"},
                headers={"Authorization": f"Bearer {disburse_key}", "Idempotency-Key": "payout-1"},
            )
            assert payout.status_code == 201, payout.text
            paid = wait_for(http, f"/v1/disburse/{payout.json()['reference']}", disburse_key, "PAID")
            assert paid["providerReference"]
    finally:
        server.stop()
    core = PaymentCore.postgresql(url, sender=None)
    try:
        assert core.check_all_ledgers()  # the books balance, read straight from the database
        (merchant,) = core.operator.list_merchants()
        (balance,) = core.operator.balances(merchant.id)
        assert balance.reserved == 0 and balance.available > 0
    finally:
        core.close()


# --- the operator commands -----------------------------------------------------------------------


def cli(db: str, cwd: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "paymentcore_server", "--db", db, *args, "--json"],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    assert done.stderr == "", (args, done.stderr)
    (line,) = done.stdout.splitlines()
    value: dict[str, Any] = json.loads(line, parse_float=Decimal)
    return value


def test_operator_commands_take_a_postgresql_url(tmp_path: Path) -> None:
    url = postgres_url(tmp_path)
    merchant_id = cli(url, tmp_path, "merchant", "create", "CLI Shop")["merchantId"]
    core = PaymentCore.postgresql(url, sender=None, config=Config(sandbox_delay=0))  # open before the rest
    try:
        created = cli(url, tmp_path, "key", "create", merchant_id, "--scope", "disburse", "--per-minute", "5")
        assert created["scopes"] == ["disburse"] and created["apiKey"]
        assert core.access.authenticate(created["apiKey"]).key.per_minute == 5
        assert (
            cli(
                url,
                tmp_path,
                "key",
                "rate-limit",
                created["keyId"],
                "--per-minute",
                "50",
                "--per-hour",
                "900",
            )["perMinute"]
            == 50
        )
        assert core.access.authenticate(created["apiKey"]).key.per_hour == 900

        assert cli(url, tmp_path, "merchant", "suspend", merchant_id)["approved"] is False
        assert cli(url, tmp_path, "merchant", "approve", merchant_id)["approved"] is True
        assert cli(url, tmp_path, "merchant", "fee", merchant_id, "--collect-percent", "2.5")[
            "collectFeePercent"
        ] == Decimal("2.5")
        assert cli(url, tmp_path, "platform", "payouts", "disable")["payoutsEnabled"] is False
        assert core.operator.settings().payouts_enabled is False
        assert cli(url, tmp_path, "platform", "payouts", "enable")["payoutsEnabled"] is True
        assert cli(url, tmp_path, "currency", "payouts", "close", "XAF")["closedCurrencies"] == ["XAF"]
        assert cli(url, tmp_path, "currency", "payouts", "open", "XAF")["closedCurrencies"] == []
        assert cli(url, tmp_path, "provider", "block", merchant_id, "orange_cm")["available"] is False
        assert cli(url, tmp_path, "provider", "unblock", merchant_id, "orange_cm")["available"] is True

        limits = cli(url, tmp_path, "limits", "set", merchant_id, "XAF", "--review-threshold", "500")
        assert limits
        fund(core, merchant_id, "XAF", 3000)
        held = core.disburse.create(
            merchant_id, amount=1000, currency="XAF", phone="670000000", idempotency_key="held"
        )
        assert held.awaiting_review
        released = cli(url, tmp_path, "payout", "release", held.reference)
        assert released["reference"] == held.reference
        assert core.disburse.get(merchant_id, held.reference).awaiting_review is False
        rejected_one = core.disburse.create(
            merchant_id, amount=1000, currency="XAF", phone="670000000", idempotency_key="held-2"
        )
        assert cli(url, tmp_path, "payout", "reject", rejected_one.reference)["status"] == "REJECTED"
        assert core.disburse.get(merchant_id, rejected_one.reference).status is PayoutStatus.REJECTED

        balances = cli(url, tmp_path, "balance", merchant_id)["balances"]
        assert [(b["currency"], b["available"], b["reserved"]) for b in balances] == [
            ("XAF", Decimal(2000), Decimal(1000))
        ]
    finally:
        core.close()


def test_a_wrong_postgresql_url_is_refused_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "paymentcore_server", "--db", WRONG_URL, "balance", "mer_x", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("error: cannot use the PostgreSQL database")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


# --- money and rate limits across API processes -----------------------------------------------------------


def crowd(
    bases: list[str],
    key: str,
    count: int,
    send: Callable[[httpx.Client, int, dict[str, str]], httpx.Response] | None = None,
) -> list[httpx.Response]:
    """``count`` requests at once (GET /v1/countries unless ``send`` makes another; it gets the
    client, the request's number and the auth header), spread over the servers in turn."""
    barrier = threading.Barrier(count)
    answers: list[httpx.Response] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    clients = [httpx.Client(base_url=base, timeout=30.0, limits=limits) for base in bases]

    def run(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            http, headers = clients[n % len(clients)], {"Authorization": f"Bearer {key}"}
            answer = send(http, n, headers) if send else http.get("/v1/countries", headers=headers)
        except BaseException as exc:
            with lock:
                errors.append(exc)
        else:
            with lock:
                answers.append(answer)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        for client in clients:
            client.close()
    assert errors == []
    return answers


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_two_api_processes_share_a_keys_30_a_minute_and_a_restart_keeps_the_count(
    kind: str, tmp_path: Path
) -> None:
    db = database(kind, tmp_path)
    first = Serve(db, tmp_path, "first", demo=True).wait_ready()
    second: Serve | None = None
    third: Serve | None = None
    try:
        second = Serve(db, tmp_path, "second").wait_ready()
        _, key = first.demo_keys()
        answers = crowd([first.base, second.base], key, 80)
        passed = [a for a in answers if a.status_code == 200]
        limited = [a for a in answers if a.status_code == 429]
        assert (len(passed), len(limited)) == (30, 50), sorted(a.status_code for a in answers)
        assert sorted(int(a.headers["x-ratelimit-remaining"]) for a in passed) == list(range(30))
        for answer in limited:
            assert answer.json()["code"] == "RATE_LIMITED" and int(answer.headers["retry-after"]) >= 1
        first.stop()
        second.stop()
        third = Serve(db, tmp_path, "third").wait_ready()  # a restart: the minute is still used up
        again = httpx.get(f"{third.base}/v1/countries", headers={"Authorization": f"Bearer {key}"})
        assert again.status_code == 429, again.text
    finally:
        for server in (first, second, third):
            if server is not None:
                server.stop()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_two_api_processes_accept_exactly_4_of_40_racing_quarter_payouts(kind: str, tmp_path: Path) -> None:
    db = database(kind, tmp_path)
    first = Serve(db, tmp_path, "first").wait_ready()
    second: Serve | None = None
    core = PaymentCore.postgresql(db, sender=None) if kind == "postgres" else PaymentCore.sqlite(db)
    try:
        second = Serve(db, tmp_path, "second").wait_ready()
        merchant = core.operator.create_merchant("Racing Shop", settlement_currency="XAF")
        key = core.operator.create_key(merchant.id, ["disburse"], per_minute=1000, per_hour=10_000)
        fund(core, merchant.id, "XAF", 4000)

        def payout(http: httpx.Client, n: int, headers: dict[str, str]) -> httpx.Response:
            body = {"amount": 1000, "currency": "XAF", "phone": f"6700001{n:02d}"}
            return http.post("/v1/disburse", json=body, headers={**headers, "Idempotency-Key": f"race-{n}"})

        answers = crowd([first.base, second.base], key.api_key, 40, payout)
        accepted = [a for a in answers if a.status_code == 201]
        refused = [a for a in answers if a.status_code != 201]
        assert len(accepted) == 4, sorted(a.status_code for a in answers)
        assert {(a.status_code, a.json()["code"]) for a in refused} == {(400, "INSUFFICIENT_BALANCE")}
        assert len({a.json()["reference"] for a in accepted}) == 4
        (balance,) = core.operator.balances(merchant.id)
        assert balance.available == 0 and balance.available + balance.reserved <= 4000
        assert core.check_all_ledgers()
    finally:
        for server in (first, second):
            if server is not None:
                server.stop()
        core.close()
