"""Every number a person types is checked against what the store can hold (issue 24, point 2).

The stores keep amounts as signed 64-bit integers of minor units. A value beyond that once reached them:
the console answered a plain-text 500 (or reset the connection) and the CLI printed a traceback. This
sweeps every numeric field of the console's forms and every numeric flag of the command line with
huge, negative, fractional and non-numeric values, on SQLite and PostgreSQL: the console shows the form
again with the values as typed and the reason (400, nothing changed), the CLI prints one ``error:`` line
and exits non-zero (nothing changed); the values a field does take are taken exactly, up to the largest
the store holds. The red team's own cases run against a real ``paymentcore serve`` and a real
``paymentcore`` command too.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
from test_console_http import Kit, kit_on  # type: ignore[import-not-found, unused-ignore]
from test_postgres_server import Serve  # type: ignore[import-not-found, unused-ignore]

from paymentcore import FakeClock, PaymentCore
from paymentcore_server.cli import build_parser, main

from conftest import HTTP_ENGINES, make_core, postgres_url  # type: ignore[import-not-found, unused-ignore]

INT64_MAX = 2**63 - 1
#: what a person might type where a number goes
TYPED = {
    "huge": "99999999999999999999",
    "int64+1": str(INT64_MAX + 1),
    "negative": "-5",
    "fraction": "1.5",
    "words": "abc",
    "exponent": "1e999999999",
    "nan": "NaN",
    "infinity": "Infinity",
}
SIGN_IN_CSRF = re.compile(r'name="csrf" value="([A-Za-z0-9_-]{43})"')
CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')


# --- the console -----------------------------------------------------------------------------------


@attrs.frozen
class Field:
    """A numeric field of a console form: where it posts, the other fields it goes with, and which of
    the TYPED values it takes."""

    name: str
    path: str  # with {m} for the merchant id and {k} for a key id
    others: tuple[tuple[str, str], ...] = ()
    takes: frozenset[str] = frozenset()

    def url(self, kit: Kit, key_id: str) -> str:
        return self.path.format(m=kit.merchant_id, k=key_id)


CONSOLE_FIELDS = [
    Field("percent", "/console/merchants/{m}/fee", takes=frozenset({"fraction"})),
    *(
        Field(name, "/console/merchants/{m}/limits", (("currency", "XAF"),))
        for name in ("per_transaction", "per_day", "per_week", "review_threshold")
    ),
    *(
        Field(name, "/console/merchants/{m}/keys", (("scope", "collect"),))
        for name in ("per_minute", "per_hour")
    ),
    *(Field(name, "/console/keys/{k}/rate-limit") for name in ("per_minute", "per_hour")),
]


@pytest.fixture(params=HTTP_ENGINES)
def kit(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Kit]:
    yield from kit_on(make_core(request.param, tmp_path, clock), clock)


def state(kit: Kit) -> tuple[Any, ...]:
    """What a console action could change: the trail, the merchant, its XAF limits and its keys."""
    op = kit.core.operator
    return (
        kit.trail(),
        op.get_merchant(kit.merchant_id),
        kit.core.disburse.limits(kit.merchant_id, "XAF"),
        op.keys(kit.merchant_id),
    )


def shows_the_form_again(page: str, url: str, field: str, typed: str) -> bool:
    """The page holds the form that posts to ``url``, with ``typed`` in its field ``field``."""
    value = html.escape(typed, quote=True)
    return f'action="{url}"' in page and bool(
        re.search(rf"<input[^>]*name='{field}'[^>]*value=\"{re.escape(value)}\"", page)
    )


@pytest.mark.parametrize("field", CONSOLE_FIELDS, ids=lambda f: f"{f.path.split('/')[-1]}-{f.name}")
def test_every_numeric_console_field_refuses_what_the_store_cannot_hold(kit: Kit, field: Field) -> None:
    csrf = kit.sign_in()
    key_id = kit.core.operator.keys(kit.merchant_id)[0].id
    url = field.url(kit, key_id)
    before = state(kit)
    for label, typed in TYPED.items():
        form = {"csrf": csrf, **dict(field.others), field.name: typed}
        for confirm in ({}, {"confirm": "yes"}):  # refused before the Confirm page, and on Confirm
            answer = kit.http.post(url, data={**form, **confirm}, follow_redirects=False)
            if label in field.takes:
                assert answer.status_code in (200, 303), (label, answer.text)
                continue
            assert answer.status_code == 400, (field, label, answer.status_code, answer.text[:300])
            assert answer.headers["content-type"].startswith("text/html")
            assert "<p class='error' role='alert'>" in answer.text, (field, label)
            assert shows_the_form_again(answer.text, url, field.name, typed), (field, label, answer.text)
        if label in field.takes:
            before = state(kit)  # taken: the next refusal must leave this
        else:
            assert state(kit) == before, (field, label)


def test_a_limit_up_to_the_largest_the_store_holds_is_set_exactly(kit: Kit) -> None:
    csrf = kit.sign_in()
    url = f"/console/merchants/{kit.merchant_id}/limits"
    done = kit.act(url, csrf, currency="XAF", per_day=str(INT64_MAX), per_week=str(INT64_MAX))
    assert done.status_code == 303, done.text
    limits = kit.core.disburse.limits(kit.merchant_id, "XAF")
    assert limits.per_day == limits.per_week == Decimal(INT64_MAX)
    refused = kit.http.post(url, data={"csrf": csrf, "currency": "XAF", "per_day": str(INT64_MAX + 1)})
    assert refused.status_code == 400
    assert f"Per day: A limit is at most {INT64_MAX} XAF" in refused.text


# --- the command line ------------------------------------------------------------------------------


@attrs.frozen
class Flag:
    """A numeric flag of a store-writing command: its argv with VALUE in place of the value."""

    argv: tuple[str, ...]
    takes: frozenset[str] = frozenset()

    def name(self) -> str:
        return " ".join(part for part in self.argv if part.startswith("--") and part != "--json")


CLI_FLAGS = [
    *(
        Flag(("key", "create", "M", "--scope", "collect", flag, "VALUE"))
        for flag in ("--per-minute", "--per-hour")
    ),
    *(Flag(("key", "rate-limit", "K", flag, "VALUE")) for flag in ("--per-minute", "--per-hour")),
    *(
        Flag(("limits", "set", "M", "XAF", flag, "VALUE"))
        for flag in ("--per-transaction", "--per-day", "--per-week", "--review-threshold")
    ),
    Flag(("merchant", "fee", "M", "--collect-percent", "VALUE"), takes=frozenset({"fraction"})),
    Flag(("payout", "list", "--limit", "VALUE")),
    Flag(("audit", "--limit", "VALUE")),
]


@attrs.define
class Shop:
    db: str
    merchant_id: str
    key_id: str

    def core(self) -> PaymentCore:
        if self.db.startswith("postgresql://"):
            return PaymentCore.postgresql(self.db, sender=None)
        return PaymentCore.sqlite(self.db, sender=None)

    def state(self) -> tuple[Any, ...]:
        core = self.core()
        try:
            return (
                [(e.actor, e.action, e.record) for e in core.operator.audit_log(limit=100).data],
                core.operator.get_merchant(self.merchant_id),
                core.disburse.limits(self.merchant_id, "XAF"),
                core.operator.keys(self.merchant_id),
            )
        finally:
            core.close()


@pytest.fixture(params=HTTP_ENGINES)
def shop(request: pytest.FixtureRequest, tmp_path: Path) -> Shop:
    db = postgres_url(tmp_path) if request.param == "postgres" else str(tmp_path / "cli.db")
    made = Shop(db, "", "")
    core = made.core()
    try:
        merchant = core.operator.create_merchant("Number Shop")
        key = core.operator.create_key(merchant.id, ["collect"])
    finally:
        core.close()
    return Shop(db, merchant.id, key.key.id)


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``paymentcore ARGV`` in this process: an exception escaping main is the traceback the red team
    saw, so it fails the test."""
    try:
        code = main(argv)
    except SystemExit as exited:  # a usage error: argparse exits with 2
        code = exited.code if isinstance(exited.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_refusal(code: int, out: str, err: str, context: object) -> None:
    assert code != 0 and out == "", (context, code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), (context, err)


@pytest.mark.parametrize("flag", CLI_FLAGS, ids=lambda f: f"{f.argv[0]}-{f.name()}")
def test_every_numeric_flag_of_a_command_refuses_in_one_line(
    shop: Shop, flag: Flag, capsys: pytest.CaptureFixture[str]
) -> None:
    before = shop.state()
    for label, typed in TYPED.items():
        argv = [
            {"M": shop.merchant_id, "K": shop.key_id, "VALUE": typed}.get(part, part) for part in flag.argv
        ]
        code, out, err = run_main(["--db", shop.db, *argv, "--json"], capsys)
        if label in flag.takes:
            assert code == 0, (flag, label, err)
            before = shop.state()
            continue
        assert_one_line_refusal(code, out, err, (flag.argv, label))
        assert shop.state() == before, (flag.argv, label)


#: each numeric flag of serve and worker: values refused beside TYPED's, and the TYPED values it takes
SERVER_FLAGS: dict[str, tuple[dict[str, str], frozenset[str]]] = {
    "--port": ({"past 65535": "70000", "zero": "0"}, frozenset()),
    "--metrics-port": ({"past 65535": "70000", "zero": "0"}, frozenset()),
    "--sandbox-delay": ({"past a day": "86401"}, frozenset({"fraction"})),
    "--sandbox-hang-seconds": ({"past a day": "86401"}, frozenset({"fraction"})),
    "--webhook-retry-delays": (
        {"past 30 days": "5,2592001", "a gap": "5,,x", "101 retries": ",".join(["1"] * 101)},
        frozenset(),
    ),
}


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (command, flag)
        for command in ("serve", "worker")
        for flag in sorted(SERVER_FLAGS)
        if not (command == "worker" and flag == "--port")  # the worker listens on no API port
    ],
)
def test_every_numeric_flag_of_serve_and_worker_is_checked_before_anything_starts(
    command: str, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = build_parser()
    extra, takes = SERVER_FLAGS[flag]
    for label, typed in {**TYPED, **extra}.items():
        if label in takes:
            parser.parse_args([command, flag, typed])
            continue
        with pytest.raises(SystemExit) as exited:
            parser.parse_args([command, flag, typed])
        out, err = capsys.readouterr()
        assert_one_line_refusal(int(str(exited.value.code)), out, err, (command, flag, label))
        assert flag in err


def test_serve_flags_take_what_they_document() -> None:
    args = build_parser().parse_args(
        ["serve", "--port", "8001", "--sandbox-delay", "0.5", "--webhook-retry-delays", "5,60,600"]
    )
    assert (args.port, args.sandbox_delay, args.webhook_retry_delays) == (8001, 0.5, (5, 60, 600))
    args = build_parser().parse_args(["worker", "--webhook-retry-delays", "none", "--sandbox-delay", "0"])
    assert (args.webhook_retry_delays, args.sandbox_delay) == ((), 0.0)
    args = build_parser().parse_args(
        ["worker", "--webhook-retry-delays", "0,2592000", "--sandbox-delay", "86400"]
    )
    assert (args.webhook_retry_delays, args.sandbox_delay) == ((0, 2_592_000), 86_400.0)


# --- the red team's cases, on the real commands ---------------------------------------------------


def test_limits_set_with_a_huge_value_prints_one_line_on_both_engines(shop: Shop, tmp_path: Path) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "paymentcore_server", "--db", shop.db),
            *("limits", "set", shop.merchant_id, "XAF", "--per-day", "99999999999999999999"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr.splitlines() == [
        f"error: AMOUNT_TOO_LARGE: A limit is at most {INT64_MAX} XAF, the most the store holds."
    ]


def test_the_served_console_shows_the_limits_form_again_for_values_past_64_bits(tmp_path: Path) -> None:
    db = tmp_path / "served.db"
    core = PaymentCore.sqlite(db, sender=None)
    try:
        merchant = core.operator.create_merchant("Served Shop")
        token = core.operator.create_operator("Red Team").token
    finally:
        core.close()
    server = Serve(str(db), tmp_path, "server")
    try:
        server.wait_ready()
        with httpx.Client(base_url=server.base, timeout=10) as http:
            found = SIGN_IN_CSRF.search(http.get("/console/sign-in").text)
            assert found
            signed = http.post("/console/sign-in", data={"token": token, "csrf": found.group(1)})
            assert signed.status_code == 303, signed.text
            review = http.get("/console/review")
            csrf = CSRF.search(review.text)
            assert csrf
            url = f"/console/merchants/{merchant.id}/limits"
            for typed in (str(INT64_MAX + 1), "99999999999999999999"):
                for confirm in ({}, {"confirm": "yes"}):
                    form = {"csrf": csrf.group(1), "currency": "XAF", "per_day": typed, **confirm}
                    answer = http.post(url, data=form)
                    assert answer.status_code == 400, answer.text
                    assert answer.headers["content-type"].startswith("text/html")
                    assert "x-request-id" in answer.headers
                    assert shows_the_form_again(answer.text, url, "per_day", typed)
    finally:
        server.stop()
    assert "Traceback" not in server.output(), server.output()
