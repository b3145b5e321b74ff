"""The webhook sender on the standard library's ``http.client``: POST to the checked address, never
anywhere else (``httpx_sender.HttpxWebhookSender``, its earlier name, is the same class).

The URL was checked (and its name resolved) once, by
:func:`paymentcore._services.urlsafety.check_webhook_url`, which pinned the address in
:class:`~paymentcore.ports.DeliveryTarget`. This sender connects to ``target.address`` itself: the
request line goes to the IP literal, the ``Host`` header carries the registered name, and for https the
TLS handshake sends and verifies that name (SNI). The name is never looked up again, so a DNS answer
that changes between check and delivery (DNS rebinding) cannot steer the request elsewhere. Redirects
are not followed, proxies and other settings from the environment are ignored, and at most
``MAX_BODY`` bytes of a response body are read, only to keep the connection for the next delivery.

Connections are partitioned by endpoint (scheme, address, port, name and path): at most
``per_endpoint`` of them at once, kept alive ``keepalive_seconds`` between deliveries, never shared by
two names on one address. A delivery that finds every connection of its endpoint in use waits up to
its timeout, and if none comes free the request never left: the result says it was not attempted.
At most ``max_endpoints`` endpoints are kept; the least recently used idle one is closed beyond that.
Why not httpx (the earlier sender's library): a delivery through ``httpx.Client`` cost about three
times the CPU of the same POST through ``http.client`` (docs/decisions.md), and the worker sends two
per payout. ``http.client`` opens the connections (and their TLS); the exchange itself is written here
(:class:`_Response`): the request in one write, the response's head parsed without the e-mail parser,
its body (by length or in chunks) read to its end only to keep the connection. That halved the CPU of
a delivery again (about 220 -> 115 us to a local endpoint).
"""

from __future__ import annotations

import email.utils
import functools
import http.client
import ipaddress
import math
import re
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC

from paymentcore.ports import DeliveryResult, DeliveryTarget

__all__ = ["DEFAULT_USER_AGENT", "MAX_BODY", "MAX_RETRY_AFTER", "HttpWebhookSender", "parse_retry_after"]

DEFAULT_USER_AGENT = "paymentcore-webhooks/0.1"
MAX_RETRY_AFTER = 86_400  # a day: a longer Retry-After is clamped, the caller's schedule decides anyway
#: bytes of a response body read so that its connection can serve the next delivery; a longer body
#: closes the connection instead (the status is all a delivery needs)
MAX_BODY = 65_536

_DEFAULT_PORTS = {"http": 80, "https": 443}
_RETRY_AFTER_STATUSES = frozenset({429, 503})
# Headers the sender owns: a caller's copy is dropped rather than sent twice or trusted.
_OWNED_HEADERS = frozenset(
    {
        "host",
        "content-type",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "upgrade",
        "expect",
    }
)
_SECONDS = re.compile(r"[0-9]+")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # a header name (RFC 9110 token)
_MAX_HEAD = 65_536  # bytes of a response's status line and headers


