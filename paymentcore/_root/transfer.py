"""Move a SQLite database to PostgreSQL: every record, in one PostgreSQL transaction, checked after.

:func:`copy_sqlite_to_postgresql` (the ``paymentcore migrate-to`` command) copies every table of a
paymentcore SQLite file into an empty PostgreSQL database (or schema) that it first brings to the same
schema version:

- The tables are discovered from the SQLite schema, so a table a later migration adds is carried too;
  SQLite's own tables (``sqlite_*``) are left, and the PostgreSQL bookkeeping (``schema_version``) is
  checked, not copied: both sides must be at the same migration.
- Values are copied as stored: integers stay integers (money is integer minor units, times integer
  milliseconds; a float or a text in an integer column is refused, never rounded), SQLite's 0/1 become
  PostgreSQL booleans, JSON and other text byte for byte. Rows go in the order SQLite wrote them
  (``rowid``), so PostgreSQL's ``seq`` columns keep "in the order written" for ties.
- The target's own triggers (the payout spend buckets, an audit trail) are switched off for the copy
  (``ALTER TABLE ... DISABLE TRIGGER USER``, inside the transaction, so no other session ever sees them
  off): the tables they keep are copied from the source as they are, never counted twice.
- The server key beside the SQLite file (``<db>.key``, which encrypts the webhook signing secrets and the
  stored answers of webhook registrations) goes into PostgreSQL's ``server_key`` table, so every process
  on the new database reads those secrets.

Before COMMIT, on the target: the row count and a digest of the content of every table equal the
source's, and every merchant's ledger holds (each entry sums to zero, the stored balance equals the one
replayed from the journal, credited = available + reserved + paid out) with the same balances per
currency as in the source. Any difference, or any refusal, rolls the whole copy back.

Refused, with nothing copied: a target that already holds data, a source that is not a paymentcore
database (or is newer than this paymentcore), a target that cannot be reached, schemas that do not
match, a server key that does not open the source's secrets.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import attrs
import psycopg
from cryptography.fernet import Fernet, InvalidToken
from psycopg import sql

from paymentcore._services.ledger import LedgerInvariantError, check_invariant
from paymentcore.adapters.postgres import MIGRATIONS as POSTGRES_MIGRATIONS
from paymentcore.adapters.postgres import PostgresStore, PostgresTransaction
from paymentcore.adapters.sqlite import MIGRATIONS as SQLITE_MIGRATIONS
from paymentcore.adapters.sqlite import SqliteStore, SqliteTransaction
from paymentcore.ports import StoreUnavailableError

__all__ = [
    "LedgerSummary",
    "TransferError",
    "TransferReport",
    "copy_sqlite_to_postgresql",
]

#: PostgreSQL tables that are not data: the migration bookkeeping, and the server key (filled from the
#: SQLite key file, and made by any process that started on the empty database)
BOOKKEEPING = ("schema_version", "server_key")
#: tables every paymentcore SQLite database has since its first migration
PAYMENTCORE_TABLES = frozenset({"merchants", "api_keys", "payouts", "balances", "ledger_entries"})
_INTEGER_TYPES = frozenset({"smallint", "integer", "bigint"})
_TEXT_TYPES = frozenset({"text", "character varying", "character"})
_READ_BATCH = 2_000


class TransferError(Exception):
    """The copy was refused or failed its checks; nothing was written to the target. One line."""


@attrs.frozen
class LedgerSummary:
    """What the ledger check covered on the target (it passed, or the copy was rolled back)."""

    merchants: int
    balances: int
    entries: int


@attrs.frozen
class TransferReport:
    """A committed copy: rows per table (the same on both sides), and what was checked."""

    source: str
    schema_version: int
    tables: tuple[tuple[str, int], ...]
    server_key: str | None  # the key file copied into ``server_key``, or None when there was none
    replaced_server_key: bool  # a process that started on the empty database had made another one
    upgraded_from: int | None  # the source's schema version when it had to be migrated first
    ledger: LedgerSummary

    @property
    def rows(self) -> int:
        return sum(count for _, count in self.tables)


@attrs.frozen
class _Column:
    name: str
    data_type: str
    identity: bool
    generated: bool
    optional: bool  # nullable or with a default: may be left out of the copy


def copy_sqlite_to_postgresql(
    source: str | Path, url: str, *, key_file: str | Path | None = None, lock_timeout: float = 10.0
) -> TransferReport:
    """Copy the paymentcore SQLite database ``source`` into the empty PostgreSQL database at ``url``.

    ``key_file`` is the SQLite database's server key (default ``<source>.key``). A source at an older
    schema version is migrated forward first, as any paymentcore command opening it would. Raises
    :class:`TransferError` (and writes nothing) when refused or when a check after the copy fails.
    """
    path = Path(source)
    if len(SQLITE_MIGRATIONS) != len(POSTGRES_MIGRATIONS):  # a paymentcore caught between two versions
        raise TransferError(
            f"this paymentcore's SQLite schema has {len(SQLITE_MIGRATIONS)} migrations and its PostgreSQL "
            f"schema {len(POSTGRES_MIGRATIONS)}: no copy between them is exact"
        )
    version = _source_version(path)
    key, key_path = _server_key(path, key_file)
    _check_target_is_empty(url)
    upgraded_from: int | None = None
    if version < len(SQLITE_MIGRATIONS):
        try:  # the forward migrations, as every command applies them on open
            SqliteStore(path).close()
        except sqlite3.Error as exc:
            raise TransferError(f"cannot migrate {path} forward from version {version}: {exc}") from None
        upgraded_from, version = version, _source_version(path)
    _migrate_target(url)
    try:
        with closing(_open_sqlite(path)) as src:
            src.execute("BEGIN")  # one snapshot of the source for the copy and its checks
            try:
                tables, ledger, replaced = _copy(src, url, version, key, lock_timeout)
            finally:
                src.execute("ROLLBACK")
    except sqlite3.Error as exc:
        raise TransferError(f"cannot read {path}: {exc}; nothing was copied") from None
    return TransferReport(
        source=str(path),
        schema_version=version,
        tables=tables,
        server_key=None if key is None else str(key_path),
        replaced_server_key=replaced,
        upgraded_from=upgraded_from,
        ledger=ledger,
    )


# --- the source --------------------------------------------------------------------------------------


def _open_sqlite(path: Path) -> sqlite3.Connection:
    """The file read-only (never created), as a SQLite URI."""
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)


def _source_version(path: Path) -> int:
    if not path.is_file():
        raise TransferError(f"{path}: no such SQLite database")
    try:
        with closing(_open_sqlite(path)) as conn:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as exc:
        raise TransferError(f"{path} is not a SQLite database ({exc})") from None
    if version < 1 or not tables >= PAYMENTCORE_TABLES:
        raise TransferError(f"{path} is not a paymentcore database (no paymentcore schema in it)")
    if version > len(SQLITE_MIGRATIONS):
        raise TransferError(
            f"{path} is at schema version {version}, newer than this paymentcore's "
            f"{len(SQLITE_MIGRATIONS)}: run migrate-to with the paymentcore that wrote it"
        )
    return version


def _server_key(path: Path, key_file: str | Path | None) -> tuple[bytes | None, Path]:
    """The source's server key, checked against a secret it encrypted; None when there is no key file
    and nothing encrypted needs one."""
    key_path = Path(key_file) if key_file is not None else path.with_name(path.name + ".key")
    with closing(_open_sqlite(path)) as conn:
        sample = _encrypted_sample(conn)
    if not key_path.is_file():
        if key_file is not None or sample is not None:
            raise TransferError(
                f"no server key at {key_path}: the webhook secrets of {path} cannot be read without the "
                "key the database was used with (give it with --key-file)"
            )
        return None, key_path
    key = key_path.read_bytes().strip()
    try:
        fernet = Fernet(key)
    except ValueError:
        raise TransferError(f"{key_path} is not a paymentcore server key (a Fernet key)") from None
    if sample is not None:
        try:
            fernet.decrypt(sample.encode())
        except InvalidToken:
            raise TransferError(
                f"{key_path} does not open the webhook secrets of {path}: give the key the database was "
                "used with (--key-file)"
            ) from None
    return key, key_path


def _encrypted_sample(conn: sqlite3.Connection) -> str | None:
    """One secret the server key encrypted (a webhook signing secret or a stored registration answer)."""
    row = conn.execute("SELECT secret_encrypted FROM webhooks LIMIT 1").fetchone()
    if row is not None:
        return str(row[0])
    row = conn.execute("SELECT body FROM idempotency WHERE body LIKE 'enc:%' LIMIT 1").fetchone()
    return None if row is None else str(row[0])[4:]


def _source_tables(src: sqlite3.Connection) -> list[str]:
    """Every table of the SQLite schema, in the order they were created, without SQLite's own."""
    return [
        str(row[0])
        for row in src.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
            " ORDER BY rowid"
        )
    ]


