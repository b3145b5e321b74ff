"""PostgreSQL: a request's rate count alone in its key's lane is one round trip (the key's lock, the
hit counted only if every window has room, COMMIT), and it answers as the memory store's count does:
the same remaining counts, resets and refusals with the same Retry-After, a refused hit not counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from paymentcore import FakeClock, PaymentCore
from paymentcore._services.access import RateLimiter
from paymentcore.adapters import postgres
from paymentcore.errors import PaymentError, RateLimitedError

from conftest import postgres_url  # type: ignore[import-not-found, unused-ignore]

#: seconds between hits: bursts inside one second and one minute, then gaps that let buckets leave
GAPS = [0, 0, 0, 0.2, 0.5, 1, 0, 0, 3, 10, 20, 0, 0, 30, 15, 0.9, 0, 0, 61, 0, 0, 0, 5, 59, 1, 0, 0]


def _count_queries(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The queries sent to PostgreSQL from now on (each one round trip), as they are sent."""
    sent: list[bytes] = []
    real = postgres._query

    def counting(conn: Any, query: bytes) -> Any:
        sent.append(query)
        return real(conn, query)

    monkeypatch.setattr(postgres, "_query", counting)
    return sent


def _answers(core: PaymentCore, clock: FakeClock, per_minute: int, per_hour: int) -> list[Any]:
    """Each hit's answer over GAPS: (remaining, reset seconds), or ("refused", retry after, limit)."""
    merchant = core.operator.create_merchant("Shop")
    key = core.operator.create_key(merchant.id, ["collect"], per_minute=per_minute, per_hour=per_hour).key
    limiter = RateLimiter(core.store)
    answers: list[Any] = []
    for gap in GAPS:
        clock.advance(seconds=gap)
        try:
            state = limiter.hit(key, clock.now())
        except RateLimitedError as refused:
            answers.append(("refused", refused.retry_after, refused.limit))
        else:
            answers.append((state.remaining, state.reset_seconds))
    return answers


@pytest.mark.parametrize(("per_minute", "per_hour"), [(4, 100), (3, 7), (1, 2)])
def test_a_count_alone_answers_as_the_memory_stores_count(
    tmp_path: Path, per_minute: int, per_hour: int
) -> None:
    clock = FakeClock()
    core = PaymentCore.postgresql(postgres_url(tmp_path), sender=None, clock=clock)
    try:
        got = _answers(core, clock, per_minute, per_hour)
    finally:
        core.close()
    reference_clock = FakeClock()
    expected = _answers(PaymentCore.memory(clock=reference_clock), reference_clock, per_minute, per_hour)
    assert got == expected
    assert any(answer[0] == "refused" for answer in got)  # the sequence reaches the ceilings


def test_a_count_alone_is_one_round_trip_and_a_refused_hit_is_not_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    core = PaymentCore.postgresql(postgres_url(tmp_path), sender=None, clock=clock)
    try:
        merchant = core.operator.create_merchant("Shop")
        key = core.operator.create_key(merchant.id, ["collect"], per_minute=2, per_hour=50).key
        limiter = RateLimiter(core.store)
        limiter.hit(key, clock.now())  # the statements known on the pool's connection
        sent = _count_queries(monkeypatch)
        assert limiter.hit(key, clock.now()).remaining == 0
        assert len(sent) == 1 and sent[0].rstrip().endswith(b"COMMIT")  # one query: lock, count, COMMIT
        for _ in range(3):
            with pytest.raises(RateLimitedError):
                limiter.hit(key, clock.now())
        with core.store.read() as tx:  # the refused ones left nothing
            assert sum(hits for _, hits in tx.rates.buckets(key.id, 1000, 0)) == 2
        clock.advance(seconds=60)
        assert limiter.hit(key, clock.now()).remaining == 1
    finally:
        core.close()


