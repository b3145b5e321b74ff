"""Observability in process: the core's observer hooks, the work backlog read from the store, the store's
ping, ``/healthz``, the request record (route templates) and the per-instance Prometheus registry.

The real-process checks (a server's metrics port, JSON logs, /healthz while the database goes away)
are in ``tests/e2e/test_observability.py``.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from urllib.parse import quote

import attrs
import pytest
from prometheus_client import generate_latest
from starlette.testclient import TestClient

from paymentcore import (
    CollectionStatus,
    Config,
    Observer,
    PaymentCore,
    PayoutStatus,
    WorkBacklog,
)
from paymentcore._domain.models import Event
from paymentcore.adapters.memory import MemoryStore
from paymentcore.adapters.sqlite import SqliteStore
from paymentcore.ports import Store, StoreReadOnlyError, StoreUnavailableError, Transaction
from paymentcore.testing import TestKit
from paymentcore_server import create_app
from paymentcore_server.metrics import Metrics
from paymentcore_server.observability import (
    FIELDS_ATTRIBUTE,
    UNMATCHED,
    JsonFormatter,
    RequestObserverMiddleware,
    RequestRecord,
    log_request,
)

NOW = 1_767_225_600_000


class Recorder(Observer):
    """Every call the core makes, in order, as (what, value)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def collection_status(self, status: CollectionStatus) -> None:
        with self._lock:
            self.calls.append(("collection", status.value))

    def payout_status(self, status: PayoutStatus) -> None:
        with self._lock:
            self.calls.append(("payout", status.value))

    def delivery_attempt(self, *, delivered: bool) -> None:
        with self._lock:
            self.calls.append(("delivery", "delivered" if delivered else "failed"))

    def count(self) -> Counter[tuple[str, str]]:
        return Counter(self.calls)


@pytest.fixture
def kit() -> Iterator[TestKit]:
    made = TestKit.create()
    yield made
    made.core.close()


def observed(kit: TestKit) -> Recorder:
    recorder = Recorder()
    kit.core.deps.observer = recorder
    return recorder


# --- the observer ----------------------------------------------------------------------------------


def test_the_observer_hears_each_status_a_collection_and_a_payout_reach(kit: TestKit) -> None:
    recorder = observed(kit)
    shop = kit.merchant()
    kit.webhook(shop.id)
    ref = kit.core.collect.charge(
        shop.id, amount=2500, currency="XAF", country="CM", provider="mtn_cm", phone="670000001"
    ).reference
    kit.settle()
    kit.network.complete(ref)
    kit.settle()
    payout = kit.core.disburse.create(
        shop.id, amount=1000, currency="XAF", phone="670000002", idempotency_key="po-1"
    )
    kit.settle()
    kit.network.complete(payout.reference)
    kit.settle()
    # a replay of the same payout moves nothing and is not told again
    kit.core.disburse.create(shop.id, amount=1000, currency="XAF", phone="670000002", idempotency_key="po-1")

    assert kit.core.disburse.find(payout.reference).status is PayoutStatus.PAID
    assert recorder.count() == Counter(
        {
            ("collection", "PENDING"): 1,
            ("collection", "PROCESSING"): 1,
            ("collection", "SUCCESS"): 1,
            ("payout", "PENDING"): 1,
            ("payout", "SENT"): 1,
            ("payout", "PAID"): 1,
            ("delivery", "delivered"): 3,  # collect.succeeded, disburse.sent, disburse.succeeded
        }
    )
    # each payout status is told in the order it was reached
    assert [v for w, v in recorder.calls if w == "payout"] == ["PENDING", "SENT", "PAID"]