def parse_retry_after(value: str | None, now: float) -> int | None:
    """Seconds to wait from a ``Retry-After`` value (delay-seconds or an HTTP date), or None.

    ``now`` is the current Unix time in seconds; a date in the past gives 0. The answer is clamped to
    :data:`MAX_RETRY_AFTER`.
    """
    if value is None:
        return None
    text = value.strip()
    if _SECONDS.fullmatch(text):
        return MAX_RETRY_AFTER if len(text) > 9 else min(int(text), MAX_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000" or no zone: HTTP dates are always GMT
        when = when.replace(tzinfo=UTC)
    try:
        delay = math.ceil(when.timestamp() - now)
    except (OverflowError, ValueError):
        return None
    return min(max(delay, 0), MAX_RETRY_AFTER)


def _host_header(target: DeliveryTarget) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    if target.port == _DEFAULT_PORTS.get(target.scheme):
        return host
    return f"{host}:{target.port}"


def _describe(exc: BaseException) -> str:
    detail = str(exc).strip()
    name = type(exc).__name__
    return f"{name}: {detail[:200]}" if detail else name


@functools.lru_cache(maxsize=1024)  # a target is checked at every delivery; the answer never changes
def _check_target(target: DeliveryTarget) -> str | None:
    """Why ``target`` cannot be delivered to as it stands, or None."""
    try:
        address = ipaddress.ip_address(target.address)
    except ValueError:
        return "the delivery target has no valid IP address"
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
        return "the delivery target address carries a zone id"
    if target.scheme not in _DEFAULT_PORTS:
        return "the delivery target scheme is not http or https"
    if not target.target.startswith("/"):
        return "the delivery target path must start with /"
    return None


class _PinnedHttps(http.client.HTTPSConnection):
    """TCP to the pinned address; TLS sends and verifies the registered name."""

    def __init__(self, address: str, port: int, *, name: str, timeout: float, tls: ssl.SSLContext) -> None:
        super().__init__(address, port, timeout=timeout, context=tls)
        self._name = name
        self._tls = tls

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._tls.wrap_socket(self.sock, server_hostname=self._name)


class _Endpoint:
    """One endpoint's idle connections (with when each was last used) and its free connection slots."""

    __slots__ = ("idle", "slots", "users")

    def __init__(self, per_endpoint: int) -> None:
        self.idle: list[tuple[http.client.HTTPConnection, float]] = []
        self.slots = threading.BoundedSemaphore(per_endpoint)
        self.users = 0


def _tls_context(verify: ssl.SSLContext | bool) -> ssl.SSLContext:
    if isinstance(verify, ssl.SSLContext):
        return verify
    if not verify:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    try:  # the same CA bundle as httpx (certifi), else the system's
        import certifi

        return ssl.create_default_context(cafile=certifi.where())
    except ImportError:  # pragma: no cover - certifi comes with httpx
        return ssl.create_default_context()


class HttpWebhookSender:
    """A :class:`~paymentcore.ports.WebhookSender` on ``http.client``, connections kept per endpoint.

    ``verify``: True (the certifi CA bundle), False (no verification: tests only), or an
    ``ssl.SSLContext`` (a private CA). ``clock`` gives the Unix time used to turn a Retry-After date
    into seconds. ``per_endpoint`` caps the connections open to one endpoint at once (the worker sends
    at most that many deliveries to one endpoint at once), ``max_endpoints`` the endpoints kept.
    Call :meth:`close` when done.
    """

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | bool = True,
        user_agent: str = DEFAULT_USER_AGENT,
        clock: Callable[[], float] = time.time,
        per_endpoint: int = 4,
        max_endpoints: int = 512,
        keepalive_seconds: float = 5.0,
    ) -> None:
        self._tls = _tls_context(verify)
        self._user_agent = user_agent
        self._clock = clock
        self._per_endpoint = per_endpoint
        self._max_endpoints = max_endpoints
        self._keepalive = keepalive_seconds
        self._lock = threading.Lock()
        self._endpoints: OrderedDict[tuple[str, str, int, str, str], _Endpoint] = OrderedDict()

    @property
    def endpoints(self) -> int:
        """How many endpoints are kept now."""
        with self._lock:
            return len(self._endpoints)

    def close(self) -> None:
        with self._lock:
            endpoints = list(self._endpoints.values())
            self._endpoints.clear()
        for endpoint in endpoints:
            _close_all(endpoint)

    def send(
        self, target: DeliveryTarget, headers: Mapping[str, str], body: bytes, timeout: float
    ) -> DeliveryResult:
        """POST ``body`` to ``target.address``; never follows a redirect, never raises for the network."""
        [(result, _)] = self.send_many([(target, headers, body)], timeout)
        return result

    def send_many(
        self, requests: Sequence[tuple[DeliveryTarget, Mapping[str, str], bytes]], timeout: float
    ) -> list[tuple[DeliveryResult, float]]:
        """:meth:`send` for each of ``requests`` at once, from this thread: every request is written on a
        connection of its own (kept or new, within each endpoint's ``per_endpoint``), then the answers
        are read in turn, each by ``timeout`` seconds after its request went (a wait for a free
        connection is not counted). Each request's result, with the seconds from the start until its
        answer was read."""
        started = time.monotonic()
        flights: list[_Flight | DeliveryResult] = []
        held: set[int] = set()  # the endpoints whose slots this batch holds: free only once it is read
        try:
            for target, headers, body in requests:
                flight = self._begin(target, headers, body, timeout, held)
                if isinstance(flight, _Flight):
                    held.add(id(flight.endpoint))
                flights.append(flight)
            results: list[tuple[DeliveryResult, float]] = []
            for flight in flights:
                result = flight if isinstance(flight, DeliveryResult) else self._complete(flight)
                results.append((result, time.monotonic() - started))
            return results
        finally:
            for flight in flights:
                if isinstance(flight, _Flight):
                    self._release(flight)

    def _release(self, flight: _Flight) -> None:
        """Give the request's endpoint slot back; the connection of a request whose answer was never
        read (the batch ended early) is closed, never kept."""
        if not flight.done and flight.conn is not None:
            flight.conn.close()
        flight.endpoint.slots.release()
        with self._lock:
            flight.endpoint.users -= 1

    def _begin(
        self,
        target: DeliveryTarget,
        headers: Mapping[str, str],
        body: bytes,
        timeout: float,
        held: set[int],
    ) -> _Flight | DeliveryResult:
        """A request written (a :class:`_Flight` holding its endpoint's slot), or why it was not (a slot
        of an endpoint in ``held``, whose slots the caller holds, is taken only when free at once)."""
        refused = _check_target(target)
        if refused is not None:
            return DeliveryResult(status=None, error=refused)
        sent = {name: value for name, value in headers.items() if name.lower() not in _OWNED_HEADERS}
        sent["Host"] = _host_header(target)
        sent["Content-Type"] = "application/json"
        sent.setdefault("User-Agent", self._user_agent)
        endpoint = self._take(target)
        if not endpoint.slots.acquire(timeout=0.0 if id(endpoint) in held else timeout):
            with self._lock:
                endpoint.users -= 1
            # the request never left: not an attempt, not the endpoint's failure
            return DeliveryResult(status=None, error="no connection came free", attempted=False)
        flight = _Flight(endpoint, target, sent, body, timeout)
        try:
            flight.conn, flight.reused = self._connection(endpoint, target, timeout)
            self._write(flight.conn, target, sent, body, timeout)
        except Exception as exc:
            flight.failed = exc  # a kept connection's failure is retried when the answer is read
        return flight

    def _complete(self, flight: _Flight) -> DeliveryResult:
        """Read a written request's answer (writing it again on a new connection when a kept one turns
        out to have been closed by the endpoint meanwhile: the request was not taken)."""
        target, timeout, deadline = flight.target, flight.timeout, flight.deadline
        conn = flight.conn
        flight.done = True
        try:
            try:
                if flight.failed is not None:
                    raise flight.failed
                assert conn is not None
                conn.sock.settimeout(max(0.001, deadline - time.monotonic()))
                response = _Response.read(conn.sock)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                if not flight.reused:
                    raise
                if conn is not None:
                    conn.close()
                conn = flight.conn = self._open(target, timeout)
                self._write(
                    conn, target, flight.headers, flight.body, max(0.001, deadline - time.monotonic())
                )
                response = _Response.read(conn.sock)
            status = response.status
            retry_after = None
            if status in _RETRY_AFTER_STATUSES:
                retry_after = parse_retry_after(response.headers.get("retry-after"), self._clock())
            assert conn is not None
            if response.drained(deadline) and not response.will_close:
                with self._lock:
                    flight.endpoint.idle.append((conn, time.monotonic()))
            else:
                conn.close()
        except TimeoutError:
            if conn is not None:
                conn.close()
            return DeliveryResult(status=None, error=f"no response within {timeout:g} seconds")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if conn is not None:
                conn.close()
            return DeliveryResult(status=None, error=_describe(exc))
        error = f"redirect not followed (HTTP {status})" if 300 <= status < 400 else None
        return DeliveryResult(status=status, retry_after=retry_after, error=error)

    @staticmethod
    def _write(
        conn: http.client.HTTPConnection,
        target: DeliveryTarget,
        headers: dict[str, str],
        body: bytes,
        timeout: float,
    ) -> None:
        """Send the request in one write (the connection's socket is used directly: ``http.client``
        builds a request header by header in several writes and parses a response's head with the
        e-mail parser, about twice the CPU of the whole exchange here)."""
        conn.timeout = timeout
        if conn.sock is None:
            conn.connect()
        sock = conn.sock
        sock.settimeout(timeout)
        lines = [f"POST {target.target} HTTP/1.1"]
        for name, value in headers.items():
            if not _TOKEN.fullmatch(name) or "\r" in value or "\n" in value:
                raise ValueError(f"a header that cannot be sent: {name!r}")
            lines.append(f"{name}: {value}")
        lines.append(f"Content-Length: {len(body)}")
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)

    def _connection(
        self, endpoint: _Endpoint, target: DeliveryTarget, timeout: float
    ) -> tuple[http.client.HTTPConnection, bool]:
        """A kept connection still fresh (reused: True), or a new one."""
        stale: list[http.client.HTTPConnection] = []
        found: http.client.HTTPConnection | None = None
        moment = time.monotonic()
        with self._lock:
            while endpoint.idle:
                conn, since = endpoint.idle.pop()
                if moment - since <= self._keepalive:
                    found = conn
                    break
                stale.append(conn)
        for conn in stale:
            conn.close()
        if found is not None:
            return found, True
        return self._open(target, timeout), False

    def _open(self, target: DeliveryTarget, timeout: float) -> http.client.HTTPConnection:
        if target.scheme == "https":
            return _PinnedHttps(target.address, target.port, name=target.host, timeout=timeout, tls=self._tls)
        return http.client.HTTPConnection(target.address, target.port, timeout=timeout)

    def _take(self, target: DeliveryTarget) -> _Endpoint:
        key = (target.scheme, target.address, target.port, target.host, target.target)
        evicted: list[_Endpoint] = []
        with self._lock:
            endpoint = self._endpoints.get(key)
            if endpoint is None:
                endpoint = self._endpoints[key] = _Endpoint(self._per_endpoint)
                for other_key, other in list(self._endpoints.items()):
                    if len(self._endpoints) <= self._max_endpoints:
                        break
                    if other.users == 0 and other_key != key:
                        evicted.append(self._endpoints.pop(other_key))
            else:
                self._endpoints.move_to_end(key)
            endpoint.users += 1
        for old in evicted:
            _close_all(old)
        return endpoint


