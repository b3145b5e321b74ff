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
per payout.
"""

from __future__ import annotations

import email.utils
import http.client
import ipaddress
import math
import re
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
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
        refused = _check_target(target)
        if refused is not None:
            return DeliveryResult(status=None, error=refused)
        sent = {name: value for name, value in headers.items() if name.lower() not in _OWNED_HEADERS}
        sent["Host"] = _host_header(target)
        sent["Content-Type"] = "application/json"
        sent.setdefault("User-Agent", self._user_agent)
        endpoint = self._take(target)
        try:
            if not endpoint.slots.acquire(timeout=timeout):
                # the request never left: not an attempt, not the endpoint's failure
                return DeliveryResult(status=None, error="no connection came free", attempted=False)
            try:
                return self._post(endpoint, target, sent, body, timeout)
            finally:
                endpoint.slots.release()
        finally:
            with self._lock:
                endpoint.users -= 1

    def _post(
        self,
        endpoint: _Endpoint,
        target: DeliveryTarget,
        headers: dict[str, str],
        body: bytes,
        timeout: float,
    ) -> DeliveryResult:
        deadline = time.monotonic() + timeout
        conn, reused = self._connection(endpoint, target, timeout)
        try:
            try:
                response = self._exchange(conn, target, headers, body, timeout)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                if not reused:
                    raise
                # a kept connection the endpoint had closed meanwhile: the request was not taken
                conn.close()
                conn = self._open(target, timeout)
                response = self._exchange(conn, target, headers, body, timeout)
            status = response.status
            retry_after = None
            if status in _RETRY_AFTER_STATUSES:
                retry_after = parse_retry_after(response.getheader("Retry-After"), self._clock())
            if _drained(response, deadline) and not response.will_close:
                with self._lock:
                    endpoint.idle.append((conn, time.monotonic()))
            else:
                conn.close()
        except TimeoutError:
            conn.close()
            return DeliveryResult(status=None, error=f"no response within {timeout:g} seconds")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            conn.close()
            return DeliveryResult(status=None, error=_describe(exc))
        error = f"redirect not followed (HTTP {status})" if 300 <= status < 400 else None
        return DeliveryResult(status=status, retry_after=retry_after, error=error)

    @staticmethod
    def _exchange(
        conn: http.client.HTTPConnection,
        target: DeliveryTarget,
        headers: dict[str, str],
        body: bytes,
        timeout: float,
    ) -> http.client.HTTPResponse:
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        conn.request("POST", target.target, body=body, headers=headers)
        return conn.getresponse()

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


def _drained(response: http.client.HTTPResponse, deadline: float) -> bool:
    """Read the body to its end when it is at most MAX_BODY bytes and ends before ``deadline``."""
    length = response.length
    if length is not None and length > MAX_BODY:
        return False
    read = 0
    while True:
        chunk = response.read1(16_384) if length is None else response.read(min(length - read, 16_384))
        if not chunk:
            return True
        read += len(chunk)
        if read > MAX_BODY or time.monotonic() > deadline:
            return False
        if length is not None and read >= length:
            return True


def _close_all(endpoint: _Endpoint) -> None:
    for conn, _ in endpoint.idle:
        conn.close()
    endpoint.idle.clear()