def test_failed_rejected_and_resolved_payouts_and_failed_deliveries(kit: TestKit) -> None:
    recorder = observed(kit)
    kit.sender.status = 500
    shop = kit.merchant()
    kit.webhook(shop.id)
    kit.fund(shop.id, "XAF", 100_000)
    kit.core.operator.set_limits(shop.id, "XAF", review_threshold=5000)
    held = kit.core.disburse.create(
        shop.id, amount=6000, currency="XAF", phone="670000003", idempotency_key="a"
    )
    refused = kit.core.disburse.create(
        shop.id, amount=1000, currency="XAF", phone="670000004", idempotency_key="b"
    )
    kit.network.refuse(refused.reference)
    kit.settle()
    assert kit.core.disburse.find(refused.reference).status is PayoutStatus.FAILED
    kit.core.disburse.reject(held.reference)
    kit.network.moved(refused.reference, False)
    kit.core.disburse.resolve(refused.reference)  # stays FAILED: not told a second time
    kit.settle()

    payouts = Counter(v for w, v in recorder.calls if w == "payout")
    assert payouts == Counter({"PENDING": 2, "FAILED": 1, "REJECTED": 1})
    deliveries = Counter(v for w, v in recorder.calls if w == "delivery")
    assert deliveries == Counter({"failed": len(kit.deliveries)})  # every attempt answered 500
    assert len(kit.deliveries) == 2  # disburse.failed twice (refused, rejected); no retries in the kit


def test_a_rolled_back_change_is_never_told_and_a_failing_observer_breaks_nothing(
    kit: TestKit, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = observed(kit)
    deps = kit.core.deps

    class Boom(Exception):
        pass

    with pytest.raises(Boom), deps.transaction():
        deps.tell(lambda o: o.payout_status(PayoutStatus.PAID))
        raise Boom
    assert recorder.calls == []
    with deps.transaction():
        deps.tell(lambda o: o.payout_status(PayoutStatus.PAID))
        assert recorder.calls == []  # not before the commit
    assert recorder.calls == [("payout", "PAID")]
    with pytest.raises(RuntimeError):
        deps.tell(lambda o: o.payout_status(PayoutStatus.PAID))  # outside a transaction: a bug

    class Broken(Observer):
        def payout_status(self, status: PayoutStatus) -> None:
            raise ValueError("observer bug")

    deps.observer = Broken()
    shop = kit.merchant()
    kit.fund(shop.id, "XAF", 10_000)
    with caplog.at_level(logging.ERROR, logger="paymentcore"):
        payout = kit.core.disburse.create(
            shop.id, amount=1000, currency="XAF", phone="670000002", idempotency_key="x"
        )
        kit.settle()
    assert kit.core.disburse.find(payout.reference).status is PayoutStatus.SENT
    assert "the observer failed" in caplog.text


def test_observer_is_a_constructor_argument() -> None:
    recorder = Recorder()
    core = PaymentCore.memory(observer=recorder, sender=None)
    try:
        assert core.observer is recorder
        shop = core.operator.create_merchant("Shop")
        core.collect.checkout(shop.id, amount=500, currency="XAF")
        assert recorder.calls == [("collection", "PENDING")]
    finally:
        core.close()
    assert isinstance(PaymentCore.memory().observer, Observer)


# --- the work backlog ------------------------------------------------------------------------------


def backlog(core: PaymentCore) -> dict[str, tuple[int, int]]:
    return {item.kind: (item.pending, item.in_flight) for item in core.work_backlog()}


def test_work_backlog_counts_due_items_and_leases_held_while_an_item_is_worked(kit: TestKit) -> None:
    shop = kit.merchant()
    kit.fund(shop.id, "XAF", 10_000)
    assert backlog(kit.core) == {"collections": (0, 0), "payouts": (0, 0), "deliveries": (0, 0)}
    refs = [
        kit.core.disburse.create(shop.id, amount=100, currency="XAF", phone="670000002", idempotency_key=k)
        for k in ("p1", "p2")
    ]
    assert backlog(kit.core)["payouts"] == (2, 0)

    # hold the network while one payout is handed over: it is in flight, the other still pending
    entered, release = threading.Event(), threading.Event()
    send = kit.network.send_payout

    def slow_send(request: object) -> object:
        entered.set()
        release.wait(10)
        return send(request)  # type: ignore[arg-type]

    kit.network.send_payout = slow_send  # type: ignore[method-assign,assignment]
    worker = threading.Thread(target=kit.core.disburse.advance, args=(refs[0].reference,))
    worker.start()
    try:
        assert entered.wait(10)
        assert backlog(kit.core)["payouts"] == (1, 1)
    finally:
        release.set()
        worker.join(10)
    kit.network.send_payout = send  # type: ignore[method-assign]
    # once recorded (SENT, its status asked at once) the lease is dropped
    assert backlog(kit.core)["payouts"][1] == 0
    # a lease left by a dead worker counts until it runs out, then not
    with kit.core.store.transaction() as tx:
        tx.leases.take("payouts", "PO-dead", kit.clock.now() + 30_000)
    assert backlog(kit.core)["payouts"][1] == 1
    kit.clock.advance(31)
    assert backlog(kit.core)["payouts"][1] == 0


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    made: Store = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "obs.db")
    try:
        yield made
    finally:
        made.close()


