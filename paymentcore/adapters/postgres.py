"""PostgresStore: the storage port on PostgreSQL, through psycopg 3 and its connection pool.

Several API servers and workers, on several machines, share one database:

- A write unit of work is one transaction (READ COMMITTED) that takes, before its first statement, the
  store's write lock (a transaction-level advisory lock, one per schema), or, for a unit of one
  merchant's partition (:meth:`PostgresStore.transaction_for`: a payout, a charge, a webhook
  registration, the worker's steps on one merchant's item), that lock shared and the merchant's own
  lock. So a check made inside it (an idempotency key, a limit, the spend of the merchant's windows)
  still holds when it writes, in every process, while different merchants' money moves side by side.
  Read views are REPEATABLE READ, READ ONLY transactions: one snapshot, never waiting for a writer.
- A balance moves by one conditional statement (``UPDATE balances SET available = available + %s
  ... WHERE available + %s >= 0``), never read then written; CHECK constraints back the ledger.
- Inside a write unit of work the rows a worker claims (collections, payouts, events) are read with
  ``SELECT ... FOR UPDATE``.
- The rate-limit counters (``tx.rates``) take only their key's advisory lock, not the write lock, so
  counting requests never waits for payouts.
- The schema is created and migrated on first start with the same numbered migrations as SQLite, in
  PostgreSQL's dialect, under an advisory lock: processes starting together on an empty database take
  turns, and the later ones find it migrated.

Everything lives in the connection's current schema (the first of its ``search_path``), so one database
can hold several independent stores (the tests give each test its own schema). Which rows ``due`` and
``spent`` select is generated from ``paymentcore._domain.queries``, as for SQLite.
"""

from __future__ import annotations

import base64
import builtins
import hashlib
import json
import re
import secrets
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
from psycopg import adapt, generators, pq
from psycopg_pool import ConnectionPool, PoolTimeout

from paymentcore._domain.queries import UNSPENT_STATUSES
from paymentcore.adapters.schema import MIGRATIONS as SQLITE_MIGRATIONS
from paymentcore.adapters.sql import (
    POSTGRESQL,
    Rows,
    SqlTransaction,
    _Keys,
    _lookup_of,
    _Made,
    _Rates,
    sql_in,
    sql_not_in,
)
from paymentcore.ports import KeyLookup, StoreReadOnlyError, StoreUnavailableError

__all__ = [
    "DEFAULT_POOL_SIZE",
    "MIGRATIONS",
    "PostgresStore",
    "PostgresTransaction",
]

#: Connections per process (psycopg_pool's max_size): enough for the API's threads and the worker's.
DEFAULT_POOL_SIZE = 20


# --- the schema: SQLite's migrations, in PostgreSQL's dialect ------------------------------------

#: columns SQLite keeps as INTEGER 0/1 that are booleans here, and the INTEGER columns that stay 32-bit
#: (every other INTEGER, amounts and times in ms, is a BIGINT)
_BOOLEAN = {
    "api_enabled",
    "payouts_enabled",
    "revoked",
    "awaiting_review",
    "is_active",
    "ever_succeeded",
    "resent",
}
_INT32 = {
    "id",
    "collect_fee_ppm",
    "per_minute",
    "per_hour",
    "consecutive_failures",
    "attempts",
    "status_code",
}
_INT32 |= {"width", "hits", "redeliveries", "response_status", "item_count", "batch_index"}
#: tables with a `seq` column: "in the order written" for ties, as SQLite's rowid
_SEQ = {"merchants", "collections", "payouts", "ledger_entries", "events", "deliveries", "operators"}
_SEQ |= {"audit_log", "payout_batches"}
_SEQ_COLUMN = "seq BIGINT GENERATED ALWAYS AS IDENTITY"


def _column(match: re.Match[str]) -> str:
    name = match.group(2)
    kind = "BOOLEAN" if name in _BOOLEAN else "INTEGER" if name in _INT32 else "BIGINT"
    return f"{match.group(1)}{name} {kind}"


def _statement(sql: str) -> str:
    """One statement of a SQLite migration in PostgreSQL's dialect (a trigger: nothing, see _OWN)."""
    if sql.startswith("CREATE TRIGGER"):
        return ""
    sql = re.sub(r"(^\s+|ADD COLUMN )(\w+) INTEGER\b", _column, sql, flags=re.M)
    sql = re.sub(r"WHERE (\w+) = 1\b", r"WHERE \1", sql)  # a partial index on a boolean
    table = re.match(r"CREATE TABLE (\w+) \(", sql)
    if table and table.group(1) in _SEQ:
        lines = sql.split("\n")
        constraint = [i for i, line in enumerate(lines) if line.strip().startswith(("CHECK", "PRIMARY KEY"))]
        place = constraint[0] if constraint else len(lines) - 1
        lines[place - 1] = lines[place - 1].rstrip(",") + ","
        lines.insert(place, f"        {_SEQ_COLUMN}" + ("," if constraint else ""))
        sql = "\n".join(lines)
    return sql.replace(" TEXT", ' TEXT COLLATE "C"')  # text compares byte by byte, as in SQLite and Python


def _translate(script: str) -> str:
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(_statement(buffer.strip()))
            buffer = ""
    return "\n".join(s for s in statements if s)


def _guard(name: str, what: str) -> str:
    """A trigger function refusing every change of an append-only table (``what`` says which)."""
    return f"""
    CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION '{what} is append-only';
    END $$;"""


def _counter(name: str, body: str, *, update: str = "") -> str:
    """A row trigger's function (``body`` its statements), keeping a table that triggers maintain."""
    return f"""
    CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
        {update}{body}
        RETURN NULL;
    END $$;"""


