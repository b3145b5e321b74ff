"""The operator's console in a real browser: Debian's Chromium, headless, through Playwright's sync API,
against a real ``paymentcore serve --demo`` process on loopback (the set-up of ``test_browser.py``).

An operator made with ``paymentcore operator create`` signs in with the "Token" field and the "Sign in"
button, works the review queue (Release, Reject) and the failed payouts (Resolve), each with one
"Confirm", and the outcome is checked through the merchant API: the released payout reaches SENT or
PAID, the rejected one's money is back in the balance, the resolved one's too. A recipient name that is
markup stays text and opens no dialog; a form posted from another site changes nothing. Every page of
the navigation is visited, with nothing fetched from another origin and no script error.

Screenshots land in ``tests/e2e/screenshots/`` (ignored by git); with ``PAYMENTCORE_DOC_SCREENSHOTS=1``
the ones the docs show are also written to ``docs/images/console-*.png``. Without Chromium or
Playwright the tests are skipped, except under CI, where that fails them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest
from test_browser import chromium, free_port, stop_process

from paymentcore import PaymentCore
from paymentcore.testing import fund
from paymentcore_server.console import COOKIE, SIGN_IN_COOKIE

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Dialog, Locator, Page, Request, ViewportSize

pytestmark = pytest.mark.slow

VIEWPORT: ViewportSize = {"width": 1280, "height": 800}
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"
DOC_IMAGES = ROOT / "docs" / "images"
HOSTILE_NAME = "<img src=x onerror=alert(1)>"
SCREEN_CLEARING = "\x1b[2J\x1b[31mFAKE: approved\x07"
REVIEW_ABOVE = 10_000
SETTLE_S = 20.0  # the sandbox answers after 1 s; the worker polls every few hundred ms


# --- the server ---------------------------------------------------------------------------------


@attrs.define
class Server:
    base_url: str
    db: Path
    merchant_id: str
    collect_key: str
    disburse_key: str
    operator_token: str
    idempotency: int = 0

    def call(self, method: str, path: str, body: Any = None, *, key: str | None = None) -> Any:
        self.idempotency += 1
        request = urllib.request.Request(
            self.base_url + path,
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={
                "Authorization": f"Bearer {key or self.disburse_key}",
                "Content-Type": "application/json",
                "Idempotency-Key": f"browser-{self.idempotency}",
            },
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response, parse_float=Decimal)

    def payout(self, amount: int = 25_000, phone: str = "670000001", **extra: Any) -> str:
        record = self.call(
            "POST", "/v1/disburse", {"amount": amount, "currency": "XAF", "phone": phone, **extra}
        )
        reference: str = record["reference"]
        return reference

    def payout_status(self, reference: str) -> str:
        status: str = self.call("GET", f"/v1/disburse/{reference}")["status"]
        return status

    def wait_for_status(self, reference: str, *wanted: str) -> str:
        deadline = time.monotonic() + SETTLE_S
        while (status := self.payout_status(reference)) not in wanted:
            assert time.monotonic() < deadline, f"{reference} stayed {status}, not {wanted}"
            time.sleep(0.3)
        return status

    def available(self) -> Decimal:
        [balance] = self.call("GET", "/v1/account/balances")["balances"]
        return Decimal(balance["available"])

    def cli(self, *args: str) -> dict[str, Any]:
        command = [sys.executable, "-m", "paymentcore_server", "--db", str(self.db), *args, "--json"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
        value: dict[str, Any] = json.loads(done.stdout)
        return value


def start_server(db: Path) -> tuple[subprocess.Popen[bytes], Server]:
    port = free_port()
    command = [sys.executable, "-m", "paymentcore_server", "--db", str(db), "serve", "--demo"]
    command += ["--port", str(port), "--sandbox-delay", "1", "--webhook-retry-delays", "none"]
    command += ["--allow-private-webhooks"]  # the demo endpoint is on loopback
    log_path = db.with_suffix(".log")
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(base_url + "/healthz", timeout=2) as response:
                healthy = response.status == 200
        except OSError:
            healthy = False
        if healthy:
            printed = log_path.read_text()
            merchant = re.search(r"created: (mer_\w+)", printed)
            collect = re.search(r"Collect key:\s+(\S+)", printed)
            disburse = re.search(r"Disburse key:\s+(\S+)", printed)
            assert merchant and collect and disburse, printed
            server = Server(base_url, db, merchant.group(1), collect.group(1), disburse.group(1), "")
            return process, server
        time.sleep(0.1)
    stop_process(process)
    raise RuntimeError(f"paymentcore serve did not come up:\n{log_path.read_text()}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("console")
    for attempt in range(3):  # a port picked as free can be taken before the server binds it
        db = tmp / f"c{attempt}.db"
        try:
            process, server = start_server(db)
            break
        except RuntimeError:
            if attempt == 2:
                raise
    try:
        server.operator_token = server.cli("operator", "create", "Ada Lovelace")["token"]
        server.cli("limits", "set", server.merchant_id, "XAF", "--review-threshold", str(REVIEW_ABOVE))
        for key_id in re.findall(r"\(key id (key_\w+)\)", db.with_suffix(".log").read_text()):
            # the tests poll the API; the demo keys' ceilings (30 a minute) would refuse them
            server.cli("key", "rate-limit", key_id, "--per-minute", "100000", "--per-hour", "1000000")
        core = PaymentCore.sqlite(db, sender=None)
        try:
            fund(core, server.merchant_id, "XAF", 2_000_000)
        finally:
            core.close()
        # an endpoint nobody answers: its deliveries fail, so the Webhooks page has something to show
        server.call(
            "PUT", "/v1/webhook", {"url": f"http://127.0.0.1:{free_port()}/hooks"}, key=server.collect_key
        )
        yield server
    finally:
        stop_process(process)


# --- the browser --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@attrs.define
class Operator:
    """One browser context: a person at the console, and what the pages asked for and did."""

    page: Page
    server: Server
    requests: list[str] = attrs.field(factory=list)
    errors: list[str] = attrs.field(factory=list)
    dialogs: list[str] = attrs.field(factory=list)

    def shot(self, name: str, doc: bool = False) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"console-{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        if doc and os.environ.get("PAYMENTCORE_DOC_SCREENSHOTS"):
            DOC_IMAGES.mkdir(parents=True, exist_ok=True)
            (DOC_IMAGES / f"console-{name}.png").write_bytes(path.read_bytes())

    def sign_in(self, token: str | None = None) -> None:
        self.page.goto(self.server.base_url + "/console")
        self.page.get_by_label("Token").fill(token or self.server.operator_token)
        self.page.get_by_role("button", name="Sign in").click()
        self.page.wait_for_load_state()

    def go(self, link: str) -> None:
        """Follow a link of the navigation."""
        self.page.get_by_role("navigation").get_by_role("link", name=link, exact=True).click()
        self.page.wait_for_load_state()
        assert self.page.get_by_role("heading", level=1).inner_text() == link

    def row(self, text: str) -> Locator:
        return self.page.get_by_role("row").filter(has_text=text)

    def confirm(self) -> None:
        """The one confirmation step: the Confirm button, then the record's page."""
        self.page.get_by_role("button", name="Confirm").click()
        self.page.wait_for_load_state()

    def field(self, label: str) -> str:
        """The value shown beside ``label`` on a record's page."""
        return self.page.locator(f"dt:text-is('{label}') + dd").inner_text()

    def check_clean(self) -> None:
        """No script error, no dialog, and nothing fetched from anywhere but our server."""
        assert self.errors == [] and self.dialogs == []
        foreign = [url for url in self.requests if not url.startswith(self.server.base_url + "/")]
        assert foreign == []


