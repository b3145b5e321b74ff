"""The webhook sender (HttpWebhookSender) against a real local HTTP server: delivery, redirects,
Retry-After, timeouts, kept connections and the DNS-rebinding guarantee (the sender connects to the
checked address and never resolves again)."""

from __future__ import annotations

import datetime
import email.utils
import itertools
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from paymentcore._services.urlsafety import check_webhook_url
from paymentcore.adapters import httpx_sender
from paymentcore.adapters.http_sender import MAX_BODY, HttpWebhookSender
from paymentcore.ports import DeliveryTarget, WebhookSender

PUBLIC_V4 = "93.184.216.34"
RETRY_DATE = 1_700_000_000  # the Unix time the server's Retry-After date names


class Seen(NamedTuple):
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class RecordingServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)
        self.seen: list[Seen] = []
        self.release = threading.Event()

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep the test output quiet

    def _record(self) -> RecordingServer:
        server = self.server
        assert isinstance(server, RecordingServer)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in self.headers.items()}
        server.seen.append(Seen(self.command, self.path, headers, body))
        return server

    def _reply(self, status: int, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
        except OSError:
            pass  # the client gave up first (the timeout test)

    def do_GET(self) -> None:
        self._record()
        self._reply(200)

    def do_POST(self) -> None:
        server = self._record()
        path = self.path.partition("?")[0]
        if path == "/redirect":
            self._reply(302, {"Location": f"http://127.0.0.1:{server.port}/landed"})
        elif path == "/busy":
            self._reply(503, {"Retry-After": "7"})
        elif path == "/limited":
            self._reply(429, {"Retry-After": email.utils.formatdate(RETRY_DATE, usegmt=True)})
        elif path == "/slow":
            server.release.wait(5.0)
            self._reply(200)
        else:
            self._reply(200)


def serve(httpd: RecordingServer) -> Iterator[RecordingServer]:
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5.0)


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    yield from serve(RecordingServer())


Sender = HttpWebhookSender


def test_the_earlier_name_is_the_same_sender() -> None:
    assert httpx_sender.HttpxWebhookSender is HttpWebhookSender  # code written against it keeps working


@pytest.fixture
def sender_class() -> type[Sender]:
    return HttpWebhookSender


@pytest.fixture
def sender(sender_class: type[Sender]) -> Iterator[Sender]:
    client = sender_class(clock=lambda: RETRY_DATE - 120.0)
    try:
        yield client
    finally:
        client.close()


def local_target(server: RecordingServer, path: str, host: str = "hooks.test") -> DeliveryTarget:
    return DeliveryTarget(
        url=f"http://{host}:{server.port}{path}",
        scheme="http",
        host=host,
        port=server.port,
        target=path,
        address="127.0.0.1",
    )


class NoLookups:
    """Stands in for ``socket.getaddrinfo``: refuses the guarded names, passes IP literals through."""

    def __init__(self, *guarded: str) -> None:
        self.guarded = set(guarded)
        self.hosts: list[object] = []
        self.real = socket.getaddrinfo

    def __call__(self, host: Any, *args: Any, **kwargs: Any) -> Any:
        self.hosts.append(host)
        if host in self.guarded:
            raise socket.gaierror(socket.EAI_NONAME, "this test forbids resolving that name")
        return self.real(host, *args, **kwargs)


