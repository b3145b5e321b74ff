"""Every example in ``examples/`` runs as documented, and the typed API usage file loads and runs.

The examples run as separate processes, the way a reader would run them. The HTTP example starts a
real server (``python -m paymentcore_server serve --demo``), a real webhook receiver and the merchant
client, each on a free port, and always stops what it started.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import IO

import httpx
import pytest

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


@pytest.fixture
def demo_server(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """A real server on a free port with the demo merchant: (base URL, Collect key, Disburse key)."""
    port = free_port()
    stderr_path = tmp_path / "server.log"
    command = [
        sys.executable,
        "-m",
        "paymentcore_server",
        "--db",
        str(tmp_path / "s.db"),
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