@pytest.fixture
def operator(browser: Browser, server: Server) -> Iterator[Operator]:
    context = browser.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        person = Operator(page=page, server=server)

        def on_request(request: Request) -> None:
            person.requests.append(request.url)

        def on_dialog(dialog: Dialog) -> None:
            person.dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("request", on_request)
        page.on("pageerror", lambda error: person.errors.append(str(error)))
        page.on("dialog", on_dialog)
        yield person
    finally:
        context.close()


# --- signing in and out -------------------------------------------------------------------------


def test_sign_in_refuses_a_wrong_token_and_keeps_the_session_in_a_strict_cookie(operator: Operator) -> None:
    page, server = operator.page, operator.server
    page.goto(server.base_url + "/console/review")
    assert page.url.startswith(server.base_url + "/console/sign-in")
    assert page.get_by_role("navigation").count() == 0  # nothing but the form
    operator.shot("sign-in", doc=True)

    for wrong in ("pco_not-a-real-token", server.disburse_key):  # a merchant API key does not sign in
        page.get_by_label("Token").fill(wrong)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_load_state()
        assert page.get_by_role("alert").inner_text() == "That token is not valid."
        assert [c["name"] for c in page.context.cookies()] == [SIGN_IN_COOKIE]  # the form's own token

    operator.sign_in()
    assert page.url == server.base_url + "/console"  # the overview
    [cookie] = page.context.cookies()  # the sign-in form's token is gone
    assert cookie["name"] == COOKIE
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict" and cookie["path"] == "/console"
    assert cookie["secure"] is False  # http://127.0.0.1: the public URL is not https
    assert "Ada Lovelace" in page.locator("header").inner_text()

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_load_state()
    assert "You are signed out." in page.inner_text("main")
    page.goto(server.base_url + "/console/merchants")
    assert page.url.startswith(server.base_url + "/console/sign-in")
    operator.check_clean()