class _Flight:
    """A request on its way: the endpoint's slot it holds, its connection, what to send again."""

    __slots__ = (
        "body",
        "conn",
        "deadline",
        "done",
        "endpoint",
        "failed",
        "headers",
        "reused",
        "target",
        "timeout",
    )

    def __init__(
        self,
        endpoint: _Endpoint,
        target: DeliveryTarget,
        headers: dict[str, str],
        body: bytes,
        timeout: float,
    ) -> None:
        self.endpoint = endpoint
        self.target = target
        self.headers = headers
        self.body = body
        self.timeout = timeout
        self.conn: http.client.HTTPConnection | None = None
        self.reused = False
        self.failed: Exception | None = None
        self.done = False  # its answer was read (its connection kept or closed)
        # by when its answer must have come: its own timeout, from when it holds a slot and is written
        self.deadline = time.monotonic() + timeout


class _Response:
    """A response's status and head, read off the socket, and what came of its body so far."""

    __slots__ = ("headers", "rest", "sock", "status", "will_close")

    def __init__(self, sock: socket.socket, status: int, headers: dict[str, str], rest: bytes, *, old: bool):
        self.sock = sock
        self.status = status
        self.headers = headers  # names in lower case, the last value of a name given twice
        self.rest = rest  # bytes read past the head: the body's beginning
        connection = headers.get("connection", "").lower()
        self.will_close = "close" in connection or (old and "keep-alive" not in connection)

    @classmethod
    def read(cls, sock: socket.socket) -> _Response:
        """The final response (interim 1xx ones skipped); RemoteDisconnected when the peer closed first."""
        data = b""
        while True:
            end = data.find(b"\r\n\r\n")
            while end < 0:
                if len(data) > _MAX_HEAD:
                    raise http.client.LineTooLong("response head")
                chunk = sock.recv(16_384)
                if not chunk:
                    if data:
                        raise http.client.IncompleteRead(data)
                    raise http.client.RemoteDisconnected("Remote end closed connection without response")
                data += chunk
                end = data.find(b"\r\n\r\n")
            head, data = data[:end].decode("latin-1"), data[end + 4 :]
            status_line, *fields = head.split("\r\n")
            version, _, rest = status_line.partition(" ")
            code = rest[:3]
            if version not in ("HTTP/1.1", "HTTP/1.0") or not code.isdigit() or rest[3:4] not in ("", " "):
                raise http.client.BadStatusLine(status_line[:100])
            status = int(code)
            if 100 <= status < 200:
                continue  # an interim answer (100 Continue, 103 Early Hints): the final one follows
            headers: dict[str, str] = {}
            for field in fields:
                name, colon, value = field.partition(":")
                if not colon:
                    raise http.client.HTTPException(f"a malformed header line: {field[:100]!r}")
                headers[name.strip().lower()] = value.strip()
            return cls(sock, status, headers, data, old=version == "HTTP/1.0")

    def drained(self, deadline: float) -> bool:
        """Whether the body was read to its end, at most MAX_BODY bytes before ``deadline``, so that the
        connection can carry the next request (a body that runs to the close never is)."""
        if self.status in (204, 304):
            return not self.rest
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            return self._chunks_drained(deadline)
        length_text = self.headers.get("content-length")
        if "transfer-encoding" in self.headers or length_text is None or not length_text.isdigit():
            return False
        length = int(length_text)
        return length <= MAX_BODY and self._fill(length, deadline) and len(self.rest) == length

    def _fill(self, size: int, deadline: float) -> bool:
        """Read until ``rest`` holds at least ``size`` bytes; False at the close or past ``deadline``.
        It reads whatever has come (the peer sends nothing past its answer: bytes beyond the body's end
        make the connection unfit to keep, which the callers' exact checks see)."""
        while len(self.rest) < size:
            if time.monotonic() > deadline:
                return False
            chunk = self.sock.recv(16_384)
            if not chunk:
                return False
            self.rest += chunk
        return True

    def _chunks_drained(self, deadline: float) -> bool:
        """A chunked body read to its end (its trailer fields, if any, skipped)."""
        total = 0
        while True:
            end = self.rest.find(b"\r\n")
            while end < 0:
                if len(self.rest) > 1024 or not self._fill(len(self.rest) + 1, deadline):
                    return False
                end = self.rest.find(b"\r\n")
            size_text = self.rest[:end].split(b";")[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                return False
            self.rest = self.rest[end + 2 :]
            if size == 0:  # the last chunk: trailer fields up to an empty line
                while not (self.rest.startswith(b"\r\n") or b"\r\n\r\n" in self.rest):
                    if len(self.rest) > 8192 or not self._fill(len(self.rest) + 1, deadline):
                        return False
                tail = 2 if self.rest.startswith(b"\r\n") else self.rest.index(b"\r\n\r\n") + 4
                return len(self.rest) == tail
            total += size
            if (
                total > MAX_BODY
                or not self._fill(size + 2, deadline)
                or self.rest[size : size + 2] != b"\r\n"
            ):
                return False
            self.rest = self.rest[size + 2 :]


def _close_all(endpoint: _Endpoint) -> None:
    for conn, _ in endpoint.idle:
        conn.close()
    endpoint.idle.clear()
