"""The operator CLI (CONTRACT §2), run as a real subprocess on a SQLite file.

Every command is run with ``--json``: it must exit 0 and print exactly one JSON object. A refused
command must exit non-zero, print one line on stderr, nothing on stdout, and leave the database as it
was. Payouts, webhooks and funding are set up in-process on the same file; the in-process core, opened
before the CLI call, also proves that the CLI's changes are seen at once (as the server sees them).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest

from paymentcore import Config, PaymentCore, PayoutStatus
from paymentcore.errors import (
    CapabilityDisabledError,
    MerchantNotApprovedError,
    PayoutsNotConfiguredError,
    ProviderBlockedError,
    UnauthorizedError,
)
from paymentcore.testing import fund
from paymentcore_server._wire import allowance_json

from test_disburse_http import LIMIT_FIELDS

UNKNOWN_MERCHANT = "mer_000000000000000000000000"


# --- helpers ---------------------------------------------------------------------------------------


def console_script() -> str:
    found = shutil.which("paymentcore")
    assert found is not None, "the `paymentcore` console script is not on PATH"
    return found


def run_cli(
    db: Path, *args: str, as_json: bool = True, script: bool = False
) -> subprocess.CompletedProcess[str]:
    command = [console_script()] if script else [sys.executable, "-m", "paymentcore_server"]
    command += ["--db", str(db), *args]
    if as_json:
        command.append("--json")
    return subprocess.run(command, capture_output=True, text=True, cwd=db.parent, timeout=60, check=False)


def ok(db: Path, *args: str, script: bool = False) -> dict[str, Any]:
    """Run a command with --json: exit 0, nothing on stderr, exactly one JSON object on stdout."""
    done = run_cli(db, *args, script=script)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    assert done.stderr == "", (args, done.stderr)
    lines = done.stdout.splitlines()
    assert len(lines) == 1, (args, done.stdout)
    value = json.loads(lines[0], parse_float=Decimal)
    assert isinstance(value, dict), (args, done.stdout)
    return value


def ok_text(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = run_cli(db, *args, as_json=False)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def refused(db: Path, *args: str) -> str:
    """Run a command that must be refused: non-zero exit, one line on stderr, nothing printed, no change."""
    before = snapshot(db)
    done = run_cli(db, *args)
    assert done.returncode != 0, (args, done.stdout)
    assert done.stdout == "", (args, done.stdout)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), (args, done.stderr)
    assert snapshot(db) == before, f"{args} changed the database"
    return lines[0]


def snapshot(db: Path) -> list[str]:
    """Every row of every table, as SQL text: equal snapshots mean nothing changed."""
    connection = sqlite3.connect(db)
    try:
        return list(connection.iterdump())
    finally:
        connection.close()


def money(value: object) -> Decimal:
    """A money amount as printed: a decimal string or a JSON number."""
    assert isinstance(value, str | int | Decimal) and not isinstance(value, bool), value
    return Decimal(str(value))


def balances(db: Path, merchant_id: str) -> dict[str, tuple[Decimal, Decimal]]:
    record = ok(db, "balance", merchant_id)
    result: dict[str, tuple[Decimal, Decimal]] = {}
    for entry in record["balances"]:
        assert set(entry) >= {"currency", "available", "reserved"}, entry
        result[entry["currency"]] = (money(entry["available"]), money(entry["reserved"]))
    return result


def in_process_balances(core: PaymentCore, merchant_id: str) -> dict[str, tuple[Decimal, Decimal]]:
    return {b.currency: (b.available, b.reserved) for b in core.operator.balances(merchant_id)}


def open_core(db: Path, **config: Any) -> PaymentCore:
    return PaymentCore.sqlite(db, sender=None, config=Config(sandbox_delay=0, **config))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "cli.db"


@pytest.fixture
def core(db: Path) -> Iterator[PaymentCore]:
    """An in-process core on the CLI's database, opened before any CLI call."""
    opened = open_core(db)
    yield opened
    opened.close()


def new_payout(core: PaymentCore, merchant_id: str, amount: int, phone: str, key: str) -> str:
    payout = core.disburse.create(
        merchant_id, amount=amount, currency="XAF", phone=phone, idempotency_key=key
    )
    return payout.reference


# --- merchants -------------------------------------------------------------------------------------


