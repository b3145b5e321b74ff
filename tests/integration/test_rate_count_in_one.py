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
from paymentcore.errors import RateLimitedError

from conftest import postgres_url  # type: ignore[import-not-found, unused-ignore]

#: seconds between hits: bursts inside one second and one minute, then gaps that let buckets leave
GAPS = [0, 0, 0, 0.2, 0.5, 1, 0, 0, 3, 10, 20, 0, 0, 30, 15, 0.9, 0, 0, 61, 0, 0, 0, 5, 59, 1, 0, 0]


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
        sent: list[bytes] = []
        real = postgres._query

        def counting(conn: Any, query: bytes) -> Any:
            sent.append(query)
            return real(conn, query)

        monkeypatch.setattr(postgres, "_query", counting)
        assert limiter.hit(key, clock.now()).remaining == 0
        assert len(sent) == 1 and sent[0].rstrip().endswith(b"COMMIT")  # one query: lock, count, COMMIT
        for _ in range(3):
            with pytest.raises(RateLimitedError):
                limiter.hit(key, clock.now())
        monkeypatch.setattr(postgres, "_query", real)
        with core.store.read() as tx:  # the refused ones left nothing
            assert sum(hits for _, hits in tx.rates.buckets(key.id, 1000, 0)) == 2
        clock.advance(seconds=60)
        assert limiter.hit(key, clock.now()).remaining == 1
    finally:
        core.close()
