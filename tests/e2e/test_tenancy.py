"""Tenancy and secrets over HTTP: one merchant can neither see nor touch another's, and no secret leaks.

- Every path that takes a reference answers another merchant's reference exactly as it answers one that
  never existed: same status, same body (but for ``requestId``), same headers (but for
  ``x-request-id``, ``date`` and ``x-ratelimit-*``). No oracle tells a caller that a reference exists.
  (The hosted pages under /checkout/ are public by design and are not covered here.)
- Account resources (balances, disburse limits, the webhook endpoint, channels) show the caller's data
  only.
- A key without the scope is refused with 403 INSUFFICIENT_SCOPE on every route that needs it, and the
  refused request leaves nothing behind: no record, no reference begun, no prompt, no event, no money
  moved, and its Idempotency-Key still free.
- A revoked key answers 401 on the very next request, whether revoked in process or by the CLI from
  another process, and exactly as an unknown key does.
- API keys and webhook signing secrets never appear in logs (every logger at DEBUG, and a real server's
  stdout and stderr), in error bodies, in later responses or in the database file.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from paymentcore import Config, FakeClock, PaymentCore, RandomReferences, SandboxNetwork
from paymentcore._domain.models import DeliveryStatus
from paymentcore.adapters.http_sender import HttpWebhookSender
from paymentcore.testing import CapturingSender, fund, public_resolver
from paymentcore_server.app import create_app

PER_MINUTE = 100_000  # these tests make many calls per key; the rate limit has its own tests
VOLATILE_HEADERS = ("x-request-id", "date")
CHARGE = {"amount": 5000, "currency": "XAF", "country": "CM", "provider": "mtn_cm"}
CHECKOUT = {"amount": 2500, "currency": "XAF", "description": "An order"}
PAYOUT = {"amount": 1000, "currency": "XAF", "phone": "670000000"}


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    """The spec's error shape with this status and code, its requestId the X-Request-Id header."""
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["code"] == code and isinstance(body["message"], str) and body["message"], body
    assert body["requestId"] == response.headers["x-request-id"]
    return body


class CountingRefs:
    """Random references that remember every collection and payout reference ever begun."""

    def __init__(self) -> None:
        self._inner = RandomReferences()
        self.begun: list[str] = []
        self._lock = threading.Lock()

    def _keep(self, reference: str) -> str:
        with self._lock:
            self.begun.append(reference)
        return reference

    def collection(self, now: int) -> str:
        return self._keep(self._inner.collection(now))

    def payout(self, now: int) -> str:
        return self._keep(self._inner.payout(now))

    def token(self, prefix: str) -> str:
        return self._inner.token(prefix)


@attrs.frozen
class Tenant:
    merchant_id: str
    collect_key: str
    disburse_key: str
    collect_key_id: str


def view(response: Any) -> tuple[int, Any, dict[str, str]]:
    """What a caller can observe of a response, minus what differs on every request anyway."""
    body = response.json()
    if isinstance(body, dict):
        body.pop("requestId", None)
    headers = {
        name.lower(): value
        for name, value in response.headers.items()
        if name.lower() not in VOLATILE_HEADERS and not name.lower().startswith("x-ratelimit-")
    }
    return response.status_code, body, headers


def lookalike(reference: str) -> str:
    """A reference of the same shape that cannot exist (the generator never uses the digit 0)."""
    head, _, suffix = reference.rpartition("-")
    return f"{head}-{'0' * len(suffix)}"


def new_tenant(core: PaymentCore, name: str) -> Tenant:
    merchant = core.operator.create_merchant(name)
    collect = core.operator.create_key(merchant.id, ["collect"], per_minute=PER_MINUTE)
    disburse = core.operator.create_key(merchant.id, ["disburse"], per_minute=PER_MINUTE)
    return Tenant(merchant.id, collect.api_key, disburse.api_key, collect.key.id)


