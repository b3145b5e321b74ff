"""The reads folded into one statement (issue 26: few round trips) answer what their separate reads
answer, on every store: a key with its merchant and switches, a payout's inputs, a key's rate windows."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import attrs
import psycopg
import pytest
from test_store_contract import NOW, api_key, merchant, payout  # type: ignore[import-not-found, unused-ignore]

from paymentcore._domain.models import IdempotencyRecord, PayoutLimits, PayoutStatus, Settings
from paymentcore.adapters.postgres import PostgresStore
from paymentcore.adapters.sqlite import SqliteStore
from paymentcore.ports import KeyLookup, PayoutInputs, Store, UnitOfWork

HOUR = 3_600_000
DAY = 24 * HOUR


def test_a_key_is_looked_up_with_its_merchant_and_the_switches(store: Store) -> None:
    with store.read() as tx:
        assert tx.keys.lookup("hash-1") is None
    with store.transaction() as tx:
        tx.keys.put(api_key())  # its merchant, mer_1, does not exist yet
    with store.read() as tx:
        assert tx.keys.lookup("hash-1") == KeyLookup(api_key(), None, Settings())
    switches = Settings(api_enabled=False, payouts_enabled=True, closed_currencies=frozenset({"XOF"}))
    with store.transaction() as tx:
        tx.merchants.put(merchant())
        tx.settings.put(switches)
    with store.read() as tx:
        found = tx.keys.lookup("hash-1")
        assert found == KeyLookup(api_key(), merchant(), switches)
        assert found == KeyLookup(tx.keys.by_hash("hash-1"), tx.merchants.get("mer_1"), tx.settings.get())  # type: ignore[arg-type]


def test_a_payouts_inputs_are_read_together_and_spends_only_for_windows_with_a_limit(store: Store) -> None:
    with store.transaction() as tx:
        tx.merchants.put(merchant())
        ages = [(HOUR // 2, PayoutStatus.PENDING), (3 * HOUR, PayoutStatus.PAID)]
        ages += [(2 * DAY, PayoutStatus.SENT)]
        ages += [(HOUR, PayoutStatus.REJECTED), (8 * DAY, PayoutStatus.PAID)]
        for n, (age, status) in enumerate(ages):
            tx.payouts.add(payout(f"PO-{n}", amount=100 * (n + 1), status=status, created_at=NOW - age))
    day_since, week_since = NOW - DAY, NOW - 7 * DAY
    with store.read() as tx:
        # no limits: no spend read; no currency: the switches and the merchant only
        assert tx.payouts.inputs("mer_1", "XAF", day_since=day_since, week_since=week_since) == PayoutInputs(
            Settings(), merchant(), None, None, None
        )
        assert tx.payouts.inputs("mer_9", None, day_since=day_since, week_since=week_since) == PayoutInputs(
            Settings(), None, None, None, None
        )
    limits = PayoutLimits("mer_1", "XAF", None, per_day=10_000, per_week=None, review_threshold=5)
    with store.transaction() as tx:
        tx.limits.put(limits)
    with store.read() as tx:
        found = tx.payouts.inputs("mer_1", "XAF", day_since=day_since, week_since=week_since)
        day_spent = tx.payouts.spent("mer_1", "XAF", day_since)
        assert found == PayoutInputs(Settings(), merchant(), limits, day_spent, None)
        assert found.spent_day == 100 + 200  # the rejected one does not count, the older ones are out
    both = PayoutLimits("mer_1", "XAF", None, per_day=10_000, per_week=50_000, review_threshold=None)
    with store.transaction() as tx:
        tx.limits.put(both)
    with store.read() as tx:
        found = tx.payouts.inputs("mer_1", "XAF", day_since=day_since, week_since=week_since)
        assert (found.spent_day, found.spent_week) == (300, 300 + 300)
        assert found.spent_week == tx.payouts.spent("mer_1", "XAF", week_since)
        assert tx.payouts.inputs("mer_1", "XOF", day_since=day_since, week_since=week_since).limits is None
        assert found.available is None  # no balance in the currency
    with store.transaction() as tx:
        tx.ledger.move("mer_1", "XAF", available=900, credited=900)
        tx.ledger.move("mer_1", "XAF", available=-150, reserved=150)
        tx.ledger.move("mer_1", "XOF", available=5, credited=5)
    with store.read() as tx:
        found = tx.payouts.inputs("mer_1", "XAF", day_since=day_since, week_since=week_since)
        assert found.available == tx.ledger.balance("mer_1", "XAF").available == 750
        assert tx.payouts.inputs("mer_1", "XOF", day_since=day_since, week_since=week_since).available == 5
        assert tx.payouts.inputs("mer_2", "XAF", day_since=day_since, week_since=week_since).available is None


def test_a_payouts_inputs_carry_the_answer_kept_for_its_idempotency_key(store: Store) -> None:
    """The key's kept answer is read with the inputs (one statement, not two), for that merchant and key
    only; the inputs are the same with or without it."""
    kept = IdempotencyRecord("mer_1", "order-7", "print-7", NOW, 201, '{"reference": "PO-7"}')
    with store.transaction() as tx:
        tx.merchants.put(merchant())
        tx.ledger.move("mer_1", "XAF", available=500, credited=500)
        tx.idempotency.put(kept)
        tx.idempotency.put(attrs.evolve(kept, merchant_id="mer_2", key="order-8"))
    day_since, week_since = NOW - DAY, NOW - 7 * DAY
    with store.read() as tx:
        plain = tx.payouts.inputs("mer_1", "XAF", day_since=day_since, week_since=week_since)
        assert plain.kept is None
        found = tx.payouts.inputs(
            "mer_1", "XAF", day_since=day_since, week_since=week_since, idempotency_key="order-7"
        )
        assert found == attrs.evolve(plain, kept=kept)
        assert found.kept == tx.idempotency.get("mer_1", "order-7")
        for merchant_id, key in [("mer_1", "order-8"), ("mer_2", "order-7"), ("mer_1", "order-")]:
            later = tx.payouts.inputs_later(
                merchant_id, "XAF", day_since=day_since, week_since=week_since, idempotency_key=key
            )
            assert later().kept is None, (merchant_id, key)
        no_currency = tx.payouts.inputs(
            "mer_1", None, day_since=day_since, week_since=week_since, idempotency_key="order-7"
        )
        assert no_currency.kept == kept and no_currency.available is None


def test_a_keys_rate_windows_are_read_together(store: Store) -> None:
    with store.transaction() as tx:
        for width, start, hits in [(1000, 0, 2), (1000, 5000, 1), (60_000, 0, 7), (60_000, 60_000, 3)]:
            tx.rates.add("key_1", width, start, hits)
        tx.rates.add("key_2", 1000, 5000, 9)
    with store.transaction() as tx:
        found = tx.rates.spans(["key_1", "key_2", "key_3"], [(1000, 1000), (60_000, 0)])
        spans = found["key_1"]
        assert spans == [tx.rates.buckets("key_1", 1000, 1000), tx.rates.buckets("key_1", 60_000, 0)]
        assert spans == [[(5000, 1)], [(0, 7), (60_000, 3)]]
        assert found["key_2"] == [[(5000, 9)], []] and found["key_3"] == [[], []]
    with store.transaction() as tx:  # one bucket twice in one call: both added, on every store
        tx.rates.add_many([("key_3", 1000, 5000, 2), ("key_2", 1000, 5000, 1), ("key_3", 1000, 5000, 3)])
    with store.read() as tx:
        assert tx.rates.buckets("key_3", 1000, 0) == [(5000, 5)]
        assert tx.rates.buckets("key_2", 1000, 0) == [(5000, 10)]


def _glance(store: Store) -> AbstractContextManager[UnitOfWork]:
    """What the services glance through: the store's glance where it offers one, its read view elsewhere."""
    glance = getattr(store, "glance", None)
    return glance() if glance is not None else store.read()