def _source_columns(src: sqlite3.Connection, table: str) -> list[str]:
    return [str(row[1]) for row in src.execute(f"PRAGMA table_info({_quote(table)})")]


def _source_rows(src: sqlite3.Connection, table: str, columns: list[str]) -> Iterator[tuple[Any, ...]]:
    """The rows in the order they were written (``rowid``), or any order for a WITHOUT ROWID table."""
    names = ", ".join(_quote(c) for c in columns)
    try:
        cursor = src.execute(f"SELECT {names} FROM {_quote(table)} ORDER BY rowid")
    except sqlite3.OperationalError:
        cursor = src.execute(f"SELECT {names} FROM {_quote(table)}")
    while batch := cursor.fetchmany(_READ_BATCH):
        yield from batch


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# --- the target --------------------------------------------------------------------------------------


def _connect(url: str) -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=10)
    except psycopg.Error as exc:
        raise TransferError(f"cannot use the PostgreSQL database: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())  # libpq's messages run over several lines


def _target_tables(conn: psycopg.Connection[Any]) -> dict[str, list[_Column]]:
    rows = conn.execute(
        "SELECT c.table_name, c.column_name, c.data_type, c.is_identity, c.is_generated,"
        " c.is_nullable, c.column_default"
        " FROM information_schema.columns c JOIN information_schema.tables t"
        " ON t.table_schema = c.table_schema AND t.table_name = c.table_name"
        " WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'"
        " ORDER BY c.table_name, c.ordinal_position"
    ).fetchall()
    tables: dict[str, list[_Column]] = {}
    for table, name, data_type, identity, generated, nullable, default in rows:
        tables.setdefault(str(table), []).append(
            _Column(
                name=str(name),
                data_type=str(data_type),
                identity=identity == "YES",
                generated=generated == "ALWAYS",
                optional=nullable == "YES"
                or default is not None
                or identity == "YES"
                or generated == "ALWAYS",
            )
        )
    return tables


def _tables_with_rows(conn: psycopg.Connection[Any], tables: list[str]) -> list[str]:
    found = []
    for table in tables:
        query = sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(sql.Identifier(table))
        row = conn.execute(query).fetchone()
        if row is not None and row[0]:
            found.append(table)
    return found


def _holds_data(tables: list[str]) -> TransferError:
    return TransferError(
        f"the PostgreSQL database already holds data (rows in {', '.join(sorted(tables))}): "
        "migrate-to copies into an empty database only"
    )


def _target_version(conn: psycopg.Connection[Any], tables: dict[str, list[_Column]]) -> int:
    if "schema_version" not in tables:
        return 0
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    return 0 if row is None else int(row[0])


def _check_target_is_empty(url: str) -> None:
    """Before anything is written anywhere: the target answers, has a schema, holds no data, is not
    newer than this paymentcore."""
    with _connect(url) as conn:
        row = conn.execute("SELECT current_schema()").fetchone()
        if row is None or row[0] is None:
            raise TransferError("the PostgreSQL database has no schema in its search_path to copy into")
        tables = _target_tables(conn)
        holding = _tables_with_rows(conn, [t for t in tables if t not in BOOKKEEPING])
        if holding:
            raise _holds_data(holding)
        version = _target_version(conn, tables)
    if version > len(POSTGRES_MIGRATIONS):
        raise TransferError(
            f"the PostgreSQL schema is at version {version}, newer than this paymentcore's "
            f"{len(POSTGRES_MIGRATIONS)}"
        )


def _migrate_target(url: str) -> None:
    """Create (or bring up to date) the schema, as the first process to start on it would."""
    try:
        PostgresStore(url, pool_size=1).close()
    except StoreUnavailableError as exc:
        raise TransferError(str(exc)) from None
    except psycopg.Error as exc:
        raise TransferError(f"cannot create the paymentcore schema: {_one_line(exc)}") from None


# --- the copy ----------------------------------------------------------------------------------------


def _copy(
    src: sqlite3.Connection, url: str, version: int, key: bytes | None, lock_timeout: float
) -> tuple[tuple[tuple[str, int], ...], LedgerSummary, bool]:
    names = _source_tables(src)
    replaced = False
    with _connect(url) as conn:
        try:
            with conn.transaction():
                target = _target_tables(conn)
                target_version = _target_version(conn, target)
                if target_version != version:
                    raise TransferError(
                        f"the schemas differ: the SQLite database is at version {version}, "
                        f"PostgreSQL at {target_version}"
                    )
                plans = [_plan(src, name, target) for name in names]
                data = [t for t in target if t not in BOOKKEEPING]
                conn.execute(f"SET LOCAL lock_timeout = {max(1, int(lock_timeout * 1000))}")
                try:  # nobody reads or writes these tables until COMMIT
                    conn.execute(
                        sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
                            sql.SQL(", ").join(sql.Identifier(t) for t in target)
                        )
                    )
                except psycopg.errors.LockNotAvailable:
                    raise TransferError(
                        "the PostgreSQL tables are in use: stop every paymentcore process on that "
                        "database, then run migrate-to again"
                    ) from None
                holding = _tables_with_rows(conn, data)
                if holding:
                    raise _holds_data(holding)
                counts = tuple((plan.table, plan.run(src, conn)) for plan in plans)
                if key is not None and "server_key" in target:
                    made = conn.execute("SELECT fernet_key FROM server_key WHERE id = 1").fetchone()
                    replaced = made is not None and str(made[0]).encode() != key
                    conn.execute(
                        "INSERT INTO server_key (id, fernet_key) VALUES (1, %s)"
                        " ON CONFLICT (id) DO UPDATE SET fernet_key = excluded.fernet_key",
                        (key.decode(),),
                    )
                ledger = _check_ledger(src, conn)
        except psycopg.errors.InsufficientPrivilege as exc:
            raise TransferError(
                f"the PostgreSQL role may not copy into the paymentcore tables with their triggers off "
                f"(it must own them, as the role that created them does): {_one_line(exc)}"
            ) from None
        except psycopg.Error as exc:
            raise TransferError(f"the copy failed and was rolled back: {_one_line(exc)}") from None
    return counts, ledger, replaced


