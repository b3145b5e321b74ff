"""The performance suite: ``python3 benchmarks/run.py`` (full, about 20 minutes) or ``--quick`` (CI).

One run, on this machine:

1. HTTP: a bare Starlette JSON endpoint, a bare POST echo endpoint with our API's auth and header
   parsing, and our server on SQLite with synchronous=FULL and with NORMAL, all through the same
   ``uvicorn.run`` flags (benchmarks/bench_serve.py), loaded in interleaved rounds at each concurrency by
   wrk (benchmarks/load.lua) or, without wrk, the Python generator (benchmarks/bench_load.py);
2. in-process: payout creation against a raw sqlite3 transaction, webhook signing against hmac.digest;
3. growth: GET by reference and payout creation with few versus many stored records, and payouts with
   few versus many payouts inside the rolling limit windows;
4. memory: the server's RSS after 10^4 and after 10^5 requests;
5. the correctness gate: no unexpected non-2xx, every accepted payout stored once, balances conserved.

Writes benchmarks/results/latest.json and latest.md. Exits 0 when the gate passes (whatever the speed
figures), 1 when it fails, 2 when the run itself broke.
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

import bench_core
import bench_report
from bench_load import LoadResult, Workload, have_wrk, run_load, run_python
from bench_serve import HOST, event_loop_and_parser

HERE = Path(__file__).resolve().parent
DEFAULT_RESULTS = HERE / "results"
CORE_KINDS = ["disburse", "charge", "getref", "replay"]
SUSTAINED = "sustained"  # a key of its own for the sustained payouts


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


def check_core_db(
    gate: Gate, label: str, prepared: bench_core.Prepared, accepted: Accepted
) -> dict[str, Any]:
    mid = prepared.merchant_id
    conn = sqlite3.connect(f"file:{prepared.db}?mode=ro", uri=True)
    try:
        payouts = conn.execute(
            "SELECT reference, merchant_reference, amount, resolution FROM payouts WHERE merchant_id = ?",
            (mid,),
        ).fetchall()
        reserves = Counter(
            row[0]
            for row in conn.execute(
                "SELECT reference FROM ledger_entries WHERE merchant_id = ? AND kind = 'reserve'", (mid,)
            )
        )
        balance = conn.execute(
            "SELECT available, reserved, paid_out, credited FROM balances"
            " WHERE merchant_id = ? AND currency = ?",
            (mid, bench_core.CURRENCY),
        ).fetchone()
        charges = conn.execute(
            "SELECT merchant_reference FROM collections"
            " WHERE merchant_id = ? AND merchant_reference NOT LIKE 'prep-%'",
            (mid,),
        ).fetchall()
        idempotency = conn.execute(
            "SELECT count(*) FROM idempotency WHERE merchant_id = ?", (mid,)
        ).fetchone()[0]
    finally:
        conn.close()
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
    core = bench_core.open_core(prepared.db)
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
    def __init__(self, plan: Plan, tool: str, workdir: Path, results_dir: Path, profile: bool) -> None:
        self.plan = plan
        self.tool = tool
        self.workdir = workdir
        self.results_dir = results_dir
        self.logs = results_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.profile = profile
        self.gate = Gate()
        self.tag = secrets.token_hex(3)
        self.invocation = 0
        self.next_phone = 0
        self.servers: list[Server] = []

    # load with unique keys and fresh phone numbers for every invocation
    def workload(self, kind: str, prepared: bench_core.Prepared | None, key: str | None = None) -> Workload:
        self.invocation += 1
        token = "-"
        refs = "-"
        if prepared is not None:
            token = prepared.tokens[key or kind]
            if kind == "getref":
                refs = str(prepared.refs_file)
            elif kind == "replay":
                refs = str(prepared.replay_file)
        return Workload(kind, token, f"b{self.tag}{self.invocation}", self.next_phone, refs)

    def after(self, workload: Workload, result: LoadResult) -> None:
        if workload.kind == "charge":
            self.next_phone += result.generated + 1000

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
        echo_token = "pck_" + secrets.token_urlsafe(32)
        tokens = {"pck_" + secrets.token_urlsafe(32): f"mer_{i}" for i in range(999)}
        tokens[echo_token] = "mer_echo"
        tokens_file = self.workdir / "echo-tokens.json"
        tokens_file.write_text(json.dumps(tokens))
        echo_prepared = bench_core.Prepared(
            self.workdir / "none", "mer_echo", {"echo": echo_token}, Path("-"), Path("-"), [], 0
        )
        accepted = {sync: Accepted() for sync in prepared}
        runs: list[dict[str, Any]] = []
        sustained: list[dict[str, Any]] = []
        profiles: dict[str, Any] = {}
        try:
            servers = {
                "bare": self.launch("bare", ["bare"], "/json"),
                "echo": self.launch("echo", ["echo", "--tokens", str(tokens_file)], "/echo", "POST"),
            }
            for sync, prep in prepared.items():
                servers[f"core-{sync}"] = self.launch(
                    f"core-{sync}", ["core", "--db", str(prep.db), "--synchronous", sync], "/healthz"
                )
            for server in servers.values():
                wait_ready(server)
            targets: list[tuple[str, str, str, bench_core.Prepared | None, str | None]] = [
                ("bare", "bare", "bare", None, None),
                ("echo", "echo", "echo", echo_prepared, None),
            ]
            for sync in prepared:
                for kind in CORE_KINDS:
                    targets.append((f"{kind}-{sync}", f"core-{sync}", kind, prepared[sync], sync))

            def one(
                target: tuple[str, str, str, bench_core.Prepared | None, str | None],
                level: int,
                duration: float,
                key: str | None = None,
            ) -> LoadResult:
                name, server_name, kind, prep, sync = target
                workload = self.workload(kind, prep, key)
                result = run_load(self.tool, HOST, servers[server_name].port, workload, level, duration)
                self.after(workload, result)
                check_run(self.gate, f"{name} c={level}", result)
                if sync is not None:
                    ok = result.requests - result.non_2xx
                    if kind == "disburse":
                        accepted[sync].disburse += ok
                        accepted[sync].disburse_in_flight += level
                    elif kind == "charge":
                        accepted[sync].charge += ok
                        accepted[sync].charge_in_flight += level
                    elif kind == "replay":
                        accepted[sync].replay += ok
                return result

            if plan.warmup:
                print("warming up", flush=True)
                for target in targets:
                    one(target, 8, 1)
            for round_no in range(plan.rounds):
                for level in plan.concurrency:
                    shift = (round_no + plan.concurrency.index(level)) % len(targets)
                    for target in targets[shift:] + targets[:shift]:
                        result = one(target, level, plan.duration)
                        runs.append(
                            {
                                "round": round_no,
                                "concurrency": level,
                                "target": target[0],
                                "server": target[1],
                                "result": result.to_json(),
                            }
                        )
                        print(
                            f"round {round_no + 1}/{plan.rounds} c={level:<3} {target[0]:<16} "
                            f"{result.rps:9.0f} req/s  p50 {result.p50_ms:7.1f}  p99 {result.p99_ms:7.1f} ms",
                            flush=True,
                        )
            for i in range(plan.sustained_runs):
                result = one(targets[2], 32, plan.sustained_seconds, SUSTAINED)
                sustained.append(result.to_json())
                print(
                    f"sustained POST /v1/disburse (FULL) c=32, {i + 1}/{plan.sustained_runs}: "
                    f"{result.rps:.0f} req/s, p99 {result.p99_ms:.1f} ms",
                    flush=True,
                )
            if self.profile:
                profiles = self.py_spy(servers["core-FULL"], targets[2], one)
        finally:
            self.stop_all()
        for sync, prep in prepared.items():
            check_core_db(self.gate, f"core-{sync}", prep, accepted[sync])
        return {
            "rounds": plan.rounds,
            "duration_s": plan.duration if self.tool == "python" else max(1, round(plan.duration)),
            "concurrency": list(plan.concurrency),
            "runs": runs,
            "summary": bench_report.summarise_http(runs),
            "accepted": {sync: vars(a) for sync, a in accepted.items()},
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

    # --- 4. memory -------------------------------------------------------------------------------

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


def summarise_stacks(path: Path, top: int = 15) -> dict[str, Any]:
    """Own and inclusive sample shares per function from py-spy's raw (collapsed) output."""
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
    for marker in ("/site-packages/", "/work/main/", "/lib/python3.11/"):
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
    parser.add_argument("--keep", action="store_true", help="keep the databases")
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
        "--only", default="http,inprocess,growth,memory", help="parts to run, comma-separated"
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
    suite = Suite(plan, tool, workdir, results_dir, profile)
    status = 0
    try:
        if "http" in parts:
            results["http"] = suite.http()
        if "inprocess" in parts:
            results["inprocess"] = suite.inprocess()
        if "growth" in parts:
            results["growth"] = suite.growth()
        if "memory" in parts:
            results["memory"] = suite.memory()
    except Exception:
        traceback.print_exc()
        suite.gate.check("the run completed", False, traceback.format_exc(limit=3).strip().splitlines()[-1])
        status = 2
    finally:
        suite.stop_all()
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    results["meta"]["duration_s"] = time.monotonic() - began
    results["gate"] = {"passed": suite.gate.passed, "checks": suite.gate.checks}
    results["targets"] = bench_report.evaluate_targets(results)
    (results_dir / "latest.json").write_text(json.dumps(results, indent=2) + "\n")
    report = bench_report.markdown(results)
    (results_dir / "latest.md").write_text(report)
    print()
    print(report)
    if status:
        return status
    return 0 if suite.gate.passed else 1


if __name__ == "__main__":
    sys.exit(main())
