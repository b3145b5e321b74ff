"""Races on one key: the rate limit and one Idempotency-Key, hit by many clients at the same instant.

Three ways in, so the result does not depend on how requests happen to be scheduled: threads released
by a Barrier through Starlette's TestClient; ``asyncio.gather`` over ``httpx.ASGITransport`` (one event
loop, handlers interleaving at every await); and a real ``paymentcore serve`` process on a socket.

- 100 requests at once on a key allowed 30 a minute: exactly 30 answer 2xx and 70 answer 429
  RATE_LIMITED with a Retry-After header; a refused request has no side effect; the 30 answers carry
  the remaining counts 29..0, each once (no two requests took the same slot).
- 16 clients at once with one Idempotency-Key on POST /v1/collect/checkout: one collection, and all 16
  answers are byte-for-byte the same body with the same status.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any, Protocol

import attrs
import httpx
import pytest
from starlette.testclient import TestClient
from test_crash_recovery import Server  # type: ignore[import-not-found, unused-ignore]

from paymentcore import Config, FakeClock, PaymentCore, RandomReferences, SandboxNetwork
from paymentcore._services.access import Access, RateLimiter
from paymentcore.adapters.memory import MemoryStore
from paymentcore.adapters.sqlite import SqliteStore
from paymentcore.testing import CapturingSender, fund, public_resolver
from paymentcore_server.app import Api, create_app

from conftest import STORE_KINDS, postgres_url  # type: ignore[import-not-found, unused-ignore]

CROWD = 100
PER_MINUTE = 30
SAME_KEY_CLIENTS = 16
CHECKOUT = {"amount": 1500, "currency": "XAF", "description": "One order", "merchantReference": "order-42"}


class Response(Protocol):
    """What is read from a response of httpx or of the TestClient's own httpx."""

    @property
    def status_code(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def headers(self) -> Mapping[str, str]: ...


@attrs.frozen
class Answer:
    status: int
    text: str
    headers: dict[str, str]

    @classmethod
    def of(cls, response: Response) -> Answer:
        return cls(response.status_code, response.text, {k.lower(): v for k, v in response.headers.items()})

    def json(self) -> Any:
        return json.loads(self.text)


class CountingRefs:
    """Random references that remember every collection and payout ever begun."""

    def __init__(self) -> None:
        self._inner = RandomReferences()
        self.collections: list[str] = []
        self.payouts: list[str] = []
        self._lock = threading.Lock()

    def collection(self, now: int) -> str:
        reference = self._inner.collection(now)
        with self._lock:
            self.collections.append(reference)
        return reference

    def payout(self, now: int) -> str:
        reference = self._inner.payout(now)
        with self._lock:
            self.payouts.append(reference)
        return reference

    def token(self, prefix: str) -> str:
        return self._inner.token(prefix)


@attrs.define
class Shop:
    core: PaymentCore
    refs: CountingRefs
    clock: FakeClock
    merchant_id: str
    collect_key: str
    other_key: str

    def headers(self, key: str | None = None, idem: str | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {key or self.collect_key}", "Content-Type": "application/json"}
        if idem is not None:
            headers["Idempotency-Key"] = idem
        return headers

    def existing_collections(self) -> list[str]:
        with self.core.store.read() as tx:
            return [r for r in self.refs.collections if tx.collections.get(r) is not None]

    def existing_payouts(self) -> list[str]:
        with self.core.store.read() as tx:
            return [r for r in self.refs.payouts if tx.payouts.get(r) is not None]


@pytest.fixture(params=STORE_KINDS)
def shop(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Shop]:
    clock = FakeClock()
    refs = CountingRefs()
    kwargs: dict[str, Any] = {
        "clock": clock,
        "refs": refs,
        "sender": CapturingSender(),
        "resolver": public_resolver,
        "config": Config(sandbox_delay=0),
    }
    if request.param == "postgres":
        core = PaymentCore.postgresql(postgres_url(tmp_path), **kwargs)
    elif request.param == "sqlite":
        core = PaymentCore.sqlite(tmp_path / "race.db", **kwargs)
    else:
        core = PaymentCore.memory(**kwargs)
    merchant = core.operator.create_merchant("Race Shop")
    collect = core.operator.create_key(merchant.id, ["collect"])
    other = core.operator.create_key(merchant.id, ["collect", "disburse"])
    try:
        yield Shop(core, refs, clock, merchant.id, collect.api_key, other.api_key)
    finally:
        core.close()


def crowd(count: int, call: Callable[[], Response]) -> list[Answer]:
    """``count`` threads, released together by a barrier, each making one call."""
    barrier = threading.Barrier(count)
    answers: list[Answer] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run() -> None:
        try:
            barrier.wait(timeout=30)
            answer = Answer.of(call())
        except BaseException as exc:
            with lock:
                errors.append(exc)
        else:
            with lock:
                answers.append(answer)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    return answers


def assert_exactly_30_pass(answers: list[Answer], ok: int) -> list[Answer]:
    """30 answered ``ok`` with remaining counts 29..0; 70 answered 429 RATE_LIMITED with Retry-After."""
    assert len(answers) == CROWD
    passed = [a for a in answers if a.status == ok]
    limited = [a for a in answers if a.status == 429]
    assert (len(passed), len(limited)) == (PER_MINUTE, CROWD - PER_MINUTE), sorted(a.status for a in answers)
    assert sorted(int(a.headers["x-ratelimit-remaining"]) for a in passed) == list(range(PER_MINUTE))
    for answer in limited:
        body = answer.json()
        assert body["code"] == "RATE_LIMITED" and "minute" in body["message"], body
        assert body["requestId"] == answer.headers["x-request-id"]
        assert int(answer.headers["retry-after"]) >= 1
        assert answer.headers["x-ratelimit-remaining"] == "0"
    return passed


def assert_one_answer(answers: list[Answer]) -> str:
    """Every client got the same status and the very same body; returns the one reference."""
    assert len(answers) == SAME_KEY_CLIENTS
    assert {a.status for a in answers} == {201}, {a.text for a in answers}
    assert len({a.text for a in answers}) == 1, {a.text for a in answers}
    assert len({a.headers["x-request-id"] for a in answers}) == SAME_KEY_CLIENTS  # distinct requests
    reference: str = answers[0].json()["reference"]
    return reference


# --- in process: threads through the TestClient ---------------------------------------------------


def test_100_threads_on_one_key_30_pass_and_70_are_rate_limited(shop: Shop) -> None:
    with TestClient(create_app(shop.core), raise_server_exceptions=False) as http:
        answers = crowd(CROWD, lambda: http.get("/v1/countries", headers=shop.headers()))
        assert_exactly_30_pass(answers, 200)
        assert http.get("/v1/countries", headers=shop.headers()).status_code == 429  # still full
        assert http.get("/v1/countries", headers=shop.headers(shop.other_key)).status_code == 200
        shop.clock.advance(61)
        assert http.get("/v1/countries", headers=shop.headers()).status_code == 200


def test_100_racing_checkouts_create_exactly_the_30_that_were_let_through(shop: Shop) -> None:
    counter = iter(range(CROWD))
    lock = threading.Lock()

    def checkout(http: TestClient) -> Response:
        with lock:
            n = next(counter)
        body = json.dumps({**CHECKOUT, "merchantReference": f"order-{n}"})
        return http.post("/v1/collect/checkout", content=body, headers=shop.headers(idem=f"race-{n}"))

    with TestClient(create_app(shop.core), raise_server_exceptions=False) as http:
        answers = crowd(CROWD, lambda: checkout(http))
    passed = assert_exactly_30_pass(answers, 201)
    created = {a.json()["reference"] for a in passed}
    assert len(created) == PER_MINUTE
    assert set(shop.existing_collections()) == created  # a refused request made nothing
    assert len(shop.refs.collections) == PER_MINUTE  # and did not even begin one


def test_16_threads_with_one_idempotency_key_make_one_collection(shop: Shop) -> None:
    body = json.dumps(CHECKOUT)
    with TestClient(create_app(shop.core), raise_server_exceptions=False) as http:
        answers = crowd(
            SAME_KEY_CLIENTS,
            lambda: http.post("/v1/collect/checkout", content=body, headers=shop.headers(idem="one-order")),
        )
        reference = assert_one_answer(answers)
        got = http.get(f"/v1/collect/{reference}", headers=shop.headers())
    assert got.status_code == 200 and got.json()["reference"] == reference
    assert shop.existing_collections() == [reference]
    assert shop.refs.collections == [reference]


def test_16_threads_with_one_idempotency_key_send_one_prompt_and_one_payout(shop: Shop) -> None:
    fund(shop.core, shop.merchant_id, "XAF", 10_000)
    charge = json.dumps(
        {"amount": 2000, "currency": "XAF", "country": "CM", "provider": "mtn_cm", "phone": "670000000"}
    )
    payout = json.dumps({"amount": 3000, "currency": "XAF", "phone": "670000000"})
    with TestClient(create_app(shop.core), raise_server_exceptions=False) as http:
        charges = crowd(
            SAME_KEY_CLIENTS,
            lambda: http.post("/v1/collect/charge", content=charge, headers=shop.headers(idem="one-charge")),
        )
        payouts = crowd(
            SAME_KEY_CLIENTS,
            lambda: http.post(
                "/v1/disburse", content=payout, headers=shop.headers(shop.other_key, idem="one-payout")
            ),
        )
    assert {a.status for a in charges} == {202} and len({a.text for a in charges}) == 1
    assert_one_answer(payouts)
    assert len(shop.existing_collections()) == len(shop.refs.collections) == 1
    assert len(shop.existing_payouts()) == len(shop.refs.payouts) == 1
    with shop.core.store.read() as tx:
        balance = tx.ledger.balance(shop.merchant_id, "XAF")
    assert (balance.available, balance.reserved) == (7000, 3000)  # reserved once
    shop.core.run_until_idle()
    network = shop.core.network
    assert isinstance(network, SandboxNetwork)
    assert network.prompt_count == 1 and sum(network.payouts_sent.values()) == 1


def test_per_key_not_per_account_and_the_hour_window_under_a_race(shop: Shop) -> None:
    """Two keys of one merchant, 50 requests each at once: each key has its own 30; then an hourly key."""
    hourly = shop.core.operator.create_key(shop.merchant_id, ["collect"], per_minute=1000, per_hour=40)
    with TestClient(create_app(shop.core), raise_server_exceptions=False) as http:
        keys = iter([shop.collect_key, shop.other_key] * 50)
        lock = threading.Lock()

        def next_key() -> str:
            with lock:
                return next(keys)

        answers = crowd(CROWD, lambda: http.get("/v1/countries", headers=shop.headers(next_key())))
        assert sorted(a.status for a in answers) == [200] * 60 + [429] * 40
        hour = crowd(CROWD, lambda: http.get("/v1/countries", headers=shop.headers(hourly.api_key)))
    assert sorted(a.status for a in hour) == [200] * 40 + [429] * 60
    for answer in hour:
        if answer.status == 429:
            assert "40" in answer.json()["message"] and "hour" in answer.json()["message"]
            assert int(answer.headers["retry-after"]) > 60  # the hour, not the minute, decides


# --- in process: one event loop, asyncio.gather over httpx.ASGITransport ---------------------------


async def gather(shop: Shop, count: int, send: Callable[[httpx.AsyncClient], Any]) -> list[Answer]:
    transport = httpx.ASGITransport(app=create_app(shop.core))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        responses = await asyncio.gather(*(send(http) for _ in range(count)))
    return [Answer.of(r) for r in responses]


def test_100_gathered_requests_on_one_key_30_pass_and_70_are_rate_limited(shop: Shop) -> None:
    answers = asyncio.run(gather(shop, CROWD, lambda http: http.get("/v1/countries", headers=shop.headers())))
    assert_exactly_30_pass(answers, 200)


def test_16_gathered_requests_with_one_idempotency_key_make_one_collection(shop: Shop) -> None:
    body = json.dumps(CHECKOUT)
    answers = asyncio.run(
        gather(
            shop,
            SAME_KEY_CLIENTS,
            lambda http: http.post("/v1/collect/checkout", content=body, headers=shop.headers(idem="one")),
        )
    )
    reference = assert_one_answer(answers)
    assert shop.existing_collections() == [reference] and shop.refs.collections == [reference]


def watch_admissions(shop: Shop, monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int], list[str]]:
    """Spies on the admissions: the tokens of each batched lookup, the callers of each batched count,
    and every token looked up one at a time (which a local store's server should never do)."""
    if not isinstance(shop.core.store, SqliteStore | MemoryStore):
        pytest.skip("on a database server every request runs on a thread (counted as threads are)")
    lookups: list[int] = []
    counts: list[int] = []
    singles: list[str] = []
    authenticate_many, hit_many = Access.authenticate_many, RateLimiter.hit_many

    def looked_up(self: Access, tokens: Any) -> Any:
        lookups.append(len(tokens))
        return authenticate_many(self, tokens)

    def counted(self: RateLimiter, keys: Any, now: int) -> Any:
        counts.append(len(keys))
        return hit_many(self, keys, now)

    monkeypatch.setattr(Access, "authenticate_many", looked_up)
    monkeypatch.setattr(RateLimiter, "hit_many", counted)
    monkeypatch.setattr(Access, "authenticate", lambda self, token: singles.append(token))
    return lookups, counts, singles


def test_gets_gathered_on_one_loop_are_looked_up_in_one_read_and_counted_in_one_write(
    shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a local store the GETs served on the event loop are admitted once per turn of the loop: every
    token of the turn looked up in one read view, every caller counted in one write of the rate book,
    and each request answered with its own caller's verdict (a bad token 401, each key's own slots)."""
    lookups, counts, singles = watch_admissions(shop, monkeypatch)
    keys = [shop.collect_key] * 12 + [shop.other_key] * 4 + ["pck_not-a-key"] * 4
    order = iter(keys)
    answers = asyncio.run(
        gather(shop, len(keys), lambda http: http.get("/v1/countries", headers=shop.headers(next(order))))
    )
    assert (lookups, counts, singles) == ([20], [16], [])
    assert sorted(a.status for a in answers) == [200] * 16 + [401] * 4
    remaining = sorted(int(a.headers["x-ratelimit-remaining"]) for a in answers if a.status == 200)
    assert remaining == sorted([*range(PER_MINUTE - 12, PER_MINUTE), *range(PER_MINUTE - 4, PER_MINUTE)])
    for refused in (a for a in answers if a.status == 401):
        assert refused.json()["code"] == "UNAUTHORIZED" and refused.json()["message"].startswith("A valid")


def test_posts_gathered_on_one_loop_are_admitted_together_and_only_their_work_goes_to_a_thread(
    shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SQLite (whose rate counts go to a file of their own) a POST is authenticated and counted on
    the event loop with the other requests of its turn (one read view, one write of the rate book), so
    only its write crosses to a thread: a refused token never reaches a thread, and each admitted POST
    does its own work once, on a request thread."""
    if not shop.core.access.counts_apart:
        pytest.skip("the memory store is its own rate book, a database server is a round trip away: threads")
    lookups, counts, singles = watch_admissions(shop, monkeypatch)
    threads: list[str] = []
    answer = Api._answer

    def answered(self: Api, principal: Any, state: Any, asked: Any) -> Any:
        threads.append(threading.current_thread().name)
        return answer(self, principal, state, asked)

    monkeypatch.setattr(Api, "_answer", answered)
    tokens = iter([shop.collect_key] * 12 + ["pck_not-a-key"] * 4)
    idems = iter(range(16))
    body = json.dumps(CHECKOUT)
    answers = asyncio.run(
        gather(
            shop,
            16,
            lambda http: http.post(
                "/v1/collect/checkout",
                content=body,
                headers=shop.headers(next(tokens), idem=f"k{next(idems)}"),
            ),
        )
    )
    assert (sum(lookups), sum(counts), singles) == (16, 12, [])
    assert len(lookups) < 16  # looked up together, not one at a time
    assert len(threads) == 12 and all(name.startswith("paymentcore-request") for name in threads)
    assert sorted(a.status for a in answers) == [201] * 12 + [401] * 4
    remaining = sorted(int(a.headers["x-ratelimit-remaining"]) for a in answers if a.status == 201)
    assert remaining == list(range(PER_MINUTE - 12, PER_MINUTE))
    made = sorted(json.loads(a.text)["reference"] for a in answers if a.status == 201)
    assert sorted(shop.existing_collections()) == made and len(set(made)) == 12


# --- a real server process --------------------------------------------------------------------------


@pytest.mark.slow
def test_a_real_server_lets_30_of_100_through_and_makes_one_collection_per_key(tmp_path: Path) -> None:
    db = str(tmp_path / "real.db")
    server = Server(db, tmp_path, "race", demo=True)
    try:
        server.wait_ready()
        collect_key, disburse_key = server.demo_keys()
        limits = httpx.Limits(max_connections=CROWD, max_keepalive_connections=CROWD)
        with httpx.Client(base_url=server.base, timeout=30.0, limits=limits) as http:
            auth = {"Authorization": f"Bearer {disburse_key}"}
            answers = crowd(CROWD, lambda: http.get("/v1/countries", headers=auth))
            assert_exactly_30_pass(answers, 200)

            headers = {
                "Authorization": f"Bearer {collect_key}",
                "Content-Type": "application/json",
                "Idempotency-Key": "real-one-order",
            }
            body = json.dumps(CHECKOUT)
            same = crowd(
                SAME_KEY_CLIENTS, lambda: http.post("/v1/collect/checkout", content=body, headers=headers)
            )
            reference = assert_one_answer(same)
        with closing(sqlite3.connect(db)) as conn:
            rows = conn.execute(
                "SELECT reference FROM collections WHERE merchant_reference = ?",
                (CHECKOUT["merchantReference"],),
            ).fetchall()
        assert rows == [(reference,)]
    finally:
        server.stop()
        server.close()
