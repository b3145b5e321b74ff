"""Commands: each state-changing, idempotent call of a service as a frozen value.

A command holds the arguments of its call as they were given (before any check), so two calls with the
same arguments are equal commands. Its idempotency :meth:`Command.fingerprint` is derived from its
fields, never written by hand: the class names the operation, each field is an argument of it.

The digest is the one stored since before commands existed (docs/decisions.md, "Idempotency"): the field
names are the argument names the old hand-written fingerprints used, so a record kept by an older
version replays. ``tests/unit/test_commands.py`` pins it.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, ClassVar

import attrs

from paymentcore._domain.models import BatchMode


def fingerprint(operation: str, arguments: Mapping[str, Any]) -> str:
    """A digest of the operation and its arguments, independent of their order.

    Numbers are written as ``str(Decimal)`` (scientific notation for huge exponents), never expanded,
    so a hostile number costs no more to fingerprint than its own text; an ``int`` is written as the
    equal ``Decimal`` is (``2500`` and ``Decimal("2500")`` are the same argument). A nested command is
    written as its own fingerprint, an enum as its value, a tuple as a list.
    """
    plain = {name: _plain(value) for name, value in arguments.items()}
    canonical = json.dumps(plain, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(f"{operation}\n{canonical}".encode()).hexdigest()


def _plain(value: object) -> object:
    if value is None or type(value) is str:  # most arguments: written as they are, no check further
        return value
    if isinstance(value, Command):
        return value.fingerprint()
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(Decimal(value))
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {name: _plain(item) for name, item in value.items()}
    return value  # text, None, a bool; json's default=str writes a Decimal (or anything else) as str()


@attrs.frozen
class Command:
    """A state-changing call: ``operation`` names it, the fields are its arguments."""

    operation: ClassVar[str]

    def fingerprint(self) -> str:
        """The idempotency fingerprint: the operation and every field, by name."""
        fields = attrs.fields(type(self))
        return fingerprint(self.operation, {field.name: getattr(self, field.name) for field in fields})


@attrs.frozen
class CreatePayout(Command):
    """``Disburse.create`` (and each item of a bulk request)."""

    operation = "disburse"

    amount: Decimal | int
    currency: str
    phone: str
    recipient_name: str | None = None
    provider: str | None = None
    country: str | None = None
    merchant_reference: str | None = None


@attrs.frozen
class CreateBulkPayouts(Command):
    """``Disburse.create_bulk``: the checked mode and the items, each as the payout it asks for."""

    operation = "disburse.bulk"

    mode: BatchMode
    items: tuple[CreatePayout, ...]


@attrs.frozen
class Charge(Command):
    """``Collect.charge``."""

    operation = "collect.charge"

    amount: Decimal | int
    currency: str
    country: str
    provider: str
    phone: str
    merchant_reference: str | None = None
    description: str | None = None


@attrs.frozen
class Checkout(Command):
    """``Collect.checkout``."""

    operation = "collect.checkout"

    amount: Decimal | int
    currency: str
    description: str | None = None
    merchant_reference: str | None = None
    expires_in_minutes: int | None = None


@attrs.frozen
class LegacyPayment(Checkout):
    """``Collect.legacy_payment``: a checkout of the legacy API (its ``reference`` is the
    ``merchant_reference``)."""

    operation = "collect.checkout.legacy"


@attrs.frozen
class RegisterWebhook(Command):
    """``Webhooks.register`` with current event names by default; ``events`` as given (None: default)."""

    operation = "webhook"

    url: str
    events: str | None = None


@attrs.frozen
class RegisterLegacyWebhook(RegisterWebhook):
    """``Webhooks.register(legacy=True)``: legacy event names unless ``events`` says otherwise."""

    operation = "webhook.legacy"


@attrs.frozen
class ResendEvent(Command):
    """``Webhooks.resend``: ``event`` is the event's id."""

    operation = "event.resend"

    event: str
