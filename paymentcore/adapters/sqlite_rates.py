"""The per-key rate-limit counters of a SQLite deployment, in a file of their own beside the database.

Every request counts against its key, so the counters are written on every request, reads included.
In the main database each of those writes would wait for the money's durable commit (an fsync with
``synchronous=FULL``) and queue behind payouts for the one writer. The counters need neither: losing
the last second of counts to a power cut costs nothing that matters, while a payout lost to one would.
So they live in ``<database>-rates``, a SQLite file in WAL mode with ``synchronous=NORMAL``: a commit
is a write to the WAL without an fsync (it survives any crash of the process; only a crash of the
machine may take back the newest counts), and every process on the machine that opens the same
database opens the same file, so they share one count per key and a restart keeps it.

Within a process one connection serves every thread, taken in turn under a lock, so threads queue on
that lock rather than on SQLite's busy handler (which sleeps); processes take turns through SQLite's
own lock. Each count is one short ``BEGIN IMMEDIATE`` transaction: the key's buckets are read and
bumped under the write lock, so racing requests take the last slots one at a time.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from paymentcore.adapters.sqlite import SqliteTransaction, check_writes, enable_wal, ping_file

__all__ = ["SqliteRateFile", "rate_file_path"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rate_counts (
    key_id TEXT NOT NULL,
    width INTEGER NOT NULL,
    start INTEGER NOT NULL,
    hits INTEGER NOT NULL,
    PRIMARY KEY (key_id, width, start)
) WITHOUT ROWID
"""


def rate_file_path(database: str | Path) -> Path:
    """Where the counters of the SQLite database ``database`` live."""
    path = Path(database)
    return path.with_name(path.name + "-rates")


class SqliteRateFile:
    """The rate-limit counters in their own SQLite file (see the module's docstring)."""

    def __init__(self, path: str | Path, *, busy_timeout_ms: int = 60_000) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000
        )
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            enable_wal(self._conn, busy_timeout_ms / 1000)
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._conn.execute(_SCHEMA)
            # a read-only file opens (read-only, silently) and takes no count: refuse it now
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                check_writes(self._conn)
            finally:
                self._conn.execute("ROLLBACK")
        except BaseException:
            self._conn.close()
            raise
        self._unit = SqliteTransaction(self._conn)  # of its repositories, only ``rates`` has a table here

    @contextmanager
    def transaction(self) -> Iterator[SqliteTransaction]:
        """One counting transaction, committed (to the WAL, without an fsync) when the block ends well."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._unit
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def ping(self, timeout: float = 0.5) -> None:
        """The file answers and takes writes, checked on a connection of its own without waiting for
        the counting lock (:func:`paymentcore.adapters.sqlite.ping_file`)."""
        ping_file(self.path, timeout)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