# --- the work queues ----------------------------------------------------------------------------


def test_release_a_held_payout_from_the_review_queue(operator: Operator) -> None:
    server, page = operator.server, operator.page
    reference = server.payout(amount=25_000, recipientName="Amina Diallo", merchantReference="INV-2041")
    assert server.payout_status(reference) == "PENDING"
    operator.sign_in()
    operator.go("Review queue")
    row = operator.row(reference)
    cells = row.get_by_role("cell").all_inner_texts()
    assert cells[2:8] == ["25,000", "XAF", "Amina Diallo", "670000001", "INV-2041", cells[7]]
    assert "Demo Shop" in cells[1]
    operator.shot("review", doc=True)

    row.get_by_role("button", name="Release").click()
    page.wait_for_load_state()
    assert page.get_by_role("heading", level=1).inner_text() == f"Release payout {reference}?"
    assert server.payout_status(reference) == "PENDING"  # nothing happens before Confirm
    operator.shot("confirm", doc=True)
    operator.confirm()

    assert page.url.startswith(f"{server.base_url}/console/payouts/{reference}")
    assert page.get_by_role("status").inner_text().startswith("Payout released")
    assert operator.field("Status") in ("SENT", "PAID")
    assert server.payout_status(reference) in ("SENT", "PAID")
    assert server.wait_for_status(reference, "PAID") == "PAID"
    page.reload()
    assert operator.field("Status") == "PAID"
    operator.shot("payout", doc=True)
    operator.check_clean()


def test_reject_a_held_payout_and_the_balance_is_restored(operator: Operator) -> None:
    server, page = operator.server, operator.page
    before = server.available()
    reference = server.payout(amount=40_000, recipientName="Kofi Mensah")
    assert server.available() == before - 40_000
    operator.sign_in()
    operator.go("Review queue")
    operator.row(reference).get_by_role("button", name="Reject").click()
    page.wait_for_load_state()
    assert "money returns to the merchant" in page.inner_text("main")
    operator.confirm()
    assert operator.field("Status") == "REJECTED"
    assert server.payout_status(reference) == "REJECTED"
    assert server.available() == before
    operator.go("Review queue")
    assert operator.row(reference).count() == 0
    operator.check_clean()


