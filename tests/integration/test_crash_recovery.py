"""Crash recovery: SIGKILL a real server in the middle of a stream of payouts and charges, then restart it.

The server is the real ``paymentcore serve`` process, on a SQLite file (synchronous FULL, group commit)
and on PostgreSQL (``--db postgresql://...``).
Several client threads send payouts and charges, each with its own Idempotency-Key, and remember every
request that was answered 2xx. After a random delay the server is killed with SIGKILL, with no chance
to flush or clean up. Then, with the server dead, the database is checked directly (on SQLite ``PRAGMA
integrity_check``; the ledger invariant of every balance, every acknowledged request present); the
server is restarted on the same file (the keys persist, no ``--demo``), and over HTTP every
acknowledged request is still there: GET by reference answers it, and a replay with the same key
answers the same reference and body. This is repeated with different timings. At the end the restarted
worker finishes the work, and the journal proves that no payout's money moved twice: per payout one
reservation and at most one post or release, and the paid-out sum is the sum of the PAID payouts.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

import attrs
import httpx
import pytest

from paymentcore import PaymentCore
from paymentcore._domain.models import Scope

from conftest import HTTP_ENGINES, postgres_url  # type: ignore[import-not-found, unused-ignore]

pytestmark = pytest.mark.slow

START_TIMEOUT = 20.0
SETTLE_TIMEOUT = 20.0
CLIENT_THREADS = 4
# Different timings for each kill, counted once the stream flows: early, a little later, well into it.
KILL_DELAYS = (0.1, 0.4, 0.9)
MIN_ACKED_BEFORE_DELAY = 5
FUNDING_CHARGES = 2
FUNDING_AMOUNT = 1_000_000  # XAF, each
PAYOUT_PHONES = ("670000000", "670000021", "670000022", "670000023")
# the payout's final state once the worker is done, by the sandbox rule of its number (CONTRACT §3)
SETTLED_STATUS = {"00": "PAID", "21": "FAILED", "22": "FAILED", "23": "SENT"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PhoneBook:
    """Fresh MTN Cameroon numbers that always succeed, so no number hits the prompt limit (3 per 5 min)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._numbers = itertools.count(1000)

    def next(self) -> str:
        with self._lock:
            while True:
                number = f"67{next(self._numbers):07d}"
                if number[-2:] not in ("11", "12", "13"):
                    return number


# --- the server process ---------------------------------------------------------------------------


class Server:
    """One ``paymentcore serve`` process; its stdout and stderr go to files (no pipe can fill up)."""

    def __init__(self, db: str, logs: Path, name: str, *, demo: bool) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.out_path = logs / f"{name}.out"
        self.err_path = logs / f"{name}.err"
        command = [
            sys.executable,
            "-m",
            "paymentcore_server",
            "--db",
            db,
            "serve",
            "--port",
            str(self.port),
            "--sandbox-delay",
            "0",
        ]
        if demo:
            command.append("--demo")
        self._files: list[IO[bytes]] = [self.out_path.open("wb"), self.err_path.open("wb")]
        self.proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=self._files[0], stderr=self._files[1]
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.out_path.read_text(errors="replace") + self.err_path.read_text(errors="replace")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"the server exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(f"{self.base}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        pytest.fail(f"the server did not answer /healthz in {START_TIMEOUT} s:\n{self.output()}")

    def demo_keys(self) -> tuple[str, str]:
        """The Collect and Disburse keys printed by ``--demo`` (first token after the colon)."""
        found: dict[str, str] = {}
        for line in self.out_path.read_text().splitlines():
            for label in ("Collect key:", "Disburse key:"):
                if label in line:
                    found[label] = line.split(label, 1)[1].split()[0]
        assert set(found) == {"Collect key:", "Disburse key:"}, self.output()
        return found["Collect key:"], found["Disburse key:"]

    def kill(self) -> None:
        """SIGKILL: no signal handler, no lifespan shutdown, no flush."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        """A graceful stop (SIGTERM), falling back to SIGKILL."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(timeout=10)
        finally:
            for handle in self._files:
                handle.close()


# --- the client side ------------------------------------------------------------------------------


@attrs.frozen
class Acked:
    """A request the server answered 2xx: it must survive any crash that follows."""

    kind: str  # "payout" or "charge"
    path: str
    api_key: str
    idempotency_key: str
    body: dict[str, Any]
    status: int
    answer: dict[str, Any]

    @property
    def reference(self) -> str:
        reference: str = self.answer["reference"]
        return reference

    @property
    def get_path(self) -> str:
        return ("/v1/disburse/" if self.kind == "payout" else "/v1/collect/") + self.reference