def test_leases_take_drop_held_and_purge_alike_in_both_stores(store: Store) -> None:
    with store.transaction() as tx:
        tx.leases.take("payouts", "PO-1", NOW + 10)
        tx.leases.take("payouts", "PO-2", NOW - 10)
        tx.leases.take("deliveries", "evt_1", NOW + 10)
        tx.leases.take("payouts", "PO-1", NOW + 20)  # a new claim replaces the lease
    with store.read() as tx:
        assert (tx.leases.held("payouts", NOW), tx.leases.held("deliveries", NOW)) == (1, 1)
        assert tx.leases.held("payouts", NOW - 20) == 2
        assert tx.leases.held("payouts", NOW + 20) == 0
        assert tx.leases.held("collections", NOW) == 0
    with store.transaction() as tx:
        tx.leases.drop("payouts", "PO-1")
        tx.leases.drop("payouts", "PO-unknown")
    with store.read() as tx:
        assert tx.leases.held("payouts", NOW - 20) == 1
    with store.transaction() as tx:
        assert tx.leases.purge(NOW) == 1  # PO-2 ran out before NOW; evt_1 stays
    with store.read() as tx:
        assert tx.leases.held("payouts", NOW - 1000) == 0
        assert tx.leases.held("deliveries", NOW) == 1


def test_count_due_agrees_with_due_in_both_stores(store: Store) -> None:
    kit = TestKit.create()  # records made by a real core, copied into the store under test
    try:
        shop = kit.merchant()
        kit.webhook(shop.id)
        kit.fund(shop.id, "XAF", 10_000)
        for n in range(3):
            kit.core.collect.charge(
                shop.id, amount=500, currency="XAF", country="CM", provider="mtn_cm", phone=f"67000000{n}"
            )
            kit.core.disburse.create(
                shop.id, amount=100, currency="XAF", phone="670000002", idempotency_key=f"k{n}"
            )
        kit.core.collect.checkout(shop.id, amount=500, currency="XAF", expires_in_minutes=1)
        with kit.core.store.read() as source:
            now = kit.clock.now()
            collections = source.collections.due(now + 120_000, 100)
            payouts = source.payouts.due(now, 100)
        with store.transaction() as tx:
            for c in collections:
                tx.collections.add(c)
            for p in payouts:
                tx.payouts.add(p)
            for n in range(4):
                tx.outbox.add(attrs.evolve(_event(f"evt_{n}"), next_attempt_at=now + n * 1000))
    finally:
        kit.core.close()
    with store.read() as tx:
        for moment in (now - 1, now, now + 1500, now + 120_000):
            assert tx.collections.count_due(moment) == len(tx.collections.due(moment, 1000))
            assert tx.payouts.count_due(moment) == len(tx.payouts.due(moment, 1000))
            assert tx.outbox.count_due(moment) == len(tx.outbox.due(moment, 1000))
        assert tx.collections.count_due(now + 120_000) == 4  # the checkout has expired by then
        assert tx.outbox.count_due(now + 1500) == 2


