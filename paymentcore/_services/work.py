"""The one mechanism of background work: find what is due, claim it with a lease, act, record the outcome.

Collections (prompts and status checks), payouts (dispatch and status checks) and webhook deliveries are
each a :class:`Task`. The runner owns the transactions: the claim is written in one (so another worker
skips the item until the lease runs out), the action runs outside any transaction (it talks to a
network or a webhook endpoint, which may be slow), and the outcome is written in another. A worker
that dies between the two leaves the claim to expire; the item is then due again and the action is
repeated with the same reference, which the network treats as the same request. Many items go
together: their claims share one transaction, and so do their outcomes (:meth:`Runner.claim_many`,
:meth:`Runner.record_many`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Generic, Protocol, TypeVar

import attrs

from paymentcore._domain.queries import in_turns
from paymentcore.ports import Clock, Store, Transaction

__all__ = ["LANE_DEPTH", "TURN_BUDGET", "Claimed", "Due", "Pump", "Runner", "Task", "check_again_at"]

log = logging.getLogger("paymentcore.worker")

#: a listing of due work holds at most this many items of one lane (the rest wait for a later listing):
#: a lane runs a few items at a time, and a listing is read again when it is used up, so a deeper one
#: would only decode rows that wait for the next listing anyway
LANE_DEPTH = 64

#: a lane whose actions take at most this long each (as recently seen) has the items a round starts of
#: it handed to one pool thread in turns of as many as fit in it, acted on together where the task can
#: (the webhook deliveries of one endpoint) or else one after another; a slower lane one item a thread
TURN_BUDGET = 0.005

#: the longest wait a network may name before the next status check (a longer one, or one given in
#: the wrong unit, would park the item): the check comes then, and the network may name another
MAX_CHECK_AFTER_MS = 15 * 60 * 1000


def check_again_at(
    now: int,
    poll_seconds: float,
    hint_ms: int | None,
    *,
    asked_at: int | None = None,
    latest: int | None = None,
) -> int:
    """When to ask the network again about an item it answered PENDING: after the poll interval
    (``Config.poll_interval_seconds``), or
    after the wait the network named (``hint_ms``, its ``check_after_ms``, counted from ``asked_at``,
    when it was asked; at most :data:`MAX_CHECK_AFTER_MS`) when that comes later, so an answer known to
    come in 2 s costs one status check, not one a poll; never after ``latest`` (a deadline of the
    item's own) unless that is within one poll."""
    poll_ms = int(poll_seconds * 1000)
    at = now + poll_ms
    if hint_ms:
        named = (now if asked_at is None else asked_at) + min(int(hint_ms), MAX_CHECK_AFTER_MS)
        at = max(at, named)
    if latest is not None:
        at = min(at, max(latest, now + poll_ms))
    return at


ClaimT = TypeVar("ClaimT")
OutcomeT = TypeVar("OutcomeT")
WorkT = TypeVar("WorkT")


@attrs.frozen
class Due:
    """An item whose turn has come: its key (a reference, an event id) and its lane.

    Items of one lane are worked one at a time when a :class:`Pump` runs them (a lane is a webhook
    endpoint: its events go out in order, and a slow endpoint occupies only its own lane).
    """

    key: str
    lane: str
    #: the merchant whose money the item moves: its write transactions take that merchant's partition
    #: of the store (``ports.PartitionedStore``), not the whole store
    merchant: str | None = None


@attrs.frozen
class Claimed(Generic[ClaimT]):
    """An item a worker has claimed for one step: the task's claim and the lease it wrote."""

    item: Due
    claim: ClaimT
    lease: int
    step: int = 1


class Task(Protocol[ClaimT, OutcomeT]):
    """One kind of background work."""

    def due(self, tx: Transaction, now: int, limit: int) -> Sequence[Due]:
        """The items whose turn has come, oldest first."""
        ...

    def prefetch(self, tx: Transaction, keys: Sequence[str]) -> None:
        """Inside a write transaction, before a batch of ``keys`` is claimed or recorded: read what that
        will read, in as few statements as the store allows (or nothing: it only saves round trips)."""
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

        True when the item has a next step to take at once (a collection whose prompt just went out is
        asked for its status): the runner claims it again. Each step's outcome is written before the
        next one runs.
        """
        ...

    def renew(self, tx: Transaction, key: str, held_until: int, until: int) -> bool:
        """Inside a write transaction: extend this worker's claim on the item from ``held_until`` (the
        lease its claim wrote, ``now + lease_ms``) to ``until``, only if the item still carries that lease
        (compare and set: an outcome written meanwhile is never overwritten). True when extended."""
        ...


def _unpartitioned(store: Store) -> Callable[..., AbstractContextManager[Transaction]]:
    def write(merchant_id: str | None = None, **_: Any) -> AbstractContextManager[Transaction]:
        return store.transaction()

    return write


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
        write: Callable[..., AbstractContextManager[Transaction]] | None = None,
        claiming: Callable[[Sequence[str]], AbstractContextManager[Transaction]] | None = None,
    ) -> None:
        self.task = task
        self.kind = kind
        self._store = store
        self._clock = clock
        self._lease_ms = lease_ms
        self._write = write if write is not None else _unpartitioned(store)
        # on a store whose writers of different merchants need not wait for each other
        # (ports.PartitionedStore) a batch's transaction takes the partitions of its items' merchants
        # (all at once when the store can, else one transaction per merchant); else one transaction
        self._partitioned = write is not None and hasattr(store, "transaction_for")
        self._many = self._partitioned and hasattr(store, "transaction_for_many")
        # claims pass over the items another unit holds at the moment (``Deps.claiming``): two
        # workers, or a worker and the API, never queue for one another while other items are due
        self._claiming = claiming if self._many else None
        self._heartbeat = lease_ms / 3000  # seconds between renewals of a lease in use
        self._acting: dict[str, _Hold] = {}  # items whose action is under way here, and their leases
        self._acting_lock = threading.Lock()
        self._renewer: threading.Thread | None = None

    def run_due(self, limit: int) -> int:
        """Work every due item once, in batches of one item per lane (each lane's first item, then each
        lane's second, ...: the items of one lane one after another, as a :class:`Pump` runs a lane
        whose items share a fate, so that what one item's outcome changes, such as a webhook endpoint
        disabled, holds for the next); returns how many were due."""
        due = self.due(limit)
        turns: list[list[Due]] = []
        seen: dict[str, int] = {}
        for item in due:
            turn = seen.get(item.lane, 0)
            seen[item.lane] = turn + 1
            if turn == len(turns):
                turns.append([])
            turns[turn].append(item)
        for batch in turns:  # a storage error is raised to the caller, as by run_one
            claimed = self.claim_many(batch, isolate=False, skip_busy=False)
            while claimed:
                learnt = [(one, outcome) for one in claimed if (outcome := self.act(one)) is not None]
                claimed = self.record_many(learnt, isolate=False)
        return len(due)

    def due(self, limit: int) -> Sequence[Due]:
        with self._store.read() as tx:
            return self.task.due(tx, self._clock.now(), limit)

    def run_one(self, key: str, *, merchant_id: str | None = None, max_steps: int = 3) -> OutcomeT | None:
        """Claim, act and record one item, step after step; the last outcome, or None when it was not
        claimed or nothing was learnt."""
        last: OutcomeT | None = None
        with self._write(merchant_id=merchant_id) as tx:
            leases = _LeaseWrites()
            claim, lease = self._claim(tx, key, leases)
            leases.write(tx, self.kind)
        for step in range(1, max_steps + 1):
            if claim is None:
                return last
            outcome = self._act(key, claim, lease, merchant_id)
            if outcome is None:
                return last  # the claim (and the lease row) runs out and the item is due again
            with self._write(merchant_id=merchant_id) as tx:
                leases = _LeaseWrites()
                again = self.task.record(tx, claim, outcome, self._clock.now())
                leases.drop(key)
                # the next step's claim rides in the same transaction (one commit fewer per step);
                # never after the last step, whose claim nobody would act on
                claim, lease = self._claim(tx, key, leases) if again and step < max_steps else (None, 0)
                leases.write(tx, self.kind)
            last = outcome
        return last

    # --- many items at once: one write transaction for a batch's claims, one for its outcomes --------

    def claim_many(
        self, items: Sequence[Due], *, isolate: bool = True, skip_busy: bool = True
    ) -> list[Claimed[ClaimT]]:
        """Claim ``items`` in one write transaction (one per merchant on a store partitioned by
        merchant); the items taken, each with its lease. Should the batch fail, each item is claimed
        again in a transaction of its own, so one bad item holds back no other (``isolate``; else the
        error is raised). On a store whose claims can pass over what others hold, the items another
        unit holds at the moment are left due (``skip_busy``; see :meth:`_open`) rather than waited for."""

        def claim(tx: Transaction, item: Due, leases: _LeaseWrites) -> Claimed[ClaimT] | None:
            taken, lease = self._claim(tx, item.key, leases)
            return None if taken is None else Claimed(item, taken, lease)

        return self._in_batches([(item, item) for item in items], claim, isolate, skip_busy=skip_busy)

    def act(self, claimed: Claimed[ClaimT]) -> OutcomeT | None:
        """The task's action on one claimed item, outside any transaction (its lease renewed while it
        lasts); None when nothing was learnt (the item is due again once its lease runs out)."""
        return self._act(claimed.item.key, claimed.claim, claimed.lease, claimed.item.merchant)

    def act_many(self, claimed: Sequence[Claimed[ClaimT]]) -> list[OutcomeT | None]:
        """:meth:`act` for several claimed items, the leases of all of them renewed until they are done:
        at once where the task can (its ``act_many``, say the webhook deliveries of one endpoint sent
        together), else one after another. An action that raises counts as nothing learnt; should the
        items acted on together raise, each is acted on alone, so that only the bad one fails."""
        if len(claimed) == 1:
            return [self._act_logged(claimed[0])]
        together = getattr(self.task, "act_many", None)
        with self.holding(claimed):
            if together is None:
                return [self._act_logged(one) for one in claimed]
            try:
                outcomes: list[OutcomeT | None] = together([one.claim for one in claimed], self._clock.now())
            except Exception:  # one bad item must not hold back the others: each acted on alone
                log.exception("%s: %d items failed together; each is tried alone", self.kind, len(claimed))
                return [self._act_logged(one) for one in claimed]
            return outcomes

    def _act_logged(self, claimed: Claimed[ClaimT]) -> OutcomeT | None:
        try:
            return self.act(claimed)
        except Exception:
            log.exception("%s: %s failed; it stays due", self.kind, claimed.item.key)
            return None

    def record_many(
        self,
        learnt: Sequence[tuple[Claimed[ClaimT], OutcomeT]],
        *,
        max_steps: int = 3,
        isolate: bool = True,
    ) -> list[Claimed[ClaimT]]:
        """Write the outcomes of many items in one write transaction (one per merchant on a partitioned
        store), each item's next step claimed in it; returns the items claimed for a next step (at most
        ``max_steps`` steps an item). A batch that fails is written again item by item (``isolate``;
        else the error is raised)."""

        def record(
            tx: Transaction, done: tuple[Claimed[ClaimT], OutcomeT], leases: _LeaseWrites
        ) -> Claimed[ClaimT] | None:
            claimed, outcome = done
            key = claimed.item.key
            again = self.task.record(tx, claimed.claim, outcome, self._clock.now())
            leases.drop(key)
            if not again or claimed.step >= max_steps:
                return None
            taken, lease = self._claim(tx, key, leases)
            return None if taken is None else Claimed(claimed.item, taken, lease, claimed.step + 1)

        return self._in_batches([(done[0].item, done) for done in learnt], record, isolate)

    def _in_batches(
        self,
        work: Sequence[tuple[Due, WorkT]],
        step: Callable[[Transaction, WorkT, _LeaseWrites], Claimed[ClaimT] | None],
        isolate: bool,
        *,
        skip_busy: bool = False,
    ) -> list[Claimed[ClaimT]]:
        groups: dict[str | None, list[tuple[Due, WorkT]]] = {}
        for item, one in work:  # one transaction per merchant only when the store cannot take several
            if item.merchant is None:  # (every task names its items' merchants; skipping keys on them)
                skip_busy = False
            groups.setdefault(item.merchant if self._partitioned and not self._many else None, []).append(
                (item, one)
            )
        out: list[Claimed[ClaimT]] = []
        for batch in groups.values():
            merchants = sorted({item.merchant for item, _ in batch if item.merchant is not None})
            try:
                with self._open(merchants, skip_busy) as tx:
                    if len(batch) > 1:
                        self.task.prefetch(tx, [item.key for item, _ in batch])
                    leases = _LeaseWrites()
                    results = [step(tx, one, leases) for _, one in batch]
                    leases.write(tx, self.kind)
            except Exception:
                if not isolate:
                    raise
                if len(batch) == 1:
                    log.exception("%s: a batch of one failed; it stays due", self.kind)
                    continue
                log.warning("%s: a batch of %d failed; writing it item by item", self.kind, len(batch))
                results = []
                for item, one in batch:
                    try:  # each item as the batch would have: a claim still waits for nobody
                        with self._open([item.merchant] if item.merchant else [], skip_busy) as tx:
                            leases = _LeaseWrites()
                            results.append(step(tx, one, leases))
                            leases.write(tx, self.kind)
                    except Exception:
                        log.exception("%s: an item failed; it stays due", self.kind)
            out.extend(result for result in results if result is not None)
        return out

    def _open(self, merchants: Sequence[str], skip_busy: bool) -> AbstractContextManager[Transaction]:
        """A batch's write transaction: with ``skip_busy`` (claims), on a store that can, one that takes
        no merchant's partition and passes over the items another unit holds (they stay due for a
        later round); else one on the partitions of the batch's merchants."""
        if skip_busy and self._claiming is not None and merchants:
            return self._claiming(merchants)
        return self._write(merchant_id=None, merchants=merchants)

    def _claim(self, tx: Transaction, key: str, leases: _LeaseWrites) -> tuple[ClaimT | None, int]:
        now = self._clock.now()
        claim = self.task.claim(tx, key, now)
        if claim is not None:
            leases.take(key, now + self._lease_ms)
        return claim, now + self._lease_ms

    @contextmanager
    def holding(self, items: Sequence[Claimed[ClaimT]]) -> Iterator[None]:
        """While the block runs, the leases of ``items`` (claimed, waiting for their turn to act) are
        renewed as an acting item's are; an item's action, when it comes, goes on with that lease."""
        moment = time.monotonic()
        holds = {
            one.item.key: _Hold(lease=one.lease, since=moment, merchant=one.item.merchant) for one in items
        }
        with self._acting_lock:
            self._acting.update(holds)
            self._watch()
        try:
            yield
        finally:
            with self._acting_lock:
                for key, hold in holds.items():
                    if self._acting.get(key) is hold:
                        del self._acting[key]

    def _watch(self) -> None:
        """Under the acting lock: the thread that renews the leases of the items held here runs."""
        if self._renewer is None:
            self._renewer = threading.Thread(
                target=self._renew_while_acting, name=f"paymentcore-{self.kind}-leases", daemon=True
            )
            self._renewer.start()

    def _act(self, key: str, claim: ClaimT, lease: int, merchant_id: str | None = None) -> OutcomeT | None:
        """The task's action, with the claim's lease renewed (a heartbeat) for as long as it lasts, so
        that no other worker takes the item over while this one is still on it (an item held while it
        waited for its turn keeps the lease renewed meanwhile)."""
        with self._acting_lock:
            hold = self._acting.get(key)
            if hold is None:
                hold = self._acting[key] = _Hold(lease=lease, since=time.monotonic(), merchant=merchant_id)
            self._watch()
        try:
            return self.task.act(claim, self._clock.now())
        finally:
            with self._acting_lock:
                if self._acting.get(key) is hold:
                    del self._acting[key]

    def _renew_while_acting(self) -> None:
        while True:
            time.sleep(self._heartbeat)
            with self._acting_lock:
                if not self._acting:
                    self._renewer = None
                    return
                moment = time.monotonic()
                due = {k: h for k, h in self._acting.items() if moment - h.since >= self._heartbeat}
            if due:
                try:
                    self._renew(due)
                except Exception:  # the next beat tries again; the lease still has two thirds to run
                    log.exception("%s: renewing leases failed", self.kind)

    def _renew(self, holds: dict[str, _Hold]) -> None:
        """Extend the leases of ``holds`` by a whole lease from now, in one write transaction per
        merchant (a store partitioned by merchant then holds back no other merchant's writers); an item
        whose outcome was written meanwhile, or whose lease changed, is left alone (compare and set)."""
        renewed: dict[str, int] = {}
        merchants: dict[str | None, dict[str, _Hold]] = {}
        for key, hold in holds.items():
            merchants.setdefault(hold.merchant, {})[key] = hold
        for merchant_id, theirs in merchants.items():
            with self._write(merchant_id=merchant_id) as tx:
                until = self._clock.now() + self._lease_ms
                leases = _LeaseWrites()
                for key, hold in theirs.items():
                    if self.task.renew(tx, key, hold.lease, until):
                        leases.take(key, until)
                        renewed[key] = until
                leases.write(tx, self.kind)
        with self._acting_lock:
            for key, until in renewed.items():
                hold = holds[key]
                if self._acting.get(key) is hold:
                    hold.lease = until


