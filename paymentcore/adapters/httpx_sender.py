"""The webhook sender over httpx: POST to the checked address, never anywhere else.

The URL was checked (and its name resolved) once, by
:func:`paymentcore._services.urlsafety.check_webhook_url`, which pinned the address in
:class:`~paymentcore.ports.DeliveryTarget`. This sender connects to
``target.address`` itself: the request line goes to the IP literal, the ``Host`` header carries the
registered name, and for https the TLS handshake sends and verifies that name (``sni_hostname``). The
host name is never looked up again, so a DNS answer that changes between check and delivery (DNS
rebinding) cannot steer the request into the private network.

Further guards: redirects are not followed (a 3xx is reported as the failure it is), proxies and other
settings from the environment are ignored, and at most ``MAX_BODY`` bytes of a response body are read
(within the delivery's timeout), only to hand the connection back for the next delivery.

Connections are kept alive for ``keepalive_seconds`` between deliveries to the same endpoint (a new TCP
connection, and for https a TLS handshake, per delivery cost the worker more than the delivery itself).
They stay with the endpoint's own client, so a TLS connection verified for one name is never reused for
another name that happens to share its address; a response whose body is larger than ``MAX_BODY``, or
does not end in time, closes its connection.

Connections are partitioned by endpoint: each delivery target (scheme, address, port, name and path)
has an ``httpx.Client`` of its own, holding at most ``per_endpoint`` connections, so no set of endpoints
can take connections from another. The worker never sends more deliveries to one endpoint at once than
that, so a delivery does not wait for a connection; if one ever has to wait until its timeout, the
request never left: the result says it was not attempted (``DeliveryResult.attempted``), and nothing is
recorded against the endpoint. At most ``max_endpoints`` clients are kept; the least recently used idle
one is closed beyond that.
"""

from __future__ import annotations

import contextlib
import ipaddress
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

import httpx

from paymentcore.adapters.http_sender import (
    DEFAULT_USER_AGENT,
    MAX_BODY,
    MAX_RETRY_AFTER,
    OWNED_HEADERS,
    RETRY_AFTER_STATUSES,
    check_target,
    describe,
    host_header,
    parse_retry_after,
)
from paymentcore.ports import DeliveryResult, DeliveryTarget

__all__ = [
    "DEFAULT_USER_AGENT",
    "MAX_BODY",
    "MAX_RETRY_AFTER",
    "HttpxWebhookSender",
    "parse_retry_after",
]