def test_merchant_commands(db: Path, core: PaymentCore) -> None:
    created = ok(db, "merchant", "create", "Corner Shop", "--settlement-currency", "XAF")
    mid = created["merchantId"]
    assert isinstance(mid, str) and mid
    merchant = core.operator.get_merchant(mid)
    assert (merchant.name, merchant.settlement_currency, merchant.approved) == ("Corner Shop", "XAF", True)

    xof = ok(db, "merchant", "create", "Dakar Shop", "--settlement-currency", "XOF", "--not-approved")
    waiting = core.operator.get_merchant(xof["merchantId"])
    assert (waiting.settlement_currency, waiting.approved) == ("XOF", False)

    # a merchant created not approved cannot pay out until approved
    pending = ok(db, "merchant", "create", "Waiting Shop", "--not-approved")["merchantId"]
    fund(core, pending, "XAF", 10000)
    with pytest.raises(MerchantNotApprovedError):
        new_payout(core, pending, 100, "670000001", "idem-not-approved")
    approved = ok(db, "merchant", "approve", pending)
    assert approved["merchantId"] == pending
    assert approved["approved"] is True
    assert approved["status"] == "APPROVED"
    new_payout(core, pending, 100, "670000001", "idem-approved")

    suspended = ok(db, "merchant", "suspend", pending)
    assert suspended["merchantId"] == pending
    assert suspended["approved"] is False
    assert suspended["status"] == "SUSPENDED"
    with pytest.raises(MerchantNotApprovedError):
        new_payout(core, pending, 100, "670000001", "idem-suspended")

    disabled = ok(db, "merchant", "payouts", "disable", mid)
    assert disabled["merchantId"] == mid
    assert disabled["payoutsEnabled"] is False
    limits = core.disburse.limits(mid, "XAF")
    assert (limits.enabled, limits.blocked_by) == (False, "ACCOUNT_DISABLED")
    with pytest.raises(PayoutsNotConfiguredError):
        new_payout(core, mid, 100, "670000001", "idem-disabled")
    enabled = ok(db, "merchant", "payouts", "enable", mid)
    assert enabled["payoutsEnabled"] is True
    assert core.disburse.limits(mid, "XAF").blocked_by is None

    fee = ok(db, "merchant", "fee", mid, "--collect-percent", "2.5")
    assert fee["merchantId"] == mid
    assert money(fee["collectFeePercent"]) == Decimal("2.5")
    assert core.operator.get_merchant(mid).collect_fee_ppm == 25_000


# --- keys ------------------------------------------------------------------------------------------


def test_key_commands_take_effect_at_once(db: Path, core: PaymentCore) -> None:
    mid = core.operator.create_merchant("Key Shop").id

    scopes = ("--scope", "collect", "--scope", "disburse")
    created = ok(db, "key", "create", mid, *scopes, "--per-minute", "5", "--per-hour", "100")
    key_id, api_key = created["keyId"], created["apiKey"]
    assert isinstance(key_id, str) and key_id
    assert isinstance(api_key, str) and api_key
    assert sorted(created["scopes"]) == ["collect", "disburse"]
    principal = core.access.authenticate(api_key)
    assert (principal.key.id, principal.merchant.id) == (key_id, mid)
    assert (principal.key.per_minute, principal.key.per_hour) == (5, 100)

    single = ok(db, "key", "create", mid, "--scope", "collect")
    assert single["scopes"] == ["collect"]
    assert single["keyId"] != key_id and single["apiKey"] != api_key
    assert core.access.authenticate(single["apiKey"]).key.per_minute == core.config.default_per_minute

    done = run_cli(db, "key", "rate-limit", key_id, "--per-minute", "500", "--per-hour", "9000")
    assert done.returncode == 0, done.stderr
    assert api_key not in done.stdout
    raised = json.loads(done.stdout)
    assert raised["keyId"] == key_id
    assert (raised["perMinute"], raised["perHour"]) == (500, 9000)
    assert core.access.authenticate(api_key).key.per_minute == 500
    assert core.access.authenticate(api_key).key.per_hour == 9000

    # the same commands through the installed console script
    lowered = ok(db, "key", "rate-limit", key_id, "--per-minute", "2", script=True)
    assert (lowered["perMinute"], lowered["perHour"]) == (2, 9000)
    assert core.access.authenticate(api_key).key.per_minute == 2

    done = run_cli(db, "key", "revoke", key_id, script=True)
    assert done.returncode == 0, done.stderr
    assert api_key not in done.stdout
    revoked = json.loads(done.stdout)
    assert revoked["keyId"] == key_id
    assert revoked["revoked"] is True
    with pytest.raises(UnauthorizedError):
        core.access.authenticate(api_key)
    # the other key of the merchant is untouched
    assert core.access.authenticate(single["apiKey"]).key.id == single["keyId"]


