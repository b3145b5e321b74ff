"""Every example in ``examples/`` runs as documented, and the typed API usage file loads and runs.

The examples run as separate processes, the way a reader would run them. The HTTP example starts a
real server (``python -m paymentcore_server serve --demo``), a real webhook receiver and the merchant
client, each on a free port, and always stops what it started.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import IO, Any

import httpx
import pytest

from paymentcore import verify_webhook

from conftest import HTTP_ENGINES, postgres_url  # type: ignore[import-not-found, unused-ignore]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
API_USAGE = ROOT / "tests" / "typing" / "api_usage.py"
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


# --- helpers ---------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Lines:
    """Collects a process's output lines on a thread, so waiting for one never blocks for ever."""

    def __init__(self, stream: IO[str]) -> None:
        self.seen: list[str] = []
        self.closed = False
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first line (seen before or arriving within ``timeout``) matching ``pattern``."""
        regex = re.compile(pattern)
        for line in self.seen:
            if match := regex.search(line):
                return match
        deadline = time.monotonic() + timeout
        while not self.closed and (left := deadline - time.monotonic()) > 0:
            try:
                item = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if item is None:  # the process closed its output
                self.closed = True
                break
            self.seen.append(item)
            if match := regex.search(item):
                return match
        raise AssertionError(f"no line matching {pattern!r}; output so far:\n" + "\n".join(self.seen))

    def drain(self, timeout: float = 5.0) -> str:
        """Everything the process printed, once its output has closed."""
        self._thread.join(timeout)
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.seen.append(line)
        return "\n".join(self.seen)


def stop(process: subprocess.Popen[str]) -> None:
    """Terminate a process we started, escalate to kill, and reap it."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def run_example(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout
    )


