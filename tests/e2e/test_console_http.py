"""The operator's console over HTTP (Starlette's test client), on SQLite and PostgreSQL.

Sign-in and its cookie, sessions that end, pages that show nothing without a session, actions that take
one confirmation and a CSRF token, the audit trail they write as the operator, and merchant-supplied
text that stays text. The same flows in a real browser are in ``test_console_browser.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import attrs
import pytest
from starlette.testclient import TestClient

from paymentcore import FakeClock, PaymentCore, PayoutStatus, wire
from paymentcore.testing import fund
from paymentcore_server.app import create_app
from paymentcore_server.console import COOKIE, SIGN_IN_COOKIE

from conftest import make_core  # type: ignore[import-not-found, unused-ignore]

ENGINES = ["sqlite", "postgres"]
HOSTILE_NAME = "<img src=x onerror=alert(1)>"
FORGED_NAME = "Bob\r\nstatus: PAID"
SCREEN_CLEARING = "\x1b[2J\x1b[31mFAKE: approved\x07"
CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')
SIGN_IN_CSRF = re.compile(r'name="csrf" value="([A-Za-z0-9_-]{43})"')


def set_cookie(answer: Any, name: str) -> Any:
    """The answer's Set-Cookie header for ``name``, parsed (a Morsel)."""
    [header] = [value for value in answer.headers.get_list("set-cookie") if value.startswith(f"{name}=")]
    return SimpleCookie(header)[name]


def post_sign_in(client: TestClient, token: str, **fields: str) -> Any:
    """Sign in as a browser does: the form first (it sets its own token, in a cookie and a field), then
    its POST."""
    form = client.get("/console/sign-in")
    found = SIGN_IN_CSRF.search(form.text)
    assert found, form.text
    data = {"token": token, "csrf": found.group(1), **fields}
    return client.post("/console/sign-in", data=data, follow_redirects=False)


@attrs.define
class Kit:
    """A core with a funded merchant whose payouts above 5,000 XAF wait for review, an operator, and the
    app on Starlette's test client."""

    core: PaymentCore
    clock: FakeClock
    http: TestClient
    merchant_id: str
    disburse_key: str
    token: str
    operator_id: str
    held: int = 0

    def sign_in(self, http: TestClient | None = None) -> str:
        """Sign in on ``http`` (default: the kit's client); returns the session's CSRF token."""
        client = http or self.http
        answer = post_sign_in(client, self.token)
        assert answer.status_code == 303, answer.text
        return csrf_of(client.get("/console/review").text)

    def payout(self, *, amount: int = 6000, phone: str = "670000001", **extra: Any) -> str:
        self.held += 1
        body = {"amount": amount, "currency": "XAF", "phone": phone, **extra}
        answer = self.http.post(
            "/v1/disburse",
            content=wire.dumps(body),
            headers={
                "Authorization": f"Bearer {self.disburse_key}",
                "Idempotency-Key": f"k-{self.held}",
                "Content-Type": "application/json",
            },
        )
        assert answer.status_code == 201, answer.text
        reference: str = answer.json()["reference"]
        return reference

    def api(self, path: str) -> Any:
        answer = self.http.get(path, headers={"Authorization": f"Bearer {self.disburse_key}"})
        assert answer.status_code == 200, answer.text
        return answer.json()

    def available(self) -> Decimal:
        [balance] = self.api("/v1/account/balances")["balances"]
        return Decimal(str(balance["available"]))

    def act(self, path: str, csrf: str, **fields: str | list[str]) -> Any:
        """An action with its one confirmation: the first POST shows the Confirm page and changes nothing,
        the second (with confirm=yes, as the Confirm button sends) does it."""
        form = {"csrf": csrf, **fields}
        asked = self.http.post(path, data=form, follow_redirects=False)
        assert asked.status_code == 200, asked.text
        assert "<button type='submit'" in asked.text and ">Confirm</button>" in asked.text
        return self.http.post(path, data={**form, "confirm": "yes"}, follow_redirects=False)

    def trail(self) -> list[tuple[str, str, str]]:
        return [(e.actor, e.action, e.record) for e in self.core.operator.audit_log(limit=100).data]


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found, "no CSRF token on the page"
    return found.group(1)