@attrs.define
class World:
    core: PaymentCore
    clock: FakeClock
    refs: CountingRefs
    http: TestClient
    path: Path | None
    a: Tenant
    b: Tenant
    b_refs: dict[str, str] = attrs.Factory(dict)  # what merchant B owns: name -> reference
    a_refs: dict[str, str] = attrs.Factory(dict)

    def call(self, method: str, path: str, key: str, body: Any = None, idem: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {key}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if idem is not None:
            headers["Idempotency-Key"] = idem
        content = None if body is None else json.dumps(body)
        return self.http.request(method, path, content=content, headers=headers)

    def tenant(self, name: str) -> Tenant:
        return new_tenant(self.core, name)

    @property
    def sandbox(self) -> SandboxNetwork:
        network = self.core.network
        assert isinstance(network, SandboxNetwork)
        return network


def created(response: Any, status: int) -> str:
    assert response.status_code == status, response.text
    reference: str = response.json()["reference"]
    return reference


@pytest.fixture(params=["sqlite", "memory"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    clock = FakeClock()
    refs = CountingRefs()
    kwargs: dict[str, Any] = {
        "clock": clock,
        "refs": refs,
        "network": SandboxNetwork(delay_seconds=0),
        "sender": CapturingSender(),
        "resolver": public_resolver,
        "config": Config(sandbox_delay=0, webhook_jitter=0.0),
    }
    path = tmp_path / "tenancy.db" if request.param == "sqlite" else None
    core = PaymentCore.sqlite(path, **kwargs) if path is not None else PaymentCore.memory(**kwargs)
    try:
        with TestClient(create_app(core), raise_server_exceptions=False) as http:
            w = World(core, clock, refs, http, path, new_tenant(core, "Shop A"), new_tenant(core, "Shop B"))
            populate(w)
            yield w
    finally:
        core.close()


def populate(w: World) -> None:
    """B owns one of everything; A owns a little."""
    a, b = w.a, w.b
    fund(w.core, b.merchant_id, "XAF", 500_000)
    fund(w.core, b.merchant_id, "GHS", "75.00")
    fund(w.core, a.merchant_id, "XAF", 5000)
    w.core.operator.set_limits(b.merchant_id, "XAF", per_day="400000", review_threshold="50000")
    w.core.operator.block_provider(b.merchant_id, "orange_cm")
    w.b_refs = {
        "checkout": created(w.call("POST", "/v1/collect/checkout", b.collect_key, CHECKOUT), 201),
        "legacy": created(w.call("POST", "/v1/payments", b.collect_key, {**CHECKOUT, "reference": "x"}), 201),
        "charge": created(
            w.call("POST", "/v1/collect/charge", b.collect_key, {**CHARGE, "phone": "670000001"}), 202
        ),
        "payout": created(w.call("POST", "/v1/disburse", b.disburse_key, PAYOUT, idem="b-1"), 201),
        "held": created(
            w.call("POST", "/v1/payouts", b.disburse_key, {**PAYOUT, "amount": 60_000}, idem="b-2"), 201
        ),
    }
    assert w.call("PUT", "/v1/webhook", b.collect_key, {"url": "https://b.example/hooks"}).status_code == 200
    w.a_refs = {
        "checkout": created(w.call("POST", "/v1/collect/checkout", a.collect_key, CHECKOUT), 201),
        "payout": created(w.call("POST", "/v1/disburse", a.disburse_key, PAYOUT, idem="a-1"), 201),
    }
    w.core.run_until_idle()


# --- references: another merchant's is a plain 404 -------------------------------------------------

GET_PATHS = [
    ("/v1/collect/{}", "collect"),
    ("/v1/payments/{}", "collect"),
    ("/v1/disburse/{}", "disburse"),
    ("/v1/payouts/{}", "disburse"),
]


@pytest.mark.parametrize(("template", "scope"), GET_PATHS)
def test_another_merchants_reference_answers_exactly_as_a_nonexistent_one(
    world: World, template: str, scope: str
) -> None:
    key = world.a.collect_key if scope == "collect" else world.a.disburse_key
    own = world.a_refs["checkout" if scope == "collect" else "payout"]
    assert world.call("GET", template.format(own), key).status_code == 200  # the path itself works
    for name, foreign in world.b_refs.items():
        answer = world.call("GET", template.format(foreign), key)
        assert_error(answer, 404, "NOT_FOUND")
        missing = world.call("GET", template.format(lookalike(foreign)), key)
        assert view(answer) == view(missing), name
        assert foreign not in answer.text
    # a reference of the other kind, even the caller's own, is just as unknown here
    other = world.a_refs["payout" if scope == "collect" else "checkout"]
    assert view(world.call("GET", template.format(other), key)) == view(
        world.call("GET", template.format(lookalike(other)), key)
    )
    # the owner still sees each of them
    owner_key = world.b.collect_key if scope == "collect" else world.b.disburse_key
    kinds = ("checkout", "legacy", "charge") if scope == "collect" else ("payout", "held")
    for name in kinds:
        assert world.call("GET", template.format(world.b_refs[name]), owner_key).status_code == 200


def test_a_foreign_reference_without_the_scope_answers_as_a_nonexistent_one(world: World) -> None:
    for template, scope in GET_PATHS:
        wrong = world.a.disburse_key if scope == "collect" else world.a.collect_key
        for foreign in world.b_refs.values():
            answer = world.call("GET", template.format(foreign), wrong)
            assert_error(answer, 403, "INSUFFICIENT_SCOPE")
            assert view(answer) == view(world.call("GET", template.format(lookalike(foreign)), wrong))


def test_idempotency_keys_are_per_merchant(world: World) -> None:
    """B's Idempotency-Key, sent by A with B's very body, is A's own fresh key: no replay of B's answer."""
    b_payout = world.call("GET", f"/v1/disburse/{world.b_refs['payout']}", world.b.disburse_key).json()
    mine = world.call("POST", "/v1/disburse", world.a.disburse_key, PAYOUT, idem="b-1")
    reference = created(mine, 201)
    assert reference != world.b_refs["payout"] and reference == world.refs.begun[-1]
    assert world.b_refs["payout"] not in mine.text and b_payout["reference"] not in mine.text
    balances = world.call("GET", "/v1/account/balances", world.a.collect_key).json()["balances"]
    assert balances == [{"currency": "XAF", "available": 3000, "reserved": 1000}]
    assert world.call("GET", f"/v1/disburse/{reference}", world.b.disburse_key).status_code == 404


# --- account resources: the caller's own data only ---------------------------------------------------


def test_balances_show_only_the_callers_money(world: World) -> None:
    for key in (world.a.collect_key, world.a.disburse_key):
        answer = world.call("GET", "/v1/account/balances", key)
        assert answer.status_code == 200
        assert answer.json() == {"balances": [{"currency": "XAF", "available": 4000, "reserved": 0}]}
    b_view = world.call("GET", "/v1/account/balances", world.b.collect_key).json()["balances"]
    assert {row["currency"] for row in b_view} == {"GHS", "XAF"}


@pytest.mark.parametrize("path", ["/v1/account/disburse-limits/XAF", "/v1/payout-limits/XAF"])
def test_disburse_limits_count_only_the_callers_payouts(world: World, path: str) -> None:
    mine = world.call("GET", path, world.a.disburse_key)
    assert mine.status_code == 200
    body = mine.json()
    assert body["enabled"] is True and body["spentToday"] == 1000 and body["spentThisWeek"] == 1000
    assert body["perDay"] is None and body["reviewThreshold"] is None  # B's ceilings are B's
    theirs = world.call("GET", path, world.b.disburse_key).json()
    assert theirs["spentToday"] == 61_000 and theirs["perDay"] == 400_000


def test_webhook_endpoint_and_channels_are_per_merchant(world: World) -> None:
    c = world.tenant("Shop C")  # registered nothing either
    a_answer = world.call("GET", "/v1/webhook", world.a.collect_key)
    assert_error(a_answer, 404, "NOT_FOUND")
    assert view(a_answer) == view(world.call("GET", "/v1/webhook", c.collect_key))
    assert (
        world.call("PUT", "/v1/webhook", world.a.disburse_key, {"url": "https://a.example/in"}).status_code
        == 200
    )
    assert world.call("GET", "/v1/webhook", world.a.collect_key).json()["url"] == "https://a.example/in"
    assert world.call("GET", "/v1/webhook", world.b.disburse_key).json()["url"] == "https://b.example/hooks"
    channels = {r["providerCode"]: r for r in world.call("GET", "/v1/channels", world.a.collect_key).json()}
    assert channels["orange_cm"]["available"] is True and channels["orange_cm"]["reason"] is None


# --- scopes: refused, and nothing happens --------------------------------------------------------------

SCOPED_POSTS = [
    ("/v1/collect/charge", "collect", {**CHARGE, "phone": "670000002"}, 202),
    ("/v1/collect/checkout", "collect", CHECKOUT, 201),
    ("/v1/payments", "collect", CHECKOUT, 201),
    ("/v1/disburse", "disburse", PAYOUT, 201),
    ("/v1/payouts", "disburse", PAYOUT, 201),
]


def snapshot(w: World) -> tuple[Any, ...]:
    with w.core.store.read() as tx:
        balances = [tx.ledger.balances(t.merchant_id) for t in (w.a, w.b)]
        events = [len(tx.outbox.list(t.merchant_id)) for t in (w.a, w.b)]
        entries = [len(tx.ledger.entries(t.merchant_id, "XAF")) for t in (w.a, w.b)]
    return (
        len(w.refs.begun),
        balances,
        events,
        entries,
        w.sandbox.prompt_count,
        sum(w.sandbox.payouts_sent.values()),
    )


@pytest.mark.parametrize(("path", "scope", "body", "ok"), SCOPED_POSTS)
def test_a_key_without_the_scope_is_refused_and_nothing_happens(
    world: World, path: str, scope: str, body: dict[str, Any], ok: int
) -> None:
    wrong = world.a.disburse_key if scope == "collect" else world.a.collect_key
    right = world.a.collect_key if scope == "collect" else world.a.disburse_key
    before = snapshot(world)
    refused = world.call("POST", path, wrong, body, idem="scoped-1")
    assert_error(refused, 403, "INSUFFICIENT_SCOPE")
    world.core.run_until_idle()
    assert snapshot(world) == before
    # the refused request did not claim its Idempotency-Key: the right key creates with it
    reference = created(world.call("POST", path, right, body, idem="scoped-1"), ok)
    assert reference not in world.b_refs.values() and world.refs.begun[-1] == reference
    assert len(world.refs.begun) == before[0] + 1


@pytest.mark.parametrize(
    ("path", "scope"),
    [("/v1/account/disburse-limits/XAF", "disburse"), ("/v1/payout-limits/XAF", "disburse")],
)
def test_reading_limits_needs_the_disburse_scope(world: World, path: str, scope: str) -> None:
    assert_error(world.call("GET", path, world.a.collect_key), 403, "INSUFFICIENT_SCOPE")


# --- revocation ---------------------------------------------------------------------------------------


def test_a_revoked_key_stops_on_the_very_next_request_like_an_unknown_key(world: World) -> None:
    key = world.core.operator.create_key(world.a.merchant_id, ["collect", "disburse"], per_minute=PER_MINUTE)
    assert world.call("GET", "/v1/account/balances", key.api_key).status_code == 200
    world.core.operator.revoke_key(key.key.id)
    answer = world.call("POST", "/v1/collect/checkout", key.api_key, CHECKOUT, idem="after-revoke")
    assert_error(answer, 401, "UNAUTHORIZED")
    unknown = world.call("POST", "/v1/collect/checkout", key.api_key[:-4] + "AAAA", CHECKOUT, idem="x")
    assert view(answer) == view(unknown)
    for path in ("/v1/account/balances", f"/v1/collect/{world.a_refs['checkout']}", "/v1/webhook"):
        assert_error(world.call("GET", path, key.api_key), 401, "UNAUTHORIZED")


@pytest.mark.parametrize("world", ["sqlite"], indirect=True)  # the CLI works on a SQLite file
def test_a_key_revoked_by_the_cli_from_another_process_stops_at_once(world: World) -> None:
    assert world.path is not None
    script = shutil.which("paymentcore")
    assert script is not None
    key = world.core.operator.create_key(world.a.merchant_id, ["collect"], per_minute=PER_MINUTE)
    assert world.call("GET", "/v1/countries", key.api_key).status_code == 200
    done = subprocess.run(
        [script, "--db", str(world.path), "key", "revoke", key.key.id, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["revoked"] is True
    assert key.api_key not in done.stdout + done.stderr  # the CLI shows the key record, never the secret
    assert_error(world.call("GET", "/v1/countries", key.api_key), 401, "UNAUTHORIZED")


# --- secrets never leak ---------------------------------------------------------------------------


def windows(secret: str, size: int = 16) -> set[str]:
    """Every ``size``-character piece of a secret's random part: a partial leak shows up too."""
    random_part = secret.split("_", 1)[1] if "_" in secret[:8] else secret
    return {random_part[i : i + size] for i in range(len(random_part) - size + 1)}


def near_miss(key: str) -> str:
    """The key with its last character changed: looks real, is not."""
    return key[:-1] + ("A" if key[-1] != "A" else "B")


def leaks(text: str, secrets_: list[str]) -> list[str]:
    return [s[:8] + "..." for s in secrets_ if any(piece in text for piece in windows(s))]


class Receiver(ThreadingHTTPServer):
    """A webhook receiver on loopback that fails the first delivery and accepts the rest."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ReceiverHandler)
        self.lock = threading.Lock()
        self.received: list[tuple[dict[str, str], bytes]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hooks"

    def status(self, headers: dict[str, str], body: bytes) -> int:
        with self.lock:
            self.received.append((headers, body))
            return 500 if len(self.received) == 1 else 200


class ReceiverHandler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        server = self.server
        assert isinstance(server, Receiver)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status = server.status({k.lower(): v for k, v in self.headers.items()}, body)
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_no_key_or_signing_secret_reaches_logs_error_bodies_or_later_responses(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, receiver: Receiver
) -> None:
    caplog.set_level(logging.DEBUG)
    clock = FakeClock()
    core = PaymentCore.sqlite(
        tmp_path / "secrets.db",
        clock=clock,
        network=SandboxNetwork(delay_seconds=0),
        sender=HttpWebhookSender(),
        config=Config(
            sandbox_delay=0, allow_private_webhooks=True, webhook_retry_delays=(1,), webhook_jitter=0.0
        ),
    )
    app = create_app(core)

    async def crash(request: Request) -> Response:
        raise RuntimeError("the handler crashed")

    app.router.routes.append(Route("/v1/crash", crash, methods=["GET", "POST"]))
    secrets_: list[str] = []
    responses: list[Any] = []
    try:
        merchant = core.operator.create_merchant("Secret Shop")
        keys = [
            core.operator.create_key(merchant.id, [s], per_minute=PER_MINUTE) for s in ("collect", "disburse")
        ]
        collect, disburse = keys[0].api_key, keys[1].api_key
        revoked = core.operator.create_key(merchant.id, ["collect"]).api_key
        core.operator.revoke_key(core.access.authenticate(revoked).key.id)
        secrets_ += [collect, disburse, revoked]
        with TestClient(app, raise_server_exceptions=False) as http:

            def send(method: str, path: str, key: str | None, body: Any = None, **headers: str) -> Any:
                sent = {"Content-Type": "application/json", **headers}
                if key is not None:
                    sent["Authorization"] = f"Bearer {key}"
                answer = http.request(
                    method, path, content=None if body is None else json.dumps(body), headers=sent
                )
                responses.append(answer)
                return answer

            # registrations: each answer shows its own secret once; they are kept aside
            registrations = [
                send("PUT", "/v1/webhook", collect, {"url": receiver.url}),
                send("POST", "/v1/webhook", disburse, {"url": receiver.url}, **{"Idempotency-Key": "reg"}),
                send("POST", "/v1/webhook", disburse, {"url": receiver.url}, **{"Idempotency-Key": "reg"}),
                send("POST", "/v1/webhooks", collect, {"url": receiver.url, "events": "v2"}),
            ]
            for answer in registrations:
                assert answer.status_code == 200, answer.text
                secrets_.append(answer.json()["signingSecret"])
            assert registrations[1].json() == registrations[2].json()  # a replay, not a rotation
            # failures carrying real or near-real keys
            assert_error(send("GET", "/v1/countries", near_miss(collect)), 401, "UNAUTHORIZED")
            assert_error(send("GET", "/v1/countries", revoked), 401, "UNAUTHORIZED")
            assert_error(
                send("GET", "/v1/countries", None, Authorization=f"Basic {disburse}"), 401, "UNAUTHORIZED"
            )
            assert_error(send("GET", "/v1/crash", collect), 500, "SERVER_ERROR")
            assert_error(send("POST", "/v1/crash", disburse, {"token": "x"}), 500, "SERVER_ERROR")
            assert_error(
                send("PUT", "/v1/webhook", collect, {"url": f"https://shop:{collect}@example.com/in"}),
                400,
                "INVALID_REQUEST",
            )
            assert_error(
                send(
                    "POST",
                    "/v1/collect/checkout",
                    collect,
                    {**CHECKOUT, "amount": 3000},
                    **{"Idempotency-Key": "reg"},
                ),
                409,
                "IDEMPOTENCY_KEY_REUSED",
            )
            # deliveries: the first fails (500), the retry succeeds
            charge = send("POST", "/v1/collect/charge", collect, {**CHARGE, "phone": "670000003"})
            assert charge.status_code == 202
            core.run_until_idle()
            clock.advance(2)
            core.run_until_idle()
            with core.store.read() as tx:
                events = tx.outbox.list(merchant.id)
            assert [e.status for e in events] == [DeliveryStatus.DELIVERED]
            assert len(receiver.received) == 2
            # later reads
            for path in ("/v1/webhook", "/v1/account/balances", f"/v1/collect/{charge.json()['reference']}"):
                assert send("GET", path, disburse if path == "/v1/webhook" else collect).status_code == 200
        later = [r for r in responses if r not in registrations]
        texts = [r.text + json.dumps(dict(r.headers)) for r in later]
        assert leaks("\n".join(texts), secrets_) == []
        for answer in registrations:  # each shows its own secret, never a key or another secret
            own = answer.json()["signingSecret"]
            assert leaks(answer.text, [s for s in secrets_ if s != own]) == []
        for headers, body in receiver.received:  # the receiver gets a signature, never the secret
            assert leaks(json.dumps(headers) + body.decode(), secrets_) == []
        assert "the handler crashed" in caplog.text  # the crash was logged ...
        assert leaks(caplog.text, secrets_) == []  # ... and no logger, at any level, wrote a secret
    finally:
        core.close()
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("secrets.db"))
    assert leaks(stored.decode("latin-1"), secrets_) == []


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.slow
def test_a_real_server_never_prints_a_key_or_secret_beyond_the_demo_banner(
    tmp_path: Path, receiver: Receiver
) -> None:
    db = tmp_path / "served.db"
    out, err = tmp_path / "server.out", tmp_path / "server.err"
    base = f"http://127.0.0.1:{free_port()}"
    command = [
        shutil.which("paymentcore") or "paymentcore",
        "--db",
        str(db),
        "serve",
        "--demo",
        "--port",
        base.rsplit(":", 1)[1],
        "--sandbox-delay",
        "0",
        "--allow-private-webhooks",
        "--webhook-retry-delays",
        "1",
    ]
    secrets_: list[str] = []
    later: list[str] = []
    with out.open("wb") as out_file, err.open("wb") as err_file:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out_file, stderr=err_file)
        try:
            deadline = time.monotonic() + 20
            while True:
                assert proc.poll() is None, err.read_text()
                assert time.monotonic() < deadline, "the server did not start"
                try:
                    if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.05)
            banner = dict(re.findall(r"(Collect|Disburse) key:\s+(\S+)", out.read_text()))
            collect, disburse = banner["Collect"], banner["Disburse"]
            secrets_ += [collect, disburse]
            core = PaymentCore.sqlite(db, sender=None)  # the operator, in another process
            try:
                merchant_id = core.access.authenticate(collect).merchant.id
                extra = core.operator.create_key(merchant_id, ["collect"])
            finally:
                core.close()
            secrets_.append(extra.api_key)
            with httpx.Client(base_url=base, timeout=10) as http:

                def send(method: str, path: str, key: str, body: Any = None) -> httpx.Response:
                    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
                    content = None if body is None else json.dumps(body)
                    answer = http.request(method, path, content=content, headers=headers)
                    later.append(answer.text + json.dumps(dict(answer.headers)))
                    return answer

                assert send("GET", "/v1/countries", extra.api_key).status_code == 200
                core = PaymentCore.sqlite(db, sender=None)
                try:
                    core.operator.revoke_key(extra.key.id)
                finally:
                    core.close()
                assert_error(send("GET", "/v1/countries", extra.api_key), 401, "UNAUTHORIZED")
                registered = http.put(
                    "/v1/webhook",
                    content=json.dumps({"url": receiver.url}),
                    headers={"Authorization": f"Bearer {collect}", "Content-Type": "application/json"},
                )
                assert registered.status_code == 200, registered.text
                secrets_.append(registered.json()["signingSecret"])
                assert_error(send("GET", "/v1/countries", near_miss(collect)), 401, "UNAUTHORIZED")
                assert_error(send("GET", "/v1/countries", disburse + "x"), 401, "UNAUTHORIZED")
                refused = send("PUT", "/v1/webhook", collect, {"url": f"https://u:{disburse}@example.com/in"})
                assert_error(refused, 400, "INVALID_REQUEST")
                charge = send("POST", "/v1/collect/charge", collect, {**CHARGE, "phone": "670000004"})
                assert charge.status_code == 202, charge.text
                deadline = time.monotonic() + 20
                while len(receiver.received) < 2:  # a failed delivery, then its retry a second later
                    assert time.monotonic() < deadline, receiver.received
                    time.sleep(0.05)
                for path in ("/v1/webhook", "/v1/account/balances"):
                    assert send("GET", path, disburse).status_code == 200
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
    printed = out.read_text() + err.read_text()
    assert leaks("\n".join(later), secrets_) == []
    outside_banner = "\n".join(
        line for line in printed.splitlines() if "Collect key:" not in line and "Disburse key:" not in line
    )
    assert leaks(outside_banner, secrets_) == []
    assert printed.count(collect) == 1 and printed.count(disburse) == 1  # shown once, at creation
    for headers, body in receiver.received:
        assert leaks(json.dumps(headers) + body.decode(), secrets_) == []
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("served.db"))
    assert leaks(stored.decode("latin-1"), secrets_) == []