# --- limits ----------------------------------------------------------------------------------------


def test_limits_set_and_clear(db: Path, core: PaymentCore) -> None:
    mid = core.operator.create_merchant("Limits Shop").id

    flags = ("--per-transaction", "5000", "--per-day", "20000", "--per-week", "none")
    record = ok(db, "limits", "set", mid, "XAF", *flags, "--review-threshold", "3000")
    assert set(record) >= LIMIT_FIELDS, record
    assert record["currency"] == "XAF"
    assert (record["enabled"], record["platformEnabled"], record["configured"]) == (True, True, True)
    assert (record["blockedBy"], record["message"]) == (None, None)
    assert money(record["perTransaction"]) == 5000
    assert money(record["perDay"]) == 20000
    assert record["perWeek"] is None
    assert money(record["reviewThreshold"]) == 3000
    assert money(record["spentToday"]) == 0
    assert money(record["spentThisWeek"]) == 0
    assert money(record["remainingToday"]) == 20000
    assert record["remainingThisWeek"] is None
    assert allowance_json(core.disburse.limits(mid, "XAF")) == record

    # only the flags given change; `none` clears one
    cleared = ok(db, "limits", "set", mid, "XAF", "--per-day", "none", "--per-week", "60000")
    assert set(cleared) >= LIMIT_FIELDS
    assert cleared["perDay"] is None and cleared["remainingToday"] is None
    assert money(cleared["perWeek"]) == 60000
    assert money(cleared["remainingThisWeek"]) == 60000
    assert money(cleared["perTransaction"]) == 5000
    assert money(cleared["reviewThreshold"]) == 3000

    # the limits apply to the next payout at once
    fund(core, mid, "XAF", 100000)
    held = new_payout(core, mid, 4000, "670000001", "idem-held")
    assert core.disburse.find(held).awaiting_review is True
    spent = ok(db, "limits", "set", mid, "XAF", "--review-threshold", "none")
    assert spent["reviewThreshold"] is None
    assert money(spent["spentThisWeek"]) == 4000
    assert money(spent["remainingThisWeek"]) == 56000


# --- payouts ---------------------------------------------------------------------------------------


def test_payout_release_reject_resolve(db: Path, core: PaymentCore) -> None:
    mid = core.operator.create_merchant("Payout Shop").id
    fund(core, mid, "XAF", 100000)
    ok(db, "limits", "set", mid, "XAF", "--review-threshold", "3000")
    to_release = new_payout(core, mid, 4000, "670000001", "idem-release")
    to_reject = new_payout(core, mid, 4000, "670000002", "idem-reject")
    refused_by_network = new_payout(core, mid, 1000, "670000021", "idem-21")
    moved_anyway = new_payout(core, mid, 1000, "670000022", "idem-22")
    core.run_until_idle()
    for held in (to_release, to_reject):
        payout = core.disburse.find(held)
        assert (payout.status, payout.awaiting_review) == (PayoutStatus.PENDING, True)
    assert core.disburse.find(refused_by_network).status is PayoutStatus.FAILED
    assert core.disburse.find(moved_anyway).status is PayoutStatus.FAILED
    assert balances(db, mid) == {"XAF": (Decimal(90000), Decimal(10000))}

    released = ok(db, "payout", "release", to_release)
    assert released["reference"] == to_release
    assert released["status"] in ("SENT", "PAID")
    assert released["awaitingReview"] is False
    reserved = Decimal(6000) if released["status"] == "PAID" else Decimal(10000)
    assert in_process_balances(core, mid) == {"XAF": (Decimal(90000), reserved)}

    rejected = ok(db, "payout", "reject", to_reject)
    assert rejected["reference"] == to_reject
    assert rejected["status"] == "REJECTED"
    assert rejected["awaitingReview"] is False
    reserved -= 4000
    assert in_process_balances(core, mid) == {"XAF": (Decimal(94000), reserved)}

    resolved_21 = ok(db, "payout", "resolve", refused_by_network)
    assert resolved_21["reference"] == refused_by_network
    assert resolved_21["status"] == "FAILED"
    reserved -= 1000
    assert in_process_balances(core, mid) == {"XAF": (Decimal(95000), reserved)}

    resolved_22 = ok(db, "payout", "resolve", moved_anyway)
    assert resolved_22["reference"] == moved_anyway
    assert resolved_22["status"] == "PAID"
    reserved -= 1000
    assert balances(db, mid) == {"XAF": (Decimal(95000), reserved)}

    # a second decision on any of them is refused and changes nothing (`refused` compares the database)
    for action, reference in (
        ("reject", to_release),
        ("release", to_reject),
        ("resolve", refused_by_network),
        ("resolve", moved_anyway),
    ):
        refused(db, "payout", action, reference)
    assert in_process_balances(core, mid) == {"XAF": (Decimal(95000), reserved)}
    assert core.disburse.find(to_reject).status is PayoutStatus.REJECTED
    assert core.disburse.find(refused_by_network).status is PayoutStatus.FAILED
    assert core.disburse.find(moved_anyway).status is PayoutStatus.PAID