class _LeaseWrites:
    """The lease rows a unit of work takes and drops, written together when its items are done (one
    statement for the leases taken, one for those dropped). An item recorded and claimed for its next
    step in the same unit keeps its row, with the new lease."""

    __slots__ = ("dropped", "taken")

    def __init__(self) -> None:
        self.taken: dict[str, int] = {}
        self.dropped: set[str] = set()

    def take(self, key: str, until: int) -> None:
        self.dropped.discard(key)
        self.taken[key] = until

    def drop(self, key: str) -> None:
        self.taken.pop(key, None)
        self.dropped.add(key)

    def write(self, tx: Transaction, kind: str) -> None:
        if self.dropped:
            tx.leases.drop_many(kind, sorted(self.dropped))
        if self.taken:
            tx.leases.take_many(kind, sorted(self.taken.items()))


@attrs.define
class _Hold:
    """An item whose action is under way: the lease its row carries now, and when the action began."""

    lease: int
    since: float
    merchant: str | None = None


class _Lane:
    """What a pump knows of one lane: its items in flight (fresh and slow), and how it has behaved.

    A lane is *proven* once an item of it finished within ``slow_after``, and *suspect* from the moment
    one of its items has been in flight longer than that until one finishes quickly again.
    """

    __slots__ = ("fresh", "pace", "proven", "slow", "suspect")

    def __init__(self) -> None:
        self.fresh = 0
        self.slow = 0
        self.proven = False
        self.suspect = False
        self.pace: float | None = None  # seconds an action of the lane takes, as recently seen