class FlippingResolver:
    """A DNS server that changes its answer after the first question (DNS rebinding)."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append((host, port))
        return list(self.answers[min(len(self.calls), len(self.answers)) - 1])


# --- (a) delivery ---------------------------------------------------------------------------------


def test_send_delivers_body_and_headers_under_the_original_host(
    server: RecordingServer, sender: Sender, monkeypatch: pytest.MonkeyPatch
) -> None:
    lookups = NoLookups("hooks.test")
    monkeypatch.setattr(socket, "getaddrinfo", lookups)
    body = b'{"type":"collection.succeeded","id":"evt_1"}'
    port: WebhookSender = sender  # mypy checks the adapter against the protocol here
    result = port.send(
        local_target(server, "/ok?attempt=1"),
        {"X-Paymentcore-Signature": "t=1,v1=abc", "Host": "attacker.example", "Content-Type": "text/plain"},
        body,
        2.0,
    )
    assert result.status == 200
    assert result.ok
    assert result.error is None
    assert result.retry_after is None
    [seen] = server.seen
    assert (seen.method, seen.path, seen.body) == ("POST", "/ok?attempt=1", body)
    assert seen.headers["host"] == f"hooks.test:{server.port}"
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["x-paymentcore-signature"] == "t=1,v1=abc"
    assert "hooks.test" not in lookups.hosts


def test_a_default_port_is_left_out_of_the_host_header(
    server: RecordingServer, sender: Sender, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pretend the server listens on 80 by rewriting where the connection really goes.
    real_connect = socket.create_connection
    connected: list[object] = []

    def to_local_server(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        connected.append(address)
        return real_connect(("127.0.0.1", server.port), *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", to_local_server)
    target = DeliveryTarget(
        url="http://hooks.test/ok",
        scheme="http",
        host="hooks.test",
        port=80,
        target="/ok",
        address="127.0.0.1",
    )
    assert sender.send(target, {}, b"{}", 2.0).status == 200
    assert connected == [("127.0.0.1", 80)]
    assert server.seen[0].headers["host"] == "hooks.test"


# --- (b) redirects --------------------------------------------------------------------------------


def test_a_redirect_is_a_failure_and_is_not_followed(server: RecordingServer, sender: Sender) -> None:
    result = sender.send(local_target(server, "/redirect"), {}, b"{}", 2.0)
    assert result.status == 302
    assert not result.ok
    assert result.error is not None
    time.sleep(0.05)  # give a (wrongly) followed request time to land
    assert [seen.path for seen in server.seen] == ["/redirect"]


# --- (c) Retry-After ------------------------------------------------------------------------------


def test_503_retry_after_seconds(server: RecordingServer, sender: Sender) -> None:
    result = sender.send(local_target(server, "/busy"), {}, b"{}", 2.0)
    assert (result.status, result.retry_after, result.ok) == (503, 7, False)


def test_429_retry_after_http_date(server: RecordingServer, sender: Sender) -> None:
    result = sender.send(local_target(server, "/limited"), {}, b"{}", 2.0)
    assert (result.status, result.retry_after) == (429, 120)


# --- (d) no answer --------------------------------------------------------------------------------


def test_a_slow_server_times_out_without_raising(server: RecordingServer, sender: Sender) -> None:
    started = time.monotonic()
    result = sender.send(local_target(server, "/slow"), {}, b"{}", 0.3)
    elapsed = time.monotonic() - started
    assert result.status is None
    assert not result.ok
    assert result.error
    assert elapsed < 2.0


def test_a_refused_connection_is_reported_not_raised(sender: Sender) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    target = DeliveryTarget(
        url=f"http://hooks.test:{port}/",
        scheme="http",
        host="hooks.test",
        port=port,
        target="/",
        address="127.0.0.1",
    )
    result = sender.send(target, {}, b"{}", 0.3)
    assert result.status is None
    assert result.error


def test_a_target_without_an_ip_address_is_reported(sender: Sender) -> None:
    target = DeliveryTarget(
        url="http://hooks.test/", scheme="http", host="hooks.test", port=80, target="/", address="hooks.test"
    )
    result = sender.send(target, {}, b"{}", 0.3)
    assert result.status is None
    assert result.error


# --- (e) DNS rebinding ----------------------------------------------------------------------------


def test_dns_rebinding_cannot_redirect_the_delivery(
    server: RecordingServer, sender: Sender, monkeypatch: pytest.MonkeyPatch
) -> None:
    # First answer public (passes the check), every later answer loopback (where the attacker aims).
    resolver = FlippingResolver([PUBLIC_V4], ["127.0.0.1"])
    target = check_webhook_url(f"http://rebind.test:{server.port}/hook", resolver=resolver)
    assert resolver.calls == [("rebind.test", server.port)]
    assert target.address == PUBLIC_V4

    lookups = NoLookups("rebind.test")
    connected: list[object] = []

    def record_and_refuse(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        connected.append(address)
        raise ConnectionRefusedError("the test keeps this connection off the internet")

    monkeypatch.setattr(socket, "getaddrinfo", lookups)
    monkeypatch.setattr(socket, "create_connection", record_and_refuse)
    result = sender.send(target, {}, b"{}", 0.3)

    assert connected == [(PUBLIC_V4, server.port)]  # the checked address, nothing else
    assert result.status is None
    assert server.seen == []  # the loopback server the second answer points at got nothing
    assert "rebind.test" not in lookups.hosts
    assert len(resolver.calls) == 1


def test_the_pinned_address_is_what_receives_the_delivery(
    server: RecordingServer, sender: Sender, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Local-development variant: the check pins 127.0.0.1 (our server); the name later points elsewhere.
    resolver = FlippingResolver(["127.0.0.1"], ["10.255.255.1"])
    target = check_webhook_url(
        f"http://rebind.test:{server.port}/hook", resolver=resolver, allow_private=True
    )
    assert target.address == "127.0.0.1"

    lookups = NoLookups("rebind.test")
    monkeypatch.setattr(socket, "getaddrinfo", lookups)
    result = sender.send(target, {"X-Event": "evt_2"}, b'{"n":2}', 2.0)

    assert result.status == 200
    assert [(seen.path, seen.body) for seen in server.seen] == [("/hook", b'{"n":2}')]
    assert server.seen[0].headers["host"] == f"rebind.test:{server.port}"
    assert "rebind.test" not in lookups.hosts
    assert resolver.calls == [("rebind.test", server.port)]


# --- https: the real name is sent (SNI) and verified while the connection goes to the address ------


class Pki(NamedTuple):
    server: ssl.SSLContext
    client: ssl.SSLContext


@pytest.fixture(scope="module")
def pki() -> Pki:
    """A throwaway CA and a certificate for hooks.test only."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "paymentcore test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hooks.test")]))
        .issuer_name(ca_name)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("hooks.test")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # load_cert_chain only reads files, so the key and certificate go through a temporary directory.
    with tempfile.TemporaryDirectory() as directory:
        cert_path, key_path = Path(directory, "cert.pem"), Path(directory, "key.pem")
        cert_path.write_bytes(leaf_cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(
            leaf_key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        server_context.load_cert_chain(cert_path, key_path)
    client_context = ssl.create_default_context(
        cadata=ca_cert.public_bytes(serialization.Encoding.PEM).decode("ascii")
    )
    return Pki(server=server_context, client=client_context)


@pytest.fixture
def tls_server(pki: Pki) -> Iterator[RecordingServer]:
    yield from serve(RecordingServer(tls=pki.server))


def tls_target(server: RecordingServer, host: str) -> DeliveryTarget:
    return DeliveryTarget(
        url=f"https://{host}:{server.port}/tls",
        scheme="https",
        host=host,
        port=server.port,
        target="/tls",
        address="127.0.0.1",
    )


def test_https_verifies_the_registered_name_on_the_pinned_address(
    tls_server: RecordingServer, pki: Pki, monkeypatch: pytest.MonkeyPatch, sender_class: type[Sender]
) -> None:
    lookups = NoLookups("hooks.test", "other.test")
    monkeypatch.setattr(socket, "getaddrinfo", lookups)
    sender = sender_class(verify=pki.client)
    try:
        result = sender.send(tls_target(tls_server, "hooks.test"), {}, b"{}", 2.0)
        assert result.status == 200
        assert tls_server.seen[0].headers["host"] == f"hooks.test:{tls_server.port}"
        # The same address under a name the certificate does not cover is refused by TLS.
        wrong = sender.send(tls_target(tls_server, "other.test"), {}, b"{}", 2.0)
        assert wrong.status is None
        assert wrong.error
        assert len(tls_server.seen) == 1
    finally:
        sender.close()
    assert "hooks.test" not in lookups.hosts
    assert "other.test" not in lookups.hosts


# --- connections kept alive per endpoint ------------------------------------------------------------


class KeepAliveHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive; records the client port (one per connection) of every request.
    ``/big`` answers with a body four times what the sender reads to keep a connection."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        server = self.server
        assert isinstance(server, KeepAliveServer)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        server.ports.append(self.client_address[1])
        body = b"x" * (4 * MAX_BODY) if self.path == "/big" else b"{}"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class KeepAliveServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), KeepAliveHandler)
        self.ports: list[int] = []
        self.release = threading.Event()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # /big: the sender closes the connection before the body is all written