# --- webhooks --------------------------------------------------------------------------------------


def test_webhook_reactivate_keeps_the_secret(db: Path) -> None:
    core = open_core(db, allow_private_webhooks=True)
    try:
        mid = core.operator.create_merchant("Hook Shop").id
        core.webhooks.register(mid, url="http://127.0.0.1:9/x")
        secret = core.webhooks.secret_of(mid)
        with core.store.transaction() as tx:  # as if auto-disabled after failed deliveries
            endpoint = tx.webhooks.get(mid)
            assert endpoint is not None
            tx.webhooks.put(
                attrs.evolve(
                    endpoint, is_active=False, disabled_reason="Too many failures.", consecutive_failures=10
                )
            )

        record = ok(db, "webhook", "reactivate", mid)
        assert record["isActive"] is True
        assert record["url"] == "http://127.0.0.1:9/x"
        assert record.get("disabledReason") is None
        assert secret not in json.dumps(record)
        with core.store.read() as tx:
            endpoint = tx.webhooks.get(mid)
        assert endpoint is not None
        assert (endpoint.is_active, endpoint.disabled_reason) == (True, None)
        assert endpoint.consecutive_failures == 0
        assert core.webhooks.secret_of(mid) == secret
    finally:
        core.close()


# --- platform, currency and provider switches, balances --------------------------------------------


def test_switches_and_provider_blocks(db: Path, core: PaymentCore) -> None:
    mid = core.operator.create_merchant("Switch Shop").id
    api_key = core.operator.create_key(mid, ["disburse"]).api_key
    fund(core, mid, "XAF", 10000)

    off = ok(db, "platform", "payouts", "disable")
    assert off == {"apiEnabled": True, "payoutsEnabled": False, "closedCurrencies": []}
    assert core.disburse.limits(mid, "XAF").blocked_by == "PLATFORM"
    with pytest.raises(CapabilityDisabledError):
        new_payout(core, mid, 100, "670000001", "idem-platform-off")
    on = ok(db, "platform", "payouts", "enable")
    assert on["payoutsEnabled"] is True
    assert core.disburse.limits(mid, "XAF").blocked_by is None

    api_off = ok(db, "platform", "api", "disable")
    assert api_off["apiEnabled"] is False
    with pytest.raises(CapabilityDisabledError):
        core.access.authenticate(api_key)
    api_on = ok(db, "platform", "api", "enable")
    assert api_on["apiEnabled"] is True
    assert core.access.authenticate(api_key).merchant.id == mid

    closed = ok(db, "currency", "payouts", "close", "XAF")
    assert closed["closedCurrencies"] == ["XAF"]
    assert core.disburse.limits(mid, "XAF").blocked_by == "CURRENCY_CLOSED"
    reopened = ok(db, "currency", "payouts", "open", "XAF")
    assert reopened == {"apiEnabled": True, "payoutsEnabled": True, "closedCurrencies": []}

    blocked = ok(db, "provider", "block", mid, "mtn_cm")
    assert blocked["providerCode"] == "mtn_cm"
    assert blocked["country"] == "CM"
    assert isinstance(blocked["method"], str) and blocked["method"]
    assert (blocked["available"], blocked["reason"]) == (False, "restricted")
    with pytest.raises(ProviderBlockedError):
        new_payout(core, mid, 100, "670000001", "idem-blocked")
    new_payout(core, mid, 100, "690000001", "idem-orange")  # other providers still work
    unblocked = ok(db, "provider", "unblock", mid, "mtn_cm")
    assert {k: unblocked[k] for k in ("providerCode", "available", "reason")} == {
        "providerCode": "mtn_cm",
        "available": True,
        "reason": None,
    }
    assert unblocked["method"] == blocked["method"]
    new_payout(core, mid, 100, "670000001", "idem-unblocked")