def kit_on(core: PaymentCore, clock: FakeClock) -> Iterator[Kit]:
    merchant = core.operator.create_merchant("Test Shop", settlement_currency="XAF")
    fund(core, merchant.id, "XAF", 1_000_000)
    core.operator.set_limits(merchant.id, "XAF", review_threshold="5000")
    disburse = core.operator.create_key(merchant.id, ["disburse"], per_minute=1000, per_hour=10_000)
    operator = core.operator.create_operator("Ada Lovelace")
    with TestClient(create_app(core), raise_server_exceptions=False) as http:
        yield Kit(core, clock, http, merchant.id, disburse.api_key, operator.token, operator.operator.id)
    core.close()


@pytest.fixture(params=ENGINES)
def kit(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Kit]:
    yield from kit_on(make_core(request.param, tmp_path, clock), clock)


@pytest.fixture
def sqlite_kit(tmp_path: Path, clock: FakeClock) -> Iterator[Kit]:
    yield from kit_on(make_core("sqlite", tmp_path, clock), clock)


def pages(kit: Kit, reference: str) -> list[str]:
    m = kit.merchant_id
    return [
        "/console",
        "/console/review",
        "/console/failed",
        f"/console/payouts/{reference}",
        "/console/merchants",
        f"/console/merchants/{m}",
        f"/console/merchants/{m}/keys",
        "/console/keys",
        "/console/webhooks",
        "/console/platform",
        f"/console/audit?record={m}",
    ]


def actions(kit: Kit, reference: str, key_id: str) -> list[str]:
    m = kit.merchant_id
    return [
        f"/console/payouts/{reference}/release",
        f"/console/payouts/{reference}/reject",
        f"/console/payouts/{reference}/resolve",
        "/console/merchants",
        f"/console/merchants/{m}/suspend",
        f"/console/merchants/{m}/payouts-off",
        f"/console/merchants/{m}/fee",
        f"/console/merchants/{m}/limits",
        f"/console/merchants/{m}/keys",
        f"/console/keys/{key_id}/revoke",
        f"/console/keys/{key_id}/rate-limit",
        f"/console/webhooks/{m}/reactivate",
        "/console/platform/api-off",
        "/console/platform/payouts-off",
        "/console/currencies/XAF/close",
    ]


# --- sign-in, the session and its cookie ------------------------------------------------------------


def test_without_a_session_every_page_and_action_redirects_to_sign_in_and_shows_no_data(kit: Kit) -> None:
    reference = kit.payout(recipientName="Secret Recipient")
    key_id = kit.core.operator.keys(kit.merchant_id)[0].id
    trail = kit.trail()
    for path in pages(kit, reference):
        answer = kit.http.get(path, follow_redirects=False)
        assert answer.status_code == 303, path
        assert answer.headers["location"].startswith("/console/sign-in"), path
        for secret in (reference, kit.merchant_id, "Test Shop", "Secret Recipient"):
            assert secret not in answer.text
    for path in actions(kit, reference, key_id):
        answer = kit.http.post(path, data={"csrf": "0" * 64, "confirm": "yes"}, follow_redirects=False)
        assert (answer.status_code, answer.headers["location"]) == (303, "/console/sign-in"), path
    shown = kit.http.get("/console/review")  # following the redirect: the sign-in page
    assert shown.status_code == 200 and "for='token'>Token</label>" in shown.text
    assert ">Sign in</button>" in shown.text
    assert kit.trail() == trail
    assert kit.core.disburse.find(reference).awaiting_review
    assert kit.core.operator.settings().api_enabled


def test_sign_in_sets_an_http_only_strict_cookie_scoped_to_the_console(kit: Kit) -> None:
    answer = post_sign_in(kit.http, kit.token)
    assert (answer.status_code, answer.headers["location"]) == (303, "/console")  # the overview
    cookie = set_cookie(answer, COOKIE)
    assert cookie["httponly"] is True
    assert cookie["samesite"].lower() == "strict"
    assert cookie["path"] == "/console"
    assert not cookie["secure"]  # the public URL is http
    assert cookie.value.startswith("pcs_") and cookie.value != kit.token
    page = kit.http.get("/console/review")
    assert page.status_code == 200 and "Signed in as <bdi>Ada Lovelace</bdi>" in page.text


def test_the_cookie_is_secure_when_the_public_url_is_https(tmp_path: Path, clock: FakeClock) -> None:
    core = make_core("sqlite", tmp_path, clock, public_url="https://pay.example.com")
    token = core.operator.create_operator("Ada").token
    try:
        with TestClient(create_app(core), base_url="https://pay.example.com") as http:
            answer = post_sign_in(http, token)
            assert answer.status_code == 303
            assert set_cookie(answer, COOKIE)["secure"] is True
    finally:
        core.close()