def _hourly_counts(table: str, currency: str, amount: str) -> str:
    """Migration 7's hourly counts of ``table``, kept by one trigger function."""
    hours = f"{table[:-1]}_hours"
    move_out = (
        f"IF TG_OP = 'UPDATE' THEN UPDATE {hours} SET count = count - 1, amount = amount - OLD.{amount}"
        f" WHERE hour = OLD.created_at / 3600000 AND currency = OLD.{currency} AND status = OLD.status;"
        " END IF;\n        "
    )
    move_in = (
        f"INSERT INTO {hours} (hour, currency, status, count, amount)"
        f" VALUES (NEW.created_at / 3600000, NEW.{currency}, NEW.status, 1, NEW.{amount})"
        f" ON CONFLICT (hour, currency, status)"
        f" DO UPDATE SET count = {hours}.count + 1, amount = {hours}.amount + excluded.amount;"
    )
    return (
        _counter(f"{hours}_count", move_in, update=move_out)
        + f"""
    CREATE TRIGGER {hours}_insert AFTER INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION {hours}_count();
    CREATE TRIGGER {hours}_status AFTER UPDATE OF status ON {table}
        FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION {hours}_count();"""
    )


def _count_moves(table: str, currency: str, amount: str) -> str:
    """Migration 10: the hourly counts of ``table`` change by rows appended to ``<hours>_moves`` (a
    status move is a -1 and a +1), not by updates of the shared count rows, which every payout of a
    currency and hour would otherwise queue for, whatever its merchant; :meth:`PostgresStore.fold_counts`
    adds them into the counts, and a tally reads both."""
    hours = f"{table[:-1]}_hours"
    moves = f"{hours}_moves"
    out = (
        f"IF TG_OP = 'UPDATE' THEN INSERT INTO {moves} (hour, currency, status, count, amount)"
        f" VALUES (OLD.created_at / 3600000, OLD.{currency}, OLD.status, -1, -OLD.{amount});"
        " END IF;\n        "
    )
    into = (
        f"INSERT INTO {moves} (hour, currency, status, count, amount)"
        f" VALUES (NEW.created_at / 3600000, NEW.{currency}, NEW.status, 1, NEW.{amount});"
    )
    return f"""
    CREATE TABLE {moves} (
        hour BIGINT NOT NULL,
        currency TEXT COLLATE "C" NOT NULL,
        status TEXT COLLATE "C" NOT NULL,
        count BIGINT NOT NULL,
        amount BIGINT NOT NULL
    );
    CREATE INDEX {moves}_hour ON {moves} (hour);""" + _counter(f"{hours}_count", into, update=out).replace(
        "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"
    )


_SPEND_INSERT = (
    "INSERT INTO payout_spend (merchant_id, currency, hour, amount)"
    " VALUES (NEW.merchant_id, NEW.currency, NEW.created_at / 3600000, NEW.amount)"
    " ON CONFLICT (merchant_id, currency, hour) DO UPDATE SET amount = payout_spend.amount + excluded.amount;"
)
_SPEND_REJECTED = (
    "UPDATE payout_spend SET amount = amount - OLD.amount"
    " WHERE merchant_id = OLD.merchant_id AND currency = OLD.currency AND hour = OLD.created_at / 3600000;"
)

#: what PostgreSQL adds to each translated migration: the triggers (as functions), its server key
_OWN: dict[int, str] = {
    1: _guard("ledger_append_only", "the ledger")
    + """
    CREATE TRIGGER ledger_append_only_update BEFORE UPDATE OR DELETE ON ledger_entries
        FOR EACH ROW EXECUTE FUNCTION ledger_append_only();""",
    2: _counter("payout_spend_insert", _SPEND_INSERT)
    + f"""
    CREATE TRIGGER payout_spend_insert AFTER INSERT ON payouts
        FOR EACH ROW WHEN ({sql_not_in("NEW.status", UNSPENT_STATUSES)})
        EXECUTE FUNCTION payout_spend_insert();"""
    + _counter("payout_spend_rejected", _SPEND_REJECTED)
    + f"""
    CREATE TRIGGER payout_spend_rejected AFTER UPDATE OF status ON payouts FOR EACH ROW
        WHEN ({sql_not_in("OLD.status", UNSPENT_STATUSES)} AND {sql_in("NEW.status", UNSPENT_STATUSES)})
        EXECUTE FUNCTION payout_spend_rejected();""",
    # the key that encrypts webhook secrets, shared by every machine (unless given a key file)
    4: """
    CREATE TABLE server_key (id INTEGER PRIMARY KEY CHECK (id = 1), fernet_key TEXT COLLATE "C" NOT NULL);""",
    6: _guard("audit_append_only", "the audit trail")
    + f"""
    CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit_log
        FOR EACH ROW EXECUTE FUNCTION audit_append_only();
    CREATE TRIGGER audit_append_only_truncate BEFORE TRUNCATE ON audit_log
        FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();
    ALTER TABLE api_keys ADD COLUMN {_SEQ_COLUMN};""",
    7: _hourly_counts("payouts", "currency", "amount")
    + _hourly_counts("collections", "requested_currency", "requested_amount"),
    # append-only whatever the SQL: TRUNCATE of the ledger is refused as the audit trail's already was
    # (INSERT ... ON CONFLICT DO UPDATE and MERGE meet the row triggers), and every guard fires ALWAYS,
    # so session_replication_role = replica does not skip it
    8: """
    CREATE TRIGGER ledger_append_only_truncate BEFORE TRUNCATE ON ledger_entries
        FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();
    ALTER TABLE ledger_entries ENABLE ALWAYS TRIGGER ledger_append_only_update;
    ALTER TABLE ledger_entries ENABLE ALWAYS TRIGGER ledger_append_only_truncate;
    ALTER TABLE audit_log ENABLE ALWAYS TRIGGER audit_append_only;
    ALTER TABLE audit_log ENABLE ALWAYS TRIGGER audit_append_only_truncate;""",
    10: _count_moves("payouts", "currency", "amount")
    + _count_moves("collections", "requested_currency", "requested_amount"),
}

#: the same numbered migrations as SQLite's, in PostgreSQL's dialect
MIGRATIONS: tuple[str, ...] = tuple(
    _translate(script) + _OWN.get(number, "") for number, script in enumerate(SQLITE_MIGRATIONS, start=1)
)


def _lock_key(*parts: str) -> int:
    """A signed 64-bit advisory-lock key, the same in every process."""
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _lock_half(*parts: str) -> int:
    """A signed 32-bit half of a two-part advisory-lock key (a key space apart from the 64-bit one)."""
    digest = hashlib.sha256("\x00".join(parts).encode()).digest()
    return int.from_bytes(digest[:4], "big", signed=True)