@pytest.fixture
def keepalive_server() -> Iterator[KeepAliveServer]:
    httpd = KeepAliveServer()
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5.0)


def _target(server: KeepAliveServer, path: str, host: str = "hooks.test") -> DeliveryTarget:
    port = int(server.server_address[1])
    return DeliveryTarget(
        url=f"http://{host}:{port}{path}",
        scheme="http",
        host=host,
        port=port,
        target=path,
        address="127.0.0.1",
    )


def test_deliveries_to_one_endpoint_share_one_kept_alive_connection(
    keepalive_server: KeepAliveServer, sender: Sender
) -> None:
    for _ in range(5):
        assert sender.send(_target(keepalive_server, "/hook"), {}, b"{}", 2.0).ok
    assert len(keepalive_server.ports) == 5
    assert len(set(keepalive_server.ports)) == 1  # one TCP connection for the five deliveries


def test_a_connection_is_never_shared_by_two_names_on_one_address(
    keepalive_server: KeepAliveServer, sender: Sender
) -> None:
    for host in ("one.test", "two.test", "one.test", "two.test"):
        assert sender.send(_target(keepalive_server, "/hook", host), {}, b"{}", 2.0).ok
    first, second, third, fourth = keepalive_server.ports
    assert first != second  # each name its own connection ...
    assert (third, fourth) == (first, second)  # ... kept for that name alone


