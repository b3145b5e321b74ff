"""Idempotency keys: one mechanism for every POST (CONTRACT §5).

The key is looked up and its answer saved inside the same write transaction as the work it guards, so
the work and the record of it commit together: a retry after a crash either finds the answer or finds
nothing done. A concurrent request with the same key waits on the store's write lock, then finds the
first one's answer. Records are kept ``Config.idempotency_retention_hours`` (48 h by default).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import attrs

from paymentcore._domain import wire as wire
from paymentcore._domain.errors import (
    IdempotencyKeyReusedError,
    IdempotencyKeyTooLongError,
    InvalidRequestError,
)
from paymentcore._domain.models import IdempotencyRecord
from paymentcore.ports import SecretBox, Transaction

MAX_KEY_LENGTH = 200


def check_key(key: str | None) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str):
        raise InvalidRequestError("The idempotency key must be a string.", param="idempotency_key")
    if len(key) > MAX_KEY_LENGTH:
        raise IdempotencyKeyTooLongError(
            f"The idempotency key must be at most {MAX_KEY_LENGTH} characters.", param="idempotency_key"
        )
    if not key.strip():
        raise InvalidRequestError("The idempotency key is empty.", param="idempotency_key")
    return key


def fingerprint(operation: str, arguments: Mapping[str, Any]) -> str:
    """A digest of the operation and its arguments, independent of their order.

    Numbers are written as ``str(Decimal)`` (scientific notation for huge exponents), never expanded,
    so a hostile number costs no more to fingerprint than its own text; an ``int`` is written as the
    equal ``Decimal`` is (``2500`` and ``Decimal("2500")`` are the same argument).
    """
    plain = {
        name: str(Decimal(value)) if isinstance(value, int) and not isinstance(value, bool) else value
        for name, value in arguments.items()
    }
    canonical = json.dumps(plain, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(f"{operation}\n{canonical}".encode()).hexdigest()


@attrs.frozen
class Idempotency:
    retention_ms: int
    box: SecretBox

    def lookup(self, tx: Transaction, merchant_id: str, key: str | None, print_: str, now: int) -> Any:
        """The answer kept for ``key`` (plain data), or None when there is none (or it expired)."""
        if key is None:
            return None
        record = tx.idempotency.get(merchant_id, key)
        if record is None or record.created_at < now - self.retention_ms:
            return None
        if record.fingerprint != print_:
            raise IdempotencyKeyReusedError(param="idempotency_key")
        body = record.body or "{}"
        if body.startswith("enc:"):
            body = self.box.decrypt(body[4:])
        return wire.loads(body)

    def save(
        self,
        tx: Transaction,
        merchant_id: str,
        key: str | None,
        print_: str,
        answer: Any,
        now: int,
        *,
        sensitive: bool = False,
    ) -> None:
        """Keep ``answer`` (plain data) for ``key``, in the caller's transaction."""
        if key is None:
            return
        body = wire.dumps(answer)
        if sensitive:
            body = "enc:" + self.box.encrypt(body)
        tx.idempotency.put(
            IdempotencyRecord(
                merchant_id=merchant_id,
                key=key,
                fingerprint=print_,
                created_at=now,
                status_code=None,
                body=body,
            )
        )