# --- the repositories: paymentcore.adapters.sql, on one pooled connection ------------------------


#: the statements PREPARE takes (a transaction's commands, SET and the like are sent as they are)
_PREPARABLE = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH")
#: a statement is prepared on a connection the second time that connection sends it (one sent once,
#: a listing's rare shape, is not worth a round trip) ...
PREPARE_AT_USE = 2
#: ... and a connection prepares at most this many (the server keeps each one's plan for the
#: connection's life), and counts the uses of at most this many not prepared (then starts again)
MAX_PREPARED = 200
MAX_COUNTED = 1000
#: a lookup by a list of keys (``key IN (%s, %s, ...)``, a batch's rows) is never prepared: PostgreSQL
#: keeps the generic plan of a prepared statement, chosen once from the table's size then, for the
#: connection's life, and on a table still small (a new database's first minute, before any ANALYZE)
#: that plan is a sequential scan that compares every row with every key, still used when the table
#: holds thousands of rows (1.5-2 ms a batch of 16 events against 0.1 ms by the index); sent as text,
#: it is planned for the table as it is, once a batch (``docs/decisions.md``)
_KEY_LIST = re.compile(r"\bIN \((?:%s, )+%s\)")
#: a literal %, a positional value, a named value (psycopg's placeholders; one statement uses one kind)
_PLACEHOLDER = re.compile(r"%%|%s|%\((\w+)\)s")
#: what PostgreSQL answers to an EXECUTE whose statement is gone (DEALLOCATE, DISCARD) or whose plan a
#: change of the schema made impossible ("cached plan must not change result type")
PREPARED_STALE = ("26000", "0A000")


def _numbered(sql: str, named: bool) -> tuple[str, str] | None:
    """``sql`` with its placeholders numbered for PREPARE ($1, $2, ...: a named value once, however
    often it appears), and the values' placeholders in that order for its EXECUTE; None when the cut
    for binding (:func:`_template`) does not take it, or its placeholders are not of the kind its values
    are (positional or named)."""
    template = _template(sql)
    if template is None:
        return None
    text, count, names = template
    if (names is not None) != named and count:
        return None
    order = list(dict.fromkeys(names or ()))
    numbers = iter([order.index(name) + 1 for name in names] if names else range(1, count + 1))
    pieces = [
        "%" if piece == "%%" else f"${next(numbers)}" if piece == "%s" else piece
        for piece in _CUT.split(text.decode())
    ]
    values = [f"%({name})s" for name in order] if names else ["%s"] * count
    return "".join(pieces), ", ".join(values)


#: the statements' texts cut for binding: bytes for ``%`` with a ``%s`` per value, and the names of the
#: values in that order (None: positional values); None for a text the cut does not take (another
#: ``%`` form, named and positional values mixed), which psycopg's own binding then handles
_Template = tuple[bytes, int, tuple[str, ...] | None]
_templates: dict[str, _Template | None] = {}
_TEMPLATES_KEPT = 2000  # statements with a list of values (``IN (%s, %s, ...)``) come in many lengths
_OTHER_PERCENT = re.compile(r"%(?!%|s|\(\w+\)s)")
_CUT = re.compile(r"(%%|%s)")  # a template's literal % and its values' places


def _template(sql: str) -> _Template | None:
    try:  # one lookup: another thread may clear the dictionary between two
        return _templates[sql]
    except KeyError:
        pass
    names: list[str] = []
    count = 0
    found: _Template | None = None
    if _OTHER_PERCENT.search(sql.replace("%%", "")) is None:
        for match in _PLACEHOLDER.finditer(sql):
            if match.group() == "%%":
                continue
            count += 1
            if match.group(1) is not None:
                names.append(match.group(1))
        if not names or len(names) == count:
            text = _PLACEHOLDER.sub(lambda m: "%%" if m.group() == "%%" else "%s", sql)
            found = (text.encode(), count, tuple(names) if names else None)
    if len(_templates) >= _TEMPLATES_KEPT:
        _templates.clear()
    _templates[sql] = found
    return found


def _named(params: Any, names: tuple[str, ...]) -> list[Any] | None:
    """The named values in their placeholders' order; None when ``params`` does not name them all."""
    if not isinstance(params, Mapping):
        return None
    try:
        return [params[name] for name in names]
    except KeyError:
        return None