@attrs.define
class Stream:
    """What the client threads saw during one life of the server."""

    acked: list[Acked] = attrs.Factory(list)
    refused: Counter[str] = attrs.Factory(Counter)  # non-2xx answers by code
    unexpected: list[str] = attrs.Factory(list)
    lock: threading.Lock = attrs.Factory(threading.Lock)


def headers(api_key: str, idempotency_key: str | None = None) -> dict[str, str]:
    result = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    if idempotency_key is not None:
        result["Idempotency-Key"] = idempotency_key
    return result


def post(http: httpx.Client, path: str, api_key: str, idem: str, body: dict[str, Any]) -> httpx.Response:
    return http.post(path, content=json.dumps(body), headers=headers(api_key, idem))


def client_loop(
    base: str, collect_key: str, disburse_key: str, phones: PhoneBook, seed: int, stream: Stream
) -> None:
    """Send payouts (mostly) and charges until the server goes away."""
    rng = random.Random(seed)
    with httpx.Client(base_url=base, timeout=10.0) as http:
        while True:
            idem = f"crash-{uuid.uuid4()}"
            if rng.random() < 0.7:
                kind, path, api_key = "payout", "/v1/disburse", disburse_key
                body: dict[str, Any] = {
                    "amount": rng.randrange(100, 1000),
                    "currency": "XAF",
                    "phone": rng.choice(PAYOUT_PHONES),
                    "merchantReference": idem,
                }
            else:
                kind, path, api_key = "charge", "/v1/collect/charge", collect_key
                body = {
                    "amount": rng.randrange(100, 5000),
                    "currency": "XAF",
                    "country": "CM",
                    "provider": "mtn_cm",
                    "phone": phones.next(),
                }
            try:
                response = post(http, path, api_key, idem, body)
            except httpx.TransportError:
                return  # the server is gone (or going): this request is not acknowledged
            with stream.lock:
                if 200 <= response.status_code < 300:
                    stream.acked.append(
                        Acked(kind, path, api_key, idem, body, response.status_code, response.json())
                    )
                elif response.status_code == 400 and response.json().get("code") == "INSUFFICIENT_BALANCE":
                    stream.refused["INSUFFICIENT_BALANCE"] += 1
                else:
                    stream.unexpected.append(f"{path} {response.status_code} {response.text}")


def run_stream_then_kill(
    server: Server, keys: tuple[str, str], phones: PhoneBook, delay: float, rng: random.Random
) -> Stream:
    stream = Stream()
    threads = [
        threading.Thread(
            target=client_loop,
            args=(server.base, keys[0], keys[1], phones, rng.randrange(1 << 30), stream),
            name=f"crash-client-{n}",
        )
        for n in range(CLIENT_THREADS)
    ]
    for thread in threads:
        thread.start()
    try:
        # the stream is flowing (a few answers are in) before the delay that picks the moment to kill
        deadline = time.monotonic() + START_TIMEOUT
        while len(stream.acked) < MIN_ACKED_BEFORE_DELAY and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(delay)
    finally:
        server.kill()
        for thread in threads:
            thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    return stream


# --- checks on the file, with the server down -----------------------------------------------------


def is_postgres(db: str) -> bool:
    return db.startswith(("postgresql://", "postgres://"))


