"""The benchmarks' latency proxy (benchmarks/latency_proxy.py, issue 26) is a correct instrument.

Behind it, a fake echo server: N request/response exchanges on a connection are N round trips, a request
sent in several pieces before the answer is still one, and every exchange takes at least the configured
latency twice (there and back). Only lower bounds on time are asserted: the delay the proxy adds, never
the speed of anything.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from latency_proxy import LatencyProxy


class EchoServer:
    """A TCP server in a thread that writes back every chunk it reads."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port: int = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


def exchange(sock: socket.socket, message: bytes) -> bytes:
    sock.sendall(message)
    got = b""
    while len(got) < len(message):
        chunk = sock.recv(65536)
        assert chunk, "the proxy closed the connection"
        got += chunk
    return got


@pytest.mark.parametrize("latency", [0.0, 0.005])
def test_n_exchanges_are_n_round_trips(echo: EchoServer, latency: float) -> None:
    with LatencyProxy("127.0.0.1", echo.port, latency=latency) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
            for i in range(7):
                assert exchange(sock, f"message {i}".encode()) == f"message {i}".encode()
        counts = proxy.counts()
    assert counts.round_trips == 7
    assert counts.connections == 1
    assert list(counts.per_connection.values()) == [7]
    assert counts.client_bytes == counts.server_bytes == sum(len(f"message {i}") for i in range(7))


def test_pieces_sent_before_the_answer_are_one_round_trip(echo: EchoServer) -> None:
    with LatencyProxy("127.0.0.1", echo.port, latency=0.002) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for piece in (b"a" * 10, b"b" * 10, b"c" * 10):  # a pipeline: three sends, one wait
                sock.sendall(piece)
                time.sleep(0.0005)  # well under the latency: the echo cannot have come back yet
            got = b""
            while len(got) < 30:
                got += sock.recv(65536)
            assert got == b"a" * 10 + b"b" * 10 + b"c" * 10  # in order
            assert exchange(sock, b"again") == b"again"
        counts = proxy.counts()
    assert counts.round_trips == 2


def test_each_exchange_waits_at_least_the_latency_both_ways(echo: EchoServer) -> None:
    latency = 0.02
    exchanges = 5
    with LatencyProxy("127.0.0.1", echo.port, latency=latency) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
            began = time.perf_counter()
            for i in range(exchanges):
                exchange(sock, b"x" * (i + 1))
            elapsed = time.perf_counter() - began
        counts = proxy.counts()
    assert elapsed >= exchanges * 2 * latency
    assert counts.mean_delay_s >= latency


def test_counts_are_read_and_reset_across_connections(echo: EchoServer) -> None:
    with LatencyProxy("127.0.0.1", echo.port, latency=0.0) as proxy:
        one = socket.create_connection(("127.0.0.1", proxy.port))
        two = socket.create_connection(("127.0.0.1", proxy.port))
        with one, two:
            exchange(one, b"1")
            exchange(two, b"2")
            exchange(two, b"3")
            assert proxy.counts().round_trips == 3
            before = proxy.reset()
            assert before.round_trips == 3 and before.connections == 2
            exchange(one, b"4")
            counts = proxy.counts()
    assert counts.round_trips == 1 and counts.connections == 0
    assert sum(counts.per_connection.values()) == 1


def test_a_closed_target_closes_the_client_connection() -> None:
    with socket.socket() as probe:  # a port with nothing listening
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    with (
        LatencyProxy("127.0.0.1", dead) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port)) as sock,
    ):
        sock.settimeout(5)
        assert sock.recv(10) == b""


def test_serves_in_a_running_loop(echo: EchoServer) -> None:
    async def scenario() -> int:
        proxy = LatencyProxy("127.0.0.1", echo.port, latency=0.001)
        serving = asyncio.create_task(proxy.serve())
        while not proxy.serving:
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        for _ in range(3):
            writer.write(b"ping")
            assert await reader.readexactly(4) == b"ping"
        writer.close()
        await writer.wait_closed()
        proxy.close()
        await serving
        return proxy.counts().round_trips

    assert asyncio.run(scenario()) == 3
