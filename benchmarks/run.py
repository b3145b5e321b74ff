"""The performance suite: ``python3 benchmarks/run.py`` (full, about 25 minutes) or ``--quick`` (CI).

One run, on this machine:

1. HTTP: a bare Starlette JSON endpoint, a bare POST echo endpoint with our API's auth and header
   parsing, and our server on SQLite with synchronous=FULL and with NORMAL, and on PostgreSQL (one
   process), all through the same uvicorn call and flags (benchmarks/bench_serve.py), loaded in
   interleaved rounds at each concurrency by wrk (benchmarks/load.lua) or, without wrk, the Python
   generator (benchmarks/bench_load.py); in the same rounds, two API processes on one PostgreSQL
   database against one process, the same load split over two generators in both cases. The PostgreSQL
   server is ``--postgres URL``, else ``$PAYMENTCORE_BENCH_POSTGRES_URL``, else
   ``$PAYMENTCORE_TEST_POSTGRES_URL``; without one those rounds are skipped (each database is a scratch
   schema, dropped at the end);
2. in-process: payout creation against a raw sqlite3 transaction, webhook signing against hmac.digest;
3. growth: GET by reference and payout creation with few versus many stored records, and payouts with
   few versus many payouts inside the rolling limit windows;
4. bulk payouts (benchmarks/bench_bulk.py): payouts accepted per second through POST /v1/disburse/bulk
   (1,000 items a request) against POST /v1/disburse at c=32, on one SQLite FULL server in interleaved
   rounds, and the time a request of 1,000 items takes to be answered;
5. memory: the server's RSS after 10^4 and after 10^5 requests;
6. one core (benchmarks/bench_one_core.py, issue 27): ``paymentcore serve`` with its worker, pinned to one
   CPU, against the echo and the bare GET pinned the same way, the load on the other CPU, at c=32 and
   128; the background work's drain after each POST window, the end-to-end rate, the in-process ratio;
7. the correctness gate: no unexpected non-2xx, every accepted payout stored once, balances conserved.

Writes benchmarks/results/latest.json and latest.md (and onecore.json and onecore.md for part 6). Exits 0
when the gate passes (whatever the speed figures), 1 when it fails, 2 when the run itself broke.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import secrets
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import bench_bulk
import bench_core
import bench_report
from bench_load import LoadResult, Workload, have_wrk, run_load, run_python, run_split
from bench_serve import HOST, event_loop_and_parser

HERE = Path(__file__).resolve().parent
DEFAULT_RESULTS = HERE / "results"
CORE_KINDS = ["disburse", "charge", "getref", "replay"]
SUSTAINED = "sustained"  # a key of its own for the sustained payouts
POSTGRES_ENV = ("PAYMENTCORE_BENCH_POSTGRES_URL", "PAYMENTCORE_TEST_POSTGRES_URL")  # the first one set
PG = "PG"  # the PostgreSQL database of the one-process server (the main rounds, and one side of the split)
PG2 = "PG2"  # the PostgreSQL database that two server processes share


@dataclass(frozen=True)
class Plan:
    quick: bool
    rounds: int
    duration: float
    concurrency: tuple[int, ...]
    warmup: bool
    payout_batch: int
    payout_batches: int
    signing_iterations: int
    records: tuple[int, int]
    window_payouts: tuple[int, int]
    growth_batch: int
    growth_reps: int
    memory_requests: tuple[int, int]
    memory_concurrency: int
    references: int
    replays: int
    sustained_runs: int
    sustained_seconds: float
    bulk_batch: int
    bulk_requests: int
    onecore_concurrency: tuple[int, ...]  # the one-core part's levels (issue 27: 32 and 128)


FULL = Plan(
    quick=False,
    rounds=3,
    duration=5,
    concurrency=(1, 8, 32, 128),
    warmup=True,
    payout_batch=400,
    payout_batches=8,
    signing_iterations=200_000,
    records=(1_000, 1_000_000),
    window_payouts=(1_000, 100_000),
    growth_batch=300,
    growth_reps=6,
    memory_requests=(10_000, 100_000),
    memory_concurrency=32,
    references=1000,
    replays=500,
    sustained_runs=7,
    sustained_seconds=10,
    bulk_batch=1000,
    bulk_requests=5,
    onecore_concurrency=(32, 128),
)
QUICK = Plan(
    quick=True,
    rounds=1,
    duration=0.5,
    concurrency=(8,),
    warmup=False,
    payout_batch=40,
    payout_batches=2,
    signing_iterations=5_000,
    records=(100, 2_000),
    window_payouts=(100, 2_000),
    growth_batch=20,
    growth_reps=2,
    memory_requests=(300, 1_500),
    memory_concurrency=8,
    references=50,
    replays=50,
    sustained_runs=2,
    sustained_seconds=1,
    bulk_batch=1000,
    bulk_requests=2,
    onecore_concurrency=(32, 128),
)


@dataclass
class Server:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    ready_path: str
    ready_method: str = "GET"

    def rss_kb(self) -> dict[str, int]:
        fields: dict[str, int] = {}
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM", "Threads"):
                fields[name] = int(value.split()[0])
        return fields


@dataclass
class Gate:
    checks: list[dict[str, Any]] = field(default_factory=list)

    def check(self, name: str, ok: bool, detail: str = "") -> None:
        self.checks.append({"name": name, "ok": bool(ok), "detail": detail})
        if not ok:
            print(f"  GATE FAILED: {name}: {detail}", flush=True)

    @property
    def passed(self) -> bool:
        return all(c["ok"] for c in self.checks)


@dataclass(frozen=True)
class Target:
    """What one load run hits: one server, or several that a split load spreads its connections over."""

    name: str
    servers: tuple[str, ...]
    kind: str
    prepared: bench_core.Prepared | None
    label: str | None  # the prepared database (its gate counts what the load was told)

    @property
    def split(self) -> bool:
        return len(self.servers) > 1


# --- PostgreSQL ------------------------------------------------------------------------------------


def postgres_from_env() -> str | None:
    for name in POSTGRES_ENV:
        url = os.environ.get(name, "").strip()
        if url:
            return url
    return None


def postgres_version(url: str) -> str:
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return "PostgreSQL " + (str(row[0]).split()[0] if row else "?")


class PostgresSchemas:
    """Scratch schemas on the benchmarks' PostgreSQL server: one per prepared database, each reached
    through a URL whose ``search_path`` names it (as the tests do), all dropped by :meth:`drop`."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.tag = secrets.token_hex(3)
        self.made: list[str] = []

    def new(self, label: str) -> str:
        import psycopg

        schema = f"pcbench_{self.tag}_{label.lower()}"
        with psycopg.connect(self.base, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        self.made.append(schema)
        separator = "&" if "?" in self.base else "?"
        return f"{self.base}{separator}options={quote(f'-csearch_path={schema}', safe='')}"

    def drop(self) -> None:
        import psycopg

        if not self.made:
            return
        with psycopg.connect(self.base, autocommit=True) as conn:
            for schema in self.made:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        self.made.clear()


# --- servers -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def start_server(
    name: str, args: list[str], logs: Path, ready_path: str, ready_method: str = "GET"
) -> Server:
    port = free_port()
    log = logs / f"server-{name}.log"
    command = [sys.executable, str(HERE / "bench_serve.py"), *args, "--port", str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    return Server(name, port, process, log, ready_path, ready_method)


def wait_ready(server: Server, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"server {server.name} exited: {server.log.read_text()[-2000:]}")
        try:
            conn = http.client.HTTPConnection(HOST, server.port, timeout=2)
            conn.request(server.ready_method, server.ready_path)
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


# --- the correctness gate on a core server's database ------------------------------------------


@dataclass
class Accepted:
    """What the load was told about one core server: 2xx answers, and requests possibly in flight."""

    disburse: int = 0
    disburse_in_flight: int = 0
    charge: int = 0
    charge_in_flight: int = 0
    replay: int = 0


class Reader:
    """Read-only queries on a prepared database, SQLite or PostgreSQL (``?`` placeholders either way)."""

    def __init__(self, prepared: bench_core.Prepared) -> None:
        self._sqlite: sqlite3.Connection | None = None
        self._pg: Any = None
        if prepared.url is not None:
            import psycopg

            self._pg = psycopg.connect(prepared.url, autocommit=True)
        else:
            self._sqlite = sqlite3.connect(f"file:{prepared.db}?mode=ro", uri=True)

    def rows(self, query: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        if self._sqlite is not None:
            return self._sqlite.execute(query, params).fetchall()
        rows: list[tuple[Any, ...]] = self._pg.execute(query.replace("?", "%s"), params).fetchall()
        return rows

    def close(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()
        if self._pg is not None:
            self._pg.close()


def check_core_db(
    gate: Gate, label: str, prepared: bench_core.Prepared, accepted: Accepted
) -> dict[str, Any]:
    mid = prepared.merchant_id
    db = Reader(prepared)
    try:
        payouts = db.rows(
            "SELECT reference, merchant_reference, amount, resolution FROM payouts WHERE merchant_id = ?",
            (mid,),
        )
        reserves = Counter(
            row[0]
            for row in db.rows(
                "SELECT reference FROM ledger_entries WHERE merchant_id = ? AND kind = 'reserve'", (mid,)
            )
        )
        balance = db.rows(
            "SELECT available, reserved, paid_out, credited FROM balances"
            " WHERE merchant_id = ? AND currency = ?",
            (mid, bench_core.CURRENCY),
        )[0]
        charges = db.rows(
            "SELECT merchant_reference FROM collections"
            " WHERE merchant_id = ? AND merchant_reference NOT LIKE ?",
            (mid, "prep-%"),
        )
        idempotency = db.rows("SELECT count(*) FROM idempotency WHERE merchant_id = ?", (mid,))[0][0]
    finally:
        db.close()
    replay_keys = set(prepared.replay_keys)
    load_refs = [p[1] for p in payouts if p[1] not in replay_keys]
    replayed = [p for p in payouts if p[1] in replay_keys]
    stored = len(load_refs)
    gate.check(
        f"{label}: every payout stored once",
        len(set(load_refs)) == stored and len({p[0] for p in payouts}) == len(payouts),
        f"{stored} payouts, {stored - len(set(load_refs))} duplicated idempotency keys",
    )
    gate.check(
        f"{label}: accepted payouts are stored",
        accepted.disburse <= stored <= accepted.disburse + accepted.disburse_in_flight,
        f"{accepted.disburse} answered 201, {stored} stored (at most {accepted.disburse_in_flight} may have "
        "been in flight when a run's time ran out)",
    )
    gate.check(
        f"{label}: replays created nothing",
        len(replayed) == len(replay_keys),
        f"{len(replayed)} payouts for {len(replay_keys)} replayed keys after {accepted.replay} replays",
    )
    references = {p[0] for p in payouts}
    gate.check(
        f"{label}: one reservation per payout",
        set(reserves) == references and all(n == 1 for n in reserves.values()),
        f"{len(references)} payouts, {len(reserves)} reserved references, "
        f"{sum(reserves.values())} reserve entries",
    )
    unresolved = sum(p[2] for p in payouts if p[3] is None)
    available, reserved, paid_out, credited = balance
    gate.check(
        f"{label}: balances conserved",
        reserved == unresolved
        and credited == prepared.funded
        and available + reserved + paid_out == credited,
        f"available {available} + reserved {reserved} + paid out {paid_out} vs funded {prepared.funded}; "
        f"open payouts {unresolved}",
    )
    charge_keys = [c[0] for c in charges]
    gate.check(
        f"{label}: accepted charges are stored once",
        len(set(charge_keys)) == len(charge_keys)
        and accepted.charge <= len(charge_keys) <= accepted.charge + accepted.charge_in_flight,
        f"{accepted.charge} answered 202, {len(charge_keys)} stored",
    )
    expected_records = len(payouts) + len(charge_keys) + prepared_charges(prepared)
    gate.check(
        f"{label}: one idempotency record per accepted POST",
        idempotency == expected_records,
        f"{idempotency} records for {expected_records} POSTs",
    )
    core = bench_core.open_core(prepared.database)
    try:
        core.check_all_ledgers()
        ledger_ok, ledger_detail = True, "check_all_ledgers passed"
    except Exception as exc:
        ledger_ok, ledger_detail = False, f"{type(exc).__name__}: {exc}"
    finally:
        core.close()
    gate.check(f"{label}: ledger invariant", ledger_ok, ledger_detail)
    return {"payouts": len(payouts), "charges": len(charge_keys), "balance": list(balance)}


def prepared_charges(prepared: bench_core.Prepared) -> int:
    return sum(1 for line in prepared.refs_file.read_text().splitlines() if line.strip())


def check_run(gate: Gate, label: str, result: LoadResult) -> None:
    if result.non_2xx or result.socket_errors:
        gate.check(
            f"{label}: only 2xx",
            False,
            f"{result.non_2xx} non-2xx answers, {result.socket_errors} socket errors, "
            f"statuses {result.statuses}",
        )


# --- the parts of a run ------------------------------------------------------------------------


class Suite:
    def __init__(
        self,
        plan: Plan,
        tool: str,
        workdir: Path,
        results_dir: Path,
        profile: bool,
        postgres: PostgresSchemas | None = None,
    ) -> None:
        self.plan = plan
        self.tool = tool
        self.workdir = workdir
        self.results_dir = results_dir
        self.logs = results_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.profile = profile
        self.postgres = postgres
        self.gate = Gate()
        self.tag = secrets.token_hex(3)
        self.invocation = 0
        self.next_phone = 0
        self.servers: list[Server] = []

    # load with unique keys and fresh phone numbers for every invocation
    def workload(
        self,
        kind: str,
        prepared: bench_core.Prepared | None,
        key: str | None = None,
        *,
        part: int = 0,
        parts: int = 1,
    ) -> Workload:
        """The load of one generator; part ``part`` of ``parts`` generators sharing one load gets keys of
        its own and every ``parts``-th phone number from ``part`` on, so the parts never collide."""
        if part == 0:
            self.invocation += 1
        token = "-"
        refs = "-"
        if prepared is not None:
            token = prepared.tokens[key or kind]
            if kind == "getref":
                refs = str(prepared.refs_file)
            elif kind == "replay":
                refs = str(prepared.replay_file)
        prefix = f"b{self.tag}{self.invocation}" + (f"p{part}" if parts > 1 else "")
        return Workload(kind, token, prefix, self.next_phone + part, refs, parts)

    def after(self, workload: Workload, result: LoadResult) -> None:
        if workload.kind == "charge":
            self.next_phone += result.generated * workload.phone_stride + 1000

    def launch(self, name: str, args: list[str], ready_path: str, ready_method: str = "GET") -> Server:
        server = start_server(name, args, self.logs, ready_path, ready_method)
        self.servers.append(server)
        return server

    def stop_all(self) -> None:
        for server in self.servers:
            try:
                stop_server(server)
            except Exception:  # keep stopping the others
                traceback.print_exc()
        self.servers.clear()

    # --- 1. HTTP ---------------------------------------------------------------------------------

    def http(self) -> dict[str, Any]:
        plan = self.plan
        prepared = {
            sync: bench_core.prepare_server_db(
                self.workdir / f"server-{sync}.db",
                kinds=[*CORE_KINDS, SUSTAINED],
                references=plan.references,
                replays=plan.replays,
            )
            for sync in ("FULL", "NORMAL")
        }
        if self.postgres is not None:
            print("PostgreSQL: preparing a database for one server process and one for two", flush=True)
            for label in (PG, PG2):
                prepared[label] = bench_core.prepare_server_db(
                    self.workdir / f"server-{label}.db",
                    kinds=list(CORE_KINDS),
                    references=plan.references,
                    replays=plan.replays,
                    url=self.postgres.new(label),
                )
        echo_token = "pck_" + secrets.token_urlsafe(32)
        tokens = {"pck_" + secrets.token_urlsafe(32): f"mer_{i}" for i in range(999)}
        tokens[echo_token] = "mer_echo"
        tokens_file = self.workdir / "echo-tokens.json"
        tokens_file.write_text(json.dumps(tokens))
        echo_prepared = bench_core.Prepared(
            self.workdir / "none", "mer_echo", {"echo": echo_token}, Path("-"), Path("-"), [], 0
        )
        accepted = {label: Accepted() for label in prepared}
        runs: list[dict[str, Any]] = []
        sustained: list[dict[str, Any]] = []
        profiles: dict[str, Any] = {}
        try:
            servers = {
                "bare": self.launch("bare", ["bare"], "/json"),
                "echo": self.launch("echo", ["echo", "--tokens", str(tokens_file)], "/echo", "POST"),
            }
            for sync in ("FULL", "NORMAL"):
                servers[f"core-{sync}"] = self.launch(
                    f"core-{sync}",
                    ["core", "--db", prepared[sync].database, "--synchronous", sync],
                    "/healthz",
                )
            if self.postgres is not None:
                servers[f"core-{PG}"] = self.launch(
                    f"core-{PG}", ["core", "--db", prepared[PG].database], "/healthz"
                )
                for half in ("a", "b"):  # two API processes on one database, nothing in front
                    servers[f"core-{PG2}{half}"] = self.launch(
                        f"core-{PG2}{half}", ["core", "--db", prepared[PG2].database], "/healthz"
                    )
            for server in servers.values():
                wait_ready(server)
            targets = [
                Target("bare", ("bare",), "bare", None, None),
                Target("echo", ("echo",), "echo", echo_prepared, None),
            ]
            for label in [label for label in prepared if label != PG2]:
                for kind in CORE_KINDS:
                    targets.append(
                        Target(f"{kind}-{label}", (f"core-{label}",), kind, prepared[label], label)
                    )
            if self.postgres is not None:
                # the same load split over two generators: both on the one-process server, or one
                # generator per process of the two-process server
                for kind in CORE_KINDS:
                    one_process = (f"core-{PG}", f"core-{PG}")
                    two_processes = (f"core-{PG2}a", f"core-{PG2}b")
                    targets.append(Target(f"{kind}-PG-1p", one_process, kind, prepared[PG], PG))
                    targets.append(Target(f"{kind}-PG-2p", two_processes, kind, prepared[PG2], PG2))

            def one(target: Target, level: int, duration: float, key: str | None = None) -> LoadResult:
                if target.split:
                    parts = len(target.servers)
                    workloads = [
                        self.workload(target.kind, target.prepared, key, part=i, parts=parts)
                        for i in range(parts)
                    ]
                    ports = [servers[name].port for name in target.servers]
                    result, pieces = run_split(self.tool, HOST, ports, workloads, level, duration)
                    self.after(workloads[0], max(pieces, key=lambda piece: piece.generated))
                else:
                    workload = self.workload(target.kind, target.prepared, key)
                    result = run_load(
                        self.tool, HOST, servers[target.servers[0]].port, workload, level, duration
                    )
                    self.after(workload, result)
                check_run(self.gate, f"{target.name} c={level}", result)
                if target.label is not None:
                    ok = result.requests - result.non_2xx
                    tally = accepted[target.label]
                    if target.kind == "disburse":
                        tally.disburse += ok
                        tally.disburse_in_flight += level
                    elif target.kind == "charge":
                        tally.charge += ok
                        tally.charge_in_flight += level
                    elif target.kind == "replay":
                        tally.replay += ok
                return result

            if plan.warmup:
                print("warming up", flush=True)
                for target in targets:
                    one(target, 8, 1)
            for round_no in range(plan.rounds):
                for level in plan.concurrency:
                    shift = (round_no + plan.concurrency.index(level)) % len(targets)
                    for target in targets[shift:] + targets[:shift]:
                        if target.split and level < len(target.servers):
                            continue  # one connection cannot be split over two processes
                        result = one(target, level, plan.duration)
                        runs.append(
                            {
                                "round": round_no,
                                "concurrency": level,
                                "target": target.name,
                                "server": "+".join(target.servers),
                                "result": result.to_json(),
                            }
                        )
                        print(
                            f"round {round_no + 1}/{plan.rounds} c={level:<3} {target.name:<16} "
                            f"{result.rps:9.0f} req/s  p50 {result.p50_ms:7.1f}  p99 {result.p99_ms:7.1f} ms",
                            flush=True,
                        )
            payouts_full = next(t for t in targets if t.name == "disburse-FULL")
            for i in range(plan.sustained_runs):
                result = one(payouts_full, 32, plan.sustained_seconds, SUSTAINED)
                sustained.append(result.to_json())
                print(
                    f"sustained POST /v1/disburse (FULL) c=32, {i + 1}/{plan.sustained_runs}: "
                    f"{result.rps:.0f} req/s, p99 {result.p99_ms:.1f} ms",
                    flush=True,
                )
            if self.profile:
                profiles = self.py_spy(servers["core-FULL"], payouts_full, one)
        finally:
            self.stop_all()
        for label, prep in prepared.items():
            check_core_db(self.gate, f"core-{label}", prep, accepted[label])
        return {
            "rounds": plan.rounds,
            "duration_s": plan.duration if self.tool == "python" else max(1, round(plan.duration)),
            "concurrency": list(plan.concurrency),
            "runs": runs,
            "summary": bench_report.summarise_http(runs),
            "split": bench_report.summarise_split(runs),
            "postgres": None
            if self.postgres is None
            else {"one_process": f"core-{PG}", "two_processes": [f"core-{PG2}a", f"core-{PG2}b"]},
            "accepted": {label: vars(a) for label, a in accepted.items()},
            "sustained": {
                "concurrency": 32,
                "seconds_per_run": plan.sustained_seconds
                if self.tool == "python"
                else max(1, round(plan.sustained_seconds)),
                "runs": sustained,
            },
            "profiles": profiles,
        }

    def py_spy(self, server: Server, target: Any, one: Any) -> dict[str, Any]:
        """Sample the FULL server under POST /v1/disburse at c=32 (extra runs, not in the table)."""
        if shutil.which("py-spy") is None:
            return {"skipped": "py-spy is not installed"}
        out: dict[str, Any] = {}
        seconds = max(3, round(self.plan.duration))
        for mode, flags in (("gil", ["--gil"]), ("active", [])):
            raw = self.results_dir / f"profile-disburse-FULL-c32-{mode}.txt"
            command = [
                "py-spy", "record", "--pid", str(server.process.pid), "--rate", "250", "--nonblocking",
                "--format", "raw", "--output", str(raw), "--duration", str(seconds + 1), *flags,
            ]  # fmt: skip
            spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                time.sleep(0.5)
                result = one(target, 32, seconds)
                spy.wait(timeout=seconds + 30)
            finally:
                if spy.poll() is None:
                    spy.kill()
                    spy.wait()
            out[mode] = {"file": raw.name, "rps_while_sampled": result.rps, **summarise_stacks(raw)}
        return out

    # --- 2. in-process -------------------------------------------------------------------------------

    def inprocess(self) -> dict[str, Any]:
        plan = self.plan
        payouts = []
        for sync in ("FULL", "NORMAL"):
            print(f"in-process payouts, synchronous={sync}", flush=True)
            payouts.append(
                bench_core.compare_payouts(
                    self.workdir,
                    sync,
                    batch=plan.payout_batch,
                    batches=plan.payout_batches,
                    profile=sync == "NORMAL",
                )
            )
        print("webhook signing", flush=True)
        signing = bench_core.compare_signing(plan.signing_iterations, 5 if not plan.quick else 2)
        return {"payouts": payouts, "signing": signing}

    # --- 3. growth -------------------------------------------------------------------------------

    def growth(self) -> dict[str, Any]:
        plan = self.plan
        print(f"growth: building {plan.records[0]:,} and {plan.records[1]:,} records", flush=True)
        records = bench_core.growth_records(
            self.workdir, *plan.records, batch=plan.growth_batch, reps=plan.growth_reps, synchronous="NORMAL"
        )
        print(
            f"growth: {plan.window_payouts[0]:,} and {plan.window_payouts[1]:,} payouts in the windows",
            flush=True,
        )
        windows = bench_core.growth_windows(
            self.workdir,
            *plan.window_payouts,
            batch=max(plan.growth_batch // 3, 10),
            reps=plan.growth_reps,
            synchronous="NORMAL",
        )
        for label in ("records-small", "records-large", "windows-small", "windows-large"):
            for suffix in ("", "-wal", "-shm", ".key"):
                Path(f"{self.workdir / ('growth-' + label)}.db{suffix}").unlink(missing_ok=True)
        return {"synchronous": "NORMAL", "records": records, "windows": windows}

    # --- 4. bulk payouts --------------------------------------------------------------------------

    def bulk(self) -> dict[str, Any]:
        """Bulk against single payouts on one server, SQLite FULL, in interleaved rounds (bench_bulk)."""
        plan = self.plan
        prep = bench_core.prepare_server_db(
            self.workdir / "bulk.db", kinds=["single", "bulk"], references=0, replays=0
        )
        level = 32 if 32 in plan.concurrency else max(plan.concurrency)

        def load(port: int, workload: Workload, concurrency: int, seconds: float) -> LoadResult:
            result = run_load(self.tool, HOST, port, workload, concurrency, seconds)
            self.after(workload, result)
            check_run(self.gate, f"bulk: single payouts c={concurrency}", result)
            return result

        try:
            server = self.launch("bulk", ["core", "--db", str(prep.db), "--synchronous", "FULL"], "/healthz")
            wait_ready(server)
            result = bench_bulk.compare(
                host=HOST,
                port=server.port,
                prepared=prep,
                load=load,
                workload=lambda key: self.workload("disburse", prep, key),
                rounds=plan.rounds,
                concurrency=level,
                duration=plan.duration,
                batch=plan.bulk_batch,
                requests=plan.bulk_requests,
            )
        finally:
            self.stop_all()
        bench_bulk.check(self.gate.check, prep, result)
        print(f"bulk: create_bulk of {plan.bulk_batch} items in-process", flush=True)
        result["inprocess"] = bench_bulk.inprocess_batch(
            self.workdir, plan.bulk_batch, 1 if plan.quick else 3
        )
        return result

    # --- 6. one core ---------------------------------------------------------------------------

    def onecore(self) -> dict[str, Any]:
        """Issue 27's measure (benchmarks/bench_one_core.py)."""
        import bench_one_core  # here, not at the top: it imports this module

        return bench_one_core.measure(self)

    # --- 5. memory -------------------------------------------------------------------------------

    def memory(self) -> dict[str, Any]:
        plan = self.plan
        sync = "FULL"
        prep = bench_core.prepare_server_db(
            self.workdir / "memory.db",
            kinds=["disburse", "charge", "getref"],
            references=plan.references,
            replays=0,
        )
        accepted = Accepted()
        samples: list[dict[str, Any]] = []
        level = plan.memory_concurrency
        try:
            server = self.launch("memory", ["core", "--db", str(prep.db), "--synchronous", sync], "/healthz")
            wait_ready(server)
            sent = 0
            for goal in plan.memory_requests:
                todo = goal - sent
                rates: dict[str, float] = {}
                for i, kind in enumerate(("disburse", "charge", "getref")):
                    count = todo // 3 + (1 if i < todo % 3 else 0)
                    workload = self.workload(kind, prep)
                    result = run_python(HOST, server.port, workload, level, 0.0, limit=count)
                    self.after(workload, result)
                    check_run(self.gate, f"memory {kind}", result)
                    if kind == "disburse":
                        accepted.disburse += result.requests - result.non_2xx
                    elif kind == "charge":
                        accepted.charge += result.requests - result.non_2xx
                    sent += result.requests
                    rates[kind] = result.rps
                time.sleep(1.0)
                rss = server.rss_kb()
                samples.append(
                    {"requests": sent, "rss_mb": rss["VmRSS"] / 1024, "hwm_mb": rss["VmHWM"] / 1024,
                     "threads": rss["Threads"], "rps": rates}
                )  # fmt: skip
                print(f"memory: {sent:,} requests, RSS {rss['VmRSS'] / 1024:.1f} MB", flush=True)
        finally:
            self.stop_all()
        check_core_db(self.gate, "memory server", prep, accepted)
        small, large = samples[0], samples[-1]
        return {
            "synchronous": sync,
            "concurrency": level,
            "samples": samples,
            "small_requests": small["requests"],
            "large_requests": large["requests"],
            "small_rss_mb": small["rss_mb"],
            "large_rss_mb": large["rss_mb"],
            "ratio": large["rss_mb"] / small["rss_mb"],
        }


def summarise_stacks(path: Path, top: int = 15, *, threads: bool = False) -> dict[str, Any]:
    """Own and inclusive sample shares per function from py-spy's raw (collapsed) output; ``threads``:
    recorded with ``--threads``, whose first frame of each stack names the thread (left out here)."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    if not path.exists():
        return {"samples": 0, "own": [], "inclusive": []}
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(frame) for frame in stack.split(";") if frame]
        if threads and frames and frames[0].startswith("thread ("):
            frames = frames[1:]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    share = max(total, 1)
    return {
        "samples": total,
        "own": [{"function": f, "share": n / share} for f, n in own.most_common(top)],
        "inclusive": [{"function": f, "share": n / share} for f, n in inclusive.most_common(top * 2)],
    }


def _short(frame: str) -> str:
    """'name (path/to/file.py:12)' -> 'name (file.py:12)' with the package kept for our code."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    for marker in ("/site-packages/", f"{HERE.parent}/", "/work/main/", "/lib/python3.11/"):
        if marker in where:
            where = where.rsplit(marker, 1)[-1]
            break
    return f"{name} ({where})" if where else name


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {memory:.0f} GiB, {platform.system()} {platform.release()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="seconds, small counts: checks that it runs (CI)"
    )
    parser.add_argument("--load-generator", choices=["auto", "wrk", "python"], default="auto")
    parser.add_argument("--results-dir", type=Path, default=DEFAULT_RESULTS)
    parser.add_argument(
        "--workdir", type=Path, default=None, help="where the databases go (default: a temp dir)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the databases (and the PostgreSQL scratch schemas)"
    )
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--duration", type=float, default=None, help="seconds per HTTP run")
    parser.add_argument("--concurrency", default=None, help="comma-separated, e.g. 1,8,32,128")
    parser.add_argument("--records", type=int, default=None, help="the large record count (default 10^6)")
    parser.add_argument(
        "--profile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="py-spy the FULL server under POST /v1/disburse (default: on in a full run)",
    )
    parser.add_argument(
        "--only",
        default="http,inprocess,growth,bulk,memory,onecore",
        help="parts to run, comma-separated (http, inprocess, growth, bulk, memory, onecore)",
    )
    parser.add_argument(
        "--postgres",
        default=None,
        metavar="URL",
        help="the PostgreSQL server of the PostgreSQL rounds (default: $PAYMENTCORE_BENCH_POSTGRES_URL, "
        "else $PAYMENTCORE_TEST_POSTGRES_URL; 'none' skips them); the role creates and drops schemas",
    )
    args = parser.parse_args(argv)

    plan = QUICK if args.quick else FULL
    changes: dict[str, Any] = {}
    if args.rounds is not None:
        changes["rounds"] = args.rounds
    if args.duration is not None:
        changes["duration"] = args.duration
    if args.concurrency:
        changes["concurrency"] = tuple(int(x) for x in args.concurrency.split(","))
        changes["onecore_concurrency"] = changes["concurrency"]
    if args.records is not None:
        changes["records"] = (plan.records[0], args.records)
    if changes:
        plan = Plan(**{**vars(plan), **changes})
    tool = args.load_generator
    if tool == "auto":
        tool = "wrk" if have_wrk() else "python"
    elif tool == "wrk" and not have_wrk():
        parser.error("wrk is not installed (apt-get install -y wrk)")
    parts = {p.strip() for p in args.only.split(",") if p.strip()}
    profile = args.profile if args.profile is not None else not plan.quick
    results_dir: Path = args.results_dir
    results_dir.mkdir(parents=True, exist_ok=True)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="paymentcore-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)

    postgres: PostgresSchemas | None = None
    postgres_meta = "not run (the http part is off)"
    if "http" in parts:
        postgres_url = args.postgres if args.postgres is not None else postgres_from_env()
        if postgres_url is None or postgres_url.strip().lower() in ("", "none"):
            postgres_meta = "skipped: no PostgreSQL server given"
            print(
                "PostgreSQL rounds skipped: set $PAYMENTCORE_BENCH_POSTGRES_URL or "
                "$PAYMENTCORE_TEST_POSTGRES_URL (or --postgres URL) to run them",
                flush=True,
            )
        else:
            import psycopg

            try:
                postgres_meta = postgres_version(postgres_url)
            except psycopg.Error as exc:
                reason = " ".join(str(exc).split())
                print(
                    f"error: cannot use the PostgreSQL server for the benchmarks: {reason}", file=sys.stderr
                )
                return 2
            postgres = PostgresSchemas(postgres_url)

    loop, parser_name = event_loop_and_parser()
    began = time.monotonic()
    import uvicorn

    results: dict[str, Any] = {
        "meta": {
            "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "quick": plan.quick,
            "plan": vars(plan),
            "machine": machine(),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "postgres": postgres_meta,
            "uvicorn": uvicorn.__version__,
            "uvicorn_loop": loop,
            "uvicorn_http": parser_name,
            "load_generator": "wrk -t1 (load.lua)"
            if tool == "wrk"
            else "Python asyncio generator (bench_load.py)",
            "workdir": str(workdir),
        }
    }
    print(
        f"benchmarks: {'quick' if plan.quick else 'full'} run, load by {tool}, databases in {workdir}",
        flush=True,
    )
    suite = Suite(plan, tool, workdir, results_dir, profile, postgres)
    status = 0
    try:
        if "http" in parts:
            results["http"] = suite.http()
        if "inprocess" in parts:
            results["inprocess"] = suite.inprocess()
        if "growth" in parts:
            results["growth"] = suite.growth()
        if "bulk" in parts:
            results["bulk"] = suite.bulk()
        if "memory" in parts:
            results["memory"] = suite.memory()
        if "onecore" in parts:
            results["onecore"] = suite.onecore()
    except Exception:
        traceback.print_exc()
        suite.gate.check("the run completed", False, traceback.format_exc(limit=3).strip().splitlines()[-1])
        status = 2
    finally:
        suite.stop_all()
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        if postgres is not None and not args.keep:
            try:
                postgres.drop()
            except Exception:  # a leftover scratch schema is harmless
                traceback.print_exc()
    results["meta"]["duration_s"] = time.monotonic() - began
    results["gate"] = {"passed": suite.gate.passed, "checks": suite.gate.checks}
    results["targets"] = bench_report.evaluate_targets(results)
    (results_dir / "latest.json").write_text(json.dumps(results, indent=2) + "\n")
    report = bench_report.markdown(results)
    (results_dir / "latest.md").write_text(report)
    if "onecore" in results:
        import bench_one_core

        bench_one_core.write_part(results, results_dir)
    print()
    print(report)
    if status:
        return status
    return 0 if suite.gate.passed else 1


if __name__ == "__main__":
    sys.exit(main())
