"""The one mechanism of background work: find what is due, claim it with a lease, act, record the outcome.

Collections (prompts and status checks), payouts (dispatch and status checks) and webhook deliveries are
each a :class:`Task`. The runner owns the transactions: the claim is written in one (so another worker
skips the item until the lease runs out), the action runs outside any transaction (it talks to a
network or a webhook endpoint, which may be slow), and the outcome is written in another. A worker
that dies between the two leaves the claim to expire; the item is then due again and the action is
repeated with the same reference, which the network treats as the same request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from paymentcore.ports import Clock, Store, Transaction

__all__ = ["Runner", "Task"]

ClaimT = TypeVar("ClaimT")
OutcomeT = TypeVar("OutcomeT")


class Task(Protocol[ClaimT, OutcomeT]):
    """One kind of background work."""

    def due(self, tx: Transaction, now: int, limit: int) -> Sequence[str]:
        """The keys (references, event ids) of items whose turn has come, oldest first."""
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
    """Runs one :class:`Task` against a store."""

    def __init__(self, task: Task[ClaimT, OutcomeT], store: Store, clock: Clock) -> None:
        self.task = task
        self._store = store
        self._clock = clock

    def run_due(self, limit: int) -> int:
        """Work every due item once; returns how many were due."""
        with self._store.read() as tx:
            keys = self.task.due(tx, self._clock.now(), limit)
        for key in keys:
            self.run_one(key)
        return len(keys)

    def run_one(self, key: str, *, max_steps: int = 3) -> OutcomeT | None:
        """Claim, act and record one item, step after step; the last outcome, or None when it was not
        claimed or nothing was learnt."""
        last: OutcomeT | None = None
        for _ in range(max_steps):
            with self._store.transaction() as tx:
                claim = self.task.claim(tx, key, self._clock.now())
            if claim is None:
                return last
            outcome = self.task.act(claim, self._clock.now())
            if outcome is None:
                return last  # the claim runs out and the item is due again
            with self._store.transaction() as tx:
                again = self.task.record(tx, claim, outcome, self._clock.now())
            last = outcome
            if not again:
                break
        return last