def test_resolve_a_failed_payout_and_its_money_returns(operator: Operator) -> None:
    server, page = operator.server, operator.page
    before = server.available()
    reference = server.payout(amount=3_000, phone="670000021")  # below review; the sandbox refuses it
    server.wait_for_status(reference, "FAILED")
    assert server.available() == before - 3_000  # still reserved
    operator.sign_in()
    operator.go("Failed payouts")
    row = operator.row(reference)
    assert "The network refused the payout." in row.inner_text()
    operator.shot("failed", doc=True)
    row.get_by_role("button", name="Resolve").click()
    page.wait_for_load_state()
    operator.confirm()
    assert operator.field("Status") == "FAILED"
    assert "Resolved: no money moved" in operator.field("Status reason")
    assert operator.field("Resolution") == "RELEASED"
    assert server.available() == before
    operator.go("Failed payouts")
    assert operator.row(reference).count() == 0
    operator.check_clean()


# --- untrusted text, other sites -----------------------------------------------------------------


def test_a_recipient_name_of_markup_shows_as_text_and_opens_no_dialog(operator: Operator) -> None:
    server, page = operator.server, operator.page
    reference = server.payout(amount=12_000, recipientName=HOSTILE_NAME, merchantReference=SCREEN_CLEARING)
    operator.sign_in()
    operator.go("Review queue")
    cells = operator.row(reference).get_by_role("cell").all_inner_texts()
    assert cells[4] == HOSTILE_NAME
    assert cells[6] == "\\x1b[2J\\x1b[31mFAKE: approved\\x07"
    assert page.locator("main img").count() == 0
    page.get_by_role("link", name=reference).click()
    page.wait_for_load_state()
    assert operator.field("Recipient name") == HOSTILE_NAME
    assert page.locator("main img").count() == 0
    page.wait_for_timeout(300)  # an onerror handler would have run by now
    assert operator.dialogs == []
    assert not any(url.endswith("/x") for url in operator.requests)  # the image was never even fetched
    operator.check_clean()


class _Forger(BaseHTTPRequestHandler):
    """Another site: its page posts a form to the console as soon as it loads."""

    page = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_forged_cross_site_post_changes_nothing(operator: Operator) -> None:
    server, page = operator.server, operator.page
    reference = server.payout(amount=30_000)
    operator.sign_in()  # the browser holds a live console session
    forged = (
        "<!doctype html><html><body><h1>You won a prize</h1>"
        f"<form id='f' method='post' action='{server.base_url}/console/payouts/{reference}/reject'>"
        f"<input type='hidden' name='csrf' value='{'0' * 64}'>"
        "<input type='hidden' name='confirm' value='yes'>"
        "</form><script>document.getElementById('f').submit()</script></body></html>"
    )
    _Forger.page = forged.encode()
    evil = ThreadingHTTPServer(("127.0.0.1", 0), _Forger)
    thread = threading.Thread(target=evil.serve_forever, daemon=True)
    thread.start()
    try:
        with page.expect_response(lambda r: r.request.method == "POST") as posted:
            page.goto(f"http://localhost:{evil.server_address[1]}/")  # another site than 127.0.0.1
        # the session cookie is SameSite=Strict: the POST arrives without it and is sent to sign in
        assert posted.value.status == 303
        page.wait_for_url(re.compile(r".*/console/sign-in.*"))
    finally:
        evil.shutdown()
        evil.server_close()
    assert server.payout_status(reference) == "PENDING"
    assert server.call("GET", f"/v1/disburse/{reference}")["awaitingReview"] is True
    page.goto(server.base_url + "/console/review")  # still signed in, and the payout is still held
    assert operator.row(reference).count() == 1


# --- every page of the navigation ----------------------------------------------------------------