class _Prepared:
    """The statements prepared on one connection (PREPARE, then EXECUTE with the values bound on the
    client): PostgreSQL then parses and plans each once per connection, not at every use. A payout's
    inputs, one statement of four joins and four sums, cost the server 535-690 us to run as text and
    120-155 us prepared (``docs/performance.md``).

    A statement is prepared between units, on the idle connection, in a query of its own: PREPARE is
    no part of a transaction (it stays when one rolls back), and one that PostgreSQL refuses (a value
    whose type it cannot infer) is then sent as text for good, failing nothing. When an EXECUTE finds
    its statement gone or stale (:data:`PREPARED_STALE`), the unit fails as any failed statement fails
    it, and the connection forgets everything it prepared (:func:`_preparing`)."""

    __slots__ = ("calls", "literal", "load", "refused", "uses", "utf8", "waiting")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.calls: dict[str, str] = {}  # statement -> its EXECUTE, with a placeholder per value
        self.uses: dict[str, int] = {}  # statements not prepared (yet): how often sent
        self.refused: set[str] = set()
        self.waiting: list[tuple[str, bool]] = []  # to prepare once the connection is idle (named?)
        # the connection's adapters, one Transformer for the connection's life (rather than one a
        # statement), as a cursor keeps one: its dumpers write each value's SQL literal as psycopg's
        # client-side binding does (quoting, escaping), its loaders read the rows of each result
        self.load = adapt.Transformer(conn)
        self.literal = self.load.as_literal
        self.utf8 = conn.info.encoding == "utf-8"  # the statements' texts are cut as UTF-8

    def bound(self, conn: psycopg.Connection[Any], sql: str, params: Any) -> bytes:
        """``sql`` with ``params``, as the statement to send: its EXECUTE when it is prepared."""
        call = self.calls.get(sql)
        if call is not None:
            return self.bind(conn, call, params)
        text = self.bind(conn, sql, params)  # first: a statement that does not bind raises here
        if (
            len(self.calls) + len(self.waiting) < MAX_PREPARED
            and sql not in self.refused
            and sql.startswith(_PREPARABLE)
            and _KEY_LIST.search(sql) is None
        ):
            if len(self.uses) >= MAX_COUNTED:  # many statements sent once each: count afresh
                self.uses.clear()
            uses = self.uses[sql] = self.uses.get(sql, 0) + 1
            if uses == PREPARE_AT_USE:
                self.waiting.append((sql, isinstance(params, Mapping)))
        return text

    def bind(self, conn: psycopg.Connection[Any], sql: str, params: Any) -> bytes:
        """``sql`` with each value written as its literal: the text psycopg's ``mogrify`` gives, cut
        once per statement (:func:`_template`) instead of at every use; psycopg binds what the cut
        does not take, and raises for values that do not fit the placeholders."""
        template = _template(sql) if self.utf8 else None
        if template is not None:
            text, count, names = template
            values = params if names is None else _named(params, names)
            if values is not None and len(values) == count and not isinstance(values, str | bytes):
                literal = self.literal
                return text % tuple(b"NULL" if value is None else literal(value) for value in values)
        return psycopg.ClientCursor(conn).mogrify(sql, params).encode(conn.info.encoding)

    def prepare_waiting(self, conn: psycopg.Connection[Any]) -> None:
        """PREPARE the statements waiting, if ``conn`` is idle (outside any transaction)."""
        if not self.waiting:
            return
        waiting, self.waiting = self.waiting, []
        for sql, named in waiting:
            self.uses.pop(sql, None)  # prepared, refused, or counted afresh
            if conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                continue
            numbered = _numbered(sql, named)
            name = f"pc_{len(self.calls) + len(self.refused) + 1}"
            if numbered is None:
                self.refused.add(sql)
                continue
            try:  # sent as it is, one simple query (no value is bound into it)
                psycopg.ClientCursor(conn).execute(f"PREPARE {name} AS {numbered[0]}")
            except psycopg.Error:
                self.refused.add(sql)
                continue
            self.calls[sql] = f"EXECUTE {name}({numbered[1]})" if numbered[1] else f"EXECUTE {name}"


def _prepared(conn: psycopg.Connection[Any], *, afresh: bool = False) -> _Prepared:
    """``conn``'s prepared statements (kept on the connection: a new connection has none); ``afresh``:
    none, the server's deallocated (after an EXECUTE found its statement gone or stale)."""
    found: _Prepared | None = getattr(conn, "_paymentcore_prepared", None)
    if found is None or afresh:
        if afresh:
            conn.execute("DEALLOCATE ALL")
        found = _Prepared(conn)
        conn._paymentcore_prepared = found  # type: ignore[attr-defined]
    return found


@contextmanager
def _preparing(conn: psycopg.Connection[Any], unit: PostgresTransaction) -> Iterator[PostgresTransaction]:
    """A unit on ``conn`` (its block, then its end, inside this one): once it has ended, the
    statements it sent a second time are prepared; when it met a prepared statement gone stale, the
    connection forgets what it prepared, and the next unit on it prepares afresh."""
    try:
        yield unit
    except psycopg.Error as failure:
        if failure.sqlstate in PREPARED_STALE and not conn.closed:
            with suppress(psycopg.Error):
                _prepared(conn, afresh=True)
        raise
    unit.rows.prepared.prepare_waiting(conn)


_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_ANSWERED = (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK, pq.ExecStatus.EMPTY_QUERY)


def _query(conn: psycopg.Connection[Any], text: bytes) -> list[pq.abc.PGresult]:
    """Send ``text`` (statements bound on the client, one simple query) and wait for every result, as
    ``ClientCursor.execute`` does without a cursor's bookkeeping (the results are read as
    :meth:`_PostgresRows.send` needs them); raises the first error as psycopg's own exception."""
    with conn.lock:
        if conn.closed:
            raise psycopg.OperationalError("the connection is closed")
        conn.pgconn.send_query(text)
        results: list[pq.abc.PGresult] = conn.wait(generators.execute(conn.pgconn))
    if not results:
        raise psycopg.InternalError("got no result from the query")
    for result in results:
        if result.status not in _ANSWERED:
            if result.status == pq.ExecStatus.FATAL_ERROR:
                raise psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
            raise psycopg.InternalError(f"unexpected result status: {pq.ExecStatus(result.status).name}")
    return results


class _Answer:
    """A statement's answer, known once the unit has sent it: asking for it (its rows, its row count)
    sends every statement of the unit not sent yet, in one round trip."""

    __slots__ = ("_count", "_found", "_next", "_rows")

    def __init__(self, rows: _PostgresRows) -> None:
        self._rows = rows
        self._count = -1
        self._found: list[Any] | None = None
        self._next = 0

    def known(self, count: int, found: list[Any]) -> None:
        self._count, self._found = count, found

    def all_rows(self) -> list[Any]:
        if self._found is None:
            self._rows.send()
        assert self._found is not None
        return self._found

    def fetchone(self) -> Any:
        found = self.all_rows()
        if self._next >= len(found):
            return None
        self._next += 1
        return found[self._next - 1]

    def fetchall(self) -> list[Any]:
        found = self.all_rows()
        rest, self._next = found[self._next :], len(found)
        return rest

    @property
    def rowcount(self) -> int:
        self.all_rows()
        return self._count


