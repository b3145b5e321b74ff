"""SqliteStore: the storage port on one SQLite file, through sqlite-utils over connections we open.

Each thread gets its own connection (``isolation_level=None``, WAL, ``synchronous=FULL`` by default,
a busy timeout). A write transaction starts with ``BEGIN IMMEDIATE``, so it holds the write lock from
its first statement and a balance read inside it is still true when it writes; with group commit (the
default) the writes of a burst share one transaction and one fsync. Amounts are INTEGER columns
(sqlite-utils would store a Decimal as REAL); CHECK constraints back the ledger's promises. The schema is
migrated forward with ``PRAGMA user_version``.

The repositories are ``paymentcore.adapters.sql``'s, shared with PostgreSQL; this module keeps the
connections, the transactions and the migrations (the spend buckets and hourly counts generated from
the status sets of ``paymentcore._domain.queries``, the same definitions MemoryStore filters with).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import sqlite_utils

from paymentcore.adapters.schema import MIGRATIONS
from paymentcore.adapters.sql import SQLITE, Rows, SqlTransaction
from paymentcore.ports import StoreReadOnlyError, StoreUnavailableError

__all__ = [
    "MIGRATIONS",
    "SqliteStore",
    "SqliteTransaction",
    "T",
    "check_writes",
    "enable_wal",
    "ping_file",
]

T = TypeVar("T")


# --- the repositories: paymentcore.adapters.sql, on one connection ------------------------------


class _SqliteRows(Rows):
    def execute(self, sql: str, params: Any = (), *, lock: bool = True) -> Any:
        return self.conn.execute(sql, params)  # BEGIN IMMEDIATE already holds the write lock

    def execute_many(self, sql: str, rows: list[list[Any]]) -> None:
        self.conn.executemany(sql, rows)

    def hold_key(self, namespace: str, key: str) -> None:
        pass  # one writer: BEGIN IMMEDIATE already holds every key


class SqliteTransaction(SqlTransaction):
    """One unit of work on one connection: the repositories of ``ports.UnitOfWork``."""

    def __init__(self, conn: sqlite3.Connection, *, writable: bool = True) -> None:
        super().__init__(_SqliteRows(SQLITE, conn, writable=writable))


class SqliteStore:
    """The storage port on a SQLite file. ``synchronous`` is FULL (the default) or NORMAL."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "FULL",
        busy_timeout_ms: int = 60_000,
        group_commit: bool = True,
        max_batch: int = 64,
    ) -> None:
        if synchronous not in ("FULL", "NORMAL", "EXTRA"):
            raise ValueError("synchronous must be FULL, NORMAL or EXTRA")
        self.path = str(path)
        self._synchronous = synchronous
        self._busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self.migrate()
        self._group = _GroupCommit(self._connect, max_batch) if group_commit else None

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            isolation_level=None,
            check_same_thread=False,
            timeout=self._busy_timeout_ms / 1000,
        )
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        enable_wal(conn, self._busy_timeout_ms / 1000)
        conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        conn.execute("PRAGMA foreign_keys = ON")
        # a unit's savepoint keeps the pages it changes in a statement journal; in a file (the default)
        # that is a temporary file opened and written in every write transaction
        conn.execute("PRAGMA temp_store = MEMORY")
        return conn

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    def migrate(self) -> None:
        """Bring the schema up to date (idempotent; safe with several processes starting at once).

        A file already up to date is still made to take a write (rolled back), so a read-only file is
        refused here, at start, rather than by the first request that writes (SQLite opens a file it
        may not write read-only, without a word, and in WAL mode even ``BEGIN IMMEDIATE`` succeeds).
        """
        db = sqlite_utils.Database(self._conn())
        db.execute("BEGIN IMMEDIATE")
        try:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if version >= len(MIGRATIONS):
                check_writes(db.conn)
                db.execute("ROLLBACK")
                return
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                for statement in _statements(script):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {number}")
            db.execute("COMMIT")
        except BaseException:
            if db.conn.in_transaction:
                db.execute("ROLLBACK")
            raise

    def schema_version(self) -> int:
        return int(self._conn().execute("PRAGMA user_version").fetchone()[0])

    @contextmanager
    def transaction(self) -> Iterator[SqliteTransaction]:
        """A write transaction, durable when the block exits without an exception.

        With group commit (the default) every write transaction of this process runs on one writer
        connection in a shared SQLite transaction, each after the first inside a SAVEPOINT of its own;
        the last writer of a burst (or the 64th) commits, and every writer returns only after that
        COMMIT. One fsync then makes a whole burst durable, and a failing block rolls back only its own
        writes (the first, alone in the transaction so far, rolls the transaction back).
        """
        if self._group is None:
            conn = self._conn()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield SqliteTransaction(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return
        with self._group.transaction() as tx:
            yield tx

    @contextmanager
    def read(self) -> Iterator[SqliteTransaction]:
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            yield SqliteTransaction(conn, writable=False)
        finally:
            conn.execute("ROLLBACK")

    @contextmanager
    def glance(self) -> Iterator[SqliteTransaction]:
        """A read of independent facts (``ports.GlancingStore``): no BEGIN and ROLLBACK around it, each
        statement a snapshot of its own, so a lookup of one statement is one call into SQLite, not three.
        """
        yield SqliteTransaction(self._conn(), writable=False)

    def ping(self, timeout: float = 0.5) -> None:
        """Open the file afresh (never creating it), read its schema and check that it takes writes,
        within about ``timeout`` s (:func:`ping_file`).

        A fresh connection, not this thread's: a file moved, deleted, made unreadable or read-only
        since the process opened it is found out (connections already open keep the old file), and the
        busy timeout is ``timeout``, not the store's minute, so a held lock makes the ping fail quickly.
        In WAL mode a reader does not wait for a writer at all.
        """
        ping_file(self.path, timeout)

    def integrity_check(self) -> str:
        return str(self._conn().execute("PRAGMA integrity_check").fetchone()[0])

    def close(self) -> None:
        if self._group is not None:
            self._group.close()
        with self._all_lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()


class _Batch:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.size = 0


class _GroupCommit:
    """Leader/follower group commit on one writer connection (see SqliteStore.transaction)."""

    def __init__(self, connect: Any, max_batch: int) -> None:
        self._connect = connect
        self._conn: sqlite3.Connection | None = None
        self._max_batch = max_batch
        self._mutex = threading.Lock()  # who may run a transaction body on the writer connection
        self._count_lock = threading.Lock()
        self._waiting = 0  # threads queued for the mutex
        self._batch: _Batch | None = None
        self._owner: int | None = None

    def _writer(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    @contextmanager
    def transaction(self) -> Iterator[SqliteTransaction]:
        if self._owner == threading.get_ident():
            raise RuntimeError("write transactions do not nest")
        with self._count_lock:
            self._waiting += 1
        self._mutex.acquire()
        with self._count_lock:
            self._waiting -= 1
        self._owner = threading.get_ident()
        failure: BaseException | None = None
        batch: _Batch | None = None
        try:
            conn = self._writer()
            # the batch's first unit needs no savepoint: should it fail, the whole transaction, which
            # holds nothing else, is rolled back
            first = self._batch is None
            if first:
                conn.execute("BEGIN IMMEDIATE")
                self._batch = _Batch()
            batch = self._batch
            assert batch is not None
            if not first:
                conn.execute("SAVEPOINT unit")
            try:
                yield SqliteTransaction(conn)
            except BaseException as exc:
                failure = exc
                if first:  # the transaction holds this unit alone: rolled back whole, the batch ends
                    self._abort(batch, exc)
                else:
                    conn.execute("ROLLBACK TO unit")
                    conn.execute("RELEASE unit")
            else:
                if not first:
                    conn.execute("RELEASE unit")
                batch.size += 1
            with self._count_lock:
                alone = self._waiting == 0
            if not batch.done.is_set() and (alone or batch.size >= self._max_batch):
                self._commit(conn, batch)
        except BaseException as exc:  # BEGIN or the commit itself failed
            if batch is not None and not batch.done.is_set():
                self._abort(batch, exc)
            failure = failure or exc
        finally:
            self._owner = None
            self._mutex.release()
        if failure is not None:
            raise failure
        assert batch is not None
        batch.done.wait()
        if batch.error is not None:
            raise batch.error

    def _commit(self, conn: sqlite3.Connection, batch: _Batch) -> None:
        self._batch = None
        try:
            conn.execute("COMMIT")
        except BaseException as exc:
            self._abort(batch, exc, rollback=True)
            raise
        batch.done.set()

    def _abort(self, batch: _Batch, exc: BaseException, *, rollback: bool = True) -> None:
        self._batch = None
        if rollback and self._conn is not None and self._conn.in_transaction:
            self._conn.execute("ROLLBACK")
        batch.error = exc
        batch.done.set()

    def close(self) -> None:
        with self._mutex:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def enable_wal(conn: sqlite3.Connection, patience: float) -> None:
    """Switch to WAL, waiting (as the busy timeout would) up to ``patience`` s while another connection
    holds the lock: changing the journal mode ignores the busy handler, so a second process opening a
    fresh file while the first creates it retries here instead of failing with "database is locked"."""
    deadline = time.monotonic() + patience
    delay = 0.005
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
            continue
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"could not switch to WAL (mode {mode})")
        return


READ_ONLY = "the file is read-only"


def check_writes(conn: sqlite3.Connection) -> None:
    """Make ``conn`` (inside a write transaction the caller rolls back) write its file once, or raise
    ``sqlite3.OperationalError`` saying that the file is read-only.

    SQLite opens a file it may not write read-only, without an error; a WAL file then even grants
    ``BEGIN IMMEDIATE``, and only the first page written fails. Setting the schema's ``user_version``
    to what it is writes page 1 (in memory: nothing reaches the file before a COMMIT).
    """
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    try:
        conn.execute(f"PRAGMA user_version = {version}")
    except sqlite3.OperationalError as exc:
        if "readonly" not in str(exc):
            raise
        raise sqlite3.OperationalError(f"{READ_ONLY} ({exc})") from exc


def ping_file(path: str, timeout: float) -> None:
    """Open the SQLite file ``path`` afresh (never creating it), read its schema and check that it
    takes writes, within about ``timeout`` s; raise StoreUnavailableError, or StoreReadOnlyError.

    Writes are checked twice, both without waiting for the write lock: the process's own access to
    the file (what a mode of 444, the immutable attribute or a read-only mount refuses), then a write
    of the schema's ``user_version`` rolled back at once (:func:`check_writes`) in a ``BEGIN
    IMMEDIATE`` that does not wait (busy timeout 0): when another connection holds the write lock, the
    file is being written and that is answer enough; otherwise the lock is held for two statements.
    """
    uri = Path(path).resolve().as_uri() + "?mode=rw"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout = {max(1, int(timeout * 1000))}")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            if not os.access(path, os.W_OK):
                raise StoreReadOnlyError(f"{path}: {READ_ONLY}")
            conn.execute("PRAGMA busy_timeout = 0")
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    return  # another connection is writing the file
                raise
            try:
                check_writes(conn)
            finally:
                conn.execute("ROLLBACK")
        finally:
            conn.close()
    except sqlite3.OperationalError as exc:
        if str(exc).startswith(READ_ONLY):
            raise StoreReadOnlyError(f"{path}: {exc}") from exc
        raise StoreUnavailableError(f"{type(exc).__name__}: {exc}") from exc
    except sqlite3.Error as exc:
        raise StoreUnavailableError(f"{type(exc).__name__}: {exc}") from exc


def _statements(script: str) -> Iterator[str]:
    """Split a migration into statements, keeping trigger bodies whole."""
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statement = buffer.strip()
            if statement:
                yield statement
            buffer = ""
    if buffer.strip():
        yield buffer.strip()
