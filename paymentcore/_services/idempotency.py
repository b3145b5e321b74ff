"""Idempotency keys: one mechanism for every POST (CONTRACT §5).

The key is looked up and its answer saved inside the same write transaction as the work it guards, so
the work and the record of it commit together: a retry after a crash either finds the answer or finds
nothing done. A concurrent request with the same key waits on the store's write lock (on PostgreSQL, its
merchant's), then finds the first one's answer. Records are kept
``Config.idempotency_retention_hours`` (48 h by default).

Every idempotent call goes through :meth:`Idempotency.run` with its command
(:mod:`paymentcore._domain.commands`), whose fingerprint tells a retry from another request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import attrs

from paymentcore._domain import wire as wire
from paymentcore._domain.commands import Command
from paymentcore._domain.errors import (
    IdempotencyKeyReusedError,
    IdempotencyKeyTooLongError,
    InvalidRequestError,
)
from paymentcore._domain.limits import MAX_IDEMPOTENCY_KEY_LENGTH
from paymentcore._domain.models import IdempotencyRecord
from paymentcore._services.deps import Deps
from paymentcore.ports import SecretBox, Transaction

MAX_KEY_LENGTH = MAX_IDEMPOTENCY_KEY_LENGTH

T = TypeVar("T")


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


@attrs.frozen
class Answer(Generic[T]):
    """How a call's answer is kept with its key: ``dump`` makes it plain data, ``load`` reads it back
    (given the transaction and the time, for an answer kept by an older version that names a record;
    None when there is nothing it can answer, and the call runs); ``sensitive`` answers are kept
    encrypted."""

    dump: Callable[[T], Any]
    load: Callable[[Transaction, Any, int], T | None]
    sensitive: bool = False


@attrs.frozen
class Idempotency:
    retention_ms: int
    box: SecretBox

    def run(
        self,
        deps: Deps,
        merchant_id: str,
        key: str | None,
        command: Command,
        body: Callable[[Transaction, int], T],
        answer: Answer[T],
        *,
        read_first: bool = False,
        prepare: Callable[[Transaction, int], IdempotencyRecord | None] | None = None,
    ) -> T:
        """``body(tx, now)`` in a write transaction, its answer kept for ``key`` in the same one; or, when
        ``key`` was used for this ``command``, the answer kept then (IdempotencyKeyReusedError when it was
        used for another). Without a key, just the body.

        ``read_first`` looks for a kept answer before taking the write lock (a replay then needs none),
        in a glance (``Deps.glance``: on SQLite one statement, with no BEGIN and ROLLBACK around it); it
        is looked for again under the lock, where a request with the same key may have committed
        meanwhile. On a store partitioned by merchant (``ports.PartitionedStore``) the
        merchant's own write transaction answers a replay without waiting for other merchants, so the
        read view, a round trip more for every request, is skipped.

        ``prepare(tx, now)`` runs in the write transaction in place of the kept answer's lookup: it makes
        the reads the body needs together with the kept answer (``PayoutRepository.inputs`` with the
        key: one statement) and returns the kept record.
        """
        print_ = command.fingerprint()
        if read_first and key is not None and not deps.partitioned:
            with deps.glance() as view:
                kept = view.idempotency.get(merchant_id, key)
                replay = self._replay(view, kept, print_, deps.clock.now(), answer)
            if replay is not None:  # the original answer, whatever changed since
                return replay
        with deps.transaction(merchant_id) as tx:
            now = deps.clock.now()
            if prepare is not None:  # the record asked for with the body's reads
                kept = prepare(tx, now)
            else:
                kept = None if key is None else tx.idempotency.get(merchant_id, key)
            replay = self._replay(tx, kept, print_, now, answer)
            if replay is not None:
                return replay
            result = body(tx, now)
            self._save(tx, merchant_id, key, print_, answer.dump(result), now, sensitive=answer.sensitive)
            return result

    def _replay(
        self, tx: Transaction, kept: IdempotencyRecord | None, print_: str, now: int, answer: Answer[T]
    ) -> T | None:
        found = self._lookup(kept, print_, now)
        return None if found is None else answer.load(tx, found, now)

    def _lookup(self, record: IdempotencyRecord | None, print_: str, now: int) -> Any:
        """The answer ``record`` keeps (plain data), or None when there is none (or it expired)."""
        if record is None or record.created_at < now - self.retention_ms:
            return None
        if record.fingerprint != print_:
            raise IdempotencyKeyReusedError(param="idempotency_key")
        body = record.body or "{}"
        if body.startswith("enc:"):
            body = self.box.decrypt(body[4:])
        return wire.loads(body)

    def _save(
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
