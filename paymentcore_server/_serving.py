"""Serving the app with uvicorn, every waiting connection accepted at each turn of the event loop.

Since libuv 1.45 (libuv pull request 3696, in every uvloop since 0.18), a libuv server accepts ONE
connection per turn of its event loop and counts on the listening socket staying readable for the next.
uvloop is uvicorn's loop whenever it is installed (uvicorn's standard extras), so ``paymentcore serve``
ran on it. A turn of a busy server handles every request that became ready during the previous one, so
under load a turn lasts about (open connections) / (requests per second): about 0.1 s with 128
connections at 1,300 GET/s on one core. Clients connecting while the server is busy then wait one turn
EACH, in line: 128 clients connecting together waited up to 128 turns, seconds, for their first answer,
while the connections already open were served at every turn (issue 27, item 4; docs/performance.md).

:class:`Acceptor` watches a second descriptor of the listening socket and, whenever it is readable,
accepts every connection waiting (up to the listen backlog) and hands each to the loop with the same
protocol uvicorn builds, so a connection that arrives during a turn is served from the next one, as the
open connections are. uvloop's own watcher still runs; when ours took the queue first it finds it
empty (one ``accept`` that returns ``EAGAIN``). Under asyncio's loop, which already accepts in a loop,
the acceptor changes nothing.

:func:`run` replaces ``uvicorn.run`` for one process (no reload, no workers), with :class:`Server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE

log = logging.getLogger("paymentcore.server")

# out of descriptors or memory: accepting again at once would spin; asyncio's loop waits this long too
_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
RETRY_AFTER_S = 1.0


class Acceptor:
    """Accepts every connection waiting on a listening socket whenever it is readable.

    ``fileno`` is the listening socket's descriptor (duplicated here: the loop's own server keeps its
    own); ``protocol`` builds the protocol of one connection; at most ``limit`` connections are taken
    at one wake-up (the listen backlog: the queue cannot hold more).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fileno: int,
        protocol: Callable[[], asyncio.BaseProtocol],
        *,
        limit: int,
    ) -> None:
        self._loop = loop
        self._protocol = protocol
        self._limit = max(1, limit)
        self._listener = socket.socket(fileno=os.dup(fileno))
        self._listener.setblocking(False)
        self._handing: set[asyncio.Task[None]] = set()
        self._watching = False
        self._closed = False
        self._retry: asyncio.TimerHandle | None = None

    def start(self) -> None:
        if not self._closed and not self._watching:
            self._loop.add_reader(self._listener.fileno(), self.accept_waiting)
            self._watching = True

    def _stop_watching(self) -> None:
        if self._watching:
            self._loop.remove_reader(self._listener.fileno())
            self._watching = False

    def accept_waiting(self) -> int:
        """Accept the connections waiting now (at most ``limit``); returns how many were handed over."""
        accepted = 0
        while accepted < self._limit:
            try:
                conn, _address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                break  # none left (or the loop's own server took it)
            except ConnectionAbortedError:
                continue  # the client gave up while it waited
            except OSError as exc:
                if exc.errno in _RESOURCE_ERRORS:
                    log.warning("accepting connections paused for %.0f s: %s", RETRY_AFTER_S, exc)
                    self._stop_watching()
                    self._retry = self._loop.call_later(RETRY_AFTER_S, self.start)
                else:
                    log.error("accepting a connection failed: %s", exc)
                break
            accepted += 1
            conn.setblocking(False)
            task = self._loop.create_task(self._hand_over(conn))
            self._handing.add(task)
            task.add_done_callback(self._handing.discard)
        return accepted

    async def _hand_over(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._protocol, conn)
        except BaseException as exc:  # one connection's failure never stops the others
            conn.close()
            if not isinstance(exc, Exception):
                raise  # cancelled (the server is shutting down): the socket is closed all the same
            log.warning("a connection accepted could not be served: %r", exc)

    async def drain(self) -> None:
        """Wait for the connections being handed over (after :meth:`close`), so that the server's
        shutdown, which closes the connections it knows, knows them."""
        if self._handing:
            await asyncio.gather(*self._handing, return_exceptions=True)

    def close(self) -> None:
        """Stop accepting (the connections already handed over stay with their protocols)."""
        if self._closed:
            return
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
        self._stop_watching()
        self._listener.close()


class Server(uvicorn.Server):
    """uvicorn's server with an :class:`Acceptor` on each of its TCP listening sockets."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.acceptors: list[Acceptor] = []

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        config = self.config
        if not self.started or config.ssl is not None:
            return  # TLS: uvicorn's own accept path, which wraps each connection
        loop = asyncio.get_running_loop()
        build: Callable[..., asyncio.Protocol] = config.http_protocol_class

        def protocol() -> asyncio.Protocol:  # what uvicorn's startup gives its own servers
            return build(
                config=config, server_state=self.server_state, app_state=self.lifespan.state, _loop=loop
            )

        for server in self.servers:
            for listener in server.sockets or ():
                if listener.family in (socket.AF_INET, socket.AF_INET6):
                    acceptor = Acceptor(loop, listener.fileno(), protocol, limit=config.backlog)
                    acceptor.start()
                    self.acceptors.append(acceptor)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for acceptor in self.acceptors:
            acceptor.close()
        for acceptor in self.acceptors:
            await acceptor.drain()
        self.acceptors.clear()
        await super().shutdown(sockets=sockets)


def run(app: Any, **kwargs: Any) -> None:
    """``uvicorn.run(app, **kwargs)`` for one process, on :class:`Server`: exits with uvicorn's status
    (3) when the server could not start, as ``uvicorn.run`` does."""
    server = Server(uvicorn.Config(app, **kwargs))
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)
