"""HMAC-SHA-256 webhook signatures, for the sender and for receivers.

The signed string is ``<timestamp>.<raw body>``; the header is ``sha256=<lowercase hex>``. A receiver
calls :func:`verify_webhook` with the secret, the request headers and the raw body bytes.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping

SIGNATURE_HEADER = "X-Service-Signature"
TIMESTAMP_HEADER = "X-Service-Timestamp"
EVENT_HEADER = "X-Service-Event"
EVENT_ID_HEADER = "X-Service-Event-Id"  # the event's stable id, the same on every attempt (not signed)
TOLERANCE_SECONDS = 300  # a receiver refuses a delivery signed further than this from its clock
SIGNATURE_SCHEME = "sha256="  # the signature header's value: this, then 64 lowercase hex digits
SIGNATURE_HEX_DIGITS = 64


class WebhookVerificationError(Exception):
    """The delivery is not authentic or not fresh: reject it (answer 400 or 401)."""


def signature(secret: str, timestamp: int | str, body: bytes) -> str:
    """The header value for ``body`` sent at ``timestamp`` (Unix seconds)."""
    message = str(timestamp).encode("ascii") + b"." + body
    return SIGNATURE_SCHEME + hmac.digest(secret.encode(), message, hashlib.sha256).hex()


def header(headers: Mapping[str, str], name: str) -> str | None:
    """The value of header ``name`` in ``headers``, matched case-insensitively (None when absent)."""
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


def verify_webhook(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float | None = None,
    tolerance: int = TOLERANCE_SECONDS,
) -> int:
    """Check a delivery's signature and freshness; return its timestamp or raise WebhookVerificationError.

    ``body`` must be the raw bytes as received, not a re-serialised copy. The comparison runs in
    constant time; a timestamp more than ``tolerance`` seconds from ``now`` either way is refused.
    """
    given = header(headers, SIGNATURE_HEADER)
    stamp = header(headers, TIMESTAMP_HEADER)
    if not given or not stamp:
        raise WebhookVerificationError("missing signature or timestamp header")
    if not stamp.isascii() or not stamp.isdigit() or len(stamp) > 12:
        raise WebhookVerificationError("malformed timestamp")
    if not given.startswith(SIGNATURE_SCHEME) or len(given) != len(SIGNATURE_SCHEME) + SIGNATURE_HEX_DIGITS:
        raise WebhookVerificationError("malformed signature")
    current = time.time() if now is None else now
    if abs(current - int(stamp)) > tolerance:
        raise WebhookVerificationError("timestamp outside the tolerance window")
    expected = signature(secret, stamp, body)
    if not hmac.compare_digest(expected.encode(), given.lower().encode("ascii", "replace")):
        raise WebhookVerificationError("signature does not match")
    return int(stamp)
