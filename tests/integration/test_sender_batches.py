"""Webhook deliveries sent together (``HttpWebhookSender.send_many``): every request of a batch is written
before any answer is awaited, each on a connection of its own, and a request that cannot go fails alone.
Against a real local HTTP/1.1 server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from paymentcore.adapters.http_sender import HttpWebhookSender
from paymentcore.ports import DeliveryTarget

TOGETHER = 4
PAUSE = 0.5  # /pause answers after this long
Request = tuple[DeliveryTarget, Mapping[str, str], bytes]


class GateHandler(BaseHTTPRequestHandler):
    """``/gate`` answers only once TOGETHER requests have arrived (else 500 after 3 s): requests sent
    one after another, each awaiting its answer before the next goes, can never pass it."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        server = self.server
        assert isinstance(server, GateServer)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with server.lock:
            server.ports.append(self.client_address[1])
        status = 200
        if self.path == "/pause":
            time.sleep(PAUSE)
        if self.path == "/gate":
            try:
                server.gate.wait()
            except threading.BrokenBarrierError:
                status = 500
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


class GateServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), GateHandler)
        self.gate = threading.Barrier(TOGETHER, timeout=3.0)
        self.lock = threading.Lock()
        self.ports: list[int] = []


@pytest.fixture
def gate_server() -> Iterator[GateServer]:
    httpd = GateServer()
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.gate.abort()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5.0)


def target(server: GateServer, path: str, *, address: str = "127.0.0.1") -> DeliveryTarget:
    port = int(server.server_address[1])
    return DeliveryTarget(
        url=f"http://hooks.test:{port}{path}",
        scheme="http",
        host="hooks.test",
        port=port,
        target=path,
        address=address,
    )


def test_a_batch_writes_every_request_before_it_awaits_an_answer(gate_server: GateServer) -> None:
    sender = HttpWebhookSender(per_endpoint=TOGETHER)
    try:
        requests: list[Request] = [(target(gate_server, "/gate"), {}, b"{}") for _ in range(TOGETHER)]
        answers = sender.send_many(requests, 5.0)
        assert [result.status for result, _ in answers] == [200] * TOGETHER
        assert len(set(gate_server.ports)) == TOGETHER  # a connection each
        seconds = [took for _, took in answers]
        assert all(0 < took < 5.0 for took in seconds)
        assert seconds == sorted(seconds)  # each counted from the batch's start to its own answer
        # the connections are kept: the next batch goes on them, no new one opened
        again = sender.send_many(requests, 5.0)  # the gate opens again for the next TOGETHER
        assert all(result.ok for result, _ in again)
        assert len(set(gate_server.ports)) == TOGETHER
    finally:
        sender.close()


def test_one_after_another_the_same_requests_cannot_pass_the_gate(gate_server: GateServer) -> None:
    # the control of the test above: the gate does hold back requests that wait for their answers
    sender = HttpWebhookSender(per_endpoint=TOGETHER)
    try:
        result = sender.send(target(gate_server, "/gate"), {}, b"{}", 5.0)
        assert result.status == 500
    finally:
        sender.close()


def test_a_request_that_cannot_go_fails_alone(gate_server: GateServer) -> None:
    sender = HttpWebhookSender(per_endpoint=2)
    try:
        requests: list[Request] = [
            (target(gate_server, "/hook"), {}, b"{}"),
            (target(gate_server, "/hook", address="hooks.test"), {}, b"{}"),  # no IP address pinned
            (target(gate_server, "/hook"), {}, b"{}"),
            (target(gate_server, "/hook"), {}, b"{}"),  # the endpoint's two connections are the batch's
        ]
        (first, _), (unpinned, _), (third, _), (fourth, _) = sender.send_many(requests, 2.0)
        assert first.ok and third.ok
        assert unpinned.status is None and "no valid IP address" in (unpinned.error or "")
        # found every connection of its endpoint taken by its own batch: not sent, not an attempt, and
        # not waited for (the two others were answered well within the batch's two seconds)
        assert fourth.status is None and not fourth.attempted
        assert len(gate_server.ports) == 2
    finally:
        sender.close()


def test_a_wait_for_a_free_connection_is_not_charged_to_the_request(gate_server: GateServer) -> None:
    # one connection to the endpoint: the second delivery waits for the first (PAUSE), then takes PAUSE
    # itself; its timeout (1.6 PAUSE) covers its own request, not the wait before it
    sender = HttpWebhookSender(per_endpoint=1)
    try:
        first = threading.Thread(target=sender.send, args=(target(gate_server, "/pause"), {}, b"{}", 5.0))
        first.start()
        deadline = time.monotonic() + 5
        while not gate_server.ports and time.monotonic() < deadline:
            time.sleep(0.005)
        [(second, took)] = sender.send_many([(target(gate_server, "/pause"), {}, b"{}")], 1.6 * PAUSE)
        first.join(5.0)
        assert second.status == 200, second.error
        assert took >= 1.6 * PAUSE  # it did wait for the first one's connection
    finally:
        sender.close()
