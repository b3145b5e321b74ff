"""SandboxNetwork: the simulated mobile money networks of CONTRACT §3.

The outcome is chosen by the last two digits of the local number and the time since the request, so
the sandbox keeps no state that a second process would need: a worker in another process gets the
same answers. It records what it was asked, per reference, so tests can see how many prompts went out
and that no payout was sent twice.

It can be told to hang (``hang``: provider codes such as ``mtn_cm``, or phone numbers): every call for
that provider or number then blocks for ``hang_seconds`` and fails as a network that did not answer
(:class:`~paymentcore.ports.NetworkError`), to show that a provider that hangs holds up only its own work.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from hashlib import sha256

from paymentcore.ports import (
    CollectionRequest,
    CollectionResult,
    NetworkError,
    NetworkOutcome,
    PayoutRequest,
    PayoutResult,
)

__all__ = [
    "COLLECTION_FAILURES",
    "PAYOUT_FAILS_AFTER_SENDING",
    "PAYOUT_NEVER_CONFIRMED",
    "PAYOUT_REFUSED",
    "SandboxNetwork",
]

COLLECTION_FAILURES = {
    "11": ("PAYER_DECLINED", "The payer declined the payment prompt."),
    "12": ("INSUFFICIENT_FUNDS", "The payer's wallet does not hold enough money."),
    "13": ("TIMEOUT", "The payer did not answer the prompt in time."),
}
PAYOUT_REFUSED = "21"
PAYOUT_FAILS_AFTER_SENDING = "22"
PAYOUT_NEVER_CONFIRMED = "23"


def _tail(phone: str | None) -> str:
    return (phone or "")[-2:]


def _digits(text: str) -> str:
    return "".join(ch for ch in text if ch.isdigit())


class SandboxNetwork:
    def __init__(
        self, *, delay_seconds: float = 2.0, hang: Iterable[str] = (), hang_seconds: float = 30.0
    ) -> None:
        self.delay_ms = int(delay_seconds * 1000)
        self._lock = threading.Lock()
        self.prompts: Counter[str] = Counter()  # collection reference -> times asked
        self.payouts_sent: Counter[str] = Counter()  # payout reference -> times handed over
        self.payouts_accepted: set[str] = set()  # references the network took (idempotent)
        self.hang_seconds = hang_seconds
        named = [h.strip() for h in hang if h.strip()]
        # a value with a letter names a provider (``mtn_cm``); any other is a phone number
        self._hang_providers = frozenset(h.lower() for h in named if any(ch.isalpha() for ch in h))
        self._hang_numbers = frozenset(
            _digits(h) for h in named if not any(ch.isalpha() for ch in h) and _digits(h)
        )
        self._stop = threading.Event()

    def hangs(self, provider: str, phone: str | None) -> bool:
        """Is this provider (code) or number told to hang?"""
        if provider.lower() in self._hang_providers:
            return True
        digits = _digits(phone or "")
        return bool(digits) and any(digits.endswith(number) for number in self._hang_numbers)

    def _maybe_hang(self, provider: str, phone: str | None) -> None:
        if self.hangs(provider, phone):
            self._stop.wait(self.hang_seconds)
            raise NetworkError(f"the sandbox provider {provider} did not answer (told to hang)")

    def close(self) -> None:
        """Let every hanging call end at once (they fail as unanswered)."""
        self._stop.set()

    # --- collections -----------------------------------------------------------------------------

    def request_collection(self, request: CollectionRequest) -> None:
        self._maybe_hang(request.provider, request.phone)
        with self._lock:
            self.prompts[request.reference] += 1

    def collection_status(self, request: CollectionRequest, now: int) -> CollectionResult:
        self._maybe_hang(request.provider, request.phone)
        answers_at = request.submitted_at + self.delay_ms
        if now < answers_at:  # and it says when it will answer
            return CollectionResult(NetworkOutcome.PENDING, check_after_ms=answers_at - now)
        failure = COLLECTION_FAILURES.get(_tail(request.phone)) if request.phone else None
        if failure is not None:
            return CollectionResult(NetworkOutcome.FAILED, failure[0], failure[1])
        return CollectionResult(NetworkOutcome.SUCCESS)

    @property
    def prompt_count(self) -> int:
        """How many distinct collections were pushed to the network."""
        return len(self.prompts)

    # --- payouts ---------------------------------------------------------------------------------

    @staticmethod
    def provider_reference(reference: str) -> str:
        return "SBX" + sha256(reference.encode()).hexdigest()[:16].upper()

    def send_payout(self, request: PayoutRequest) -> PayoutResult:
        self._maybe_hang(request.provider, request.phone)
        with self._lock:
            self.payouts_sent[request.reference] += 1
            if _tail(request.phone) == PAYOUT_REFUSED:
                return PayoutResult(NetworkOutcome.FAILED, reason="The network refused the payout.")
            self.payouts_accepted.add(request.reference)
        return PayoutResult(
            NetworkOutcome.SUCCESS, provider_reference=self.provider_reference(request.reference)
        )

    def payout_status(self, request: PayoutRequest, now: int) -> PayoutResult:
        self._maybe_hang(request.provider, request.phone)
        tail = _tail(request.phone)
        ref = self.provider_reference(request.reference)
        if tail == PAYOUT_NEVER_CONFIRMED:
            return PayoutResult(NetworkOutcome.PENDING, provider_reference=ref)
        answers_at = request.sent_at + self.delay_ms
        if now < answers_at:  # and it says when it will answer
            return PayoutResult(
                NetworkOutcome.PENDING, provider_reference=ref, check_after_ms=answers_at - now
            )
        if tail == PAYOUT_FAILS_AFTER_SENDING:
            return PayoutResult(
                NetworkOutcome.FAILED,
                provider_reference=ref,
                reason="The network could not confirm delivery to the recipient.",
            )
        return PayoutResult(NetworkOutcome.SUCCESS, provider_reference=ref)

    def money_moved(self, request: PayoutRequest) -> bool:
        # 21: refused, nothing moved. 22: the money reached the recipient although the network
        # reported a failure. 23: never confirmed; the lookup finds no transfer, so it is returned.
        return _tail(request.phone) not in (PAYOUT_REFUSED, PAYOUT_NEVER_CONFIRMED)