def test_balance_lists_every_currency(db: Path, core: PaymentCore) -> None:
    mid = core.operator.create_merchant("Two Currency Shop").id
    assert ok(db, "balance", mid)["balances"] == []
    fund(core, mid, "XAF", 100000)
    fund(core, mid, "XOF", 2500)
    new_payout(core, mid, 1500, "670000023", "idem-sent")  # stays SENT: money reserved
    core.run_until_idle()
    assert balances(db, mid) == {
        "XAF": (Decimal(98500), Decimal(1500)),
        "XOF": (Decimal(2500), Decimal(0)),
    }


# --- refusals --------------------------------------------------------------------------------------

REFUSALS: list[tuple[str, list[str]]] = [
    ("approve-unknown-merchant", ["merchant", "approve", UNKNOWN_MERCHANT]),
    ("fee-unknown-merchant", ["merchant", "fee", UNKNOWN_MERCHANT, "--collect-percent", "1"]),
    ("key-unknown-merchant", ["key", "create", UNKNOWN_MERCHANT, "--scope", "collect"]),
    ("limits-unknown-merchant", ["limits", "set", UNKNOWN_MERCHANT, "XAF", "--per-day", "100"]),
    ("provider-unknown-merchant", ["provider", "block", UNKNOWN_MERCHANT, "mtn_cm"]),
    ("balance-unknown-merchant", ["balance", UNKNOWN_MERCHANT]),
    ("webhook-unknown-merchant", ["webhook", "reactivate", UNKNOWN_MERCHANT]),
    ("webhook-none-registered", ["webhook", "reactivate", "{M}"]),
    ("revoke-unknown-key", ["key", "revoke", "key_000000000000000000000000"]),
    ("rate-limit-zero", ["key", "rate-limit", "{K}", "--per-minute", "0"]),
    ("merchant-bad-currency", ["merchant", "create", "Bad Shop", "--settlement-currency", "ZZZ"]),
    ("merchant-blank-name", ["merchant", "create", "   "]),
    ("fee-not-a-number", ["merchant", "fee", "{M}", "--collect-percent", "abc"]),
    ("limits-bad-currency", ["limits", "set", "{M}", "ZZZ", "--per-day", "100"]),
    ("limits-bad-amount", ["limits", "set", "{M}", "XAF", "--per-day", "abc"]),
    ("currency-bad-code", ["currency", "payouts", "close", "ZZZ"]),
    ("provider-unknown", ["provider", "block", "{M}", "no_such_provider"]),
    ("release-unknown-payout", ["payout", "release", "PO_UNKNOWN"]),
    # usage errors found by the argument parser are refused the same way: one line, nothing changed
    ("key-bad-scope", ["key", "create", "{M}", "--scope", "admin"]),
    ("rate-limit-not-a-number", ["key", "rate-limit", "{K}", "--per-minute", "abc"]),
]


@pytest.mark.parametrize("args", [pytest.param(args, id=name) for name, args in REFUSALS])
def test_refused_commands_change_nothing(db: Path, args: list[str]) -> None:
    core = open_core(db)
    try:
        mid = core.operator.create_merchant("Refusal Shop").id
        key_id = core.operator.create_key(mid, ["collect"]).key.id
    finally:
        core.close()
    line = refused(db, *(arg.replace("{M}", mid).replace("{K}", key_id) for arg in args))
    assert "Traceback" not in line


# --- without --json --------------------------------------------------------------------------------


def test_commands_without_json_print_text(db: Path, core: PaymentCore) -> None:
    created = ok_text(db, "merchant", "create", "Plain Shop")
    assert created.stderr == ""
    assert not created.stdout.lstrip().startswith("{")
    assert "Plain Shop" in created.stdout
    [merchant] = [m for m in core.operator.list_merchants() if m.name == "Plain Shop"]
    assert merchant.id in created.stdout

    key = ok_text(db, "key", "create", merchant.id, "--scope", "disburse")
    assert not key.stdout.lstrip().startswith("{")
    [secret] = [word for word in key.stdout.split() if core_accepts(core, word)]
    assert core.access.authenticate(secret).merchant.id == merchant.id

    fund(core, merchant.id, "XAF", 700)
    shown = ok_text(db, "balance", merchant.id)
    assert not shown.stdout.lstrip().startswith("{")
    assert "XAF" in shown.stdout and "700" in shown.stdout


def core_accepts(core: PaymentCore, token: str) -> bool:
    try:
        core.access.authenticate(token)
    except UnauthorizedError:
        return False
    return True
