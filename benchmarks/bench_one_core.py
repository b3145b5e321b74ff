"""Issue 27's yardstick, "One core, batched": the API with its worker on one CPU, against the echo.

``python3 benchmarks/bench_one_core.py [--quick] [--rounds N] [--duration S]`` (the same as
``python3 benchmarks/run.py --only onecore ...``; every option of run.py applies).

Measured as users run the server, in one run:

- **Our server** is ``paymentcore serve`` itself (``python -m paymentcore_server --db FILE serve``): the
  default install, ``create_app(core, run_worker=True)`` (the worker in the server process), SQLite with
  ``synchronous=FULL`` (serve's default), the sandbox network answering at once (``--sandbox-delay 0``),
  and a webhook endpoint registered for the merchant at a local receiver that answers 204 at once
  (``bench_e2e.Receiver``, ``--allow-private-webhooks``), so every payout causes two deliveries.
- **The baselines**, under the same install and uvicorn: a bare Starlette GET /json and the echo POST
  (our API's auth and JSON parsing, no core), both from ``bench_serve.py``.
- **One CPU each**: every server process is pinned to the first CPU this process may use (CPU 0 here),
  and the load generator (wrk ``-t1``, or the Python generator) with the webhook receiver to the second
  (CPU 1), by pinning this process, whose children inherit it. With fewer than two CPUs nothing is
  pinned and the report says so.
- **Interleaved windows**, ``--rounds`` x concurrency 32 and 128 x five endpoints, ``--duration`` s each
  (5 s), the order rotating every round: POST /v1/disburse (a unique Idempotency-Key each) against the
  echo POST, and GET by reference (GET /v1/disburse/{reference} of a payout, GET
  /v1/collect/{reference} of a collection) against the bare GET; req/s, the ratio to the baseline of the
  same round and concurrency, p50 and p99.
- **The background work** after each POST window: from the window's end until every payout is PAID, no
  collection open, no webhook event waiting and the receiver has every delivered event, polled every
  20 ms from the database file; as a ratio to the window's length. The end-to-end rate is the payouts
  that window added, PAID with their webhooks delivered, over the window plus that drain. The server's
  CPU use in the window (``/proc``) says whether it saturated its one core.
- **In-process**: ``core.disburse.create`` against a raw sqlite3 transaction doing the same writes
  (``bench_core.compare_payouts``, FULL), as run.py's ``inprocess`` part measures it.
- **Profiles** (``--profile``, on in a full run, with py-spy installed): one more POST window at c=32
  sampled with ``py-spy --gil --threads`` during the load and again during the drain that follows, and
  one sampled for all active threads; shares per thread and per function.
- **The correctness gate**: only 2xx in every window; every payout stored once, the accepted ones stored,
  one reservation each, balances conserved, one idempotency record per POST and the ledger invariant
  (run.check_core_db); after the last drain every payout PAID and every webhook event delivered.

The figures go to ``latest.json``/``latest.md`` (with the rest of the run) and to ``onecore.json`` and
``onecore.md`` in the results directory, each next to the issue's target. Exit 0 when the gate passes
whatever the speed, 1 when it fails, 2 when the run broke.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from collections import Counter
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import bench_core
from bench_e2e import Receiver
from bench_load import LoadResult, Workload, run_load
from bench_serve import HOST

# run.py imports this module only inside Suite.onecore, so importing run here is no cycle (when run.py is
# the script, this loads a second copy of it as the module ``run``: plain functions and classes, no state)
from run import (
    Accepted,
    Server,
    check_core_db,
    check_run,
    free_port,
    stop_server,
    summarise_stacks,
    wait_ready,
)

from paymentcore import Config, PaymentCore

if TYPE_CHECKING:
    from run import Suite

HERE = Path(__file__).resolve().parent
POLL_S = 0.02  # how often the drain is polled
PIN = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])}); os.execv(sys.argv[2], sys.argv[2:])"


@dataclass(frozen=True)
class Endpoint:
    name: str  # the target's name in the runs and the summary
    kind: str  # the Workload kind (bench_load)
    label: str
    server: str  # bare | echo | core
    baseline: str | None  # the target whose req/s of the same round it is divided by


ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("bare", "bare", "GET /json (bare Starlette)", "bare", None),
    Endpoint("echo", "echo", "POST /echo (auth + JSON, no core)", "echo", None),
    Endpoint("disburse", "disburse", "POST /v1/disburse", "core", "echo"),
    Endpoint("getpayout", "getpayout", "GET /v1/disburse/{reference}", "core", "bare"),
    Endpoint("getref", "getref", "GET /v1/collect/{reference}", "core", "bare"),
)
BY_NAME = {e.name: e for e in ENDPOINTS}


@dataclass(frozen=True)
class Spy:
    """One py-spy recording of the server: its file is results/profile-onecore-<mode>.txt."""

    mode: str
    flags: tuple[str, ...]
    what: str


GIL_LOAD = Spy("gil-load", ("--gil", "--threads"), "holding the GIL, during POST /v1/disburse at c=32")
GIL_DRAIN = Spy("gil-drain", ("--gil", "--threads"), "holding the GIL, during the drain after that load")
ACTIVE_LOAD = Spy("active-load", ("--threads",), "every active thread, during POST /v1/disburse at c=32")


# --- pinning and the server's CPU ---------------------------------------------------------------


def pinned(cpu: int | None, command: list[str]) -> list[str]:
    """``command`` run on ``cpu`` alone (a small exec wrapper: the affinity survives exec)."""
    if cpu is None:
        return command
    return [sys.executable, "-c", PIN, str(cpu), *command]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (all its threads), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_ticks() -> dict[int, list[int]]:
    """Per CPU, the kernel's time counters (/proc/stat: user nice system idle iowait irq softirq steal)."""
    ticks: dict[int, list[int]] = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, _, values = line.partition(" ")
        if name.startswith("cpu") and name[3:].isdigit():
            ticks[int(name[3:])] = [int(v) for v in values.split()[:8]]
    return ticks


