"""The console's commands (``operator``, ``audit``, ``payout list``, ``webhook show``) and the CLI's text
output, run as real subprocesses on a SQLite file, as an operator would.

Merchant-supplied strings reach the terminal only as visible escapes: a payout whose recipient name is
``"Bob\\r\\nstatus: PAID"`` and whose merchant reference clears the screen prints neither a forged line
nor an escape sequence during ``payout reject``; ``--json`` prints the same strings exactly.
"""

from __future__ import annotations

import getpass
import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import pytest

from paymentcore import Config, PaymentCore, PayoutStatus, UnauthorizedError
from paymentcore.testing import CapturingSender, fund, public_resolver

FORGED_NAME = "Bob\r\nstatus: PAID"
SCREEN_CLEARING = "\x1b[2J\x1b[31mFAKE: approved\x07"
UNKNOWN_MERCHANT = "mer_000000000000000000000000"


def run_cli(db: Path, *args: str, as_json: bool = True) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "paymentcore_server", "--db", str(db), *args]
    if as_json:
        command.append("--json")
    return subprocess.run(command, capture_output=True, text=True, cwd=db.parent, timeout=60, check=False)


def ok(db: Path, *args: str) -> dict[str, Any]:
    done = run_cli(db, *args)
    assert done.returncode == 0 and done.stderr == "", (args, done.stdout, done.stderr)
    [line] = done.stdout.splitlines()
    value = json.loads(line, parse_float=Decimal)
    assert isinstance(value, dict)
    return value


def snapshot(db: Path) -> list[str]:
    connection = sqlite3.connect(db)
    try:
        return list(connection.iterdump())
    finally:
        connection.close()


@attrs.define
class Shop:
    db: Path
    core: PaymentCore
    merchant_id: str

    def payout(self, key: str, **extra: Any) -> str:
        fields: dict[str, Any] = {"amount": 6000, "currency": "XAF", "phone": "670000001", **extra}
        return self.core.disburse.create(self.merchant_id, idempotency_key=key, **fields).reference


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[Shop]:
    db = tmp_path / "pay.db"
    core = PaymentCore.sqlite(
        db,
        sender=CapturingSender(),
        resolver=public_resolver,
        config=Config(sandbox_delay=0, webhook_jitter=0.0),
    )
    merchant = core.operator.create_merchant("Kiosk")
    fund(core, merchant.id, "XAF", 100_000)
    core.operator.set_limits(merchant.id, "XAF", review_threshold="5000")
    try:
        yield Shop(db, core, merchant.id)
    finally:
        core.close()


def me() -> str:
    return f"cli:{getpass.getuser()}"


# --- operators --------------------------------------------------------------------------------------


def test_operator_create_prints_the_token_once_and_revoke_stops_it(shop: Shop) -> None:
    created = ok(shop.db, "operator", "create", "Ada Lovelace")
    assert set(created) == {"operatorId", "token"}
    signed = shop.core.operator.sign_in(created["token"])
    assert signed.session.operator.id == created["operatorId"]

    listed = ok(shop.db, "operator", "list")
    assert [o["name"] for o in listed["operators"]] == ["Ada Lovelace"]
    assert created["token"] not in json.dumps(listed)

    revoked = ok(shop.db, "operator", "revoke", created["operatorId"])
    assert (revoked["operatorId"], revoked["revoked"]) == (created["operatorId"], True)
    with pytest.raises(UnauthorizedError):
        shop.core.operator.sign_in(created["token"])
    with pytest.raises(UnauthorizedError):
        shop.core.operator.session(signed.secret)

    text = run_cli(shop.db, "operator", "create", "Grace", as_json=False)
    assert text.returncode == 0
    assert [line.split(": ")[0] for line in text.stdout.splitlines()] == ["operatorId", "token"]


def test_operator_commands_refuse_bad_input_and_change_nothing(shop: Shop) -> None:
    before = snapshot(shop.db)
    for args in (
        ("operator", "revoke", "op_nope"),
        ("operator", "create", ""),
        ("operator", "create", "a\x1bb"),
    ):
        done = run_cli(shop.db, *args)
        assert done.returncode == 1 and done.stdout == "", args
        [line] = done.stderr.splitlines()
        assert line.startswith("error: ") and "\x1b" not in line
    assert snapshot(shop.db) == before


# --- the audit trail --------------------------------------------------------------------------------


def test_cli_actions_are_audited_as_the_os_user_and_a_refused_one_writes_nothing(shop: Shop) -> None:
    ok(shop.db, "merchant", "suspend", shop.merchant_id)
    ok(shop.db, "merchant", "approve", shop.merchant_id)
    before = snapshot(shop.db)
    refused = run_cli(shop.db, "merchant", "suspend", UNKNOWN_MERCHANT)
    assert refused.returncode == 1
    assert snapshot(shop.db) == before  # no audit entry without its effect

    trail = ok(shop.db, "audit", "--record", shop.merchant_id)
    assert [(e["action"], e["actor"]) for e in trail["data"]] == [
        ("merchant.approve", me()),
        ("merchant.suspend", me()),
        ("limits.set", "library"),  # the fixture's library call, named by no one
        ("merchant.create", "library"),
    ]
    suspended = trail["data"][1]
    assert (suspended["before"]["status"], suspended["after"]["status"]) == ("APPROVED", "SUSPENDED")
    assert suspended["record"] == shop.merchant_id and suspended["at"].endswith("Z")

    first = ok(shop.db, "audit", "--limit", "1")
    assert first["hasMore"] is True and len(first["data"]) == 1
    following = ok(shop.db, "audit", "--limit", "1", "--starting-after", first["data"][0]["id"])
    assert following["data"][0]["id"] != first["data"][0]["id"]
    bad = run_cli(shop.db, "audit", "--starting-after", "aud_nope")
    assert bad.returncode == 1 and "starting_after" in bad.stderr
    assert run_cli(shop.db, "audit", "--limit", "0").returncode == 2