@attrs.frozen
class _Plan:
    """How one table is copied: its columns, what each value becomes, the identity columns given."""

    table: str
    columns: tuple[str, ...]
    converters: tuple[Callable[[Any], Any], ...]
    canon: tuple[Callable[[Any], Any], ...]  # a target value as the source would hold it
    identities: tuple[str, ...]  # identity columns the copy fills (their sequences move past them)

    def run(self, src: sqlite3.Connection, conn: psycopg.Connection[Any]) -> int:
        table = sql.Identifier(self.table)
        columns = sql.SQL(", ").join(sql.Identifier(c) for c in self.columns)
        conn.execute(sql.SQL("ALTER TABLE {} DISABLE TRIGGER USER").format(table))
        source_digest = _Digest()
        copying = sql.SQL("COPY {} ({}) FROM STDIN").format(table, columns)
        with conn.cursor() as cursor, cursor.copy(copying) as copy:
            for row in _source_rows(src, self.table, list(self.columns)):
                copy.write_row(tuple(convert(v) for convert, v in zip(self.converters, row, strict=True)))
                source_digest.add(row)
        conn.execute(sql.SQL("ALTER TABLE {} ENABLE TRIGGER USER").format(table))
        for column in self.identities:
            conn.execute(
                sql.SQL(
                    "SELECT setval(pg_get_serial_sequence({}, {}), max({})) FROM {} HAVING count(*) > 0"
                ).format(sql.Literal(self.table), sql.Literal(column), sql.Identifier(column), table)
            )
        target_digest = _Digest()
        with conn.cursor(name="paymentcore_transfer") as cursor:
            cursor.itersize = _READ_BATCH
            cursor.execute(sql.SQL("SELECT {} FROM {}").format(columns, table))
            for row in cursor:
                target_digest.add(tuple(c(v) for c, v in zip(self.canon, row, strict=True)))
        if (target_digest.count, target_digest.value) != (source_digest.count, source_digest.value):
            raise TransferError(
                f"table {self.table} differs after the copy ({target_digest.count} rows in PostgreSQL, "
                f"{source_digest.count} in SQLite, or the same count with other values); rolled back"
            )
        return source_digest.count