def _admissions(core: PaymentCore, clock: FakeClock) -> list[Any]:
    """What ``Access.admit`` answers over GAPS for a key of 3 a minute and 8 an hour, then for a
    revoked key, an unknown token and the API switched off (then on again: nothing was counted)."""
    merchant = core.operator.create_merchant("Shop")
    made = core.operator.create_key(merchant.id, ["collect"], per_minute=3, per_hour=8)
    revoked = core.operator.create_key(merchant.id, ["collect"])
    core.operator.revoke_key(revoked.key.id)
    answers: list[Any] = []

    def admit(token: str) -> None:
        try:
            principal, counted = core.access.admit(token)
        except PaymentError as refused:
            answers.append((type(refused).__name__,))
            return
        assert principal.key.id == made.key.id and principal.merchant.id == merchant.id
        if isinstance(counted, RateLimitedError):
            answers.append(("refused", counted.retry_after, counted.limit))
        else:
            assert not isinstance(counted, Exception)
            answers.append((counted.remaining, counted.reset_seconds))

    for gap in GAPS:
        clock.advance(seconds=gap)
        admit(made.api_key)
    clock.advance(seconds=3600)
    admit(revoked.api_key)
    admit("pk_" + "x" * 40)
    core.operator.set_platform_api(False)
    admit(made.api_key)
    admit(made.api_key)
    core.operator.set_platform_api(True)
    admit(made.api_key)  # 2 left of 3: the refused requests before it were not counted
    return answers


def test_admitting_a_request_answers_as_authenticating_then_counting(tmp_path: Path) -> None:
    """On PostgreSQL ``Access.admit`` looks the key up and counts the request in one statement; it
    answers as the lookup then the count do on the memory store: the caller, the remaining counts,
    the refusals, UNAUTHORIZED for a revoked or unknown key and CAPABILITY_DISABLED with the API off,
    none of which is counted."""
    clock = FakeClock()
    core = PaymentCore.postgresql(postgres_url(tmp_path), sender=None, clock=clock)
    try:
        got = _admissions(core, clock)
    finally:
        core.close()
    reference_clock = FakeClock()
    expected = _admissions(PaymentCore.memory(clock=reference_clock), reference_clock)
    assert got == expected
    assert got[-5:] == [
        ("UnauthorizedError",),
        ("UnauthorizedError",),
        ("CapabilityDisabledError",),
        ("CapabilityDisabledError",),
        (2, 60),
    ]


def test_admitting_a_request_is_one_round_trip_under_the_keys_own_rate_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lookup, the key's lock and the count travel as one query ending in COMMIT; the lock the
    server works out from the key it finds is the one the counts of a batch take (``_lock_half``)."""
    clock = FakeClock()
    core = PaymentCore.postgresql(postgres_url(tmp_path), sender=None, clock=clock)
    try:
        merchant = core.operator.create_merchant("Shop")
        made = core.operator.create_key(merchant.id, ["collect"], per_minute=5, per_hour=50)
        core.access.admit(made.api_key)
        sent = _count_queries(monkeypatch)
        principal, counted = core.access.admit(made.api_key)
        monkeypatch.undo()
        assert principal.key.id == made.key.id and not isinstance(counted, Exception)
        assert counted.remaining == 3
        assert len(sent) == 1 and sent[0].rstrip().endswith(b"COMMIT")
        store = core.store
        assert isinstance(store, postgres.PostgresStore)
        for key_id in (made.key.id, "key_\u00e9\u4e2d", "k" * 300):
            with store.transaction() as tx:
                rows = tx.rows
                assert isinstance(rows, postgres._PostgresRows)
                literal = "'" + key_id.replace("'", "''") + "'"
                rows.hold_key_found("rate", literal, "", ())
                held = rows.run(
                    "SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
                    " AND classid = ? AND objsubid = 2",
                    (rows._namespace & 0xFFFFFFFF,),
                    lock=False,
                ).fetchall()
                assert [int(objid) for (objid,) in held] == [postgres._lock_half("rate", key_id) & 0xFFFFFFFF]
    finally:
        core.close()