def load_api_usage() -> ModuleType:
    spec = importlib.util.spec_from_file_location("paymentcore_api_usage", API_USAGE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the library examples --------------------------------------------------------------------------


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_embed_in_app(store: str) -> None:
    result = run_example(str(EXAMPLES / "embed_in_app.py"), "--store", store)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.search(r"charge REQ-\d+-\w+ status=SUCCESS requested=10000 XAF settled=9800 XAF", out), out
    assert re.search(r"payout PO-\d+-\w+ status=PAID", out), out
    assert "a payout beyond the balance is refused: INSUFFICIENT_BALANCE" in out
    assert "balance final: XAF available=7300 reserved=0" in out
    assert "final statuses: charge=SUCCESS payout=PAID" in out
    assert "request 1 for Corner Shop: 1 left this minute" in out
    assert "request 3 for Corner Shop: RATE_LIMITED" in out


def test_integrator_suite_passes() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "examples/test_my_shop.py"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "passed" in result.stdout
    assert "failed" not in result.stdout and "error" not in result.stdout.lower()


def test_typed_api_usage_loads_without_side_effects_and_runs(tmp_path: Path) -> None:
    before = set(tmp_path.iterdir())
    module = load_api_usage()
    assert set(tmp_path.iterdir()) == before  # importing it did nothing
    cores = module.build_cores(tmp_path)
    try:
        for core in cores:
            module.pin_signatures(core)
            statuses = module.collect_and_disburse(core)
            assert statuses == {"charge": "SUCCESS", "payout": "PAID", "rejected": "REJECTED"}
            module.operator_switches(core)
    finally:
        for core in cores:
            core.close()
    assert module.errors_and_enums()[0] == "IDEMPOTENCY_KEY_REQUIRED"
    assert module.testing_kit() == [
        "collect.succeeded",
        "collect.failed",
        "disburse.failed",
        "forgery refused",
    ]


# --- the HTTP examples against a real server -------------------------------------------------------


@pytest.fixture(params=HTTP_ENGINES)
def demo_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """A real server on a free port with the demo merchant, on each database engine in turn:
    (base URL, Collect key, Disburse key)."""
    db = postgres_url(tmp_path) if request.param == "postgres" else str(tmp_path / "s.db")
    port = free_port()
    stderr_path = tmp_path / "server.log"
    command = [
        sys.executable,
        "-m",
        "paymentcore_server",
        "--db",
        db,
        "serve",
        "--demo",
        "--port",
        str(port),
        "--sandbox-delay",
        "0",
        "--allow-private-webhooks",
    ]
    with stderr_path.open("w") as stderr:
        server = subprocess.Popen(
            command, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    assert server.stdout is not None
    lines = Lines(server.stdout)
    try:
        collect_key = lines.wait_for(r"Collect key:\s+(\S+)", timeout=20).group(1)
        disburse_key = lines.wait_for(r"Disburse key:\s+(\S+)", timeout=5).group(1)
        base_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            assert server.poll() is None, "the server exited:\n" + stderr_path.read_text()
            try:
                if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "no /healthz:\n" + stderr_path.read_text()
            time.sleep(0.1)
        yield base_url, collect_key, disburse_key
    finally:
        stop(server)
        lines.drain()
        server.stdout.close()


@pytest.mark.slow
def test_merchant_client_and_webhook_receiver(demo_server: tuple[str, str, str]) -> None:
    base_url, collect_key, disburse_key = demo_server
    hook_port = free_port()

    # The receiver needs the secret at start, and the secret comes from registration: register first.
    registered = httpx.put(
        f"{base_url}/v1/webhook",
        headers={"Authorization": f"Bearer {collect_key}"},
        json={"url": f"http://127.0.0.1:{hook_port}/hooks"},
        timeout=10,
    )
    assert registered.status_code == 200, registered.text
    secret = registered.json()["signingSecret"]

    receiver = subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLES / "webhook_receiver.py"),
            "--secret",
            secret,
            "--port",
            str(hook_port),
            "--max-events",
            "4",  # two collect.succeeded, disburse.sent, disburse.succeeded
        ],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert receiver.stdout is not None
    lines = Lines(receiver.stdout)
    try:
        lines.wait_for(r"listening on http://127\.0\.0\.1:\d+/", timeout=20)

        # A forged delivery is refused and does not count as an event.
        forged = httpx.post(
            f"http://127.0.0.1:{hook_port}/hooks",
            content=b'{"eventId":"evt_forged","status":"SUCCESS"}',
            headers={
                "X-Service-Signature": "sha256=" + "0" * 64,
                "X-Service-Timestamp": str(int(time.time())),
                "X-Service-Event": "collect.succeeded",
            },
            timeout=5,
        )
        assert forged.status_code == 400
        lines.wait_for(r"rejected delivery: signature does not match", timeout=5)

        client = run_example(
            str(EXAMPLES / "merchant_client.py"),
            "--base-url",
            base_url,
            "--collect-key",
            collect_key,
            "--disburse-key",
            disburse_key,
            "--poll-interval",
            "0.2",
            "--deadline",
            "20",
            timeout=40,
        )
        assert client.returncode == 0, client.stdout + client.stderr
        out = client.stdout
        assert re.search(r"^charge REQ-\S+ SUCCESS", out, re.M), out
        assert re.search(r"^checkoutUrl: http://127\.0\.0\.1:\d+/checkout/REQ-\S+$", out, re.M), out
        assert re.search(r"^checkout REQ-\S+ SUCCESS via orange_cm", out, re.M), out
        assert re.search(r"^payout PO-\S+ PAID", out, re.M), out
        assert "final statuses: charge=SUCCESS checkout=SUCCESS payout=PAID" in out

        receiver.wait(timeout=20)  # --max-events 4: it stops by itself once all four arrived
        assert receiver.returncode == 0
        received = lines.drain()
        assert received.count("verified collect.succeeded") == 2, received
        assert "verified disburse.sent" in received, received
        assert "verified disburse.succeeded" in received, received
        assert "stopped after 4 event(s)" in received, received
    finally:
        stop(receiver)
        lines.drain()
        receiver.stdout.close()


# --- the reconciliation guide: its Python, its curl commands and examples/reconcile.py -------------

GUIDE = ROOT / "docs" / "reconciliation.md"


def guide_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", GUIDE.read_text("utf-8"), flags=re.S)


def test_the_reconciliation_guides_python_runs_as_it_is() -> None:
    [program] = [block for block in guide_blocks("python") if "TestKit.create()" in block]
    result = run_example("-c", program)
    assert result.returncode == 0, result.stdout + result.stderr