class _Digest:
    """An order-free digest of a table's rows (a sum of row hashes), and their count."""

    def __init__(self) -> None:
        self.count = 0
        self.value = 0

    def add(self, row: tuple[Any, ...]) -> None:
        self.count += 1
        digest = hashlib.blake2b(repr(row).encode(), digest_size=16).digest()
        self.value = (self.value + int.from_bytes(digest, "big")) % (1 << 128)


def _plan(src: sqlite3.Connection, table: str, target: dict[str, list[_Column]]) -> _Plan:
    if table not in target or table in BOOKKEEPING:
        raise TransferError(f"the SQLite table {table} has no counterpart in the PostgreSQL schema")
    columns = _source_columns(src, table)
    by_name = {c.name: c for c in target[table]}
    missing = [c for c in columns if c not in by_name]
    if missing:
        raise TransferError(f"the column {table}.{missing[0]} has no counterpart in the PostgreSQL schema")
    unfilled = [c.name for c in target[table] if c.name not in columns and not c.optional]
    if unfilled:
        raise TransferError(f"the PostgreSQL column {table}.{unfilled[0]} is required and not in SQLite")
    generated = [c for c in columns if by_name[c].generated]
    if generated:
        raise TransferError(f"the PostgreSQL column {table}.{generated[0]} is generated and cannot be copied")
    return _Plan(
        table=table,
        columns=tuple(columns),
        converters=tuple(_converter(table, by_name[c]) for c in columns),
        canon=tuple(_canon(by_name[c]) for c in columns),
        identities=tuple(c for c in columns if by_name[c].identity),
    )


