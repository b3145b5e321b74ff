"""The repositories of the storage port, written once in SQL for SQLite and PostgreSQL.

Every statement is written here in one neutral form: ``?`` for a positional parameter, ``:name`` for a
named one. A :class:`Dialect` holds the few things the two engines spell differently (PostgreSQL's
``%s`` placeholders, the column that orders ties, booleans, ``min``/``LEAST``, locking clauses, index
hints) and translates each statement once. The engines' modules keep only what truly differs:
connections, transactions and locking (:class:`Rows` is subclassed by each), and their migrations.

Which rows ``due`` and ``spent`` select is not decided here: the SQL is generated from the status sets
of ``paymentcore._domain.queries``, the same definitions MemoryStore filters with.
"""

from __future__ import annotations

import abc
import builtins
import enum
import functools
import json
import operator
import re
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from typing import Any, TypeVar

import attrs

from paymentcore._domain import wire
from paymentcore._domain.models import (
    EVENT_FIXED,
    NO_ENDPOINT,
    PAYOUT_FIXED,
    ApiKey,
    Balance,
    BatchTally,
    Collection,
    CollectionStatus,
    Delivery,
    DeliveryStatus,
    Event,
    IdempotencyRecord,
    LedgerEntry,
    LedgerLeg,
    Merchant,
    Payout,
    PayoutBatch,
    PayoutLimits,
    PayoutStatus,
    Settings,
    StoredAuditEntry,
    StoredOperator,
    StoredSession,
    WebhookEndpoint,
)
from paymentcore._domain.queries import (
    BATCH_OPEN_STATUSES,
    COLLECTION_CHECK_STATUSES,
    COLLECTION_EXPIRY_STATUSES,
    EVENT_DUE_STATUSES,
    PAYOUT_CHECK_STATUSES,
    PAYOUT_SEND_STATUSES,
    SPENT_STATUSES,
)
from paymentcore.ports import CurrencyTotal, DueRef, KeyLookup, PayoutInputs, Tally

__all__ = [
    "HOUR_MS",
    "Dialect",
    "Rows",
    "SqlTransaction",
    "hours_plan",
    "merge_tallies",
    "sql_in",
    "sql_not_in",
]

HOUR_MS = 3_600_000
T = TypeVar("T")


# --- the dialect --------------------------------------------------------------------------------------


@attrs.frozen
class Dialect:
    """What SQLite and PostgreSQL spell differently, and the translation of a neutral statement."""

    name: str
    #: the column that orders rows written in the same millisecond (SQLite's rowid, PostgreSQL's seq)
    seq: str
    #: a boolean column's test for True/False (SQLite keeps 0/1, and a partial index matches ``= 1``)
    true: str
    false: str
    #: the scalar "smallest of" function
    least: str
    #: appended to a read of a row the writer will change (PostgreSQL's FOR UPDATE)
    for_update: str
    #: whether to name the partial index a query should use (SQLite's planner, without statistics)
    hints: bool
    #: appended to ``for_update`` in a worker's claim: rows another unit has locked are passed over
    skip_locked: str = ""
    #: whether a subquery in FROM may read the row before it (``LATERAL``; SQLite has none)
    lateral: bool = False
    _cache: dict[str, str] = attrs.field(factory=dict, eq=False, repr=False)

    def flag(self, column: str, value: bool) -> str:
        return (self.true if value else self.false).format(column)

    def hours(self, table: str) -> str:
        """Where an hourly count table's rows are read (PostgreSQL: with the moves not yet folded in)."""
        if self.name != "postgresql":
            return table
        moves = "SELECT hour, currency, status, count, amount FROM"
        return f"({moves} {table} UNION ALL {moves} {table}_moves) AS {table}"

    def indexed_by(self, index: str) -> str:
        return f" INDEXED BY {index}" if self.hints else ""

    def sql(self, text: str) -> str:
        """``text`` in this dialect's placeholders (``?`` -> ``%s``, ``:name`` -> ``%(name)s``)."""
        found = self._cache.get(text)
        if found is None:
            found = text
            if self.name == "postgresql":
                found = re.sub(r"(?<![:\w]):(\w+)", r"%(\1)s", found.replace("%", "%%").replace("?", "%s"))
            self._cache[text] = found
        return found


SQLITE = Dialect("sqlite", "rowid", "{} = 1", "{} = 0", "min", "", hints=True)
POSTGRESQL = Dialect(
    "postgresql",
    "seq",
    "{}",
    "NOT {}",
    "LEAST",
    " FOR UPDATE",
    hints=False,
    skip_locked=" SKIP LOCKED",
    lateral=True,
)


# --- SQL generated from the definitions in paymentcore._domain.queries ---------------------------


def _literals(values: Iterable[enum.Enum]) -> list[str]:
    """SQL string literals of enum members, in the enum's own order (a frozenset has none)."""
    members = list(values)
    for member in members:
        if "'" in str(member.value):
            raise ValueError(f"a status value with a quote: {member.value!r}")
    members.sort(key=lambda member: list(type(member)).index(member))
    return [f"'{member.value}'" for member in members]


def sql_in(column: str, values: Iterable[enum.Enum]) -> str:
    """``column = 'A'`` for one value, ``column IN ('A', 'B')`` for several."""
    literals = _literals(values)
    if len(literals) == 1:
        return f"{column} = {literals[0]}"
    return f"{column} IN ({', '.join(literals)})"


def sql_not_in(column: str, values: Iterable[enum.Enum]) -> str:
    """``column != 'A'`` for one value, ``column NOT IN ('A', 'B')`` for several."""
    literals = _literals(values)
    if len(literals) == 1:
        return f"{column} != {literals[0]}"
    return f"{column} NOT IN ({', '.join(literals)})"


_SPENT = sql_in("status", SPENT_STATUSES)
_CHECK_COLLECTION = sql_in("status", COLLECTION_CHECK_STATUSES)
_EXPIRE_COLLECTION = sql_in("status", COLLECTION_EXPIRY_STATUSES)
_DUE_EVENT = sql_in("status", EVENT_DUE_STATUSES)
_BATCH_OPEN = sql_in("status", BATCH_OPEN_STATUSES)
# _queries.collection_is_due, one indexed branch each
_DUE_COLLECTIONS = (
    f"SELECT reference FROM collections WHERE {_CHECK_COLLECTION} AND next_check_at <= :now"
    f" UNION SELECT reference FROM collections WHERE {_EXPIRE_COLLECTION}"
    " AND submitted_at IS NULL AND expires_at <= :now"
)