def test_a_glance_sees_what_is_committed_and_writes_nothing(store: Store) -> None:
    with store.transaction() as tx:
        tx.merchants.put(merchant())
        tx.keys.put(api_key())
        tx.payouts.add(payout("PO-1"))
    with _glance(store) as tx:
        assert tx.keys.lookup("hash-1") == KeyLookup(api_key(), merchant(), Settings())
        assert tx.payouts.get("PO-1") == payout("PO-1")
        assert tx.payouts.get("PO-2") is None
    with pytest.raises(Exception), _glance(store) as tx:  # noqa: B017 - each store says it its own way
        tx.payouts.add(payout("PO-2"))
    with store.read() as tx:
        assert tx.payouts.get("PO-2") is None


def _in_transaction(tx: Any) -> bool:
    """Whether the unit's connection is inside a transaction, as its engine tells it."""
    if hasattr(tx, "rows"):  # PostgreSQL's unit
        return bool(tx.rows.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE)
    return bool(tx.unit_rows.conn.in_transaction)


def test_a_glance_looks_up_in_one_statement_outside_any_transaction(store: Store) -> None:
    if not isinstance(store, PostgresStore | SqliteStore):
        pytest.skip("the memory store has no transactions: its glance is its read view")
    with store.transaction() as tx:
        tx.merchants.put(merchant())
        tx.keys.put(api_key())
    with store.glance() as tx:
        assert not _in_transaction(tx)  # no BEGIN sent
        assert tx.keys.lookup("hash-1") == KeyLookup(api_key(), merchant(), Settings())
        assert not _in_transaction(tx)  # nothing left to end
    if isinstance(store, SqliteStore):
        with store.read() as tx:  # the read view still is one snapshot
            assert _in_transaction(tx)


