"""The hosted checkout page in a real browser (CONTRACT §4): Debian's Chromium, headless, through
Playwright's sync API, against a real ``paymentcore serve --demo`` process on loopback.

Each test opens a ``checkoutUrl`` made over HTTP with the demo Collect key, on a 360 x 740 screen, and
follows ``#status[data-status]`` to the final status without reloading the page. Screenshots land in
``tests/e2e/screenshots/`` (ignored by git); with ``PAYMENTCORE_DOC_SCREENSHOTS=1`` the ones the docs
show are also written to ``docs/images/checkout-*.png``.

Without Chromium or Playwright the tests are skipped, except under CI (``CI`` set), where a missing
browser fails them: CI must never pass by silently not running them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest

from paymentcore import PaymentCore

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Request, ViewportSize

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT: ViewportSize = {"width": 360, "height": 740}
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"
DOC_IMAGES = ROOT / "docs" / "images"
SETTLE_MS = 20_000  # the sandbox answers after 1 s; the page polls every 1.5 s
POST_MS = 10_000  # the form POST and its answer
FINAL = ("SUCCESS", "FAILED")


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require_browser() -> None:
    """Skip when Chromium or Playwright is missing, but fail under CI so that it never skips quietly."""
    missing = []
    if importlib.util.find_spec("playwright") is None:
        missing.append("the playwright package (pip install -e '.[test]')")
    if not os.access(CHROMIUM, os.X_OK):
        missing.append(f"{CHROMIUM} (bash .ci/install-browser)")
    if not missing:
        return
    reason = "browser tests need " + " and ".join(missing)
    if under_ci():
        pytest.fail(f"{reason}; CI is set, so they may not be skipped")
    pytest.skip(reason)


# --- the server ---------------------------------------------------------------------------------


@attrs.define
class Server:
    base_url: str
    collect_key: str
    db: Path

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.collect_key}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)

    def checkout(self, **body: Any) -> dict[str, Any]:
        record: dict[str, Any] = self.call("POST", "/v1/collect/checkout", body)
        assert record["checkoutUrl"] == f"{self.base_url}/checkout/{record['reference']}"
        return record

    def collection(self, reference: str) -> dict[str, Any]:
        record: dict[str, Any] = self.call("GET", f"/v1/collect/{reference}")
        return record


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(db: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    """Start ``paymentcore serve --demo``; returns the process, its URL and the demo Collect key."""
    port = free_port()
    command = [sys.executable, "-m", "paymentcore_server", "--db", str(db), "serve", "--demo"]
    command += ["--port", str(port), "--sandbox-delay", "1"]
    log_path = db.with_suffix(".log")
    with open(log_path, "wb") as log:  # the server keeps its own handle; ours is closed at once
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
            match = re.search(r"Collect key:\s+(\S+)", printed)
            assert match, f"the server printed no Collect key:\n{printed}"
            return process, base_url, match.group(1)
        time.sleep(0.1)
    stop_process(process)
    raise RuntimeError(f"paymentcore serve did not come up:\n{log_path.read_text()}")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("browser")
    # A port picked as free can be taken before the server binds it: then try again on another one.
    for attempt in range(3):
        db = tmp / f"b{attempt}.db"
        try:
            process, base_url, key = start_server(db)
            break
        except RuntimeError:
            if attempt == 2:
                raise
    try:
        yield Server(base_url=base_url, collect_key=key, db=db)
    finally:
        stop_process(process)


# --- the browser --------------------------------------------------------------------------------


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's Chromium, headless, through Playwright (skips, or fails under CI, without it)."""
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@attrs.define
class Payer:
    """One browser tab on a phone-sized screen, with what it asked for and what went wrong in it."""

    page: Page
    server: Server
    requests: list[str] = attrs.field(factory=list)
    errors: list[str] = attrs.field(factory=list)
    navigations: list[str] = attrs.field(factory=list)

    def shot(self, name: str, doc: str | None = None) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        if doc is not None and os.environ.get("PAYMENTCORE_DOC_SCREENSHOTS"):
            DOC_IMAGES.mkdir(parents=True, exist_ok=True)
            (DOC_IMAGES / f"checkout-{doc}.png").write_bytes(path.read_bytes())

    def status(self) -> str:
        return self.page.get_attribute("#status", "data-status") or ""

    def wait_for_status(self, wanted: str) -> None:
        """Wait for ``#status[data-status]`` to say ``wanted``, updated by the page's script alone."""
        self.page.evaluate("window.__sameDocument = true")
        loads = len(self.navigations)
        self.page.wait_for_selector(f"#status[data-status='{wanted}']", timeout=SETTLE_MS)
        assert self.page.evaluate("window.__sameDocument === true"), "the page reloaded"
        assert len(self.navigations) == loads, "the page navigated"

    def check_clean(self) -> None:
        """No script error, and nothing fetched from anywhere but our server."""
        assert self.errors == []
        foreign = [url for url in self.requests if not url.startswith(self.server.base_url + "/")]
        assert foreign == []

    def fits_the_screen(self) -> None:
        width = self.page.evaluate("document.documentElement.scrollWidth")
        assert width <= VIEWPORT["width"], f"the page scrolls sideways ({width}px)"


