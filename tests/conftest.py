"""Shared fixtures: cores on both stores with a fake clock, and an HTTP client on the Starlette app."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from starlette.testclient import TestClient

from paymentcore import Config, FakeClock, PaymentCore, wire
from paymentcore._models import Merchant
from paymentcore.adapters.sandbox import SandboxNetwork
from paymentcore.testing import CapturingSender, public_resolver
from paymentcore_server.app import create_app


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


@pytest.fixture(params=["sqlite", "memory"])
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


@pytest.fixture
def client(tmp_path: Path, clock: FakeClock) -> Iterator[Client]:
    """The app on a SQLite file."""
    yield from _client(make_core("sqlite", tmp_path, clock), clock)


@pytest.fixture
def any_client(tmp_path: Path, clock: FakeClock, store_kind: str) -> Iterator[Client]:
    """The app on each store in turn."""
    yield from _client(make_core(store_kind, tmp_path, clock), clock)