def test_inputs_asked_before_another_read_answer_what_inputs_answer(store: Store) -> None:
    with store.transaction() as tx:
        tx.merchants.put(merchant())
        limits = PayoutLimits("mer_1", "XAF", None, per_day=10_000, per_week=None, review_threshold=None)
        tx.limits.put(limits)
        tx.payouts.add(payout("PO-1", amount=300, status=PayoutStatus.PENDING, created_at=NOW - HOUR))
        tx.ledger.move("mer_1", "XAF", available=700, credited=700)
    day_since, week_since = NOW - DAY, NOW - 7 * DAY
    with store.transaction() as tx:  # as a payout's unit asks them: with its idempotency key's lookup
        later = tx.payouts.inputs_later("mer_1", "XAF", day_since=day_since, week_since=week_since)
        assert tx.idempotency.get("mer_1", "key-1") is None
        found = later()
        assert found == tx.payouts.inputs("mer_1", "XAF", day_since=day_since, week_since=week_since)
        assert (found.merchant, found.spent_day, found.available) == (merchant(), 300, 700)


def _prepared_on(conn: psycopg.Connection[tuple[object, ...]]) -> set[str]:
    rows = conn.execute("SELECT statement FROM pg_prepared_statements").fetchall()
    return {str(row[0]) for row in rows}