def test_a_response_body_too_large_to_read_closes_its_connection(
    keepalive_server: KeepAliveServer, sender: Sender
) -> None:
    for _ in range(2):
        result = sender.send(_target(keepalive_server, "/big"), {}, b"{}", 2.0)
        assert result.ok and result.status == 200
    assert len(set(keepalive_server.ports)) == 2  # not read to its end: the connection is not reused


def test_a_delivery_that_finds_its_endpoints_connections_busy_is_not_an_attempt(
    server: RecordingServer, sender_class: type[Sender]
) -> None:
    sender = sender_class(per_endpoint=1)
    try:
        first = threading.Thread(target=sender.send, args=(local_target(server, "/slow"), {}, b"{}", 5.0))
        first.start()
        deadline = time.monotonic() + 5
        while not server.seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.seen  # the first delivery holds the endpoint's only connection
        second = sender.send(local_target(server, "/slow"), {}, b"{}", 0.3)
        assert second.status is None and not second.attempted  # never left: nothing to record
        server.release.set()
        first.join(5.0)
        assert len(server.seen) == 1
    finally:
        server.release.set()
        sender.close()


# --- (f) answers as HTTP/1.1 allows them: read by hand, the connection kept only when it can be -------


class ScriptedServer:
    """Answers every request with the same raw bytes and counts the connections it accepted."""

    def __init__(self, answer: bytes, cuts: tuple[int, ...] = ()) -> None:
        self.answer = answer
        self.cuts = cuts  # the answer is written in pieces cut at these offsets, a moment apart
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.connections = 0
        self.requests: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while True:
                head_end = data.find(b"\r\n\r\n")
                if head_end >= 0:
                    head = data[:head_end].decode("latin-1").lower()
                    length = (
                        int(head.split("content-length:")[1].split("\r\n")[0])
                        if "content-length:" in head
                        else 0
                    )
                    if len(data) >= head_end + 4 + length:
                        self.requests.append(data[: head_end + 4 + length])
                        data = data[head_end + 4 + length :]
                        bounds = [0, *self.cuts, len(self.answer)]
                        for start, end in itertools.pairwise(bounds):
                            conn.sendall(self.answer[start:end])
                            if end < len(self.answer):
                                time.sleep(0.02)
                        continue
                chunk = conn.recv(65_536)
                if not chunk:
                    return
                data += chunk

    def target(self) -> DeliveryTarget:
        return DeliveryTarget(
            url=f"http://hooks.test:{self.port}/hook",
            scheme="http",
            host="hooks.test",
            port=self.port,
            target="/hook",
            address="127.0.0.1",
        )

    def close(self) -> None:
        self.listener.close()


