"""A TCP proxy that puts a network between a client and a server: each chunk waits a one-way latency.

Used by ``benchmarks/bench_postgres.py`` (issue 26) between ``paymentcore serve`` and PostgreSQL, so that a
database round trip costs what it costs when the database is on another machine (about 1 ms each way
by default), and so that the round trips can be counted.

- Delay: every chunk read from one side is written to the other side ``latency`` seconds after it was
  read. Each direction of each connection has its own FIFO queue of (due time, bytes), drained by one
  task, so the order of the bytes is kept and a chunk never overtakes another.
- Round trips: per connection, a client->server chunk that follows a server->client chunk (or is the
  connection's first) starts a round trip: the number of times the client had to wait for the server.
  Chunks that follow each other in one direction (a message split in pieces, or several queries sent at
  once, as psycopg's pipeline mode does) count once. The order is the order in which the proxy read the
  chunks, which is the order the two ends sent them in (the delay comes after).

In the benchmark process: ``proxy = LatencyProxy(host, port, latency=0.001).start()`` runs the proxy in
a thread of its own with its own event loop; ``proxy.counts()`` reads the counters, ``proxy.reset()``
zeroes them, ``proxy.stop()`` closes it. As a script (``python benchmarks/latency_proxy.py --target
127.0.0.1:5432 --listen 6432``) it serves until interrupted and prints the counts every few seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field

CHUNK = 65536
DEFAULT_LATENCY = 0.001  # seconds, each way


@dataclass(frozen=True)
class Counts:
    """What the proxy has seen since it started or was last reset."""

    round_trips: int  # client->server transfers that follow a server->client one (or open a connection)
    connections: int  # connections accepted
    open_connections: int
    client_bytes: int  # client -> server
    server_bytes: int  # server -> client
    chunks: int  # chunks forwarded, both ways
    delay_total_s: float  # the sum over chunks of (written - read): the latency actually added
    per_connection: dict[int, int] = field(default_factory=dict)  # connection number -> round trips

    @property
    def mean_delay_s(self) -> float:
        """The one-way delay the forwarded chunks actually got (at least the configured latency)."""
        return self.delay_total_s / self.chunks if self.chunks else 0.0


class _Tally:
    """The counters, shared by the proxy's loop thread and the readers in other threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.round_trips = 0
        self.connections = 0
        self.client_bytes = 0
        self.server_bytes = 0
        self.chunks = 0
        self.delay_total = 0.0
        self.per_connection: dict[int, int] = {}


