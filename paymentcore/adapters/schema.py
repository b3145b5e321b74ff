"""The schema of the SQL stores, written once: the numbered migrations, in SQLite's dialect.

They are SQLite's history as every file ran it (the contract tests pin their text), and the source of
PostgreSQL's: ``paymentcore.adapters.postgres`` translates each one (column types, its ordering column,
booleans) and adds what PostgreSQL spells its own way (trigger functions, TRUNCATE guards, its server
key). The spend buckets and hourly counts are generated from the status sets of
``paymentcore._domain.queries``, the same definitions MemoryStore filters with.
"""

from __future__ import annotations

from paymentcore._domain.models import PayoutStatus
from paymentcore._domain.queries import (
    COLLECTION_CHECK_STATUSES,
    COLLECTION_EXPIRY_STATUSES,
    UNSPENT_STATUSES,
)
from paymentcore.adapters.sql import sql_in, sql_not_in

__all__ = ["MIGRATIONS"]

# A payout counts as spent when its status is not one of UNSPENT_STATUSES (the complement of
# SPENT_STATUSES, which keeps migration 2 byte for byte as first written: "status != 'REJECTED'").
# The triggers add a payout when it is inserted counting, and take it back when an update moves it from
# counting to not counting; no allowed transition goes the other way (tests/integration/
# test_store_contract.py checks that against PAYOUT_TRANSITIONS). Existing files keep the triggers they
# were migrated with: a change to SPENT_STATUSES needs a new migration that recreates them and rebuilds
# payout_spend (the contract tests pin the text of every migration, so they say so).
_COUNTS = sql_not_in("status", UNSPENT_STATUSES)
_NEW_COUNTS = sql_not_in("new.status", UNSPENT_STATUSES)
_OLD_COUNTS = sql_not_in("old.status", UNSPENT_STATUSES)
_NEW_STOPS_COUNTING = sql_in("new.status", UNSPENT_STATUSES)
#: a collection the worker may still have work with (a status check, or expiring it)
_OPEN_COLLECTION = sql_in("status", COLLECTION_CHECK_STATUSES | COLLECTION_EXPIRY_STATUSES)
_SPEND_BUCKETS = f"""
    CREATE TABLE payout_spend (
        merchant_id TEXT NOT NULL,
        currency TEXT NOT NULL,
        hour INTEGER NOT NULL,
        amount INTEGER NOT NULL CHECK (amount >= 0),
        PRIMARY KEY (merchant_id, currency, hour)
    );
    INSERT INTO payout_spend (merchant_id, currency, hour, amount)
        SELECT merchant_id, currency, created_at / 3600000, sum(amount) FROM payouts
        WHERE {_COUNTS} GROUP BY merchant_id, currency, created_at / 3600000;
    CREATE TRIGGER payout_spend_insert AFTER INSERT ON payouts WHEN {_NEW_COUNTS}
    BEGIN
        INSERT INTO payout_spend (merchant_id, currency, hour, amount)
            VALUES (new.merchant_id, new.currency, new.created_at / 3600000, new.amount)
            ON CONFLICT (merchant_id, currency, hour) DO UPDATE SET amount = amount + excluded.amount;
    END;
    CREATE TRIGGER payout_spend_rejected AFTER UPDATE OF status ON payouts
        WHEN {_OLD_COUNTS} AND {_NEW_STOPS_COUNTING}
    BEGIN
        UPDATE payout_spend SET amount = amount - old.amount
            WHERE merchant_id = old.merchant_id AND currency = old.currency
            AND hour = old.created_at / 3600000;
    END;
    """