def hours_plan(since: int, until: int, width: int) -> tuple[int, int] | None:
    """Which whole UTC hours of ``[since, until)`` a tally may take from the hourly counts: ``(first,
    end)``, hour numbers (ms / 3,600,000), when every such hour falls in one span of ``width`` from
    ``since`` (``since`` and ``width`` whole hours, or one span for everything); None otherwise, or when
    there is no whole hour: then every record is counted from the rows."""
    first = -(-since // HOUR_MS)
    end = until // HOUR_MS
    aligned = since % HOUR_MS == 0 and width % HOUR_MS == 0
    if end <= first or not (aligned or until - since <= width):
        return None
    return first, end


def merge_tallies(rows: Iterable[Sequence[Any]]) -> list[Tally]:
    """(bucket, currency, status, count, amount) rows, those of one key added up, in key order, none
    with a count of 0."""
    sums: dict[tuple[int, str, str], list[int]] = {}
    for bucket, currency, status, count, amount in rows:
        if int(count):
            total = sums.setdefault((int(bucket), str(currency), str(status)), [0, 0])
            total[0] += int(count)
            total[1] += int(amount)
    return [Tally(b, c, s, n, a) for (b, c, s), (n, a) in sorted(sums.items())]


# --- rows <-> records ---------------------------------------------------------------------------


def _encode(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, frozenset):
        return json.dumps(sorted(v.value if isinstance(v, enum.Enum) else v for v in value))
    if isinstance(value, tuple):
        return json.dumps([[leg.account, leg.amount] for leg in value])
    if isinstance(value, dict):
        return wire.dumps(value)
    return value


#: event data: every number comes back as a Decimal, as it went in (one decoder, not one a row)
_EXACT_JSON = json.JSONDecoder(parse_float=Decimal, parse_int=Decimal)


def _decoder(tp: Any) -> Any:
    """How a column's value becomes the record's, or None when it is taken as it comes."""
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        decode = _decoder(inner)
        if decode is None:
            return None
        return lambda v: None if v is None else decode(v)
    if origin is frozenset:
        (item,) = typing.get_args(tp)
        return lambda v: frozenset(item(x) for x in json.loads(v))
    if origin is tuple:
        return lambda v: tuple(LedgerLeg(a, n) for a, n in json.loads(v))
    if origin is dict:
        return _EXACT_JSON.decode
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp
    if tp is bool:
        return bool  # SQLite's 0/1, PostgreSQL's booleans
    return None


_STORED_AS_IS = (str, int, bool, str | None, int | None)  # column types the drivers take as they are


@attrs.frozen
class Codec:
    """A record type's table: its columns, its statements, and its rows to records and back."""

    cls: type[Any]
    table: str
    keys: tuple[str, ...]
    columns: tuple[str, ...]
    # the places of the columns that need decoding, with their decoders (the others are taken as
    # they come: most columns, and decoding every one cost a listing of due work most of its time)
    decoders: tuple[tuple[int, Any], ...]
    insert_sql: str
    upsert_sql: str
    update_sql: str
    select_sql: str
    # every column's value in one call, and the places of the columns that _encode must convert (an
    # insert of many rows spends its time here otherwise)
    getter: Any
    encoded: tuple[int, ...]
    # an update's values, in its statement's order (the columns it sets, then the keys), and the places
    # among them that _encode converts: columns fixed once written are neither set nor encoded again
    update_getter: Any
    update_encoded: tuple[int, ...]

    @classmethod
    def of(cls, record: type[Any], table: str, keys: tuple[str, ...], fixed: tuple[str, ...] = ()) -> Codec:
        """``fixed``: columns a record never changes once written (an update leaves them out)."""
        hints = typing.get_type_hints(record)
        columns = tuple(f.name for f in attrs.fields(record))
        names = ", ".join(columns)
        marks = ", ".join("?" for _ in columns)
        others = [c for c in columns if c not in keys]
        assert set(fixed) <= set(others), fixed
        changing = [c for c in others if c not in fixed]
        updated = [*changing, *keys]
        return cls(
            cls=record,
            table=table,
            keys=keys,
            columns=columns,
            decoders=tuple(
                (i, decode) for i, c in enumerate(columns) if (decode := _decoder(hints[c])) is not None
            ),
            getter=operator.attrgetter(*columns),
            encoded=tuple(i for i, c in enumerate(columns) if hints[c] not in _STORED_AS_IS),
            update_getter=operator.attrgetter(*updated),
            update_encoded=tuple(i for i, c in enumerate(updated) if hints[c] not in _STORED_AS_IS),
            insert_sql=f"INSERT INTO {table} ({names}) VALUES ({marks})",
            upsert_sql=(
                f"INSERT INTO {table} ({names}) VALUES ({marks}) "
                f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET "
                + ", ".join(f"{c} = excluded.{c}" for c in others)
            ),
            update_sql=(
                f"UPDATE {table} SET {', '.join(f'{c} = ?' for c in changing)}"
                f" WHERE {' AND '.join(f'{k} = ?' for k in keys)}"
            ),
            select_sql=f"SELECT {names} FROM {table}",
        )

    def values(self, record: Any) -> list[Any]:
        row = list(self.getter(record))
        for place in self.encoded:
            row[place] = _encode(row[place])
        return row

    def update_values(self, record: Any) -> list[Any]:
        row = list(self.update_getter(record))
        for place in self.update_encoded:
            row[place] = _encode(row[place])
        return row

    def decode(self, row: Sequence[Any]) -> Any:
        if len(row) != len(self.columns):
            raise ValueError(f"{self.table}: a row of {len(row)} values for {len(self.columns)} columns")
        values = list(row)
        for place, decode in self.decoders:
            values[place] = decode(values[place])
        return self.cls(*values)


_MERCHANTS = Codec.of(Merchant, "merchants", ("id",))
_KEYS = Codec.of(ApiKey, "api_keys", ("id",))
_LIMITS = Codec.of(PayoutLimits, "payout_limits", ("merchant_id", "currency"))
_COLLECTIONS = Codec.of(Collection, "collections", ("reference",))
_PAYOUTS = Codec.of(
    Payout,
    "payouts",
    ("reference",),
    fixed=PAYOUT_FIXED,
)
_BATCHES = Codec.of(PayoutBatch, "payout_batches", ("id",))
_BALANCES = Codec.of(Balance, "balances", ("merchant_id", "currency"))
_ENTRIES = Codec.of(LedgerEntry, "ledger_entries", ("id",))
_WEBHOOKS = Codec.of(WebhookEndpoint, "webhooks", ("merchant_id",))
_EVENTS = Codec.of(Event, "events", ("id",), fixed=EVENT_FIXED)
_IDEMPOTENCY = Codec.of(IdempotencyRecord, "idempotency", ("merchant_id", "key"))
_DELIVERIES = Codec.of(Delivery, "deliveries", ("id",))
_OPERATORS = Codec.of(StoredOperator, "operators", ("id",))
_SESSIONS = Codec.of(StoredSession, "console_sessions", ("id",))
_AUDIT = Codec.of(StoredAuditEntry, "audit_log", ("id",))
_BALANCE_COLUMNS = ", ".join(_BALANCES.columns)

Condition = tuple[str, tuple[Any, ...]]
Conditions = Sequence[Condition]


class Rows(abc.ABC):
    """Statements on one transaction's connection, through the codecs: what every repository uses.

    An engine subclasses it with :meth:`execute` and :meth:`execute_many` (where it takes its locks);
    ``lock=False`` marks a statement that must not take the engine's write lock (the rate counters,
    which hold their own key's lock instead: :meth:`hold_key`).
    """

    def __init__(self, dialect: Dialect, conn: Any, *, writable: bool) -> None:
        self.dialect = dialect
        self.conn = conn
        self.writable = writable
        self.seq = dialect.seq
        #: a worker's claim: a read for update of an item of work (a payout, a collection, an event:
        #: ``item=True``) passes over the rows another unit holds, rather than waiting for them; every
        #: other read for update waits as ever, so a held row of another table never looks absent
        self.skip_locked = False

    @abc.abstractmethod
    def execute(self, sql: str, params: Any = (), *, lock: bool = True) -> Any:
        """Run one statement already in this engine's placeholders; its cursor."""

    @abc.abstractmethod
    def execute_many(self, sql: str, rows: list[list[Any]]) -> None:
        """Run one statement for every row of parameters."""

    @abc.abstractmethod
    def hold_key(self, namespace: str, key: str) -> None:
        """Hold ``key``'s own lock until the transaction ends (where the engine has such locks)."""

    def hold_keys(self, namespace: str, keys: Sequence[str]) -> None:
        """:meth:`hold_key` for each of ``keys``, in one order everywhere."""
        for key in sorted(set(keys)):
            self.hold_key(namespace, key)

    def run(self, sql: str, params: Any = (), *, lock: bool = True) -> Any:
        return self.execute(self.dialect.sql(sql), params, lock=lock)

    def write(self, sql: str, params: Any = (), *, lock: bool = True) -> Any:
        if not self.writable:
            raise RuntimeError("write through a read-only transaction")
        return self.run(sql, params, lock=lock)

    def changed(self, cursor: Any) -> int:
        """How many rows the statement of ``cursor`` changed."""
        return int(cursor.rowcount)

    def write_count(self, sql: str, params: Any = (), *, lock: bool = True) -> int:
        """Write; how many rows changed."""
        return self.changed(self.write(sql, params, lock=lock))

    def value(self, sql: str, params: Any = ()) -> int | None:
        """The one number a statement answers (None for NULL or no row)."""
        row = self.run(sql, params).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def count(self, sql: str, params: Any = ()) -> int:
        return int(self.value(sql, params) or 0)

    def one_later(self, sql: str, params: Any = ()) -> Callable[[], Any]:
        """The first row a statement answers, read when called: here at once (sqlite3 runs it now), in
        the PostgreSQL store with the next statement whose answer is asked for (``_PostgresRows``)."""
        row = self.run(sql, params).fetchone()
        return lambda: row

    def row_lock(self, *, item: bool = False) -> str:
        """What a read of rows this unit will change ends with (nothing in a read view); ``item``: of
        items of work, which a claim's unit passes over when another unit holds them."""
        if not self.writable:
            return ""
        return self.dialect.for_update + (self.dialect.skip_locked if item and self.skip_locked else "")

    def one(
        self, codec: Codec, where: str, params: Sequence[Any], *, for_update: bool = False, item: bool = False
    ) -> Any:
        lock = self.row_lock(item=item) if for_update else ""
        row = self.run(f"{codec.select_sql} WHERE {where}{lock}", params).fetchone()
        return None if row is None else codec.decode(row)

    def many(self, codec: Codec, rest: str, params: Any = ()) -> list[Any]:
        return [codec.decode(r) for r in self.run(f"{codec.select_sql} {rest}", params).fetchall()]

    def upsert(self, codec: Codec, record: Any) -> None:
        self.write(codec.upsert_sql, codec.values(record))

    def insert(self, codec: Codec, record: Any) -> None:
        self.write(codec.insert_sql, codec.values(record))

    def insert_many(self, codec: Codec, records: Iterable[Any]) -> None:
        if not self.writable:
            raise RuntimeError("write through a read-only transaction")
        self.execute_many(self.dialect.sql(codec.insert_sql), [codec.values(r) for r in records])

    def update(self, codec: Codec, record: Any) -> None:
        refused = f"{codec.table}: no row to update"
        if not self.write_checked(codec.update_sql, codec.update_values(record), refused):
            raise KeyError(refused)

    def write_checked(self, sql: str, params: Any, refused: str) -> bool:
        """A write that must change one row: False when it changed none. A store that checks it with
        the unit's other statements (PostgreSQL's, sent together) answers True at once and fails the unit
        at its end with KeyError(``refused``) when it did not."""
        return self.write_count(sql, params) == 1

    def listing(
        self,
        codec: Codec,
        *,
        key: str,
        after: str | None,
        scope: Conditions = (),
        filters: Conditions = (),
        limit: int,
        newest_first: bool = True,
        at: str = "created_at",
    ) -> list[Any] | None:
        """``ports``' list order: the rows meeting every ``(condition, parameters)`` of ``scope`` and
        ``filters``, by ``at`` (ties in the order written), newest or oldest first, after the row of
        ``scope`` whose ``key`` is ``after``; None when there is no such row."""
        where = [condition for condition, _ in scope]
        params = [value for _, values in scope for value in values]
        if after is not None:
            found = self.run(
                f"SELECT {at}, {self.seq} FROM {codec.table} WHERE {' AND '.join([f'{key} = ?', *where])}",
                (after, *params),
            )
            place = found.fetchone()
            if place is None:
                return None
            where.append(f"({at}, {self.seq}) {'<' if newest_first else '>'} (?, ?)")
            params.extend(place)
        where += [condition for condition, _ in filters]
        params += [value for _, values in filters for value in values]
        order = " DESC" if newest_first else ""
        condition = f"WHERE {' AND '.join(where)} " if where else ""
        return self.many(
            codec, f"{condition}ORDER BY {at}{order}, {self.seq}{order} LIMIT ?", (*params, limit)
        )

    def page(
        self,
        codec: Codec,
        scope: dict[str, Any],
        *,
        key: str,
        after: str | None,
        filters: Conditions,
        limit: int,
    ) -> list[Any] | None:
        """A merchant's list: the rows of ``scope`` (column = value) newest first."""
        return self.listing(codec, key=key, after=after, scope=_equal(scope), filters=filters, limit=limit)


def _lane_heads(
    dialect: Dialect, table: str, index: str, columns: str, where: str, order: str, *, whole: bool = False
) -> str:
    """``FROM lanes`` joined to each lane's first ``:per_lane`` rows of ``table`` meeting ``where`` in
    ``order`` (both over the alias ``w``), as ``head`` with ``columns`` (``w.key, ...``, the key first),
    read from ``index`` (``where`` starts by passing over the walk's last, empty, lane: PostgreSQL tests
    that once, where its scan for no lane would read the whole index). PostgreSQL reads them with a
    LATERAL subquery, an index range a lane; SQLite, which has no LATERAL, names them in a correlated IN
    list, which it runs once a lane (PostgreSQL would test that list against every row of ``table``:
    seconds for a backlog of thousands). ``whole``: ``index`` does not hold the rows in ``order``, so
    PostgreSQL is kept from walking another index that does (it would rather walk a merchant's whole
    history in order than sort its few due rows): the rows are found first (OFFSET 0 keeps the
    planner from merging that step with the ORDER BY), then ordered."""
    if dialect.lateral:
        found = f"SELECT {columns} FROM {table} AS w WHERE {where}"
        if whole:
            found = f"SELECT * FROM ({found} OFFSET 0) AS w"
        return f"FROM lanes CROSS JOIN LATERAL ({found} ORDER BY {order} LIMIT :per_lane) AS head"
    key = columns.split(",")[0].strip().removeprefix("w.")
    return (
        f"FROM lanes JOIN {table} AS head ON head.{key} IN (SELECT w.{key} FROM {table} AS w"
        f"{dialect.indexed_by(index)} WHERE {where} ORDER BY {order} LIMIT :per_lane)"
    )


def _named(get_many: Callable[[Sequence[str]], dict[str, T]], refs: Sequence[DueRef]) -> list[T]:
    """The records a listing named, in its order."""
    found = get_many([ref.key for ref in refs])
    return [found[ref.key] for ref in refs if ref.key in found]


def _due_params(now: int, limit: int, per_lane: int | None) -> dict[str, int]:
    """The values of a listing of due work (``_in_turns`` takes ``per_lane``)."""
    if per_lane is None:
        return {"now": now, "limit": limit}
    return {"now": now, "per_lane": per_lane, "limit": limit}


def _created(created_from: int | None, created_before: int | None) -> list[Condition]:
    conditions: list[Condition] = []
    if created_from is not None:
        conditions.append(("created_at >= ?", (created_from,)))
    if created_before is not None:
        conditions.append(("created_at < ?", (created_before,)))
    return conditions


def _equal(columns: dict[str, Any]) -> list[Condition]:
    """``column = value`` for each value that is not None (an enum by its value)."""
    return [
        (f"{column} = ?", (value.value if isinstance(value, enum.Enum) else value,))
        for column, value in columns.items()
        if value is not None
    ]


def _tally(
    rows: Rows, table: str, currency: str, amount: str, since: int, until: int, width: int
) -> list[Tally]:
    """``ports``' tally: whole hours from the hourly counts of migration 7 (``hours_plan``), the rest
    (at most the two partial hours at the ends) from the rows, through their creation-time index."""
    plan = hours_plan(since, until, width)
    rows_sql = (
        f"SELECT (created_at - :since) / :width, {currency}, status, count(*), sum({amount})"
        f" FROM {table} WHERE created_at >= :low AND created_at < :high GROUP BY 1, 2, 3"
    )
    spans = [(since, until)]
    found: list[Any] = []
    if plan is not None:
        first, end = plan
        found += rows.run(
            "SELECT (hour * 3600000 - :since) / :width, currency, status, sum(count), sum(amount)"
            f" FROM {rows.dialect.hours(table[:-1] + '_hours')} WHERE hour >= :first AND hour < :end"
            " GROUP BY 1, 2, 3",
            {"since": since, "width": width, "first": first, "end": end},
        ).fetchall()
        spans = [(since, first * HOUR_MS), (end * HOUR_MS, until)]
    for low, high in spans:
        if low < high:
            found += rows.run(rows_sql, {"since": since, "width": width, "low": low, "high": high}).fetchall()
    return merge_tallies(found)


class _Repository:
    def __init__(self, rows: Rows) -> None:
        self._rows = rows


class _ForUpdate:
    """The rows of one table a transaction has read for update, by key: ``get`` reads one row,
    ``get_many`` several in one statement (in a write transaction locked in the order of their keys, so
    two batches never hold one each of two rows the other waits for), and a later ``get`` of one of
    them reads nothing. The repository's update keeps what is known here current (``keep``); a row
    another unit held when a claim's unit read it (``Rows.skip_locked``) is missing for the rest of
    the transaction."""

    def __init__(self, rows: Rows, codec: Codec, key: str) -> None:
        self._rows = rows
        self._codec = codec
        self._key = key
        self._known: dict[str, Any] = {}
        self._passed: set[str] = set()

    def get(self, key: str) -> Any:
        known = self._known.get(key)
        if known is not None or key in self._passed:
            return known
        found = self._rows.one(self._codec, f"{self._key} = ?", (key,), for_update=True, item=True)
        if found is None and self._rows.skip_locked:
            self._passed.add(key)  # absent or held: absent for the rest of the transaction
        return found

    def get_many(self, keys: Sequence[str]) -> dict[str, Any]:
        wanted = sorted(set(keys) - self._known.keys())
        if wanted:
            marks = ", ".join("?" for _ in wanted)
            rest = f"WHERE {self._key} IN ({marks}) ORDER BY {self._key}{self._rows.row_lock(item=True)}"
            found = self._rows.many(self._codec, rest, wanted)
            self._known.update((getattr(record, self._key), record) for record in found)
            if self._rows.skip_locked:
                self._passed.update(set(wanted) - self._known.keys())
        return {key: self._known[key] for key in keys if key in self._known}

    def keep(self, key: str, record: Any) -> None:
        if key in self._known:
            self._known[key] = record

    def forget(self) -> None:
        """After a statement that changed rows of the table by another key: read them again."""
        self._known.clear()


# --- settings, merchants, keys, limits -----------------------------------------------------------


def _settings(row: Sequence[Any] | None) -> Settings:
    """The switches from (api_enabled, payouts_enabled, closed_currencies); the defaults before any."""
    if row is None or row[0] is None:
        return Settings()
    return Settings(bool(row[0]), bool(row[1]), frozenset(json.loads(row[2])))


_SETTINGS = "s.api_enabled, s.payouts_enabled, s.closed_currencies"
_N_KEY, _N_MERCHANT, _N_LIMITS = len(_KEYS.columns), len(_MERCHANTS.columns), len(_LIMITS.columns)
_N_IDEMPOTENCY = len(_IDEMPOTENCY.columns)


def _lookup_of(row: Sequence[Any] | None) -> KeyLookup | None:
    """A key's lookup from its row (the key's, its merchant's and the switches' columns)."""
    if row is None:
        return None
    merchant = row[_N_KEY : _N_KEY + _N_MERCHANT]
    return KeyLookup(
        _KEYS.decode(row[:_N_KEY]),
        None if merchant[0] is None else _MERCHANTS.decode(merchant),
        _settings(row[_N_KEY + _N_MERCHANT :]),
    )


def _columns(codec: Codec, alias: str) -> str:
    return ", ".join(f"{alias}.{column}" for column in codec.columns)


def _spent_sql(window: str) -> str:
    """What a merchant paid out in a currency since ``:{window}since``: whole hours from the
    trigger-kept buckets, the first, partial hour summed exactly from the payouts themselves."""
    return (
        "(SELECT coalesce(sum(amount), 0) FROM payout_spend"
        f" WHERE merchant_id = :m AND currency = :c AND hour >= :{window}hour)"
        " + (SELECT coalesce(sum(amount), 0) FROM payouts WHERE merchant_id = :m AND currency = :c"
        f" AND created_at >= :{window}since AND created_at < :{window}next AND {_SPENT})"
    )


def _spent_params(window: str, since: int) -> dict[str, int]:
    next_hour = (since // HOUR_MS + 1) * HOUR_MS
    return {f"{window}hour": next_hour // HOUR_MS, f"{window}since": since, f"{window}next": next_hour}


class _Settings(_Repository):
    def get(self) -> Settings:
        return _settings(
            self._rows.run(
                "SELECT api_enabled, payouts_enabled, closed_currencies FROM settings WHERE id = 1"
            ).fetchone()
        )

    def put(self, settings: Settings) -> None:
        self._rows.write(
            "INSERT INTO settings (id, api_enabled, payouts_enabled, closed_currencies) VALUES (1, ?, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET api_enabled = excluded.api_enabled,"
            " payouts_enabled = excluded.payouts_enabled, closed_currencies = excluded.closed_currencies",
            (settings.api_enabled, settings.payouts_enabled, _encode(settings.closed_currencies)),
        )


class _Merchants(_Repository):
    def get(self, merchant_id: str) -> Merchant | None:
        merchant: Merchant | None = self._rows.one(_MERCHANTS, "id = ?", (merchant_id,))
        return merchant

    def put(self, merchant: Merchant) -> None:
        self._rows.upsert(_MERCHANTS, merchant)

    def list(self) -> builtins.list[Merchant]:
        return self._rows.many(_MERCHANTS, f"ORDER BY created_at, {self._rows.seq}")


class _Keys(_Repository):
    def get(self, key_id: str) -> ApiKey | None:
        key: ApiKey | None = self._rows.one(_KEYS, "id = ?", (key_id,))
        return key

    def by_hash(self, key_hash: str) -> ApiKey | None:
        key: ApiKey | None = self._rows.one(_KEYS, "key_hash = ?", (key_hash,))
        return key

    _LOOKED_UP = f"{_columns(_KEYS, 'k')}, {_columns(_MERCHANTS, 'm')}, {_SETTINGS}"
    _FOUND = (
        " FROM api_keys AS k LEFT JOIN merchants AS m ON m.id = k.merchant_id"
        " LEFT JOIN settings AS s ON s.id = 1 WHERE k.key_hash = ?"
    )
    _LOOKUP = f"SELECT {_LOOKED_UP}{_FOUND}"

    def lookup(self, key_hash: str) -> KeyLookup | None:
        return _lookup_of(self._rows.run(self._LOOKUP, (key_hash,)).fetchone())

    def put(self, key: ApiKey) -> None:
        self._rows.upsert(_KEYS, key)

    def list(self, merchant_id: str) -> builtins.list[ApiKey]:
        return self._rows.many(
            _KEYS, f"WHERE merchant_id = ? ORDER BY created_at, {self._rows.seq}", (merchant_id,)
        )


class _Limits(_Repository):
    def get(self, merchant_id: str, currency: str) -> PayoutLimits | None:
        limits: PayoutLimits | None = self._rows.one(
            _LIMITS, "merchant_id = ? AND currency = ?", (merchant_id, currency)
        )
        return limits

    def put(self, limits: PayoutLimits) -> None:
        self._rows.upsert(_LIMITS, limits)


# --- collections and payouts ---------------------------------------------------------------------


def _record_filters(status: enum.Enum | None, merchant_reference: str | None, **more: Any) -> Conditions:
    """The conditions of a payout or collection list's filters."""
    return _equal({"status": status, "merchant_reference": merchant_reference, **more})


def _collection_lanes(dialect: Dialect) -> str:
    """The worker's listing of due collections: ``_queries.collection_due_order`` in turns over
    ``_queries.collection_lane`` (``_queries.in_turns``), at most ``:per_lane`` of a lane, as
    (reference, lane, merchant); read from the two indexes of migration 13 instead of by ranking every
    due collection.

    A collection is listed by ``least(expires_at, next check)``. A lane's first ``:per_lane`` by that
    are among its first ``:per_lane`` due for a check by next check (index ``collections_lanes_checks``)
    and its first ``:per_lane`` overdue ones (expired: due to expire, or due for a check) by expiry
    (``collections_lanes_expiry``): were one not among those, as many others would come before it.
    So each lane (found by a walk up the index, one probe each) gives at most twice ``:per_lane``,
    and only those are ranked."""
    lane = "coalesce(provider, '')"
    open_ = sql_in("status", COLLECTION_CHECK_STATUSES | COLLECTION_EXPIRY_STATUSES)  # the indexes' rows
    index = dialect.indexed_by("collections_lanes_checks")
    columns = "w.reference, w.provider, w.merchant_id, w.expires_at, w.next_check_at"
    in_lane = f"lanes.lane IS NOT NULL AND coalesce(w.provider, '') = lanes.lane AND w.{open_}"
    check = f"{sql_in('w.status', COLLECTION_CHECK_STATUSES)} AND w.next_check_at <= :now"
    expire = f"{sql_in('w.status', COLLECTION_EXPIRY_STATUSES)} AND w.submitted_at IS NULL"
    checks = _lane_heads(
        dialect,
        "collections",
        "collections_lanes_checks",
        columns,
        f"{in_lane} AND {check}",
        "w.next_check_at, w.reference",
    )
    overdue = _lane_heads(
        dialect,
        "collections",
        "collections_lanes_expiry",
        columns,
        f"{in_lane} AND w.expires_at <= :now AND (({check}) OR ({expire}))",
        "w.expires_at, w.reference",
    )
    head = "SELECT head.reference, head.provider, head.merchant_id, head.expires_at, head.next_check_at"
    return (
        "WITH RECURSIVE lanes(lane) AS ("
        f" SELECT (SELECT {lane} FROM collections{index} WHERE {open_} ORDER BY {lane} LIMIT 1)"
        f" UNION ALL SELECT (SELECT {lane} FROM collections{index} WHERE {open_} AND {lane} > lanes.lane"
        f" ORDER BY {lane} LIMIT 1) FROM lanes WHERE lanes.lane IS NOT NULL),"
        f" heads AS ({head} {checks} UNION {head} {overdue}),"
        f" keyed AS (SELECT reference, provider, merchant_id, {dialect.least}(expires_at,"
        " coalesce(next_check_at, expires_at)) AS due_key FROM heads),"
        " turns AS (SELECT reference, provider, merchant_id, due_key, row_number() OVER"
        " (PARTITION BY coalesce(provider, '') ORDER BY due_key, reference) AS turn FROM keyed)"
        " SELECT reference, coalesce(provider, ''), merchant_id FROM turns WHERE turn <= :per_lane"
        " ORDER BY turn, due_key, reference LIMIT :limit"
    )


_COLLECTION_LANES = {dialect.name: _collection_lanes(dialect) for dialect in (SQLITE, POSTGRESQL)}


class _Collections(_Repository):
    def get(self, reference: str) -> Collection | None:
        collection: Collection | None = self._rows.one(
            _COLLECTIONS, "reference = ?", (reference,), for_update=True, item=True
        )
        return collection

    def add(self, collection: Collection) -> None:
        self._rows.insert(_COLLECTIONS, collection)

    def update(self, collection: Collection) -> None:
        self._rows.update(_COLLECTIONS, collection)

    def due(self, now: int, limit: int, *, per_lane: int | None = None) -> list[Collection]:
        if per_lane is None:
            return self._rows.many(_COLLECTIONS, self._listing(), {"now": now, "limit": limit})
        refs = self.due_refs(now, limit, per_lane=per_lane)
        if not refs:
            return []
        marks = ", ".join("?" for _ in refs)
        rows = self._rows.many(_COLLECTIONS, f"WHERE reference IN ({marks})", [ref.key for ref in refs])
        found = {collection.reference: collection for collection in rows}
        return [found[ref.key] for ref in refs if ref.key in found]

    def due_refs(self, now: int, limit: int, *, per_lane: int | None = None) -> list[DueRef]:
        if per_lane is not None:
            params = {"now": now, "per_lane": per_lane, "limit": limit}
            rows = self._rows.run(_COLLECTION_LANES[self._rows.dialect.name], params).fetchall()
        else:
            rows = self._rows.run(
                "SELECT collections.reference, coalesce(collections.provider, ''), collections.merchant_id"
                f" FROM collections {self._listing()}",
                {"now": now, "limit": limit},
            ).fetchall()
        return [DueRef(*row) for row in rows]

    def _listing(self) -> str:
        # in _queries.collection_due_order (the worker's listing, in turns over the lanes: _COLLECTION_LANES)
        least = self._rows.dialect.least
        order = f"{least}(expires_at, coalesce(next_check_at, expires_at)), collections.reference"
        return f"WHERE reference IN ({_DUE_COLLECTIONS}) ORDER BY {order} LIMIT :limit"

    def count_due(self, now: int) -> int:
        return self._rows.count(f"SELECT count(*) FROM ({_DUE_COLLECTIONS}) AS due", {"now": now})

    def prompts_since(self, phone: str, since: int) -> int:
        # the count spans merchants: a writer holds the number's own lock until it commits, so two
        # merchants prompting one number at once take turns (PostgreSQL; one writer elsewhere)
        if self._rows.writable:
            self._rows.hold_key("prompt", phone)
        return self._rows.count(
            "SELECT count(*) FROM collections WHERE phone = ? AND submitted_at >= ?", (phone, since)
        )

    def oldest_due(self, now: int) -> int | None:
        # _queries.collection_due_since: the earliest of each branch of collection_is_due
        return self._rows.value(
            "SELECT min(since) FROM ("
            f" SELECT min(next_check_at) AS since FROM collections WHERE {_CHECK_COLLECTION}"
            "  AND next_check_at <= :now"
            f" UNION ALL SELECT min(expires_at) FROM collections WHERE {_EXPIRE_COLLECTION}"
            "  AND submitted_at IS NULL AND expires_at <= :now) AS due",
            {"now": now},
        )

    def tally(self, since: int, until: int, width: int) -> list[Tally]:
        return _tally(
            self._rows, "collections", "requested_currency", "requested_amount", since, until, width
        )

    def queue(
        self,
        *,
        limit: int,
        after: str | None = None,
        merchant_id: str | None = None,
        currency: str | None = None,
        status: CollectionStatus | None = None,
        created_from: int | None = None,
        created_before: int | None = None,
    ) -> list[Collection] | None:
        conditions = _equal({"merchant_id": merchant_id, "requested_currency": currency, "status": status})
        return self._rows.listing(
            _COLLECTIONS,
            key="reference",
            after=after,
            filters=[*conditions, *_created(created_from, created_before)],
            limit=limit,
            newest_first=False,
        )

    def page(
        self,
        merchant_id: str,
        *,
        limit: int,
        after: str | None = None,
        status: CollectionStatus | None = None,
        merchant_reference: str | None = None,
    ) -> list[Collection] | None:
        filters = _record_filters(status, merchant_reference)
        return self._rows.page(
            _COLLECTIONS,
            {"merchant_id": merchant_id},
            key="reference",
            after=after,
            filters=filters,
            limit=limit,
        )


def _payout_due_status(dialect: Dialect, table: str = "") -> str:
    """_queries.payout_is_due's statuses, in ``dialect`` (``table`` names the row: ``w.``)."""
    send = sql_in(table + "status", PAYOUT_SEND_STATUSES)
    held = dialect.flag(table + "awaiting_review", False)
    return f"(({send} AND {held}) OR {sql_in(table + 'status', PAYOUT_CHECK_STATUSES)})"


def _payout_due(dialect: Dialect) -> str:
    """_queries.payout_is_due, in ``dialect``."""
    return f"next_check_at IS NOT NULL AND next_check_at <= ? AND {_payout_due_status(dialect)}"


def _payout_lanes(dialect: Dialect) -> str:
    """The worker's listing of due payouts (``_queries.payouts_in_due_order``, at most ``:per_lane`` of
    a provider), read from ``payouts_lanes`` (migration 12) rather than by ranking the whole backlog.

    The providers with open payouts, and each one's merchants, are found one index probe each (a walk
    up the index); each (provider, merchant)'s first ``:per_lane`` due payouts are read from the same
    index, the only ones that can be in that provider's first ``:per_lane``; only those are ranked.
    The payouts are named (reference, provider, merchant), not read: joined to ``payouts`` again,
    PostgreSQL, which cannot tell how few rows the walk gives, would hash every payout ever made."""
    index = dialect.indexed_by("payouts_lanes")
    live = "next_check_at IS NOT NULL"  # the index's rows: open payouts not held for review
    due = f"w.next_check_at IS NOT NULL AND w.next_check_at <= :now AND {_payout_due_status(dialect, 'w.')}"
    heads = _lane_heads(
        dialect,
        "payouts",
        "payouts_lanes",
        "w.reference, w.provider, w.merchant_id, w.next_check_at",
        "lanes.merchant IS NOT NULL AND w.provider = lanes.provider AND w.merchant_id = lanes.merchant"
        f" AND {due}",
        "w.next_check_at, w.reference",
    )
    return (
        "WITH RECURSIVE providers(provider) AS ("
        f" SELECT min(provider) FROM payouts{index} WHERE {live}"
        f" UNION ALL SELECT (SELECT min(provider) FROM payouts{index} WHERE {live}"
        " AND provider > providers.provider) FROM providers WHERE providers.provider IS NOT NULL),"
        " lanes(provider, merchant) AS ("
        f" SELECT provider, (SELECT min(merchant_id) FROM payouts{index} WHERE {live}"
        " AND provider = providers.provider) FROM providers WHERE providers.provider IS NOT NULL"
        f" UNION ALL SELECT provider, (SELECT min(merchant_id) FROM payouts{index} WHERE {live}"
        " AND provider = lanes.provider AND merchant_id > lanes.merchant) FROM lanes"
        " WHERE lanes.merchant IS NOT NULL),"
        " heads AS (SELECT head.reference, head.provider, head.merchant_id, head.next_check_at,"
        " row_number() OVER (PARTITION BY head.provider, head.merchant_id"
        " ORDER BY head.next_check_at, head.reference) AS turn"
        f" {heads}),"
        " kept AS (SELECT reference, provider, merchant_id, next_check_at, turn, row_number() OVER"
        " (PARTITION BY provider ORDER BY turn, next_check_at, reference) AS lane_turn FROM heads)"
        " SELECT reference, provider, merchant_id FROM kept WHERE lane_turn <= :per_lane"
        " ORDER BY turn, next_check_at, reference LIMIT :limit"
    )


_PAYOUT_COLUMNS = _columns(_PAYOUTS, "p")
#: built once per dialect, not in every transaction (a payout's unit of work opens the repositories)
_PAYOUT_DUE = {dialect.name: _payout_due(dialect) for dialect in (SQLITE, POSTGRESQL)}
_PAYOUT_LANES = {dialect.name: _payout_lanes(dialect) for dialect in (SQLITE, POSTGRESQL)}


class _Payouts(_Repository):
    def __init__(self, rows: Rows) -> None:
        super().__init__(rows)
        self._read = _ForUpdate(rows, _PAYOUTS, "reference")  # only update writes a payout row
        self._due = _PAYOUT_DUE[rows.dialect.name]

    def get(self, reference: str) -> Payout | None:
        payout: Payout | None = self._read.get(reference)
        return payout

    def get_many(self, references: Sequence[str]) -> dict[str, Payout]:
        return self._read.get_many(references)

    def add(self, payout: Payout) -> None:
        self._rows.insert(_PAYOUTS, payout)

    def add_many(self, payouts: builtins.list[Payout]) -> None:
        self._rows.insert_many(_PAYOUTS, payouts)

    def update(self, payout: Payout) -> None:
        self._rows.update(_PAYOUTS, payout)
        self._read.keep(payout.reference, payout)

    def due(self, now: int, limit: int, *, per_lane: int | None = None) -> list[Payout]:
        if per_lane is not None:
            return _named(self.get_many, self.due_refs(now, limit, per_lane=per_lane))
        return [_PAYOUTS.decode(row) for row in self._due_rows(_PAYOUT_COLUMNS, now, limit)]

    def due_refs(self, now: int, limit: int, *, per_lane: int | None = None) -> list[DueRef]:
        if per_lane is not None:
            params = {"now": now, "per_lane": per_lane, "limit": limit}
            rows = self._rows.run(_PAYOUT_LANES[self._rows.dialect.name], params).fetchall()
        else:
            rows = self._due_rows("p.reference, p.provider, p.merchant_id", now, limit)
        return [DueRef(*row) for row in rows]

    def _due_rows(self, columns: str, now: int, limit: int) -> list[Any]:
        # every due payout numbered within its (provider, merchant) in their order, on the narrow rows;
        # only the `limit` chosen are read whole
        turns = (
            "SELECT reference, next_check_at, row_number() OVER (PARTITION BY provider, merchant_id"
            f" ORDER BY next_check_at, reference) AS turn FROM payouts WHERE {self._due}"
        )
        rows: list[Any] = self._rows.run(
            f"SELECT {columns} FROM ({turns} ORDER BY turn, next_check_at, reference LIMIT ?) AS due"
            " JOIN payouts AS p ON p.reference = due.reference"
            " ORDER BY due.turn, due.next_check_at, due.reference",
            (now, limit),
        ).fetchall()
        return rows

    def count_due(self, now: int) -> int:
        return self._rows.count(f"SELECT count(*) FROM payouts WHERE {self._due}", (now,))

    def oldest_due(self, now: int) -> int | None:
        return self._rows.value(f"SELECT min(next_check_at) FROM payouts WHERE {self._due}", (now,))

    def tally(self, since: int, until: int, width: int) -> builtins.list[Tally]:
        return _tally(self._rows, "payouts", "currency", "amount", since, until, width)

    def totals(
        self,
        *,
        status: PayoutStatus | None = None,
        awaiting_review: bool | None = None,
        unresolved: bool | None = None,
    ) -> builtins.list[CurrencyTotal]:
        # literals, not parameters: the planner then sees which partial index of migration 7 holds the
        # rows; SQLite, without statistics, is told which (it would rather walk payouts_queue)
        dialect = self._rows.dialect
        where = ["TRUE"]
        if status is not None:
            where.append(sql_in("status", [status]))
        if awaiting_review is not None:
            where.append(dialect.flag("awaiting_review", awaiting_review))
        if unresolved is not None:
            where.append("resolution IS NULL" if unresolved else "resolution IS NOT NULL")
        index = ""
        if awaiting_review is True:
            index = dialect.indexed_by("payouts_held")
        elif status is PayoutStatus.FAILED and unresolved is True:
            index = dialect.indexed_by("payouts_failed_unresolved")
        rows = self._rows.run(
            f"SELECT currency, count(*), sum(amount) FROM payouts{index} WHERE {' AND '.join(where)}"
            " GROUP BY currency ORDER BY currency"
        ).fetchall()
        return [CurrencyTotal(str(c), int(n), int(a)) for c, n, a in rows]

    def spent(self, merchant_id: str, currency: str, since: int) -> int:
        return self._rows.count(
            f"SELECT {_spent_sql('')}", {"m": merchant_id, "c": currency, **_spent_params("", since)}
        )

    _INPUTS = (
        f"SELECT {_SETTINGS}, {_columns(_MERCHANTS, 'm')}, {_columns(_LIMITS, 'l')},"
        f" CASE WHEN l.per_day IS NOT NULL THEN {_spent_sql('d')} END,"
        f" CASE WHEN l.per_week IS NOT NULL THEN {_spent_sql('w')} END, b.available,"
        f" {_columns(_IDEMPOTENCY, 'i')}"
        " FROM (SELECT 1 AS one) AS one LEFT JOIN settings AS s ON s.id = 1"
        " LEFT JOIN merchants AS m ON m.id = :m"
        " LEFT JOIN payout_limits AS l ON l.merchant_id = :m AND l.currency = :c"
        " LEFT JOIN balances AS b ON b.merchant_id = :m AND b.currency = :c"
        " LEFT JOIN idempotency AS i ON i.merchant_id = :m AND i.key = :k"
    )

    def inputs(
        self,
        merchant_id: str,
        currency: str | None,
        *,
        day_since: int,
        week_since: int,
        idempotency_key: str | None = None,
    ) -> PayoutInputs:
        return self.inputs_later(
            merchant_id, currency, day_since=day_since, week_since=week_since, idempotency_key=idempotency_key
        )()

    def inputs_later(
        self,
        merchant_id: str,
        currency: str | None,
        *,
        day_since: int,
        week_since: int,
        idempotency_key: str | None = None,
    ) -> Callable[[], PayoutInputs]:
        params = {
            "m": merchant_id,
            "c": currency,
            "k": idempotency_key,  # none: the join finds no row
            **_spent_params("d", day_since),
            **_spent_params("w", week_since),
        }
        answer = self._rows.one_later(self._INPUTS, params)
        return lambda: self._inputs(answer())

    @staticmethod
    def _inputs(row: Any) -> PayoutInputs:
        merchant, limits = row[3 : 3 + _N_MERCHANT], row[3 + _N_MERCHANT : 3 + _N_MERCHANT + _N_LIMITS]
        kept = row[-_N_IDEMPOTENCY:]
        day, week, available = row[-_N_IDEMPOTENCY - 3 : -_N_IDEMPOTENCY]
        return PayoutInputs(
            settings=_settings(row[:3]),
            merchant=None if merchant[0] is None else _MERCHANTS.decode(merchant),
            limits=None if limits[0] is None else _LIMITS.decode(limits),
            spent_day=None if day is None else int(day),
            spent_week=None if week is None else int(week),
            available=None if available is None else int(available),
            kept=None if kept[0] is None else _IDEMPOTENCY.decode(kept),
        )

    def page(
        self,
        merchant_id: str,
        *,
        limit: int,
        after: str | None = None,
        status: PayoutStatus | None = None,
        merchant_reference: str | None = None,
        batch_id: str | None = None,
    ) -> list[Payout] | None:
        filters = _record_filters(status, merchant_reference, batch_id=batch_id)
        return self._rows.page(
            _PAYOUTS, {"merchant_id": merchant_id}, key="reference", after=after, filters=filters, limit=limit
        )

    def in_batch(self, batch_id: str, *, after: int | None, limit: int) -> builtins.list[Payout]:
        return self._rows.many(
            _PAYOUTS,
            "WHERE batch_id = ? AND batch_index > ? ORDER BY batch_index LIMIT ?",
            (batch_id, -1 if after is None else after, limit),
        )

    def batch_tally(self, batch_id: str) -> builtins.list[BatchTally]:
        rows = self._rows.run(
            "SELECT status, currency, count(*), sum(amount) FROM payouts WHERE batch_id = ?"
            " GROUP BY status, currency",
            (batch_id,),
        ).fetchall()
        return [BatchTally(PayoutStatus(s), c, int(n), int(total)) for s, c, n, total in rows]

    def batch_open(self, batch_id: str) -> int:
        return self._rows.count(
            f"SELECT count(*) FROM payouts WHERE batch_id = ? AND {_BATCH_OPEN}", (batch_id,)
        )

    def queue(
        self,
        *,
        limit: int,
        after: str | None = None,
        merchant_id: str | None = None,
        status: PayoutStatus | None = None,
        awaiting_review: bool | None = None,
        unresolved: bool | None = None,
        currency: str | None = None,
        created_from: int | None = None,
        created_before: int | None = None,
    ) -> builtins.list[Payout] | None:
        conditions = _equal(
            {
                "merchant_id": merchant_id,
                "status": status,
                "awaiting_review": awaiting_review,
                "currency": currency,
            }
        )
        conditions += _created(created_from, created_before)
        if unresolved is not None:
            conditions.append(("resolution IS NULL" if unresolved else "resolution IS NOT NULL", ()))
        return self._rows.listing(
            _PAYOUTS, key="reference", after=after, filters=conditions, limit=limit, newest_first=False
        )


class _Batches(_Repository):
    def add(self, batch: PayoutBatch) -> None:
        self._rows.insert(_BATCHES, batch)

    def get(self, batch_id: str) -> PayoutBatch | None:
        batch: PayoutBatch | None = self._rows.one(_BATCHES, "id = ?", (batch_id,), for_update=True)
        return batch

    def update(self, batch: PayoutBatch) -> None:
        self._rows.update(_BATCHES, batch)


# --- the ledger ------------------------------------------------------------------------------------


def _moved(
    merchant_id: str, currency: str, available: int, reserved: int, paid_out: int, credited: int
) -> dict[str, Any]:
    """The parameters of a balance's conditional update (``_Ledger._SHIFT``)."""
    return {"m": merchant_id, "c": currency, "a": available, "r": reserved, "p": paid_out, "k": credited}


class _Ledger(_Repository):
    def balance(self, merchant_id: str, currency: str) -> Balance:
        balance: Balance | None = self._rows.one(
            _BALANCES, "merchant_id = ? AND currency = ?", (merchant_id, currency)
        )
        return balance if balance is not None else Balance(merchant_id=merchant_id, currency=currency)

    def balances(self, merchant_id: str) -> list[Balance]:
        return self._rows.many(_BALANCES, "WHERE merchant_id = ? ORDER BY currency", (merchant_id,))

    def put_balance(self, balance: Balance) -> None:
        self._rows.upsert(_BALANCES, balance)

    _SHIFT = (
        "UPDATE balances SET available = available + :a, reserved = reserved + :r,"
        " paid_out = paid_out + :p, credited = credited + :k WHERE merchant_id = :m AND currency = :c"
        " AND available + :a >= 0 AND reserved + :r >= 0 AND paid_out + :p >= 0"
    )
    _MOVE = f"{_SHIFT} RETURNING {_BALANCE_COLUMNS}"

    def move(
        self,
        merchant_id: str,
        currency: str,
        *,
        available: int = 0,
        reserved: int = 0,
        paid_out: int = 0,
        credited: int = 0,
    ) -> Balance | None:
        amounts = _moved(merchant_id, currency, available, reserved, paid_out, credited)
        # one conditional statement: the row changes only if no account goes below zero (PostgreSQL
        # waits for a concurrent move of the row and checks the condition again on what it left)
        row = self._rows.write(self._MOVE, amounts).fetchone()
        if row is None and min(available, reserved, paid_out) >= 0:
            # only a missing row refuses an addition: create it (or, if another transaction just did,
            # add to theirs)
            row = self._rows.write(
                f"INSERT INTO balances ({_BALANCE_COLUMNS}) VALUES (:m, :c, :a, :r, :p, :k)"
                f" ON CONFLICT (merchant_id, currency) DO NOTHING RETURNING {_BALANCE_COLUMNS}",
                amounts,
            ).fetchone()
            if row is None:
                row = self._rows.write(self._MOVE, amounts).fetchone()
        moved: Balance | None = None if row is None else _BALANCES.decode(row)
        return moved

    def shift(
        self, merchant_id: str, currency: str, *, available: int = 0, reserved: int = 0, paid_out: int = 0
    ) -> bool:
        # move's conditional statement without its RETURNING: the new balance is not read
        amounts = _moved(merchant_id, currency, available, reserved, paid_out, 0)
        refused = f"balances: the {currency} balance of {merchant_id} does not hold the move"
        return self._rows.write_checked(self._SHIFT, amounts, refused)

    def append(self, entry: LedgerEntry) -> None:
        self._rows.insert(_ENTRIES, entry)

    def append_many(self, entries: list[LedgerEntry]) -> None:
        self._rows.insert_many(_ENTRIES, entries)

    def entries(self, merchant_id: str, currency: str) -> list[LedgerEntry]:
        return self._rows.many(
            _ENTRIES,
            f"WHERE merchant_id = ? AND currency = ? ORDER BY created_at, {self._rows.seq}",
            (merchant_id, currency),
        )

    def page(
        self, merchant_id: str, currency: str, *, limit: int, after: str | None = None
    ) -> list[LedgerEntry] | None:
        scope = {"merchant_id": merchant_id, "currency": currency}
        return self._rows.page(_ENTRIES, scope, key="id", after=after, filters=[], limit=limit)


# --- webhooks, the outbox, idempotency, leases, rates ---------------------------------------------

# _queries.endpoint_is_troubled and endpoint_trouble_order
_TROUBLED = "(NOT is_active OR consecutive_failures > 0)"


class _Webhooks(_Repository):
    def __init__(self, rows: Rows) -> None:
        super().__init__(rows)
        # read once per transaction (a batch of events reads its merchants' endpoints); put, the only
        # writer of an endpoint's row, keeps it current
        self._read: dict[str, WebhookEndpoint | None] = {}

    def get(self, merchant_id: str) -> WebhookEndpoint | None:
        if merchant_id not in self._read:
            self._read[merchant_id] = self._rows.one(_WEBHOOKS, "merchant_id = ?", (merchant_id,))
        return self._read[merchant_id]

    def get_many(self, merchant_ids: Sequence[str]) -> dict[str, WebhookEndpoint]:
        wanted = sorted(set(merchant_ids) - self._read.keys())
        if wanted:
            marks = ", ".join("?" for _ in wanted)
            endpoints = self._rows.many(_WEBHOOKS, f"WHERE merchant_id IN ({marks})", wanted)
            self._read.update(dict.fromkeys(wanted))
            self._read.update((endpoint.merchant_id, endpoint) for endpoint in endpoints)
        return {key: found for key in merchant_ids if (found := self._read.get(key)) is not None}

    def put(self, endpoint: WebhookEndpoint) -> None:
        self._rows.upsert(_WEBHOOKS, endpoint)
        self._read[endpoint.merchant_id] = endpoint

    def count_troubled(self) -> tuple[int, int]:
        row = self._rows.run(
            "SELECT count(*) FILTER (WHERE is_active), count(*) FILTER (WHERE NOT is_active) FROM webhooks"
            f" WHERE {_TROUBLED}"
        ).fetchone()
        return int(row[0]), int(row[1])

    def troubled(self, limit: int) -> list[WebhookEndpoint]:
        return self._rows.many(
            _WEBHOOKS,
            f"WHERE {_TROUBLED} ORDER BY is_active, consecutive_failures DESC, merchant_id LIMIT ?",
            (limit,),
        )


#: where an event to deliver takes the state its merchant's endpoint gives it: PENDING, or SKIPPED with
#: NO_ENDPOINT when no active endpoint listens (``Outbox.add_to_deliver``); each CASE asks the endpoint
#: by its key, under the merchant's lock, in the insert itself
_HEARD = {"status": f"'{DeliveryStatus.SKIPPED.value}'", "last_error": f"'{NO_ENDPOINT}'"}
_HEARD_AT = [place for place, column in enumerate(_EVENTS.columns) if column in _HEARD]


@functools.cache
def _heard_insert(active: str) -> str:
    """The events' insert with its status and error decided by the merchant's endpoint (``active``:
    the dialect's test of ``is_active``)."""
    heard = f"EXISTS (SELECT 1 FROM webhooks WHERE merchant_id = ? AND {active})"
    marks = ", ".join(
        f"CASE WHEN {heard} THEN ? ELSE {_HEARD[column]} END" if column in _HEARD else "?"
        for column in _EVENTS.columns
    )
    return f"INSERT INTO events ({', '.join(_EVENTS.columns)}) VALUES ({marks})"


class _Outbox(_Repository):
    def __init__(self, rows: Rows) -> None:
        super().__init__(rows)
        self._read = _ForUpdate(rows, _EVENTS, "id")  # written by update, and by defer (forgets)

    def add(self, event: Event) -> None:
        self._rows.insert(_EVENTS, event)

    def add_to_deliver(self, event: Event) -> None:
        heard = self._rows.dialect.flag("is_active", True)
        values = _EVENTS.values(event)
        for place in reversed(_HEARD_AT):  # each CASE's test names the merchant before its value
            values.insert(place, event.merchant_id)
        self._rows.write(_heard_insert(heard), values)

    def get(self, event_id: str) -> Event | None:
        event: Event | None = self._read.get(event_id)
        return event

    def get_many(self, event_ids: Sequence[str]) -> dict[str, Event]:
        return self._read.get_many(event_ids)

    def update(self, event: Event) -> None:
        self._rows.update(_EVENTS, event)
        self._read.keep(event.id, event)

    def due(self, now: int, limit: int, *, per_lane: int | None = None) -> list[Event]:
        if per_lane is not None:
            return _named(self.get_many, self.due_refs(now, limit, per_lane=per_lane))
        return self._rows.many(_EVENTS, self._listing(None), _due_params(now, limit, None))

    def due_refs(self, now: int, limit: int, *, per_lane: int | None = None) -> list[DueRef]:
        listing = self._listing(per_lane)
        if per_lane is None:
            listing = f"SELECT events.id, events.merchant_id FROM events {listing}"
        found = self._rows.run(listing, _due_params(now, limit, per_lane))
        return [DueRef(key, merchant_id, merchant_id) for key, merchant_id in found.fetchall()]

    def _listing(self, per_lane: int | None) -> str:
        # _queries.event_is_due, oldest first; in turns over _queries.event_lane when per_lane is given
        due = f"{_DUE_EVENT} AND next_attempt_at <= :now"
        seq = self._rows.seq
        order = f"events.created_at, events.{seq}"
        if per_lane is None:
            return f"WHERE {due} ORDER BY {order} LIMIT :limit"
        hint = self._rows.dialect.indexed_by("events_pending")  # SQLite: the index to read
        pending = f"events{hint}"
        # in turns, as _in_turns ranks them, but over each lane's first :per_lane due events only: the
        # lanes with events waiting are found one index probe each, and each lane's due events read
        # from the same partial index (migration 11: pending events by merchant and due time), its
        # first :per_lane kept; the events not yet due are not read, and only those few are ranked
        dialect = self._rows.dialect
        waiting = (
            f"lanes.lane IS NOT NULL AND w.merchant_id = lanes.lane AND w.{_DUE_EVENT}"
            " AND w.next_attempt_at <= :now"
        )
        heads = _lane_heads(
            dialect,
            "events",
            "events_pending",
            f"w.id, w.merchant_id, w.created_at, w.{seq}",
            waiting,
            f"w.created_at, w.{seq}",
            whole=True,  # events_pending holds them by due time
        )
        # the events are named (id, merchant), not read: joined to `events` again, PostgreSQL, which
        # cannot tell how few rows the walk gives, would hash every event ever written
        return (
            "WITH RECURSIVE lanes(lane) AS ("
            f" SELECT min(merchant_id) FROM {pending} WHERE {_DUE_EVENT}"
            f" UNION ALL SELECT (SELECT min(merchant_id) FROM {pending} WHERE {_DUE_EVENT}"
            " AND merchant_id > lanes.lane) FROM lanes WHERE lanes.lane IS NOT NULL),"
            f" turns AS (SELECT head.id, head.merchant_id, head.created_at, head.{seq} AS written,"
            f" row_number() OVER (PARTITION BY head.merchant_id ORDER BY head.created_at, head.{seq}) AS turn"
            f" {heads}) SELECT id, merchant_id FROM turns ORDER BY turn, created_at, written LIMIT :limit"
        )

    def defer(self, merchant_id: str, until: int) -> int:
        self._read.forget()  # rows it changes are read afresh
        return self._rows.write_count(
            f"UPDATE events SET next_attempt_at = ? WHERE merchant_id = ? AND {_DUE_EVENT}"
            " AND next_attempt_at < ?",
            (until, merchant_id, until),
        )

    def count_due(self, now: int) -> int:
        return self._rows.count(
            f"SELECT count(*) FROM events WHERE {_DUE_EVENT} AND next_attempt_at <= ?", (now,)
        )

    def oldest_due(self, now: int) -> int | None:
        return self._rows.value(
            f"SELECT min(next_attempt_at) FROM events WHERE {_DUE_EVENT} AND next_attempt_at <= ?", (now,)
        )

    def list(self, merchant_id: str) -> builtins.list[Event]:
        return self._rows.many(
            _EVENTS, f"WHERE merchant_id = ? ORDER BY created_at, {self._rows.seq}", (merchant_id,)
        )

    def page(
        self,
        merchant_id: str,
        *,
        limit: int,
        after: str | None = None,
        event_type: str | None = None,
        statuses: frozenset[DeliveryStatus] | None = None,
    ) -> builtins.list[Event] | None:
        filters = _equal({"type": event_type})
        if statuses is not None:
            values = sorted(status.value for status in statuses)
            filters.append((f"status IN ({', '.join('?' for _ in values) or 'NULL'})", tuple(values)))
        return self._rows.page(
            _EVENTS, {"merchant_id": merchant_id}, key="id", after=after, filters=filters, limit=limit
        )

    def resends_due(self, now: int, limit: int) -> builtins.list[Event]:
        return self._rows.many(
            _EVENTS,
            f"WHERE resend_at IS NOT NULL AND resend_at <= ? ORDER BY resend_at, {self._rows.seq} LIMIT ?",
            (now, limit),
        )


class _Deliveries(_Repository):
    def add(self, delivery: Delivery) -> None:
        self._rows.insert(_DELIVERIES, delivery)

    def list(self, event_id: str) -> builtins.list[Delivery]:
        return self._rows.many(_DELIVERIES, f"WHERE event_id = ? ORDER BY at, {self._rows.seq}", (event_id,))


class _Idempotency(_Repository):
    def get(self, merchant_id: str, key: str) -> IdempotencyRecord | None:
        record: IdempotencyRecord | None = self._rows.one(
            _IDEMPOTENCY, "merchant_id = ? AND key = ?", (merchant_id, key)
        )
        return record

    def put(self, record: IdempotencyRecord) -> None:
        self._rows.upsert(_IDEMPOTENCY, record)

    def delete(self, merchant_id: str, key: str) -> None:
        self._rows.write("DELETE FROM idempotency WHERE merchant_id = ? AND key = ?", (merchant_id, key))

    def purge(self, before: int) -> int:
        return self._rows.write_count("DELETE FROM idempotency WHERE created_at < ?", (before,))


class _Leases(_Repository):
    def take(self, kind: str, key: str, until: int) -> None:
        self.take_many(kind, [(key, until)])

    def drop(self, kind: str, key: str) -> None:
        self.drop_many(kind, [key])

    def take_many(self, kind: str, leases: Sequence[tuple[str, int]]) -> None:
        leases = list(dict(leases).items())  # a key given twice: its last lease (one row per statement)
        if leases:
            self._rows.write(
                "INSERT INTO work_leases (kind, key, until) VALUES "
                + ", ".join("(?, ?, ?)" for _ in leases)
                + " ON CONFLICT (kind, key) DO UPDATE SET until = excluded.until",
                [value for key, until in leases for value in (kind, key, until)],
            )

    def drop_many(self, kind: str, keys: Sequence[str]) -> None:
        if keys:
            marks = ", ".join("?" for _ in keys)
            self._rows.write(f"DELETE FROM work_leases WHERE kind = ? AND key IN ({marks})", (kind, *keys))

    def held(self, kind: str, now: int) -> int:
        return self._rows.count("SELECT count(*) FROM work_leases WHERE kind = ? AND until > ?", (kind, now))

    def purge(self, before: int) -> int:
        return self._rows.write_count("DELETE FROM work_leases WHERE until < ?", (before,))


class _Rates(_Repository):
    """The rate counters: never the store's write lock, only their key's own (where there is one)."""

    def buckets(self, key_id: str, width: int, since: int) -> builtins.list[tuple[int, int]]:
        if self._rows.writable:  # before the read: its snapshot then holds the last holder's counts
            self._rows.hold_key("rate", key_id)
        rows = self._rows.run(
            "SELECT start, hits FROM rate_counts WHERE key_id = ? AND width = ? AND start >= ?"
            " ORDER BY start",
            (key_id, width, since),
            lock=False,
        ).fetchall()
        return [(int(start), int(hits)) for start, hits in rows]

    def spans(
        self, key_ids: Sequence[str], spans: Sequence[tuple[int, int]]
    ) -> dict[str, builtins.list[builtins.list[tuple[int, int]]]]:
        if self._rows.writable:
            self._rows.hold_keys("rate", key_ids)
        # a range of the primary key per key and span: with the spans OR-ed in one WHERE, SQLite read
        # every bucket of the key (a busy key holds an hour of one-second buckets: 3,600 rows a count)
        keys = ", ".join("?" for _ in key_ids)
        one = (
            "SELECT key_id, width, start, hits FROM rate_counts"
            f" WHERE key_id IN ({keys}) AND width = ? AND start >= ?"
        )
        rows = self._rows.run(
            " UNION ALL ".join(one for _ in spans) + " ORDER BY key_id, width, start",
            [value for span in spans for value in (*key_ids, *span)],
            lock=False,
        ).fetchall()
        found: dict[str, builtins.list[builtins.list[tuple[int, int]]]] = {
            key_id: [[] for _ in spans] for key_id in key_ids
        }
        place = {width: n for n, (width, _) in enumerate(spans)}
        for key_id, width, start, hits in rows:
            found[key_id][place[width]].append((int(start), int(hits)))
        return found

    def add(self, key_id: str, width: int, start: int, hits: int = 1) -> None:
        self.add_many([(key_id, width, start, hits)])

    def add_many(self, counts: Sequence[tuple[str, int, int, int]]) -> None:
        buckets: dict[tuple[str, int, int], int] = {}  # one row each: a statement updates a row once
        for key_id, width, start, hits in counts:
            buckets[(key_id, width, start)] = buckets.get((key_id, width, start), 0) + hits
        if not buckets:
            return
        if self._rows.writable:
            self._rows.hold_keys("rate", [key_id for key_id, _, _ in buckets])
        values = ", ".join("(?, ?, ?, ?)" for _ in buckets)
        self._rows.write(
            f"INSERT INTO rate_counts (key_id, width, start, hits) VALUES {values}"
            " ON CONFLICT (key_id, width, start) DO UPDATE SET hits = rate_counts.hits + excluded.hits",
            [value for bucket, hits in buckets.items() for value in (*bucket, hits)],
            lock=False,
        )

    def purge(self, before: int) -> int:
        return self._rows.write_count("DELETE FROM rate_counts WHERE start < ?", (before,), lock=False)


# --- operators, console sessions, the audit trail ---------------------------------------------------


class _Operators(_Repository):
    def get(self, operator_id: str) -> StoredOperator | None:
        found: StoredOperator | None = self._rows.one(_OPERATORS, "id = ?", (operator_id,))
        return found

    def by_hash(self, token_hash: str) -> StoredOperator | None:
        found: StoredOperator | None = self._rows.one(_OPERATORS, "token_hash = ?", (token_hash,))
        return found

    def put(self, operator: StoredOperator) -> None:
        self._rows.upsert(_OPERATORS, operator)

    def list(self) -> builtins.list[StoredOperator]:
        return self._rows.many(_OPERATORS, f"ORDER BY created_at, {self._rows.seq}")


class _Sessions(_Repository):
    def by_hash(self, token_hash: str) -> StoredSession | None:
        session: StoredSession | None = self._rows.one(_SESSIONS, "token_hash = ?", (token_hash,))
        return session

    def put(self, session: StoredSession) -> None:
        self._rows.upsert(_SESSIONS, session)

    def delete(self, session_id: str) -> None:
        self._rows.write("DELETE FROM console_sessions WHERE id = ?", (session_id,))

    def end_all(self, operator_id: str) -> int:
        return self._rows.write_count("DELETE FROM console_sessions WHERE operator_id = ?", (operator_id,))

    def purge(self, *, seen_before: int, created_before: int) -> int:
        return self._rows.write_count(
            "DELETE FROM console_sessions WHERE last_seen_at < ? OR created_at < ?",
            (seen_before, created_before),
        )


class _Audit(_Repository):
    """Append-only: the migrations' triggers refuse UPDATE and DELETE of ``audit_log``."""

    def add(self, entry: StoredAuditEntry) -> None:
        self._rows.insert(_AUDIT, entry)

    def page(
        self, *, limit: int, after: str | None = None, subject: str | None = None
    ) -> builtins.list[StoredAuditEntry] | None:
        conditions = _equal({"subject": subject})
        return self._rows.listing(_AUDIT, key="id", after=after, filters=conditions, limit=limit, at="at")


_R = typing.TypeVar("_R", covariant=True)


class _Made(typing.Generic[_R]):
    """A repository of a unit of work, made the first time the unit uses it and then kept in the unit's
    own attributes (a descriptor without ``__set__``: the instance's value wins from then on). Most units
    use two or three of the seventeen; making all of them for every unit cost about 10 us a unit."""

    def __init__(self, make: typing.Callable[[Rows], _R]) -> None:
        self._make = make
        self._name = ""

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self._name = name

    @typing.overload
    def __get__(self, unit: None, owner: type[Any] | None = None) -> _Made[_R]: ...
    @typing.overload
    def __get__(self, unit: SqlTransaction, owner: type[Any] | None = None) -> _R: ...
    def __get__(self, unit: SqlTransaction | None, owner: type[Any] | None = None) -> _R | _Made[_R]:
        if unit is None:
            return self
        made = unit.__dict__[self._name] = self._make(unit.unit_rows)
        return made


class SqlTransaction:
    """One unit of work on one connection: the repositories of ``ports.UnitOfWork``."""

    def __init__(self, rows: Rows) -> None:
        self.unit_rows = rows

    settings = _Made(_Settings)
    merchants = _Made(_Merchants)
    keys = _Made(_Keys)
    limits = _Made(_Limits)
    collections = _Made(_Collections)
    payouts = _Made(_Payouts)
    batches = _Made(_Batches)
    ledger = _Made(_Ledger)
    webhooks = _Made(_Webhooks)
    outbox = _Made(_Outbox)
    deliveries = _Made(_Deliveries)
    idempotency = _Made(_Idempotency)
    leases = _Made(_Leases)
    rates = _Made(_Rates)
    operators = _Made(_Operators)
    sessions = _Made(_Sessions)
    audit = _Made(_Audit)