def test_a_wrong_token_is_refused_without_saying_whether_an_operator_exists(kit: Kit) -> None:
    merchant_key = kit.core.operator.create_key(kit.merchant_id, ["collect"]).api_key
    revoked = kit.core.operator.create_operator("Gone")
    kit.core.operator.revoke_operator(revoked.operator.id)
    bodies = set()
    for wrong in ("", "nope", "pco_" + "A" * 43, merchant_key, revoked.token, kit.token + "x"):
        answer = post_sign_in(kit.http, wrong)
        assert answer.status_code == 401
        assert "That token is not valid." in answer.text
        assert not any(v.startswith(f"{COOKIE}=") for v in answer.headers.get_list("set-cookie"))
        bodies.add(answer.text)
    assert len(bodies) == 1  # the same page whatever was wrong


def test_an_api_key_does_not_open_the_console_and_a_session_does_not_open_the_api(kit: Kit) -> None:
    bearer = {"Authorization": f"Bearer {kit.disburse_key}"}
    answer = kit.http.get("/console/review", headers=bearer, follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"].startswith("/console/sign-in")

    kit.sign_in()
    secret = kit.http.cookies[COOKIE]
    api = kit.http.get("/v1/account/balances")  # no Authorization: the cookie is not sent there, nor read
    assert api.status_code == 401 and api.json()["code"] == "UNAUTHORIZED"
    api = kit.http.get("/v1/account/balances", headers={"Cookie": f"{COOKIE}={secret}"})
    assert api.status_code == 401
    api = kit.http.get("/v1/account/balances", headers={"Authorization": f"Bearer {secret}"})
    assert api.status_code == 401


def test_a_session_ends_after_thirty_minutes_unused_and_sign_out_ends_it_at_once(kit: Kit) -> None:
    kit.sign_in()
    kit.clock.advance(25 * 60)
    assert kit.http.get("/console/review", follow_redirects=False).status_code == 200  # and kept alive
    kit.clock.advance(25 * 60)
    assert kit.http.get("/console/review", follow_redirects=False).status_code == 200
    kit.clock.advance(31 * 60)
    ended = kit.http.get("/console/merchants", follow_redirects=False)
    assert ended.status_code == 303
    assert ended.headers["location"] == "/console/sign-in?next=%2Fconsole%2Fmerchants"
    assert f'{COOKIE}=""' in ended.headers["set-cookie"] or "Max-Age=0" in ended.headers["set-cookie"]

    csrf = kit.sign_in()
    secret = kit.http.cookies[COOKIE]
    out = kit.http.post("/console/sign-out", data={"csrf": csrf}, follow_redirects=False)
    assert out.status_code == 200 and "You are signed out." in out.text
    kit.http.cookies.set(COOKIE, secret, path="/console")  # the old cookie, kept by an attacker
    assert kit.http.get("/console/review", follow_redirects=False).status_code == 303
    actions = [action for _, action, record in kit.trail() if record == kit.operator_id]
    assert actions[:2] == ["operator.sign_out", "operator.sign_in"]


def test_signing_in_returns_to_the_page_asked_for(kit: Kit) -> None:
    asked = kit.http.get(f"/console/audit?record={kit.merchant_id}", follow_redirects=False)
    sign_in = kit.http.get(asked.headers["location"])
    kept = re.search(r'name="next" value="([^"]+)"', sign_in.text)
    assert kept is not None
    answer = post_sign_in(kit.http, kit.token, next=kept.group(1))
    assert answer.headers["location"] == f"/console/audit?record={kit.merchant_id}"
    for elsewhere in ("https://evil.example/", "//evil.example/x", "/v1/account/balances", "/console/../v1"):
        kit.http.cookies.clear()
        answer = post_sign_in(kit.http, kit.token, next=elsewhere)
        assert answer.headers["location"] == "/console", elsewhere  # the overview


def test_a_sign_in_post_without_its_forms_token_opens_no_session(kit: Kit) -> None:
    page = kit.http.get("/console/sign-in")
    cookie = set_cookie(page, SIGN_IN_COOKIE)
    assert cookie["httponly"] is True and cookie["samesite"].lower() == "strict"
    token = SIGN_IN_CSRF.search(page.text)
    assert token is not None and token.group(1) == cookie.value
    for form in ({"token": kit.token}, {"token": kit.token, "csrf": "A" * 43}):
        answer = kit.http.post("/console/sign-in", data=form, follow_redirects=False)
        assert answer.status_code == 403 and "own sign-in page" in answer.text
        assert COOKIE not in kit.http.cookies
    with TestClient(kit.http.app) as fresh:  # the right field, but not this browser's cookie
        answer = fresh.post(
            "/console/sign-in", data={"token": kit.token, "csrf": token.group(1)}, follow_redirects=False
        )
        assert answer.status_code == 403
    assert kit.trail()[0][1] != "operator.sign_in"


# --- CSRF: a token per session, on every state-changing request -----------------------------------------


def test_a_post_without_the_token_or_with_another_sessions_answers_403_and_changes_nothing(kit: Kit) -> None:
    reference = kit.payout()
    mine = kit.sign_in()
    with TestClient(kit.http.app) as other:
        theirs = kit.sign_in(other)
    assert mine != theirs
    trail = kit.trail()
    path = f"/console/payouts/{reference}/reject"
    for form in ({"confirm": "yes"}, {"csrf": "", "confirm": "yes"}, {"csrf": theirs, "confirm": "yes"}):
        answer = kit.http.post(path, data=form, follow_redirects=False)
        assert answer.status_code == 403, form
        assert "Nothing was changed." in answer.text
    # the right token, sent by a page of another origin
    answer = kit.http.post(
        path, data={"csrf": mine, "confirm": "yes"}, headers={"Origin": "https://evil.example"}
    )
    assert answer.status_code == 403
    assert kit.trail() == trail
    held = kit.core.disburse.find(reference)
    assert held.status is PayoutStatus.PENDING and held.awaiting_review
    # ... and the same POST with the session's own token does it
    done = kit.http.post(path, data={"csrf": mine, "confirm": "yes"}, follow_redirects=False)
    assert done.status_code == 303
    assert kit.core.disburse.find(reference).status is PayoutStatus.REJECTED


def test_sign_out_needs_the_token_too(kit: Kit) -> None:
    kit.sign_in()
    assert kit.http.post("/console/sign-out", data={"csrf": "0" * 64}).status_code == 403
    assert kit.http.get("/console/review", follow_redirects=False).status_code == 200


# --- the work queues and their actions ---------------------------------------------------------------


def test_release_from_the_review_queue_sends_the_payout_as_the_operator(kit: Kit) -> None:
    reference = kit.payout(recipientName="Carol")
    small = kit.payout(amount=1000)  # not held
    csrf = kit.sign_in()
    queue = kit.http.get("/console/review").text
    assert reference in queue and small not in queue
    assert (
        f"/console/payouts/{reference}/release" in queue and f"/console/payouts/{reference}/reject" in queue
    )

    answer = kit.act(f"/console/payouts/{reference}/release", csrf)
    assert (answer.status_code, answer.headers["location"]) == (
        303,
        f"/console/payouts/{reference}?done=released",
    )
    shown = kit.http.get(answer.headers["location"]).text
    assert "Payout released" in shown
    assert re.search(r"data-status='(SENT|PAID)'", shown)
    assert kit.api(f"/v1/disburse/{reference}")["status"] in ("SENT", "PAID")
    assert reference not in kit.http.get("/console/review").text
    assert kit.trail()[0] == (kit.operator_id, "payout.release", reference)


def test_reject_from_the_review_queue_restores_the_balance(kit: Kit) -> None:
    before = kit.available()
    reference = kit.payout(amount=7000)
    assert kit.available() == before - 7000
    csrf = kit.sign_in()
    answer = kit.act(f"/console/payouts/{reference}/reject", csrf)
    shown = kit.http.get(answer.headers["location"]).text
    assert "data-status='REJECTED'" in shown and "back in the merchant" in shown
    assert kit.available() == before
    assert kit.api(f"/v1/disburse/{reference}")["status"] == "REJECTED"
    assert kit.trail()[0] == (kit.operator_id, "payout.reject", reference)


def test_resolve_a_failed_payout_from_the_failed_payouts_page(kit: Kit) -> None:
    before = kit.available()
    reference = kit.payout(amount=3000, phone="670000021")  # the sandbox refuses it: FAILED
    kit.core.run_until_idle()
    assert kit.api(f"/v1/disburse/{reference}")["status"] == "FAILED"
    assert kit.available() == before - 3000  # still reserved
    csrf = kit.sign_in()
    listed = kit.http.get("/console/failed").text
    assert reference in listed and "The network refused the payout." in listed
    assert f"/console/payouts/{reference}/resolve" in listed

    answer = kit.act(f"/console/payouts/{reference}/resolve", csrf)
    shown = kit.http.get(answer.headers["location"]).text
    assert "Resolved: no money moved" in shown and "RELEASED" in shown
    assert kit.available() == before
    assert reference not in kit.http.get("/console/failed").text
    again = kit.act(f"/console/payouts/{reference}/resolve", csrf)  # once only
    assert again.status_code == 400 and "already resolved" in again.text


def test_a_payout_page_shows_a_button_exactly_when_the_payouts_guard_allows_the_action(kit: Kit) -> None:
    held = kit.payout()
    rejected = kit.payout()
    paid = kit.payout(amount=1000)
    failed = kit.payout(amount=3000, phone="670000021")  # the sandbox refuses it
    resolved = kit.payout(amount=3000, phone="670000021")
    kit.core.run_until_idle()
    kit.core.disburse.reject(rejected)
    kit.core.disburse.resolve(resolved)
    kit.sign_in()
    expected = {
        held: {"release", "reject"},
        rejected: set(),
        paid: set(),
        failed: {"resolve"},
        resolved: set(),
    }
    for reference, actions in expected.items():
        item = kit.core.operator.payout(reference)
        allowed = {
            name
            for name, can in (
                ("release", item.can_release),
                ("reject", item.can_reject),
                ("resolve", item.can_resolve),
            )
            if can
        }
        assert allowed == actions, (reference, item.payout.status)
        page = kit.http.get(f"/console/payouts/{reference}").text
        shown = {name for name in ("release", "reject", "resolve") if f"/payouts/{reference}/{name}" in page}
        assert shown == allowed, (reference, item.payout.status)
    # the queues too: a button for each allowed action of each listed payout
    review = kit.http.get("/console/review").text
    assert f"/payouts/{held}/release" in review and f"/payouts/{held}/reject" in review
    assert f"/payouts/{held}/resolve" not in review
    failing = kit.http.get("/console/failed").text
    assert f"/payouts/{failed}/resolve" in failing and f"/payouts/{failed}/release" not in failing
    assert resolved not in failing


def test_merchant_key_webhook_and_platform_actions_change_the_record_and_show_it(kit: Kit) -> None:
    core, m = kit.core, kit.merchant_id
    core.webhooks.register(m, url="https://shop.example/hooks")
    with core.store.transaction() as tx:  # as after 10 failed events
        endpoint = tx.webhooks.get(m)
        assert endpoint is not None
        tx.webhooks.put(
            attrs.evolve(endpoint, is_active=False, disabled_reason="Disabled after 10 failures.")
        )
    csrf = kit.sign_in()
    page = f"/console/merchants/{m}"

    def done(path: str, expected: str, **fields: str | list[str]) -> str:
        answer = kit.act(path, csrf, **fields)
        assert answer.status_code == 303, answer.text
        assert answer.headers["location"].split("?")[0].split("#")[0] == expected, answer.headers["location"]
        shown = kit.http.get(answer.headers["location"])
        assert shown.status_code == 200
        return shown.text

    assert "SUSPENDED" in done(f"{page}/suspend", page)
    assert not core.operator.get_merchant(m).approved
    assert "APPROVED" in done(f"{page}/approve", page)
    done(f"{page}/payouts-off", page)
    assert not core.operator.get_merchant(m).payouts_enabled
    done(f"{page}/payouts-on", page)
    assert "1.25 %" in done(f"{page}/fee", page, percent="1.25")
    assert core.operator.get_merchant(m).collect_fee_ppm == 12_500
    shown = done(f"{page}/limits", page, currency="XAF", per_day="20000", review_threshold="8000")
    assert "Payout limits set." in shown
    limits = kit.api("/v1/account/disburse-limits/XAF")
    assert (limits["perDay"], limits["reviewThreshold"], limits["perWeek"]) == (20000, 8000, None)

    created = kit.act(f"{page}/keys", csrf, scope=["collect", "disburse"], per_minute="45", per_hour="")
    assert created.status_code == 200 and "shown only this once" in created.text
    secret = re.search(r"id='api-key'><bdi>(pck_[A-Za-z0-9_-]+)</bdi>", created.text)
    assert secret, created.text
    principal = core.access.authenticate(secret.group(1))
    assert principal.merchant.id == m and principal.key.per_minute == 45
    keys_page = kit.http.get(f"{page}/keys").text
    assert principal.key.id in keys_page and secret.group(1) not in keys_page  # shown once only
    done(f"/console/keys/{principal.key.id}/rate-limit", f"{page}/keys", per_minute="120", per_hour="5000")
    assert (
        core.operator.get_key(principal.key.id).per_minute,
        core.operator.get_key(principal.key.id).per_hour,
    ) == (
        120,
        5000,
    )
    done(f"/console/keys/{principal.key.id}/revoke", f"{page}/keys")
    assert core.operator.get_key(principal.key.id).revoked

    webhooks = kit.http.get("/console/webhooks").text
    assert "Disabled after 10 failures." in webhooks and ">Reactivate</button>" in webhooks
    assert ">Reactivate</button>" not in done(f"/console/webhooks/{m}/reactivate", "/console/webhooks")
    assert kit.api("/v1/webhook")["isActive"] is True

    platform = "/console/platform"
    done(f"{platform}/payouts-off", platform)
    assert not core.operator.settings().payouts_enabled
    done(f"{platform}/payouts-on", platform)
    done("/console/currencies/XAF/close", platform)
    assert kit.api("/v1/account/disburse-limits/XAF")["blockedBy"] == "CURRENCY_CLOSED"
    done("/console/currencies/XAF/open", platform)
    done(f"{platform}/api-off", platform)
    assert (
        kit.http.get("/v1/account/balances", headers={"Authorization": f"Bearer {kit.disburse_key}"}).json()[
            "code"
        ]
        == "CAPABILITY_DISABLED"
    )
    done(f"{platform}/api-on", platform)

    mine = [(action, record) for actor, action, record in kit.trail() if actor == kit.operator_id]
    assert [action for action, _ in reversed(mine)] == [
        "operator.sign_in",
        "merchant.suspend",
        "merchant.approve",
        "merchant.payouts_disable",
        "merchant.payouts_enable",
        "merchant.fee",
        "limits.set",
        "key.create",
        "key.rate_limit",
        "key.revoke",
        "webhook.reactivate",
        "platform.payouts_disable",
        "platform.payouts_enable",
        "currency.payouts_close",
        "currency.payouts_open",
        "platform.api_disable",
        "platform.api_enable",
    ]


def test_creating_a_merchant_from_the_console(kit: Kit) -> None:
    csrf = kit.sign_in()
    answer = kit.act(
        "/console/merchants", csrf, name="Kiosk <Ltd>", settlement_currency="XOF", approved="yes"
    )
    assert answer.status_code == 303
    shown = kit.http.get(answer.headers["location"]).text
    assert "Merchant created." in shown and "Kiosk &lt;Ltd&gt;" in shown
    [made] = [m for m in kit.core.operator.list_merchants() if m.name == "Kiosk <Ltd>"]
    assert made.settlement_currency == "XOF" and made.approved


def test_bad_input_is_refused_with_a_clear_message_and_changes_nothing(kit: Kit) -> None:
    reference = kit.payout()
    csrf = kit.sign_in()
    m = kit.merchant_id
    key_id = kit.core.operator.keys(m)[0].id
    trail = kit.trail()
    refusals = [
        (f"/console/merchants/{m}/fee", {"percent": "abc"}, 400, "is not a percentage"),
        (f"/console/merchants/{m}/fee", {"percent": "150"}, 400, "between 0 and 100"),
        (f"/console/merchants/{m}/limits", {"currency": "XAF", "per_day": "-5"}, 400, "Per day: "),
        (f"/console/merchants/{m}/limits", {"currency": "ZZZ"}, 400, "not supported"),
        (f"/console/merchants/{m}/keys", {"per_minute": "10"}, 400, "at least one scope"),
        (f"/console/keys/{key_id}/rate-limit", {"per_minute": "0"}, 400, "from 1 to 1000000"),
        (f"/console/keys/{key_id}/rate-limit", {"per_minute": "1e9"}, 400, "from 1 to 1000000"),
        ("/console/merchants", {"name": ""}, 400, "name of 1 to 120"),
        (f"/console/payouts/{reference}/explode", {}, 404, "No such action"),
        ("/console/payouts/PO-nope/release", {}, 404, "No payout"),
        (f"/console/merchants/{m}/launch", {}, 404, "No such action"),
        ("/console/keys/key_nope/revoke", {}, 404, "No API key"),
        ("/console/currencies/USD/close", {}, 400, "not supported"),
    ]
    for path, fields, status, words in refusals:
        form = {"csrf": csrf, "confirm": "yes", **fields}
        answer = kit.http.post(path, data=form, follow_redirects=False)
        assert answer.status_code == status, (path, fields, answer.status_code, answer.text)
        assert words in answer.text, (path, words)
    assert kit.http.get("/console/payouts/PO-nope").status_code == 404
    assert kit.http.get("/console/merchants/mer_nope").status_code == 404
    assert kit.http.get("/console/no-such-page").status_code == 404
    assert kit.http.post("/console/review", data={"csrf": csrf}).status_code == 405
    huge = kit.http.post(f"/console/merchants/{m}/fee", data={"csrf": csrf, "percent": "1" * 70_000})
    assert huge.status_code == 413
    assert kit.trail() == trail
    # a second decision on the same payout is refused
    assert kit.act(f"/console/payouts/{reference}/reject", csrf).status_code == 303
    again = kit.http.post(
        f"/console/payouts/{reference}/release", data={"csrf": csrf, "confirm": "yes"}, follow_redirects=False
    )
    assert again.status_code == 400 and "not held for review" in again.text


# --- untrusted text, the page's own rules -----------------------------------------------------------


def test_merchant_supplied_text_is_escaped_on_every_page(kit: Kit) -> None:
    core, m = kit.core, kit.merchant_id
    core.webhooks.register(m, url="https://shop.example/x?<script>alert(2)</script>")
    held = kit.payout(recipientName=HOSTILE_NAME, merchantReference=SCREEN_CLEARING)
    forged = kit.payout(recipientName=FORGED_NAME, merchantReference="\u202eevil")
    kit.sign_in()
    csrf = csrf_of(kit.http.get("/console/review").text)
    kit.act(f"/console/payouts/{forged}/reject", csrf)
    for path in [*pages(kit, held), f"/console/payouts/{forged}", f"/console/audit?record={forged}"]:
        answer = kit.http.get(path)
        assert answer.status_code == 200, path
        html = answer.text
        assert "<img" not in html and "<script" not in html, path
        assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u202e]", html), path
    review = kit.http.get("/console/review").text
    assert "<bdi>&lt;img src=x onerror=alert(1)&gt;</bdi>" in review
    assert "<bdi>\\x1b[2J\\x1b[31mFAKE: approved\\x07</bdi>" in review
    rejected = kit.http.get(f"/console/payouts/{forged}").text
    assert "<bdi>Bob\\r\\nstatus: PAID</bdi>" in rejected and "<bdi>\\u202eevil</bdi>" in rejected
    assert "shop.example/x?&lt;script&gt;alert(2)&lt;/script&gt;" in kit.http.get("/console/webhooks").text