# migration 7: (hour, currency, status) -> how many records created in that UTC hour are in that status
# now, and their amounts summed. A record's creation hour, currency and amount never change once it is
# written, its status only by an UPDATE, and records are never deleted: so the triggers keep it exact.
def _hourly_counts(table: str, currency: str, amount: str) -> str:
    hours = f"{table[:-1]}_hours"
    return f"""
    CREATE TABLE {hours} (
        hour INTEGER NOT NULL,
        currency TEXT NOT NULL,
        status TEXT NOT NULL,
        count INTEGER NOT NULL CHECK (count >= 0),
        amount INTEGER NOT NULL CHECK (amount >= 0),
        PRIMARY KEY (hour, currency, status)
    );
    INSERT INTO {hours} (hour, currency, status, count, amount)
        SELECT created_at / 3600000, {currency}, status, count(*), sum({amount}) FROM {table}
        GROUP BY created_at / 3600000, {currency}, status;
    CREATE TRIGGER {hours}_insert AFTER INSERT ON {table}
    BEGIN
        INSERT INTO {hours} (hour, currency, status, count, amount)
            VALUES (new.created_at / 3600000, new.{currency}, new.status, 1, new.{amount})
            ON CONFLICT (hour, currency, status)
            DO UPDATE SET count = count + 1, amount = amount + excluded.amount;
    END;
    CREATE TRIGGER {hours}_status AFTER UPDATE OF status ON {table} WHEN old.status != new.status
    BEGIN
        UPDATE {hours} SET count = count - 1, amount = amount - old.{amount}
            WHERE hour = old.created_at / 3600000 AND currency = old.{currency} AND status = old.status;
        INSERT INTO {hours} (hour, currency, status, count, amount)
            VALUES (new.created_at / 3600000, new.{currency}, new.status, 1, new.{amount})
            ON CONFLICT (hour, currency, status)
            DO UPDATE SET count = count + 1, amount = amount + excluded.amount;
    END;
    CREATE INDEX {table}_created ON {table} (created_at, {currency}, status, {amount});
    """


_HOURLY_COUNTS = (
    _hourly_counts("payouts", "currency", "amount")
    + _hourly_counts("collections", "requested_currency", "requested_amount")
    + f"""
    CREATE INDEX payouts_held ON payouts (currency, amount) WHERE awaiting_review = 1;
    CREATE INDEX payouts_failed_unresolved ON payouts (currency, amount)
        WHERE {sql_in("status", [PayoutStatus.FAILED])} AND resolution IS NULL;
    """
)