class _PostgresRows(Rows):
    """A unit's statements, bound on the client (:meth:`_Prepared.bind`) and kept until an answer
    is asked for: then every statement not sent yet goes in one query of several statements, one round
    trip, and the unit's end sends the rest with its COMMIT (or ROLLBACK). psycopg's pipeline mode gives
    the same round trips but waits on the socket, and hands the interpreter's lock over, once per
    statement: a payout's unit cost about 2.7 times the client CPU (``docs/decisions.md``).

    In a write unit of work the first statement (but a rate counter's) takes the store's write lock,
    or, for a unit of one merchant's partition, that lock shared and the merchant's own; a rate counter
    takes its key's own advisory lock instead (``hold_key``)."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        *,
        writable: bool,
        write_lock: int,
        rate_namespace: int,
        partition: str | tuple[str, ...] | None = None,
        partitions: int = 0,
    ) -> None:
        super().__init__(POSTGRESQL, conn, writable=writable)
        self.prepared = _prepared(conn)
        self._write_lock = write_lock
        self._namespace = rate_namespace
        self.partition = partition
        self._partitions = partitions
        self._locked = False  # this unit holds its write lock
        self._held: set[tuple[str, str]] = set()  # the keys whose own locks it holds
        self._kept: list[tuple[bytes, _Answer]] = []  # statements not sent yet, bound, with their answers
        self._refusals: list[tuple[_Answer, str]] = []  # the checked writes, with what each refuses
        self._began = False  # a query of this unit has been sent
        self._failed = False  # one of its queries failed: the transaction is aborted, nothing commits
        self._status = ""  # the command tag of the last statement sent

    def keep(self, sql: str, params: Any = ()) -> _Answer:
        """Keep a statement to send with the next one whose answer is asked for."""
        answer = _Answer(self)
        self._kept.append((self.prepared.bound(self.conn, sql, params), answer))
        return answer

    def send(self, last: str | None = None) -> None:
        """Send the statements kept (and ``last``, the unit's end) in one query; their answers are then
        known. A checked write that changed no row raises KeyError with what it refuses."""
        kept, self._kept = self._kept, []
        if last is not None:
            kept.append((last.encode(), _Answer(self)))
        if not kept:
            return
        if self._failed:
            raise RuntimeError("a statement of this unit failed: its transaction is aborted")
        self._began = True
        try:
            results = _query(self.conn, b"; ".join(text for text, _ in kept))
        except psycopg.errors.DivisionByZero:  # a checked write changed nothing (write_checked)
            self._failed = True
            sent = {id(answer) for _, answer in kept}
            refusals = [refused for answer, refused in self._refusals if id(answer) in sent]
            raise KeyError(refusals[0] if len(refusals) == 1 else " or ".join(refusals)) from None
        except BaseException:
            self._failed = True
            raise
        load = self.prepared.load
        for (_, answer), result in zip(kept, results, strict=True):
            status = result.command_status
            self._status = status.decode() if status else ""
            if result.status == _TUPLES_OK:
                load.set_pgresult(result)
                count = result.ntuples
                answer.known(count, load.load_rows(0, count, tuple))
            else:
                tuples = result.command_tuples
                answer.known(-1 if tuples is None else tuples, [])

    def finish(self, last: str) -> None:
        """The unit's end: what is kept, then ``last`` (COMMIT or ROLLBACK), in one query; nothing
        when the unit sent nothing and kept only its BEGIN (it read and wrote nothing)."""
        if not self._began and len(self._kept) <= 1:
            self._kept.clear()
            return
        self.send(last)
        if last == "COMMIT" and self._status != "COMMIT":  # PostgreSQL answers ROLLBACK to an aborted one
            raise RuntimeError(f"the unit's COMMIT was answered {self._status or 'nothing'}: nothing written")

    def execute(self, sql: str, params: Any = (), *, lock: bool = True) -> Any:
        if lock:
            self._lock()
        return self.keep(sql, params)  # the dialect wrote "%%" for "%": params always given

    def _lock(self) -> None:
        """The unit's write lock, before its first statement that needs it (a read view takes none)."""
        if self.writable and not self._locked:
            if self.partition is None:  # the whole store: every other writer waits
                self.keep("SELECT pg_advisory_xact_lock(%s)", (self._write_lock,))
            else:  # merchants' partitions: only their writers (and whole-store writers) wait; none
                # (a claim's unit, ``partition=()``): the store's lock shared, and its rows' own locks
                merchants = (self.partition,) if isinstance(self.partition, str) else self.partition
                # several merchants' locks in one order everywhere (their keys'), so two units of
                # several merchants never hold one each of two locks the other waits for
                halves = sorted({_lock_half("merchant", merchant) for merchant in merchants})
                self.keep(
                    "SELECT pg_advisory_xact_lock_shared(%s)"
                    + ", pg_advisory_xact_lock(%s, %s)" * len(halves),
                    (self._write_lock, *(part for half in halves for part in (self._partitions, half))),
                )
            self._locked = True

    def write_checked(self, sql: str, params: Any, refused: str) -> bool:
        """The write is kept with the unit's other statements, and checks itself in the server: one
        that changed no row divides by zero, which aborts the unit's transaction (the COMMIT sent after
        it commits nothing) and is raised as KeyError(``refused``). So a unit's checked writes (its
        updates, its moves of money held) wait for no answer: a worker's batch of claims or outcomes,
        a payout's reservation, travel with the COMMIT."""
        exactly_one = "SELECT 1 / (count(*) = 1)::int FROM changed"  # 1 / 0 unless one row changed
        self._refusals.append(
            (self.write(f"WITH changed AS ({sql} RETURNING 1) {exactly_one}", params), refused)
        )
        return True

    def one_later(self, sql: str, params: Any = ()) -> Callable[[], Any]:
        answer: _Answer = self.run(sql, params)  # kept: sent with the next answer asked for

        def first() -> Any:  # the same row however often it is asked for, as on the other stores
            found = answer.all_rows()
            return found[0] if found else None

        return first

    def execute_many(self, sql: str, rows: list[list[Any]]) -> None:
        """Every row kept, sent with the unit's next query."""
        self._lock()
        for row in rows:
            self.keep(sql, row)

    def hold_keys(self, namespace: str, keys: Sequence[str]) -> None:
        """The keys' locks in one statement, taken one after another in the keys' order (the order in
        which every unit, and the releases that took them one statement each, take them)."""
        halves: list[int] = []
        for key in sorted(set(keys)):
            half = _lock_half(namespace, key)
            if (namespace, key) not in self._held and half not in halves:
                halves.append(half)
        if halves:
            self.keep(
                "SELECT " + ", ".join("pg_advisory_xact_lock(%s, %s)" for _ in halves),
                [part for half in halves for part in (self._namespace, half)],
            )
        self._held.update((namespace, key) for key in keys)

    def hold_key_found(self, namespace: str, column: str, rest: str, params: Sequence[Any]) -> None:
        """:meth:`hold_key` of the key the statement finds (:func:`_lock_half`, worked out by the
        server: the first four bytes of the SHA-256 of the namespace, a zero byte and the key)."""
        prefix = (namespace + "\x00").encode().hex()
        digest = f"sha256(decode('{prefix}', 'hex') || convert_to({column}, 'UTF8'))"
        half = f"('x' || encode(substring({digest} from 1 for 4), 'hex'))::bit(32)::int"
        self.keep(
            f"SELECT pg_advisory_xact_lock(%s, {half}) {POSTGRESQL.sql(rest)}", (self._namespace, *params)
        )

    def hold_key(self, namespace: str, key: str) -> None:
        if (namespace, key) not in self._held:
            self.keep("SELECT pg_advisory_xact_lock(%s, %s)", (self._namespace, _lock_half(namespace, key)))
            self._held.add((namespace, key))


class _PostgresKeys(_Keys):
    """The keys, and a request's lookup and rate count in one statement (``Access.admit``)."""

    def admit_later(
        self, key_hash: str, windows: Sequence[tuple[int, int, int]]
    ) -> Callable[[], tuple[KeyLookup | None, builtins.list[builtins.list[tuple[int, int]]], bool]]:
        """:meth:`lookup`, and one request of the key counted as ``_PostgresRates.count_later`` counts a hit
        (``(width, since, start)`` each: the minute's window, then the hour's; their ceilings the key's
        own) when the key admits it (not revoked, its merchant there, the API switched on): kept with
        the unit's statements, so that a unit of nothing else is one round trip. The key's rate lock is
        taken first, by a statement that finds the key: the count's statement, whose snapshot then
        holds every earlier count of the key, finds what it looks up and counts in one snapshot. What
        it gives, once sent: the lookup, what the windows held before the hit, whether it was counted.
        A WITH that writes: PostgreSQL's."""
        rows = self._rows
        assert isinstance(rows, _PostgresRows)
        rows.hold_key_found("rate", "k.id", "FROM api_keys AS k WHERE k.key_hash = ?", (key_hash,))
        ceilings = ("k.per_minute", "k.per_hour")
        held = " UNION ALL ".join(
            "SELECT width, start, hits FROM rate_counts WHERE key_id = (SELECT id FROM admitted)"
            " AND width = ? AND start >= ?"
            for _ in windows
        )
        room = " AND ".join(
            f"(SELECT coalesce(sum(hits), 0) FROM held WHERE width = ?) < {ceiling}"
            for ceiling, _ in zip(ceilings, windows, strict=True)
        )
        buckets = ", ".join("(CAST(? AS INTEGER), CAST(? AS BIGINT))" for _ in windows)
        answer = rows.run(
            "WITH admitted AS (SELECT k.id, k.per_minute, k.per_hour FROM api_keys AS k"
            " JOIN merchants AS m ON m.id = k.merchant_id LEFT JOIN settings AS s ON s.id = 1"
            " WHERE k.key_hash = ? AND NOT k.revoked AND coalesce(s.api_enabled, TRUE)),"
            f" held AS ({held}),"
            " added AS (INSERT INTO rate_counts (key_id, width, start, hits)"
            f" SELECT k.id, v.w, v.s, 1 FROM admitted AS k, (VALUES {buckets}) AS v (w, s) WHERE {room}"
            " ON CONFLICT (key_id, width, start) DO UPDATE SET hits = rate_counts.hits + 1 RETURNING 1)"
            f" SELECT {self._LOOKED_UP}, (SELECT coalesce(json_agg(json_build_array(width, start, hits)"
            f" ORDER BY width, start), '[]') FROM held), (SELECT count(*) FROM added){self._FOUND}",
            [
                key_hash,
                *(v for width, since, _ in windows for v in (width, since)),
                *(v for width, _, start in windows for v in (width, start)),
                *(width for width, _, _ in windows),
                key_hash,
            ],
            lock=False,
        )
        place = {width: n for n, (width, _, _) in enumerate(windows)}

        def read() -> tuple[KeyLookup | None, builtins.list[builtins.list[tuple[int, int]]], bool]:
            row = answer.fetchone()
            found: builtins.list[builtins.list[tuple[int, int]]] = [[] for _ in windows]
            if row is None:
                return None, found, False
            *looked_up, held_rows, added = row
            for width, start, hits in held_rows if isinstance(held_rows, list) else json.loads(held_rows):
                found[place[int(width)]].append((int(start), int(hits)))
            return _lookup_of(looked_up), found, int(added) > 0

        return read


class _PostgresRates(_Rates):
    """The rate counters, and one hit counted in the statement that reads its buckets."""

    def count_later(
        self, key_id: str, windows: Sequence[tuple[int, int, int, int]]
    ) -> Callable[[], tuple[builtins.list[builtins.list[tuple[int, int]]], bool]]:
        """One hit of ``key_id``, added to its bucket of each window (``(width, since, start, ceiling)``
        each) only when every window holds fewer hits than its ceiling, in one statement kept with the
        unit's others: what each window held before it, and whether it was counted, once the unit has
        sent it (its end, in a unit of nothing else). A WITH that writes: PostgreSQL's; the key's
        lock is taken first, so the statement's snapshot holds every earlier count of the key."""
        self._rows.hold_key("rate", key_id)
        held = " UNION ALL ".join(
            "SELECT width, start, hits FROM rate_counts WHERE key_id = ? AND width = ? AND start >= ?"
            for _ in windows
        )
        room = " AND ".join("(SELECT coalesce(sum(hits), 0) FROM held WHERE width = ?) < ?" for _ in windows)
        buckets = ", ".join("(CAST(? AS INTEGER), CAST(? AS BIGINT))" for _ in windows)
        answer = self._rows.run(
            f"WITH held AS ({held}), added AS (INSERT INTO rate_counts (key_id, width, start, hits)"
            f" SELECT CAST(? AS TEXT), w, s, 1 FROM (VALUES {buckets}) AS v (w, s) WHERE {room}"
            " ON CONFLICT (key_id, width, start) DO UPDATE SET hits = rate_counts.hits + 1 RETURNING 1)"
            " SELECT width, start, hits FROM held UNION ALL SELECT -1, count(*), 0 FROM added"
            " ORDER BY 1, 2",
            [
                *(v for width, since, _, _ in windows for v in (key_id, width, since)),
                key_id,
                *(v for width, _, start, _ in windows for v in (width, start)),
                *(v for width, _, _, ceiling in windows for v in (width, ceiling)),
            ],
            lock=False,
        )
        place = {width: n for n, (width, _, _, _) in enumerate(windows)}

        def read() -> tuple[builtins.list[builtins.list[tuple[int, int]]], bool]:
            found: builtins.list[builtins.list[tuple[int, int]]] = [[] for _ in windows]
            counted = False
            for width, start, hits in answer.fetchall():
                if width == -1:
                    counted = int(start) > 0
                else:
                    found[place[width]].append((int(start), int(hits)))
            return found, counted

        return read


class PostgresTransaction(SqlTransaction):
    """One unit of work on one pooled connection: the repositories of ``ports.UnitOfWork``, the keys
    and the rate counters with what only PostgreSQL's statements can do (a WITH that writes)."""

    keys = _Made(_PostgresKeys)
    rates = _Made(_PostgresRates)

    def __init__(self, conn: psycopg.Connection[Any], **rows: Any) -> None:
        """``rows``: how its statements run (``writable``, the lock keys, the partition:
        the keyword arguments of ``_PostgresRows``)."""
        self.rows = _PostgresRows(conn, **rows)
        super().__init__(self.rows)


def _configure(conn: psycopg.Connection[Any]) -> None:
    """A new connection's session: no JIT compilation. The store's statements are short and run by the
    thousand; the planner's cost estimate of a listing (a recursive walk whose row counts it cannot
    know) passes the JIT threshold, and compiling then took 20 ms of a 5 ms query."""
    conn.execute("SET jit = off")


class PostgresStore:
    """The storage port on a PostgreSQL database named by a libpq URL (or any conninfo string).

    ``pool_size`` connections at most per process (``DEFAULT_POOL_SIZE``); a unit of work waits up to
    ``timeout`` seconds for one. The schema is migrated on construction unless ``migrate=False``.
    """

    #: as a rate book: a count takes only its keys' locks, so counts of different keys wait for
    #: nothing of each other and the rate limiter gives each key a lane of its own
    counts_by_key = True

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        timeout: float = 30.0,
        migrate: bool = True,
    ) -> None:
        if pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        self.url = url
        self.pool_size = pool_size
        try:  # one connection first: a wrong URL, a refused login or a server that is down fail at once
            with psycopg.connect(url, autocommit=True, connect_timeout=max(1, int(timeout))) as conn:
                row = conn.execute("SELECT current_database(), current_schema()").fetchone()
        except psycopg.Error as exc:
            reason = " ".join(str(exc).split())  # libpq's message runs over several lines
            raise StoreUnavailableError(f"cannot use the PostgreSQL database: {reason}") from exc
        assert row is not None
        database, schema = str(row[0]), row[1]
        if schema is None:
            raise StoreUnavailableError(f"{database}: no schema of the search_path exists")
        self.schema = str(schema)
        self._write_lock = _lock_key("paymentcore.write", self.schema)
        self._migrate_lock = _lock_key("paymentcore.migrate", self.schema)
        self._fold_lock = _lock_key("paymentcore.fold", self.schema)
        self._rate_namespace = _lock_half("paymentcore.rate", self.schema)
        self._partitions = _lock_half("paymentcore.merchant", self.schema)
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            timeout=timeout,
            # prepare_threshold None: psycopg prepares nothing of its own; the store prepares its
            # statements itself (_Prepared), and psycopg, once it had prepared one, answered a
            # ROLLBACK sent through it with DEALLOCATE ALL, which dropped the store's too
            kwargs={"autocommit": True, "application_name": "paymentcore", "prepare_threshold": None},
            configure=_configure,
            open=False,
            name="paymentcore",
        )
        self._pool.open(wait=True, timeout=timeout)
        try:
            if migrate:
                self.migrate()
        except BaseException:
            self._pool.close()
            raise

    # --- schema ------------------------------------------------------------------------------

    def migrate(self) -> None:
        """Bring the schema up to date, in one transaction under an advisory lock (idempotent; safe with
        several processes starting at once on an empty database: the later ones wait, then find it done)."""
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._migrate_lock,))
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT version FROM schema_version").fetchone()
            if row is None:
                conn.execute("INSERT INTO schema_version (version) VALUES (0)")
                version = 0
            else:
                version = int(row[0])
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                conn.execute(script.encode())
                conn.execute("UPDATE schema_version SET version = %s", (number,))

    def schema_version(self) -> int:
        with self._pool.connection() as conn:
            row = conn.execute("SELECT version FROM schema_version").fetchone()
        return 0 if row is None else int(row[0])

    def server_key(self) -> bytes:
        """The Fernet key kept in the database (made once, by whichever process asks first)."""
        with self._pool.connection() as conn, conn.transaction():
            candidate = secrets.token_bytes(32)  # what Fernet.generate_key() makes
            conn.execute(
                "INSERT INTO server_key (id, fernet_key) VALUES (1, %s) ON CONFLICT (id) DO NOTHING",
                (base64.urlsafe_b64encode(candidate).decode(),),
            )
            row = conn.execute("SELECT fernet_key FROM server_key WHERE id = 1").fetchone()
        assert row is not None
        return str(row[0]).encode()

    # --- units of work -------------------------------------------------------------------------

    @contextmanager
    def _unit(
        self, begin: str, *, writable: bool, partition: str | tuple[str, ...] | None = None
    ) -> Iterator[PostgresTransaction]:
        # a statement whose answer nobody asks for yet (BEGIN, the locks, an INSERT, a checked write)
        # is sent with the next one whose answer is asked for, and the rest with the COMMIT: a unit
        # of work costs one round trip per answer it waits for, plus one for its end
        with self._pool.connection() as conn:
            made = self._transaction(conn, writable=writable, partition=partition)
            with _preparing(conn, made) as unit:
                unit.rows.keep(begin)
                try:
                    yield unit
                    unit.rows.finish("COMMIT" if writable else "ROLLBACK")
                except BaseException:
                    if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                        with suppress(psycopg.Error):  # a broken connection: the pool throws it away
                            conn.execute("ROLLBACK")
                    raise

    @contextmanager
    def transaction(self) -> Iterator[PostgresTransaction]:
        """A write transaction, durable once the block has exited without an exception (COMMIT)."""
        with self._unit("BEGIN ISOLATION LEVEL READ COMMITTED", writable=True) as tx:
            yield tx

    def fold_counts(self) -> int:
        """Add the hourly counts' moves (migration 10) into the counts; how many moves went. Run by the
        worker's housekeeping once a minute: it locks only the count rows it adds to, which no writer
        touches any more, and moves committed meanwhile wait for the next fold."""
        folded = 0
        with self._pool.connection() as conn, conn.transaction():
            # one fold at a time (every worker process runs one): a count row one fold is adding is not
            # added again by another. The rows found are updated and the others inserted, rather than
            # INSERT ... ON CONFLICT DO UPDATE, whose CHECK (count >= 0) fails on the row it proposes to
            # insert even when it updates: a fold whose moves take one from a status would always fail
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._fold_lock,))
            for hours in ("payout_hours", "collection_hours"):
                same = "(h.hour, h.currency, h.status) = (s.hour, s.currency, s.status)"
                row = conn.execute(
                    f"WITH moved AS (DELETE FROM {hours}_moves"
                    " RETURNING hour, currency, status, count, amount),"
                    " sums AS (SELECT hour, currency, status, sum(count) AS count, sum(amount) AS amount"
                    " FROM moved GROUP BY 1, 2, 3),"
                    f" updated AS (UPDATE {hours} AS h SET count = h.count + s.count,"
                    f" amount = h.amount + s.amount FROM sums AS s WHERE {same}"
                    " RETURNING h.hour, h.currency, h.status),"
                    f" added AS (INSERT INTO {hours} (hour, currency, status, count, amount)"
                    " SELECT s.hour, s.currency, s.status, s.count, s.amount FROM sums AS s"
                    f" WHERE NOT EXISTS (SELECT 1 FROM updated AS h WHERE {same}) RETURNING 1)"
                    " SELECT (SELECT count(*) FROM moved)"
                ).fetchone()
                folded += int(row[0]) if row is not None else 0
        return folded

    @contextmanager
    def transaction_for(self, merchant_id: str) -> Iterator[PostgresTransaction]:
        """A write transaction on one merchant's partition (``ports.PartitionedStore``): it waits only
        for that merchant's writers and for whole-store writers (:meth:`transaction`), so the money of
        different merchants moves side by side; rows they share (a payout, an event) are locked row by
        row (``FOR UPDATE``), balances by their conditional update."""
        with self._unit("BEGIN ISOLATION LEVEL READ COMMITTED", writable=True, partition=merchant_id) as tx:
            yield tx

    @contextmanager
    def transaction_for_many(self, merchant_ids: Sequence[str]) -> Iterator[PostgresTransaction]:
        """One write transaction on several merchants' partitions (the worker's batch of items of
        several merchants): their locks taken in one statement, in one order for every unit."""
        partition = tuple(sorted(set(merchant_ids)))
        if not partition:
            raise ValueError("transaction_for_many needs at least one merchant")
        with self._unit("BEGIN ISOLATION LEVEL READ COMMITTED", writable=True, partition=partition) as tx:
            yield tx

    @contextmanager
    def transaction_for_claims(self) -> Iterator[PostgresTransaction]:
        """A worker's claim (``ports.SkippingStore``): a write transaction that takes no merchant's
        partition, only the store's lock shared (whole-store writers still wait for it), and whose
        reads for update of items of work pass over the rows another unit holds (``FOR UPDATE SKIP
        LOCKED``): another worker's claim or outcome, a request acting on that item. So a claim never
        waits for a merchant's API requests or another worker's batch; the items it passes over stay
        due. Claims change only their items' rows (and the leases), never money, so they need no
        merchant's lock; and as a claim waits for no item's row (and reads no other row for update),
        its locks cannot close a circle with any other unit's."""
        with self._unit("BEGIN ISOLATION LEVEL READ COMMITTED", writable=True, partition=()) as tx:
            tx.rows.skip_locked = True
            yield tx

    @contextmanager
    def read(self) -> Iterator[PostgresTransaction]:
        """A read-only view: one snapshot of the database, never waiting for a writer."""
        with self._unit("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", writable=False) as tx:
            yield tx

    @contextmanager
    def glance(self) -> Iterator[PostgresTransaction]:
        """A read of independent facts (``ports.GlancingStore``): its statements run outside any
        transaction, each in a snapshot of its own, so a lookup of one statement is one round trip."""
        with self._pool.connection() as conn, _preparing(conn, self._transaction(conn, writable=False)) as tx:
            yield tx

    def _transaction(
        self, conn: psycopg.Connection[Any], *, writable: bool, partition: str | tuple[str, ...] | None = None
    ) -> PostgresTransaction:
        return PostgresTransaction(
            conn,
            writable=writable,
            write_lock=self._write_lock,
            rate_namespace=self._rate_namespace,
            partition=partition,
            partitions=self._partitions,
        )

    def ping(self, timeout: float = 0.5) -> None:
        """A trivial query on a pooled connection, giving up after about ``timeout`` seconds; a server
        that would refuse writes (a standby, ``default_transaction_read_only``) raises
        StoreReadOnlyError. No lock is taken."""
        try:
            with self._pool.connection(timeout=timeout) as conn:
                conn.execute(f"SET statement_timeout = {max(1, int(timeout * 1000))}")
                try:
                    row = conn.execute(
                        "SELECT count(*), current_setting('transaction_read_only') FROM schema_version"
                    ).fetchone()
                finally:
                    conn.execute("SET statement_timeout = DEFAULT")
        except (psycopg.Error, PoolTimeout) as exc:
            raise StoreUnavailableError(f"{type(exc).__name__}: {exc}") from exc
        if row is not None and row[1] == "on":
            raise StoreReadOnlyError("the database server takes no writes (transaction_read_only is on)")

    def close(self) -> None:
        self._pool.close()
