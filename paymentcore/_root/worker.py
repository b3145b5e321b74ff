"""The worker loop of one core: its rounds of background work, its threads, its housekeeping.

The composition root (``paymentcore._root.core``) builds it beside the services; ``PaymentCore.tick``,
``run_until_idle``, ``start_worker`` and ``stop_worker`` hand over to it.
"""

from __future__ import annotations

import logging
import threading
import time

from paymentcore._services.access import RateLimiter
from paymentcore._services.collect import Collect
from paymentcore._services.deps import Deps
from paymentcore._services.disburse import Disburse
from paymentcore._services.webhooks import Webhooks
from paymentcore._services.work import Pump

__all__ = ["LEASE_KEEP_MS", "NETWORK_SLOW_PER_PROVIDER", "Worker"]

_log = logging.getLogger("paymentcore.worker")

NETWORK_SLOW_PER_PROVIDER = 4
LEASE_KEEP_MS = 3_600_000  # lease rows that ran out an hour ago are dropped (a dead worker's)
PURGE_EVERY_MS = 60_000  # not on every round: a purge takes the write lock


class Worker:
    """Collections, payouts and webhook deliveries moved forward: one round at a time (:meth:`tick`,
    for tests and scripts) or on threads of this process (:meth:`start`)."""

    def __init__(
        self, deps: Deps, collect: Collect, disburse: Disburse, webhooks: Webhooks, limiter: RateLimiter
    ) -> None:
        self._deps = deps
        self._collect = collect
        self._disburse = disburse
        self._webhooks = webhooks
        self._limiter = limiter
        self._thread: threading.Thread | None = None
        self._pumps: list[Pump] = []
        self._stop = threading.Event()
        self._next_purge = 0

    def tick(self) -> int:
        """One round of background work; returns how many items were looked at."""
        done = self._collect.process_due() + self._disburse.process_due() + self._webhooks.process_due()
        self._purge()
        return done

    def run_until_idle(self, max_rounds: int = 50) -> None:
        for _ in range(max_rounds):
            if self.tick() == 0:
                return

    def _purge(self) -> None:
        """Drop expired idempotency records, dead workers' leases and old rate-limit buckets (and fold
        a store's count moves in), once a minute."""
        now = self._deps.clock.now()
        if now < self._next_purge:
            return
        with self._deps.apart() as tx:  # waits for no merchant's units, and none waits for it
            tx.idempotency.purge(now - self._deps.config.idempotency_retention_hours * 3_600_000)
            tx.leases.purge(now - LEASE_KEEP_MS)
        self._limiter.purge(now)  # rate-limit buckets past the longest window
        fold = getattr(self._deps.store, "fold_counts", None)  # PostgreSQL's hourly counts' moves
        if fold is not None:
            fold()
        self._next_purge = now + PURGE_EVERY_MS

    def start(self, interval: float = 0.2) -> None:
        """Run the background work on threads of this process until :meth:`stop`.

        Each kind of work has its own loop and its own threads, so none waits for another, and each is
        partitioned by lane (:class:`paymentcore._services.work.Pump`): collections and payouts by
        provider (a mobile network that hangs holds up only its own work), webhook deliveries by
        endpoint. Per kind, a fresh pool (``Config.worker_concurrency`` for collections and payouts, at
        most ``Config.network_per_provider`` of one provider; ``Config.delivery_concurrency`` for
        deliveries, at most ``Config.delivery_per_endpoint`` to one endpoint) and a slow pool for lanes
        whose items ran longer than ``Config.network_slow_after`` / ``Config.delivery_slow_after``
        seconds (``Config.network_slow_concurrency`` / ``Config.delivery_slow_concurrency`` in all; a
        suspect endpoint one delivery at a time, a suspect provider a few calls). The leases of items in
        flight are renewed every third of ``Config.dispatch_lease_seconds``. While work is pending, a
        line every ``Config.work_log_seconds`` says how much is queued and in flight per kind.
        """
        if self._pumps:
            return
        config = self._deps.config
        network = [
            Pump(
                runner,
                name=name,
                concurrency=config.worker_concurrency,
                per_lane=config.network_per_provider,
                slow_concurrency=config.network_slow_concurrency,
                slow_per_lane=NETWORK_SLOW_PER_PROVIDER,
                slow_after=config.network_slow_after,
                interval=interval,
            )
            for name, runner in (("collections", self._collect.runner), ("payouts", self._disburse.runner))
        ]
        deliveries = Pump(
            self._webhooks.runner,
            name="deliveries",
            concurrency=config.delivery_concurrency,
            per_lane=config.delivery_per_endpoint,
            first_per_lane=1,
            slow_concurrency=config.delivery_slow_concurrency,
            slow_per_lane=1,
            slow_after=config.delivery_slow_after,
            interval=interval,
        )
        self._pumps = [*network, deliveries]
        for pump in self._pumps:
            pump.start()
        self._stop.clear()
        self._thread = threading.Thread(target=self._housekeeping, name="paymentcore-worker", daemon=True)
        self._thread.start()

    @property
    def pumps(self) -> list[Pump]:
        return list(self._pumps)

    def status(self) -> dict[str, tuple[int, int]]:
        """Per kind of work: (queued, in flight), as the running pumps last saw it."""
        return {pump.name: (pump.queued, pump.in_flight) for pump in self._pumps}

    def _housekeeping(self) -> None:
        last_report = 0.0
        while not self._stop.wait(1.0):
            try:
                self._purge()
                status = self.status()
                moment = time.monotonic()
                if any(queued or flying for queued, flying in status.values()) and (
                    moment - last_report >= self._deps.config.work_log_seconds
                ):
                    last_report = moment
                    said = "; ".join(f"{kind} queued={q} in_flight={f}" for kind, (q, f) in status.items())
                    _log.info("work: %s", said)
            except Exception:  # housekeeping must survive a bad round
                _log.exception("worker housekeeping failed")

    def stop(self) -> None:
        self._stop.set()
        for pump in self._pumps:
            pump.stop()
        self._pumps = []
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