def query(db: str, sql: str) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` read straight from the database, past the library."""
    if is_postgres(db):
        import psycopg

        with psycopg.connect(db, autocommit=True) as pg:
            return list(pg.execute(sql).fetchall())
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


@contextlib.contextmanager
def library(db: str) -> Iterator[PaymentCore]:
    core = PaymentCore.postgresql(db, sender=None) if is_postgres(db) else PaymentCore.sqlite(db, sender=None)
    try:
        yield core
    finally:
        core.close()


def payout_rows(db: str) -> dict[str, dict[str, Any]]:
    rows = query(db, "SELECT reference, status, amount, phone, resolution, next_check_at FROM payouts")
    return {
        r[0]: {"status": r[1], "amount": r[2], "phone": r[3], "resolution": r[4], "next_check_at": r[5]}
        for r in rows
    }


def check_file(db: str, merchant_id: str, acked: list[Acked]) -> None:
    """With no server running: the file is sound, the books balance, nothing acknowledged is missing."""
    if not is_postgres(db):
        assert query(db, "PRAGMA integrity_check") == [("ok",)]
    with library(db) as core:
        core.check_all_ledgers()  # raises LedgerInvariantError when the books are off
        with core.store.read() as tx:
            for ack in acked:
                record = (
                    tx.payouts.get(ack.reference)
                    if ack.kind == "payout"
                    else tx.collections.get(ack.reference)
                )
                assert record is not None, f"acknowledged {ack.kind} {ack.reference} was lost"
                assert record.merchant_id == merchant_id
                assert tx.idempotency.get(merchant_id, ack.idempotency_key) is not None
            entries = tx.ledger.entries(merchant_id, "XAF")
            collections = {
                ack.reference: tx.collections.get(ack.reference) for ack in acked if ack.kind == "charge"
            }
    check_journal(db, entries_by_reference(entries), collections)


def entries_by_reference(entries: list[Any]) -> dict[str, list[str]]:
    kinds: dict[str, list[str]] = {}
    for entry in entries:
        kinds.setdefault(entry.reference, []).append(entry.kind)
    return kinds


def check_journal(db: str, kinds: dict[str, list[str]], collections: dict[str, Any]) -> None:
    """Every payout has its one reservation and resolves at most once; a collection is credited once."""
    payouts = payout_rows(db)
    for reference, payout in payouts.items():
        moves = kinds.get(reference, [])
        assert moves[:1] == ["reserve"] and len(moves) <= 2, (reference, moves)
        assert moves.count("reserve") == 1, (reference, moves)
        expected = {None: [], "POSTED": ["post"], "RELEASED": ["release"]}[payout["resolution"]]
        assert moves[1:] == expected, (reference, payout, moves)
        if payout["status"] == "PAID":
            assert moves == ["reserve", "post"], (reference, moves)
    for reference, moves in kinds.items():
        if reference.startswith("PO-"):
            assert reference in payouts, f"ledger entries {moves} for a payout that does not exist"
        elif reference.startswith("REQ-"):
            assert moves == ["credit"], (reference, moves)
    for reference, collection in collections.items():
        credited = kinds.get(reference, [])
        assert credited == (["credit"] if collection.status.value == "SUCCESS" else []), (
            reference,
            collection.status,
            credited,
        )


# --- checks over HTTP, after a restart ------------------------------------------------------------


def check_over_http(server: Server, acked: list[Acked]) -> None:
    """GET answers each acknowledged request; a replay with its key answers the same reference and body."""

    def check_share(share: list[Acked]) -> list[str]:
        problems = []
        with httpx.Client(base_url=server.base, timeout=10.0) as http:
            for ack in share:
                got = http.get(ack.get_path, headers=headers(ack.api_key))
                if got.status_code != 200 or got.json()["reference"] != ack.reference:
                    problems.append(f"GET {ack.get_path}: {got.status_code} {got.text}")
                replay = post(http, ack.path, ack.api_key, ack.idempotency_key, ack.body)
                if replay.status_code != ack.status or replay.json() != ack.answer:
                    problems.append(f"replay {ack.idempotency_key}: {replay.status_code} {replay.text}")
        return problems

    shares = [acked[n::CLIENT_THREADS] for n in range(CLIENT_THREADS)]
    with ThreadPoolExecutor(max_workers=CLIENT_THREADS) as pool:
        problems = [p for found in pool.map(check_share, shares) for p in found]
    assert problems == [], problems[:5]


def fund_merchant(server: Server, collect_key: str, phones: PhoneBook) -> None:
    with httpx.Client(base_url=server.base, timeout=10.0) as http:
        for n in range(FUNDING_CHARGES):
            body = {
                "amount": FUNDING_AMOUNT,
                "currency": "XAF",
                "country": "CM",
                "provider": "mtn_cm",
                "phone": phones.next(),
            }
            assert post(http, "/v1/collect/charge", collect_key, f"fund-{n}", body).status_code == 202
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while time.monotonic() < deadline:
            rows = http.get("/v1/account/balances", headers=headers(collect_key)).json()["balances"]
            available = sum(int(row["available"]) for row in rows if row["currency"] == "XAF")
            if available >= FUNDING_CHARGES * FUNDING_AMOUNT:
                return
            time.sleep(0.05)
    pytest.fail("the funding charges did not settle")


def raise_ceilings(db: str, api_keys: tuple[str, str]) -> str:
    """The operator lifts the keys' rate limits (read by the server at once); returns the merchant id."""
    with library(db) as core:
        merchant_id = ""
        for api_key in api_keys:
            principal = core.access.authenticate(api_key)
            core.operator.set_rate_limit(principal.key.id, per_minute=1_000_000, per_hour=1_000_000)
            merchant_id = principal.merchant.id
        scopes = {s for k in api_keys for s in core.access.authenticate(k).key.scopes}
        assert scopes == {Scope.COLLECT, Scope.DISBURSE}
    return merchant_id


def settle_payouts(server: Server, db: str) -> dict[str, dict[str, Any]]:
    """Let the restarted worker finish every payout it can.

    A payout claimed by the killed process keeps that claim (a 30-second lease) until it runs out; the
    dead process cannot use it, so the test ends the lease early with ``make_due`` instead of waiting.
    The worker may then hand the same reference to the network again, which the network treats as
    the same payment (the reference is its idempotency key).
    """
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while True:
        payouts = payout_rows(db)
        open_ = {
            ref: p
            for ref, p in payouts.items()
            if p["status"] == "PENDING" or (p["status"] == "SENT" and not p["phone"].endswith("23"))
        }
        if not open_:
            return payouts
        if time.monotonic() > deadline:
            pytest.fail(f"payouts still open after {SETTLE_TIMEOUT} s: {list(open_.items())[:5]}")
        now_ms = time.time_ns() // 1_000_000
        leased = [ref for ref, p in open_.items() if (p["next_check_at"] or 0) > now_ms + 2000]
        if leased:
            with library(db) as core:
                for ref in leased:
                    core.make_due(ref)
        time.sleep(0.1)
        assert server.proc.poll() is None, server.output()


def server_note(server: Server) -> str:
    return f"the stream did not get going:\n{server.output()}"


@pytest.mark.parametrize("engine", HTTP_ENGINES)
def test_sigkill_mid_stream_loses_nothing_acknowledged_and_moves_no_money_twice(
    engine: str, tmp_path: Path
) -> None:
    db = postgres_url(tmp_path) if engine == "postgres" else str(tmp_path / "crash.db")
    rng = random.Random()
    phones = PhoneBook()
    servers: list[Server] = []
    acked: list[Acked] = []
    try:
        first = Server(db, tmp_path, "life-0", demo=True)
        servers.append(first)
        first.wait_ready()
        keys = first.demo_keys()
        merchant_id = raise_ceilings(db, keys)
        fund_merchant(first, keys[0], phones)
        current = first
        for life, base_delay in enumerate(KILL_DELAYS, start=1):
            delay = base_delay + rng.uniform(0, 0.1)
            stream = run_stream_then_kill(current, keys, phones, delay, rng)
            assert stream.unexpected == [], stream.unexpected[:5]
            assert len(stream.acked) >= MIN_ACKED_BEFORE_DELAY, server_note(current)
            acked.extend(stream.acked)
            check_file(db, merchant_id, acked)

            current = Server(db, tmp_path, f"life-{life}", demo=False)
            servers.append(current)
            current.wait_ready()
            check_over_http(current, stream.acked)

        payouts = settle_payouts(current, db)
        current.stop()
        assert current.proc.returncode is not None

        check_file(db, merchant_id, acked)
        for ack in acked:
            if ack.kind == "payout":
                tail = ack.body["phone"][-2:]
                assert payouts[ack.reference]["status"] == SETTLED_STATUS[tail], (ack, payouts[ack.reference])
        with library(db) as core:
            balance = core.check_ledger(merchant_id, "XAF")
            with core.store.read() as tx:
                entries = tx.ledger.entries(merchant_id, "XAF")
        posted = [e for e in entries if e.kind == "post"]
        assert len({e.reference for e in posted}) == len(posted)  # one post per reference
        paid = [p for p in payouts.values() if p["status"] == "PAID"]
        assert {e.reference for e in posted} == {ref for ref, p in payouts.items() if p["status"] == "PAID"}
        assert balance.paid_out == sum(p["amount"] for p in paid)
        assert balance.reserved == sum(p["amount"] for p in payouts.values() if p["resolution"] is None)
        assert len(acked) == len({a.reference for a in acked})  # no two acknowledgements share a reference
    finally:
        for server in servers:
            server.close()