class Hooks:
    """A webhook receiver on loopback that keeps every delivery (headers and raw body)."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        hooks = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                hooks.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def cli_json(db: Path, *args: str) -> dict[str, str]:
    result = run_example("-m", "paymentcore_server", "--db", str(db), *args, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    answer: dict[str, str] = json.loads(result.stdout)
    return answer


@pytest.mark.slow
def test_reconcile_example_and_the_guides_curl_commands(tmp_path: Path) -> None:
    db = tmp_path / "recon.db"
    merchant = cli_json(db, "merchant", "create", "Recon Shop")["merchantId"]
    key = cli_json(
        db, "key", "create", merchant, "--scope", "collect", "--scope", "disburse",
        "--per-minute", "100000", "--per-hour", "100000",
    )["apiKey"]  # fmt: skip
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = [
        sys.executable, "-m", "paymentcore_server", "--db", str(db), "serve", "--port", str(port),
        "--sandbox-delay", "0", "--allow-private-webhooks", "--webhook-retry-delays", "none",
    ]  # fmt: skip
    log = tmp_path / "server.log"
    hooks = Hooks()
    with log.open("w") as server_log:
        server = subprocess.Popen(
            command, cwd=ROOT, env=ENV, stdout=server_log, stderr=subprocess.STDOUT, text=True
        )
    try:
        http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=10)
        deadline = time.monotonic() + 20
        while True:
            assert server.poll() is None, "the server exited:\n" + log.read_text()
            try:
                if http.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "no /healthz:\n" + log.read_text()
            time.sleep(0.1)
        # an endpoint that is down: every event fails (no retries on this server)
        dead = f"http://127.0.0.1:{free_port()}/hooks"
        assert http.put("/v1/webhook", json={"url": dead}).status_code == 200
        for phone in ("670000050", "670000150"):
            charge = {"amount": 10_000, "currency": "XAF", "country": "CM", "provider": "mtn_cm"}
            assert http.post("/v1/collect/charge", json={**charge, "phone": phone}).status_code == 202
        wait_for(lambda: http.get("/v1/account/balances").json()["balances"], "the collections settle")
        payouts = {
            "order-1": (2500, "690000050"),
            "order-2": (1500, "690000150"),
            "order-3": (700, "670000021"),
        }
        for reference, (amount, phone) in payouts.items():
            body = {"amount": amount, "currency": "XAF", "phone": phone, "merchantReference": reference}
            answer = http.post("/v1/disburse", json=body, headers={"Idempotency-Key": reference})
            assert answer.status_code == 201, answer.text
        finals = {"PAID", "FAILED"}
        wait_for(
            lambda: (
                {p["status"] for p in http.get("/v1/disburse").json()["data"]} <= finals
                and http.get("/v1/events", params={"deliveryStatus": "PENDING"}).json()["data"] == []
            ),
            "the payouts and the deliveries end",
        )
        failed = http.get("/v1/events", params={"deliveryStatus": "FAILED", "limit": 100}).json()["data"]
        # collect.succeeded x2, disburse.sent x2, disburse.succeeded x2, disburse.failed (order-3)
        assert sorted(e["type"] for e in failed) == sorted(
            ["collect.succeeded"] * 2
            + ["disburse.sent"] * 2
            + ["disburse.succeeded"] * 2
            + ["disburse.failed"]
        )
        listed = http.get("/v1/disburse", params={"limit": 100}).json()["data"]

        # the guide's curl commands, each as written, against this server
        env = {
            **ENV, "BASE": base, "KEY": key, "LAST": listed[0]["reference"], "EVENT_ID": failed[-1]["id"],
        }  # fmt: skip
        commands = [block for block in guide_blocks("sh") if block.lstrip().startswith("curl")]
        assert len(commands) == 7
        for block in commands:
            result = subprocess.run(
                ["bash", "-c", "set -euo pipefail\n" + block],
                env=env,
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert result.returncode == 0, (block, result.stdout, result.stderr)
            assert isinstance(json.loads(result.stdout), dict), block
        # the guide's resend went to the endpoint registered then (still down): one more failed attempt
        wait_for(
            lambda: http.get(f"/v1/events/{env['EVENT_ID']}").json()["attempts"] == 2,
            "the guide's resend is attempted",
        )
        assert http.get(f"/v1/events/{env['EVENT_ID']}").json()["deliveryStatus"] == "FAILED"

        # the endpoint is back: the example resends what failed, which arrives with its id, signed
        secret = http.put("/v1/webhook", json={"url": hooks.url}).json()["signingSecret"]
        records = tmp_path / "records.json"
        records.write_text(json.dumps({"order-1": 2500, "order-2": 1000, "order-9": 300}))
        result = run_example(
            str(EXAMPLES / "reconcile.py"), "--base-url", base, "--key", key, "--records", str(records),
            "--day", "today", "--resend",
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        out = result.stdout
        assert re.search(r"^payouts on \d{4}-\d\d-\d\d: 3 \(FAILED 1, PAID 2\)$", out, re.M), out
        assert re.search(r"^matched order-1: PO-\S+ 2500 XAF PAID$", out, re.M), out
        assert re.search(
            r"^amount differs for order-2: yours 1000, the service's PO-\S+ 1500 XAF PAID$", out, re.M
        )
        assert re.search(
            r"^not in your records: PO-\S+ 700 XAF FAILED \(merchantReference order-3\)$", out, re.M
        )
        assert "missing from the service: order-9 (300)" in out
        assert re.search(
            r"^ledger XAF: \d+ movements; replayed available=\d+ reserved=\d+ equals the balance$", out, re.M
        )
        resent = re.findall(r"^resent (evt_\w+) ", out, re.M)
        assert f"failed events: {len(failed)}" in out, out
        assert sorted(resent) == sorted(e["id"] for e in failed), (out, failed)
        wait_for(lambda: len(hooks.received) >= len(failed), "the resent events arrive")
        arrived = {}
        for headers, raw in hooks.received:
            verify_webhook(secret, headers, raw)
            event_id = json.loads(raw)["eventId"]
            assert headers["x-service-event-id"] == event_id
            arrived[event_id] = headers["x-service-event"]
        assert arrived == {e["id"]: e["type"] for e in failed}
        wait_for(
            lambda: http.get("/v1/events", params={"deliveryStatus": "FAILED"}).json()["data"] == [],
            "the resent events are delivered",
        )
        again = run_example(
            str(EXAMPLES / "reconcile.py"), "--base-url", base, "--key", key, "--day", "today", "--resend"
        )
        assert again.returncode == 0 and "failed events: 0" in again.stdout, again.stdout + again.stderr
        http.close()
    finally:
        stop(server)
        hooks.close()


def wait_for(condition: Any, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.1)


@pytest.mark.slow
def test_bulk_payouts_example(demo_server: tuple[str, str, str]) -> None:
    base_url, collect_key, disburse_key = demo_server
    hooks = Hooks()
    try:
        registered = httpx.put(
            f"{base_url}/v1/webhook",
            json={"url": hooks.url},
            headers={"Authorization": f"Bearer {collect_key}"},
        )
        secret = registered.json()["signingSecret"]
        result = run_example(
            str(EXAMPLES / "bulk_payouts.py"), "--base-url", base_url,
            "--collect-key", collect_key, "--disburse-key", disburse_key, timeout=120,
        )  # fmt: skip
        out = result.stdout
        assert result.returncode == 0, out + result.stderr
        settlement = re.search(r"^settlement (bat_\w+): 3 accepted, 2 refused$", out, re.M)
        assert settlement, out
        assert re.search(r"^  2 seller-\w+-2: refused PHONE_NOT_RECOGNISED ", out, re.M), out
        assert re.search(r"^  3 seller-\w+-3: refused AMOUNT_PRECISION ", out, re.M), out
        assert re.search(r"^payroll: 422 BATCH_REFUSED: 1 of 3 items were refused", out, re.M), out
        assert re.search(r"^  refused 2 pay-\w+-2: INSUFFICIENT_BALANCE$", out, re.M), out
        payroll = re.search(r"^payroll (bat_\w+): 3 accepted", out, re.M)
        assert payroll, out
        assert "payroll payouts: ['PAID', 'PAID', 'PAID']" in out
        assert re.search(rf"^{settlement.group(1)}: COMPLETED, PAID 2, FAILED 1; ", out, re.M), out
        assert re.search(rf"^{payroll.group(1)}: COMPLETED, PAID 3; ", out, re.M), out
        # each batch's disburse.bulk.completed reaches the endpoint, signed, once
        wait_for(
            lambda: (
                len([h for h, _ in hooks.received if h["x-service-event"] == "disburse.bulk.completed"]) == 2
            ),
            "both completion events arrive",
        )
        for headers, body in hooks.received:
            verify_webhook(secret, headers, body)
        completed = [
            json.loads(body)["data"]["id"]
            for headers, body in hooks.received
            if headers["x-service-event"] == "disburse.bulk.completed"
        ]
        assert sorted(completed) == sorted([settlement.group(1), payroll.group(1)])
    finally:
        hooks.close()
