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
