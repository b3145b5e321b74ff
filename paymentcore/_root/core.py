"""The composition root: a PaymentCore built from a store, a network, a clock and a Config.

Nothing here runs at import time. ``PaymentCore.memory()`` gives a core on the in-memory store (tests,
embedding); ``PaymentCore.sqlite(path)`` one on a SQLite file with the server key kept beside it;
``PaymentCore.postgresql(url)`` one on a PostgreSQL database that many processes share (psycopg is
imported only then).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import attrs

from paymentcore._domain.catalogue import Catalogue
from paymentcore._domain.models import Balance
from paymentcore._root.worker import Worker
from paymentcore._services.access import Access, RateBook
from paymentcore._services.collect import Collect
from paymentcore._services.deps import Deps
from paymentcore._services.disburse import Disburse
from paymentcore._services.idempotency import Idempotency
from paymentcore._services.ledger import check_invariant
from paymentcore._services.operator import Operator
from paymentcore._services.overview import work_backlog
from paymentcore._services.urlsafety import system_resolver
from paymentcore._services.webhooks import Webhooks
from paymentcore._services.work import Pump
from paymentcore.adapters.clock import RandomReferences, SystemClock
from paymentcore.adapters.memory import MemoryStore
from paymentcore.adapters.sandbox import SandboxNetwork
from paymentcore.adapters.secretbox import FernetSecretBox
from paymentcore.config import Config
from paymentcore.observe import Observer, WorkBacklog
from paymentcore.ports import (
    Clock,
    Network,
    References,
    Resolver,
    SecretBox,
    Store,
    StoreUnavailableError,
    WebhookSender,
)

_log = logging.getLogger("paymentcore.worker")
#: a suspect provider keeps this many calls in flight (a number that hangs does not stop the others)
NETWORK_SLOW_PER_PROVIDER = 4
LEASE_KEEP_MS = 3_600_000  # lease rows that ran out an hour ago are dropped (a dead worker's)


def _default_sender(config: Config | None = None) -> WebhookSender:
    from paymentcore.adapters.http_sender import HttpWebhookSender

    per_endpoint = (config or Config()).delivery_per_endpoint
    return HttpWebhookSender(per_endpoint=per_endpoint)


class PaymentCore:
    """Everything paymentcore does, behind one object.

    Services: ``collect``, ``disburse``, ``webhooks``, ``operator``, ``access``. ``tick()`` runs one round
    of background work (prompts and settlement, payout dispatch, webhook delivery); ``start_worker()``
    runs it in a thread.
    """

    def __init__(
        self,
        *,
        store: Store,
        network: Network | None = None,
        clock: Clock | None = None,
        refs: References | None = None,
        catalogue: Catalogue | None = None,
        config: Config | None = None,
        secret_box: SecretBox | None = None,
        sender: WebhookSender | None = None,
        resolver: Resolver | None = None,
        observer: Observer | None = None,
        rate_book: RateBook | None = None,
    ) -> None:
        config = config or Config()
        self.config = config
        self.deps = Deps(
            store=store,
            clock=clock or SystemClock(),
            refs=refs or RandomReferences(),
            network=network
            or SandboxNetwork(
                delay_seconds=config.sandbox_delay,
                hang=config.sandbox_hang,
                hang_seconds=config.sandbox_hang_seconds,
            ),
            catalogue=catalogue or Catalogue.default(),
            config=config,
            secret_box=secret_box or FernetSecretBox.generate(),
            resolver=resolver or system_resolver,
            sender=sender,
            make_sender=lambda: _default_sender(config),
            observer=observer or Observer(),
        )
        idem = Idempotency(
            retention_ms=config.idempotency_retention_hours * 3_600_000, box=self.deps.secret_box
        )
        self.access = Access(self.deps, rate_book)
        self._rate_book = rate_book
        self.operator = Operator(self.deps, self.access.sign_ins)
        self.collect = Collect(self.deps, idem)
        self.disburse = Disburse(self.deps, idem)
        self.webhooks = Webhooks(self.deps, idem)
        self.worker = Worker(self.deps, self.collect, self.disburse, self.webhooks, self.access.limiter)

    # --- construction ----------------------------------------------------------------------------

    @classmethod
    def memory(cls, **kwargs: Any) -> PaymentCore:
        """A core on the in-memory store."""
        return cls(store=MemoryStore(), **kwargs)

    @classmethod
    def sqlite(
        cls, path: str | Path, *, synchronous: str = "FULL", key_file: str | Path | None = None, **kwargs: Any
    ) -> PaymentCore:
        """A core on a SQLite file; the server key is ``<path>.key`` unless given."""
        from paymentcore.adapters.sqlite import SqliteStore
        from paymentcore.adapters.sqlite_rates import SqliteRateFile, rate_file_path

        path = Path(path)
        if "secret_box" not in kwargs:
            key_path = Path(key_file) if key_file is not None else path.with_name(path.name + ".key")
            try:
                kwargs["secret_box"] = FernetSecretBox.from_key_file(key_path)
            except OSError as exc:  # a read-only or missing folder
                raise StoreUnavailableError(
                    f"cannot use the SQLite database {path}: its server key {key_path} cannot be"
                    f" read or created ({exc.strerror or exc})"
                ) from exc
        if "sender" not in kwargs:
            kwargs["sender"] = _default_sender(kwargs.get("config"))
        try:
            store = SqliteStore(path, synchronous=synchronous)
        except sqlite3.Error as exc:  # a read-only file or folder, a file that is not a database, ...
            raise StoreUnavailableError(f"cannot use the SQLite database {path}: {exc}") from exc
        try:
            if "rate_book" not in kwargs:  # the rate-limit counters, beside the database
                rates = rate_file_path(path)
                try:
                    kwargs["rate_book"] = SqliteRateFile(rates)
                except sqlite3.Error as exc:
                    raise StoreUnavailableError(f"cannot use the rate-limit file {rates}: {exc}") from exc
            return cls(store=store, **kwargs)
        except BaseException:
            store.close()
            raise

    @classmethod
    def postgresql(
        cls,
        url: str,
        *,
        pool_size: int | None = None,
        key_file: str | Path | None = None,
        **kwargs: Any,
    ) -> PaymentCore:
        """A core on a PostgreSQL database, named by a libpq URL (``postgresql://USER@HOST:PORT/DB``).

        Any number of processes, on any number of machines, may open one database: they share the
        data, the rate-limit counters and the background work. The schema is created and migrated on
        first use. ``pool_size`` is the most connections this process opens (default
        ``$PAYMENTCORE_POOL_SIZE``, else 20). The server key that encrypts webhook secrets is kept in
        the database, so every process finds the same one, unless ``key_file`` names a key file
        (then every process must be given a copy of the same file).
        """
        import os

        from paymentcore.adapters.postgres import DEFAULT_POOL_SIZE, PostgresStore

        if pool_size is None:
            pool_size = int(os.environ.get("PAYMENTCORE_POOL_SIZE") or DEFAULT_POOL_SIZE)
        store = PostgresStore(url, pool_size=pool_size)
        try:
            if "secret_box" not in kwargs:
                kwargs["secret_box"] = (
                    FernetSecretBox.from_key_file(key_file)
                    if key_file is not None
                    else FernetSecretBox(store.server_key())
                )
            if "sender" not in kwargs:
                kwargs["sender"] = _default_sender(kwargs.get("config"))
            return cls(store=store, **kwargs)
        except BaseException:
            store.close()
            raise

    # --- conveniences ----------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        return self.deps.store

    @property
    def clock(self) -> Clock:
        return self.deps.clock

    @property
    def network(self) -> Network:
        return self.deps.network

    @property
    def catalogue(self) -> Catalogue:
        return self.deps.catalogue

    def ping(self, timeout: float = 0.5) -> None:
        """The health check: the database answers a query and takes writes, and so does the rate-limit
        file when the counters have one (SQLite's ``<database>-rates``), within about ``timeout`` s.

        Raises ``StoreUnavailableError``, or its ``StoreReadOnlyError`` when something answers but
        cannot be written. Never waits for a writer, never holds the write lock but for an instant.
        """
        if self._rate_book is None:
            self.store.ping(timeout)
            return
        self.store.ping(timeout / 2)
        self._rate_book.ping(timeout / 2)

    def check_ledger(self, merchant_id: str, currency: str) -> Balance:
        """Recompute one balance from the journal; raises LedgerInvariantError if the books are off."""
        with self.store.read() as tx:
            return check_invariant(tx, merchant_id, currency)

    def check_all_ledgers(self) -> list[Balance]:
        with self.store.read() as tx:
            merchants = tx.merchants.list()
            return [
                check_invariant(tx, merchant.id, balance.currency)
                for merchant in merchants
                for balance in tx.ledger.balances(merchant.id)
            ]

    # --- background work -------------------------------------------------------------------------

    def make_due(self, reference: str) -> None:
        """Ask the worker to look at an open collection or payout at its next round (tests, tooling)."""
        with self.store.transaction() as tx:
            now = self.clock.now()
            collection = tx.collections.get(reference)
            if collection is not None and collection.next_check_at is not None:
                due = min(collection.next_check_at, now)
                tx.collections.update(attrs.evolve(collection, next_check_at=due))
            payout = tx.payouts.get(reference)
            if payout is not None and payout.next_check_at is not None:
                tx.payouts.update(attrs.evolve(payout, next_check_at=min(payout.next_check_at, now)))

    def tick(self) -> int:
        """One round of background work; returns how many items were looked at."""
        return self.worker.tick()

    def run_until_idle(self, max_rounds: int = 50) -> None:
        """Tick until a round finds nothing due (tests and scripts)."""
        self.worker.run_until_idle(max_rounds)

    def start_worker(self, interval: float = 0.2) -> None:
        """Run the background work on threads of this process until :meth:`stop_worker`
        (:meth:`paymentcore._root.worker.Worker.start` says how)."""
        self.worker.start(interval)

    def stop_worker(self) -> None:
        self.worker.stop()

    @property
    def pumps(self) -> list[Pump]:
        """The running worker's pumps, one per kind of work (empty when no worker runs here)."""
        return self.worker.pumps

    def work_backlog(self) -> list[WorkBacklog]:
        """Per kind of work (collections, payouts, deliveries): how many items are due and waiting, and
        how many a worker holds under a lease, read from the store, so the same for every process on
        it (one read transaction; a worker's lease rows are in ``tx.leases``)."""
        with self.store.read() as tx:
            return work_backlog(tx, self.clock.now())

    def webhook_trouble(self) -> tuple[int, int]:
        """(failing, disabled): how many active webhook endpoints have failed events since their last
        delivered one, and how many endpoints are disabled, read from the store."""
        with self.store.read() as tx:
            return tx.webhooks.count_troubled()

    @property
    def observer(self) -> Observer:
        """What the core tells of status changes and delivery attempts (:mod:`paymentcore.observe`)."""
        return self.deps.observer

    def work_status(self) -> dict[str, tuple[int, int]]:
        """Per kind of work: (queued, in flight), as the running worker last saw it."""
        return self.worker.status()

    def close(self) -> None:
        network_close = getattr(self.deps.network, "close", None)
        if callable(network_close):  # a sandbox told to hang lets its calls end
            network_close()
        self.stop_worker()
        sender = self.deps.sender
        close = getattr(sender, "close", None)
        if callable(close):
            close()
        self.store.close()
        if self._rate_book is not None:  # a book of its own (SQLite's rate file); else the store
            self._rate_book.close()
