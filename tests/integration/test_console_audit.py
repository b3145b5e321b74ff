"""The operator's side of the core on every store (memory, SQLite, PostgreSQL): the audit trail, written
with each action's effect and never changed; operators and their sessions; the work queues.

The repositories are checked through the ``Store`` protocol, the behaviour through ``core.operator``,
``core.disburse`` and ``core.webhooks``; the append-only promise is checked against the SQL engines
themselves (raw UPDATE, DELETE and TRUNCATE are refused).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path

import attrs
import psycopg
import pytest

from paymentcore import (
    DEFAULT_ACTOR,
    FakeClock,
    InvalidRequestError,
    InvalidTransitionError,
    NotFoundError,
    PaymentCore,
    PayoutStatus,
    RateLimitedError,
    UnauthorizedError,
)
from paymentcore._services.audit import StoredAuditEntry, StoredOperator, StoredSession
from paymentcore.adapters.postgres import MIGRATIONS as POSTGRES_MIGRATIONS
from paymentcore.adapters.postgres import PostgresStore
from paymentcore.adapters.sqlite import MIGRATIONS, SqliteStore
from paymentcore.ports import Store
from paymentcore.testing import fund

from conftest import make_core, postgres_url  # type: ignore[import-not-found, unused-ignore]

NOW = 1_767_225_600_000
MINUTE = 60_000


@pytest.fixture
def core(store_kind: str, tmp_path: Path, clock: FakeClock) -> Iterator[PaymentCore]:
    made = make_core(store_kind, tmp_path, clock)
    try:
        yield made
    finally:
        made.close()


def entry(entry_id: str, at: int, subject: str = "mer_1", **state: object) -> StoredAuditEntry:
    return StoredAuditEntry(
        id=entry_id,
        at=at,
        actor="cli:alice",
        action="merchant.suspend",
        subject=subject,
        state_before={"status": "APPROVED", **state},
        state_after={"status": "SUSPENDED", "fee": Decimal("1.5"), **state},
    )


# --- the repositories ----------------------------------------------------------------------------------


def test_audit_pages_newest_first_filter_by_record_and_keep_the_states(store: Store) -> None:
    with store.transaction() as tx:
        tx.audit.add(entry("aud_a", NOW, "mer_1", note="Bob\r\nstatus: PAID"))
        tx.audit.add(entry("aud_b", NOW, "mer_2"))  # same millisecond: the last written comes first
        tx.audit.add(entry("aud_c", NOW + 5, "mer_1"))
    with store.read() as tx:
        every = tx.audit.page(limit=10)
        assert every is not None and [e.id for e in every] == ["aud_c", "aud_b", "aud_a"]
        mine = tx.audit.page(limit=10, subject="mer_1")
        assert mine is not None and [e.id for e in mine] == ["aud_c", "aud_a"]
        after = tx.audit.page(limit=1, after="aud_c", subject="mer_1")
        assert after is not None and [e.id for e in after] == ["aud_a"]
        assert tx.audit.page(limit=10, after="aud_nope") is None
        kept = mine[1]
        assert kept.state_before == {"status": "APPROVED", "note": "Bob\r\nstatus: PAID"}
        assert kept.state_after == {
            "status": "SUSPENDED",
            "fee": Decimal("1.5"),
            "note": "Bob\r\nstatus: PAID",
        }
        assert (kept.actor, kept.action, kept.subject, kept.at) == (
            "cli:alice",
            "merchant.suspend",
            "mer_1",
            NOW,
        )


def test_an_audit_entry_cannot_be_added_twice(store: Store) -> None:
    with store.transaction() as tx:
        tx.audit.add(entry("aud_a", NOW))
    with pytest.raises((KeyError, sqlite3.IntegrityError, psycopg.IntegrityError)), store.transaction() as tx:
        tx.audit.add(entry("aud_a", NOW + 1, "mer_other"))
    with store.read() as tx:
        kept = tx.audit.page(limit=10)
    assert kept is not None and [(e.id, e.subject) for e in kept] == [("aud_a", "mer_1")]


def test_the_audit_repository_has_no_way_to_change_or_remove_an_entry(store: Store) -> None:
    with store.transaction() as tx:
        names = {name for name in dir(tx.audit) if not name.startswith("_")}
    assert names == {"add", "page"}


def test_sqlite_refuses_updates_and_deletes_of_the_audit_trail(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "a.db")
    try:
        with store.transaction() as tx:
            tx.audit.add(entry("aud_a", NOW))
    finally:
        store.close()
    conn = sqlite3.connect(tmp_path / "a.db")
    try:
        for statement in ("UPDATE audit_log SET actor = 'someone else'", "DELETE FROM audit_log"):
            with pytest.raises(sqlite3.IntegrityError, match="the audit trail is append-only"):
                conn.execute(statement)
        assert conn.execute("SELECT actor FROM audit_log").fetchall() == [("cli:alice",)]
    finally:
        conn.close()


def test_postgresql_refuses_updates_deletes_and_truncation_of_the_audit_trail(tmp_path: Path) -> None:
    url = postgres_url(tmp_path)
    store = PostgresStore(url)
    try:
        with store.transaction() as tx:
            tx.audit.add(entry("aud_a", NOW))
    finally:
        store.close()
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in (
            "UPDATE audit_log SET actor = 'someone else'",
            "DELETE FROM audit_log",
            "TRUNCATE audit_log",
        ):
            with pytest.raises(psycopg.errors.RaiseException, match="the audit trail is append-only"):
                conn.execute(statement)
        assert conn.execute("SELECT actor FROM audit_log").fetchall() == [("cli:alice",)]


def test_the_two_sql_engines_number_the_console_migration_alike() -> None:
    (sqlite_number,) = [i for i, script in enumerate(MIGRATIONS, 1) if "CREATE TABLE audit_log" in script]
    (postgres_number,) = [
        i for i, script in enumerate(POSTGRES_MIGRATIONS, 1) if "CREATE TABLE audit_log" in script
    ]
    assert sqlite_number == postgres_number == 6  # later migrations come after it (7: bulk payouts)
    assert len(MIGRATIONS) == len(POSTGRES_MIGRATIONS)


def test_a_file_from_before_the_console_is_migrated_and_keeps_its_data(tmp_path: Path) -> None:
    (console,) = [n for n, script in enumerate(MIGRATIONS, 1) if "CREATE TABLE audit_log" in script]
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for script in MIGRATIONS[: console - 1]:
            conn.executescript(script)
        conn.execute(f"PRAGMA user_version = {console - 1}")
        conn.execute(
            "INSERT INTO merchants VALUES ('mer_old', 'Old Shop', 'XAF', 'APPROVED', 0, 1, '[]', ?)", (NOW,)
        )
    finally:
        conn.close()
    core = PaymentCore.sqlite(path, sender=None)
    try:
        assert core.operator.get_merchant("mer_old").name == "Old Shop"
        core.operator.suspend_merchant("mer_old", actor="cli:alice")
        [latest] = core.operator.audit_log(record="mer_old").data
        assert (latest.action, latest.actor) == ("merchant.suspend", "cli:alice")
    finally:
        core.close()


def test_operators_and_sessions_round_trip(store: Store) -> None:
    ada = StoredOperator(id="op_a", name="Ada", token_hash="h-a", revoked=False, created_at=NOW)
    bob = StoredOperator(id="op_b", name="Bob", token_hash="h-b", revoked=False, created_at=NOW)
    with store.transaction() as tx:
        tx.operators.put(ada)
        tx.operators.put(bob)
        tx.operators.put(attrs.evolve(ada, revoked=True))
        for number, (operator, seen) in enumerate(
            [("op_a", NOW), ("op_a", NOW - 40 * MINUTE), ("op_b", NOW)]
        ):
            tx.sessions.put(StoredSession(f"ses_{number}", operator, f"s-{number}", seen, seen))
    with store.read() as tx:
        assert [o.id for o in tx.operators.list()] == ["op_a", "op_b"]
        found = tx.operators.by_hash("h-a")
        assert found is not None and found.revoked and found.name == "Ada"
        assert tx.operators.by_hash("h-nope") is None
        assert tx.sessions.by_hash("s-2") == StoredSession("ses_2", "op_b", "s-2", NOW, NOW)
    with store.transaction() as tx:
        assert tx.sessions.purge(seen_before=NOW - 30 * MINUTE, created_before=NOW - 720 * MINUTE) == 1
        tx.sessions.put(StoredSession("ses_0", "op_a", "s-0", NOW, NOW + MINUTE))  # touched
        assert tx.sessions.end_all("op_b") == 1
    with store.read() as tx:
        assert tx.sessions.by_hash("s-1") is None and tx.sessions.by_hash("s-2") is None
        touched = tx.sessions.by_hash("s-0")
        assert touched is not None and touched.last_seen_at == NOW + MINUTE
    with store.transaction() as tx:
        tx.sessions.delete("ses_0")
    with store.read() as tx:
        assert tx.sessions.by_hash("s-0") is None


# --- the library: every operator action is audited with its effect -------------------------------------


def held_payout(
    core: PaymentCore, merchant_id: str, key: str, *, amount: int = 6000, phone: str = "670000001"
) -> str:
    return core.disburse.create(
        merchant_id,
        amount=amount,
        currency="XAF",
        phone=phone,
        idempotency_key=key,
        recipient_name="Bob\r\nstatus: PAID",
        merchant_reference="\x1b[2Jinv-1",
    ).reference


def test_every_operator_action_writes_one_entry_naming_who_what_which_and_the_states(
    core: PaymentCore,
) -> None:
    op = core.operator
    merchant = op.create_merchant("Kiosk", actor="cli:alice")
    fund(core, merchant.id, "XAF", 100_000)
    key = op.create_key(merchant.id, ["collect"], actor="op_1")
    core.webhooks.register(merchant.id, url="https://shop.example/hooks")
    actions: list[tuple[Callable[[], object], str, str]] = [
        (lambda: op.approve_merchant(merchant.id, actor="op_1"), "merchant.approve", merchant.id),
        (lambda: op.suspend_merchant(merchant.id, actor="op_1"), "merchant.suspend", merchant.id),
        (lambda: op.approve_merchant(merchant.id, actor="op_1"), "merchant.approve", merchant.id),
        (
            lambda: op.set_merchant_payouts(merchant.id, False, actor="op_1"),
            "merchant.payouts_disable",
            merchant.id,
        ),
        (
            lambda: op.set_merchant_payouts(merchant.id, True, actor="op_1"),
            "merchant.payouts_enable",
            merchant.id,
        ),
        (lambda: op.set_collect_fee(merchant.id, "1.5", actor="op_1"), "merchant.fee", merchant.id),
        (lambda: op.block_provider(merchant.id, "orange_cm", actor="op_1"), "provider.block", merchant.id),
        (
            lambda: op.block_provider(merchant.id, "orange_cm", False, actor="op_1"),
            "provider.unblock",
            merchant.id,
        ),
        (lambda: op.set_rate_limit(key.key.id, per_minute=90, actor="op_1"), "key.rate_limit", key.key.id),
        (lambda: op.revoke_key(key.key.id, actor="op_1"), "key.revoke", key.key.id),
        (
            lambda: op.set_limits(merchant.id, "XAF", review_threshold="5000", actor="op_1"),
            "limits.set",
            merchant.id,
        ),
        (lambda: op.set_platform_payouts(False, actor="op_1"), "platform.payouts_disable", "platform"),
        (lambda: op.set_platform_payouts(True, actor="op_1"), "platform.payouts_enable", "platform"),
        (lambda: op.set_platform_api(False, actor="op_1"), "platform.api_disable", "platform"),
        (lambda: op.set_platform_api(True, actor="op_1"), "platform.api_enable", "platform"),
        (lambda: op.set_currency_payouts("XAF", False, actor="op_1"), "currency.payouts_close", "platform"),
        (lambda: op.set_currency_payouts("XAF", True, actor="op_1"), "currency.payouts_open", "platform"),
        (lambda: core.webhooks.reactivate(merchant.id, actor="op_1"), "webhook.reactivate", merchant.id),
    ]
    for act, action, record in actions:
        before = op.audit_log(limit=100).data
        act()
        after = op.audit_log(limit=100).data
        assert len(after) == len(before) + 1, action
        newest = after[0]
        assert (newest.actor, newest.action, newest.record) == ("op_1", action, record)
        assert newest.before is not None and newest.after is not None
    first = op.audit_log(record=merchant.id).data[-1]
    assert (first.action, first.actor, first.before) == ("merchant.create", "cli:alice", None)
    assert first.after is not None and first.after["name"] == "Kiosk"
    fee = op.audit_log(record=merchant.id).data
    fee_entry = next(e for e in fee if e.action == "merchant.fee")
    assert fee_entry.before is not None and fee_entry.after is not None
    assert (fee_entry.before["collectFeePercent"], fee_entry.after["collectFeePercent"]) == (
        0,
        Decimal("1.5"),
    )
    limits = next(e for e in fee if e.action == "limits.set")
    assert limits.before is not None and limits.after is not None
    assert (limits.before["reviewThreshold"], limits.after["reviewThreshold"]) == (None, 5000)
    revoked = op.audit_log(record=key.key.id).data[0]
    assert revoked.after is not None and revoked.after["revoked"] is True
    assert "keyHash" not in revoked.after and key.api_key not in str(revoked.after)


def test_payout_review_and_resolution_are_audited_with_the_payout_before_and_after(core: PaymentCore) -> None:
    op = core.operator
    merchant = op.create_merchant("Kiosk")
    fund(core, merchant.id, "XAF", 100_000)
    op.set_limits(merchant.id, "XAF", review_threshold="5000")
    released = held_payout(core, merchant.id, "k1")
    rejected = held_payout(core, merchant.id, "k2")
    failing = held_payout(core, merchant.id, "k3", amount=3000, phone="670000021")  # not held; refused
    core.run_until_idle()
    assert core.disburse.find(failing).status is PayoutStatus.FAILED

    core.disburse.release(released, actor="op_1")
    core.disburse.reject(rejected, actor="op_1")
    core.disburse.resolve(failing, actor="op_1")
    for reference, action, before_status, after_status in (
        (released, "payout.release", "PENDING", "PENDING"),
        (rejected, "payout.reject", "PENDING", "REJECTED"),
        (failing, "payout.resolve", "FAILED", "FAILED"),
    ):
        [latest] = op.audit_log(record=reference).data
        assert (latest.action, latest.actor) == (action, "op_1")
        assert latest.before is not None and latest.after is not None
        assert (latest.before["status"], latest.after["status"]) == (before_status, after_status)
        assert latest.before["recipientName"] == "Bob\r\nstatus: PAID"  # kept exactly, shown escaped
    [release] = op.audit_log(record=released).data
    assert release.before is not None and release.after is not None
    assert (release.before["awaitingReview"], release.after["awaitingReview"]) == (True, False)
    [resolve] = op.audit_log(record=failing).data
    assert resolve.after is not None and resolve.after["resolution"] == "RELEASED"
    assert core.disburse.find(released).status in (PayoutStatus.SENT, PayoutStatus.PAID)
    assert {b.currency: b.available for b in op.balances(merchant.id)} == {"XAF": Decimal(100_000 - 6000)}


def test_a_refused_action_changes_nothing_and_writes_no_entry(core: PaymentCore) -> None:
    op = core.operator
    merchant = op.create_merchant("Kiosk")
    fund(core, merchant.id, "XAF", 100_000)
    op.set_limits(merchant.id, "XAF", review_threshold="5000")
    reference = held_payout(core, merchant.id, "k1")
    core.disburse.reject(reference, actor="op_1")
    trail = op.audit_log(limit=100).data
    with pytest.raises(InvalidTransitionError):
        core.disburse.reject(reference, actor="op_1")  # a second time
    with pytest.raises(InvalidTransitionError):
        core.disburse.release(reference, actor="op_1")
    with pytest.raises(NotFoundError):
        op.suspend_merchant("mer_000000000000000000000000", actor="op_1")
    with pytest.raises(InvalidRequestError):
        op.set_collect_fee(merchant.id, "101", actor="op_1")
    with pytest.raises(InvalidRequestError) as refused:
        op.suspend_merchant(merchant.id, actor="op_1\x1b[2J")  # an actor must be printable
    assert refused.value.param == "actor"
    assert op.audit_log(limit=100).data == trail
    assert op.get_merchant(merchant.id).approved


def test_a_library_caller_who_names_no_actor_is_recorded_as_the_library(core: PaymentCore) -> None:
    merchant = core.operator.create_merchant("Kiosk")
    core.operator.suspend_merchant(merchant.id)
    assert DEFAULT_ACTOR == "library"
    assert {e.actor for e in core.operator.audit_log(record=merchant.id).data} == {"library"}


# --- operators and sessions through the library --------------------------------------------------------


def test_sign_in_gives_a_session_and_a_wrong_token_is_refused_alike(
    core: PaymentCore, clock: FakeClock
) -> None:
    op = core.operator
    created = op.create_operator("Ada", actor="cli:alice")
    assert created.token.startswith("pco_") and created.token not in str(op.operators())
    merchant = op.create_merchant("Kiosk")
    api_key = op.create_key(merchant.id, ["collect"]).api_key
    messages = []
    for wrong in ("", "pco_not-a-token", api_key, created.token + "x", "x" * 5000):
        with pytest.raises(UnauthorizedError) as refused:
            op.sign_in(wrong)
        messages.append(refused.value.message)
    assert set(messages) == {"That token is not valid."}

    signed = op.sign_in(created.token)
    assert signed.session.operator.name == "Ada"
    assert op.session(signed.secret).id == signed.session.id
    [sign_in] = [e for e in op.audit_log(record=created.operator.id).data if e.action == "operator.sign_in"]
    assert sign_in.actor == created.operator.id

    with pytest.raises(UnauthorizedError):
        core.access.authenticate(signed.secret)  # a session is no API key

    op.revoke_operator(created.operator.id, actor="cli:alice")
    with pytest.raises(UnauthorizedError):
        op.session(signed.secret)  # revoking ends the operator's sessions
    with pytest.raises(UnauthorizedError) as refused_again:
        op.sign_in(created.token)
    assert refused_again.value.message == "That token is not valid."


def test_a_session_ends_after_thirty_minutes_unused_and_twelve_hours_in_all(
    core: PaymentCore, clock: FakeClock
) -> None:
    op = core.operator
    token = op.create_operator("Ada").token
    kept = op.sign_in(token)
    for _ in range(24):  # used every 29 minutes: kept alive for 11.6 hours
        clock.advance(29 * 60)
        op.session(kept.secret)
    clock.advance(25 * 60)  # 12 h 1 min after sign-in
    with pytest.raises(UnauthorizedError):
        op.session(kept.secret)

    idle = op.sign_in(token)
    clock.advance(30 * 60 + 1)
    with pytest.raises(UnauthorizedError):
        op.session(idle.secret)

    out = op.sign_in(token)
    op.sign_out(out.secret)
    with pytest.raises(UnauthorizedError):
        op.session(out.secret)
    assert op.audit_log(limit=1).data[0].action == "operator.sign_out"


# --- failed sign-ins: throttled, and in the trail (issue 24, point 4) ----------------------------------


def failed_sign_ins(core: PaymentCore) -> list[tuple[str, dict[str, object]]]:
    return [
        (entry.actor, dict(entry.after or {}))
        for entry in core.operator.audit_log(record="console", limit=100).data
        if entry.action == "operator.sign_in_failed"
    ]


def test_failed_sign_ins_from_one_address_are_throttled_and_recorded_never_the_token(
    core: PaymentCore, clock: FakeClock
) -> None:
    op = core.operator
    created = op.create_operator("Ada")
    wrong = "pco_" + "w" * 43
    for _ in range(10):  # Config.sign_in_failures_per_client
        with pytest.raises(UnauthorizedError):
            op.sign_in(wrong, client="203.0.113.7")
    for token in (wrong, created.token):  # refused before the token is looked at, the right one too
        with pytest.raises(RateLimitedError) as throttled:
            op.sign_in(token, client="203.0.113.7")
        assert throttled.value.code == "RATE_LIMITED" and 0 < throttled.value.retry_after <= 600
        assert "from this address" in throttled.value.message
    # another address is not held back, and the right token still signs in there
    with pytest.raises(UnauthorizedError):
        op.sign_in(wrong, client="198.51.100.2")
    assert op.sign_in(created.token, client="198.51.100.2").session.operator.name == "Ada"

    recorded = failed_sign_ins(core)
    assert [actor for actor, _ in recorded] == ["client:198.51.100.2"] + ["client:203.0.113.7"] * 10
    assert recorded[1][1] == {
        "client": "203.0.113.7",
        "failuresInWindow": 10,
        "windowSeconds": 600,
        "throttled": True,
    }
    assert recorded[-1][1]["failuresInWindow"] == 1 and recorded[-1][1]["throttled"] is False
    everything = str([(e.actor, e.record, e.before, e.after) for e in op.audit_log(limit=100).data])
    assert wrong not in everything and "w" * 43 not in everything and created.token not in everything

    clock.advance(600)  # the window has passed: the address may try again
    assert op.sign_in(created.token, client="203.0.113.7").session.operator.name == "Ada"


def test_failed_sign_ins_from_every_address_together_are_throttled(core: PaymentCore) -> None:
    op = core.operator
    created = op.create_operator("Ada")
    for n in range(100):  # Config.sign_in_failures_overall, from 100 addresses
        with pytest.raises(UnauthorizedError):
            op.sign_in("pco_guess", client=f"10.0.{n // 250}.{n % 250}")
    with pytest.raises(RateLimitedError) as throttled:
        op.sign_in(created.token, client="192.0.2.1")  # a fresh address, the right token
    assert "from this address" not in throttled.value.message
    recorded = failed_sign_ins(core)  # newest first: the 100th failure is the one that throttles
    assert len(recorded) == 100
    assert [after["throttled"] for _, after in recorded[:2]] == [True, False]


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"])  # a memory store is one process's own
def test_the_throttle_counts_in_the_store_so_another_core_on_it_sees_the_failures(
    store_kind: str, tmp_path: Path, clock: FakeClock
) -> None:
    first = make_core(store_kind, tmp_path, clock)
    try:
        token = first.operator.create_operator("Ada").token
        for _ in range(5):
            with pytest.raises(UnauthorizedError):
                first.operator.sign_in("pco_guess", client="203.0.113.7")
        if store_kind == "postgres":
            assert isinstance(first.store, PostgresStore)
            url = first.store.url
            second = PaymentCore.postgresql(url, clock=clock, sender=None)
        else:
            second = PaymentCore.sqlite(tmp_path / "test.db", clock=clock, sender=None)
        try:
            for _ in range(5):
                with pytest.raises(UnauthorizedError):
                    second.operator.sign_in("pco_guess", client="203.0.113.7")
            for core in (first, second):
                with pytest.raises(RateLimitedError):
                    core.operator.sign_in(token, client="203.0.113.7")
        finally:
            second.close()
    finally:
        first.close()


def test_a_library_sign_in_without_a_client_is_counted_as_unknown(core: PaymentCore) -> None:
    with pytest.raises(UnauthorizedError):
        core.operator.sign_in("nope")
    [(actor, after)] = failed_sign_ins(core)
    assert actor == "client:unknown" and after["client"] == "unknown"


def test_the_work_queues_list_every_merchants_payouts_oldest_first(
    core: PaymentCore, clock: FakeClock
) -> None:
    op = core.operator
    shops = [op.create_merchant(name) for name in ("A", "B")]
    for shop in shops:
        fund(core, shop.id, "XAF", 100_000)
        op.set_limits(shop.id, "XAF", review_threshold="5000")
    held = []
    for i in range(3):
        for shop in shops:
            held.append(held_payout(core, shop.id, f"k{i}"))
            clock.advance(1)
    small = core.disburse.create(
        shops[0].id, amount=1000, currency="XAF", phone="670000021", idempotency_key="s"
    )
    core.run_until_idle()

    queue = op.payouts(awaiting_review=True, limit=4)
    assert [item.payout.reference for item in queue.data] == held[:4] and queue.has_more
    rest = op.payouts(awaiting_review=True, starting_after=held[3])
    assert [item.payout.reference for item in rest.data] == held[4:] and not rest.has_more
    only_b = op.payouts(awaiting_review=True, merchant_id=shops[1].id)
    assert [item.payout.reference for item in only_b.data] == held[1::2]
    assert {item.merchant_id for item in only_b.data} == {shops[1].id}

    failed = op.payouts(status=PayoutStatus.FAILED, unresolved=True)
    assert [(i.payout.reference, i.resolution) for i in failed.data] == [(small.reference, None)]
    core.disburse.resolve(small.reference)
    assert op.payouts(status="FAILED", unresolved=True).data == ()
    assert op.payout(small.reference).resolution == "RELEASED"

    for bad in ({"limit": 0}, {"status": "LOST"}, {"starting_after": "PO-nope"}, {"awaiting_review": "yes"}):
        with pytest.raises(InvalidRequestError):
            op.payouts(**bad)
    with pytest.raises(NotFoundError):
        op.payouts(merchant_id="mer_000000000000000000000000")
