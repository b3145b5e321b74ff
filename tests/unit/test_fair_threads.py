"""The request threads handed out by merchant in turns (``paymentcore_server._threads.FairThreads``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from paymentcore_server._threads import FairThreads

WAIT = 10.0


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(4)
    yield pool
    pool.shutdown(wait=True)


class Works:
    """Work items that record when they start and block until their gate opens."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.gates: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def item(self, name: str) -> Callable[[], str]:
        gate = self.gates[name] = threading.Event()

        def work() -> str:
            with self._lock:
                self.started.append(name)
            assert gate.wait(WAIT)
            return name

        return work

    def open(self, name: str) -> None:
        self.gates[name].set()


async def until(check: Callable[[], bool]) -> None:
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


def test_a_lane_past_its_share_waits_while_another_lane_runs(executor: ThreadPoolExecutor) -> None:
    async def scenario() -> None:
        fair, works = FairThreads(executor, 2, per_lane=1), Works()
        a1 = asyncio.ensure_future(fair.run("A", works.item("a1")))
        await until(lambda: works.started == ["a1"])
        a2 = asyncio.ensure_future(fair.run("A", works.item("a2")))
        b1 = asyncio.ensure_future(fair.run("B", works.item("b1")))
        await until(lambda: works.started == ["a1", "b1"])  # B runs on the free thread, a2 waits
        assert fair.waiting() == 1 and not a2.done()
        works.open("b1")
        assert await b1 == "b1"
        assert works.started == ["a1", "b1"]  # the free thread is not A's: its share is running
        works.open("a1")
        assert await a1 == "a1"
        await until(lambda: works.started == ["a1", "b1", "a2"])
        works.open("a2")
        assert await a2 == "a2" and fair.waiting() == 0

    asyncio.run(scenario())


def test_a_lane_alone_uses_the_threads_past_its_share_but_the_reserve() -> None:
    pool = ThreadPoolExecutor(4)

    async def scenario() -> None:
        fair, works = FairThreads(pool, 4, per_lane=1, reserve=1), Works()
        runs = [asyncio.ensure_future(fair.run("A", works.item(f"a{n}"))) for n in range(1, 5)]
        await until(lambda: len(works.started) == 3)  # three of four: one thread stays free
        await asyncio.sleep(0.05)
        assert works.started == ["a1", "a2", "a3"] and fair.waiting() == 1
        b1 = asyncio.ensure_future(fair.run("B", works.item("b1")))
        await until(lambda: works.started == ["a1", "a2", "a3", "b1"])  # B at once, on the reserve
        works.open("a1")
        await runs[0]
        await asyncio.sleep(0.05)  # a1's thread is the reserve again (B holds the last): a4 waits
        assert works.started == ["a1", "a2", "a3", "b1"] and fair.waiting() == 1
        works.open("b1")
        assert await b1 == "b1"
        await until(lambda: works.started == ["a1", "a2", "a3", "b1", "a4"])
        for name in ("a2", "a3", "a4"):
            works.open(name)
        assert [await run for run in runs] == ["a1", "a2", "a3", "a4"]

    try:
        asyncio.run(scenario())
    finally:
        pool.shutdown(wait=True)


def test_a_freed_thread_goes_to_the_lanes_in_turn(executor: ThreadPoolExecutor) -> None:
    async def scenario() -> None:
        fair, works = FairThreads(executor, 1, per_lane=1), Works()
        names = ["a1", "a2", "a3", "a4", "b1", "c1"]
        runs = {}
        for name in names:  # queued in this order, while a1 runs
            runs[name] = asyncio.ensure_future(fair.run(name[0], works.item(name)))
            await asyncio.sleep(0)
        for count in range(1, len(names) + 1):
            await until(lambda: len(works.started) == count)  # noqa: B023 (awaited in its iteration)
            works.open(works.started[-1])
        assert [await runs[name] for name in names] == names
        # A queued four before B and C queued one each: each of them waits for one of A's, not four
        assert works.started == ["a1", "b1", "c1", "a2", "a3", "a4"]

    asyncio.run(scenario())


def test_a_request_cancelled_while_waiting_takes_no_thread(executor: ThreadPoolExecutor) -> None:
    async def scenario() -> None:
        fair, works = FairThreads(executor, 1, per_lane=1), Works()
        a1 = asyncio.ensure_future(fair.run("A", works.item("a1")))
        await until(lambda: works.started == ["a1"])
        gone = asyncio.ensure_future(fair.run("B", works.item("gone")))
        b2 = asyncio.ensure_future(fair.run("B", works.item("b2")))
        await until(lambda: fair.waiting() == 2)
        gone.cancel()
        await until(lambda: fair.waiting() == 1)
        works.open("a1")
        await a1
        await until(lambda: works.started == ["a1", "b2"])
        works.open("b2")
        assert await b2 == "b2" and gone.cancelled() and fair.waiting() == 0

    asyncio.run(scenario())


def test_a_failed_work_gives_its_thread_back(executor: ThreadPoolExecutor) -> None:
    async def scenario() -> None:
        fair = FairThreads(executor, 1, per_lane=1)

        def fail() -> str:
            raise ValueError("refused")

        with pytest.raises(ValueError, match="refused"):
            await fair.run("A", fail)
        assert await fair.run("A", lambda: "next") == "next"  # the one thread was handed back

    asyncio.run(scenario())


def test_threads_and_share_are_at_least_one(executor: ThreadPoolExecutor) -> None:
    for threads, per_lane in ((0, 1), (1, 0)):
        with pytest.raises(ValueError, match="at least 1"):
            FairThreads(executor, threads, per_lane=per_lane)


def test_a_merchant_alone_on_a_database_server_takes_its_pool_but_the_kept_connections() -> None:
    from types import SimpleNamespace
    from typing import cast

    from paymentcore import PaymentCore
    from paymentcore_server.app import REQUEST_THREADS, _shares

    def alone(pool: int) -> int:
        shares = _shares(cast(PaymentCore, SimpleNamespace(store=SimpleNamespace(pool_size=pool))))
        assert shares["per_lane"] == 8
        return REQUEST_THREADS - shares["reserve"]

    assert alone(20) == 16  # the default pool: four connections kept for the worker and the others
    assert alone(5) == 8  # a small pool: still the share
    assert alone(100) == REQUEST_THREADS
    memory = PaymentCore.memory()
    try:  # the local stores: no share, every request waits for the one writer anyway
        assert _shares(memory) == {"per_lane": REQUEST_THREADS, "reserve": 0}
    finally:
        memory.close()
