"""Idempotency keys: one mechanism for every POST (CONTRACT §5).

The key is looked up and its answer saved inside the same write transaction as the work it guards, so
the work and the record of it commit together: a retry after a crash either finds the answer or finds
nothing done. A concurrent request with the same key waits on the store's write lock, then finds the
first one's answer. Records are kept ``Config.idempotency_retention_hours`` (48 h by default).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import attrs

from paymentcore import wire
from paymentcore.errors import IdempotencyKeyReusedError, IdempotencyKeyTooLongError, InvalidRequestError
from paymentcore.models import IdempotencyRecord
from paymentcore.ports import SecretBox, Transaction

MAX_KEY_LENGTH = 200


@attrs.frozen
class Reply:
    """What an operation answered: its HTTP-style status and the JSON body."""

    status: int
    body: dict[str, Any]


def check_key(key: str | None) -> str | None:
    if key is None:
        return None
    if len(key) > MAX_KEY_LENGTH:
        raise IdempotencyKeyTooLongError(param="Idempotency-Key")
    if not key.strip():
        raise InvalidRequestError("The Idempotency-Key header is empty.", param="Idempotency-Key")
    return key


def fingerprint(operation: str, body: Any) -> str:
    """A digest of the operation and its body, independent of key order and whitespace.

    Numbers are written as ``str(Decimal)`` (scientific notation for huge exponents), never expanded,
    so a hostile number costs no more to fingerprint than its own text.
    """
    canonical = json.dumps(body, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(f"{operation}\n{canonical}".encode()).hexdigest()


@attrs.frozen
class Idempotency:
    retention_ms: int
    box: SecretBox

    def lookup(
        self, tx: Transaction, merchant_id: str, key: str | None, print_: str, now: int
    ) -> Reply | None:
        if key is None:
            return None
        record = tx.get_idempotency(merchant_id, key)
        if record is None or record.created_at < now - self.retention_ms:
            return None
        if record.fingerprint != print_:
            raise IdempotencyKeyReusedError(param="Idempotency-Key")
        body = record.body or "{}"
        if body.startswith("enc:"):
            body = self.box.decrypt(body[4:])
        return Reply(record.status_code or 200, wire.loads(body))

    def save(
        self,
        tx: Transaction,
        merchant_id: str,
        key: str | None,
        print_: str,
        reply: Reply,
        now: int,
        *,
        sensitive: bool = False,
    ) -> None:
        if key is None:
            return
        body = wire.dumps(reply.body)
        if sensitive:
            body = "enc:" + self.box.encrypt(body)
        tx.put_idempotency(
            IdempotencyRecord(
                merchant_id=merchant_id,
                key=key,
                fingerprint=print_,
                created_at=now,
                status_code=reply.status,
                body=body,
            )
        )
