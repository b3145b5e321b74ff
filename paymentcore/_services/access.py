"""API keys, authentication and per-key rate limits.

A key is shown once at creation and stored only as its SHA-256 (the key carries 256 random bits, so a
fast hash is enough). Rate limits are sliding windows of one minute and one hour per key, counted in
a rate book shared by every API process on one database, so they share one count per key and a
restart keeps it: the store itself (``tx.rates``) on PostgreSQL and in memory, a side file on SQLite
(``paymentcore.adapters.sqlite_rates``, whose writes need no fsync). A key's ceilings are read from
the store on every request, so a change made by the CLI applies at once.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, cast

import attrs

from paymentcore._domain.errors import (
    CapabilityDisabledError,
    InsufficientScopeError,
    MerchantNotApprovedError,
    PaymentError,
    RateLimitedError,
    UnauthorizedError,
)
from paymentcore._domain.models import ApiKey, Merchant, Scope
from paymentcore._services.deps import Deps
from paymentcore.ports import KeyLookup, RateRepository

KEY_PREFIX = "pck_"


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


@attrs.frozen
class Principal:
    """Who is calling: the key and its merchant, as of this request."""

    key: ApiKey
    merchant: Merchant

    def require(self, scope: Scope) -> None:
        if scope not in self.key.scopes:
            raise InsufficientScopeError(
                f"This API key lacks the {scope.value.capitalize()} permission.",
            )

    def require_approved(self) -> None:
        if not self.merchant.approved:
            raise MerchantNotApprovedError()


@attrs.frozen
class RateState:
    limit: int
    remaining: int
    reset_seconds: int


@attrs.frozen
class Window:
    """A sliding window of ``length`` ms, counted in buckets of ``width`` ms (``length / width`` of them).

    A request counts in the bucket holding its time and leaves the window when the whole bucket has:
    at most one bucket width (1/60 of the window) before an exact log would let it go.
    """

    name: str
    length: int
    width: int

    def start_of(self, now: int) -> int:
        return now - now % self.width

    def since(self, now: int) -> int:
        """The start of the oldest bucket still inside the window at ``now``."""
        return self.start_of(now) - self.length + self.width

    def leaves_at(self, start: int) -> int:
        """When the requests of the bucket starting at ``start`` stop counting."""
        return start + self.length


MINUTE = Window("minute", 60_000, 1_000)
HOUR = Window("hour", 3_600_000, 60_000)


def _seconds_until(moment: int, now: int) -> int:
    return max(1, -(-(moment - now) // 1000))


def retry_after(window: Window, buckets: list[tuple[int, int]], ceiling: int, now: int) -> int:
    """Seconds until enough of the oldest requests leave ``window`` for one more to fit."""
    excess = sum(hits for _, hits in buckets) - ceiling + 1
    for start, hits in buckets:
        excess -= hits
        if excess <= 0:
            return _seconds_until(window.leaves_at(start), now)
    return 1


class Counting(Protocol):
    """A unit of work that can count requests (a store's, or a rate file's)."""

    @property
    def rates(self) -> RateRepository: ...


class RateBook(Protocol):
    """Where the counters live: anything whose write transactions offer ``rates`` (every store does).

    A book whose count of some keys waits for no count of other keys (each key its own lock, not one
    writer for the whole book) says so with a true ``counts_by_key`` attribute: the rate limiter then
    counts each key in a lane of its own (:class:`RateLimiter`)."""

    def transaction(self) -> AbstractContextManager[Counting]: ...

    def ping(self, timeout: float = 0.5) -> None:
        """Raise ``StoreUnavailableError`` unless the book answers and takes writes (the health check)."""
        ...

    def close(self) -> None: ...


@attrs.define(eq=False)
class _Hit:
    """One request waiting to be counted, and what counting it gave."""

    key: ApiKey
    now: int
    done: bool = False
    state: RateState | None = None
    error: BaseException | None = None


class _Lane:
    """The hits of one lane waiting to be counted, its counting turn, and the threads using it."""

    __slots__ = ("queue", "turn", "users")

    def __init__(self) -> None:
        self.queue: list[_Hit] = []
        self.turn = threading.Lock()
        self.users = 0


#: a key's buckets by window (minute, hour): key id -> [[(start, hits), ...], [(start, hits), ...]]
_Held = dict[str, list[list[tuple[int, int]]]]

#: a count of one hit sent with its unit's end (``count_later``): what the windows held before it and
#: whether it was counted
_Counted = Callable[[], tuple[list[list[tuple[int, int]]], bool]]
CountLater = Callable[[str, Sequence[tuple[int, int, int, int]]], _Counted]
#: a key looked up and its request counted, sent with its unit's end (``admit_later``)
AdmitLater = Callable[
    [str, Sequence[tuple[int, int, int]]],
    Callable[[], tuple[KeyLookup | None, list[list[tuple[int, int]]], bool]],
]


@attrs.define
class _Span:
    """The hits of a key's buckets from one start on, and the oldest of those buckets' starts."""

    hits: int
    oldest: int | None


class _BatchCounts:
    """The counters of a batch's keys, read once when the batch's transaction begins and kept in
    memory while its hits are counted one after another; :meth:`write` then adds each bucket's new
    hits in one statement. Exact, because the book's transaction holds the keys' counters throughout.

    A window's sum is made once per key, width and first bucket, then kept up to date as hits are
    added: a hit costs the same however many buckets its windows hold (summing them again for each
    hit of a busy key cost more than the count's transaction).
    """

    def __init__(self, store: RateRepository | None, batch: list[_Hit], spans: _Held | None = None) -> None:
        """The counters of ``batch``'s keys read from ``store``, or ``spans``: what was read already."""
        self._store = store
        self._known: dict[tuple[str, int], dict[int, int]] = {}
        self._spans: dict[tuple[str, int], dict[int, _Span]] = {}  # (key, width) -> since -> its sum
        self._added: dict[tuple[str, int, int], int] = {}
        if spans is None and store is not None:
            # every key's buckets in one read (holding every key's counters), from the batch's earliest
            # hit: a few more buckets than a later hit's windows hold, which window() leaves out
            keys = sorted({hit.key.id for hit in batch})
            earliest = min((hit.now for hit in batch), default=0)
            windows = [(MINUTE.width, MINUTE.since(earliest)), (HOUR.width, HOUR.since(earliest))]
            spans = store.spans(keys, windows) if keys else {}
        for key_id, rows_of in (spans or {}).items():
            for window, rows in zip((MINUTE, HOUR), rows_of, strict=True):
                self._known[(key_id, window.width)] = dict(rows)
                self._spans[(key_id, window.width)] = {}

    def buckets(self, key_id: str, width: int, since: int) -> list[tuple[int, int]]:
        counts = self._known[(key_id, width)]
        return sorted((start, hits) for start, hits in counts.items() if start >= since)

    def window(self, key_id: str, window: Window, now: int) -> _Span:
        """The hits of the key's buckets inside ``window`` at ``now``, and the oldest bucket's start."""
        since = window.since(now)
        spans = self._spans[(key_id, window.width)]
        span = spans.get(since)
        if span is None:
            counts = self._known[(key_id, window.width)]
            starts = [start for start in counts if start >= since]
            span = spans[since] = _Span(sum(counts[start] for start in starts), min(starts, default=None))
        return span

    def add(self, key_id: str, width: int, start: int, hits: int = 1) -> None:
        counts = self._known[(key_id, width)]
        counts[start] = counts.get(start, 0) + hits
        for since, span in self._spans[(key_id, width)].items():
            if start >= since:
                span.hits += hits
                if span.oldest is None or start < span.oldest:
                    span.oldest = start
        place = (key_id, width, start)
        self._added[place] = self._added.get(place, 0) + hits

    def write(self) -> None:
        assert self._store is not None
        self._store.add_many([(*place, hits) for place, hits in sorted(self._added.items())])


def _windows(hit: _Hit) -> list[tuple[int, int, int, int]]:
    """A hit's windows as ``count_later`` takes them: (width, since, the hit's bucket, ceiling)."""
    now, key = hit.now, hit.key
    return [
        (w.width, w.since(now), w.start_of(now), ceiling)
        for w, ceiling in ((MINUTE, key.per_minute), (HOUR, key.per_hour))
    ]


class RateLimiter:
    """Sliding one-minute and one-hour windows per key, counted in a rate book, in which the book holds
    the counters of the keys being counted, so racing requests (in this process or another one on the
    same database) take the slots one at a time.

    Requests that arrive together are counted together: each request queues its hit in its lane, and
    whichever thread takes the lane's counting turn counts every hit queued there in one write
    transaction of the book (keys in a fixed order, each key's hits in arrival order), so a burst costs
    one transaction rather than one per request and the threads do not queue one by one behind the
    book's lock. A book with one writer (SQLite's file, the memory store) has one lane for every key:
    a burst of many keys is one transaction and one fsync. A book whose counts of different keys wait
    for nothing of each other (``counts_by_key``: PostgreSQL, a lock per key) has a lane per key, so a
    key's count never waits for another key's transaction in flight: the keys of different merchants
    share no queue (with one lane, every request of every merchant waited for the count in flight,
    several round trips to the database, before its own).
    """

    def __init__(self, book: RateBook) -> None:
        self._book = book
        self._by_key = bool(getattr(book, "counts_by_key", False))
        self._lanes: dict[str, _Lane] = {}
        self._lanes_lock = threading.Lock()  # the lanes, and the hits queued in each

    def hit(self, key: ApiKey, now: int) -> RateState:
        """Count one request or raise RATE_LIMITED (a refused request is not counted)."""
        [counted] = self.hit_many([key], now)
        if isinstance(counted, BaseException):
            raise counted
        return counted

    def hit_many(self, keys: Sequence[ApiKey], now: int) -> list[RateState | BaseException]:
        """Count one request of each key, in their order, together with whatever other threads have
        queued meanwhile: what each count gave, a ``RateState`` or the error that refused it (a
        refused request is not counted; when the book fails, every request fails with its error)."""
        if not keys:
            return []
        mine = [_Hit(key, now) for key in keys]
        lanes: dict[str, list[_Hit]] = {}
        for hit in mine:
            lanes.setdefault(hit.key.id if self._by_key else "", []).append(hit)
        for name in sorted(lanes):  # one turn held at a time: no two threads wait for each other's
            self._count_in(name, lanes[name])
        counted: list[RateState | BaseException] = []
        for hit in mine:
            assert hit.error is not None or hit.state is not None
            counted.append(hit.error if hit.error is not None else cast(RateState, hit.state))
        return counted

    def _count_in(self, name: str, hits: list[_Hit]) -> None:
        """Queue ``hits`` in lane ``name`` and count them: in the batch of the thread whose turn it is,
        or, when the turn comes and they are still queued, with whatever was queued with them."""
        with self._lanes_lock:
            lane = self._lanes.get(name)
            if lane is None:
                lane = self._lanes[name] = _Lane()
            lane.users += 1
            lane.queue.extend(hits)
        try:
            with lane.turn:
                if not all(hit.done for hit in hits):
                    with self._lanes_lock:
                        batch, lane.queue = lane.queue, []
                    self._count_all(batch)
        finally:
            with self._lanes_lock:  # a lane no thread uses any more is forgotten (keys come and go)
                lane.users -= 1
                if lane.users == 0:
                    del self._lanes[name]

    def _count_all(self, batch: list[_Hit]) -> None:
        try:
            later = None
            with self._book.transaction() as tx:
                # a hit alone in its lane, on a book that counts by key and can count it in the
                # statement that reads its buckets (PostgreSQL): that statement, sent with the unit's
                # end (its key's lock, the conditional count, COMMIT: one round trip), not a read
                # answered before the write and the COMMIT are sent
                alone = len(batch) == 1 and self._by_key
                count_later: CountLater | None = getattr(tx.rates, "count_later", None) if alone else None
                if count_later is not None:
                    hit = batch[0]
                    later = count_later(hit.key.id, _windows(hit))
                else:
                    counts = _BatchCounts(tx.rates, batch)
                    for hit in sorted(batch, key=lambda h: h.key.id):  # stable: arrival order per key
                        try:
                            hit.state = self.count(counts, hit.key, hit.now)
                        except RateLimitedError as refused:  # nothing of it was written
                            hit.error = refused
                    counts.write()
            if later is not None:
                self.answer_alone(batch[0], later)
        except BaseException as failure:  # the book failed: every hit of the batch fails with it
            for hit in batch:
                hit.state, hit.error = None, failure
        finally:
            for hit in batch:
                hit.done = True

    @property
    def by_key(self) -> bool:
        """Whether each key is counted in a lane of its own (the book counts by key)."""
        return self._by_key

    def answer_alone(self, hit: _Hit, later: _Counted) -> None:
        """A hit counted by ``count_later``: its answer worked out by :meth:`count` from what its
        windows held before it, as for a batch (the store decided on the same buckets)."""
        held, counted = later()
        counts = _BatchCounts(None, [hit], {hit.key.id: held})
        try:
            hit.state = self.count(counts, hit.key, hit.now)
        except RateLimitedError as refused:
            hit.error = refused
        if counted is (hit.error is not None):
            raise RuntimeError(f"the rate count of key {hit.key.id} disagreed with its buckets")

    def purge(self, now: int) -> int:
        """Drop the buckets past the longest window; how many went."""
        with self._book.transaction() as tx:
            return tx.rates.purge(now - HOUR.length)

    def count(self, counts: _BatchCounts, key: ApiKey, now: int) -> RateState:
        """Count one request of ``key`` at ``now`` in the batch's counters, or raise RATE_LIMITED."""
        minute = counts.window(key.id, MINUTE, now)
        hour = counts.window(key.id, HOUR, now)
        for window, span, ceiling in ((MINUTE, minute, key.per_minute), (HOUR, hour, key.per_hour)):
            if span.hits >= ceiling:
                buckets = counts.buckets(key.id, window.width, window.since(now))
                raise RateLimitedError(
                    f"Rate limit of {ceiling} requests per {window.name} exceeded for this API key.",
                    retry_after=retry_after(window, buckets, ceiling, now),
                    limit=ceiling,
                )
        used = minute.hits + 1
        oldest = minute.oldest if minute.oldest is not None else MINUTE.start_of(now)
        for window in (MINUTE, HOUR):
            counts.add(key.id, window.width, window.start_of(now))
        return RateState(
            limit=key.per_minute,
            remaining=max(0, key.per_minute - used),
            reset_seconds=_seconds_until(MINUTE.leaves_at(oldest), now),
        )


#: the counter of every client's failed console sign-ins together (a client's is SIGN_IN_KEY + name)
SIGN_IN_KEY = "sign-in:"
SIGN_IN_ALL = SIGN_IN_KEY + "*"


def client_name(client: object) -> str:
    """A client's address as the throttle and the audit trail name it: printable ASCII, no spaces, at
    most 100 characters; ``unknown`` when there is none (a library call that names no client)."""
    text = client if isinstance(client, str) else ""
    kept = "".join(char for char in text if char.isascii() and char.isprintable() and not char.isspace())
    return kept[:100] or "unknown"


class SignInThrottle:
    """Failed console sign-ins, counted in the rate book per client address and over all clients, in a
    sliding window of ``Config.sign_in_window_seconds``: at ``Config.sign_in_failures_per_client``
    failures from one address in the window that address is refused (RATE_LIMITED, with the seconds
    until a failure leaves the window) without its token being looked at, and at
    ``Config.sign_in_failures_overall`` failures in all every address is.

    The book is shared by every process on the database (the store, or SQLite's rate file), so the
    counts are too. Within a process, checking, looking the token up and counting a failure take turns
    under one lock, so the counts are exact; processes checking at the same moment may each let one more
    attempt through than the ceiling (at most one per process).
    """

    def __init__(self, book: RateBook, *, per_client: int, overall: int, window_seconds: int) -> None:
        if not 60 <= window_seconds <= HOUR.length // 1000:  # the limiter's purge keeps an hour
            raise ValueError("sign_in_window_seconds must be from 60 to 3600")
        if per_client < 1 or overall < 1:
            raise ValueError("the sign-in ceilings must be at least 1")
        self._book = book
        self.per_client = per_client
        self.overall = overall
        self.window = Window("sign-in", window_seconds * 1000, window_seconds * 1000 // 60)
        self.turn = threading.Lock()

    def _counts(self, tx: Counting, client: str, now: int) -> list[tuple[str, int, list[tuple[int, int]]]]:
        since = self.window.since(now)
        return [
            (key, ceiling, tx.rates.buckets(key, self.window.width, since))
            for key, ceiling in ((SIGN_IN_ALL, self.overall), (SIGN_IN_KEY + client, self.per_client))
        ]

    def check(self, client: str, now: int) -> None:
        """Raise RATE_LIMITED when ``client``, or every client together, is at its ceiling."""
        with self._book.transaction() as tx:
            counts = self._counts(tx, client, now)
        for key, ceiling, buckets in counts:
            if sum(hits for _, hits in buckets) >= ceiling:
                wait = retry_after(self.window, buckets, ceiling, now)
                whose = "" if key == SIGN_IN_ALL else " from this address"
                raise RateLimitedError(
                    f"Too many failed sign-ins{whose}: try again in {wait} seconds.",
                    retry_after=wait,
                    limit=ceiling,
                )

    def failed(self, client: str, now: int) -> tuple[int, int]:
        """Count a failed sign-in of ``client``; how many failures ``client``, and every client
        together, have in the window now."""
        start = self.window.start_of(now)
        with self._book.transaction() as tx:
            counts = self._counts(tx, client, now)
            for key in (SIGN_IN_ALL, SIGN_IN_KEY + client):
                tx.rates.add(key, self.window.width, start)
        overall, mine = (sum(hits for _, hits in buckets) + 1 for _, _, buckets in counts)
        return mine, overall


def _admitted(found: KeyLookup | None) -> Principal:
    """The caller of a key looked up, or UNAUTHORIZED / CAPABILITY_DISABLED."""
    if found is None or found.key.revoked or found.merchant is None:
        raise UnauthorizedError()
    if not found.settings.api_enabled:
        raise CapabilityDisabledError("The merchant API is switched off platform-wide.")
    return Principal(key=found.key, merchant=found.merchant)


class Access:
    def __init__(self, deps: Deps, rate_book: RateBook | None = None) -> None:
        self._deps = deps
        #: the rate counts go to a book of their own (a SQLite deployment's rate file), not to the store
        #: whose writers move money: counting never waits for those writers
        self.counts_apart = rate_book is not None
        book = rate_book if rate_book is not None else deps.store
        self.limiter = RateLimiter(book)
        #: whether a request's key is looked up and counted in one unit (``admit_later`` of the keys
        #: repository): where the store is the book and counts by key (PostgreSQL)
        self._admits_at_once = (
            self.limiter.by_key and not self.counts_apart and hasattr(deps.store, "transaction_for")
        )
        config = deps.config
        self.sign_ins = SignInThrottle(
            book,
            per_client=config.sign_in_failures_per_client,
            overall=config.sign_in_failures_overall,
            window_seconds=config.sign_in_window_seconds,
        )

    def authenticate(self, token: str | None) -> Principal:
        """The caller behind a bearer token, or UNAUTHORIZED / CAPABILITY_DISABLED."""
        if not token or len(token) > 200:
            raise UnauthorizedError()
        with self._deps.glance() as tx:
            found = tx.keys.lookup(hash_key(token))  # the key, its merchant and the switches: one read
        return _admitted(found)

    def authenticate_many(self, tokens: Sequence[str | None]) -> list[Principal | PaymentError]:
        """:meth:`authenticate` for several tokens in one glance (each key a fact of its own; a token
        repeated is looked up once): each token's caller, or the error its request raises."""
        found: dict[str, KeyLookup | None] = {}
        wanted = sorted({token for token in tokens if token and len(token) <= 200})
        if wanted:  # a token that cannot be a key is refused without a read, as by authenticate
            with self._deps.glance() as tx:  # each key is a fact of its own
                for key_token in wanted:
                    found[key_token] = tx.keys.lookup(hash_key(key_token))
        admitted: list[Principal | PaymentError] = []
        for token in tokens:
            try:
                if not token or token not in found:
                    raise UnauthorizedError()
                admitted.append(_admitted(found[token]))
            except PaymentError as refused:
                admitted.append(refused)
        return admitted

    def rate(self, principal: Principal) -> RateState:
        return self.limiter.hit(principal.key, self._deps.clock.now())

    def admit(self, token: str | None) -> tuple[Principal, RateState | Exception]:
        """:meth:`authenticate`, then :meth:`rate`, for one request: its caller (or UNAUTHORIZED /
        CAPABILITY_DISABLED, nothing counted) and its count, a ``RateState`` or the error (RATE_LIMITED,
        or the rate book's failure) its request raises once its caller is known. Where the store
        counts by key and can count in the statement that looks the key up (PostgreSQL:
        ``admit_later``), the key's lock, the lookup and the count are one round trip; elsewhere the
        lookup, then the count in its lane."""
        if not (self._admits_at_once and token and len(token) <= 200):
            principal = self.authenticate(token)
            try:
                return principal, self.rate(principal)
            except Exception as refused:
                return principal, refused
        assert token is not None
        now = self._deps.clock.now()
        windows = [(window.width, window.since(now), window.start_of(now)) for window in (MINUTE, HOUR)]
        with self._deps.store.transaction() as tx:  # its statements take no lock but the key's
            admit_later: AdmitLater = cast(Any, tx.keys).admit_later
            later = admit_later(hash_key(token), windows)
        found, held, counted = later()
        principal = _admitted(found)  # the statement counted none of what this refuses
        hit = _Hit(principal.key, now)
        self.limiter.answer_alone(hit, lambda: (held, counted))
        if isinstance(hit.error, RateLimitedError):
            return principal, hit.error
        assert hit.state is not None
        return principal, hit.state

    def rate_many(self, principals: Sequence[Principal]) -> list[RateState | BaseException]:
        """:meth:`rate` for several requests counted in one write of the rate book: what each count
        gave, a ``RateState`` or the error (RATE_LIMITED, or the book's failure) its request raises."""
        return self.limiter.hit_many([principal.key for principal in principals], self._deps.clock.now())