def _converter(table: str, column: _Column) -> Callable[[Any], Any]:
    """A source value as the target column takes it; anything inexact is refused, never coerced."""
    where = f"{table}.{column.name}"

    def refuse(value: Any, wanted: str) -> TransferError:
        return TransferError(f"{where} holds {value!r} ({type(value).__name__}), not {wanted}: not copied")

    if column.data_type == "boolean":

        def to_bool(value: Any) -> Any:
            if value is None:
                return None
            if type(value) is int and value in (0, 1):
                return bool(value)
            raise refuse(value, "a boolean (0 or 1)")

        return to_bool
    if column.data_type in _INTEGER_TYPES:

        def to_int(value: Any) -> Any:
            if value is None or type(value) is int:
                return value
            raise refuse(value, "an integer")

        return to_int
    if column.data_type in _TEXT_TYPES:

        def to_text(value: Any) -> Any:
            if value is None or type(value) is str:
                return value
            raise refuse(value, "text")

        return to_text
    if column.data_type == "bytea":

        def to_bytes(value: Any) -> Any:
            if value is None or type(value) is bytes:
                return value
            raise refuse(value, "bytes")

        return to_bytes

    def as_stored(value: Any) -> Any:
        if isinstance(value, float):
            raise refuse(value, f"a {column.data_type} value this copy keeps exact")
        return value

    return as_stored


def _canon(column: _Column) -> Callable[[Any], Any]:
    """A value read back from PostgreSQL as SQLite holds it (booleans as 0/1), for the digest."""
    if column.data_type == "boolean":
        return lambda v: None if v is None else int(v)
    return lambda v: v


# --- the ledger check --------------------------------------------------------------------------------


def _check_ledger(src: sqlite3.Connection, conn: psycopg.Connection[Any]) -> LedgerSummary:
    """Every merchant's books on the target hold and match the source's, balance by balance."""
    before = SqliteTransaction(src)
    after = PostgresTransaction(conn, writable=False, write_lock=0, rate_namespace=0)
    merchants = after.merchants.list()
    if [m.id for m in merchants] != [m.id for m in before.merchants.list()]:
        raise TransferError("the merchants (or their order) differ after the copy; rolled back")
    balances = entries = 0
    for merchant in merchants:
        theirs, ours = before.ledger.balances(merchant.id), after.ledger.balances(merchant.id)
        if theirs != ours:
            raise TransferError(f"the balances of merchant {merchant.id} differ after the copy; rolled back")
        for balance in ours:
            try:
                check_invariant(after, merchant.id, balance.currency)
            except LedgerInvariantError as exc:
                raise TransferError(
                    f"the ledger of merchant {merchant.id} in {balance.currency} does not hold: {exc} "
                    "(the source's books are off too: check it with the library's check_all_ledgers)"
                ) from None
            balances += 1
            entries += len(after.ledger.entries(merchant.id, balance.currency))
    return LedgerSummary(merchants=len(merchants), balances=balances, entries=entries)
