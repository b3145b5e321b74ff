"""API keys, authentication and per-key rate limits.

A key is shown once at creation and stored only as its SHA-256 (the key carries 256 random bits, so a
fast hash is enough). Rate limits are sliding windows of one minute and one hour per key, counted in
this process; a key's ceilings are read from the store on every request, so a change made by the CLI
applies at once.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections import deque

import attrs

from paymentcore._deps import Deps
from paymentcore._models import ApiKey, Merchant, Scope
from paymentcore.errors import (
    CapabilityDisabledError,
    InsufficientScopeError,
    MerchantNotApprovedError,
    RateLimitedError,
    UnauthorizedError,
)

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


class _Window:
    """The times of the requests counted in one sliding window (oldest first)."""

    def __init__(self, length_ms: int) -> None:
        self.length_ms = length_ms
        self.hits: deque[int] = deque()

    def expire(self, now: int) -> None:
        while self.hits and self.hits[0] <= now - self.length_ms:
            self.hits.popleft()

    def retry_after(self, ceiling: int, now: int) -> int:
        """Seconds until enough of the oldest hits leave for one more request to fit."""
        index = max(0, len(self.hits) - ceiling)
        return max(1, -(-(self.hits[index] + self.length_ms - now) // 1000))


class RateLimiter:
    """Sliding one-minute and one-hour windows per key, in memory; O(1) per request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._windows: dict[str, tuple[_Window, _Window]] = {}

    def hit(self, key: ApiKey, now: int) -> RateState:
        """Count one request or raise RATE_LIMITED (a refused request is not counted)."""
        with self._lock:
            minute, hour = self._windows.setdefault(key.id, (_Window(60_000), _Window(3_600_000)))
            minute.expire(now)
            hour.expire(now)
            for window, ceiling, name in ((minute, key.per_minute, "minute"), (hour, key.per_hour, "hour")):
                if len(window.hits) >= ceiling:
                    raise RateLimitedError(
                        f"Rate limit of {ceiling} requests per {name} exceeded for this API key.",
                        retry_after=window.retry_after(ceiling, now),
                        limit=ceiling,
                    )
            minute.hits.append(now)
            hour.hits.append(now)
            return RateState(
                limit=key.per_minute,
                remaining=max(0, key.per_minute - len(minute.hits)),
                reset_seconds=max(1, -(-(minute.hits[0] + 60_000 - now) // 1000)),
            )


class Access:
    def __init__(self, deps: Deps) -> None:
        self._deps = deps
        self.limiter = RateLimiter()

    def authenticate(self, token: str | None) -> Principal:
        """The caller behind a bearer token, or UNAUTHORIZED / CAPABILITY_DISABLED."""
        if not token or len(token) > 200:
            raise UnauthorizedError()
        with self._deps.store.read() as tx:
            key = tx.keys.by_hash(hash_key(token))
            if key is None or key.revoked:
                raise UnauthorizedError()
            merchant = tx.merchants.get(key.merchant_id)
            settings = tx.settings.get()
        if merchant is None:
            raise UnauthorizedError()
        if not settings.api_enabled:
            raise CapabilityDisabledError("The merchant API is switched off platform-wide.")
        return Principal(key=key, merchant=merchant)

    def rate(self, principal: Principal) -> RateState:
        return self.limiter.hit(principal.key, self._deps.clock.now())