@pytest.fixture
def payer(browser: Browser, server: Server) -> Iterator[Payer]:
    context = browser.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        payer = Payer(page=page, server=server)

        def on_request(request: Request) -> None:
            payer.requests.append(request.url)

        page.on("request", on_request)
        page.on("pageerror", lambda error: payer.errors.append(str(error)))
        page.on("framenavigated", lambda frame: payer.navigations.append(frame.url))
        yield payer
    finally:
        context.close()


def submit(payer: Payer, *, with_enter: bool = False) -> None:
    """Submit the form (Enter where the focus is, or a click on the button): a plain POST to its own
    action, answered 303 back to the same page, which then shows the status."""
    url = payer.page.url
    with payer.page.expect_response(lambda r: r.request.method == "POST", timeout=POST_MS) as posted:
        if with_enter:
            payer.page.keyboard.press("Enter")
        else:
            payer.page.click("#pay")
    response = posted.value
    assert response.url == url, f"the form posted to {response.url}, not to its page {url}"
    assert response.status == 303, f"the form POST answered {response.status}, not 303"
    payer.page.wait_for_selector("#status", timeout=5_000)
    assert payer.page.url == url


# --- the payer's journeys ------------------------------------------------------------------------


def test_paying_with_the_keyboard_on_a_small_screen(payer: Payer) -> None:
    record = payer.server.checkout(amount=5000, currency="XAF", description="Order #1042 — 2 bags of rice")
    page = payer.page
    page.goto(record["checkoutUrl"])
    assert page.title() == "Pay Demo Shop"
    assert page.inner_text("#merchant") == "Demo Shop"
    assert page.inner_text("#amount") == "5,000 XAF"  # XAF has no decimals
    assert page.inner_text("#description") == "Order #1042 — 2 bags of rice"
    # Every field has a label that names it.
    assert page.get_by_label("Pay with").get_attribute("name") == "provider"
    assert page.get_by_label("Mobile money number").get_attribute("name") == "phone"
    payer.fits_the_screen()

    # Keyboard only: Tab goes to the provider, the phone field, the button; Enter pays.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "provider"
    page.keyboard.press("ArrowDown")  # the first provider: MTN Mobile Money, Cameroon
    assert page.input_value("#provider") == "mtn_cm"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "phone"
    page.keyboard.type("670000000")
    assert page.inner_text("#you-pay") == "You pay 5,000 XAF"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "pay"
    payer.shot("form", doc="form")
    submit(payer, with_enter=True)  # Enter on the focused button

    assert payer.status() in ("PENDING", "PROCESSING")
    assert "approve" in page.inner_text("#status-text")
    assert page.locator("form").count() == 0
    payer.fits_the_screen()
    payer.shot("pending", doc="pending")

    payer.wait_for_status("SUCCESS")
    assert page.inner_text("#status-title") == "Paid"
    assert page.inner_text("#status-text").startswith("Payment received.")
    payer.shot("success", doc="success")
    assert payer.server.collection(record["reference"])["status"] == "SUCCESS"
    payer.check_clean()


@pytest.mark.parametrize(
    ("phone", "category", "words"),
    [
        ("670000011", "PAYER_DECLINED", "declined"),
        ("670000012", "INSUFFICIENT_FUNDS", "does not hold enough money"),
        ("670000013", "TIMEOUT", "not answered in time"),
    ],
)
def test_a_failed_payment_says_why(payer: Payer, phone: str, category: str, words: str) -> None:
    record = payer.server.checkout(amount=2500, currency="XAF", description="Failing order")
    page = payer.page
    page.goto(record["checkoutUrl"])
    page.select_option("#provider", "mtn_cm")
    page.fill("#phone", phone)
    submit(payer, with_enter=category == "PAYER_DECLINED")  # Enter in the phone field submits too
    assert payer.status() not in FINAL

    payer.wait_for_status("FAILED")
    assert page.inner_text("#status-title") == "Payment failed"
    text = page.inner_text("#status-text")
    assert words in text and "No money was taken." in text
    assert page.locator("form").count() == 0
    payer.fits_the_screen()
    payer.shot(f"failed-{category.lower()}", doc="failed" if category == "PAYER_DECLINED" else None)
    final = payer.server.collection(record["reference"])
    assert final["status"] == "FAILED" and final["failureCategory"] == category
    payer.check_clean()