def _event(event_id: str) -> Event:
    return Event(id=event_id, merchant_id="mer_1", type="collect.succeeded", data={}, created_at=NOW)


# --- the store's ping ------------------------------------------------------------------------------


def test_ping_answers_on_a_healthy_store(store: Store) -> None:
    store.ping()
    store.ping(timeout=0.1)


def test_memory_ping_fails_quickly_while_the_store_is_held() -> None:
    store = MemoryStore()
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with store.transaction():
            held.set()
            done.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(5)
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError):
            store.ping(timeout=0.2)
        assert time.monotonic() - started < 1.0
    finally:
        done.set()
        thread.join()
    store.ping()


def test_sqlite_ping_reads_beside_a_writer_and_gives_up_quickly_on_an_exclusive_lock(tmp_path: Path) -> None:
    path = tmp_path / "ping.db"
    store = SqliteStore(path)
    try:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # a writer holds the write lock: WAL readers do not wait
        other.execute("INSERT INTO work_leases (kind, key, until) VALUES ('payouts', 'x', 1)")
        started = time.monotonic()
        store.ping(timeout=0.3)
        assert time.monotonic() - started < 0.3
        other.execute("ROLLBACK")
        # an exclusive lock (no reader may even look) needs every other connection closed: the store's
        # too; its ping opens a connection of its own, so it still runs
        store.close()
        other.execute("PRAGMA locking_mode = EXCLUSIVE")
        other.execute("BEGIN EXCLUSIVE")  # nobody else may even read
        other.execute("INSERT INTO work_leases (kind, key, until) VALUES ('payouts', 'x', 1)")
        other.execute("COMMIT")
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError):
            store.ping(timeout=0.3)
        assert time.monotonic() - started < 1.0
        other.close()
        store.ping()
    finally:
        store.close()


