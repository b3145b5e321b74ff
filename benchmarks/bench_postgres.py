"""PostgreSQL with the network in (issue 26): ``python benchmarks/bench_postgres.py`` (about 2.5 minutes).

Real ``paymentcore serve`` processes (``python -m paymentcore_server --db URL serve``, the worker in the
process as ``serve`` runs it by default) on scratch schemas of ``--postgres URL`` (default:
``$PAYMENTCORE_BENCH_POSTGRES_URL``, else ``$PAYMENTCORE_TEST_POSTGRES_URL``), all dropped at the end.
One run, in interleaved rounds (each round runs every figure once; the order of the loads is reversed
every other round):

a. through :mod:`latency_proxy` (``--latency-ms``, 1 ms each way by default), one server process:
   (i)   payouts one at a time (c=1) on a server started with ``--no-worker`` behind a proxy of its own,
         so that the proxy's counter around each request counts that request's round trips and nothing
         else: latency median and p90, round trips per payout (median);
   (ii)  payouts/s with 16 clients at once, all paying from ONE merchant (a key each);
   (iii) payouts/s with 16 clients at once, each paying from a merchant of its own; ratio (iii)/(ii);
         (ii) and (iii) run on a server with its worker, behind a second proxy, whose counter also gives
         the round trips per payout under load (the worker's included);
b. without the proxy, 32 clients: POST /v1/disburse on PostgreSQL against SQLite (synchronous=FULL)
   with the same load, and 1, 2 and 3 server processes on one PostgreSQL database, the clients split
   evenly over the processes' ports; ratios PG/SQLite, 2/1 and 3/1. The clients pay from 32 merchants
   (client i from merchant i), so the payouts are spread over merchants.

Each window starts once the servers' workers have finished the previous window's background work
(:func:`settle`), so that it measures its own server(s) only; per window the report gives the machine's
busy share and the CPU a payout of the servers (their workers in) and of a local PostgreSQL.

The load is a closed loop of keep-alive HTTP/1.1 clients (this script run with ``--generate``, in a
process of its own). Every POST /v1/disburse pays 100 XAF with a unique Idempotency-Key.

At the end, the correctness gate on every database: every accepted payout (201) stored once and nothing
else stored, balances conserved per merchant (credited = available + reserved + paid out; reserved =
the open payouts), ``core.check_all_ledgers()``. Writes ``--results`` (default
benchmarks/results/postgres.json) and prints a table. Exits 0 when the gate passes (whatever the
figures), 1 when it fails, 2 when the run broke. ``--quick`` (CI): one short round, tiny counts.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import itertools
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import bench_core
from bench_load import PAYOUT_AMOUNT, _read_response, payout_body, percentile
from latency_proxy import LatencyProxy
from run import Gate, PostgresSchemas, Reader, free_port, machine, postgres_from_env, postgres_version

HERE = Path(__file__).resolve().parent
HOST = "127.0.0.1"
DEFAULT_RESULTS = HERE / "results" / "postgres.json"
RESULT_MARK = "BENCH_RESULT "
PROXY_CLIENTS = 16  # (ii) and (iii)
SPREAD_CLIENTS = 32  # part b
MAX_PROCESSES = 3
WINDOWS = ("one-merchant", "own-merchant", "sqlite-full", *(f"pg-{n}" for n in range(1, MAX_PROCESSES + 1)))
SETTLE_CAP = 120.0  # seconds: the longest wait for one window's background work before the next window


@dataclass(frozen=True)
class Plan:
    quick: bool
    rounds: int
    duration: float  # seconds per load run
    serial_payouts: int  # (i): payouts one at a time per round
    latency_ms: float


FULL = Plan(quick=False, rounds=3, duration=3.0, serial_payouts=30, latency_ms=1.0)
QUICK = Plan(quick=True, rounds=1, duration=0.5, serial_payouts=4, latency_ms=1.0)


# --- the load generator (``--generate``, a process of its own) ------------------------------------


@dataclass
class Load:
    """One load run's answers; latencies in ms."""

    concurrency: int
    requests: int
    duration_s: float
    rps: float
    p50_ms: float
    p90_ms: float
    accepted: int  # 201
    non_2xx: int
    errors: int  # broken connections (a request may have been in flight)
    statuses: dict[str, int] = field(default_factory=dict)