def test_on_postgresql_a_statement_sent_again_is_prepared_and_one_it_cannot_prepare_still_runs(
    store: Store,
) -> None:
    """A statement a connection sends a second time is prepared on it, between units, and from then on
    sent as EXECUTE with its values, answering as before; one PostgreSQL refuses to prepare (a value
    whose type it cannot infer) is sent as text, and its units commit."""
    if not isinstance(store, PostgresStore):
        pytest.skip("statements are prepared on PostgreSQL's connections only")
    with store.transaction() as tx:
        tx.merchants.put(merchant())
    one = PostgresStore(store.url, pool_size=1, migrate=False)  # every unit on the same connection
    try:
        answers = []
        for _ in range(3):
            with one.read() as view:
                answers.append(view.merchants.get("mer_1"))
        assert answers == [merchant()] * 3
        with one.glance() as tx:
            conn = tx.rows.conn
            prepared = _prepared_on(conn)
            assert any("FROM merchants WHERE id = $1" in text for text in prepared), prepared
            assert any(call.startswith("EXECUTE pc_") for call in tx.rows.prepared.calls.values())
        untyped = "SELECT count(*) FROM merchants WHERE ? IS NULL OR id = ?"
        for n in range(3):
            with one.transaction() as tx:
                assert tx.rows.count(untyped, (None, "mer_1")) == 1
                tx.merchants.put(attrs.evolve(merchant(), name=f"Renamed {n}"))
        with one.glance() as tx:
            assert tx.rows.dialect.sql(untyped) in tx.rows.prepared.refused
            assert not any("IS NULL OR id" in text for text in _prepared_on(tx.rows.conn))
        with one.read() as view:
            found = view.merchants.get("mer_1")
            assert found is not None and found.name == "Renamed 2"
        # a statement of named values (a payout's inputs: the merchant's id used four times) likewise
        since = NOW - DAY
        inputs = []
        for _ in range(3):
            with one.read() as view:
                inputs.append(view.payouts.inputs("mer_1", "XAF", day_since=since, week_since=since))
        assert inputs[0].merchant is not None and inputs == [inputs[0]] * 3
        with one.glance() as tx:
            assert any("LEFT JOIN payout_limits" in text for text in _prepared_on(tx.rows.conn))
    finally:
        one.close()


def test_on_postgresql_a_lookup_by_a_list_of_keys_is_planned_afresh_not_prepared(store: Store) -> None:
    """A batch's read of rows by a list of keys is sent as text each time, so PostgreSQL plans it for
    the table as it is (a prepared statement keeps the plan chosen while the table was small: a
    sequential scan, still used at thousands of rows); the same lookup of one key is prepared. Both
    answer the same rows."""
    if not isinstance(store, PostgresStore):
        pytest.skip("statements are prepared on PostgreSQL's connections only")
    with store.transaction() as tx:
        tx.merchants.put(merchant())
        for n in range(3):
            tx.payouts.add(payout(f"PO-{n}", amount=100 + n, status=PayoutStatus.PENDING, created_at=NOW))
    one = PostgresStore(store.url, pool_size=1, migrate=False)  # every unit on the same connection
    try:
        for _ in range(3):
            with one.transaction() as tx:
                found = tx.payouts.get_many(["PO-2", "PO-0", "PO-1"])
                assert sorted(p.amount for p in found.values()) == [100, 101, 102]
            with one.transaction() as tx:
                alone = tx.payouts.get_many(["PO-1"])
                assert [p.amount for p in alone.values()] == [101]
        with one.glance() as tx:
            prepared = _prepared_on(tx.rows.conn)
        assert any("FROM payouts WHERE reference IN ($1)" in text for text in prepared), prepared
        assert not any("FROM payouts WHERE reference IN ($1, $2" in text for text in prepared), prepared
    finally:
        one.close()


def test_on_postgresql_a_connection_whose_prepared_statement_went_stale_prepares_afresh(
    store: Store,
) -> None:
    """A change of the schema can make a prepared statement's plan impossible ("cached plan must not
    change result type"): the unit that meets it fails, as on any failed statement, and the connection
    forgets what it prepared, so the next unit on it is answered."""
    if not isinstance(store, PostgresStore):
        pytest.skip("statements are prepared on PostgreSQL's connections only")
    with store.transaction() as tx:
        tx.merchants.put(merchant())
    one = PostgresStore(store.url, pool_size=1, migrate=False)
    try:
        for _ in range(3):
            with one.read() as view:
                assert view.merchants.get("mer_1") == merchant()
        with psycopg.connect(store.url, autocommit=True) as other:
            other.execute("ALTER TABLE merchants ALTER COLUMN name TYPE varchar(300)")
        with pytest.raises(psycopg.errors.FeatureNotSupported), one.read() as view:
            view.merchants.get("mer_1")
        for _ in range(3):
            with one.read() as view:
                assert view.merchants.get("mer_1") == merchant()
    finally:
        one.close()