def test_sqlite_ping_fails_when_the_file_is_gone_and_never_creates_one(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    store = SqliteStore(folder / "gone.db")
    try:
        store.ping()
        moved = tmp_path / "elsewhere"
        folder.rename(moved)
        with pytest.raises(StoreUnavailableError):
            store.ping()
        folder.mkdir()
        with pytest.raises(StoreUnavailableError):
            store.ping()
        assert list(folder.iterdir()) == []  # the ping did not create an empty database
        folder.rmdir()
        moved.rename(folder)
        store.ping()
    finally:
        store.close()


def test_postgresql_ping_says_read_only_when_the_server_takes_no_writes(tmp_path: Path) -> None:
    """A standby, or a role or database set to ``default_transaction_read_only``: reads answer, the
    ping does not pass (issue 24, point 1)."""
    from paymentcore.adapters.postgres import PostgresStore

    from conftest import postgres_url  # type: ignore[import-not-found, unused-ignore]

    url: str = postgres_url(tmp_path)
    PostgresStore(url).close()  # migrated while writable
    assert "options=" in url  # the test schema's search_path: the read-only setting goes beside it
    option = quote("-cdefault_transaction_read_only=on ", safe="")
    read_only = PostgresStore(url.replace("options=", f"options={option}", 1), migrate=False)
    try:
        with read_only.read() as tx:
            assert tx.merchants.list() == []
        with pytest.raises(StoreReadOnlyError, match="takes no writes"):
            read_only.ping()
    finally:
        read_only.close()
    writable = PostgresStore(url, migrate=False)
    try:
        writable.ping()
    finally:
        writable.close()


# --- /healthz --------------------------------------------------------------------------------------


class PingStore:
    """A store whose ping is scripted: "ok", "fail" or "hang"; everything else is the inner store's."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.mode = "ok"
        self.release = threading.Event()

    def transaction(self) -> AbstractContextManager[Transaction]:
        return self.inner.transaction()

    def read(self) -> AbstractContextManager[Transaction]:
        return self.inner.read()

    def ping(self, timeout: float = 0.5) -> None:
        if self.mode == "fail":
            raise StoreUnavailableError("unable to open database file")
        if self.mode == "hang":
            self.release.wait(10)  # longer than any caller may wait
        self.inner.ping(timeout)

    def close(self) -> None:
        self.release.set()
        self.inner.close()


@contextmanager
def health_client(store: PingStore) -> Iterator[TestClient]:
    core = PaymentCore(store=store)
    with TestClient(create_app(core), raise_server_exceptions=False) as client:
        yield client
    core.close()


def test_healthz_follows_the_database_and_answers_within_a_second() -> None:
    store = PingStore(MemoryStore())
    with health_client(store) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        for mode in ("fail", "hang", "ok"):
            store.mode = mode
            started = time.monotonic()
            response = client.get("/healthz")
            assert time.monotonic() - started < 1.0, mode
            if mode == "ok":
                assert (response.status_code, response.json()) == (200, {"status": "ok"})
                continue
            assert response.status_code == 503, mode
            body = response.json()
            assert set(body) == {"code", "message", "requestId"}
            assert body["code"] == "SERVER_ERROR"
            assert body["requestId"] == response.headers["x-request-id"]
        store.release.set()


# --- requests: route templates, records, logs and metrics -----------------------------------------


@pytest.fixture
def metered() -> Iterator[tuple[TestClient, Metrics, list[RequestRecord], PaymentCore]]:
    core = PaymentCore.memory(sender=None, config=Config(sandbox_delay=0))
    metrics = Metrics()
    records: list[RequestRecord] = []
    app = create_app(core, metrics=metrics)
    # a second observer around the app: the records the metrics were given, in order
    outer = RequestObserverMiddleware(app, routes=app.router.routes, sinks=[records.append])
    with TestClient(outer, raise_server_exceptions=False) as client:
        yield client, metrics, records, core
    core.close()


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_requests_are_counted_by_route_template_and_never_by_raw_path(
    metered: tuple[TestClient, Metrics, list[RequestRecord], PaymentCore],
) -> None:
    client, metrics, _, core = metered
    shop = core.operator.create_merchant("Shop")
    key = core.operator.create_key(shop.id, ["collect"]).api_key
    auth = {"Authorization": f"Bearer {key}"}
    charge = client.post(
        "/v1/collect/charge",
        headers=auth,
        json={"amount": 500, "currency": "XAF", "country": "CM", "provider": "mtn_cm", "phone": "670000001"},
    )
    assert charge.status_code == 202
    reference = charge.json()["reference"]
    assert client.get(f"/v1/collect/{reference}", headers=auth).status_code == 200
    assert client.get("/v1/collect/REQ-nope", headers=auth).status_code == 404
    assert client.get("/no/such/path").status_code == 404
    assert client.delete("/v1/collect/charge").status_code == 405
    assert client.get("/metrics").status_code == 404  # the API's port never serves the metrics

    n = "paymentcore_http_requests_total"
    assert sample(metrics, n, method="POST", route="/v1/collect/charge", status="202") == 1
    assert sample(metrics, n, method="GET", route="/v1/collect/{reference}", status="200") == 1
    assert sample(metrics, n, method="GET", route="/v1/collect/{reference}", status="404") == 1
    assert sample(metrics, n, method="GET", route=UNMATCHED, status="404") == 2
    assert sample(metrics, n, method="DELETE", route="/v1/collect/charge", status="405") == 1
    d = "paymentcore_http_request_duration_seconds_count"
    assert sample(metrics, d, method="GET", route="/v1/collect/{reference}") == 2
    text = generate_latest(metrics.registry).decode()
    for secret in (reference, "REQ-nope", "/no/such/path", shop.id, key, "670000001"):
        assert secret not in text


def test_the_request_record_and_its_json_log_line(
    metered: tuple[TestClient, Metrics, list[RequestRecord], PaymentCore],
) -> None:
    client, _, records, core = metered
    shop = core.operator.create_merchant("Shop")
    key = core.operator.create_key(shop.id, ["disburse"]).api_key
    response = client.get("/v1/account/balances", headers={"Authorization": f"Bearer {key}"})
    anonymous = client.get("/v1/account/balances")
    record = records[-2]
    assert record.request_id == response.headers["x-request-id"]
    assert (record.method, record.route, record.status) == ("GET", "/v1/account/balances", 200)
    assert record.merchant_id == shop.id and record.duration > 0
    assert (records[-1].status, records[-1].merchant_id) == (401, None)
    assert records[-1].request_id == anonymous.headers["x-request-id"]

    captured: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            captured.append(record)

    handler = Keep()
    logger = logging.getLogger("paymentcore.http")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        log_request(record)
    finally:
        logger.removeHandler(handler)
    line = json.loads(JsonFormatter().format(captured[0]))
    assert line["message"] == "request" and line["level"] == "INFO" and line["logger"] == "paymentcore.http"
    assert {k: line[k] for k in ("requestId", "method", "route", "status", "merchantId")} == {
        "requestId": record.request_id,
        "method": "GET",
        "route": "/v1/account/balances",
        "status": 200,
        "merchantId": shop.id,
    }
    assert isinstance(line["durationMs"], float)
    assert getattr(captured[0], FIELDS_ATTRIBUTE)["requestId"] == record.request_id


def test_a_rate_limited_request_is_recorded_with_its_merchant(
    metered: tuple[TestClient, Metrics, list[RequestRecord], PaymentCore],
) -> None:
    """The key was accepted before the count refused it: the record names the merchant, whether the
    request was served on the event loop (a GET on a local store) or on a thread (a POST)."""
    client, _, records, core = metered
    shop = core.operator.create_merchant("Shop")
    key = core.operator.create_key(shop.id, ["disburse"], per_minute=1, per_hour=100).api_key
    auth = {"Authorization": f"Bearer {key}"}
    assert client.get("/v1/account/balances", headers=auth).status_code == 200
    assert client.get("/v1/account/balances", headers=auth).status_code == 429
    assert client.post("/v1/disburse", headers={**auth, "Idempotency-Key": "k1"}, json={}).status_code == 429
    assert [(r.status, r.merchant_id) for r in records[-3:]] == [(200, shop.id)] + [(429, shop.id)] * 2


def test_each_metrics_instance_has_its_own_registry() -> None:
    first, second = Metrics(), Metrics()
    first.observer().payout_status(PayoutStatus.PAID)
    first.observer().delivery_attempt(delivered=False)
    assert sample(first, "paymentcore_payouts_total", status="PAID") == 1
    assert sample(second, "paymentcore_payouts_total", status="PAID") == 0
    assert sample(first, "paymentcore_webhook_deliveries_total", outcome="failed") == 1
    # every series exists from the start
    assert second.registry.get_sample_value("paymentcore_payouts_total", {"status": "REJECTED"}) == 0
    assert (
        second.registry.get_sample_value("paymentcore_webhook_deliveries_total", {"outcome": "delivered"})
        == 0
    )


def test_work_gauges_are_read_from_the_store_at_scrape_time(kit: TestKit) -> None:
    metrics = Metrics()
    metrics.watch(kit.core)
    try:
        shop = kit.merchant()
        kit.fund(shop.id, "XAF", 1000)
        kit.core.disburse.create(shop.id, amount=100, currency="XAF", phone="670000002", idempotency_key="k")
        assert sample(metrics, "paymentcore_work_pending", kind="payouts") == 1
        assert sample(metrics, "paymentcore_work_in_flight", kind="payouts") == 0
        kit.settle()
        assert sample(metrics, "paymentcore_work_pending", kind="payouts") == 0

        def broken() -> list[WorkBacklog]:
            raise StoreUnavailableError("gone")

        kit.core.work_backlog = broken  # type: ignore[method-assign]
        text = generate_latest(metrics.registry).decode()  # the scrape still answers
        assert "paymentcore_work_pending{" not in text
        assert "paymentcore_payouts_total" in text
    finally:
        metrics.close()