def test_every_page_of_the_navigation_and_its_actions(operator: Operator) -> None:
    server, page = operator.server, operator.page
    paid = server.payout(amount=2_500, recipientName="Fatou Ndiaye")  # below review: sent, then paid
    server.wait_for_status(paid, "PAID")  # its events go to the (unanswering) webhook endpoint
    operator.sign_in()

    operator.go("Merchants")
    row = operator.row("Demo Shop")
    assert "APPROVED" in row.inner_text() and "XAF" in row.inner_text()
    operator.shot("merchants", doc=True)
    row.get_by_role("link", name="Demo Shop").click()
    page.wait_for_load_state()
    assert operator.field("Merchant id") == server.merchant_id
    limits = (
        page.get_by_role("table").filter(has_text="Review above").get_by_role("row").filter(has_text="XAF")
    )
    assert limits.get_by_role("cell").nth(5).inner_text() == f"{REVIEW_ABOVE:,}"
    operator.shot("merchant", doc=True)
    page.get_by_label("Collect fee (percent)").fill("1.5")
    page.get_by_role("button", name="Set fee").click()
    page.wait_for_load_state()
    operator.confirm()
    assert operator.field("Collect fee") == "1.5 %"
    assert page.get_by_role("status").inner_text() == "Collect fee set."

    operator.go("Keys")
    operator.row("Demo Shop").get_by_role("link", name="Demo Shop").click()
    page.wait_for_load_state()
    page.get_by_label("Collect").check()
    page.get_by_role("button", name="Create key").click()
    page.wait_for_load_state()
    operator.confirm()
    secret = page.locator("#api-key").inner_text()
    assert secret.startswith("pck_")
    operator.shot("key-created", doc=True)
    countries = server.call("GET", "/v1/countries", key=secret)
    assert any(country["country"] == "CM" for country in countries)  # the new key works at once
    page.get_by_role("link", name="Back to the keys of Demo Shop").click()
    page.wait_for_load_state()
    assert secret not in page.content()  # shown once only
    operator.shot("keys", doc=True)

    core = PaymentCore.sqlite(server.db, sender=None)
    try:  # as after 10 failed events in a row
        with core.store.transaction() as tx:
            endpoint = tx.webhooks.get(server.merchant_id)
            assert endpoint is not None
            tx.webhooks.put(
                attrs.evolve(
                    endpoint, is_active=False, disabled_reason="Disabled after 10 consecutive failed events."
                )
            )
    finally:
        core.close()
    assert server.call("GET", "/v1/webhook", key=server.collect_key)["isActive"] is False
    operator.go("Webhooks")
    assert "Disabled after 10 consecutive failed events." in page.inner_text("main")
    deliveries = page.get_by_role("table").get_by_role("row").filter(has_text=paid)
    assert deliveries.count() >= 1  # the recent deliveries, with their failed attempts
    operator.shot("webhooks", doc=True)
    page.get_by_role("button", name="Reactivate").click()
    page.wait_for_load_state()
    operator.confirm()
    assert page.get_by_role("status").inner_text() == "Webhook endpoint reactivated."
    assert page.get_by_role("button", name="Reactivate").count() == 0
    assert server.call("GET", "/v1/webhook", key=server.collect_key)["isActive"] is True

    operator.go("Platform")
    operator.shot("platform", doc=True)
    page.get_by_role("button", name="Turn payouts off").click()
    page.wait_for_load_state()
    operator.confirm()
    limits = server.call("GET", "/v1/account/disburse-limits/XAF")
    assert (limits["enabled"], limits["blockedBy"]) == (False, "PLATFORM")
    page.get_by_role("button", name="Turn payouts on").click()
    page.wait_for_load_state()
    operator.confirm()
    assert server.call("GET", "/v1/account/disburse-limits/XAF")["enabled"] is True

    operator.go("Audit log")
    trail = page.inner_text("main")
    for action in ("webhook.reactivate", "key.create", "merchant.fee", "platform.payouts_disable"):
        assert action in trail
    assert "Ada Lovelace" in trail
    operator.shot("audit", doc=True)
    page.get_by_label("Record").fill(server.merchant_id)
    page.get_by_role("button", name="Filter").click()
    page.wait_for_load_state()
    records = page.locator("tbody tr td:nth-child(4) .mono").all_inner_texts()
    assert records and set(records) == {server.merchant_id}
    operator.check_clean()