def test_pages_forbid_script_and_every_other_origin(kit: Kit) -> None:
    kit.sign_in()
    for path in ("/console/sign-in", "/console/review", "/console/merchants", "/console/audit"):
        answer = kit.http.get(path)
        policy = answer.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src" not in policy
        assert "form-action 'self'" in policy and "frame-ancestors 'none'" in policy
        assert answer.headers["cache-control"] == "no-store"
        assert "<script" not in answer.text
        assert re.findall(r"(?:src|href|action)=['\"](?!/console|#|\?)([^'\"]*)", answer.text) == []


def test_the_audit_log_page_filters_by_record_and_pages(sqlite_kit: Kit) -> None:
    kit = sqlite_kit
    references = [kit.payout() for _ in range(3)]
    csrf = kit.sign_in()
    for reference in references:
        kit.act(f"/console/payouts/{reference}/reject", csrf)
    only = re.sub("<[^>]+>", "", kit.http.get(f"/console/audit?record={references[1]}").text)  # the text
    assert references[1] in only and references[0] not in only and references[2] not in only
    assert "payout.reject" in only and "Ada Lovelace" in only and "status: PENDING → REJECTED" in only
    everything = kit.http.get("/console/audit").text
    assert all(reference in everything for reference in references)
    assert "No entry." in kit.http.get("/console/audit?record=PO-none").text
    assert kit.http.get("/console/audit?after=aud_nope").status_code == 400
