"""Clients connecting to a busy server are served in the next turn of its event loop, together.

Issue 27, item 4. libuv (under uvloop, uvicorn's loop when installed) accepts one connection per turn
of the event loop; a busy server's turn is long, so clients connecting together waited one turn each,
in line, for their first answer (seconds under load) while the connections already open were served at
every turn. ``paymentcore serve`` runs uvicorn through ``paymentcore_server._serving.Server``, whose
acceptor takes every waiting connection at once.

The test counts turns, not time: a callback rescheduled with ``call_soon`` runs once per turn and counts
them; GET /turn answers the count when its request is handled. The loop is held (GET /hold blocks it
until the test lets go) while the clients connect and send their requests, so all of them wait in the
listen queue at once; then every one must be answered within a few turns of the others. Before the
acceptor, under uvloop, the answers spread over one turn per client.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from paymentcore_server._serving import Server

CLIENTS = 24
SPREAD = 4  # turns: accept, the transport's first read, the request's task, and one to spare


class TurnApp:
    """An ASGI app: GET /hold blocks the event loop until released; GET /turn answers the turn count."""

    def __init__(self) -> None:
        self.turn = 0
        self.holding = threading.Event()
        self.release = threading.Event()
        self.ticking = False

    def _tick(self) -> None:
        self.turn += 1
        asyncio.get_running_loop().call_soon(self._tick)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/hold":
            if not self.ticking:
                self.ticking = True
                asyncio.get_running_loop().call_soon(self._tick)
            self.holding.set()
            self.release.wait(30)  # blocks the loop on purpose: the clients queue meanwhile
            body = b"held"
        else:
            body = str(self.turn).encode()
        headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def loops() -> list[str]:
    found = ["asyncio"]
    if importlib.util.find_spec("uvloop") is not None:
        found.append("uvloop")
    return found


@contextlib.contextmanager
def serving(server: uvicorn.Server) -> Iterator[int]:
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        sockets = server.servers[0].sockets
        assert sockets
        yield int(sockets[0].getsockname()[1])
    finally:
        server.should_exit = True
        thread.join(10)
        assert not thread.is_alive()


def get(sock: socket.socket, path: str) -> None:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode())


def answer(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, "the server closed the connection"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(4096)
        assert chunk, "the server closed the connection"
        body += chunk
    assert head.startswith(b"HTTP/1.1 200"), head
    return body


def turns_of_clients_queued_together(server_class: type[uvicorn.Server], loop: str) -> list[int]:
    """The turn at which each of CLIENTS connections, made while the loop was held, was answered."""
    app = TurnApp()
    config = uvicorn.Config(app, host="127.0.0.1", port=0, loop=loop, log_level="warning", lifespan="off")
    with serving(server_class(config)) as port:
        holder = socket.create_connection(("127.0.0.1", port), timeout=10)
        clients: list[socket.socket] = []
        try:
            get(holder, "/hold")
            assert app.holding.wait(10), "GET /hold never ran"
            for _ in range(CLIENTS):
                # the kernel completes the handshake and keeps the request while the loop is held
                client = socket.create_connection(("127.0.0.1", port), timeout=10)
                clients.append(client)
                get(client, "/turn")
            app.release.set()
            assert answer(holder) == b"held"
            return [int(answer(client)) for client in clients]
        finally:
            app.release.set()
            for s in [holder, *clients]:
                s.close()


@pytest.mark.parametrize("loop", loops())
def test_clients_connecting_to_a_busy_server_are_served_in_the_same_turn(loop: str) -> None:
    turns = turns_of_clients_queued_together(Server, loop)
    assert max(turns) - min(turns) <= SPREAD, f"answered at turns {sorted(turns)}"


@pytest.mark.skipif(importlib.util.find_spec("uvloop") is None, reason="uvloop is not installed")
def test_plain_uvicorn_on_uvloop_serves_them_one_turn_each() -> None:
    """What the acceptor is for: uvicorn's own server on uvloop takes one waiting connection per turn
    (libuv >= 1.45). If this starts failing, libuv accepts in a loop again and the acceptor is moot."""
    turns = turns_of_clients_queued_together(uvicorn.Server, "uvloop")
    assert max(turns) - min(turns) >= CLIENTS - 1, f"answered at turns {sorted(turns)}"


def test_the_listening_socket_closes_with_the_server() -> None:
    """The acceptor's own descriptor of the listening socket is closed at shutdown: the port refuses."""
    config = uvicorn.Config(TurnApp(), host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = Server(config)
    with serving(server) as port:
        assert server.acceptors, "no acceptor on the listening socket"
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=10)
