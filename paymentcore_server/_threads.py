"""The request threads, handed out to merchants in turns.

A request that needs a thread (every request on a database server; a POST's write on SQLite) asks
:class:`FairThreads` for one in its merchant's lane. A lane under its share takes any free thread; a
lane at or past its share takes one only while more than ``reserve`` threads are free, so a merchant
alone can use most of the threads and a merchant arriving beside it always finds one. A request that
has no room waits on the event loop, holding no thread, and each thread that comes free goes to the
next lane in turn that has a request waiting and room: a merchant with a hundred requests queued is
served one at a time beside a merchant with one.

On PostgreSQL a merchant's payouts wait for that merchant's lock; without a share per lane, a merchant
sending many at once filled every thread (and pooled connection) with requests waiting for its own
lock, and every other merchant's requests queued behind them (``docs/decisions.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

__all__ = ["FairThreads"]

T = TypeVar("T")


class _Share:
    """One event loop's hand-out: threads taken per lane, and the lanes' waiting requests in turn."""

    __slots__ = ("busy", "running", "waiting")

    def __init__(self) -> None:
        self.busy = 0
        self.running: dict[str, int] = {}
        self.waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()


class FairThreads:
    """``threads`` requests at once on ``executor``: ``per_lane`` of one lane whenever threads are
    free, more of it only while more than ``reserve`` threads stay free for the other lanes."""

    def __init__(
        self, executor: Executor, threads: int, *, per_lane: int, reserve: int | None = None
    ) -> None:
        if threads < 1 or per_lane < 1:
            raise ValueError("threads and per_lane must be at least 1")
        self._executor = executor
        self._threads = threads
        self._per_lane = min(per_lane, threads)
        # past its share, a lane leaves this many threads free (its share, unless told otherwise)
        self._reserve = self._per_lane if reserve is None else max(0, reserve)
        self._shares: dict[asyncio.AbstractEventLoop, _Share] = {}

    def waiting(self) -> int:
        """Requests waiting for a thread (on every loop)."""
        return sum(len(queue) for share in self._shares.values() for queue in share.waiting.values())

    async def run(self, lane: str, work: Callable[[], T]) -> T:
        """``work()`` on a thread once ``lane``'s turn gives it one; its answer, or its exception."""
        loop = asyncio.get_running_loop()
        share = self._shares.get(loop)
        if share is None:
            share = self._shares[loop] = _Share()
        if self._room(share, lane):
            self._take(share, lane)
        else:
            turn: asyncio.Future[None] = loop.create_future()
            share.waiting.setdefault(lane, deque()).append(turn)
            try:
                await turn  # granted: the thread is taken for this request
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():  # granted, then cancelled: hand it on
                    self._give_back(loop, share, lane)
                else:
                    self._forget(share, lane, turn)
                raise
        future = loop.run_in_executor(self._executor, work)
        future.add_done_callback(lambda done: self._finished(loop, share, lane, done))
        # shielded: a request cancelled meanwhile leaves its thread counted until the work ends
        return await asyncio.shield(future)

    def _room(self, share: _Share, lane: str) -> bool:
        """Whether ``lane`` may take a thread now."""
        free = self._threads - share.busy
        return free > 0 and (share.running.get(lane, 0) < self._per_lane or free > self._reserve)

    @staticmethod
    def _take(share: _Share, lane: str) -> None:
        share.busy += 1
        share.running[lane] = share.running.get(lane, 0) + 1

    @staticmethod
    def _forget(share: _Share, lane: str, turn: asyncio.Future[None]) -> None:
        queue = share.waiting.get(lane)
        if queue is None:
            return
        with contextlib.suppress(ValueError):
            queue.remove(turn)
        if not queue:
            del share.waiting[lane]

    def _finished(
        self, loop: asyncio.AbstractEventLoop, share: _Share, lane: str, done: asyncio.Future[T]
    ) -> None:
        if not done.cancelled():
            done.exception()  # retrieved here too: a shielded request may have been cancelled
        self._give_back(loop, share, lane)

    def _give_back(self, loop: asyncio.AbstractEventLoop, share: _Share, lane: str) -> None:
        """``lane``'s thread is free: the threads free go to the waiting lanes with room, in turn."""
        share.busy -= 1
        left = share.running[lane] - 1
        if left:
            share.running[lane] = left
        else:
            del share.running[lane]
        if lane in share.waiting:
            share.waiting.move_to_end(lane)  # the lane that just had a thread comes last in this turn
        while share.busy < self._threads:
            name = next((n for n in share.waiting if self._room(share, n)), None)
            if name is None:
                break  # nobody waits, or no lane waiting has room (the reserve stays free)
            queue = share.waiting[name]
            turn = queue.popleft()
            if queue:
                share.waiting.move_to_end(name)  # its next request waits for the other lanes' turn
            else:
                del share.waiting[name]
            if turn.cancelled():
                continue
            self._take(share, name)
            turn.set_result(None)
        if not share.busy and not share.waiting:
            self._shares.pop(loop, None)