def test_a_usd_price_paid_from_a_xaf_wallet(payer: Payer) -> None:
    record = payer.server.checkout(amount=12.50, currency="USD", description="Conference ticket")
    page = payer.page
    page.goto(record["checkoutUrl"])
    assert page.inner_text("#amount") == "12.50 USD"  # two decimals, as USD has
    option = page.inner_text("#provider option[value='orange_cm']")
    match = re.fullmatch(r"Orange Money — ([\d,]+) XAF", option)
    assert match, option
    page.select_option("#provider", "orange_cm")
    page.fill("#phone", "690000000")
    assert page.inner_text("#you-pay") == f"You pay {match.group(1)} XAF"
    submit(payer)

    payer.wait_for_status("SUCCESS")
    assert f"{match.group(1)} XAF" in page.inner_text("#details")
    final = payer.server.collection(record["reference"])
    assert final["currency"] == "XAF" and final["providerCode"] == "orange_cm"
    assert f"{final['amount']:,}" == match.group(1)  # the page asked for what was charged
    assert final["requestedCurrency"] == "USD"
    payer.shot("usd-in-xaf")
    payer.check_clean()


def test_an_expired_link_says_so_and_has_no_form(payer: Payer) -> None:
    record = payer.server.checkout(amount=1000, currency="XAF", description="Too late")
    reference = record["reference"]
    # Expire it now instead of waiting: move expires_at into the past in the server's database.
    core = PaymentCore.sqlite(payer.server.db, sender=None)
    try:
        with core.store.transaction() as tx:
            collection = tx.collections.get(reference)
            assert collection is not None
            tx.collections.update(attrs.evolve(collection, expires_at=collection.created_at - 1))
    finally:
        core.close()

    page = payer.page
    page.goto(record["checkoutUrl"])
    assert page.locator("form").count() == 0
    assert page.locator("#provider, #phone, #pay").count() == 0
    assert page.inner_text("#status-title") == "Link expired"
    assert "expired" in page.inner_text("#status-text")
    # The worker then closes it (FAILED, EXPIRED); the page follows and still says expired.
    payer.wait_for_status("FAILED")
    assert page.inner_text("#status-title") == "Link expired"
    assert "expired" in page.inner_text("#status-text")
    payer.fits_the_screen()
    payer.shot("expired", doc="expired")
    assert payer.server.collection(reference)["failureCategory"] == "EXPIRED"
    payer.check_clean()


def test_lightning_shows_an_invoice_instead_of_asking_for_a_phone(payer: Payer) -> None:
    record = payer.server.checkout(amount=2500, currency="XAF", description="Paid in sats")
    page = payer.page
    page.goto(record["checkoutUrl"])
    page.select_option("#provider", "lightning")
    assert not page.is_visible("#phone")  # no phone number for Lightning
    assert re.fullmatch(r"You pay 0\.\d{8} BTC", page.inner_text("#you-pay"))  # BTC has 8 decimals
    payer.shot("lightning-form")
    submit(payer)

    invoice = page.inner_text("#invoice")
    assert invoice.startswith("lnbcrt")
    assert payer.status() not in FINAL
    payer.shot("lightning", doc="lightning")
    payer.wait_for_status("SUCCESS")
    assert not page.is_visible("#invoice")  # a paid invoice is not offered again
    final = payer.server.collection(record["reference"])
    assert final["providerCode"] == "lightning" and final["currency"] == "BTC"
    payer.check_clean()


def test_the_form_works_without_javascript(browser: Browser, server: Server) -> None:
    context = browser.new_context(viewport=VIEWPORT, java_script_enabled=False)
    try:
        page = context.new_page()
        record = server.checkout(amount=3000, currency="XAF", description="No script")
        page.goto(record["checkoutUrl"])
        page.select_option("#provider", "mtn_cm")
        page.fill("#phone", "670000001")
        with page.expect_response(lambda r: r.request.method == "POST", timeout=POST_MS) as posted:
            page.click("#pay")
        assert posted.value.status == 303
        page.wait_for_selector("#status")
        assert page.url == record["checkoutUrl"]
        # Without script the pending page reloads itself until the payment is final.
        page.wait_for_selector("#status[data-status='SUCCESS']", timeout=SETTLE_MS)
        assert page.locator("form").count() == 0
    finally:
        context.close()


def test_a_refused_number_keeps_the_form_and_says_what_is_wrong(payer: Payer) -> None:
    record = payer.server.checkout(amount=5000, currency="XAF")
    page = payer.page
    page.goto(record["checkoutUrl"])
    page.select_option("#provider", "mtn_cm")
    page.fill("#phone", "690000000")  # an Orange number
    with page.expect_response(lambda r: r.request.method == "POST", timeout=POST_MS) as posted:
        page.click("#pay")
    assert posted.value.status == 400
    page.wait_for_selector("#error")
    assert "Orange Money" in page.inner_text("#error")
    # What the payer typed is kept, and the field at fault is marked.
    assert page.input_value("#provider") == "mtn_cm"
    assert page.input_value("#phone") == "690000000"
    assert page.get_attribute("#phone", "aria-invalid") == "true"
    payer.shot("refused-number")
    payer.check_clean()