MIGRATIONS: tuple[str, ...] = (
    # 1: the first schema
    """
    CREATE TABLE settings (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        api_enabled INTEGER NOT NULL,
        payouts_enabled INTEGER NOT NULL,
        closed_currencies TEXT NOT NULL
    );
    CREATE TABLE merchants (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        settlement_currency TEXT NOT NULL,
        status TEXT NOT NULL,
        collect_fee_ppm INTEGER NOT NULL CHECK (collect_fee_ppm BETWEEN 0 AND 1000000),
        payouts_enabled INTEGER NOT NULL,
        blocked_providers TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        merchant_id TEXT NOT NULL,
        key_hash TEXT NOT NULL UNIQUE,
        scopes TEXT NOT NULL,
        per_minute INTEGER NOT NULL,
        per_hour INTEGER NOT NULL,
        revoked INTEGER NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE payout_limits (
        merchant_id TEXT NOT NULL,
        currency TEXT NOT NULL,
        per_transaction INTEGER,
        per_day INTEGER,
        per_week INTEGER,
        review_threshold INTEGER,
        PRIMARY KEY (merchant_id, currency)
    );
    CREATE TABLE collections (
        reference TEXT PRIMARY KEY,
        merchant_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        requested_amount INTEGER NOT NULL CHECK (requested_amount > 0),
        requested_currency TEXT NOT NULL,
        description TEXT NOT NULL,
        merchant_reference TEXT,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        method TEXT,
        provider TEXT,
        phone TEXT,
        country TEXT,
        submitted_at INTEGER,
        next_check_at INTEGER,
        charged_amount INTEGER,
        charged_currency TEXT,
        settled_amount INTEGER,
        settled_currency TEXT,
        fee_amount INTEGER,
        failure_category TEXT,
        failure_reason TEXT,
        CHECK (settled_amount IS NULL OR settled_amount + fee_amount = charged_amount)
    );
    CREATE INDEX collections_open ON collections (status, next_check_at);
    CREATE INDEX collections_expiry ON collections (status, expires_at);
    CREATE INDEX collections_prompts ON collections (phone, submitted_at);
    CREATE TABLE payouts (
        reference TEXT PRIMARY KEY,
        merchant_id TEXT NOT NULL,
        status TEXT NOT NULL,
        amount INTEGER NOT NULL CHECK (amount > 0),
        currency TEXT NOT NULL,
        phone TEXT NOT NULL,
        country TEXT NOT NULL,
        provider TEXT NOT NULL,
        recipient_name TEXT,
        merchant_reference TEXT,
        awaiting_review INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        provider_reference TEXT,
        status_reason TEXT,
        sent_at INTEGER,
        next_check_at INTEGER,
        resolution TEXT
    );
    CREATE INDEX payouts_window ON payouts (merchant_id, currency, created_at);
    CREATE INDEX payouts_due ON payouts (next_check_at) WHERE next_check_at IS NOT NULL;
    CREATE TABLE balances (
        merchant_id TEXT NOT NULL,
        currency TEXT NOT NULL,
        available INTEGER NOT NULL CHECK (available >= 0),
        reserved INTEGER NOT NULL CHECK (reserved >= 0),
        paid_out INTEGER NOT NULL CHECK (paid_out >= 0),
        credited INTEGER NOT NULL,
        CHECK (credited = available + reserved + paid_out),
        PRIMARY KEY (merchant_id, currency)
    );
    CREATE TABLE ledger_entries (
        id TEXT PRIMARY KEY,
        merchant_id TEXT NOT NULL,
        currency TEXT NOT NULL,
        kind TEXT NOT NULL,
        reference TEXT NOT NULL,
        legs TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX ledger_by_account ON ledger_entries (merchant_id, currency, created_at);
    CREATE TRIGGER ledger_append_only_update BEFORE UPDATE ON ledger_entries
        BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
    CREATE TRIGGER ledger_append_only_delete BEFORE DELETE ON ledger_entries
        BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
    CREATE TABLE webhooks (
        merchant_id TEXT PRIMARY KEY,
        url TEXT NOT NULL,
        secret_encrypted TEXT NOT NULL,
        events TEXT NOT NULL,
        is_active INTEGER NOT NULL,
        disabled_reason TEXT,
        updated_at INTEGER NOT NULL,
        consecutive_failures INTEGER NOT NULL,
        ever_succeeded INTEGER NOT NULL
    );
    CREATE TABLE events (
        id TEXT PRIMARY KEY,
        merchant_id TEXT NOT NULL,
        type TEXT NOT NULL,
        data TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        next_attempt_at INTEGER NOT NULL,
        last_error TEXT,
        delivered_at INTEGER
    );
    CREATE INDEX events_due ON events (status, next_attempt_at);
    CREATE INDEX events_by_merchant ON events (merchant_id, created_at);
    CREATE TABLE idempotency (
        merchant_id TEXT NOT NULL,
        key TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        status_code INTEGER,
        body TEXT,
        PRIMARY KEY (merchant_id, key)
    );
    CREATE INDEX idempotency_age ON idempotency (created_at);
    """,
    # 2: hourly sums of the payouts that count against the rolling limits, kept by triggers, so the
    # 24-hour and 7-day windows cost at most 168 bucket rows plus one partial hour of payouts
    _SPEND_BUCKETS,
    # 3: the leases workers hold on background work (taken with a claim, dropped with the outcome), so
    # any process can count the work in flight in every process (the metrics' in-flight gauges)
    """
    CREATE TABLE work_leases (
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        until INTEGER NOT NULL,
        PRIMARY KEY (kind, key)
    );
    CREATE INDEX work_leases_until ON work_leases (kind, until);
    """,
    # 4: the per-key rate-limit counters, in the store so every API process on it shares them (and a
    # restart keeps them): requests per key in buckets of `width` ms starting at `start`
    """
    CREATE TABLE rate_counts (
        key_id TEXT NOT NULL,
        width INTEGER NOT NULL,
        start INTEGER NOT NULL,
        hits INTEGER NOT NULL CHECK (hits > 0),
        PRIMARY KEY (key_id, width, start)
    );
    CREATE INDEX rate_counts_start ON rate_counts (start);
    """,
    # 5: the merchant records API: every delivery attempt of an event, manual redeliveries queued on
    # the event, and the indexes that list a merchant's payouts and collections newest first
    """
    ALTER TABLE events ADD COLUMN redeliveries INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE events ADD COLUMN sent_as TEXT;
    ALTER TABLE events ADD COLUMN resend_at INTEGER;
    CREATE INDEX events_resend ON events (resend_at) WHERE resend_at IS NOT NULL;
    CREATE TABLE deliveries (
        id TEXT PRIMARY KEY,
        event_id TEXT NOT NULL,
        at INTEGER NOT NULL,
        name TEXT NOT NULL,
        response_status INTEGER,
        error TEXT,
        duration_ms INTEGER NOT NULL CHECK (duration_ms >= 0),
        resent INTEGER NOT NULL
    );
    CREATE INDEX deliveries_by_event ON deliveries (event_id, at);
    CREATE INDEX payouts_by_merchant ON payouts (merchant_id, created_at);
    CREATE INDEX collections_by_merchant ON collections (merchant_id, created_at);
    """,
    # 6: the operator's console (issue 18): operators who sign in, their sessions (shared by every
    # server process), and the audit trail of operator actions, append-only like the ledger; the
    # indexes of the work queues (payouts by status, oldest first) and of a merchant's keys
    """
    CREATE TABLE operators (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        token_hash TEXT NOT NULL UNIQUE,
        revoked INTEGER NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE console_sessions (
        id TEXT PRIMARY KEY,
        operator_id TEXT NOT NULL,
        token_hash TEXT NOT NULL UNIQUE,
        created_at INTEGER NOT NULL,
        last_seen_at INTEGER NOT NULL
    );
    CREATE INDEX console_sessions_by_operator ON console_sessions (operator_id);
    CREATE TABLE audit_log (
        id TEXT PRIMARY KEY,
        at INTEGER NOT NULL,
        actor TEXT NOT NULL,
        action TEXT NOT NULL,
        subject TEXT NOT NULL,
        state_before TEXT,
        state_after TEXT
    );
    CREATE INDEX audit_by_time ON audit_log (at);
    CREATE INDEX audit_by_subject ON audit_log (subject, at);
    CREATE TRIGGER audit_append_only_update BEFORE UPDATE ON audit_log
        BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
    CREATE TRIGGER audit_append_only_delete BEFORE DELETE ON audit_log
        BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
    CREATE INDEX payouts_queue ON payouts (status, created_at);
    CREATE INDEX api_keys_by_merchant ON api_keys (merchant_id, created_at);
    """,
    # 7: the console's overview (issue 30): payouts and collections counted per UTC hour of creation,
    # currency and status, kept by triggers (the 24-hour charts read at most a few hundred rows
    # whatever the volume; only the current hour and the last 60 minutes are counted from the records,
    # through an index holding every column they read), and the payouts waiting for an operator (held
    # for review, failed and unresolved) in partial indexes of those few rows
    _HOURLY_COUNTS,
    # 8: append-only whatever the SQL (issue 24): INSERT OR REPLACE (or REPLACE INTO) on an existing
    # id, or on an existing rowid, deletes the old row without firing the DELETE triggers (SQLite fires
    # them for a REPLACE only with recursive_triggers on), so an insert that meets an entry is refused
    # before it happens; UPDATE and DELETE stay refused by the triggers of migrations 1 and 6
    """
    CREATE TRIGGER ledger_append_only_insert BEFORE INSERT ON ledger_entries
        WHEN EXISTS (SELECT 1 FROM ledger_entries WHERE id = new.id OR rowid = new.rowid)
        BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
    CREATE TRIGGER audit_append_only_insert BEFORE INSERT ON audit_log
        WHEN EXISTS (SELECT 1 FROM audit_log WHERE id = new.id OR rowid = new.rowid)
        BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;
    """,
    # 9: bulk payouts (issue 28): the batches (a refused item's error is kept in `refusals`, JSON), and
    # each payout of a batch carries its id and its item's place; the indexes read a batch's payouts in
    # request order and count those still open (both only over payouts of a batch)
    """
    CREATE TABLE payout_batches (
        id TEXT PRIMARY KEY,
        merchant_id TEXT NOT NULL,
        mode TEXT NOT NULL,
        item_count INTEGER NOT NULL CHECK (item_count > 0),
        created_at INTEGER NOT NULL,
        refusals TEXT NOT NULL,
        completed_at INTEGER
    );
    CREATE INDEX payout_batches_by_merchant ON payout_batches (merchant_id, created_at);
    ALTER TABLE payouts ADD COLUMN batch_id TEXT;
    ALTER TABLE payouts ADD COLUMN batch_index INTEGER;
    CREATE UNIQUE INDEX payouts_by_batch ON payouts (batch_id, batch_index) WHERE batch_id IS NOT NULL;
    CREATE INDEX payouts_batch_status ON payouts (batch_id, status) WHERE batch_id IS NOT NULL;
    """,
    # 10: nothing on SQLite (one writer: its hourly counts are updated in place). PostgreSQL writes the
    # hourly counts' changes as rows of their own, which writers of different merchants never contend
    # for, and folds them into the counts in the worker's housekeeping (see adapters/postgres.py)
    "-- 10: the hourly counts' moves, on PostgreSQL only\n",
    # 11: the events waiting for delivery, by merchant (the lane of their endpoint) and due time: the
    # worker's listing finds the lanes with events waiting and each lane's due events here, without
    # ranking every lane's backlog (a row leaves the index once its event is delivered or given up)
    """
    CREATE INDEX events_pending ON events (merchant_id, next_attempt_at) WHERE status = 'PENDING';
    """,
    # 12: the payouts the worker still has work with (every other has no next_check_at), by lane
    # (provider), merchant and due time: its listing walks the lanes' merchants and reads each one's
    # first due payouts here, without ranking the whole backlog
    """
    CREATE INDEX payouts_lanes ON payouts (provider, merchant_id, next_check_at, reference)
        WHERE next_check_at IS NOT NULL;
    """,
    # 13: the open collections by lane (provider, or none yet), by next check and by expiry: the
    # worker's listing reads each lane's first due ones here instead of ranking every due collection
    f"""
    CREATE INDEX collections_lanes_checks ON collections ((coalesce(provider, '')), next_check_at, reference)
        WHERE {_OPEN_COLLECTION};
    CREATE INDEX collections_lanes_expiry ON collections ((coalesce(provider, '')), expires_at, reference)
        WHERE {_OPEN_COLLECTION};
    """,
    # 14: two indexes no query needs any more, each an entry more in every payout row written (on
    # PostgreSQL in every new version of the row: a payout's row is written five times): the partial
    # hour of the spend reads payouts_by_merchant (its merchant's payouts of one hour), the due payouts
    # are read from payouts_lanes (12), whose rows are the payouts the worker still has work with
    """
    DROP INDEX payouts_window;
    DROP INDEX payouts_due;
    """,
)
