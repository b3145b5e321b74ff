"""The one mechanism of background work: find what is due, claim it with a lease, act, record the outcome.

Collections (prompts and status checks), payouts (dispatch and status checks) and webhook deliveries are
each a :class:`Task`. The runner owns the transactions: the claim is written in one (so another worker
skips the item until the lease runs out), the action runs outside any transaction (it talks to a
network or a webhook endpoint, which may be slow), and the outcome is written in another. A worker
that dies between the two leaves the claim to expire; the item is then due again and the action is
repeated with the same reference, which the network treats as the same request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Generic, Protocol, TypeVar

import attrs

from paymentcore.ports import Clock, Store, Transaction

__all__ = ["Due", "Pump", "Runner", "Task"]

log = logging.getLogger("paymentcore.worker")

ClaimT = TypeVar("ClaimT")
OutcomeT = TypeVar("OutcomeT")


@attrs.frozen
class Due:
    """An item whose turn has come: its key (a reference, an event id) and its lane.

    Items of one lane are worked one at a time when a :class:`Pump` runs them (a lane is a webhook
    endpoint: its events go out in order, and a slow endpoint occupies only its own lane).
    """

    key: str
    lane: str


class Task(Protocol[ClaimT, OutcomeT]):
    """One kind of background work."""

    def due(self, tx: Transaction, now: int, limit: int) -> Sequence[Due]:
        """The items whose turn has come, oldest first."""
        ...

    def claim(self, tx: Transaction, key: str, now: int) -> ClaimT | None:
        """Inside a write transaction: check the item is still due and take it (write a lease).

        None when there is nothing to do (another worker has it, or it changed meanwhile).
        """
        ...

    def act(self, claim: ClaimT, now: int) -> OutcomeT | None:
        """Outside any transaction: talk to the outside world. None when nothing was learnt."""
        ...

    def record(self, tx: Transaction, claim: ClaimT, outcome: OutcomeT, now: int) -> bool:
        """Inside a write transaction: write the outcome (state change, ledger, outbox).

        True when the item has a next step to take at once (a payout just handed over is asked for its
        status): the runner claims it again. Each step's outcome is written before the next one runs.
        """
        ...


class Runner(Generic[ClaimT, OutcomeT]):
    """Runs one :class:`Task` against a store.

    Beside the task's own claim, the runner keeps a lease row per claimed item (``tx.leases``, of
    ``kind``), taken in the claim's transaction and dropped in the outcome's, so that any process can
    count the work in flight everywhere (:meth:`PaymentCore.work_backlog`). Write transactions are
    opened with ``write`` (by default ``store.transaction``; the services pass ``Deps.transaction``,
    which tells the observer what the task recorded once it has committed).
    """

    def __init__(
        self,
        task: Task[ClaimT, OutcomeT],
        store: Store,
        clock: Clock,
        *,
        kind: str = "work",
        lease_ms: int = 30_000,
        write: Callable[[], AbstractContextManager[Transaction]] | None = None,
    ) -> None:
        self.task = task
        self.kind = kind
        self._store = store
        self._clock = clock
        self._lease_ms = lease_ms
        self._write = write if write is not None else store.transaction

    def run_due(self, limit: int) -> int:
        """Work every due item once; returns how many were due."""
        due = self.due(limit)
        for item in due:
            self.run_one(item.key)
        return len(due)

    def due(self, limit: int) -> Sequence[Due]:
        with self._store.read() as tx:
            return self.task.due(tx, self._clock.now(), limit)

    def run_one(self, key: str, *, max_steps: int = 3) -> OutcomeT | None:
        """Claim, act and record one item, step after step; the last outcome, or None when it was not
        claimed or nothing was learnt."""
        last: OutcomeT | None = None
        with self._write() as tx:
            claim = self._claim(tx, key)
        for step in range(1, max_steps + 1):
            if claim is None:
                return last
            outcome = self.task.act(claim, self._clock.now())
            if outcome is None:
                return last  # the claim (and the lease row) runs out and the item is due again
            with self._write() as tx:
                again = self.task.record(tx, claim, outcome, self._clock.now())
                tx.leases.drop(self.kind, key)
                # the next step's claim rides in the same transaction (one commit fewer per step);
                # never after the last step, whose claim nobody would act on
                claim = self._claim(tx, key) if again and step < max_steps else None
            last = outcome
        return last

    def _claim(self, tx: Transaction, key: str) -> ClaimT | None:
        now = self._clock.now()
        claim = self.task.claim(tx, key, now)
        if claim is not None:
            tx.leases.take(self.kind, key, now + self._lease_ms)
        return claim


class Pump:
    """Runs one task on its own thread, several items at a time, so that a slow item holds up only
    itself: at most ``concurrency`` items in flight in all, at most ``per_lane`` of one lane.

    A round hands every listed item that is not already in flight, and whose lane has room, to a pool
    of threads; an item is claimed (leased) by :meth:`Runner.run_one` as before, so several pumps in
    several processes share the work safely. The list of what is due is read from the store once and
    worked through over the rounds that follow: it is read again when it is used up, or when it is
    older than ``interval`` (so that work that became due since, and other lanes, get their turn). A
    scan reads up to ``scan`` items; reading it again for every item started would make the pump's cost
    per item grow with the backlog, just when it must catch up.
    """

    def __init__(
        self,
        runner: Runner[ClaimT, OutcomeT],
        *,
        name: str,
        concurrency: int,
        per_lane: int,
        interval: float = 0.2,
        scan: int = 1000,
    ) -> None:
        self.name = name
        self._runner = runner
        self._concurrency = concurrency
        self._per_lane = per_lane
        self._interval = interval
        self._scan = scan
        self._lock = threading.Lock()
        self._in_flight: set[str] = set()
        self._lanes: Counter[str] = Counter()
        self._queued = 0
        self._listed: list[Due] = []  # the last scan's items not yet started, oldest first
        self._listed_at = 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._pool: ThreadPoolExecutor | None = None
        self._thread: threading.Thread | None = None

    @property
    def queued(self) -> int:
        """Items due at the last round (in flight included)."""
        return self._queued

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._pool = ThreadPoolExecutor(self._concurrency, thread_name_prefix=f"paymentcore-{self.name}")
        self._thread = threading.Thread(target=self._loop, name=f"paymentcore-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=timeout)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._thread = None
        self._pool = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                started = self.round()
            except Exception:  # the loop must survive one bad round; the work stays due
                log.exception("%s: worker round failed", self.name)
                started = 0
            if not started:
                self._wake.wait(self._interval)
                self._wake.clear()

    def round(self) -> int:
        """Start what is due and has room; returns how many items were started."""
        with self._lock:
            if len(self._in_flight) >= self._concurrency:
                return 0
        moment = time.monotonic()
        if not self._listed or moment - self._listed_at >= self._interval:
            due = self._runner.due(self._scan)
            self._queued = len(due)
            self._listed = list(due)
            self._listed_at = moment
        started = 0
        waiting: list[Due] = []
        for position, item in enumerate(self._listed):
            with self._lock:
                if len(self._in_flight) >= self._concurrency:
                    waiting.extend(self._listed[position:])
                    break
                if item.key in self._in_flight:
                    continue  # being worked already: it is no longer waiting
                if self._lanes[item.lane] >= self._per_lane:
                    waiting.append(item)
                    continue
                self._in_flight.add(item.key)
                self._lanes[item.lane] += 1
            assert self._pool is not None
            self._pool.submit(self._work, item)
            started += 1
        self._listed = waiting
        return started

    def _work(self, item: Due) -> None:
        try:
            self._runner.run_one(item.key)
        except Exception:
            log.exception("%s: %s failed; it stays due", self.name, item.key)
        finally:
            with self._lock:
                self._in_flight.discard(item.key)
                self._lanes[item.lane] -= 1
                if self._lanes[item.lane] <= 0:
                    del self._lanes[item.lane]
            self._wake.set()