async def generate(
    ports: list[int], tokens: list[str], concurrency: int, duration: float, prefix: str
) -> Load:
    """``concurrency`` closed-loop connections; connection i sends to ``ports[i % len(ports)]`` with
    ``tokens[i % len(tokens)]`` until ``duration`` is over."""
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    errors = 0
    started = time.perf_counter()
    deadline = started + duration

    async def connection(i: int) -> None:
        nonlocal errors
        port = ports[i % len(ports)]
        token = tokens[i % len(tokens)]
        reader, writer = await asyncio.open_connection(HOST, port)
        n = 0
        try:
            while time.perf_counter() < deadline:
                n += 1
                key = f"{prefix}-{i}-{n}"
                body = payout_body(key)
                head = (
                    f"POST /v1/disburse HTTP/1.1\r\nHost: {HOST}:{port}\r\nAuthorization: Bearer {token}\r\n"
                    f"Content-Type: application/json\r\nIdempotency-Key: {key}\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n"
                )
                begin = time.perf_counter()
                writer.write(head.encode() + body)
                try:
                    status = await _read_response(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    errors += 1
                    writer.close()
                    reader, writer = await asyncio.open_connection(HOST, port)
                    continue
                latencies.append((time.perf_counter() - begin) * 1000)
                statuses[str(status)] = statuses.get(str(status), 0) + 1
        finally:
            writer.close()

    await asyncio.gather(*(connection(i) for i in range(concurrency)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return Load(
        concurrency=concurrency,
        requests=len(latencies),
        duration_s=elapsed,
        rps=len(latencies) / elapsed if elapsed > 0 else 0.0,
        p50_ms=percentile(latencies, 50),
        p90_ms=percentile(latencies, 90),
        accepted=statuses.get("201", 0),
        non_2xx=sum(n for s, n in statuses.items() if not s.startswith("2")),
        errors=errors,
        statuses=statuses,
    )


def run_generator(
    ports: list[int], tokens: list[str], concurrency: int, duration: float, prefix: str
) -> Load:
    spec = {
        "ports": ports,
        "tokens": tokens,
        "concurrency": concurrency,
        "duration": duration,
        "prefix": prefix,
    }
    command = [sys.executable, str(Path(__file__).resolve()), "--generate", json.dumps(spec)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=duration + 120, check=False)
    lines = [x for x in done.stdout.splitlines() if x.startswith(RESULT_MARK)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the load generator failed: {done.stderr.strip()[-2000:]}")
    return Load(**json.loads(lines[-1][len(RESULT_MARK) :]))


# --- databases and servers -----------------------------------------------------------------------


@dataclass
class Database:
    """A prepared database: its merchants, one API key per client slot, and what the load was told."""

    label: str
    db: str  # a PostgreSQL URL or a SQLite path
    merchants: list[str]
    keys: dict[str, list[str]]  # group -> API keys (a group is what one load uses)
    accepted: int = 0
    in_flight: int = 0  # requests that may have been in flight when a connection broke


def prepare(label: str, db: str, groups: dict[str, tuple[int, int]]) -> Database:
    """``groups``: name -> (merchants, keys per merchant); each group gets merchants of its own."""
    core = bench_core.open_core(db)
    merchants: list[str] = []
    keys: dict[str, list[str]] = {}
    try:
        for group, (count, per_merchant) in groups.items():
            keys[group] = []
            for _ in range(count):
                merchant = bench_core.new_merchant(core, name=f"Bench {label} {group}")
                merchants.append(merchant)
                for _ in range(per_merchant):
                    key = core.operator.create_key(
                        merchant, ["disburse"], per_minute=bench_core.HUGE, per_hour=bench_core.HUGE
                    )
                    keys[group].append(key.api_key)
    finally:
        core.close()
    return Database(label, db, merchants, keys)


@dataclass
class Server:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path


def start_server(name: str, db: str, logs: Path, *, worker: bool) -> Server:
    """``paymentcore --db DB serve`` as a user runs it (the worker in the process unless ``worker`` is
    off)."""
    port = free_port()
    log = logs / f"{name}.log"
    command = [
        sys.executable,
        "-m",
        "paymentcore_server",
        "--db",
        db,
        "serve",
        "--host",
        HOST,
        "--port",
        str(port),
    ]
    if not worker:
        command.append("--no-worker")
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=logs
        )
    return Server(name, port, process, log)


def wait_ready(server: Server, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"server {server.name} exited: {server.log.read_text()[-2000:]}")
        try:
            conn = http.client.HTTPConnection(HOST, server.port, timeout=2)
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            conn.close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"server {server.name} did not answer within {timeout:.0f} s")


def stop_server(server: Server) -> None:
    if server.process.poll() is None:
        server.process.terminate()
        try:
            server.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait(timeout=20)


def through(url: str, port: int) -> str:
    """``url`` with its host and port replaced by the proxy's."""
    parts = urlsplit(url)
    userinfo, at, _ = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{userinfo}{at}{HOST}:{port}"))


def target_of(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if not parts.hostname:
        raise SystemExit("error: the PostgreSQL URL needs a host (a TCP server) to put the proxy in front of")
    return parts.hostname, parts.port or 5432


# --- (i): payouts one at a time, the proxy's counter around each --------------------------------


def serial_payouts(
    port: int, token: str, proxy: LatencyProxy, count: int, prefix: str, db: Database
) -> dict[str, list[float]]:
    """``count`` payouts one after the other on one keep-alive connection. A payout's round trips: the
    counter's move from the start of its request to the start of the next (so that what the server
    does after answering is counted too; a last short pause closes the last one)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=60)
    latencies: list[float] = []
    marks: list[int] = []
    try:
        for n in range(count):
            key = f"{prefix}-{n}"
            body = payout_body(key)
            headers = {
                "Authorization": f"Bearer {token}",
                "Idempotency-Key": key,
                "Content-Type": "application/json",
            }
            marks.append(proxy.counts().round_trips)
            begin = time.perf_counter()
            conn.request("POST", "/v1/disburse", body=body, headers=headers)
            response = conn.getresponse()
            response.read()
            latencies.append((time.perf_counter() - begin) * 1000)
            if response.status == 201:
                db.accepted += 1
            else:
                raise RuntimeError(f"a serial payout answered {response.status}")
        time.sleep(0.05)
        marks.append(proxy.counts().round_trips)
    finally:
        conn.close()
    return {
        "latency_ms": latencies,
        "round_trips": [float(b - a) for a, b in itertools.pairwise(marks)],
    }


def _reader(db: Database) -> Reader:
    url = db.db if bench_core.is_postgres(db.db) else None
    return Reader(bench_core.Prepared(Path(db.db), "", {}, Path("-"), Path("-"), [], bench_core.FUNDING, url))


def open_work(db: Database) -> int:
    """The background work still to do in ``db``: payouts the worker has a step for (sending, checking)
    and events not yet delivered or given up."""
    reader = _reader(db)
    try:
        rows = reader.rows(
            "SELECT (SELECT count(*) FROM payouts WHERE next_check_at IS NOT NULL)"
            " + (SELECT count(*) FROM events WHERE status = 'PENDING')",
            (),
        )
    finally:
        reader.close()
    return int(rows[0][0])


def settle(databases: list[Database], cap: float = SETTLE_CAP) -> float | None:
    """Wait until the servers' workers have finished the background work of every database (the
    previous window's payouts settled, their events delivered): seconds waited, or None at ``cap``.

    Each window then measures its own server(s) only: on this machine's few cores a worker still
    settling the previous window's payouts (through the proxy, or on the other engine) takes CPU from
    the window being measured, and which window pays depends on the order."""
    started = time.monotonic()
    while time.monotonic() - started < cap:
        if all(open_work(db) == 0 for db in databases):
            return time.monotonic() - started
        time.sleep(0.05)
    return None


# --- where the CPU went in a window --------------------------------------------------------------

TICK = os.sysconf("SC_CLK_TCK")


def _machine_ticks() -> tuple[int, int]:
    """(busy, all) CPU ticks of the whole machine since boot, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


def _process_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (0 once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _postgres_pids() -> list[int]:
    """The local PostgreSQL server's processes (none when it runs elsewhere)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(b"postgres"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@dataclass
class CpuMark:
    machine: tuple[int, int]
    servers: float
    postgres: float

    @classmethod
    def take(cls, servers: list[Server]) -> CpuMark:
        return cls(
            _machine_ticks(),
            sum(_process_seconds(s.process.pid) for s in servers),
            sum(_process_seconds(pid) for pid in _postgres_pids()),
        )

    def since(self, before: CpuMark, payouts: int) -> dict[str, float | None]:
        """The machine's busy share over the window, and the CPU ms a payout of every server process
        (their workers included) and of PostgreSQL (None when it is not on this machine)."""
        busy, total = (a - b for a, b in zip(self.machine, before.machine, strict=True))
        per = 1000 / payouts if payouts else None
        postgres = self.postgres - before.postgres
        return {
            "machine_busy": busy / total if total else None,
            "server_cpu_ms_per_payout": None if per is None else (self.servers - before.servers) * per,
            "postgres_cpu_ms_per_payout": None if per is None or postgres <= 0 else postgres * per,
        }


# --- the correctness gate --------------------------------------------------------------------------


def check_database(gate: Gate, db: Database) -> dict[str, Any]:
    """The payouts and balances read straight from the database, then ``core.check_all_ledgers()``."""
    reader = _reader(db)
    try:
        payouts = reader.rows("SELECT merchant_id, merchant_reference, amount, resolution FROM payouts", ())
        balances = reader.rows(
            "SELECT merchant_id, available, reserved, paid_out, credited FROM balances WHERE currency = ?",
            (bench_core.CURRENCY,),
        )
    finally:
        reader.close()
    stored = len(payouts)
    keys = {row[1] for row in payouts}
    open_amounts: dict[str, int] = {}
    for merchant, _key, amount, resolution in payouts:
        if resolution is None:
            open_amounts[merchant] = open_amounts.get(merchant, 0) + int(amount)
    found = {row[0]: tuple(int(x) for x in row[1:]) for row in balances}
    wrong: list[str] = []
    for merchant in db.merchants:
        available, reserved, paid_out, credited = found.get(merchant, (0, 0, 0, 0))
        if not (
            credited == bench_core.FUNDING
            and available + reserved + paid_out == credited
            and reserved == open_amounts.get(merchant, 0)
        ):
            wrong.append(
                f"{merchant}: available {available} + reserved {reserved} + paid out {paid_out} vs credited "
                f"{credited} (funded {bench_core.FUNDING}), open payouts {open_amounts.get(merchant, 0)}"
            )
    core = bench_core.open_core(db.db)
    try:
        core.check_all_ledgers()
        ledger_ok, ledger_detail = True, "check_all_ledgers passed"
    except Exception as exc:
        ledger_ok, ledger_detail = False, f"{type(exc).__name__}: {exc}"
    finally:
        core.close()
    gate.check(
        f"{db.label}: every accepted payout stored once",
        len(keys) == stored and db.accepted <= stored <= db.accepted + db.in_flight,
        f"{db.accepted} answered 201, {stored} stored, {stored - len(keys)} duplicated keys, "
        f"at most {db.in_flight} in flight",
    )
    gate.check(
        f"{db.label}: balances conserved",
        not wrong and set(found) == set(db.merchants),
        "; ".join(wrong[:3]) or f"{len(db.merchants)} merchants",
    )
    gate.check(f"{db.label}: ledger invariant", ledger_ok, ledger_detail)
    return {"accepted": db.accepted, "stored": stored, "merchants": len(db.merchants)}


# --- the run ---------------------------------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


class Bench:
    def __init__(
        self, plan: Plan, postgres: PostgresSchemas, workdir: Path, logs: Path, *, worker: bool = True
    ) -> None:
        self.plan = plan
        self.worker = worker
        self.postgres = postgres
        self.workdir = workdir
        self.logs = logs
        self.gate = Gate()
        self.tag = secrets.token_hex(3)
        self.servers: list[Server] = []
        self.proxies: list[LatencyProxy] = []
        self.invocation = 0
        self.mean_delay_ms: dict[str, float] = {}

    def launch(self, name: str, db: str, *, worker: bool = True) -> Server:
        server = start_server(name, db, self.logs, worker=worker and self.worker)
        self.servers.append(server)
        return server

    def proxy(self, url: str) -> LatencyProxy:
        host, port = target_of(url)
        proxy = LatencyProxy(host, port, latency=self.plan.latency_ms / 1000).start()
        self.proxies.append(proxy)
        return proxy

    def close(self) -> None:
        for server in self.servers:
            try:
                stop_server(server)
            except Exception:  # keep stopping the others
                traceback.print_exc()
        self.servers.clear()
        for proxy in self.proxies:
            proxy.stop()
        self.proxies.clear()

    def load(self, label: str, db: Database, ports: list[int], tokens: list[str], concurrency: int) -> Load:
        self.invocation += 1
        prefix = f"pg{self.tag}{self.invocation}"
        result = run_generator(ports, tokens, concurrency, self.plan.duration, prefix)
        db.accepted += result.accepted
        db.in_flight += result.errors
        if result.non_2xx or result.errors:
            self.gate.check(
                f"{label}: only 2xx",
                False,
                f"{result.non_2xx} non-2xx, {result.errors} broken connections, statuses {result.statuses}",
            )
        return result

    def run(self) -> dict[str, Any]:
        plan = self.plan
        print("preparing the databases", flush=True)
        proxied = prepare(
            "PG-proxied",
            self.postgres.new("proxied"),
            {"one": (1, PROXY_CLIENTS), "own": (PROXY_CLIENTS, 1)},
        )
        spread_pg = prepare("PG", self.postgres.new("spread"), {"spread": (SPREAD_CLIENTS, 1)})
        sqlite_path = self.workdir / "sqlite-full.db"
        spread_sqlite = prepare("SQLite-FULL", str(sqlite_path), {"spread": (SPREAD_CLIENTS, 1)})
        databases = [proxied, spread_pg, spread_sqlite]

        serial_proxy = self.proxy(proxied.db)  # (i): its own proxy, a server without worker
        load_proxy = self.proxy(proxied.db)  # (ii), (iii)
        serial_server = self.launch("proxied-c1", through(proxied.db, serial_proxy.port), worker=False)
        load_server = self.launch("proxied", through(proxied.db, load_proxy.port))
        sqlite_server = self.launch("sqlite-full", spread_sqlite.db)
        pg_servers = [self.launch(f"pg-{n + 1}", spread_pg.db) for n in range(MAX_PROCESSES)]
        for server in self.servers:
            wait_ready(server)
        print("servers ready; warming up", flush=True)
        serial_payouts(
            serial_server.port, proxied.keys["one"][0], serial_proxy, 2, f"warm{self.tag}", proxied
        )
        warm = Plan(**{**asdict(plan), "duration": 0.3})
        saved, self.plan = self.plan, warm
        self.load("warm-up", proxied, [load_server.port], proxied.keys["own"], 4)
        self.load("warm-up", spread_sqlite, [sqlite_server.port], spread_sqlite.keys["spread"], 4)
        for server in pg_servers:
            self.load("warm-up", spread_pg, [server.port], spread_pg.keys["spread"], 4)
        self.plan = saved

        latencies: list[float] = []
        trips: list[float] = []
        rounds: list[dict[str, Any]] = []
        ports = [server.port for server in pg_servers]

        def run_load(label: str, db: Database, on: list[int], tokens: list[str], clients: int) -> Any:
            return lambda: self.load(label, db, on, tokens, clients)

        spread = SPREAD_CLIENTS
        loads: list[tuple[str, Any]] = [
            (
                "one-merchant",
                run_load("proxied one merchant", proxied, [load_server.port], proxied.keys["one"], 16),
            ),
            (
                "own-merchant",
                run_load("proxied own merchants", proxied, [load_server.port], proxied.keys["own"], 16),
            ),
            (
                "sqlite-full",
                run_load(
                    "SQLite FULL", spread_sqlite, [sqlite_server.port], spread_sqlite.keys["spread"], spread
                ),
            ),
        ]
        for n in range(1, MAX_PROCESSES + 1):
            loads.append(
                (
                    f"pg-{n}",
                    run_load(
                        f"PostgreSQL {n} processes", spread_pg, ports[:n], spread_pg.keys["spread"], spread
                    ),
                )
            )
        for r in range(plan.rounds):
            print(
                f"round {r + 1}/{plan.rounds}: {plan.serial_payouts} payouts at c=1 through the proxy",
                flush=True,
            )
            serial = serial_payouts(
                serial_server.port,
                proxied.keys["one"][0],
                serial_proxy,
                plan.serial_payouts,
                f"c1{self.tag}r{r}",
                proxied,
            )
            latencies += serial["latency_ms"]
            trips += serial["round_trips"]
            figures: dict[str, Any] = {
                "c1_p50_ms": percentile(sorted(serial["latency_ms"]), 50),
                "c1_round_trips_median": _median(serial["round_trips"]),
            }
            order = loads if r % 2 == 0 else list(reversed(loads))
            for name, call in order:
                settled = settle(databases)
                if settled is None:
                    self.gate.check(
                        f"{name}: the previous window's background work done within {SETTLE_CAP:.0f} s",
                        False,
                        "; ".join(f"{db.label}: {open_work(db)} items open" for db in databases),
                    )
                before = load_proxy.counts().round_trips
                mark = CpuMark.take(self.servers)
                result: Load = call()
                moved = load_proxy.counts().round_trips - before
                figures[name] = asdict(result)
                figures[name].update(CpuMark.take(self.servers).since(mark, result.requests))
                figures[name]["settle_before_s"] = settled
                if name in ("one-merchant", "own-merchant"):
                    figures[name]["round_trips_per_payout"] = (
                        moved / result.requests if result.requests else None
                    )
                print(f"  {name}: {result.rps:.1f} payouts/s (p50 {result.p50_ms:.1f} ms)", flush=True)
            rounds.append(figures)
        self.mean_delay_ms = {
            "c1_proxy": serial_proxy.counts().mean_delay_s * 1000,
            "load_proxy": load_proxy.counts().mean_delay_s * 1000,
        }
        self.close()
        print("checking the databases", flush=True)
        checks = {db.label: check_database(self.gate, db) for db in databases}
        return self.summary(latencies, trips, rounds, checks)

    def summary(
        self,
        latencies: list[float],
        trips: list[float],
        rounds: list[dict[str, Any]],
        checks: dict[str, Any],
    ) -> dict[str, Any]:
        def rps(name: str) -> float | None:
            return _median([r[name]["rps"] for r in rounds])

        def ratio(top: str, bottom: str) -> float | None:
            values = [_ratio(r[top]["rps"], r[bottom]["rps"]) for r in rounds]
            return _median([v for v in values if v is not None])

        def per_payout(name: str) -> float | None:
            values = [r[name]["round_trips_per_payout"] for r in rounds]
            return _median([v for v in values if v is not None])

        ordered = sorted(latencies)
        proxied: dict[str, Any] = {
            "latency_ms_each_way": self.plan.latency_ms,
            "mean_delay_ms_measured": self.mean_delay_ms,  # what the chunks actually waited, one way
            "c1_payouts": len(latencies),
            "c1_p50_ms": percentile(ordered, 50),
            "c1_p90_ms": percentile(ordered, 90),
            "c1_round_trips_median": _median(trips),
            "c1_round_trips_min": min(trips) if trips else None,
            "c1_round_trips_max": max(trips) if trips else None,
            "one_merchant_c16_rps": rps("one-merchant"),
            "own_merchants_c16_rps": rps("own-merchant"),
            "own_to_one_ratio": ratio("own-merchant", "one-merchant"),
            "one_merchant_round_trips_per_payout": per_payout("one-merchant"),
            "own_merchants_round_trips_per_payout": per_payout("own-merchant"),
        }
        direct: dict[str, Any] = {
            "sqlite_full_c32_rps": rps("sqlite-full"),
            "pg_1_process_c32_rps": rps("pg-1"),
            "pg_2_processes_c32_rps": rps("pg-2"),
            "pg_3_processes_c32_rps": rps("pg-3"),
            "pg_to_sqlite_ratio": ratio("pg-1", "sqlite-full"),
            "two_to_one_ratio": ratio("pg-2", "pg-1"),
            "three_to_one_ratio": ratio("pg-3", "pg-1"),
        }
        targets = [
            _target("proxy: own merchants / one merchant (c=16)", proxied["own_to_one_ratio"], ">=", 2.5),
            _target(
                "proxy: round trips per payout at c=1 (median)", proxied["c1_round_trips_median"], "<=", 8
            ),
            _target("no proxy, c=32: PostgreSQL / SQLite FULL", direct["pg_to_sqlite_ratio"], ">=", 0.8),
            _target("no proxy, c=32: two API processes / one", direct["two_to_one_ratio"], ">=", 1.5),
        ]

        def median_of(name: str, figure: str) -> float | None:
            return _median([r[name][figure] for r in rounds if r[name].get(figure) is not None])

        cpu = {
            name: {
                figure: median_of(name, figure)
                for figure in ("machine_busy", "server_cpu_ms_per_payout", "postgres_cpu_ms_per_payout")
            }
            for name in WINDOWS
        }
        return {
            "proxied": proxied,
            "direct": direct,
            "cpu": cpu,
            "targets": targets,
            "rounds": rounds,
            "databases": checks,
        }


def _target(name: str, value: float | None, op: str, goal: float) -> dict[str, Any]:
    met = None if value is None else (value >= goal if op == ">=" else value <= goal)
    return {"name": name, "value": value, "goal": f"{op} {goal:g}", "met": met}


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def table(results: dict[str, Any]) -> str:
    p, d = results["proxied"], results["direct"]
    lines = [
        f"PostgreSQL with the network in (issue 26): {results['meta']['rounds']} rounds of "
        f"{results['meta']['duration_s_per_load']:g} s, {results['meta']['machine']}",
        "",
        f"a. through the proxy ({p['latency_ms_each_way']:g} ms each way; measured "
        f"{_fmt(p['mean_delay_ms_measured'].get('c1_proxy'), 2)} ms at c=1, "
        f"{_fmt(p['mean_delay_ms_measured'].get('load_proxy'), 2)} ms under load), one server process",
        "| figure | value |",
        "|---|---|",
        f"| payout at c=1: median / p90 ms | {_fmt(p['c1_p50_ms'])} / {_fmt(p['c1_p90_ms'])} |",
        f"| round trips per payout at c=1: median (min-max) | {_fmt(p['c1_round_trips_median'])} "
        f"({_fmt(p['c1_round_trips_min'], 0)}-{_fmt(p['c1_round_trips_max'], 0)}) |",
        f"| 16 clients, ONE merchant: payouts/s | {_fmt(p['one_merchant_c16_rps'])} |",
        f"| 16 clients, OWN merchants: payouts/s | {_fmt(p['own_merchants_c16_rps'])} |",
        f"| own / one | {_fmt(p['own_to_one_ratio'], 2)} |",
        f"| round trips per payout under load (one / own; the worker's included when it runs) | "
        f"{_fmt(p['one_merchant_round_trips_per_payout'])} / "
        f"{_fmt(p['own_merchants_round_trips_per_payout'])} |",
        "",
        f"b. no proxy, {SPREAD_CLIENTS} clients, payouts from {SPREAD_CLIENTS} merchants: POST /v1/disburse",
        "| server | req/s | ratio |",
        "|---|---|---|",
        f"| SQLite FULL, 1 process | {_fmt(d['sqlite_full_c32_rps'])} | |",
        f"| PostgreSQL, 1 process | {_fmt(d['pg_1_process_c32_rps'])} | "
        f"{_fmt(d['pg_to_sqlite_ratio'], 2)} x SQLite |",
        f"| PostgreSQL, 2 processes | {_fmt(d['pg_2_processes_c32_rps'])} | "
        f"{_fmt(d['two_to_one_ratio'], 2)} x one |",
        f"| PostgreSQL, 3 processes | {_fmt(d['pg_3_processes_c32_rps'])} | "
        f"{_fmt(d['three_to_one_ratio'], 2)} x one |",
        "",
        "CPU in each window (every window starts once the previous one's background work is done):",
        "| window | machine busy | servers' CPU ms a payout (workers in) | PostgreSQL's CPU ms a payout |",
        "|---|---|---|---|",
    ]
    for name, cpu in results.get("cpu", {}).items():
        busy = "-" if cpu["machine_busy"] is None else f"{cpu['machine_busy']:.0%}"
        server, postgres = cpu["server_cpu_ms_per_payout"], cpu["postgres_cpu_ms_per_payout"]
        lines.append(f"| {name} | {busy} | {_fmt(server, 2)} | {_fmt(postgres, 2)} |")
    lines += ["", "targets (issue 26; reported, never judged by the exit status)"]
    for t in results["targets"]:
        mark = {True: "met", False: "NOT met", None: "-"}[t["met"]]
        lines.append(f"- {t['name']}: {_fmt(t['value'], 2)} (goal {t['goal']}): {mark}")
    lines.append("")
    gate = results["gate"]
    lines.append(
        f"correctness gate: {'passed' if gate['passed'] else 'FAILED'} ({len(gate['checks'])} checks)"
    )
    for check in gate["checks"]:
        if not check["ok"]:
            lines.append(f"- FAILED {check['name']}: {check['detail']}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="one short round, tiny counts (CI)")
    parser.add_argument(
        "--postgres",
        default=None,
        metavar="URL",
        help="the PostgreSQL server (default: $PAYMENTCORE_BENCH_POSTGRES_URL, "
        "else $PAYMENTCORE_TEST_POSTGRES_URL)",
    )
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--duration", type=float, default=None, help="seconds per load run (default 3)")
    parser.add_argument("--serial", type=int, default=None, help="payouts at c=1 per round (default 30)")
    parser.add_argument(
        "--latency-ms", type=float, default=None, help="the proxy's one-way delay (default 1)"
    )
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="the JSON file to write")
    parser.add_argument("--workdir", type=Path, default=None, help="the SQLite file and the servers' logs")
    parser.add_argument(
        "--no-worker",
        action="store_true",
        help="start every server with --no-worker (default: the worker in each server, as serve runs it)",
    )
    parser.add_argument("--generate", default=None, help=argparse.SUPPRESS)  # the load generator's process
    args = parser.parse_args(argv)
    if args.generate is not None:
        spec = json.loads(args.generate)
        load = asyncio.run(
            generate(spec["ports"], spec["tokens"], spec["concurrency"], spec["duration"], spec["prefix"])
        )
        print(RESULT_MARK + json.dumps(asdict(load)), flush=True)
        return 0

    plan = QUICK if args.quick else FULL
    changes = {
        name: value
        for name, value in (
            ("rounds", args.rounds),
            ("duration", args.duration),
            ("serial_payouts", args.serial),
            ("latency_ms", args.latency_ms),
        )
        if value is not None
    }
    plan = Plan(**{**asdict(plan), **changes})
    url = args.postgres if args.postgres is not None else postgres_from_env()
    if not url:
        print(
            "error: no PostgreSQL server: --postgres URL or $PAYMENTCORE_TEST_POSTGRES_URL", file=sys.stderr
        )
        return 2
    target_of(url)
    try:
        version = postgres_version(url)
    except Exception as exc:
        print(f"error: cannot use the PostgreSQL server: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    own_workdir = args.workdir is None
    workdir: Path = args.workdir or Path(tempfile.mkdtemp(prefix="paymentcore-pgbench-"))
    logs = workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    schemas = PostgresSchemas(url)
    bench = Bench(plan, schemas, workdir, logs, worker=not args.no_worker)
    began = time.monotonic()
    meta = {
        "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "quick": plan.quick,
        "rounds": plan.rounds,
        "duration_s_per_load": plan.duration,
        "serial_payouts_per_round": plan.serial_payouts,
        "machine": machine(),
        "python": platform.python_version(),
        "postgres": version,
        "server": "python -m paymentcore_server --db URL serve --no-worker (every server)"
        if args.no_worker
        else "python -m paymentcore_server --db URL serve (the worker in the process, serve's "
        "default; the c=1 server of (i) with --no-worker)",
        "load_generator": "benchmarks/bench_postgres.py --generate (asyncio, keep-alive, closed loop)",
        "payout": f"{PAYOUT_AMOUNT} XAF, a unique Idempotency-Key each",
    }
    status = 0
    results: dict[str, Any] = {"meta": meta}
    try:
        results.update(bench.run())
    except Exception:
        traceback.print_exc()
        bench.gate.check("the run completed", False, traceback.format_exc(limit=3).strip().splitlines()[-1])
        status = 2
    finally:
        bench.close()
        try:
            schemas.drop()
        except Exception:  # a leftover scratch schema is harmless
            traceback.print_exc()
        if own_workdir and status == 0:
            shutil.rmtree(workdir, ignore_errors=True)
    meta["duration_s"] = time.monotonic() - began
    results["gate"] = {"passed": bench.gate.passed, "checks": bench.gate.checks}
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=2) + "\n")
    if status:
        print(f"the run broke; logs in {logs}", file=sys.stderr)
        return status
    print()
    print(table(results))
    print(f"written: {args.results}")
    return 0 if bench.gate.passed else 1


if __name__ == "__main__":
    sys.exit(main())