class HttpxWebhookSender:
    """A :class:`~paymentcore.ports.WebhookSender` on synchronous ``httpx.Client`` s, one per endpoint.

    ``verify`` is handed to httpx (True: the system's certifi bundle; an ``ssl.SSLContext`` for a
    private CA in tests). ``clock`` gives the Unix time used to turn a Retry-After date into seconds.
    ``per_endpoint`` caps the connections open to one endpoint at once (the worker sends at most that
    many deliveries to one endpoint at once), ``max_endpoints`` the clients kept. Call :meth:`close`
    when done.
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
        self._clock = clock
        self._keepalive_seconds = keepalive_seconds
        # one TLS context for every endpoint's client (loading the CA bundle once, not per endpoint)
        shared = verify if isinstance(verify, ssl.SSLContext) or not verify else httpx.create_ssl_context()
        self._verify: ssl.SSLContext | bool = shared
        self._user_agent = user_agent
        self._per_endpoint = per_endpoint
        self._max_endpoints = max_endpoints
        self._lock = threading.Lock()
        self._clients: OrderedDict[tuple[str, str, int, str, str], _Endpoint] = OrderedDict()

    def close(self) -> None:
        with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
        for endpoint in clients:
            endpoint.client.close()

    @property
    def endpoints(self) -> int:
        """How many endpoint clients are kept now."""
        with self._lock:
            return len(self._clients)

    def _take(self, target: DeliveryTarget) -> _Endpoint:
        key = (target.scheme, target.address, target.port, target.host, target.target)
        evicted: list[_Endpoint] = []
        with self._lock:
            endpoint = self._clients.get(key)
            if endpoint is None:
                endpoint = self._clients[key] = _Endpoint(self._client())
                for other_key, other in list(self._clients.items()):
                    if len(self._clients) <= self._max_endpoints:
                        break
                    if other.users == 0 and other_key != key:
                        evicted.append(self._clients.pop(other_key))
            else:
                self._clients.move_to_end(key)
            endpoint.users += 1
        for old in evicted:
            old.client.close()
        return endpoint

    def _give_back(self, endpoint: _Endpoint) -> None:
        with self._lock:
            endpoint.users -= 1

    def _client(self) -> httpx.Client:
        return httpx.Client(
            follow_redirects=False,
            trust_env=False,
            verify=self._verify,
            headers={"User-Agent": self._user_agent},
            limits=httpx.Limits(
                max_connections=self._per_endpoint,
                max_keepalive_connections=self._per_endpoint if self._keepalive_seconds > 0 else 0,
                keepalive_expiry=self._keepalive_seconds,
            ),
        )

    def send(
        self, target: DeliveryTarget, headers: Mapping[str, str], body: bytes, timeout: float
    ) -> DeliveryResult:
        """POST ``body`` to ``target.address``; never follows a redirect, never raises for the network."""
        refused = check_target(target)
        if refused is not None:
            return DeliveryResult(status=None, error=refused)
        address = ipaddress.ip_address(target.address)
        literal = f"[{address}]" if address.version == 6 else str(address)
        url = f"{target.scheme}://{literal}:{target.port}{target.target}"
        request_headers = {
            name: value for name, value in headers.items() if name.lower() not in OWNED_HEADERS
        }
        request_headers["Host"] = host_header(target)
        request_headers["Content-Type"] = "application/json"
        extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}

        endpoint = self._take(target)
        try:
            return self._post(endpoint.client, url, request_headers, body, timeout, extensions)
        finally:
            self._give_back(endpoint)

    def _post(
        self,
        client: httpx.Client,
        url: str,
        headers: dict[str, str],
        body: bytes,
        timeout: float,
        extensions: dict[str, str],
    ) -> DeliveryResult:
        deadline = time.monotonic() + timeout
        try:
            request = client.build_request(
                "POST", url, headers=headers, content=body, timeout=timeout, extensions=extensions
            )
            response = client.send(request, stream=True)
        except httpx.PoolTimeout:  # the request never left: not an attempt, not the endpoint's failure
            return DeliveryResult(status=None, error="no connection came free", attempted=False)
        except httpx.TimeoutException:
            return DeliveryResult(status=None, error=f"no response within {timeout:g} seconds")
        except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
            return DeliveryResult(status=None, error=describe(exc))

        status = response.status_code
        retry_after = None
        if status in RETRY_AFTER_STATUSES:
            retry_after = parse_retry_after(response.headers.get("Retry-After"), self._clock())
        with contextlib.suppress(httpx.HTTPError, OSError):
            _drain(response, deadline)
        with contextlib.suppress(httpx.HTTPError, OSError):
            response.close()  # a body read to its end hands the connection back; else it is closed
        error = f"redirect not followed (HTTP {status})" if 300 <= status < 400 else None
        return DeliveryResult(status=status, retry_after=retry_after, error=error)


def _drain(response: httpx.Response, deadline: float) -> None:
    """Read the body to its end when it is at most MAX_BODY bytes and ends before ``deadline``."""
    read = 0
    for chunk in response.iter_raw(16_384):
        read += len(chunk)
        if read > MAX_BODY or time.monotonic() > deadline:
            return


class _Endpoint:
    """One endpoint's client and how many sends are using it now."""

    __slots__ = ("client", "users")

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.users = 0