def test_payout_actions_from_the_cli_are_in_the_trail_with_the_payout_before_and_after(shop: Shop) -> None:
    reference = shop.payout("k1")
    ok(shop.db, "payout", "release", reference)
    [entry] = ok(shop.db, "audit", "--record", reference)["data"]
    assert (entry["action"], entry["actor"]) == ("payout.release", me())
    assert (entry["before"]["awaitingReview"], entry["after"]["awaitingReview"]) == (True, False)


# --- the lists --------------------------------------------------------------------------------------


def test_payout_list_shows_the_work_queues(shop: Shop) -> None:
    other = shop.core.operator.create_merchant("Other")
    fund(shop.core, other.id, "XAF", 100_000)
    shop.core.operator.set_limits(other.id, "XAF", review_threshold="5000")
    held = [shop.payout("k1"), shop.payout("k2")]
    theirs = shop.core.disburse.create(
        other.id, amount=7000, currency="XAF", phone="670000001", idempotency_key="o1"
    ).reference
    refused = shop.payout("k3", amount=1000, phone="670000021")
    shop.core.run_until_idle()
    assert shop.core.disburse.find(refused).status is PayoutStatus.FAILED

    review = ok(shop.db, "payout", "list", "--awaiting-review")
    assert [p["reference"] for p in review["data"]] == [*held, theirs]  # oldest first, every merchant
    assert {p["merchantId"] for p in review["data"]} == {shop.merchant_id, other.id}
    assert review["data"][0]["awaitingReview"] is True and review["data"][0]["amount"] == 6000
    mine = ok(shop.db, "payout", "list", "--awaiting-review", "--merchant", shop.merchant_id)
    assert [p["reference"] for p in mine["data"]] == held
    failed = ok(shop.db, "payout", "list", "--status", "FAILED", "--unresolved")
    assert [(p["reference"], p["resolution"]) for p in failed["data"]] == [(refused, None)]
    assert failed["data"][0]["statusReason"] == "The network refused the payout."
    page = ok(shop.db, "payout", "list", "--limit", "2")
    assert len(page["data"]) == 2 and page["hasMore"] is True

    ok(shop.db, "payout", "resolve", refused)
    assert ok(shop.db, "payout", "list", "--status", "FAILED", "--unresolved")["data"] == []
    assert run_cli(shop.db, "payout", "list", "--status", "LOST").returncode == 2
    assert run_cli(shop.db, "payout", "list", "--merchant", UNKNOWN_MERCHANT).returncode == 1


def test_webhook_show_prints_the_endpoint_and_its_recent_deliveries(shop: Shop) -> None:
    assert "No webhook endpoint" in run_cli(shop.db, "webhook", "show", shop.merchant_id).stderr
    shop.core.webhooks.register(shop.merchant_id, url="https://shop.example/hooks")
    sender = shop.core.deps.sender
    assert isinstance(sender, CapturingSender)
    sender.status = 500
    shop.payout("k1", amount=1000)  # not held: sent and paid by the worker, two events
    shop.core.run_until_idle()

    shown = ok(shop.db, "webhook", "show", shop.merchant_id)
    assert shown["url"] == "https://shop.example/hooks" and shown["isActive"] is True
    recent = shown["recentDeliveries"]
    assert [event["type"] for event in recent] == ["disburse.succeeded", "disburse.sent"]
    for event in recent:
        assert event["attempts"] >= 1 and event["lastAttempt"]["responseStatus"] == 500
        assert event["lastAttempt"]["error"] == "HTTP 500"
    assert run_cli(shop.db, "webhook", "show", UNKNOWN_MERCHANT).returncode == 1


# --- untrusted text ------------------------------------------------------------------------------------


def test_payout_reject_prints_merchant_text_as_visible_escapes_never_raw(shop: Shop) -> None:
    reference = shop.payout("k1", recipient_name=FORGED_NAME, merchant_reference=SCREEN_CLEARING)
    done = run_cli(shop.db, "payout", "reject", reference, as_json=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for raw in ("\x1b", "\x07", "\r"):
        assert raw not in out
    lines = out.splitlines()
    assert not any(line.startswith("status: PAID") for line in lines)  # no forged line
    assert "status: REJECTED" in lines
    assert "recipientName: Bob\\r\\nstatus: PAID" in lines
    assert "merchantReference: \\x1b[2J\\x1b[31mFAKE: approved\\x07" in lines
    assert all(": " in line for line in lines)  # one field a line

    listed = run_cli(shop.db, "audit", "--record", reference, as_json=False).stdout
    assert "\x1b" not in listed and "\r" not in listed and "\x07" not in listed


def test_json_output_keeps_merchant_text_exact(shop: Shop) -> None:
    reference = shop.payout(
        "k1", recipient_name=FORGED_NAME, merchant_reference=SCREEN_CLEARING + "\x9b\u202e"
    )
    done = run_cli(shop.db, "payout", "reject", reference)
    assert done.returncode == 0
    assert "\x1b" not in done.stdout and "\x9b" not in done.stdout and "\u202e" not in done.stdout
    record = json.loads(done.stdout)
    assert record["recipientName"] == FORGED_NAME
    assert record["merchantReference"] == SCREEN_CLEARING + "\x9b\u202e"
    [entry] = ok(shop.db, "audit", "--record", reference)["data"]
    assert entry["before"]["recipientName"] == FORGED_NAME
