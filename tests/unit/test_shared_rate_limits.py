"""The per-key rate limits counted in the store (``tx.rates``), and the PostgreSQL driver loaded lazily."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paymentcore import FakeClock, PaymentCore
from paymentcore._domain.models import ApiKey
from paymentcore._services.access import HOUR, MINUTE, RateLimiter, _Hit, retry_after
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


#: a hit's moment after its batch's start (ms): the same bucket, the next, and a minute on
OFFSETS = [0, 1, 999, 1_000, 2_500, 59_000, 60_000]


def _one_at_a_time(
    keys: list[ApiKey], batches: list[list[tuple[int, int]]]
) -> list[list[tuple[int, int, int] | int]]:
    """What counting each hit alone gives, in the limiter's order within a batch (keys in order, each
    key's hits in arrival order): (limit, remaining, reset seconds), or the retry-after of a refusal."""
    buckets: dict[tuple[str, int, int], int] = {}
    answers: list[list[tuple[int, int, int] | int]] = []
    for batch in batches:
        answered: dict[int, tuple[int, int, int] | int] = {}
        for place, (which, now) in sorted(enumerate(batch), key=lambda item: keys[item[1][0]].id):
            key = keys[which]
            held = {
                window: sorted(
                    (start, hits)
                    for (key_id, width, start), hits in buckets.items()
                    if key_id == key.id and width == window.width and start >= window.since(now)
                )
                for window in (MINUTE, HOUR)
            }
            ceilings = {MINUTE: key.per_minute, HOUR: key.per_hour}
            full = [w for w in (MINUTE, HOUR) if sum(h for _, h in held[w]) >= ceilings[w]]
            if full:
                answered[place] = retry_after(full[0], held[full[0]], ceilings[full[0]], now)
                continue
            for window in (MINUTE, HOUR):
                bucket = (key.id, window.width, window.start_of(now))
                buckets[bucket] = buckets.get(bucket, 0) + 1
            used = sum(h for _, h in held[MINUTE]) + 1
            oldest = held[MINUTE][0][0] if held[MINUTE] else MINUTE.start_of(now)
            reset = max(1, -(-(MINUTE.leaves_at(oldest) - now) // 1000))
            answered[place] = (key.per_minute, max(0, key.per_minute - used), reset)
        answers.append([answered[place] for place in range(len(batch))])
    return answers


@given(
    st.lists(st.tuples(st.integers(1, 6), st.integers(2, 12)), min_size=1, max_size=3),
    st.lists(
        st.lists(st.tuples(st.integers(0, 2), st.sampled_from(OFFSETS)), max_size=12),
        min_size=1,
        max_size=8,
    ),
    st.lists(st.integers(0, 40_000), min_size=8, max_size=8),
)
@settings(max_examples=150, deadline=None)
def test_hits_counted_together_answer_as_each_counted_alone(
    ceilings: list[tuple[int, int]], batches: list[list[tuple[int, int]]], gaps: list[int]
) -> None:
    """A batch's hits (several keys, moments up to a minute apart, so their windows begin at different
    buckets) are each allowed or refused, with the same remaining count, reset and retry-after, as when
    they are counted one at a time; the sums the batch keeps as it adds are the buckets' sums."""
    core = PaymentCore.memory(clock=FakeClock())
    merchant = core.operator.create_merchant("Shop")
    keys = [
        core.operator.create_key(merchant.id, ["collect"], per_minute=m, per_hour=m + h).key
        for m, h in ceilings
    ]
    batches = [[(which % len(keys), offset) for which, offset in batch] for batch in batches]
    limiter = RateLimiter(core.store)  # _count_all: the batch as hits queued by several threads would be
    start = 1_800_000_000_000
    timed: list[list[tuple[int, int]]] = []
    for batch, gap in zip(batches, gaps, strict=False):
        start += gap
        timed.append([(which, start + offset) for which, offset in batch])
    got: list[list[tuple[int, int, int] | int]] = []
    for batch in timed:
        answers: list[tuple[int, int, int] | int] = []
        hits = [_Hit(keys[which], now) for which, now in batch]
        limiter._count_all(hits)
        for hit in hits:
            if hit.error is not None:
                assert isinstance(hit.error, RateLimitedError)
                answers.append(hit.error.retry_after)
            else:
                assert hit.state is not None
                answers.append((hit.state.limit, hit.state.remaining, hit.state.reset_seconds))
        got.append(answers)
    assert got == _one_at_a_time(keys, timed)


class _SlowBook:
    """The memory store as a rate book whose counts of one key stop until told to go on."""

    def __init__(self, store: Any, slow_key: str, *, by_key: bool) -> None:
        self._store = store
        self.slow_key = slow_key
        self.counts_by_key = by_key
        self.inside = threading.Event()  # a count of the slow key has begun
        self.go_on = threading.Event()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        book = self
        with contextlib.ExitStack() as stack:  # the store's transaction opened once the keys are known

            class _Rates:
                tx: Any = None

                def spans(self, keys: Any, windows: Any) -> Any:
                    if book.slow_key in keys:  # before the memory store's one lock is taken
                        book.inside.set()
                        assert book.go_on.wait(WAIT)
                    self.tx = stack.enter_context(book._store.transaction())
                    return self.tx.rates.spans(keys, windows)

                def add_many(self, counts: Any) -> None:
                    self.tx.rates.add_many(counts)

            yield type("Counting", (), {"rates": _Rates()})()

    def ping(self, timeout: float = 0.5) -> None:
        pass

    def close(self) -> None:
        pass


WAIT = 30.0


@pytest.mark.parametrize("by_key", [True, False])
def test_a_keys_count_waits_for_another_keys_count_only_when_the_book_has_one_writer(by_key: bool) -> None:
    """On a book that counts each key apart (PostgreSQL: a lock per key), a key's request is counted
    while another key's count is in flight: the keys of different merchants share no queue. On a book
    of one writer (SQLite's file) it waits and is counted with the next batch, as before; either way
    both are counted once."""
    clock = FakeClock()
    core = PaymentCore.memory(clock=clock)
    slow = core.operator.create_key(core.operator.create_merchant("Slow").id, ["collect"], per_minute=5).key
    quick = core.operator.create_key(core.operator.create_merchant("Quick").id, ["collect"], per_minute=5).key
    book = _SlowBook(core.store, slow.id, by_key=by_key)
    limiter = RateLimiter(book)
    answers: dict[str, int] = {}

    def hit(key: ApiKey) -> None:
        answers[key.id] = limiter.hit(key, clock.now()).remaining

    first = threading.Thread(target=hit, args=(slow,))
    second = threading.Thread(target=hit, args=(quick,))
    try:
        first.start()
        assert book.inside.wait(WAIT)
        second.start()
        second.join(2.0 if by_key else 0.3)
        assert second.is_alive() is not by_key  # counted at once, or waiting for the slow count
    finally:
        book.go_on.set()
        first.join(WAIT)
        second.join(WAIT)
    assert answers == {slow.id: 4, quick.id: 4}
    assert limiter.hit(quick, clock.now()).remaining == 3  # its lane forgotten, the count kept
    assert not limiter._lanes
