"""The per-key rate limits counted in the store (``tx.rates``), and the PostgreSQL driver loaded lazily."""

from __future__ import annotations

import subprocess
import sys

import pytest

from paymentcore import FakeClock, PaymentCore
from paymentcore._services.access import HOUR, MINUTE, RateLimiter, retry_after
from paymentcore.errors import RateLimitedError


def test_importing_the_library_does_not_load_the_postgresql_driver() -> None:
    code = "import sys, paymentcore; print([m for m in ('psycopg', 'psycopg_pool') if m in sys.modules])"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"


def test_a_window_is_sixty_buckets_and_a_bucket_leaves_whole() -> None:
    assert MINUTE.length // MINUTE.width == HOUR.length // HOUR.width == 60
    now = 1_000_000_500
    assert MINUTE.start_of(now) == 1_000_000_000
    assert MINUTE.since(now) == 1_000_000_000 - 59_000  # the current bucket and the 59 before it
    assert MINUTE.leaves_at(MINUTE.since(now)) == 1_000_001_000  # the oldest leaves at the next second


def test_retry_after_waits_for_just_enough_of_the_oldest_buckets() -> None:
    now = 120_000
    buckets = [(61_000, 10), (70_000, 10), (100_000, 10)]  # 30 in the minute, a ceiling of 30
    assert retry_after(MINUTE, buckets, 30, now) == 1  # 61 s + 60 s - 120 s: one bucket frees a slot
    assert retry_after(MINUTE, buckets, 15, now) == 10  # 15 must leave: the first two buckets
    assert retry_after(MINUTE, [(119_999, 5)], 5, now) == 60


def test_the_memory_store_counts_a_sliding_minute_per_key() -> None:
    clock = FakeClock()
    core = PaymentCore.memory(clock=clock)
    merchant = core.operator.create_merchant("Shop")
    key = core.operator.create_key(merchant.id, ["collect"], per_minute=3, per_hour=5).key
    limiter = RateLimiter(core.store)
    assert [limiter.hit(key, clock.now()).remaining for _ in range(3)] == [2, 1, 0]
    with pytest.raises(RateLimitedError) as refused:
        limiter.hit(key, clock.now())
    assert refused.value.retry_after == 60 and refused.value.limit == 3
    clock.advance(30)
    with pytest.raises(RateLimitedError):
        limiter.hit(key, clock.now())
    clock.advance(30)  # the first three leave the minute
    assert limiter.hit(key, clock.now()).remaining == 2
    assert limiter.hit(key, clock.now()).remaining == 1
    with pytest.raises(RateLimitedError) as hourly:  # 5 in the hour
        limiter.hit(key, clock.now())
    assert "hour" in str(hourly.value) and hourly.value.retry_after > 60
    with core.store.transaction() as tx:  # the worker's purge drops only what left the hour
        assert tx.rates.purge(clock.now() - HOUR.length) == 0
    clock.advance(hours=1, seconds=1)
    with core.store.transaction() as tx:
        assert tx.rates.purge(clock.now() - HOUR.length) == 4  # two buckets a window, two moments
    assert limiter.hit(key, clock.now()).remaining == 2