@attrs.define
class _Flight:
    item: Due
    started: float
    slow: bool


class Pump:
    """Runs one task on its own threads, several items at a time, partitioned by lane.

    A lane is what shares a fate: a webhook endpoint, a mobile network (provider). Capacity is split
    in two pools, so that no set of lanes can take it from a healthy one:

    - the *fresh* pool, ``concurrency`` items in all, at most ``per_lane`` of one lane (``first_per_lane``
      until an item of the lane has finished quickly: a webhook endpoint never seen could hang);
    - the *slow* pool, ``slow_concurrency`` items in all. An item in flight longer than ``slow_after``
      seconds moves from the fresh pool to the slow one (when it has room) and makes its lane *suspect*:
      a suspect lane starts items only in the slow pool, and only while it has fewer than
      ``slow_per_lane`` items in flight in all, until one of its items finishes within ``slow_after``
      again.

    So a hanging lane holds fresh slots for at most ``slow_after`` seconds, then slow slots only;
    threads (and the sockets they open) never exceed ``concurrency + slow_concurrency``, however many
    lanes misbehave.

    Turns are handed out fairly: the items listed are taken round-robin over their lanes (each lane's
    first item, then each lane's second, ...), so a lane with 10,000 items due gets no more turns than a
    lane with one.

    The work is batched: the items a round starts are claimed (leased) in one write transaction
    (:meth:`Runner.claim_many`), their actions run on the pool's threads at once (:meth:`Runner.act`,
    which renews the lease while the action lasts), and the outcomes are written many per transaction
    (:meth:`Runner.record_many`) by whichever pool thread finished first while no one was writing; the
    others hand their outcome over and return to the pool. Several pumps in several processes share the
    work safely, a lease can be short, and the claims of a process that died lapse in seconds.

    The list of what is due is read once and worked through over the rounds that follow: it is read
    again when it is used up, or when it is older than ``interval``. A scan reads up to ``scan`` items
    (by default four times the items the pump can run at once, at most 1,000).
    """

    def __init__(
        self,
        runner: Runner[Any, Any],
        *,
        name: str,
        concurrency: int,
        per_lane: int,
        first_per_lane: int | None = None,
        slow_concurrency: int | None = None,
        slow_per_lane: int = 1,
        slow_after: float = 2.0,
        interval: float = 0.2,
        scan: int | None = None,
        max_lanes: int = 10_000,
        gather: float = 0.002,
    ) -> None:
        self.name = name
        self._runner = runner
        self._concurrency = concurrency
        self._per_lane = per_lane
        self._first_per_lane = first_per_lane if first_per_lane is not None else per_lane
        self._slow_concurrency = slow_concurrency if slow_concurrency is not None else concurrency
        self._slow_per_lane = slow_per_lane
        self._slow_after = slow_after
        self._interval = interval
        # a listing is read again when used up or after ``interval``: listing many times what can run at
        # once would decode rows that mostly wait for the next listing
        self._scan = scan if scan is not None else min(1000, 4 * (concurrency + self._slow_concurrency))
        self._max_lanes = max_lanes
        self._gather = gather
        self._lock = threading.Lock()
        self._flights: dict[str, _Flight] = {}
        self._lanes: OrderedDict[str, _Lane] = OrderedDict()  # least recently used first
        self._fresh = 0
        self._slow = 0
        self._queued = 0
        self._listed: list[Due] = []  # the last scan's items not yet started, in their turn order
        self._listed_at = 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._pool: ThreadPoolExecutor | None = None
        self._thread: threading.Thread | None = None
        self._record_lock = threading.Lock()
        self._learnt: list[tuple[Claimed[Any], Any]] = []  # outcomes waiting to be recorded
        self._recording = False

    @property
    def queued(self) -> int:
        """Items due at the last round (in flight included)."""
        return self._queued

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._flights)

    @property
    def threads(self) -> int:
        """The most threads this pump runs items on."""
        return self._concurrency + self._slow_concurrency

    def pools(self) -> tuple[int, int]:
        """Items in flight in the fresh pool and in the slow pool."""
        with self._lock:
            return self._fresh, self._slow

    def suspect_lanes(self) -> list[str]:
        with self._lock:
            return [name for name, lane in self._lanes.items() if lane.suspect]

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix=f"paymentcore-{self.name}")
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
                if self._wake.wait(self._interval) and self._gather and self.in_flight:
                    # items finish one by one: the slots freed within a moment are filled together
                    # (one claim transaction for them) rather than one claim per finished item; with
                    # nothing left in flight (a turn's items finish together) there is none to wait for
                    self._stop.wait(self._gather)
                self._wake.clear()

    def round(self) -> int:
        """Start what is due and has room; returns how many items were started."""
        moment = time.monotonic()
        self._demote(moment)
        if not self._listed or moment - self._listed_at >= self._interval:
            due = self._runner.due(self._scan)
            self._queued = len(due)
            self._listed = in_turns(due, lambda item: item.lane, len(due))  # each lane's first, ...
            self._listed_at = moment
        started: list[Due] = []
        waiting: list[Due] = []
        full: set[str] = set()  # lanes found without room in this round: their other items wait too
        with self._lock:
            for place, item in enumerate(self._listed):
                if self._fresh >= self._concurrency and self._slow >= self._slow_concurrency:
                    waiting.extend(self._listed[place:])  # no room anywhere: the rest waits as it is
                    break
                if item.lane in full:
                    waiting.append(item)
                    continue
                if item.key in self._flights:
                    continue  # being worked already: it is no longer waiting
                slow = self._room(item.lane)
                if slow is None:
                    full.add(item.lane)
                    waiting.append(item)
                    continue
                self._take(item, moment, slow=slow)
                started.append(item)
        self._listed = waiting
        if not started:
            return 0
        # the items started are claimed together, in one write transaction, by this thread
        try:
            claimed = self._runner.claim_many(started)
        except Exception:  # the items stay due; the next round tries again
            log.exception("%s: claiming %d items failed", self.name, len(started))
            claimed = []
        taken = {one.item.key for one in claimed}
        for item in started:
            if item.key not in taken:  # another unit holds it, or it is no longer due (another worker
                self._finish(item, judge=False)  # took it): nothing ran, so its lane's verdict stands
        assert self._pool is not None or not claimed
        for turn in self._turns(claimed):
            assert self._pool is not None
            self._pool.submit(self._act, turn)
        return len(started)

    def _turns(self, claimed: Sequence[Claimed[Any]]) -> list[list[Claimed[Any]]]:
        """The claimed items in the turns a pool thread acts on: a lane whose actions are quick (``pace``
        within :data:`TURN_BUDGET`) has its items handed to one thread as many at a time as fit in the
        budget (the hand-over to a thread and back costs more than such an action), acted on together
        where the task can and else one after another; any other lane's one item a thread, so that a
        slow action holds up no other."""
        lanes: dict[str, list[Claimed[Any]]] = {}
        for one in claimed:
            lanes.setdefault(one.item.lane, []).append(one)
        turns: list[list[Claimed[Any]]] = []
        with self._lock:
            for name, items in lanes.items():
                lane = self._lanes.get(name)
                pace = None if lane is None or lane.suspect else lane.pace
                size = 1 if pace is None else max(1, int(TURN_BUDGET / max(pace, 1e-6)))
                turns.extend(items[at : at + size] for at in range(0, len(items), size))
        return turns

    def _act(self, turn: Sequence[Claimed[Any]]) -> None:
        """On a pool thread: the actions of ``turn`` (items of one lane), together where the task can,
        else one after another (:meth:`Runner.act_many`); their outcomes join the next batch recorded."""
        began = time.monotonic()
        try:
            outcomes = self._runner.act_many(turn)
        except Exception:  # act_many answers for its actions' errors: this is the runner's own
            log.exception("%s: acting on %d items failed; they stay due", self.name, len(turn))
            outcomes = [None] * len(turn)
        self._paced(turn[0].item.lane, (time.monotonic() - began) / len(turn))
        learnt: list[tuple[Claimed[Any], Any]] = []
        for claimed, outcome in zip(turn, outcomes, strict=True):
            if outcome is None:  # nothing learnt: the claim runs out and the item is due again
                self._finish(claimed.item)
            else:
                learnt.append((claimed, outcome))
        if not learnt:
            return
        with self._record_lock:
            self._learnt.extend(learnt)
            if self._recording:
                return  # the thread recording now takes them in its next batch
            self._recording = True
        self._record()

    def _paced(self, name: str, seconds: float) -> None:
        """An action of lane ``name`` took ``seconds``: the lane's pace follows it."""
        with self._lock:
            lane = self._lanes.get(name)
            if lane is not None:
                lane.pace = seconds if lane.pace is None else 0.7 * lane.pace + 0.3 * seconds

    def _record(self) -> None:
        """Write every outcome waiting, a batch per transaction, until none waits (one thread at a time:
        the first whose action finished while nobody was recording)."""
        while True:
            with self._record_lock:
                batch, self._learnt = self._learnt, []
                if not batch:
                    self._recording = False
                    return
            try:
                again = self._runner.record_many(batch)
            except Exception:
                log.exception("%s: recording %d outcomes failed; they stay due", self.name, len(batch))
                again = []
            going = {one.item.key for one in again}
            for claimed, _ in batch:
                if claimed.item.key not in going:
                    self._finish(claimed.item)
            for one in again:  # a next step (a collection whose prompt went out: its status is asked)
                pool = self._pool
                try:
                    if pool is None:
                        raise RuntimeError("the pump has stopped")
                    pool.submit(self._act, [one])
                except RuntimeError:  # the pump is stopping: the claim runs out, the item is due again
                    self._finish(one.item)

    def _lane(self, name: str) -> _Lane:
        lane = self._lanes.get(name)
        if lane is None:
            lane = self._lanes[name] = _Lane()
            if len(self._lanes) > self._max_lanes:  # forget the least recently used idle lane
                for old, known in self._lanes.items():
                    if not known.fresh and not known.slow and old != name:
                        del self._lanes[old]
                        break
        else:
            self._lanes.move_to_end(name)
        return lane

    def _room(self, name: str) -> bool | None:
        """Under the lock: None when the lane may not start an item now, else whether it starts slow."""
        lane = self._lane(name)
        if lane.suspect:
            if self._slow >= self._slow_concurrency or lane.fresh + lane.slow >= self._slow_per_lane:
                return None
            return True
        if self._fresh >= self._concurrency:
            return None
        if lane.fresh >= (self._per_lane if lane.proven else self._first_per_lane):
            return None
        return False

    def _take(self, item: Due, moment: float, *, slow: bool) -> None:
        lane = self._lane(item.lane)
        self._flights[item.key] = _Flight(item=item, started=moment, slow=slow)
        if slow:
            self._slow += 1
            lane.slow += 1
        else:
            self._fresh += 1
            lane.fresh += 1

    def _demote(self, moment: float) -> None:
        """Items in flight longer than ``slow_after`` leave the fresh pool; their lanes turn suspect."""
        with self._lock:
            for flight in self._flights.values():
                if flight.slow or moment - flight.started < self._slow_after:
                    continue
                lane = self._lane(flight.item.lane)
                lane.suspect = True
                if self._slow >= self._slow_concurrency:
                    continue  # the slow pool is full: it stays counted where it is
                flight.slow = True
                self._fresh -= 1
                lane.fresh -= 1
                self._slow += 1
                lane.slow += 1

    def _finish(self, item: Due, *, judge: bool = True) -> None:
        """The item is done here (recorded, not claimed, or given up): its slot and lane are freed; how
        long it took proves its lane quick or makes it suspect (``judge``: not for an item whose claim
        missed, which ran nothing)."""
        with self._lock:
            flight = self._flights.pop(item.key, None)
            if flight is None:
                return
            took = time.monotonic() - flight.started
            lane = self._lane(item.lane)
            if flight.slow:
                self._slow -= 1
                lane.slow -= 1
            else:
                self._fresh -= 1
                lane.fresh -= 1
            if judge and took < self._slow_after:
                lane.proven = True
                lane.suspect = False
            elif judge:
                lane.suspect = True
        self._wake.set()
