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

import builtins
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from paymentcore.adapters.sqlite import check_writes, ping_file

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


class _Counts:
    """The counters as a rate repository (``paymentcore.ports.RateRepository``) on one connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def buckets(self, key_id: str, width: int, since: int) -> builtins.list[tuple[int, int]]:
        rows = self._conn.execute(
            "SELECT start, hits FROM rate_counts WHERE key_id = ? AND width = ? AND start >= ?"
            " ORDER BY start",
            (key_id, width, since),
        ).fetchall()
        return [(int(start), int(hits)) for start, hits in rows]

    def add(self, key_id: str, width: int, start: int, hits: int = 1) -> None:
        self._conn.execute(
            "INSERT INTO rate_counts (key_id, width, start, hits) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (key_id, width, start) DO UPDATE SET hits = hits + excluded.hits",
            (key_id, width, start, hits),
        )

    def purge(self, before: int) -> int:
        return self._conn.execute("DELETE FROM rate_counts WHERE start < ?", (before,)).rowcount


class _Unit:
    """What a counting transaction offers: the counters, as ``tx.rates``."""

    def __init__(self, rates: _Counts) -> None:
        self.rates = rates


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
            self._wal(busy_timeout_ms / 1000)
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
        self._unit = _Unit(_Counts(self._conn))

    def _wal(self, patience: float) -> None:
        """Switch to WAL; the switch ignores the busy handler, so wait out a process creating the file."""
        deadline = time.monotonic() + patience
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode = WAL").fetchone()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)

    @contextmanager
    def transaction(self) -> Iterator[_Unit]:
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