class LatencyProxy:
    """Listens on ``listen_host:listen_port`` (0: a free port, see :attr:`port`) and forwards each
    connection to ``target_host:target_port``, delaying each chunk by ``latency`` seconds each way."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        latency: float = DEFAULT_LATENCY,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
    ) -> None:
        if latency < 0:
            raise ValueError("latency must be at least 0")
        self.target_host = target_host
        self.target_port = target_port
        self.latency = latency
        self.listen_host = listen_host
        self._listen_port = listen_port
        self._tally = _Tally()
        self._open = 0
        self._next_id = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._stopping: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # --- reading the counters (any thread) ---------------------------------------------------------

    @property
    def serving(self) -> bool:
        """Whether the proxy is listening."""
        return self._server is not None and self._server.is_serving()

    @property
    def port(self) -> int:
        """The port the proxy listens on (known once it is serving)."""
        if self._server is None:
            raise RuntimeError("the proxy is not serving")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def counts(self) -> Counts:
        tally = self._tally
        with tally.lock:
            return Counts(
                round_trips=tally.round_trips,
                connections=tally.connections,
                open_connections=self._open,
                client_bytes=tally.client_bytes,
                server_bytes=tally.server_bytes,
                chunks=tally.chunks,
                delay_total_s=tally.delay_total,
                per_connection=dict(tally.per_connection),
            )

    def reset(self) -> Counts:
        """Zero the counters; returns what they were."""
        before = self.counts()
        with self._tally.lock:
            self._tally.reset()
        return before

    # --- serving ---------------------------------------------------------------------------------

    async def serve(self) -> None:
        """Serve in the running loop until :meth:`close` (or cancellation)."""
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._server = await asyncio.start_server(self._handle, self.listen_host, self._listen_port)
        self._started.set()
        try:
            await self._stopping.wait()
        finally:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._server.wait_closed()

    def close(self) -> None:
        """Ask :meth:`serve` to return (from any thread)."""
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)

    def start(self, timeout: float = 10.0) -> LatencyProxy:
        """Serve in a daemon thread with an event loop of its own; returns once listening."""

        def run() -> None:
            try:
                asyncio.run(self.serve())
            except BaseException as exc:  # reported to the starter below
                self._failure = exc
                self._started.set()

        self._thread = threading.Thread(target=run, name="latency-proxy", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout) or self._failure is not None:
            raise RuntimeError(f"the latency proxy did not start: {self._failure!r}")
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.close()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- one connection ----------------------------------------------------------------------------

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            try:
                server_reader, server_writer = await asyncio.open_connection(
                    self.target_host, self.target_port
                )
            except OSError:
                client_writer.close()
                return
            self._next_id += 1
            connection = self._next_id
            self._open += 1
            with self._tally.lock:
                self._tally.connections += 1
                self._tally.per_connection[connection] = 0
            last = ["server"]  # the direction of the last chunk read; a connection opens with the client
            try:
                to_server = asyncio.create_task(
                    self._pipe(client_reader, server_writer, connection, last, from_client=True)
                )
                to_client = asyncio.create_task(
                    self._pipe(server_reader, client_writer, connection, last, from_client=False)
                )
                _done, pending = await asyncio.wait(
                    {to_server, to_client}, return_when=asyncio.FIRST_COMPLETED
                )
                for other in pending:  # one side closed: the other goes too once its queue is written
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(asyncio.shield(other), timeout=1.0)
                    other.cancel()
                    with contextlib.suppress(asyncio.CancelledError, OSError):
                        await other
            finally:
                self._open -= 1
                for writer in (client_writer, server_writer):
                    writer.close()
                    with contextlib.suppress(OSError, asyncio.CancelledError):
                        await writer.wait_closed()
        except asyncio.CancelledError:
            # Only stop() cancels a connection's task. Ending it normally keeps asyncio's stream callback,
            # which asks the task for its exception, from logging a CancelledError traceback per connection.
            return
        finally:
            self._tasks.discard(task)

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        connection: int,
        last: list[str],
        *,
        from_client: bool,
    ) -> None:
        """Read chunks from one side; write each to the other side ``latency`` after it was read."""
        queue: deque[tuple[float, bytes]] = deque()
        ready = asyncio.Event()
        ended = False
        tally = self._tally
        direction = "client" if from_client else "server"

        async def deliver() -> None:
            while True:
                while not queue:
                    if ended:
                        return
                    ready.clear()
                    await ready.wait()
                due, data = queue.popleft()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
                late = time.monotonic() - (due - self.latency)
                with tally.lock:
                    tally.chunks += 1
                    tally.delay_total += late

        sender = asyncio.create_task(deliver())
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                read_at = time.monotonic()
                with tally.lock:
                    if from_client:
                        tally.client_bytes += len(data)
                        if last[0] == "server":
                            tally.round_trips += 1
                            if connection in tally.per_connection:
                                tally.per_connection[connection] += 1
                            else:  # counters reset while the connection was open
                                tally.per_connection[connection] = 1
                    else:
                        tally.server_bytes += len(data)
                last[0] = direction
                queue.append((read_at + self.latency, data))
                ready.set()
        except (ConnectionError, OSError):
            pass
        finally:
            ended = True
            ready.set()
        try:
            await sender
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="a TCP proxy adding a one-way latency and counting round trips"
    )
    parser.add_argument("--target", required=True, help="HOST:PORT of the server, e.g. 127.0.0.1:5432")
    parser.add_argument("--listen", type=int, default=0, help="the local port to listen on (0: any free one)")
    parser.add_argument("--listen-host", default="127.0.0.1")
    parser.add_argument(
        "--latency-ms", type=float, default=DEFAULT_LATENCY * 1000, help="one-way delay in ms (default 1)"
    )
    parser.add_argument("--report-every", type=float, default=5.0, help="seconds between printed counts")
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    if not host or not port.isdigit():
        parser.error("--target must be HOST:PORT")
    proxy = LatencyProxy(
        host, int(port), latency=args.latency_ms / 1000, listen_host=args.listen_host, listen_port=args.listen
    ).start()
    print(f"listening on {args.listen_host}:{proxy.port}, forwarding to {args.target}, "
          f"{args.latency_ms:g} ms each way", flush=True)  # fmt: skip
    try:
        while True:
            time.sleep(args.report_every)
            c = proxy.counts()
            print(
                f"round trips {c.round_trips}, connections {c.connections} ({c.open_connections} open), "
                f"mean one-way delay {c.mean_delay_s * 1000:.2f} ms",
                flush=True,
            )
    except KeyboardInterrupt:
        pass
    finally:
        proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