def test_on_postgresql_a_refused_unit_after_health_checks_leaves_the_prepared_statements(
    store: Store,
) -> None:
    """Health checks (``ping``, every few seconds behind a load balancer) on a connection, then a unit
    that fails on it (a duplicate key), then more units: each is answered. psycopg prepares a query of
    its own once it has run it five times, and then answered the failed unit's ROLLBACK by deallocating
    every prepared statement, the store's too, so the next unit failed on a statement gone."""
    if not isinstance(store, PostgresStore):
        pytest.skip("statements are prepared on PostgreSQL's connections only")
    with store.transaction() as tx:
        tx.merchants.put(merchant())
        tx.payouts.add(payout("PO-1"))
    one = PostgresStore(store.url, pool_size=1, migrate=False)  # every unit on the same connection
    try:
        for _ in range(3):
            with one.read() as view:
                assert view.merchants.get("mer_1") == merchant()
        for _ in range(8):
            one.ping()
        with pytest.raises(psycopg.errors.UniqueViolation), one.transaction() as tx:
            tx.payouts.add(payout("PO-1"))
        for _ in range(3):
            with one.read() as view:
                assert view.merchants.get("mer_1") == merchant()
            with one.transaction() as tx:
                tx.merchants.put(merchant())
    finally:
        one.close()


def test_on_postgresql_values_are_bound_as_psycopg_binds_them_and_read_back_unchanged(store: Store) -> None:
    """A unit writes each value into its statement as the literal psycopg's own client-side binding
    writes (quotes, backslashes, a percent sign, NULL, a negative number, bytes), cutting each
    statement once rather than at every use; a statement whose values do not fit its placeholders is
    refused as psycopg refuses it; text of any of these shapes is stored and read back unchanged."""
    if not isinstance(store, PostgresStore):
        pytest.skip("values are bound on the client on PostgreSQL's connections only")
    awkward = ["it's", "back\\slash", "100% sure; --", "", "élan ✓", "%s %(x)s %%", "line\nbreak"]
    with store.glance() as tx:
        rows = tx.rows
        cursor = psycopg.ClientCursor(rows.conn)
        cases: list[tuple[str, Any]] = [
            ("SELECT %s, %s, %s, %s", (awkward[0], None, -5, True)),
            ("SELECT %s, %s::bytea, %s", (awkward[1], b"\x00\x01'", 2**62)),
            ("SELECT %(a)s, %(b)s, %(a)s, '50%%'", {"a": awkward[2], "b": awkward[5]}),
            ("SELECT %s = %s, %s", [awkward[3], awkward[4], awkward[6]]),
        ]
        for sql, params in cases:
            assert rows.prepared.bind(rows.conn, sql, params) == cursor.mogrify(sql, params).encode()
        for sql, params in [("SELECT %s, %s", ("one",)), ("SELECT %(a)s", {"b": 1})]:
            with pytest.raises(psycopg.ProgrammingError):
                rows.prepared.bind(rows.conn, sql, params)
    for n, name in enumerate(awkward[:3] + awkward[4:]):
        with store.transaction() as tx:
            tx.merchants.put(attrs.evolve(merchant(), id=f"mer_{n}", name=name))
    with store.read() as view:
        for n, name in enumerate(awkward[:3] + awkward[4:]):
            found = view.merchants.get(f"mer_{n}")
            assert found is not None and found.name == name
