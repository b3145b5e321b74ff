"""Clocks and reference generators."""

from __future__ import annotations

import secrets
import threading
import time
from datetime import UTC, datetime

from paymentcore._domain.references import (
    COLLECTION_REFERENCE_PREFIX,
    PAYOUT_REFERENCE_PREFIX,
    TOKEN_SEPARATOR,
)

__all__ = [
    "FakeClock",
    "RandomReferences",
    "SystemClock",
]

_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


class SystemClock:
    """Wall-clock time in milliseconds since the epoch."""

    def now(self) -> int:
        return time.time_ns() // 1_000_000


class FakeClock:
    """A clock that moves only when told: ``advance(seconds=...)``. Thread-safe."""

    def __init__(self, start: int | datetime | None = None) -> None:
        if start is None:
            start = datetime(2026, 1, 1, tzinfo=UTC)
        if isinstance(start, datetime):
            start = int(start.timestamp() * 1000)
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> int:
        with self._lock:
            return self._now

    def advance(self, seconds: float = 0, *, minutes: float = 0, hours: float = 0, days: float = 0) -> int:
        """Move time forward and return the new now (milliseconds)."""
        step = round((seconds + minutes * 60 + hours * 3600 + days * 86400) * 1000)
        if step < 0:
            raise ValueError("time only moves forward")
        with self._lock:
            self._now += step
            return self._now


class RandomReferences:
    """References with a timestamp part and 10 characters from a 32-letter alphabet (50 bits)."""

    def _suffix(self, length: int = 10) -> str:
        # one system call for all the randomness; 256 is a multiple of 32, so each letter is uniform
        return "".join(_ALPHABET[byte % 32] for byte in secrets.token_bytes(length))

    def collection(self, now: int) -> str:
        return f"{COLLECTION_REFERENCE_PREFIX}{now}-{self._suffix()}"

    def payout(self, now: int) -> str:
        return f"{PAYOUT_REFERENCE_PREFIX}{now}-{self._suffix()}"

    def token(self, prefix: str) -> str:
        return f"{prefix}{TOKEN_SEPARATOR}{secrets.token_hex(12)}"