@pytest.mark.parametrize(
    ("answer", "status", "kept"),
    [
        (b"HTTP/1.1 204 No Content\r\n\r\n", 204, True),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, True),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n", 202, True),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", 200, True),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x=1\r\nok\r\n0\r\nT: 1\r\n\r\n", 200, True),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n", 200, False),
        (b"HTTP/1.1 200 OK\r\n\r\nno length: the body runs to the close", 200, False),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", 200, False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok", 200, True),
        (b"HTTP/1.1 503 Busy\r\nretry-after: 30\r\nContent-Length: 0\r\n\r\n", 503, True),
    ],
)
def test_each_answer_is_read_whole_and_its_connection_kept_only_when_it_can_carry_the_next(
    answer: bytes, status: int, kept: bool, sender: Sender
) -> None:
    server = ScriptedServer(answer)
    try:
        results = [sender.send(server.target(), {"X-Event": "e"}, b'{"n":1}', 2.0) for _ in range(2)]
    finally:
        server.close()
    assert [r.status for r in results] == [status, status]
    assert all(r.error is None for r in results)
    if status == 503:
        assert [r.retry_after for r in results] == [30, 30]
    assert server.connections == (1 if kept else 2)
    [request, _] = server.requests
    assert request.startswith(b"POST /hook HTTP/1.1\r\n") and request.endswith(b'\r\n\r\n{"n":1}')
    assert b"\r\nContent-Length: 7\r\n" in request and b"\r\nHost: hooks.test:" in request


def test_an_answer_arriving_in_pieces_is_read_whole_and_its_connection_kept(sender: Sender) -> None:
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
    # cut inside the head, inside a chunk's size line, inside its data and before the last chunk
    server = ScriptedServer(answer, cuts=(10, 48, 51, 56))
    try:
        results = [sender.send(server.target(), {}, b"{}", 2.0) for _ in range(2)]
    finally:
        server.close()
    assert [r.status for r in results] == [200, 200] and all(r.error is None for r in results)
    assert server.connections == 1


def test_an_answer_that_is_not_http_is_a_failed_attempt_not_an_exception(sender: Sender) -> None:
    server = ScriptedServer(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
    try:
        result = sender.send(server.target(), {}, b"{}", 2.0)
    finally:
        server.close()
    assert result.status is None and result.attempted
    assert result.error is not None and "BadStatusLine" in result.error


def test_a_header_value_that_would_split_the_request_is_never_sent(sender: Sender) -> None:
    server = ScriptedServer(b"HTTP/1.1 204 No Content\r\n\r\n")
    try:
        result = sender.send(server.target(), {"X-Event": "e\r\nX-Injected: 1"}, b"{}", 2.0)
    finally:
        server.close()
    assert result.status is None and result.error is not None
    assert server.requests == []