def cpu_use(before: dict[int, list[int]], after: dict[int, list[int]], cpu: int | None) -> dict[str, float]:
    """How one CPU spent the time between two :func:`cpu_ticks`: busy (user, system, interrupts: any
    process), waiting for the disk, idle, and stolen by the hypervisor for other machines."""
    if cpu is None or cpu not in before or cpu not in after:
        return {}
    user, nice, system, idle, iowait, irq, softirq, steal = (
        a - b for a, b in zip(after[cpu], before[cpu], strict=True)
    )
    total = max(user + nice + system + idle + iowait + irq + softirq + steal, 1)
    return {
        "busy": (user + nice + system + irq + softirq) / total,
        "iowait": iowait / total,
        "idle": idle / total,
        "steal": steal / total,
    }


def allowed_cpus(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    return "?"


# --- the background work, read from the database file ------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    paid: int  # payouts PAID
    unfinished: int  # payouts PENDING or SENT
    other: int  # payouts FAILED or REJECTED
    open_collections: int
    pending_events: int
    delivered_events: int
    received: int  # webhook requests the receiver got


class Probe:
    """Read-only polls of the server's SQLite file (WAL: they never wait for the writer)."""

    def __init__(self, db: Path, receiver: Receiver) -> None:
        self.conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        self.receiver = receiver

    def _count(self, query: str) -> int:
        row = self.conn.execute(query).fetchone()
        return int(row[0]) if row else 0

    def payouts_busy(self) -> bool:
        return bool(self._count("SELECT count(*) FROM payouts WHERE status IN ('PENDING', 'SENT')"))

    def busy(self) -> bool:
        """Whether any background work remains (the cheap poll: each count is an index range)."""
        return bool(
            self.payouts_busy()
            or self._count("SELECT count(*) FROM collections WHERE status IN ('PENDING', 'PROCESSING')")
            or self._count("SELECT count(*) FROM events WHERE status = 'PENDING'")
            or self.receiver.count < self._count("SELECT count(*) FROM events WHERE status = 'DELIVERED'")
        )

    def snapshot(self) -> Snapshot:
        payouts = dict(self.conn.execute("SELECT status, count(*) FROM payouts GROUP BY status").fetchall())
        return Snapshot(
            paid=int(payouts.get("PAID", 0)),
            unfinished=int(payouts.get("PENDING", 0)) + int(payouts.get("SENT", 0)),
            other=int(payouts.get("FAILED", 0)) + int(payouts.get("REJECTED", 0)),
            open_collections=self._count(
                "SELECT count(*) FROM collections WHERE status IN ('PENDING', 'PROCESSING')"
            ),
            pending_events=self._count("SELECT count(*) FROM events WHERE status = 'PENDING'"),
            delivered_events=self._count("SELECT count(*) FROM events WHERE status = 'DELIVERED'"),
            received=self.receiver.count,
        )

    def wait(self, since: float, cap: float) -> float | None:
        """Seconds from ``since`` (a monotonic time) until no background work remains; None at ``cap``."""
        return self.drain(since, cap)[1]

    def drain(self, since: float, cap: float) -> tuple[float | None, float | None]:
        """Seconds from ``since`` (a monotonic time) until every payout is PAID, and until no background
        work at all remains (the webhooks delivered too); None for what ``cap`` seconds did not see."""
        paid: float | None = None
        while True:
            now = time.monotonic()
            if paid is None and not self.payouts_busy():
                paid = now - since
            if paid is not None and not self.busy():
                return paid, now - since
            if now - since > cap:
                return paid, None
            time.sleep(POLL_S)

    def close(self) -> None:
        self.conn.close()


# --- the part -------------------------------------------------------------------------------------


class OneCore:
    def __init__(self, suite: Suite) -> None:
        self.suite = suite
        self.plan = suite.plan
        self.tool = suite.tool
        self.gate = suite.gate
        self.workdir = suite.workdir / "onecore"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.tag = secrets.token_hex(3)
        self.loads = 0
        self.servers: dict[str, Any] = {}
        self.window_cap = max(60.0, 20 * self.plan.duration)  # a drain longer than this is abandoned
        self.accepted = Accepted()
        self.echo_token = "pck_" + secrets.token_urlsafe(32)
        self.server_cpu: int | None = None
        self.load_cpu: int | None = None

    # the unique load of one window
    def workload(self, endpoint: Endpoint, prep: bench_core.Prepared, payout_refs: Path) -> Workload:
        self.loads += 1
        prefix = f"oc{self.tag}{self.loads}"
        if endpoint.kind == "bare":
            return Workload("bare", prefix=prefix)
        if endpoint.kind == "echo":
            return Workload("echo", self.echo_token, prefix)
        refs = "-"
        if endpoint.kind == "getref":
            refs = str(prep.refs_file)
        elif endpoint.kind == "getpayout":
            refs = str(payout_refs)
        return Workload(endpoint.kind, prep.tokens[endpoint.kind], prefix, 0, refs)

    def run(self) -> dict[str, Any]:
        plan = self.plan
        levels = plan.onecore_concurrency
        print("one core: preparing the database", flush=True)
        prep = bench_core.prepare_server_db(
            self.workdir / "onecore.db",
            kinds=["disburse", "getref", "getpayout"],
            references=plan.references,
            replays=plan.replays,
        )
        payout_refs = self.workdir / "onecore.payouts"
        with closing(sqlite3.connect(f"file:{prep.db}?mode=ro", uri=True)) as conn:
            refs = [row[0] for row in conn.execute("SELECT reference FROM payouts ORDER BY created_at")]
        payout_refs.write_text("\n".join(refs) + "\n")
        tokens = {"pck_" + secrets.token_urlsafe(32): f"mer_{i}" for i in range(999)}
        tokens[self.echo_token] = "mer_echo"
        tokens_file = self.workdir / "echo-tokens.json"
        tokens_file.write_text(json.dumps(tokens))

        original = os.sched_getaffinity(0)
        cpus = sorted(original)
        server_cpu, load_cpu = (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)
        self.server_cpu, self.load_cpu = server_cpu, load_cpu
        if load_cpu is not None:
            os.sched_setaffinity(0, {load_cpu})  # wrk, the receiver and the polls inherit it
        receiver = Receiver()  # its threads start here, on the load CPU
        probe: Probe | None = None
        runs: list[dict[str, Any]] = []
        profiles: dict[str, Any] = {}
        result: dict[str, Any] = {}
        try:
            registrar = PaymentCore.sqlite(prep.db, sender=None, config=Config(allow_private_webhooks=True))
            try:
                registrar.webhooks.register(prep.merchant_id, url=receiver.url)
            finally:
                registrar.close()
            serve = [
                sys.executable, "-m", "paymentcore_server", "--db", str(prep.db), "serve", "--host", HOST,
                "--sandbox-delay", "0", "--allow-private-webhooks", "--port",
            ]  # fmt: skip
            commands = {
                "bare": ([sys.executable, str(HERE / "bench_serve.py"), "bare", "--port"], "/json", "GET"),
                "echo": (
                    [
                        sys.executable,
                        str(HERE / "bench_serve.py"),
                        "echo",
                        "--tokens",
                        str(tokens_file),
                        "--port",
                    ],
                    "/echo",
                    "POST",
                ),
                "core": (serve, "/healthz", "GET"),
            }
            for name, (command, ready, method) in commands.items():
                port = free_port()
                log = self.suite.logs / f"onecore-{name}.log"
                with log.open("wb") as out:
                    process = subprocess.Popen(
                        pinned(server_cpu, [*command, str(port)]),
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                server = Server(f"onecore-{name}", port, process, log, ready, method)
                self.suite.servers.append(server)  # stopped by the suite too, should this part break
                self.servers[name] = server
            for server in self.servers.values():
                wait_ready(server)
            affinity = {name: allowed_cpus(s.process.pid) for name, s in self.servers.items()}
            print(f"one core: servers on CPU {affinity}, load on CPU {load_cpu}", flush=True)
            probe = Probe(prep.db, receiver)
            began = time.monotonic()
            settled = probe.wait(began, 300)
            if settled is None:
                raise RuntimeError("the prepared records' background work did not finish within 300 s")
            print(f"one core: the prepared records' background work took {settled:.1f} s", flush=True)

            def window(endpoint: Endpoint, level: int, seconds: float) -> dict[str, Any]:
                assert probe is not None
                return self.window(probe, endpoint, level, seconds, prep, payout_refs)

            if plan.warmup:
                print("one core: warming up", flush=True)
                for endpoint in ENDPOINTS:
                    window(endpoint, 32, 1)
            for round_no in range(plan.rounds):
                for index, level in enumerate(levels):
                    shift = (round_no + index) % len(ENDPOINTS)
                    for endpoint in ENDPOINTS[shift:] + ENDPOINTS[:shift]:
                        record = window(endpoint, level, plan.duration)
                        runs.append(
                            {"round": round_no, "concurrency": level, "target": endpoint.name, **record}
                        )
                        print(self.line(round_no, level, endpoint, record), flush=True)
            if self.suite.profile:
                profiles = self.profile(probe, prep, payout_refs)
            final = probe.wait(time.monotonic(), 300)
            snapshot = probe.snapshot()
        finally:
            if probe is not None:
                probe.close()
            for server in self.servers.values():
                stop_server(server)
            receiver.close()
            os.sched_setaffinity(0, original)
        self.check(prep, snapshot, final is not None)
        print("one core: in-process payouts against raw sqlite3 (FULL)", flush=True)
        inprocess = bench_core.compare_payouts(
            self.workdir, "FULL", batch=plan.payout_batch, batches=plan.payout_batches
        )
        duration = plan.duration if self.tool == "python" else max(1, round(plan.duration))
        result = {
            "server_command": "python -m paymentcore_server --db FILE serve --sandbox-delay 0 "
            "--allow-private-webhooks (worker in the process, SQLite FULL, webhook to a local 204 receiver)",
            "pinned": server_cpu is not None,
            "server_cpu": server_cpu,
            "load_cpu": load_cpu,
            "affinity": affinity,
            "rounds": plan.rounds,
            "duration_s": duration,
            "concurrency": list(levels),
            "prepared_settle_s": settled,
            "runs": runs,
            "summary": summarise(runs),
            "background": summarise_background(runs),
            "inprocess": inprocess,
            "profiles": profiles,
            "final": {**vars(snapshot), "drained": final is not None},
            "accepted": vars(self.accepted),
        }
        return result

    def window(
        self,
        probe: Probe,
        endpoint: Endpoint,
        level: int,
        seconds: float,
        prep: bench_core.Prepared,
        payout_refs: Path,
        spy: Spy | None = None,
        drain_spy: Spy | None = None,
    ) -> dict[str, Any]:
        """One load window; for POST /v1/disburse also the background work it leaves (waited for), with
        py-spy sampling the server during the load (``spy``) and during the drain (``drain_spy``)."""
        server = self.servers[endpoint.server]
        pid = server.process.pid
        before = probe.snapshot() if endpoint.kind == "disburse" else None
        sampler = self.start_spy(pid, spy) if spy else None
        others = [s.process.pid for s in self.servers.values() if s is not server]
        others_start = sum(cpu_seconds(other) for other in others)
        ticks_start = cpu_ticks()
        cpu_start = cpu_seconds(pid)
        result: LoadResult = run_load(
            self.tool, HOST, server.port, self.workload(endpoint, prep, payout_refs), level, seconds
        )
        ended = time.monotonic()
        cpu_load = cpu_seconds(pid) - cpu_start
        ticks_load = cpu_ticks()
        others_load = sum(cpu_seconds(other) for other in others) - others_start
        if sampler is not None:
            self.stop_spy(sampler)
        check_run(self.gate, f"onecore {endpoint.name} c={level}", result)
        record: dict[str, Any] = {
            "result": result.to_json(),
            "server_cpu_s": cpu_load,
            # answers per second of the server's own CPU time: what the server does with the CPU it got,
            # whatever else ran on that CPU (the machine is shared)
            "per_cpu_s": result.requests / cpu_load if cpu_load > 0 else None,
            "server_cpu_busy": cpu_load / result.duration_s if result.duration_s else None,
            # the idle servers on the same CPU meanwhile (the core server's worker polls when idle)
            "idle_servers_cpu_busy": others_load / result.duration_s if result.duration_s else None,
            # the two CPUs as the kernel saw them (any process, and time stolen for other machines)
            "server_cpu": cpu_use(ticks_start, ticks_load, self.server_cpu),
            "load_cpu": cpu_use(ticks_start, ticks_load, self.load_cpu),
        }
        if before is None:
            return record
        self.accepted.disburse += result.requests - result.non_2xx
        self.accepted.disburse_in_flight += level
        at_end = probe.snapshot()
        drainer = self.start_spy(pid, drain_spy, settle=0) if drain_spy else None
        paid_s, drain = probe.drain(ended, self.window_cap)
        if drainer is not None:
            self.stop_spy(drainer)
        cpu_drain = cpu_seconds(pid) - cpu_start - cpu_load
        ticks_drain = cpu_ticks()
        after = probe.snapshot()
        paid = after.paid - before.paid
        window_s = result.duration_s
        record["background"] = {
            "window_s": window_s,
            "drained": drain is not None,
            "drain_s": drain,
            "drain_ratio": drain / window_s if drain is not None and window_s else None,
            "paid_s": paid_s,  # until every payout was PAID (their webhooks may still be on the way)
            "payouts": paid,
            "api_payouts_per_s": (result.requests - result.non_2xx) / window_s if window_s else 0.0,
            "end_to_end_per_s": paid / (window_s + drain) if drain is not None else None,
            "backlog_at_end": {
                "payouts_unpaid": at_end.unfinished,
                "events_pending": at_end.pending_events,
                "deliveries_owed": at_end.delivered_events - at_end.received,
            },
            "server_cpu_drain_s": cpu_drain,
            "server_cpu_drain": cpu_use(ticks_load, ticks_drain, self.server_cpu),
            "deliveries": after.received - before.received,
        }
        return record

    @staticmethod
    def line(round_no: int, level: int, endpoint: Endpoint, record: dict[str, Any]) -> str:
        r = record["result"]
        text = (
            f"one core round {round_no + 1} c={level:<3} {endpoint.name:<9} {r['rps']:8.0f} req/s  "
            f"p50 {r['p50_ms']:6.1f}  p99 {r['p99_ms']:6.1f} ms  server CPU {record['server_cpu_busy']:.2f}"
        )
        bg = record.get("background")
        if bg:
            drained = f"{bg['drain_s']:.2f} s ({bg['drain_ratio']:.2f}x)" if bg["drained"] else "NOT drained"
            e2e = bg["end_to_end_per_s"]
            text += f"; background done after {drained}, end to end {e2e or 0:.0f}/s"
        return text

    # --- py-spy ---------------------------------------------------------------------------------

    def spy_file(self, spy: Spy) -> Path:
        return self.suite.results_dir / f"profile-onecore-{spy.mode}.txt"

    def start_spy(self, pid: int, spy: Spy, settle: float = 0.5) -> subprocess.Popen[bytes]:
        command = [
            "py-spy", "record", "--pid", str(pid), "--rate", "250", "--nonblocking", "--format", "raw",
            "--output", str(self.spy_file(spy)), "--duration", "3600", *spy.flags,
        ]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(settle)  # attached before the load starts
        return process

    @staticmethod
    def stop_spy(spy: subprocess.Popen[bytes]) -> None:
        spy.send_signal(signal.SIGINT)  # py-spy writes what it sampled and exits
        try:
            spy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait()

    def profile(self, probe: Probe, prep: bench_core.Prepared, payout_refs: Path) -> dict[str, Any]:
        """Two more POST windows at c=32 (not in the table): the GIL's holders during the load and during
        the drain after it, then every active thread during the load."""
        if shutil.which("py-spy") is None:
            return {"skipped": "py-spy is not installed (pip install py-spy, the bench extra)"}
        endpoint = BY_NAME["disburse"]
        seconds = max(3.0, self.plan.duration)
        out: dict[str, Any] = {}
        print("one core: py-spy on the server under POST /v1/disburse, c=32", flush=True)
        gil = self.window(probe, endpoint, 32, seconds, prep, payout_refs, GIL_LOAD, GIL_DRAIN)
        active = self.window(probe, endpoint, 32, seconds, prep, payout_refs, ACTIVE_LOAD)
        for spy, record in ((GIL_LOAD, gil), (GIL_DRAIN, gil), (ACTIVE_LOAD, active)):
            raw = self.spy_file(spy)
            out[spy.mode] = {
                "what": spy.what,
                "file": raw.name,
                "rps_while_sampled": record["result"]["rps"],
                "threads": thread_shares(raw),
                **summarise_stacks(raw, threads=True),
            }
        out["drain_s_while_sampled"] = gil["background"]["drain_s"]
        return out

    # --- the gate ---------------------------------------------------------------------------------

    def check(self, prep: bench_core.Prepared, snapshot: Snapshot, drained: bool) -> None:
        check = self.gate.check
        with closing(sqlite3.connect(f"file:{prep.db}?mode=ro", uri=True)) as conn:
            row = conn.execute(
                "SELECT sum(settled_amount) FROM collections WHERE status = 'SUCCESS'"
            ).fetchone()
        # the worker settles the prepared collections (read by GET /v1/collect/{reference}): what they
        # credited the merchant counts as funding in the balance check
        settled = int(row[0] or 0) if row else 0
        check_core_db(self.gate, "onecore", replace(prep, funded=prep.funded + settled), self.accepted)
        check(
            "onecore: every payout PAID after the drain",
            drained and snapshot.unfinished == 0 and snapshot.other == 0,
            f"{snapshot.paid} PAID, {snapshot.unfinished} pending or sent, {snapshot.other} failed or "
            f"rejected; drained: {drained}",
        )
        with closing(sqlite3.connect(f"file:{prep.db}?mode=ro", uri=True)) as conn:
            events = Counter(
                {
                    (kind, status): count
                    for kind, status, count in conn.execute(
                        "SELECT type, status, count(*) FROM events GROUP BY type, status"
                    )
                }
            )
        undelivered = sum(n for (_kind, status), n in events.items() if status != "DELIVERED")
        sent = events[("disburse.sent", "DELIVERED")]
        succeeded = events[("disburse.succeeded", "DELIVERED")]
        delivered = sum(n for (_kind, status), n in events.items() if status == "DELIVERED")
        check(
            "onecore: webhook deliveries complete",
            undelivered == 0
            and sent == snapshot.paid
            and succeeded == snapshot.paid
            and snapshot.received >= delivered,
            f"{snapshot.paid} payouts PAID; delivered disburse.sent {sent}, disburse.succeeded {succeeded}, "
            f"{delivered} events in all; {undelivered} not delivered; the receiver got {snapshot.received}",
        )


# --- summaries ------------------------------------------------------------------------------------


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (endpoint, concurrency): medians over rounds, ratios to the baseline of the same round."""
    rps = {(r["round"], r["concurrency"], r["target"]): r["result"]["rps"] for r in runs}
    per_cpu = {(r["round"], r["concurrency"], r["target"]): r.get("per_cpu_s") for r in runs}
    rows: list[dict[str, Any]] = []
    for endpoint in ENDPOINTS:
        for level in sorted({r["concurrency"] for r in runs}):
            mine = [r for r in runs if r["target"] == endpoint.name and r["concurrency"] == level]
            if not mine:
                continue
            results = [r["result"] for r in mine]
            ratios = []
            cpu_ratios = []
            if endpoint.baseline is not None:
                for r in mine:
                    base = rps.get((r["round"], level, endpoint.baseline))
                    if base:
                        ratios.append(r["result"]["rps"] / base)
                    base_cpu = per_cpu.get((r["round"], level, endpoint.baseline))
                    if base_cpu and r.get("per_cpu_s"):
                        cpu_ratios.append(r["per_cpu_s"] / base_cpu)
            own_cpu = [r["per_cpu_s"] for r in mine if r.get("per_cpu_s")]
            busy = [r["server_cpu_busy"] for r in mine if r.get("server_cpu_busy") is not None]
            idle = [r["idle_servers_cpu_busy"] for r in mine if r.get("idle_servers_cpu_busy") is not None]
            cpus = {
                f"{side}_{what}": statistics.median(r[f"{side}_cpu"][what] for r in mine)
                for side in ("server", "load")
                for what in ("busy", "iowait", "steal")
                if all(r.get(f"{side}_cpu") for r in mine)
            }
            rows.append(
                {
                    "target": endpoint.name,
                    "endpoint": endpoint.label,
                    "baseline": endpoint.baseline,
                    "concurrency": level,
                    "rounds": len(mine),
                    "rps": _spread([x["rps"] for x in results]),
                    "p50_ms": statistics.median(x["p50_ms"] for x in results),
                    "p99_ms": _spread([x["p99_ms"] for x in results]),
                    "max_ms": max(x["max_ms"] for x in results),
                    "ratio": _spread(ratios) if ratios else None,
                    "per_cpu_s": statistics.median(own_cpu) if own_cpu else None,
                    "ratio_per_cpu_s": _spread(cpu_ratios) if cpu_ratios else None,
                    "server_cpu_busy": statistics.median(busy) if busy else None,
                    "idle_servers_cpu_busy": statistics.median(idle) if idle else None,
                    "cpus": cpus,
                    "requests": sum(x["requests"] for x in results),
                }
            )
    return rows


def summarise_background(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per concurrency: how long the background work took after the POST windows, and the end-to-end rate."""
    rows: list[dict[str, Any]] = []
    for level in sorted({r["concurrency"] for r in runs}):
        mine = [r["background"] for r in runs if r["concurrency"] == level and "background" in r]
        if not mine:
            continue
        drained = [b for b in mine if b["drained"]]
        rows.append(
            {
                "concurrency": level,
                "windows": len(mine),
                "undrained_windows": len(mine) - len(drained),
                "drain_s": _spread([b["drain_s"] for b in drained]) if drained else None,
                "drain_ratio": _spread([b["drain_ratio"] for b in drained]) if drained else None,
                "api_payouts_per_s": _spread([b["api_payouts_per_s"] for b in mine]),
                "end_to_end_per_s": _spread([b["end_to_end_per_s"] for b in drained]) if drained else None,
            }
        )
    return rows


def thread_shares(path: Path) -> list[dict[str, Any]]:
    """Sample shares per thread group ('paymentcore-request_3' counts as 'paymentcore-request') from
    py-spy's raw output recorded with --threads."""
    groups: Counter[str] = Counter()
    total = 0
    if not path.exists():
        return []
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        first = stack.split(";", 1)[0]
        name = first.split("): ", 1)[1] if first.startswith("thread (") and "): " in first else "?"
        groups[re.sub(r"_\d+$", "", name)] += int(count_text)
        total += int(count_text)
    return [{"thread": name, "share": n / max(total, 1)} for name, n in groups.most_common()]


def write_part(results: dict[str, Any], results_dir: Path) -> None:
    """``onecore.json`` and ``onecore.md``: this part's figures, its gate checks and its targets."""
    import bench_report

    part = {
        "meta": results["meta"],
        "onecore": results["onecore"],
        "gate": {
            "passed": all(c["ok"] for c in results["gate"]["checks"] if c["name"].startswith("onecore")),
            "checks": [c for c in results["gate"]["checks"] if c["name"].startswith("onecore")]
            + [c for c in results["gate"]["checks"] if c["name"] == "the run completed"],
        },
        "targets": bench_report.onecore_targets(results["onecore"]),
    }
    if any(c["name"] == "the run completed" for c in part["gate"]["checks"]):
        part["gate"]["passed"] = False
    (results_dir / "onecore.json").write_text(json.dumps(part, indent=2) + "\n")
    (results_dir / "onecore.md").write_text(bench_report.markdown(part))


def measure(suite: Suite) -> dict[str, Any]:
    return OneCore(suite).run()


def main(argv: list[str] | None = None) -> int:
    import run

    return run.main(["--only", "onecore", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
