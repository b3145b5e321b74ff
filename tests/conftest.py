"""Shared fixtures: cores on every store with a fake clock, and an HTTP client on the Starlette app.

The ``postgres`` kind runs on the server named by ``$PAYMENTCORE_TEST_POSTGRES_URL`` (``.ci/run`` sets it
from ``.ci/install-postgres``), each test in a schema of its own. Without it the PostgreSQL tests skip,
except under CI (``$CI`` set), where they fail: CI must run them.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import attrs
import pytest
from starlette.testclient import TestClient

from paymentcore import Config, FakeClock, PaymentCore, wire
from paymentcore._models import Merchant
from paymentcore.adapters.memory import MemoryStore
from paymentcore.adapters.sandbox import SandboxNetwork
from paymentcore.adapters.sqlite import SqliteStore
from paymentcore.ports import Store
from paymentcore.testing import CapturingSender, public_resolver
from paymentcore_server.app import create_app

POSTGRES_URL_ENV = "PAYMENTCORE_TEST_POSTGRES_URL"
STORE_KINDS = ["sqlite", "memory", "postgres"]
HTTP_ENGINES = ["sqlite", "postgres"]  # the engines `paymentcore serve --db` takes
_schemas: list[str] = []  # made by postgres_url(), dropped when the session ends
_schema_numbers = itertools.count()


def postgres_server_url() -> str:
    """The test server's URL, or skip (fail under CI) when there is none."""
    url = os.environ.get(POSTGRES_URL_ENV, "").strip()
    if url:
        return url
    if os.environ.get("CI"):
        pytest.fail(
            f"${POSTGRES_URL_ENV} is not set: under CI the PostgreSQL tests must run "
            "(.ci/run sets it from .ci/install-postgres)"
        )
    pytest.skip(f"no PostgreSQL server: set ${POSTGRES_URL_ENV} (docs/development.md)")


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(postgres_server_url(), autocommit=True) as conn:
        conn.execute(sql)


def postgres_url(tmp_path: Path) -> str:
    """A ``postgresql://`` URL on a new, empty schema of the test server (one per call)."""
    base = postgres_server_url()
    tag = hashlib.sha256(f"{os.getpid()}:{tmp_path}".encode()).hexdigest()[:10]
    schema = f"pctest_{tag}_{next(_schema_numbers)}"
    _admin(f"CREATE SCHEMA {schema}")
    _schemas.append(schema)
    separator = "&" if "?" in base else "?"
    return f"{base}{separator}options={quote(f'-csearch_path={schema}', safe='')}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _schemas:
        return
    import psycopg

    try:
        with psycopg.connect(os.environ[POSTGRES_URL_ENV], autocommit=True) as conn:
            for schema in _schemas:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    except psycopg.Error:
        pass  # a leftover schema is harmless; the next run makes new ones
    _schemas.clear()


def open_store(kind: str, tmp_path: Path) -> Store:
    """A bare store of ``kind`` (the storage port alone, without a core)."""
    if kind == "memory":
        return MemoryStore()
    if kind == "postgres":
        from paymentcore.adapters.postgres import PostgresStore

        return PostgresStore(postgres_url(tmp_path))
    return SqliteStore(tmp_path / "store.db")


@pytest.fixture(params=sorted(STORE_KINDS))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Each store in turn, closed after the test."""
    made = open_store(request.param, tmp_path)
    try:
        yield made
    finally:
        made.close()


def make_core(kind: str, tmp_path: Path, clock: FakeClock, **config: Any) -> PaymentCore:
    settings: dict[str, Any] = {"sandbox_delay": 0, "webhook_jitter": 0.0, **config}
    kwargs: dict[str, Any] = {
        "clock": clock,
        "config": Config(**settings),
        "network": SandboxNetwork(delay_seconds=settings["sandbox_delay"]),
        "sender": CapturingSender(),
        "resolver": public_resolver,
    }
    if kind == "memory":
        return PaymentCore.memory(**kwargs)
    if kind == "postgres":
        return PaymentCore.postgresql(postgres_url(tmp_path), **kwargs)
    return PaymentCore.sqlite(tmp_path / "test.db", **kwargs)


@attrs.define
class Client:
    """A merchant with a Collect key and a Disburse key, talking to the app over HTTP."""

    http: TestClient
    core: PaymentCore
    clock: FakeClock
    merchant: Merchant
    collect_key: str
    disburse_key: str

    def headers(self, key: str | None, idempotency_key: str | None = None) -> dict[str, str]:
        headers = {}
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        return headers

    def post(self, path: str, body: Any, *, key: str | None = None, idem: str | None = None) -> Any:
        headers = {**self.headers(key or self.collect_key, idem), "Content-Type": "application/json"}
        return self.http.post(path, content=wire.dumps(body), headers=headers)

    def get(self, path: str, *, key: str | None = None) -> Any:
        return self.http.get(path, headers=self.headers(key or self.collect_key))

    def settle(self) -> None:
        self.core.run_until_idle()

    @property
    def sandbox(self) -> SandboxNetwork:
        network = self.core.network
        assert isinstance(network, SandboxNetwork)
        return network


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


def _client(core: PaymentCore, clock: FakeClock) -> Iterator[Client]:
    merchant = core.operator.create_merchant("Test Shop", settlement_currency="XAF")
    collect = core.operator.create_key(merchant.id, ["collect"])
    disburse = core.operator.create_key(merchant.id, ["disburse"])
    app = create_app(core)
    with TestClient(app, raise_server_exceptions=False) as http:
        yield Client(http, core, clock, merchant, collect.api_key, disburse.api_key)
    core.close()


@pytest.fixture(params=HTTP_ENGINES)
def client(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Client]:
    """The app on each database engine in turn: the HTTP end-to-end suite runs on SQLite and PostgreSQL."""
    yield from _client(make_core(request.param, tmp_path, clock), clock)


@pytest.fixture
def any_client(tmp_path: Path, clock: FakeClock, store_kind: str) -> Iterator[Client]:
    """The app on each store in turn."""
    yield from _client(make_core(store_kind, tmp_path, clock), clock)
